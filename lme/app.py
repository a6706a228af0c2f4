"""Config -> components -> one job. The only module that reads the Hydra config."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import lme.resolvers  # noqa: F401  (registers ${lme_sample_path:})
from lme.answer.reader import Reader, compose_instruction
from lme.answer.rules import FIRST_PASS_VIEW, RuleStep, parse_rules
from lme.answer.steps import run_step_metrics
from lme.components import build, build_memory, build_retriever, build_view
from lme.data.load import load_questions
from lme.data.select import Selection, select_questions
from lme.errors import LmeError
from lme.hashing import file_sha256, sha256_text
from lme.judge import Judge, make_judge
from lme.measures import run_measures
from lme.models.cache import CallCache
from lme.errors import EXIT_BUDGET, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_SYSTEMIC
from lme.models.gateway import Gateway, SystemicFailure, preflight
from lme.models.ledger import (
    Budget,
    BudgetExhausted,
    Ledger,
)
from lme.prereg import check_run
from lme.resume import budget_stop_message, interrupted_message, systemic_stop_message
from lme.run import FIRST_PASS, Journal, Outcome, error_class, run_questions
from lme.tracking import OUTCOMES_ARTIFACT, PARENT_ENV, JobRun, TrackingSettings, note_stop, params_from_config



def _output_dir() -> Path:
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # not under Hydra (a test calling run_job directly)
        return Path("outputs")


def load_dataset(cfg: DictConfig) -> tuple[Path, list]:
    from lme.data.load import check_data_file

    path = Path(str(cfg.dataset.path)).expanduser()
    if not os.path.lexists(path):
        fetch = cfg.dataset.get("fetch")  # the `lme data fetch` target that provides this file, if any
        hint = "pass dataset.path=FILE"
        if fetch:
            hint = f"run `python -m lme data fetch {fetch}` or pass dataset.path=FILE"
        raise LmeError(f"{path}: dataset file not found (dataset {cfg.dataset.name}); {hint}.")
    check_data_file(path, f"dataset {cfg.dataset.name}")  # a directory, a FIFO, a symlink loop, no permission
    selection = Selection.from_config(
        **{key: cfg.get(key) for key in ("split", "question_ids", "question_types", "limit")},
        split_missing=cfg.get("split_missing", "error"),
    )
    if cfg.dataset.get("stream"):
        from lme.data.stream import scan_index

        # select on a cheap index pass (ids and types only); histories are read one at a time later
        selected = select_questions(scan_index(path), selection, path)
    else:
        selected = select_questions(load_questions_once(path), selection, path)
    if selected.skipped:
        print(f"lme: warning: {selected.skipped_note(path)}", file=sys.stderr, flush=True)
    if not selected.questions:
        raise LmeError(f"dataset {cfg.dataset.name}: {path} selects no question ({selection.describe()}).")
    if cfg.dataset.get("stream"):
        return path, StreamedQuestions(path, tuple(q.question_id for q in selected.questions))
    return path, list(selected.questions)


_LOADED: dict[tuple[str, int, int], list] = {}  # at most one file: the jobs of a multirun in this process share it
_LOADING = threading.Lock()  # one load at a time: a job waits for a prefetch of its file instead of loading it again


def load_questions_once(path: Path) -> list:
    """`load_questions(path)`, kept for this process's later jobs (a multirun's seeds) while the file is unchanged."""
    from lme.memory.reuse import file_identity

    key = tuple(file_identity(path))
    with _LOADING:
        if key not in _LOADED:
            _LOADED.clear()  # free the previous file before loading the next
            _LOADED[key] = load_questions(path)  # type: ignore[index]
        return _LOADED[key]  # type: ignore[index]


def sweeps_dataset(cfg: DictConfig) -> bool:
    """Whether the sweep's overrides give the jobs different data files (`dataset=s,oracle`, `dataset.path=a,b`)."""
    try:
        overrides = list(cfg.hydra.overrides.task)
    except Exception:  # noqa: BLE001 - not a Hydra config with overrides
        return False
    for override in overrides:
        key, _, value = str(override).partition("=")
        if key.lstrip("+~").startswith("dataset") and ("," in value or "(" in value):
            return True
    return False


