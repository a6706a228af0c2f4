"""Outcome rows of known content for the report, measures and interop tests.

Two designs over the same eight questions, three runs each:

- `plain`: every answer present;
- `patchy`: run 2 has a missing answer on `m2` (`answer` null) and run 3 lacks `k2` entirely;
  both count as wrong;

and `pipeline`, whose rows carry re-read `steps` (first pass, advice, decline, decline, recall).
"""

from __future__ import annotations

from typing import Any

TYPES = {
    "u1": "single-session-user",
    "u2": "single-session-user",
    "u3_abs": "single-session-user",
    "m1": "multi-session",
    "m2": "multi-session",
    "m3": "multi-session",
    "k1": "knowledge-update",
    "k2": "knowledge-update",
}
IDS = list(TYPES)

# correct per run, in IDS order; None = the row is absent from that run
PLAIN = [
    [1, 0, 1, 1, 0, 0, 1, 0],
    [1, 1, 0, 1, 0, 1, 0, 0],
    [0, 0, 1, 1, 1, 0, 1, 0],
]
PATCHY = [
    [1, 1, 1, 0, 1, 0, 1, 1],
    [1, 1, 0, 1, "missing", 1, 1, 0],
    [1, 0, 1, 0, 1, 1, 0, None],
]


def calls(n: int = 1, tokens: int = 100, cost: float = 0.01, cached: int = 0) -> dict[str, Any]:
    return {"calls": n, "cached_calls": cached, "failed_calls": 0, "input_tokens": tokens, "output_tokens": 5,
            "cost_usd": cost, "spent_usd": 0.0 if cached else cost, "unpriced_calls": 0}


def rows_from(pattern: list[Any], reader_tokens: int = 100, reader_cost: float = 0.01) -> list[dict[str, Any]]:
    rows = []
    for qid, value in zip(IDS, pattern):
        if value is None:
            continue
        missing = value == "missing"
        rows.append({
            "question_id": qid,
            "question_type": TYPES[qid],
            "abstention": "_abs" in qid,
            "answer": None if missing else f"answer to {qid}",
            "correct": False if missing else bool(value),
            "reader_error": "timeout" if missing else None,
            "reader": calls(tokens=reader_tokens, cost=reader_cost),
            "judge": calls(tokens=50, cost=0.001) if not missing else calls(0, 0, 0.0),
        })
    return rows


def step(rule: str, view: str, *, chosen: bool, reread: bool, correct: bool | None, answer: str | None = "a",
         failed: bool = False, cost: float = 0.0) -> dict[str, Any]:
    n_calls = 1 if reread or rule == "first_pass" else 0
    return {
        "rule": rule, "view": view, "instruction_sha256": "0" * 64, "chosen": chosen, "reread": reread,
        "failed": failed, "error": "boom" if failed else None, "step_answer": None if failed else answer,
        "answer": answer, "correct": correct, "reader": calls(n_calls, 200 * n_calls, cost),
        "judge": calls(0, 0, 0.0),
    }


RULES = [("advice", "first_pass"), ("decline", "whole_sessions"), ("decline", "whole_sessions"),
         ("recall", "whole_sessions")]


def pipeline_row(qid: str, verdicts: list[bool], chosen: list[bool], failed: list[bool] | None = None) -> dict[str, Any]:
    """A row whose first pass gives verdicts[0] and whose rule k (1..4), when chosen, gives verdicts[k];
    a failed re-read keeps the verdict before it."""
    failed = failed or [False] * 4
    steps = [step("first_pass", "first_pass", chosen=True, reread=False, correct=verdicts[0], cost=0.02)]
    current = verdicts[0]
    for k, (rule, view) in enumerate(RULES, start=1):
        if chosen[k - 1] and not failed[k - 1]:
            current = verdicts[k]
        steps.append(step(rule, view, chosen=chosen[k - 1], reread=chosen[k - 1], correct=current,
                          failed=chosen[k - 1] and failed[k - 1], cost=0.01 if chosen[k - 1] else 0.0))
    return {
        "question_id": qid, "question_type": TYPES[qid], "abstention": "_abs" in qid, "answer": "a",
        "correct": current, "reader": calls(), "judge": calls(0, 0, 0.0), "steps": steps,
    }


