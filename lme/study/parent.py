"""The multirun parent's own stages, once its jobs have finished (`lme.study.multirun.MultirunParent` calls
`after_multirun`): the per-step table of every design's runs (`steps.json`), and, for a design that sets
`arbiter`, the arbiter over its runs' disagreements.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from lme.answer.rules import FIRST_PASS_VIEW
from lme.data.dataset import load_dataset
from lme.config.design import Design
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text
from lme.study.job import open_gateway, open_ledger
from lme.study.resume import sweep_resume_command
from lme.models.cache import CallCache
from lme.tracking.runs import JobRun, RemoteRun, TrackingSettings, seed_order, study_call


def run_arbiter(
    design: Design, runs: list[list[dict[str, Any]]], seeds: list[str], index: int
) -> tuple[list[Any], dict[str, Any], dict[str, float], str]:
    """The arbiter stage (`lme.study.arbiter`) of `design` over its finished runs.

    Returns (outcomes, its per-step row, parent metrics, its instruction). The arbiter's calls are
    keyed by the lowest seed of the runs."""
    from lme.study.arbiter import arbiter_step, arbitrate, final_answers

    from lme.memory.model_built import attach_gateway

    spec = design.arbiter
    assert spec is not None
    view, instruction = spec.view, spec.instruction
    answers = final_answers(runs)
    _, questions = load_dataset(design.dataset)
    retriever = design.build_retriever()
    if spec.memory is not None:  # the stage's own memory (a model-built ledger)
        builder = spec.memory.build(retriever=retriever)
    else:
        builder = design.build_memory(retriever) if view == FIRST_PASS_VIEW else design.build_view(retriever)
    numeric = [int(seed) for seed in seeds if seed_order(seed)[0] == 0]
    seed = min(numeric) if numeric else design.seed
    cache = CallCache(design.cache_dir / "calls.sqlite")
    ledger = open_ledger(design, f"arbiter:{design.name}")  # every cross-run stage's calls: `lme cost` counts them
    gateway = open_gateway(design, cache, ledger)
    attach_gateway([builder], gateway)
    select = spec.select
    try:
        outcomes = asyncio.run(arbitrate(
            questions, answers, builder, design.reader.build(), instruction, design.judge.build(),
            gateway, seed, concurrency=design.concurrency,
            select=(lambda text: select.fires(text, None)) if select is not None else None,
            show_earlier=spec.earlier_answers,
        ))
    finally:
        gateway.close_background()
        cache.close()
        ledger.close()
    row = arbiter_step(runs, outcomes, index, view, spec.name)
    metrics = {f"{spec.name}.{key}": float(row[key]) for key in (
        "questions_chosen", "failed", "mean_accuracy", "majority_count", "majority_accuracy", "fixed", "broken",
        "reader_calls", "reader_cost_usd", "judge_cost_usd")}
    if spec.memory is not None:
        metrics[f"{spec.name}.memory_model_cost_usd"] = sum(o.memory_cost_usd for o in outcomes)
        metrics[f"{spec.name}.memory_model_calls_paid"] = float(sum(o.memory_call == "paid" for o in outcomes))
        metrics[f"{spec.name}.memory_model_calls_failed"] = float(sum(o.memory_call == "failed" for o in outcomes))
    return outcomes, row, metrics, instruction


def after_multirun(design: Design, parent: JobRun | RemoteRun, settings: TrackingSettings) -> bool:
    """The multirun parent's stages once its jobs have finished (called by `lme.study.multirun.MultirunParent`):

    - `steps.json`: per design, the per-step table of its runs (`lme.reporting.measures.step_table`);
    - when the design sets `arbiter` (+design=pipeline_arbiter), the arbiter over its runs, logged
      as `arbiter/outcomes.jsonl`, `instructions/arbiter.txt`, metrics `arbiter.*` and a last row
      of the design's steps.

    Returns False (after saying why on stderr) when a stage failed, or left questions without its answer
    because its memory could not be built (a rerun of the sweep runs the stage again)."""
    from lme.answer.steps import steps_table

    whole = True
    try:
        groups = study_call("children_rows", settings, parent.run_id)  # read by the helper, where MLflow is
        report: dict[str, Any] = {"designs": {}}
        for name, seeded in sorted(groups.items()):
            seeds = [seed for seed, _ in seeded]
            runs = [rows for _, rows in seeded]
            table = steps_table(runs)
            if design.arbiter is not None and name == design.name:
                if len(runs) < 2:
                    print(f"lme: warning: design {name}: the arbiter needs at least 2 runs, found {len(runs)}.",
                          file=sys.stderr, flush=True)
                else:
                    outcomes, row, metrics, instruction = run_arbiter(design, runs, seeds, len(table))
                    stage = design.arbiter.name
                    table.append(row)
                    parent.log_metrics(metrics)
                    parent.log_params({f"instruction.{stage}.sha256": sha256_text(instruction)})
                    parent.log_text(instruction + "\n", f"instructions/{stage}.txt")
                    parent.log_text("".join(o.to_json() + "\n" for o in outcomes), f"{stage}/outcomes.jsonl")
                    chosen = "disagreed" if design.arbiter.select is None else "disagreed and were selected"
                    print(f"{stage}, design {name}: {row['questions_chosen']} of {len(outcomes)} questions "
                          f"{chosen} across {len(runs)} runs, {row['failed'] // len(runs)} {stage} calls failed; "
                          f"answers fixed {row['fixed']}, broken {row['broken']}, mean of runs after "
                          f"{row['mean_accuracy']:.3f}; MLflow parent run {parent.run_id}", flush=True)
                    whole = stage_complete(stage, name, outcomes,
                                           sweep_resume_command(design.launch)) and whole
            report["designs"][name] = {"seeds": seeds, "n_runs": len(runs), "steps": table}
        parent.log_text(json.dumps(report, indent=2, sort_keys=True), "steps.json")
    except LmeError as exc:
        print(f"lme: error: after the multirun: {exc}", file=sys.stderr, flush=True)
        return False
    return whole


def stage_complete(stage: str, design: str, outcomes: list[Any], resume: str | None = None) -> bool:
    """Whether every question the stage chose got its read; else (a memory step failed) say which, on stderr,
    with the sweep's command that runs the stage again (`resume`, `lme.study.resume.sweep_resume_command`)."""
    failed = [o for o in outcomes if o.memory_error]
    if not failed:
        return True
    again = f"rerun the sweep's command with its sweep directory to run the stage again: {resume}" if resume else (
        "rerun the same sweep command with hydra.sweep.dir set to this sweep's directory to run the stage again")
    print(f"lme: error: {stage}, design {design}: {len(failed)} chosen question(s) have no {stage} answer, their "
          f"memory could not be built ({failed[0].question_id}: {failed[0].memory_error}); the runs' own answers are "
          f"kept for them; {again}.", file=sys.stderr, flush=True)
    return False
