"""LongMemEval's figures are those recorded before the benchmark layer: the parsed records, judge prompts, memories,
rule selections and retrieval measures, recomputed with this checkout's lme and compared exactly with
tests/data/longmemeval_figures.json.

The figures (digests, never the data's text) are computed by scripts/record_longmemeval_figures.py; the file was
written by that script run on the code before the move (its `recorded_from` commit). The bundled sample needs no
shared data; the mini file and S do (tests/shared_data.py). A difference names the dataset, the question id and the
figure. To see what changed, record the figures of the old commit in a worktree (the script's docstring says how)
and of this checkout, and compare the two files.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from shared_data import MINI, S_FILE, TEMPLATES, available, needs

CHECKOUT = Path(__file__).resolve().parents[1]
RECORDED = CHECKOUT / "tests" / "data" / "longmemeval_figures.json"
SCRIPT = CHECKOUT / "scripts" / "record_longmemeval_figures.py"
LONGMEMEVAL_JUDGE = "judge_prompt.longmemeval"  # a per-question figure that needs the templates file


def figures_script() -> ModuleType:
    """scripts/record_longmemeval_figures.py as a module (what computes every figure)."""
    name = "record_longmemeval_figures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def differences(before: Any, now: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Each place where `now` differs from `before`, named: `question 0a1b2c3d: memory.bm25: ...` for a
    question's figure, else the figure's path (`rules/pipeline/advice`)."""
    if isinstance(before, Mapping) and isinstance(now, Mapping):
        found = []
        for key in list(before) + [key for key in now if key not in before]:
            if key not in now:
                found.append(f"{where(path + (key,))}: recorded, no longer computed")
            elif key not in before:
                found.append(f"{where(path + (key,))}: computed now, not recorded")
            else:
                found += differences(before[key], now[key], path + (key,))
        return found
    if before != now:
        return [f"{where(path)}: recorded {shown(before)}, now {shown(now)}"]
    return []


def where(path: tuple[str, ...]) -> str:
    if len(path) >= 2 and path[0] == "questions":
        return f"question {path[1]}" + (f": figure {'/'.join(path[2:])}" if len(path) > 2 else "")
    return "figure " + "/".join(path)


def shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


def assert_unchanged(dataset: str, before: Mapping[str, Any], now: Mapping[str, Any]) -> None:
    assert now["file_sha256"] == before["file_sha256"], (
        f"{dataset}: the data file is not the one the figures were recorded over (SHA-256 {now['file_sha256']}, "
        f"recorded {before['file_sha256']})")
    found = differences(before, now)
    assert not found, (f"{dataset}: {len(found)} figures differ from those recorded before the move:\n"
                       + "\n".join(found[:40]) + ("\n..." if len(found) > 40 else ""))


def without_longmemeval_judge(figures: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded figures less those that need LongMemEval's templates file."""
    questions = {qid: {name: value for name, value in row.items() if name != LONGMEMEVAL_JUDGE}
                 for qid, row in figures["questions"].items()}
    return {**figures, "questions": questions}


def test_the_sample_figures_are_unchanged():
    """The bundled sample: every question's record, judge prompts, ranking, measures and memories, the rule
    selections and the mean measures (LongMemEval's judge prompts only where its templates file is)."""
    from lme.data.sample import SAMPLE_PATH

    before = recorded()["sample"]
    templates = TEMPLATES if available(TEMPLATES) else None
    if templates is None:
        before = without_longmemeval_judge(before)
    now = figures_script().per_question_figures(SAMPLE_PATH, templates)
    assert_unchanged("sample", before, now)
    assert now["n_questions"] == len(now["questions"]) == 42


@needs(MINI, TEMPLATES)
def test_the_mini_figures_are_unchanged():
    """The mini S file: the same figures as the sample's, per question."""
    now = figures_script().per_question_figures(MINI, TEMPLATES)
    assert_unchanged("mini", recorded()["mini"], now)
    assert now["n_questions"] == 16


@pytest.mark.slow
@needs(S_FILE, TEMPLATES)
def test_the_s_table_is_unchanged():
    """S (about a minute): the mean FTS5 measures at k = 1, 5, 10, each rule's count and ids, and digests over
    every question's record, judge prompts, ranking, measures and first-pass memory."""
    before = recorded()["s"]
    memories = before["memories"]["n_questions"]
    limit = None if memories == before["n_questions"] else memories
    now = figures_script().s_table(S_FILE, TEMPLATES, limit)
    assert_unchanged("s", before, now)


def test_a_changed_figure_is_named_by_question_and_figure():
    """A difference says which question and which figure (or which table entry) changed."""
    before = {"questions": {"q1": {"record": "a", "memory.bm25": "b"}}, "rules": {"pipeline": {"advice": ["q1"]}}}
    now = {"questions": {"q1": {"record": "a", "memory.bm25": "c"}}, "rules": {"pipeline": {"advice": []}}}
    assert differences(before, now) == [
        'question q1: figure memory.bm25: recorded "b", now "c"',
        'figure rules/pipeline/advice: recorded ["q1"], now []',
    ]
    assert differences(before, {"questions": {}, "rules": before["rules"]}) == [
        "question q1: recorded, no longer computed"]


def test_a_record_digest_reads_only_the_named_fields():
    """A field added to the records (with a default) changes no record digest: the digest reads the fields
    named in the script, not `dataclasses.asdict`."""
    from dataclasses import dataclass

    from lme.data.load import load_questions
    from lme.data.sample import SAMPLE_PATH

    script = figures_script()
    question = load_questions(SAMPLE_PATH)[0]

    @dataclass(frozen=True)
    class Wider:  # the question with one more field, read through the same names
        base: Any
        speaker: str = "someone"

        def __getattr__(self, name: str) -> Any:
            return getattr(self.base, name)

    assert script.digest(script.record_fields(Wider(question))) == script.digest(script.record_fields(question))
