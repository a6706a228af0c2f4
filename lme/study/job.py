"""One job: a design and a seed over the selected questions -> outcomes, journal, measures, MLflow run.

`run_job(design)` builds the design's components, checks the run against its preregistration record,
answers and judges every question (`lme.answer.run.run_questions`, journaled and resumable), writes
`outcomes.jsonl`, `outcomes.csv` and `metrics.json` in the job's directory, logs the run to MLflow and
prints one summary. A stop (a spending cap, a failure no retry can fix, Ctrl-C) keeps what finished and
prints the command that resumes it.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.answer.steps import run_step_metrics
from lme.data.dataset import load_dataset, loading_in_background, question_ids_of
from lme.config.design import Design, plain
from lme.util.errors import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_SYSTEMIC, LmeError
from lme.util.hashing import file_sha256_known, sha256_json
from lme.judge import JudgeLabel
from lme.reporting.measures import locomo_metrics, run_measures
from lme.reporting.system_measures import system_metrics
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, SystemicFailure, preflight
from lme.models.ledger import BudgetExhausted, Ledger
from lme.models.litellm_loader import import_litellm, warm_call_path
from lme.provenance.prereg import check_run
from lme.study.resume import (budget_stop_message, interrupted_message, job_resume_command, store_stop_message,
                        systemic_stop_message)
from lme.answer.run import FIRST_PASS, Journal, Outcome, error_class, outcome_row, run_questions
from lme.tracking.runs import (OUTCOMES_ARTIFACT, PARENT_ENV, DataInput, job_run_name, note_stop, open_run, run_stamp,
                          ui_hint)


def open_ledger(design: Design, job: str) -> Ledger:
    """The study's spending ledger (`budget` config group), writing as `job`."""
    return Ledger(design.ledger_path, study=design.study, job=job)


def open_gateway(design: Design, cache: CallCache, ledger: Ledger) -> Gateway:
    return Gateway(cache, ledger=ledger, budget=design.budget, calls_in_flight=design.calls_in_flight)


def reuse_memories(design: Design, data_path: Path, builder: Any, views: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The builders wrapped so that this process's later jobs (a multirun's seeds) reuse their memories:
    a memory depends on the question, the memory's and the retriever's config, never on the seed
    (`lme.memory.reuse`)."""
    from lme.memory.reuse import ReusedMemory, file_identity, keep_only, memory_digest

    common = (plain(design.retriever.node), file_identity(data_path))

    def reused(node: Any, inner: Any) -> ReusedMemory:
        return ReusedMemory(inner, memory_digest(plain(node), *common))

    first = reused(design.memory.node, builder)
    wrapped = {name: reused(design.view_component(name).node, view) for name, view in views.items()}  # each its own
    keep_only({first.digest, *(view.digest for view in wrapped.values())})
    return first, wrapped


def warm_model_calls(design: Any) -> None:
    """What the first model call would otherwise wait for, done while the data file loads (a study's start-up,
    in the process that runs its jobs): litellm imported, the models' tokenizers loading in a thread
    (`warm_tokenizers`) and litellm's first-call set-up done (`lme.models.litellm_loader.warm_call_path`)."""
    import_litellm()
    warm_tokenizers(design)
    warm_call_path()


def warm_tokenizers(design: Any) -> threading.Thread | None:
    """Load the reader's and judge's tokenizers in a background thread while the data file loads and MLflow sets up, for
    a design whose calls are counted (`lme.models.pricing.input_is_counted`, the gateway's rule): the first
    count loads one, about 0.3-0.5 s that would otherwise come before the first request (the first count for
    `gpt-5-mini`: 0.3 ms of CPU warmed against 500 ms cold, `python scripts/bench_tricks.py warm_tokenizers`,
    2026-12-07). Offline models count nothing; a failure is left to the count that needs it."""
    from lme.models.pricing import input_is_counted
    from lme.models.spec import OFFLINE_PROVIDER

    budget = getattr(design, "budget", None)
    capped = budget is not None and budget.caps_dollars
    models = []
    for part in (getattr(design, "reader", None), getattr(design, "judge", None)):
        node = getattr(getattr(part, "model", None), "node", None) or {}
        name = str(node.get("model") or "")
        counted = input_is_counted(capped, node.get("tokens_per_minute"))
        if counted and name and not name.startswith(OFFLINE_PROVIDER + "/") and name not in models:
            models.append(name)
    if not models:
        return None

    def warm() -> None:
        from lme.models.pricing import count_input_tokens

        for model in models:
            try:
                count_input_tokens(model, [{"role": "user", "content": "warm"}])
            except Exception:  # noqa: BLE001 - the job's own count says what is wrong
                pass

    thread = threading.Thread(target=warm, name="lme-warm-tokenizers", daemon=True)
    thread.start()
    return thread