def prefetch_dataset(cfg: DictConfig) -> threading.Thread | None:
    """Start loading `cfg`'s dataset file (all held, not streamed) in a background thread, for the jobs
    this process will run: the multirun parent's MLflow set-up runs meanwhile, and most of a load (xz
    decompression) runs beside it on another core. A load that fails is left to the job, which loads
    the file again and says what is wrong."""
    if cfg.dataset.get("stream") or sweeps_dataset(cfg):
        return None
    path = Path(str(cfg.dataset.path)).expanduser()
    if not path.is_file():
        return None

    def load() -> None:
        try:
            load_questions_once(path)
        except Exception:  # noqa: BLE001 - reported by the job's own load
            pass

    thread = threading.Thread(target=load, name="lme-prefetch", daemon=True)
    thread.start()
    return thread


class StreamedQuestions:
    """The selected questions of a large file (LongMemEval-M), parsed one at a time when iterated,
    in file order; `ids` and `len()` need no parsing."""

    def __init__(self, path: Path, ids: tuple[str, ...]) -> None:
        self.path = path
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        from lme.data.stream import iter_questions

        return iter_questions(self.path, self.ids)


def question_ids_of(questions) -> list[str]:
    """The selected ids, without parsing a streamed file."""
    return list(questions.ids) if isinstance(questions, StreamedQuestions) else [q.question_id for q in questions]


def known_views(cfg: DictConfig) -> list[str]:
    """The views a rule may name: the first-pass memory and the `view` group's view."""
    view = cfg.get("view")
    return [FIRST_PASS_VIEW, *([str(view.name)] if view is not None and view.get("name") else [])]


def compose_instructions(cfg: DictConfig) -> tuple[str, tuple[RuleStep, ...], dict[str, str]]:
    """(first-pass instruction, the rules in order with their instructions, {step name: instruction}).

    A step's instruction is `instructions.base` followed by its paragraphs (`instructions.first_pass`
    for the first pass, `rules.definitions.NAME.paragraphs` for a rule), joined by single spaces."""
    instructions = cfg.instructions
    base = str(instructions.base)
    paragraphs = OmegaConf.to_container(instructions.paragraphs, resolve=True) if instructions.get("paragraphs") else {}
    first_pass = compose_instruction(base, paragraphs or {}, instructions.get("first_pass") or [])
    rules_node = OmegaConf.to_container(cfg.rules, resolve=True) if cfg.get("rules") is not None else None
    rules = parse_rules(rules_node, paragraphs or {}, known_views(cfg))  # type: ignore[arg-type]
    texts = {FIRST_PASS: first_pass}
    steps = []
    for rule in rules:
        text = compose_instruction(base, paragraphs or {}, rule.paragraphs)
        texts.setdefault(rule.name, text)
        steps.append(RuleStep(rule, text))
    return first_pass, tuple(steps), texts


def build_views(cfg: DictConfig, retriever: Any, rules: tuple[RuleStep, ...]) -> dict[str, Any]:
    """The memory builder of every view a rule reads, other than the first-pass memory."""
    needed = {step.rule.view for step in rules} - {FIRST_PASS_VIEW}
    return {name: build_view(cfg, retriever) for name in needed}  # known_views allows only cfg.view


