"""What a study looks like in MLflow: a job's params are the few values that define its design, its input is a
logged dataset (the runs table's Dataset column, filterable), its outcomes and the parent's across-seed verdicts
are tables. One real offline multirun into a temporary SQLite store, read back through MlflowClient."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one real offline multirun (~30 s)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    where = tmp_path_factory.mktemp("study")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "lme", "+design=bm25", "-m", "seed=1,2", "limit=3", "memory.max_bytes=50000",
         f"tracking.uri=sqlite:///{where}/mlflow.db", f"tracking.artifact_location={where}/mlruns",
         f"cache_dir={where}/cache", "progress=false"],
        cwd=where, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (where / "stdout.txt").write_text(done.stdout, encoding="utf-8")
    client = MlflowClient(f"sqlite:///{where}/mlflow.db")
    experiment = client.get_experiment_by_name("lme").experiment_id
    runs = client.search_runs([experiment])
    jobs = sorted((r for r in runs if r.data.tags.get("lme.role") == "job"), key=lambda r: r.data.tags["lme.seed"])
    (parent,) = [r for r in runs if r.data.tags.get("lme.role") == "parent"]
    return client, experiment, jobs, parent, where


def _table(client, run_id: str, path: str, where: Path) -> list[dict]:
    local = client.download_artifacts(run_id, path, str(where))
    data = json.loads(Path(local).read_text(encoding="utf-8"))
    return [dict(zip(data["columns"], row)) for row in data["data"]]


def test_a_jobs_params_are_the_values_that_define_its_design(study):
    client, _, jobs, _, _ = study
    (sweep,) = [p for p in (study[4] / "multirun").glob("*/*") if p.is_dir()]
    assert [job.info.run_name for job in jobs] == [f"bm25-sample-seed1-{sweep.name}", f"bm25-sample-seed2-{sweep.name}"]
    for job in jobs:
        params = job.data.params
        assert len(params) < 60, sorted(params)
        assert params["design"] == "bm25" and params["choice.retriever"] == "fts5" and params["choice.memory"] == "retrieved"
        assert params["memory.max_bytes"] == "50000" and params["limit"] == "3"  # what the command line changed
        assert len(params["design.sha256"]) == 64 and params["dataset.name"] == "sample"
        assert params["reader.model"] == "lme-offline/extractive-reader"
        assert "seed" not in params and "cache_dir" not in params and "concurrency" not in params  # run-only
        assert "memory.top_k" not in params  # the option's own value
        assert "config.yaml" in {a.path for a in client.list_artifacts(job.info.run_id)}  # the whole config


def test_the_input_is_a_logged_dataset_runs_can_be_filtered_by(study):
    client, experiment, jobs, _, _ = study
    for job in jobs:
        (data,) = job.inputs.dataset_inputs
        profile = json.loads(data.dataset.profile)
        assert data.dataset.name == "sample" and profile["num_questions"] == 3
        assert profile["sha256"].startswith(data.dataset.digest) and len(profile["sha256"]) == 64
        assert profile["sha256"] == job.data.params["dataset.sha256"]
    parent = study[3]
    (data,) = client.get_run(parent.info.run_id).inputs.dataset_inputs  # the children's one file, on the parent's row
    assert data.dataset.name == "sample" and data.dataset.digest == jobs[0].inputs.dataset_inputs[0].dataset.digest
    found = client.search_runs([experiment], filter_string="dataset.name = 'sample'")
    assert sorted(r.info.run_id for r in found) == sorted([parent.info.run_id, *(job.info.run_id for job in jobs)])
    assert not client.search_runs([experiment], filter_string="dataset.name = 's'")


def test_outcomes_and_across_seed_verdicts_are_tables(study):
    client, _, jobs, parent, where = study
    by_seed = {}
    for job in jobs:
        rows = _table(client, job.info.run_id, "tables/outcomes.json", where / job.info.run_id)
        journal = Path(client.download_artifacts(job.info.run_id, "outcomes.jsonl", str(where / job.info.run_id)))
        outcomes = {r["question_id"]: r for r in map(json.loads, journal.read_text(encoding="utf-8").splitlines())}
        assert len(rows) == 3 and {row["question_id"] for row in rows} == set(outcomes)
        for row in rows:
            assert row["verdict"] == ("correct" if outcomes[row["question_id"]]["correct"] else "wrong")
            assert row["answer"] == outcomes[row["question_id"]]["answer"]
        by_seed[job.data.tags["lme.seed"]] = {row["question_id"]: row["verdict"] for row in rows}
    table = _table(client, parent.info.run_id, "tables/across_seeds.json", where / "parent")
    assert len(table) == 3
    for row in table:
        assert row["design"] == "bm25"
        assert [row["seed 1"], row["seed 2"]] == [by_seed["1"][row["question_id"]], by_seed["2"][row["question_id"]]]
        assert row["runs_correct"] == [row["seed 1"], row["seed 2"]].count("correct")
        assert row["majority"] == ("correct" if row["runs_correct"] == 2 else "wrong")


def test_the_runs_table_view_shows_design_dataset_seed_and_accuracy(study):
    """MLflow has no per-experiment default columns; the experiment carries lme's view as a shared view
    state, and the multirun prints the address that opens it. Every column it selects is one the runs have."""
    from lme.tracking.runs import RUNS_VIEW_TAG

    client, experiment, jobs, parent, where = study
    state = json.loads(client.get_experiment(experiment).tags[RUNS_VIEW_TAG])
    assert state["orderByKey"] == "metrics.`accuracy`" and state["orderByAsc"] is False
    have = {"attributes": {"Dataset"}}
    for run in [*jobs, parent]:
        have.setdefault("params", set()).update(run.data.params)
        have.setdefault("metrics", set()).update(run.data.metrics)
        have.setdefault("tags", set()).update(run.data.tags)
    for column in state["selectedColumns"]:
        kind, _, name = column.partition(".")
        assert name.startswith("`") and name.endswith("`") and name.strip("`") in have[kind], column
    selected = set(state["selectedColumns"])
    assert {"params.`design`", "tags.`lme.seed`", "metrics.`accuracy`", "attributes.`Dataset`"} <= selected
    assert "metrics.`mean_accuracy`" in selected and "mean_accuracy" in parent.data.metrics
    stdout = (where / "stdout.txt").read_text(encoding="utf-8")
    assert f"/#/experiments/{experiment}/runs?viewStateShareKey=lme" in stdout
    assert f"python -m lme ui tracking.uri=sqlite:///{where}/mlflow.db, then open http://127.0.0.1:5000/#/" in stdout


def test_two_sweeps_of_a_design_are_told_apart_by_their_folder_in_every_run_name(study):
    """Runs are named `<design>-<dataset>-seed<N>-<sweep folder>` and the parent `...-multirun-<sweep folder>`: a
    second sweep of the design has other names, and each run names the folder holding its outputs."""
    _, _, jobs, parent, where = study
    (sweep,) = [p for p in (where / "multirun" / "bm25").iterdir() if p.is_dir()]
    assert parent.info.run_name == f"bm25-sample-multirun-{sweep.name}"
    for job in jobs:
        assert job.info.run_name.endswith("-" + sweep.name)


def test_runs_are_described_by_their_design_file(study):
    from lme import CONF_DIR
    from lme.config.design import design_description

    _, _, jobs, parent, _ = study
    described = design_description("bm25", [CONF_DIR])
    assert described.startswith("Retrieval baseline: BM25")  # the file's leading comment
    for job in jobs:
        assert job.data.tags["mlflow.note.content"] == described
    assert parent.data.tags["mlflow.note.content"].startswith(described + "\n\nSweep: `")


def test_every_run_says_which_code_made_it(study):
    """Jobs and the parent carry the checkout's commit and dirty flag (when lme runs from a git checkout) and the
    versions of lme, Python and the packages a result depends on."""
    import platform
    from importlib.metadata import version

    _, _, jobs, parent, _ = study
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    for run in [*jobs, parent]:
        tags = run.data.tags
        if head.returncode == 0:
            assert tags["mlflow.source.git.commit"] == head.stdout.strip()
            assert tags["lme.git.dirty"] in ("true", "false")
            assert head.stdout.strip()[:10] in tags["mlflow.source.name"]
        assert tags["lme.version.python"] == platform.python_version()
        for package in ("mlflow", "litellm", "hydra-core", "sentence-transformers", "torch"):
            assert tags[f"lme.version.{package}"] == version(package)
        assert tags["lme.version.lme"] == version("lme")


def test_a_run_lists_accuracy_first_so_that_compare_opens_on_it(study):
    """MLflow's compare page colours its first plot by the first metric the runs share, in the order they were logged
    (it opened on the constant n_questions); jobs log accuracy first, the parent its mean of runs."""
    client, _, jobs, parent, _ = study
    for job in jobs:
        assert list(client.get_run(job.info.run_id).data.metrics)[:2] == ["accuracy", "task_averaged_accuracy"]
    assert list(client.get_run(parent.info.run_id).data.metrics)[0] == "mean_accuracy"