def embedding_parts(builders: Sequence[Any]) -> list[Any]:
    """The semantic retrievers (`lme.retrieval.dense.semantic_parts`) that the memory builders rank with (a
    model-built memory's through its inner builder), each once."""
    from lme.retrieval.dense import semantic_parts

    found: dict[int, Any] = {}
    for builder in builders:
        node = builder
        while node is not None:
            retriever = getattr(node, "retriever", None)
            for part in semantic_parts(retriever) if retriever is not None else ():
                found.setdefault(id(part), part)
            node = getattr(node, "inner", None)
    return list(found.values())


_PREPARED: set[tuple[str, ...]] = set()  # (model, prompts, cache file, questions) embedded by this process


def prepare_embeddings(parts: Sequence[Any], questions: Sequence[Any], label: str) -> None:
    """Embed every turn and question text of `questions` with each semantic retriever before the first question,
    in one batched pass through its cache (`DenseRetriever.prepare`), with progress labelled by the job
    (`[hybrid seed=1] semantic: embedding turns with minilm-packaged 1,200/4,800 texts ...`: a bar on a
    terminal, a line every interval otherwise) instead of per question, unseen, under a questions bar at 0.
    The same texts in the same cache file are prepared once per process (a sweep's later seeds)."""
    if not questions:
        return
    ids = sha256_json(sorted(str(question.question_id) for question in questions))
    for part in parts:
        key = (part.model_id, part.document_prompt, part.query_prompt, str(part.cache.path), ids)
        if key in _PREPARED:
            continue
        part.prepare(questions, label=label, min_texts=1)
        if part.cache.path is not None:  # a cache in memory belongs to this job's retriever only
            _PREPARED.add(key)


def cost_metrics(outcomes: list[Outcome]) -> dict[str, float]:
    reader_calls = sum(o.reader.calls for o in outcomes)
    built = [o for o in outcomes if not (o.steps and o.steps[0].memory_error)]  # a first-pass memory was built
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
        "unpriced_calls": sum(o.reader.unpriced_calls + o.judge.unpriced_calls + o.memory.unpriced_calls
                              for o in outcomes),
        "missing_answers": sum(1 for o in outcomes if o.answer is None),
        "missing_verdicts": sum(1 for o in outcomes if o.answer is not None and o.judge_error is not None),
        "answered": sum(1 for o in outcomes if o.answer is not None),
        "mean_memory_bytes": sum(o.memory_bytes for o in built) / max(1, len(built)),
    }
    metrics["reader_mean_input_tokens"] = metrics["reader_input_tokens"] / max(1, reader_calls)
    metrics["reader_cost_per_answer_usd"] = metrics["reader_cost_usd"] / max(1, len(outcomes))
    for part, counts in failure_counts(outcomes).items():
        metrics.update({f"{part}_failed_calls.{name}": count for name, count in counts.items()})
    metrics["model_calls_made"] = sum(
        o.reader.calls - o.reader.cached_calls + o.judge.calls - o.judge.cached_calls
        + o.memory.calls - o.memory.cached_calls for o in outcomes
    )
    metrics |= memory_model_metrics(outcomes)
    return {key: float(value) for key, value in metrics.items()}