def reuse_memories(cfg: DictConfig, data_path: Path, builder: Any, views: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The builders wrapped so that this process's later jobs (a multirun's seeds) reuse their memories:
    a memory depends on the question, the memory's and the retriever's config, never on the seed
    (`lme.memory.reuse`)."""
    from lme.memory.reuse import ReusedMemory, file_identity, keep_only, memory_digest

    common = (OmegaConf.to_container(cfg.retriever, resolve=True), file_identity(data_path))

    def reused(node: Any, inner: Any) -> ReusedMemory:
        return ReusedMemory(inner, memory_digest(OmegaConf.to_container(node, resolve=True), *common))

    first = reused(cfg.memory, builder)
    wrapped = {name: reused(cfg.view, view) for name, view in views.items()}
    keep_only({first.digest, *(view.digest for view in wrapped.values())})
    return first, wrapped


def build_reader(cfg: DictConfig) -> Reader:
    return Reader(
        name=str(cfg.reader.name),
        model=build(cfg.reader.model, "reader.model", _convert_="all"),
        instruction_role=str(cfg.reader.instruction_role),
    )


def build_judge(cfg: DictConfig) -> Judge:
    return make_judge(
        name=str(cfg.judge.name),
        official=bool(cfg.judge.official),
        model=build(cfg.judge.model, "judge.model", _convert_="all"),
        templates_path=cfg.judge.get("templates_path"),
        templates=OmegaConf.to_container(cfg.judge.templates) if cfg.judge.get("templates") else None,
    )


def open_ledger(cfg: DictConfig, job: str) -> Ledger:
    """The study's spending ledger (`budget` config group), writing as `job`."""
    return Ledger(Path(str(cfg.budget.ledger_path)), study=str(cfg.budget.study), job=job)


def cost_metrics(outcomes: list[Outcome]) -> dict[str, float]:
    reader_calls = sum(o.reader.calls for o in outcomes)
    metrics = {
        "reader_calls": reader_calls,
        "reader_cached_calls": sum(o.reader.cached_calls for o in outcomes),
        "reader_failed_calls": sum(o.reader.failed_calls for o in outcomes),
        "reader_input_tokens": sum(o.reader.input_tokens for o in outcomes),
        "reader_output_tokens": sum(o.reader.output_tokens for o in outcomes),
        "reader_cached_input_tokens": sum(o.reader.cached_input_tokens for o in outcomes),
        "reader_cost_usd": sum(o.reader.cost_usd for o in outcomes),
        "reader_spent_usd": sum(o.reader.spent_usd for o in outcomes),
        "judge_calls": sum(o.judge.calls for o in outcomes),
        "judge_cached_calls": sum(o.judge.cached_calls for o in outcomes),
        "judge_failed_calls": sum(o.judge.failed_calls for o in outcomes),
        "judge_input_tokens": sum(o.judge.input_tokens for o in outcomes),
        "judge_output_tokens": sum(o.judge.output_tokens for o in outcomes),
        "judge_cached_input_tokens": sum(o.judge.cached_input_tokens for o in outcomes),
        "judge_cost_usd": sum(o.judge.cost_usd for o in outcomes),
        "judge_spent_usd": sum(o.judge.spent_usd for o in outcomes),
        "unpriced_calls": sum(o.reader.unpriced_calls + o.judge.unpriced_calls for o in outcomes),
        "missing_answers": sum(1 for o in outcomes if o.answer is None),
        "missing_verdicts": sum(1 for o in outcomes if o.answer is not None and o.judge_error is not None),
        "answered": sum(1 for o in outcomes if o.answer is not None),
        "mean_memory_bytes": sum(o.memory_bytes for o in outcomes) / max(1, len(outcomes)),
    }
    metrics["reader_mean_input_tokens"] = metrics["reader_input_tokens"] / max(1, reader_calls)
    metrics["reader_cost_per_answer_usd"] = metrics["reader_cost_usd"] / max(1, len(outcomes))
    for part, counts in failure_counts(outcomes).items():
        metrics.update({f"{part}_failed_calls.{name}": count for name, count in counts.items()})
    metrics["model_calls_made"] = sum(
        o.reader.calls - o.reader.cached_calls + o.judge.calls - o.judge.cached_calls for o in outcomes
    )
    return {key: float(value) for key, value in metrics.items()}


def _write_csv(outcomes: list[Outcome], path: Path) -> None:
    rows = [asdict(o) for o in outcomes]
    flat = [{k: v for k, v in row.items() if not isinstance(v, (dict, list))} | {
        f"{part}_{k}": v for part in ("reader", "judge") for k, v in row[part].items()
    } | {
        "rules_reread": " ".join(step["rule"] for step in row["steps"] if step["reread"]),
        "rereads_failed": sum(1 for step in row["steps"] if step["reread"] and step["failed"]),
    } for row in rows]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(flat[0]) if flat else ["question_id"])
        writer.writeheader()
        writer.writerows(flat)