def pipeline_runs() -> list[list[dict[str, Any]]]:
    """Three runs over u1, m1, k1:
    u1: advice chosen in every run; first pass wrong, advice fixes it in runs 1 and 2, fails in run 3.
    m1: first pass right; decline chosen in run 1 only and breaks it; the second decline (run 1)
        fixes it again.
    k1: first pass wrong everywhere; recall chosen in runs 2 and 3 and fixes run 2 only."""
    no = [False] * 4
    return [
        [pipeline_row("u1", [False, True, False, False, False], [True, False, False, False]),
         pipeline_row("m1", [True, True, False, True, True], [False, True, True, False]),
         pipeline_row("k1", [False] * 5, no)],
        [pipeline_row("u1", [False, True, False, False, False], [True, False, False, False]),
         pipeline_row("m1", [True] * 5, no),
         pipeline_row("k1", [False, False, False, False, True], [False, False, False, True])],
        [pipeline_row("u1", [False, True, False, False, False], [True, False, False, False], [True, False, False, False]),
         pipeline_row("m1", [True] * 5, no),
         pipeline_row("k1", [False] * 5, [False, False, False, True])],
    ]


def log_study(settings: Any, design: str, runs: list[list[dict[str, Any]]], tmp: Any, judge: str = "offline-lexical-judge",
              official: bool = False, parent: bool = True, questions: list[str] | None = None,
              data_sha256: str | None = None, dataset: str | None = None,
              judge_model: str | None = None) -> tuple[str | None, list[str]]:
    """Log a design's runs to a real MLflow store as lme does: a parent (lme.role=parent) and one
    job per run (lme.role=job, lme.config.design, lme.seed, lme.judge, lme.judge_official) with its
    outcomes.jsonl artifact; with `questions`, each job also logs them as `question_ids.txt`, and
    `data_sha256` / `dataset` / `judge_model` as the params `dataset.sha256` / `dataset.name` / `judge.model`,
    as `lme.study.job.run_job` does. Returns (parent id, job ids)."""
    import json
    import time
    from pathlib import Path

    from lme.tracking.runs import JobRun

    parent_run = JobRun(settings, f"{design}-multirun", {"lme.role": "parent", "lme.design": design}) if parent else None
    job_ids = []
    for seed, rows in enumerate(runs, start=1):
        time.sleep(0.002)  # distinct start times
        job = JobRun(settings, f"{design}-seed{seed}", {
            "lme.role": "job", "lme.design": design, "lme.seed": str(seed), "lme.judge": judge,
            "lme.judge_official": str(official).lower(),
        }, parent_id=parent_run.run_id if parent_run else None)
        folder = Path(tmp) / f"{design}-{seed}-{job.run_id}"
        folder.mkdir(parents=True)
        path = folder / "outcomes.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        job.log_artifact(path)
        if questions is not None:
            job.log_text("".join(f"{qid}\n" for qid in questions), "question_ids.txt")
        params = {key: value for key, value in (("dataset.sha256", data_sha256), ("dataset.name", dataset),
                                                ("judge.model", judge_model)) if value}
        if params:
            job.log_params(params)
        job.finish()
        job_ids.append(job.run_id)
    if parent_run is not None:
        parent_run.finish()
    time.sleep(0.002)
    return (parent_run.run_id if parent_run else None), job_ids


def fresh_store(tmp_path_factory: Any, name: str) -> Any:
    """TrackingSettings of a new, empty MLflow SQLite store in a temp dir. The store's tables are
    created once per test session (MLflow's migrations take seconds) and the file copied."""
    import shutil

    from lme.tracking.runs import TrackingSettings

    template = tmp_path_factory.getbasetemp() / "mlflow-template.db"
    if not template.exists():
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()  # creates the tables
    tmp = tmp_path_factory.mktemp(name)
    shutil.copyfile(template, tmp / "mlflow.db")
    return TrackingSettings(uri=f"sqlite:///{tmp}/mlflow.db", artifact_location=str(tmp / "mlruns")), tmp
