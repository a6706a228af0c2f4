"""The helper process that holds MLflow for a study (`lme.tracking.helper`, `lme.tracking.runs.RemoteRun`): runs it opens
and writes land in a real temporary SQLite store as a local `JobRun`'s do, owned by the study's process; a call
MLflow refuses comes back as one sentence and leaves the helper usable; a helper that is gone is said so, and
the next run starts another; a study's own process never imports MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lme.tracking.helper import HelperError, running_helper, stop_helper
from lme.tracking.runs import DataInput, TrackingSettings, client_for, experiment_id, open_run, study_call

ROOT = Path(__file__).resolve().parents[1]


def _settings(tmp_path):
    return TrackingSettings(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "mlruns"),
                            experiment="helper")


def test_a_run_held_by_the_helper_is_written_as_a_local_run_is_and_owned_by_this_process(tmp_path):
    settings = _settings(tmp_path)
    parent = open_run(settings, "parent", {"lme.role": "parent"})
    run = open_run(settings, "job", {"lme.role": "job", "lme.seed": "1"}, parent_id=parent.run_id)
    assert run.experiment_id == experiment_id(settings)
    (tmp_path / "outcomes.jsonl").write_text(json.dumps({"format": 3, "question_id": "q1", "question_type": "temporal", "correct": True, "answer": "x", "judge_error": None}) + "\n", encoding="utf-8")
    run.log_params({"a": "1", "b": "two"})
    run.log_metrics({"accuracy": 0.5, "nan": float("nan")})
    run.log_text("hello\n", "notes/hello.txt")
    run.log_artifact(tmp_path / "outcomes.jsonl")
    run.log_table([{"question_id": "q1", "correct": True}], "tables/t.json")
    run.log_dataset(DataInput("s", tmp_path / "s.json", "ab" * 32, 1, "cd" * 32))
    run.finish("FINISHED")
    assert parent.adopt_children_dataset() is True
    parent.finish("FAILED", "one job failed")

    client = client_for(settings)
    stored = client.get_run(run.run_id)
    assert stored.info.status == "FINISHED" and stored.data.params == {"a": "1", "b": "two"}
    assert stored.data.metrics == {"accuracy": 0.5}  # NaN is not logged
    assert stored.data.tags["mlflow.parentRunId"] == parent.run_id
    assert stored.data.tags["lme.pid"] == str(os.getpid())  # the study's process owns it, not the helper
    assert {a.path for a in client.list_artifacts(run.run_id)} >= {"notes", "outcomes.jsonl", "tables"}
    assert [d.dataset.name for d in stored.inputs.dataset_inputs] == ["s"]
    stored_parent = client.get_run(parent.run_id)
    assert stored_parent.info.status == "FAILED" and stored_parent.data.tags["lme.failure"] == "one job failed"
    assert [d.dataset.name for d in stored_parent.inputs.dataset_inputs] == ["s"]
    assert study_call("summarise_children", settings, parent.run_id)[0]["n_failed_runs"] == 0.0


def test_a_call_mlflow_refuses_is_one_sentence_and_the_helper_goes_on(tmp_path):
    settings = _settings(tmp_path)
    run = open_run(settings, "job", {"lme.role": "job"})
    with pytest.raises(HelperError, match=r"no-such-file\.txt: an MLflow artifact could not be logged \(No such file") \
            as raised:
        run.log_artifact(tmp_path / "no-such-file.txt")
    assert "\n" not in str(raised.value)
    run.log_params({"after": "yes"})  # the helper still answers
    run.finish()
    assert client_for(settings).get_run(run.run_id).data.params == {"after": "yes"}


def test_a_helper_that_is_gone_is_said_so_and_the_next_run_starts_another(tmp_path):
    settings = _settings(tmp_path)
    run = open_run(settings, "job", {"lme.role": "job"})
    helper = running_helper()
    assert helper is not None
    helper.process.kill()
    helper.process.wait(timeout=30)
    with pytest.raises(HelperError, match="helper process stopped"):
        run.log_params({"a": "1"})
    again = open_run(settings, "job", {"lme.role": "job"})  # a new helper
    again.finish()
    assert running_helper() is not helper
    assert client_for(settings).get_run(again.run_id).info.status == "FINISHED"
    stop_helper()


def test_a_study_process_never_imports_mlflow_and_its_runs_are_in_the_store(tmp_path):
    """A tracked two-seed multirun on the bundled sample (offline reader and judge): every MLflow import is
    the helper's (`-X importtime` lists the imports of the study's own process only)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LME_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lme", "-m", "seed=1,2", "limit=3",
         f"hydra.sweep.dir={tmp_path / 'sweep'}", f"cache_dir={tmp_path / 'cache'}",
         f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"tracking.artifact_location={tmp_path / 'mlruns'}",
         "tracking.experiment=helper"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "lme.study.job" in imported and "litellm" in imported  # the list is the study process's
    assert not [name for name in imported if name.split(".")[0] in ("mlflow", "sqlalchemy", "alembic")]
    settings = TrackingSettings(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="helper")
    runs = client_for(settings).search_runs([experiment_id(settings)])
    assert sorted((r.data.tags["lme.role"], r.info.status) for r in runs) == [
        ("job", "FINISHED"), ("job", "FINISHED"), ("parent", "FINISHED")]
    parent = next(r for r in runs if r.data.tags["lme.role"] == "parent")
    assert parent.data.metrics["n_failed_runs"] == 0.0
    assert json.loads(Path(client_for(settings).download_artifacts(parent.info.run_id, "steps.json",
                                                                    str(tmp_path))).read_text())["designs"]


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="needs Unix process priorities (os.getpriority)")
def test_the_helper_runs_at_a_lower_cpu_priority_than_the_study(tmp_path):
    """Its trace writing must not take cores from the study's event loop: `NICENESS` more than this process
    (Unix caps niceness at 19)."""
    from lme.tracking.helper import NICENESS

    run = open_run(_settings(tmp_path), "job", {"lme.role": "job"})  # answered: the helper is past its start
    helper = running_helper()
    assert helper is not None
    assert os.getpriority(os.PRIO_PROCESS, helper.process.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICENESS)
    run.finish()