def memory_model_metrics(outcomes: list[Outcome]) -> dict[str, float]:
    """A model-built memory's calls over the questions (none: no metric): `memory_model_calls` and those
    `_paid`, `_cached` (a memory built by an earlier job of this process counts as cached) and `_failed`,
    tokens, `memory_model_cost_usd` (list price) and `memory_model_spent_usd` (paid by this job)."""
    stats = [o.memory for o in outcomes]
    if not any(s.calls for s in stats):
        return {}
    calls, cached, failed = (sum(getattr(s, name) for s in stats) for name in ("calls", "cached_calls", "failed_calls"))
    return {
        "memory_model_calls": float(calls),
        "memory_model_calls_paid": float(calls - cached - failed),
        "memory_model_calls_cached": float(cached),
        "memory_model_calls_failed": float(failed),
        "memory_model_input_tokens": float(sum(s.input_tokens for s in stats)),
        "memory_model_output_tokens": float(sum(s.output_tokens for s in stats)),
        "memory_model_cost_usd": sum(s.cost_usd for s in stats),
        "memory_model_spent_usd": sum(s.spent_usd for s in stats),
    }


OUTCOMES_TABLE = "tables/outcomes.json"  # the per-question table, viewable in MLflow's artifact view


def outcome_table(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """One row per question: id, type, answer, verdict, the re-reads taken, tokens and dollars (`cost_usd`: reader,
    judge and a model-built memory's calls, `memory_cost_usd` the last), and a failed memory step."""
    return [{
        "question_id": o.question_id,
        "question_type": o.question_type,
        "answer": o.answer,
        "verdict": None if o.verdict == "missing" else o.verdict,
        "rereads": " ".join(step.rule for step in o.steps if step.reread),
        "reader_input_tokens": o.reader.input_tokens,
        "reader_output_tokens": o.reader.output_tokens,
        "judge_input_tokens": o.judge.input_tokens,
        "cost_usd": round(o.reader.cost_usd + o.judge.cost_usd + o.memory.cost_usd, 8),
        "memory_cost_usd": round(o.memory.cost_usd, 8),
        "memory_bytes": o.memory_bytes,
        "memory_error": o.memory_error,
        **({"category": o.category, "locomo_f1": o.locomo_f1} if o.category else {}),
        **({"ingested_now": o.system.ingested_now, "ingest_s": o.system.ingest_s,
            "ingest_cost_usd": round(o.system.ingest_cost_usd, 8), "search_latency_ms": o.system.search_latency_ms}
           if o.system is not None else {}),
    } for o in outcomes]


def write_csv(outcomes: list[Outcome], path: Path, rows: list[dict[str, Any]] | None = None) -> None:
    """The outcomes as one flat CSV row each; `rows`: their `outcome_row`s, when the caller has them already. A
    memory system's figures are `system_<name>` columns, on every row when any row has them (blank where the
    memory failed)."""
    rows = [outcome_row(o) for o in outcomes] if rows is None else rows
    system_keys = next((list(row["system"]) for row in rows if row.get("system")), [])
    flat = [{k: v for k, v in row.items() if not isinstance(v, (dict, list))} | {
        f"{part}_{k}": v for part in ("reader", "judge", "memory") for k, v in row[part].items()
    } | {
        "rules_reread": " ".join(step["rule"] for step in row["steps"] if step["reread"]),
        "rereads_failed": sum(1 for step in row["steps"] if step["reread"] and step["failed"]),
    } | {f"system_{k}": (row.get("system") or {}).get(k) for k in system_keys} for row in rows]
    import io

    from lme.util.files import write_bytes_atomic

    handle = io.StringIO(newline="")
    writer = csv.DictWriter(handle, fieldnames=list(flat[0]) if flat else ["question_id"])
    writer.writeheader()
    writer.writerows(flat)
    # whole or not at all (a full disk: one sentence); a lone surrogate in a reply becomes U+FFFD here only
    write_bytes_atomic(path, handle.getvalue().encode("utf-8", "replace"))


def run_job(design: Design) -> dict[str, float]:
    """Run one job of the design; returns its metrics. Progress (a bar on a terminal, a line every 30 s
    otherwise) follows the design's `progress` for everything the job does, embedding included."""
    from lme.util.progress import config_flag, enabled_as

    with enabled_as(config_flag(design.progress)):
        return _run_job(design)


def _run_job(design: Design) -> dict[str, float]:
    """The job's steps: build and load, check the run against its record, open its stores, answer every question
    under its MLflow run, close what it opened, then stop with the resume command or print the summary."""
    reader = design.reader.build()
    judge = design.judge.build()  # reads and verifies the judge templates
    _start_up(design, reader, judge)
    data_path, questions = load_dataset(design.dataset)
    prereg_tags = check_run(design, data_path, questions)  # before any model call: refuses a run unlike its record
    parts = _build_parts(design, reader, judge, data_path)
    journal = _open_journal(design.output_dir)
    cache, ledger, gateway = _open_stores(design, parts)
    params = design.params()  # refuses a key-like value before any MLflow run exists
    tracker = traces = None  # traces: one MLflow trace per question (lme.tracking.traces), unless tracking.traces=off
    status, failure, stop = "FAILED", None, None
    try:
        if design.tracking.enabled:
            tracker = _open_tracker(design, parts, prereg_tags)
            _log_inputs(tracker, design, parts, params, data_path, questions)
            traces = _open_traces(design, parts, tracker, params["dataset.sha256"])
        _embed_first(design, parts, questions, journal)
        outcomes = _answer_questions(design, parts, questions, journal, gateway, traces)
        metrics = _write_results(outcomes, design.output_dir, journal, tracker)
        failure = incomplete_note(metrics)
        status = "FAILED" if failure else "FINISHED"
    except (BudgetExhausted, SystemicFailure, KeyboardInterrupt, LmeError) as exc:
        status, failure = _stopped_status(exc)
        stop = _stop(exc, journal, len(questions), design)
    finally:
        _close_job(traces, tracker, status, failure, gateway, cache, ledger)
    if stop is not None:
        _exit_stopped(stop, status, failure)
    _report_job(design, parts, metrics, tracker, failure)
    return metrics


@dataclass(frozen=True)
class _Parts:
    """What the job's questions go through: the reader, the judge, the retriever, the memory builders (the first
    pass's and the rules' views) and the semantic retrievers to embed with before the first question."""
    reader: Any
    judge: Any
    retriever: Any
    builder: Any
    views: dict[str, Any]
    to_embed: list[Any]


def _start_up(design: Design, reader: Any, judge: Any) -> None:
    """Check the models' credentials and warm the call path while the data file loads; start the MLflow helper."""
    # A process that has not loaded the data file yet (a single run; a multirun's parent started it already)
    # loads it in a background thread, its decompression on another core, while litellm imports here.
    with loading_in_background(design.dataset) as prefetching:  # parsed after litellm's import, not beside it
        preflight([reader.model, judge.model])  # every paid model's credentials, before the questions are used
        if prefetching is not None:
            warm_model_calls(design)  # here, not on the event loop at the first call
    if prefetching is not None and design.tracking.enabled:  # the helper holding MLflow, started beside the load
        from lme.tracking.traces import start_helper

        start_helper(design.tracking)


def _build_parts(design: Design, reader: Any, judge: Any, data_path: Path) -> _Parts:
    """Build the retriever and the memory builders; outside a streamed run, wrap them to reuse their memories."""
    retriever = design.build_retriever()
    builder = design.build_memory(retriever)
    views = design.build_views(retriever)
    to_embed = embedding_parts([builder, *views.values()])  # embedded before the questions (`prepare_embeddings`)
    if not design.dataset.stream:  # a streamed file is read one question at a time: nothing is kept
        builder, views = reuse_memories(design, data_path, builder, views)
    return _Parts(reader, judge, retriever, builder, views, to_embed)


def _open_journal(out_dir: Path) -> Journal:
    """The job's folder and its journal, refused (one sentence) if it cannot be resumed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(out_dir / OUTCOMES_ARTIFACT)
    journal.read()  # a journal that cannot be resumed is refused (one sentence) before any run or call starts
    return journal


def _open_stores(design: Design, parts: _Parts) -> tuple[CallCache, Ledger, Gateway]:
    """The call cache, the ledger and the gateway, which the retriever's and memories' model calls go through too."""
    cache = CallCache(design.cache_dir / "calls.sqlite")
    ledger = open_ledger(design, design.job_name or str(design.output_dir.resolve()))  # a resumed job keeps its name
    gateway = open_gateway(design, cache, ledger)
    from lme.retrieval.dense import attach_gateway

    attach_gateway(parts.retriever, gateway)  # embedding API calls: this job's call cache, ledger and caps
    from lme.memory.model_built import attach_gateway as attach_memory_gateway

    attach_memory_gateway([parts.builder, *parts.views.values()], gateway)  # a model-built memory's calls: the same
    from lme.memory.systems.base import attach_gateway as attach_system_gateway

    attach_system_gateway([parts.builder, *parts.views.values()], gateway)  # a memory system's model calls: the same
    return cache, ledger, gateway


def _open_tracker(design: Design, parts: _Parts, prereg_tags: Mapping[str, str]) -> Any:
    """The job's MLflow run, named and tagged, under the sweep's parent run when there is one."""
    name, seed, dataset_name, judge = design.name, design.seed, design.dataset.name, parts.judge
    out_dir = design.output_dir
    parent = os.environ.get(PARENT_ENV)
    return open_run(  # held by the helper (lme.tracking.helper): this process never imports MLflow
        design.tracking,  # named with its outputs' folder (a sweep's: the sweep's), telling two sweeps apart
        run_name=job_run_name(name, dataset_name, seed, run_stamp(out_dir.parent if parent else out_dir)),
        tags={
            "lme.role": "job",
            "lme.design": name,
            "lme.dataset": dataset_name,
            "lme.seed": str(seed),
            "lme.judge": judge.name,
            "lme.judge_official": str(judge.official).lower(),  # LongMemEval's templates (judge.official)
            "lme.judge_description": judge.label.text,  # the LongMemEval judge only on its protocol's model
            "lme.reader": parts.reader.name,
            **({"mlflow.note.content": design.description} if design.description else {}),
            **prereg_tags,
        },
        parent_id=parent,
    )


def _log_inputs(tracker: Any, design: Design, parts: _Parts, params: dict[str, str], data_path: Path,
                questions: Sequence[Any]) -> None:
    """Log the run's params (adding the data file's, instructions' and judge templates' digests to `params`), its
    config, instructions, question ids and dataset."""
    name, judge = design.name, parts.judge
    params["dataset.sha256"] = file_sha256_known(data_path)  # once per process and file
    params.update({f"instruction.{step}.sha256": digest for step, digest in design.instructions.sha256s().items()})
    params["n_questions"] = str(len(questions))
    params.update({f"judge.template_sha256.{k}": v for k, v in judge.digests.items()})
    tracker.log_params(params)
    tracker.log_text(design.config_yaml, "config.yaml")
    for step, text in design.instructions.texts.items():
        tracker.log_text(text + "\n", f"instructions/{step}.txt")
    tracker.register_instructions(name, design.instructions.texts)  # MLflow's Prompt Registry, not waited for
    ids = question_ids_of(questions)
    tracker.log_text("".join(f"{qid}\n" for qid in ids), "question_ids.txt")
    tracker.log_dataset(DataInput(design.dataset.name, data_path, params["dataset.sha256"], len(ids), sha256_json(ids)))


def _open_traces(design: Design, parts: _Parts, tracker: Any, dataset_sha256: str) -> Any:
    """The writer of one MLflow trace per question under the job's run, or None with `tracking.traces=off`."""
    if design.tracking.traces == "off":
        return None
    from lme.tracking.traces import TraceWriter

    return TraceWriter(design.tracking, tracker.run_id, judge=parts.judge, cache_dir=design.cache_dir, tags={
        "lme.design": design.name, "lme.seed": str(design.seed), "lme.dataset_sha256": dataset_sha256},
        experiment=tracker.experiment_id)


