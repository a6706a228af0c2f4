"""`python -m lme` end to end, in a temp dir, offline, with a real MLflow store."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared_data import MINI, needs

pytestmark = pytest.mark.slow


def run_lme(tmp: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable, "-m", "lme", *overrides,
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        f"tracking.artifact_location={tmp}/mlruns",
        f"cache_dir={tmp}/cache",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


def client(tmp: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db")


def all_runs(tmp: Path):
    c = client(tmp)
    experiment = c.get_experiment_by_name("lme")
    return c.search_runs([experiment.experiment_id], max_results=1000)


def journal_rows(directory: Path) -> list[dict]:
    """A job's journal, in question-id order (the file is in completion order)."""
    rows = [json.loads(line) for line in (directory / "outcomes.jsonl").read_text().splitlines() if line]
    return sorted(rows, key=lambda row: row["question_id"])


def test_default_run_logs_one_mlflow_run_with_metrics(tmp_path):
    result = run_lme(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = all_runs(tmp_path)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    for key in ("accuracy", "task_averaged_accuracy", "abstention_accuracy", "reader_cost_usd", "judge_cost_usd",
                "reader_input_tokens", "judge_input_tokens", "model_calls_made"):
        assert key in metrics, key
    assert any(key.startswith("accuracy.") for key in metrics)
    assert metrics["n_questions"] >= 30
    assert run.data.tags["lme.judge_official"] == "false"
    assert "dataset.sha256" in run.data.params and len(run.data.params["dataset.sha256"]) == 64
    artifacts = {a.path for a in client(tmp_path).list_artifacts(run.info.run_id)}
    assert {"config.yaml", "outcomes.jsonl", "outcomes.csv", "instructions"} <= artifacts
    out_dirs = list((tmp_path / "outputs").glob("*/*"))
    assert len(out_dirs) == 1
    rows = journal_rows(out_dirs[0])
    assert len(rows) == metrics["n_questions"]
    assert sum(r["correct"] for r in rows) == metrics["n_correct"]
    assert metrics["accuracy"] == pytest.approx(metrics["n_correct"] / metrics["n_questions"])
    # the offline stand-ins are good enough to be a meaningful check of the plumbing
    assert 0.2 < metrics["accuracy"] < 1.0


def test_multirun_parent_children_and_across_seed_measures_then_cached_rerun(tmp_path):
    result = run_lme(tmp_path, "+design=bm25", "-m", "seed=1,2,3")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = all_runs(tmp_path)
    parents = [r for r in runs if r.data.tags.get("lme.role") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["lme.seed"] for r in children) == ["1", "2", "3"]
    assert all(r.info.status == "FINISHED" for r in children + [parent])
    assert all(r.data.tags["lme.design"] == "bm25" for r in children)

    # across-seed measures recomputed here from the children's journals
    sweep = sorted(p for p in (tmp_path / "multirun" / "bm25").glob("*/*") if p.is_dir())
    assert len(sweep) == 3
    per_run = [{r["question_id"]: r["correct"] for r in journal_rows(d)} for d in sweep]
    ids = list(per_run[0])
    mean = sum(sum(run.values()) / len(ids) for run in per_run) / 3
    majority = sum(1 for q in ids if sum(run[q] for run in per_run) >= 2)
    assert parent.data.metrics["mean_accuracy"] == pytest.approx(mean)
    assert parent.data.metrics["majority_correct_count"] == majority
    assert parent.data.metrics["majority_correct_accuracy"] == pytest.approx(majority / len(ids))
    assert parent.data.metrics["n_runs"] == 3
    first_calls = sum(r.data.metrics["model_calls_made"] for r in children)
    assert first_calls > 0

    # the same command again: no new model call, the same outcomes
    again = run_lme(tmp_path, "+design=bm25", "-m", "seed=1,2,3")
    assert again.returncode == 0, again.stderr[-3000:]
    runs = all_runs(tmp_path)
    new_parent = [r for r in runs if r.data.tags.get("lme.role") == "parent" and r.info.run_id != parent.info.run_id]
    assert len(new_parent) == 1
    new_children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == new_parent[0].info.run_id]
    assert len(new_children) == 3
    assert all(r.data.metrics["model_calls_made"] == 0 for r in new_children)
    assert new_parent[0].data.metrics["mean_accuracy"] == pytest.approx(mean)
    sweeps = sorted((tmp_path / "multirun" / "bm25").iterdir())
    assert len(sweeps) == 2
    for first, second in zip(sorted(sweeps[0].glob("*/")), sorted(sweeps[1].glob("*/"))):
        calls = ("seconds", "reader", "judge")  # call stats differ: the rerun's calls are cached
        strip = lambda rows: [{k: v for k, v in r.items() if k not in calls} | {
            "steps": [{k: v for k, v in s.items() if k not in calls} for s in r["steps"]]} for r in rows]
        assert strip(journal_rows(first)) == strip(journal_rows(second))


@needs(MINI)
def test_real_mini_file_runs_and_a_broken_copy_fails_with_one_sentence(tmp_path):
    result = run_lme(tmp_path, f"dataset.path={MINI}", "tracking.enabled=false")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "accuracy" in result.stdout

    records = json.loads(lzma.open(MINI, "rt").read())
    broken_id = records[5]["question_id"]
    records[5]["haystack_dates"][2] = "2023-05-20 late"
    broken = tmp_path / "broken.json.xz"
    with lzma.open(broken, "wt") as handle:
        json.dump(records, handle)
    result = run_lme(tmp_path, f"dataset.path={broken}", "tracking.enabled=false")
    assert result.returncode == 2
    message = result.stderr.strip().splitlines()
    assert len(message) == 1, result.stderr
    assert str(broken) in message[0] and broken_id in message[0] and "haystack_dates[2]" in message[0]
    assert "Traceback" not in result.stderr
