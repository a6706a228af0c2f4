"""Config -> components -> one job. The only module that reads the Hydra config."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import lme.resolvers  # noqa: F401  (registers ${lme_sample_path:})
from lme.answer.reader import Reader, compose_instruction
from lme.components import build, build_memory, build_retriever
from lme.data.load import load_questions
from lme.data.select import Selection, select_questions
from lme.errors import LmeError
from lme.judge import make_judge, sha256_text
from lme.measures import run_measures
from lme.models.cache import CallCache
from lme.models.gateway import Gateway
from lme.run import Journal, Outcome, run_questions
from lme.tracking import OUTCOMES_ARTIFACT, PARENT_ENV, JobRun, TrackingSettings, params_from_config



def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _output_dir() -> Path:
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # not under Hydra (a test calling run_job directly)
        return Path("outputs")


def load_dataset(cfg: DictConfig) -> tuple[Path, list]:
    path = Path(str(cfg.dataset.path)).expanduser()
    if not path.exists():
        fetch = cfg.dataset.get("fetch")  # the `lme data fetch` target that provides this file, if any
        hint = "pass dataset.path=FILE"
        if fetch:
            hint = f"run `python -m lme data fetch {fetch}` or pass dataset.path=FILE"
        raise LmeError(f"{path}: dataset file not found (dataset {cfg.dataset.name}); {hint}.")
    selection = Selection.from_config(
        **{key: cfg.get(key) for key in ("split", "question_ids", "question_types", "limit")},
        split_missing=cfg.get("split_missing", "error"),
    )
    selected = select_questions(load_questions(path), selection, path)
    if selected.skipped:
        print(f"lme: warning: {selected.skipped_note(path)}", file=sys.stderr, flush=True)
    if not selected.questions:
        raise LmeError(f"dataset {cfg.dataset.name}: {path} selects no question ({selection.describe()}).")
    return path, list(selected.questions)


def cost_metrics(outcomes: list[Outcome]) -> dict[str, float]:
    reader_calls = sum(o.reader.calls for o in outcomes)
    metrics = {
        "reader_calls": reader_calls,
        "reader_cached_calls": sum(o.reader.cached_calls for o in outcomes),
        "reader_failed_calls": sum(o.reader.failed_calls for o in outcomes),
        "reader_input_tokens": sum(o.reader.input_tokens for o in outcomes),
        "reader_output_tokens": sum(o.reader.output_tokens for o in outcomes),
        "reader_cost_usd": sum(o.reader.cost_usd for o in outcomes),
        "reader_spent_usd": sum(o.reader.spent_usd for o in outcomes),
        "judge_calls": sum(o.judge.calls for o in outcomes),
        "judge_cached_calls": sum(o.judge.cached_calls for o in outcomes),
        "judge_failed_calls": sum(o.judge.failed_calls for o in outcomes),
        "judge_input_tokens": sum(o.judge.input_tokens for o in outcomes),
        "judge_output_tokens": sum(o.judge.output_tokens for o in outcomes),
        "judge_cost_usd": sum(o.judge.cost_usd for o in outcomes),
        "judge_spent_usd": sum(o.judge.spent_usd for o in outcomes),
        "unpriced_calls": sum(o.reader.unpriced_calls + o.judge.unpriced_calls for o in outcomes),
        "missing_answers": sum(1 for o in outcomes if o.answer is None),
        "mean_memory_bytes": sum(o.memory_bytes for o in outcomes) / max(1, len(outcomes)),
    }
    metrics["reader_mean_input_tokens"] = metrics["reader_input_tokens"] / max(1, reader_calls)
    metrics["reader_cost_per_answer_usd"] = metrics["reader_cost_usd"] / max(1, len(outcomes))
    metrics["model_calls_made"] = sum(
        o.reader.calls - o.reader.cached_calls + o.judge.calls - o.judge.cached_calls for o in outcomes
    )
    return {key: float(value) for key, value in metrics.items()}


def _write_csv(outcomes: list[Outcome], path: Path) -> None:
    rows = [asdict(o) for o in outcomes]
    flat = [{k: v for k, v in row.items() if not isinstance(v, dict)} | {
        f"{part}_{k}": v for part in ("reader", "judge") for k, v in row[part].items()
    } for row in rows]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(flat[0]) if flat else ["question_id"])
        writer.writeheader()
        writer.writerows(flat)


def run_job(cfg: DictConfig) -> dict[str, float]:
    """Run one job of the composed config; returns its metrics."""
    container: Mapping[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    seed = int(cfg.seed)
    design = str(cfg.design_name)
    data_path, questions = load_dataset(cfg)

    retriever = build_retriever(cfg)
    builder = build_memory(cfg, retriever)
    reader = Reader(
        name=str(cfg.reader.name),
        model=build(cfg.reader.model, "reader.model", _convert_="all"),
        instruction_role=str(cfg.reader.instruction_role),
    )
    instructions = cfg.instructions
    instruction = compose_instruction(str(instructions.base), instructions.paragraphs or {}, instructions.first_pass or [])
    judge = make_judge(
        name=str(cfg.judge.name),
        official=bool(cfg.judge.official),
        model=build(cfg.judge.model, "judge.model", _convert_="all"),
        templates_path=cfg.judge.get("templates_path"),
        templates=OmegaConf.to_container(cfg.judge.templates) if cfg.judge.get("templates") else None,
    )

    out_dir = _output_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(out_dir / OUTCOMES_ARTIFACT)
    cache = CallCache(Path(str(cfg.cache_dir)) / "calls.sqlite")
    gateway = Gateway(cache)

    settings = TrackingSettings(**container["tracking"])  # type: ignore[arg-type]
    tracker = None
    if settings.enabled:
        parent = os.environ.get(PARENT_ENV)
        tracker = JobRun(
            settings,
            run_name=f"{design}-seed{seed}",
            tags={
                "lme.role": "job",
                "lme.design": design,
                "lme.seed": str(seed),
                "lme.judge": judge.name,
                "lme.judge_official": str(judge.official).lower(),
                "lme.reader": reader.name,
            },
            parent_id=parent,
        )
        params = params_from_config(container)
        params["dataset.sha256"] = file_sha256(data_path)
        params["instruction.first_pass.sha256"] = sha256_text(instruction)
        params["n_questions"] = str(len(questions))
        params.update({f"judge.template_sha256.{k}": v for k, v in judge.digests.items()})
        tracker.log_params(params)
        tracker.log_text(OmegaConf.to_yaml(container), "config.yaml")
        tracker.log_text(instruction + "\n", "instructions/first_pass.txt")
        tracker.log_text("".join(f"{q.question_id}\n" for q in questions), "question_ids.txt")

    def progress(outcome: Outcome, done: int) -> None:
        mark = "correct" if outcome.correct else "wrong"
        print(f"[{design} seed={seed}] {done}/{len(questions)} {outcome.question_id}: {mark}", file=sys.stderr, flush=True)

    status = "FAILED"
    try:
        outcomes = asyncio.run(
            run_questions(
                questions, builder, reader, instruction, judge, gateway, seed, journal,
                concurrency=int(cfg.concurrency), on_outcome=progress if cfg.get("verbose") else None,
            )
        )
        types = {o.question_id: o.question_type for o in outcomes}
        correct = {o.question_id: o.correct for o in outcomes}
        abstention = {o.question_id for o in outcomes if o.abstention}
        metrics = run_measures(correct, types, abstention).as_metrics() | cost_metrics(outcomes)
        _write_csv(outcomes, out_dir / "outcomes.csv")
        (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if tracker is not None:
            tracker.log_metrics(metrics)
            tracker.log_artifact(journal.path)
            tracker.log_artifact(out_dir / "outcomes.csv")
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        if tracker is not None:
            tracker.finish(status)
        cache.close()
    _print_summary(design, seed, judge.name, judge.official, metrics, out_dir, tracker.run_id if tracker else None)
    return metrics


def _print_summary(design: str, seed: int, judge: str, official: bool, metrics: Mapping[str, float],
                   out_dir: Path, run_id: str | None) -> None:
    judge_note = "" if official else " (offline stand-in, not the LongMemEval judge)"
    lines = [
        f"design {design}, seed {seed}: accuracy {metrics['accuracy']:.3f} "
        f"({int(metrics['n_correct'])}/{int(metrics['n_questions'])}), "
        f"task-averaged {metrics['task_averaged_accuracy']:.3f}; judge {judge}{judge_note}",
        f"  model calls made {int(metrics['model_calls_made'])}, reader cost ${metrics['reader_cost_usd']:.4f}, "
        f"judge cost ${metrics['judge_cost_usd']:.4f}; outcomes in {out_dir}"
        + (f"; MLflow run {run_id}" if run_id else ""),
    ]
    print("\n".join(lines), flush=True)