def _embed_first(design: Design, parts: _Parts, questions: Sequence[Any], journal: Journal) -> None:
    """Embed the questions not yet done, with their own progress, before the questions' bar starts at 0/N."""
    if parts.to_embed and not design.dataset.stream:  # with its progress, not under "0/N questions"
        done = {outcome.question_id for outcome in journal.read() if outcome.complete}
        prepare_embeddings(parts.to_embed, [q for q in questions if q.question_id not in done],
                           f"[{design.name} seed={design.seed}]")


def _answer_questions(design: Design, parts: _Parts, questions: Sequence[Any], journal: Journal, gateway: Gateway,
                      traces: Any) -> list[Outcome]:
    """Answer and judge every question not yet journaled, with the job's progress bar; their outcomes."""
    from lme.util.progress import progress as progress_bar

    name, seed = design.name, design.seed
    bars = []  # the job's progress, started once the journal says how many questions are already done

    def on_resume(kept: int) -> None:
        bars.append(progress_bar(f"[{name} seed={seed}]", len(questions), "questions",
                                 initial=min(kept, len(questions))))

    def on_outcome(outcome: Outcome, done: int) -> None:
        bars[0].update()
        if design.verbose:
            mark = "correct" if outcome.correct else "wrong"
            bars[0].write(f"[{name} seed={seed}] {done}/{len(questions)} {outcome.question_id}: {mark}")

    try:
        return asyncio.run(
            run_questions(
                questions, parts.builder, parts.reader, design.instructions.first_pass, parts.judge, gateway, seed,
                journal, concurrency=design.concurrency, on_outcome=on_outcome, on_resume=on_resume,
                rules=design.instructions.rules, views=parts.views,
                on_record=traces.write if traces is not None else None, routes=design.instructions.routes,
            )
        )
    finally:
        for bar in bars:
            bar.close()