def run_job(cfg: DictConfig) -> dict[str, float]:
    """Run one job of the composed config; returns its metrics. Progress (a bar on a terminal, a line every
    30 s otherwise) follows the config's `progress` key for everything the job does, embedding included."""
    from lme.progress import config_flag, enabled_as

    with enabled_as(config_flag(cfg.get("progress", True))):
        return _run_job(cfg)


def _run_job(cfg: DictConfig) -> dict[str, float]:
    from lme.config_check import validate_config
    from lme.progress import progress as progress_bar
    from lme.secrets import refuse_secrets

    container: Mapping[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    refuse_secrets(container, "the composed config")  # before any file or MLflow run is written
    validate_config(cfg)  # every value checked against its rule, in one sentence, before anything runs
    seed = int(cfg.seed)
    design = str(cfg.design_name)
    reader = build_reader(cfg)
    judge = build_judge(cfg)  # reads and verifies the judge templates
    preflight([reader.model, judge.model])  # every paid model's credentials, before the data is read
    data_path, questions = load_dataset(cfg)
    prereg_tags = check_run(cfg, data_path, questions)  # before any model call: refuses a run unlike cfg.prereg

    retriever = build_retriever(cfg)
    builder = build_memory(cfg, retriever)
    instruction, rules, instruction_texts = compose_instructions(cfg)
    views = build_views(cfg, retriever, rules)
    if not cfg.dataset.get("stream"):  # a streamed file is read one question at a time: nothing is kept
        builder, views = reuse_memories(cfg, data_path, builder, views)

    out_dir = _output_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(out_dir / OUTCOMES_ARTIFACT)
    cache = CallCache(Path(str(cfg.cache_dir)) / "calls.sqlite")
    ledger = open_ledger(cfg, str(cfg.budget.job or out_dir.resolve()))  # a resumed job keeps its name
    gateway = Gateway(cache, ledger=ledger, budget=Budget.from_config(cfg.budget),
                      calls_in_flight=cfg.get("calls_in_flight"))

    params = params_from_config(container)  # refuses a key-like value before any MLflow run exists
    settings = TrackingSettings(**container["tracking"])  # type: ignore[arg-type]
    dataset_name = str(cfg.dataset.name)
    tracker = None
    status, failure, stop = "FAILED", None, None
    try:
        if settings.enabled:
            parent = os.environ.get(PARENT_ENV)
            tracker = JobRun(
                settings,
                run_name=f"{design}-{dataset_name}-seed{seed}",
                tags={
                    "lme.role": "job",
                    "lme.design": design,
                    "lme.dataset": dataset_name,
                    "lme.seed": str(seed),
                    "lme.judge": judge.name,
                    "lme.judge_official": str(judge.official).lower(),
                    "lme.reader": reader.name,
                    **prereg_tags,
                },
                parent_id=parent,
            )
            params["dataset.sha256"] = file_sha256(data_path)
            params.update({f"instruction.{name}.sha256": sha256_text(text) for name, text in instruction_texts.items()})
            params["n_questions"] = str(len(questions))
            params.update({f"judge.template_sha256.{k}": v for k, v in judge.digests.items()})
            tracker.log_params(params)
            tracker.log_text(OmegaConf.to_yaml(container), "config.yaml")
            for name, text in instruction_texts.items():
                tracker.log_text(text + "\n", f"instructions/{name}.txt")
            tracker.log_text("".join(f"{qid}\n" for qid in question_ids_of(questions)), "question_ids.txt")

        bars = []  # the job's progress, started once the journal says how many questions are already done

        def on_resume(kept: int) -> None:
            bars.append(progress_bar(f"[{design} seed={seed}]", len(questions), "questions",
                                     initial=min(kept, len(questions))))

        def on_outcome(outcome: Outcome, done: int) -> None:
            bars[0].update()
            if cfg.get("verbose"):
                mark = "correct" if outcome.correct else "wrong"
                bars[0].write(f"[{design} seed={seed}] {done}/{len(questions)} {outcome.question_id}: {mark}")

        try:
            outcomes = asyncio.run(
                run_questions(
                    questions, builder, reader, instruction, judge, gateway, seed, journal,
                    concurrency=int(cfg.concurrency), on_outcome=on_outcome, on_resume=on_resume, rules=rules,
                    views=views,
                )
            )
        finally:
            for bar in bars:
                bar.close()
        types = {o.question_id: o.question_type for o in outcomes}
        correct = {o.question_id: o.correct for o in outcomes}
        abstention = {o.question_id for o in outcomes if o.abstention}
        metrics = run_measures(correct, types, abstention).as_metrics() | cost_metrics(outcomes)
        metrics |= run_step_metrics([asdict(o) for o in outcomes])
        _write_csv(outcomes, out_dir / "outcomes.csv")
        (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if tracker is not None:
            tracker.log_metrics(metrics)
            tracker.log_artifact(journal.path)
            tracker.log_artifact(out_dir / "outcomes.csv")
        failure = incomplete_note(metrics)
        status = "FAILED" if failure else "FINISHED"
    except BudgetExhausted as exc:  # a cap: what finished is journaled; say how to resume
        status, failure = "KILLED", str(exc)
        stop = (EXIT_BUDGET, budget_stop_message(exc, len(journal.read()), len(questions), out_dir))
    except SystemicFailure as exc:  # no retry can fix it: nothing more is sent
        failure = str(exc)
        stop = (EXIT_SYSTEMIC, systemic_stop_message(exc, len(journal.read()), len(questions), out_dir))
    except KeyboardInterrupt:
        status, failure = "KILLED", "interrupted (Ctrl-C)"
        stop = (EXIT_INTERRUPTED, interrupted_message(len(journal.read()), len(questions), out_dir))
    finally:
        if tracker is not None:
            tracker.finish(status, failure)
        cache.close()
        ledger.close()
    if stop is not None:
        print(stop[1], file=sys.stderr, flush=True)
        note_stop(status, failure or "stopped")  # a multirun parent ends with the job's reason
        raise SystemExit(stop[0])
    _print_summary(design, seed, judge.name, judge.official, metrics, out_dir, tracker.run_id if tracker else None)
    if failure:
        INCOMPLETE_JOBS.append(f"design {design}, seed {seed}: {failure}")
        print(f"lme: {failure}; rerun the same command with hydra.run.dir={out_dir} to ask for exactly those "
              f"(exit status {EXIT_INCOMPLETE}).", file=sys.stderr, flush=True)
    return metrics


INCOMPLETE_JOBS: list[str] = []  # jobs of this process that finished with missing answers or verdicts


def incomplete_note(metrics: Mapping[str, float]) -> str | None:
    """Why a finished job is incomplete (answers or verdicts missing), or None."""
    missing = int(metrics.get("missing_answers", 0))
    unjudged = int(metrics.get("missing_verdicts", 0))
    parts = []
    if missing:
        parts.append(f"{missing} answer{'s' if missing != 1 else ''} missing")
    if unjudged:
        parts.append(f"{unjudged} verdict{'s' if unjudged != 1 else ''} missing")
    return ", ".join(parts) or None


def failure_counts(outcomes: list[Outcome]) -> dict[str, Counter[str]]:
    """Failed reader and judge calls by error class, over every step."""
    counts: dict[str, Counter[str]] = {"reader": Counter(), "judge": Counter()}
    for outcome in outcomes:
        for step in outcome.steps:
            if step.failed and (step.reread or step.rule == FIRST_PASS):
                counts["reader"][error_class(step.error)] += 1
            if step.judge_error:
                counts["judge"][error_class(step.judge_error)] += 1
    return counts


def failures_line(metrics: Mapping[str, float]) -> str:
    """`3 reader calls and 1 judge call failed (TimeoutError); 2 answers missing` ('' when nothing failed);
    the error classes come from the metrics `reader_failed_calls.<class>` and `judge_failed_calls.<class>`."""
    reader, judge = int(metrics.get("reader_failed_calls", 0)), int(metrics.get("judge_failed_calls", 0))
    classes = {part: [key.split(".", 1)[1] for key, value in metrics.items()
                      if key.startswith(f"{part}_failed_calls.") and value] for part in ("reader", "judge")}
    parts = []
    if reader:
        parts.append(f"{reader} reader call{'s' if reader != 1 else ''}")
    if judge:
        parts.append(f"{judge} judge call{'s' if judge != 1 else ''}")
    text = ""
    if parts:
        names = sorted({name for part in classes.values() for name in part})
        text = " and ".join(parts) + " failed" + (f" ({', '.join(names)})" if names else "")
    missing = incomplete_note(metrics)
    if missing:
        text = f"{text}; {missing}" if text else missing
    return text


def _print_summary(design: str, seed: int, judge: str, official: bool, metrics: Mapping[str, float],
                   out_dir: Path, run_id: str | None) -> None:
    judge_note = "" if official else " (offline stand-in, not the LongMemEval judge)"
    failures = failures_line(metrics)
    lines = [
        f"design {design}, seed {seed}: accuracy {metrics['accuracy']:.3f} "
        f"({int(metrics['n_correct'])}/{int(metrics['n_questions'])})"
        + (f"; {failures}" if failures else "")
        + f"; task-averaged {metrics['task_averaged_accuracy']:.3f}; judge {judge}{judge_note}",
        f"  model calls made {int(metrics['model_calls_made'])}, reader cost ${metrics['reader_cost_usd']:.4f}, "
        f"judge cost ${metrics['judge_cost_usd']:.4f}; outcomes in {out_dir}"
        + (f"; MLflow run {run_id}" if run_id else ""),
    ]
    print("\n".join(lines), flush=True)


# -- the multirun parent's own stages --------------------------------------------------------------


def _children_rows(settings: TrackingSettings, parent_id: str) -> dict[str, list[tuple[str, list[dict[str, Any]]]]]:
    """Design -> [(seed, journal rows)] of the parent's finished jobs, in seed order."""
    from lme.tracking import client_for, experiment_id, read_outcome_rows

    client = client_for(settings)
    children = client.search_runs(
        [experiment_id(settings)], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=10_000
    )
    groups: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    for child in children:
        if child.info.status != "FINISHED" or child.data.tags.get("lme.role", "job") != "job":
            continue
        rows = read_outcome_rows(settings, child.info.run_id)
        if rows is not None:
            design = child.data.tags.get("lme.design", "default")
            groups.setdefault(design, []).append((child.data.tags.get("lme.seed", "?"), rows))
    for runs in groups.values():
        runs.sort(key=lambda run: _seed_order(run[0]))
    return groups


def _seed_order(seed: str) -> tuple[int, int, str]:
    """Numeric seeds in numeric order, then any other tag."""
    try:
        return (0, int(seed), seed)
    except ValueError:
        return (1, 0, seed)


def run_arbiter(
    cfg: DictConfig, runs: list[list[dict[str, Any]]], seeds: list[str], index: int
) -> tuple[list[Any], dict[str, Any], dict[str, float], str]:
    """The arbiter stage (`lme.answer.arbiter`) of design `cfg.design_name` over its finished runs.

    Returns (outcomes, its per-step row, parent metrics, its instruction). The arbiter's calls are
    keyed by the lowest seed of the runs."""
    from lme.answer.arbiter import arbiter_step, arbitrate, final_answers

    node = OmegaConf.to_container(cfg.arbiter, resolve=True) or {}
    view = str(node.get("view", FIRST_PASS_VIEW))  # type: ignore[union-attr]
    if view not in known_views(cfg):
        raise LmeError(f"arbiter.view: {view!r} is not a view (known: {', '.join(known_views(cfg))}).")
    paragraphs = cfg.instructions.get("paragraphs")
    texts = OmegaConf.to_container(paragraphs, resolve=True) if paragraphs else {}
    names = node.get("paragraphs") or []  # type: ignore[union-attr]
    instruction = compose_instruction(str(cfg.instructions.base), texts or {}, names)  # type: ignore[arg-type]
    answers = final_answers(runs)
    _, questions = load_dataset(cfg)
    retriever = build_retriever(cfg)
    builder = build_memory(cfg, retriever) if view == FIRST_PASS_VIEW else build_view(cfg, retriever)
    numeric = [int(seed) for seed in seeds if _seed_order(seed)[0] == 0]
    seed = min(numeric) if numeric else int(cfg.seed)
    cache = CallCache(Path(str(cfg.cache_dir)) / "calls.sqlite")
    ledger = open_ledger(cfg, f"arbiter:{cfg.design_name}")
    try:
        outcomes = asyncio.run(arbitrate(
            questions, answers, builder, build_reader(cfg), instruction, build_judge(cfg),
            Gateway(cache, ledger=ledger, budget=Budget.from_config(cfg.budget),
                    calls_in_flight=cfg.get("calls_in_flight")), seed,
            concurrency=int(cfg.concurrency),
        ))
    finally:
        cache.close()
        ledger.close()
    row = arbiter_step(runs, outcomes, index, view)
    metrics = {f"arbiter.{key}": float(row[key]) for key in (
        "questions_chosen", "failed", "mean_accuracy", "majority_count", "majority_accuracy", "fixed", "broken",
        "reader_calls", "reader_cost_usd", "judge_cost_usd")}
    return outcomes, row, metrics, instruction


def after_multirun(cfg: DictConfig, parent: JobRun, settings: TrackingSettings) -> bool:
    """The multirun parent's stages once its jobs have finished (called by `lme.multirun.MultirunParent`):

    - `steps.json`: per design, the per-step table of its runs (`lme.measures.step_table`);
    - when the design sets `arbiter` (+design=pipeline_arbiter), the arbiter over its runs, logged
      as `arbiter/outcomes.jsonl`, `instructions/arbiter.txt`, metrics `arbiter.*` and a last row
      of the design's steps.

    Returns False (after saying why on stderr) when a stage failed."""
    from lme.answer.steps import steps_table

    try:
        groups = _children_rows(settings, parent.run_id)
        report: dict[str, Any] = {"designs": {}}
        for design, seeded in sorted(groups.items()):
            seeds = [seed for seed, _ in seeded]
            runs = [rows for _, rows in seeded]
            table = steps_table(runs)
            if cfg.get("arbiter") is not None and design == str(cfg.design_name):
                if len(runs) < 2:
                    print(f"lme: warning: design {design}: the arbiter needs at least 2 runs, found {len(runs)}.",
                          file=sys.stderr, flush=True)
                else:
                    outcomes, row, metrics, instruction = run_arbiter(cfg, runs, seeds, len(table))
                    table.append(row)
                    parent.log_metrics(metrics)
                    parent.log_params({"instruction.arbiter.sha256": sha256_text(instruction)})
                    parent.log_text(instruction + "\n", "instructions/arbiter.txt")
                    parent.log_text("".join(o.to_json() + "\n" for o in outcomes), "arbiter/outcomes.jsonl")
                    print(f"arbiter, design {design}: {row['questions_chosen']} of {len(outcomes)} questions "
                          f"disagreed across {len(runs)} runs, {row['failed'] // len(runs)} arbiter calls failed; "
                          f"answers fixed {row['fixed']}, broken {row['broken']}, mean of runs after "
                          f"{row['mean_accuracy']:.3f}; MLflow parent run {parent.run_id}", flush=True)
            report["designs"][design] = {"seeds": seeds, "n_runs": len(runs), "steps": table}
        parent.log_text(json.dumps(report, indent=2, sort_keys=True), "steps.json")
    except LmeError as exc:
        print(f"lme: error: after the multirun: {exc}", file=sys.stderr, flush=True)
        return False
    return True
