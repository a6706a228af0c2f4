"""A benchmark: what lme needs to know about one, in one object (`Benchmark`), chosen by `dataset.benchmark`.

A benchmark declares how its file is fetched (`fetch`: an `lme data fetch` target), how its bytes become lme's
neutral `Question`s (`parse`: one sentence naming file, record and field on bad input), its question
categories (`categories`, in report order; `abstaining`: those whose right answer is that the history does
not say), who speaks (`speakers`: `user-assistant`, or `two-people` where a builder that needs "the user"
cannot tell), its default judge and its official measures (`official_measures`, names for reports). Everything
after loading (designs, retrievers, memories, rules, reports, prereg, MLflow, traces) reads `Question`s and
never asks which benchmark they came from, except to refuse what does not apply (`require_one_user`).

`dataset.benchmark` names a built-in (`longmemeval`, `locomo`) or an importable module holding a `BENCHMARK`
(a third benchmark is a module and a dataset YAML; docs/architecture.md, "Add a benchmark").
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lme.data.records import Question
from lme.util.errors import DataError, LmeError

Parse = Callable[[bytes, Path, Mapping[str, Any]], list[Question]]


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    parse: Parse  # the file's bytes (decompressed), its path, `dataset.options` -> the questions
    categories: tuple[str, ...]  # question types in report order
    abstaining: tuple[str, ...] = ()  # categories whose right answer is that the history does not say
    speakers: str = "user-assistant"  # | "two-people"
    default_judge: str = "longmemeval"
    official_measures: tuple[str, ...] = ()  # the benchmark's own headline measures, as reports name them
    fetch: str | None = None  # the `lme data fetch` target of its file
    options: Mapping[str, Any] = field(default_factory=dict)  # `dataset.options` it reads, with defaults
    streamable: bool = False  # `dataset.stream=true` reads it one question at a time
    # under a judge with LongMemEval's per-type templates (judge=offline, judge=longmemeval, ...): category -> the
    # template key it takes; a category not listed takes the abstention template if it abstains, else the generic one
    judge_templates: Mapping[str, str] = field(default_factory=dict)

    def load(self, data: bytes, path: Path, options: Mapping[str, Any] | None = None) -> list[Question]:
        unknown = sorted(set(options or {}) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise LmeError(f"dataset.options: {', '.join(unknown)} is not an option of benchmark {self.name} "
                           f"(known: {known}).")
        return self.parse(data, path, {**self.options, **(options or {})})


BUILT_IN: dict[str, str] = {"longmemeval": "lme.data.longmemeval", "locomo": "lme.data.locomo"}


def benchmark_named(name: str) -> Benchmark:
    """The benchmark `dataset.benchmark` names: a built-in, or a module path whose `BENCHMARK` is one."""
    module_name = BUILT_IN.get(name, name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LmeError(f"dataset.benchmark {name!r} is neither a built-in benchmark ({', '.join(BUILT_IN)}) nor an "
                       f"importable module ({exc}).") from None
    found = getattr(module, "BENCHMARK", None)
    if not isinstance(found, Benchmark):
        raise LmeError(f"dataset.benchmark {name!r}: module {module_name} has no BENCHMARK (an "
                       f"lme.data.benchmark.Benchmark).")
    return found


GENERIC_TEMPLATE = "ssu_ssa_multisession"  # LongMemEval's template for a plain fact (single-session, multi-session)


def judge_template_key(question: Question) -> str:
    """The LongMemEval template that judges a question of another benchmark (`Benchmark.judge_templates`)."""
    benchmark = benchmark_named(question.benchmark)
    if question.is_abstention:
        return "abstention"
    return benchmark.judge_templates.get(question.question_type, GENERIC_TEMPLATE)


def json_document(data: bytes, path: Path) -> Any:
    """A benchmark file's bytes as JSON, or one sentence naming the file."""
    from lme.data.validate import MAX_NESTING, nested_past

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}).") from None
    if nested_past(text):  # before the C parser, whose depth check follows the recursion limit
        raise DataError(f"{path}: JSON nested deeper than {MAX_NESTING} levels.")
    try:
        return json.loads(text)
    except RecursionError:
        raise DataError(f"{path}: JSON nested deeper than {MAX_NESTING} levels.") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).") from None


def require_one_user(question: Question, what: str) -> None:
    """Refuse, in one sentence, a step that needs "the user" on a benchmark of two people."""
    if question.benchmark != "longmemeval":
        benchmark = benchmark_named(question.benchmark)
        if benchmark.speakers == "two-people":
            raise LmeError(f"{what} reads the user's messages, and {benchmark.title} is a conversation between "
                           f"two people with no user (question {question.question_id}); set memory.speakers=both "
                           f"or memory.speakers=asked_about, or choose a memory that reads both speakers "
                           f"(memory=retrieved, memory=full_history).")