def _write_results(outcomes: list[Outcome], out_dir: Path, journal: Journal, tracker: Any) -> dict[str, float]:
    """The job's metrics, written with the outcomes' CSV to its folder and logged to its run; returns them."""
    types = {o.question_id: o.question_type for o in outcomes}
    correct = {o.question_id: o.correct for o in outcomes}
    abstention = {o.question_id for o in outcomes if o.abstention}
    metrics = run_measures(correct, types, abstention).as_metrics() | cost_metrics(outcomes)
    rows = [outcome_row(o) for o in outcomes]  # once: the step metrics, LoCoMo's measures and the CSV read them
    metrics |= locomo_metrics(rows)  # a LoCoMo job's F1 and J (nothing for LongMemEval's questions)
    metrics |= system_metrics(rows)  # a memory system's ingestion (once per history) and search (nothing otherwise)
    metrics |= run_step_metrics(rows)
    write_csv(outcomes, out_dir / "outcomes.csv", rows)
    from lme.util.files import write_text_atomic

    write_text_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    if tracker is not None:
        tracker.log_metrics(metrics)
        tracker.log_artifact(journal.path)
        tracker.log_artifact(out_dir / "outcomes.csv")
        tracker.log_table(outcome_table(outcomes), OUTCOMES_TABLE)
    return metrics


def _stopped_status(exc: BaseException) -> tuple[str, str]:
    """The run's status and reason for a stop: a cap or Ctrl-C is KILLED, a systemic or store failure FAILED."""
    if isinstance(exc, BudgetExhausted):  # a cap: what finished is journaled; say how to resume
        return "KILLED", str(exc)
    if isinstance(exc, SystemicFailure):  # no retry can fix it: nothing more is sent
        return "FAILED", str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "KILLED", "interrupted (Ctrl-C)"
    return "FAILED", str(exc)  # a file the job keeps failed as it ran (a full disk, a store moved or locked)


def _stop(exc: BaseException, journal: Journal, n_questions: int, design: Design) -> tuple[int, str]:
    """The exit status and the message (what finished, how to resume) for a job stopped by `exc`."""
    out_dir, launch = design.output_dir, design.launch
    if isinstance(exc, BudgetExhausted):
        return EXIT_BUDGET, budget_stop_message(exc, len(journal.read()), n_questions, out_dir, launch)
    if isinstance(exc, SystemicFailure):
        return EXIT_SYSTEMIC, systemic_stop_message(exc, len(journal.read()), n_questions, out_dir, launch)
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, interrupted_message(len(journal.read()), n_questions, out_dir, launch)
    assert isinstance(exc, LmeError)
    try:
        journaled: int | None = len(journal.read())
    except LmeError:  # the journal itself is the file that failed
        journaled = None
    return EXIT_BAD_INPUT, store_stop_message(exc, journaled, n_questions, out_dir, launch)


def _close_job(traces: Any, tracker: Any, status: str, failure: str | None, gateway: Gateway, cache: CallCache,
               ledger: Ledger) -> None:
    """Close the traces (logging what they cost), finish the run with its status, close the gateway and stores."""
    if traces is not None:
        traces.close()  # the questions answered so far keep their traces, whatever stopped the job
        if tracker is not None and traces.written:  # what tracing cost, on the helper's core
            tracker.log_metrics({"traces_written": traces.written,
                                 "trace_cpu_ms_per_question": round(1000 * traces.cpu_s / traces.written, 2)})
    if tracker is not None:
        tracker.finish(status, failure)
    gateway.close_background()  # the event loop of embedding API calls, if the retriever started one
    cache.close()
    ledger.close()


def _exit_stopped(stop: tuple[int, str], status: str, failure: str | None) -> None:
    """Print the stop's message and leave with its exit status (a multirun parent ends with the job's reason)."""
    print(stop[1], file=sys.stderr, flush=True)
    note_stop(status, failure or "stopped")  # a multirun parent ends with the job's reason
    raise SystemExit(stop[0])


def _report_job(design: Design, parts: _Parts, metrics: dict[str, float], tracker: Any, failure: str | None) -> None:
    """Print the job's summary, where MLflow shows it and, for an incomplete job, the command that resumes it."""
    name, seed, out_dir = design.name, design.seed, design.output_dir
    judge = parts.judge
    print_summary(name, seed, judge.name, judge.label, metrics, out_dir, tracker.run_id if tracker else None,
                  stand_ins=offline_stand_ins(parts.reader.model, judge.model))
    if tracker is not None and not os.environ.get(PARENT_ENV):  # a sweep's parent prints it once, at the end
        print(f"MLflow: {ui_hint(design.tracking, tracker.experiment_id)} (design, dataset, seed, accuracy per run)",
              flush=True)
    if failure:
        INCOMPLETE_JOBS.append(f"design {name}, seed {seed}: {failure}")
        print(f"lme: {failure} (exit status {EXIT_INCOMPLETE}); to ask for exactly those, rerun the same command in "
              "the same folder: " + job_resume_command(out_dir, design.launch), file=sys.stderr, flush=True)


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
    """Failed reader, judge and memory-step calls by error class, over every step."""
    counts: dict[str, Counter[str]] = {"reader": Counter(), "judge": Counter(), "memory": Counter()}
    for outcome in outcomes:
        for step in outcome.steps:
            if step.memory_error:  # its memory failed: no reader call was made
                counts["memory"][error_class(step.memory_error)] += 1
            elif step.failed and (step.reread or step.rule == FIRST_PASS):
                counts["reader"][error_class(step.error)] += 1
            if step.judge_error:
                counts["judge"][error_class(step.judge_error)] += 1
    return counts


def failures_line(metrics: Mapping[str, float]) -> str:
    """`3 reader calls and 1 judge call failed (TimeoutError); 2 answers missing` ('' when nothing failed);
    the error classes come from the metrics `reader_failed_calls.<class>`, `judge_failed_calls.<class>` and
    `memory_failed_calls.<class>` (a model-built memory's calls: `memory_model_calls_failed`)."""
    failed = {"reader": int(metrics.get("reader_failed_calls", 0)), "judge": int(metrics.get("judge_failed_calls", 0)),
              "memory-model": int(metrics.get("memory_model_calls_failed", 0))}
    classes = {part: [key.split(".", 1)[1] for key, value in metrics.items()
                      if key.startswith(f"{part}_failed_calls.") and value] for part in ("reader", "judge", "memory")}
    parts = [f"{count} {part} call{'s' if count != 1 else ''}" for part, count in failed.items() if count]
    text = ""
    if parts:
        names = sorted({name for part in classes.values() for name in part})
        text = " and ".join(parts) + " failed" + (f" ({', '.join(names)})" if names else "")
    missing = incomplete_note(metrics)
    if missing:
        text = f"{text}; {missing}" if text else missing
    return text


def offline_stand_ins(*specs: Any) -> list[str]:
    """The offline stand-ins (`lme-offline/...`) among the models of `specs` (`ModelSpec`s), in order."""
    return list(dict.fromkeys(spec.model for spec in specs if getattr(spec, "is_offline", False)))


def print_summary(design: str, seed: int, judge: str, label: JudgeLabel, metrics: Mapping[str, float],
                   out_dir: Path, run_id: str | None, stand_ins: Sequence[str] = ()) -> None:
    """The job's lines on stdout: accuracy and failures, calls and cost, where the outcomes are, and which judge
    (`label`: nothing added for the LongMemEval judge, its description for any other);
    with `stand_ins` (the offline models that answered or judged), once per process, that its scores say nothing
    about the design."""
    judge_note = "" if label.kind == "longmemeval" else f" ({label.text})"
    failures = failures_line(metrics)
    lines = [
        f"design {design}, seed {seed}: accuracy {metrics['accuracy']:.3f} "
        f"({int(metrics['n_correct'])}/{int(metrics['n_questions'])})"
        + (f"; {failures}" if failures else "")
        + f"; task-averaged {metrics['task_averaged_accuracy']:.3f}; judge {judge}{judge_note}"
        + locomo_summary(metrics),
        f"  model calls made {int(metrics['model_calls_made'])}, reader cost ${metrics['reader_cost_usd']:.4f}, "
        f"judge cost ${metrics['judge_cost_usd']:.4f}"
        + (f", memory-model cost ${metrics['memory_model_cost_usd']:.4f}" if "memory_model_cost_usd" in metrics else "")
        + f"; outcomes in {out_dir}"
        + (f"; MLflow run {run_id}" if run_id else ""),
    ]
    if stand_ins and tuple(stand_ins) not in _STAND_INS_NOTED:  # once per process: a sweep's jobs say it once
        from lme.models.offline import stand_ins_note

        _STAND_INS_NOTED.add(tuple(stand_ins))
        lines.append(f"  {stand_ins_note(stand_ins)}.")
    if "system.histories_ingested" in metrics:
        lines.insert(2, f"  {system_summary_line(metrics)}")
    print("\n".join(lines), flush=True)


def system_summary_line(metrics: Mapping[str, float]) -> str:
    """A memory system's line of the job's summary: `memory system: 5 histories ingested (12.3 s, 40 model calls,
    $0.0123; system.ingest_*), 0 reused; search p50 3.1 ms, p95 8.2 ms (system.search_latency_ms.*)`."""
    ingested, reused = int(metrics["system.histories_ingested"]), int(metrics["system.histories_reused"])
    reported = metrics.get("system.ingest_reported_cost_usd")
    return (f"memory system: {ingested} histor{'y' if ingested == 1 else 'ies'} ingested "
            f"({metrics['system.ingest_s']:.1f} s, {int(metrics['system.ingest_calls'])} model calls, "
            f"${metrics['system.ingest_cost_usd']:.4f}"
            + (f", ${reported:.4f} reported by the system" if reported is not None else "")
            + f"; system.ingest_*), {reused} already ingested (system.histories_reused); search "
            f"p50 {metrics['system.search_latency_ms.p50']:.1f} ms, "
            f"p95 {metrics['system.search_latency_ms.p95']:.1f} ms (system.search_latency_ms.*)")


def locomo_summary(metrics: Mapping[str, float]) -> str:
    """A LoCoMo job's measures for its summary line ('' without them): `; LoCoMo F1 0.412 (locomo.f1), 0.380
    without adversarial (locomo.f1_without_adversarial); J without adversarial 0.650 (locomo.j_without_adversarial)`."""
    if "locomo.f1" not in metrics:
        return ""
    text = f"; LoCoMo F1 {metrics['locomo.f1']:.3f} (locomo.f1)"
    if "locomo.f1_without_adversarial" in metrics:
        text += (f", {metrics['locomo.f1_without_adversarial']:.3f} without adversarial "
                 "(locomo.f1_without_adversarial)")
    if "locomo.j_without_adversarial" in metrics:
        text += f"; J without adversarial {metrics['locomo.j_without_adversarial']:.3f} (locomo.j_without_adversarial)"
    return text


_STAND_INS_NOTED: set[tuple[str, ...]] = set()  # the stand-ins whose note this process has printed
