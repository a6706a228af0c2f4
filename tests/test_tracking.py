"""MLflow helpers against a real SQLite tracking store in a temp dir."""

from __future__ import annotations

import socket

import pytest

from lme.tracking.runs import JobRun, TrackingSettings, across_seed_metrics, flatten, params_from_config


def _settings(tmp_path) -> TrackingSettings:
    """A SQLite store and its artifacts in `tmp_path`."""
    return TrackingSettings(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "mlruns"))


# A run's owner that no process on this machine can be: Linux never gives a pid above 2**22 (PID_MAX_LIMIT).
ORPHAN_OWNER = {"lme.host": socket.gethostname(), "lme.pid": str(2**22 + 1), "lme.pid_start": "1"}


def test_flatten_and_params_drop_secrets_and_hash_long_texts():
    config = {
        "reader": {"model": {"model": "openai/gpt-5-mini", "api_key": "sk-live-123", "api_key_env": "OPENAI_API_KEY"}},
        "instructions": {"base": "x" * 2000, "first_pass": ["a", "b"]},
        "seed": 3,
    }
    assert flatten(config)["reader.model.model"] == "openai/gpt-5-mini"
    params = params_from_config(config)
    assert "reader.model.api_key" not in params
    assert "sk-live-123" not in repr(params)
    assert params["reader.model.api_key_env"] == "OPENAI_API_KEY"
    assert params["instructions.base"].startswith("sha256:") and len(params["instructions.base"]) == 71
    assert params["instructions.first_pass"] == '["a", "b"]'
    assert params["seed"] == "3"


def _rows(design_correct):
    return [{"question_id": q, "question_type": "multi-session", "correct": c} for q, c in design_correct.items()]


def test_across_seed_metrics_group_by_design_and_prefix_only_when_several():
    runs = [_rows({"q1": True, "q2": False}), _rows({"q1": True, "q2": True}), _rows({"q1": False, "q2": False})]
    one = across_seed_metrics({"bm25": runs})
    assert one["mean_accuracy"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert one["majority_correct_count"] == 1
    two = across_seed_metrics({"bm25": runs, "other": runs[:1]})
    assert "bm25/mean_accuracy" in two and "other/mean_accuracy" in two and "mean_accuracy" not in two
    assert two["other/majority_correct_accuracy"] == 0.5


def test_job_run_writes_params_metrics_tags_and_artifacts(tmp_path):
    from mlflow.tracking import MlflowClient

    settings = _settings(tmp_path)
    parent = JobRun(settings, "parent", {"lme.role": "parent"})
    child = JobRun(settings, "child", {"lme.role": "job"}, parent_id=parent.run_id)
    child.log_params({f"p{i}": str(i) for i in range(250)})
    child.log_metrics({"accuracy": 0.5, "skipped": float("nan")})
    child.log_text("hello\n", "notes/hello.txt")
    child.finish()
    client = MlflowClient(settings.uri)
    run = client.get_run(child.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.run_id
    assert len(run.data.params) == 250 and run.data.metrics == {"accuracy": 0.5}
    assert run.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(child.run_id, "notes")] == ["notes/hello.txt"]
    assert (tmp_path / "mlruns").is_dir()


def test_a_dataset_another_job_registered_first_is_linked_not_a_failure(tmp_path):
    """Jobs of one sweep log the same data file at once: the store inserts the dataset in its own step, so the
    slower job's insert fails on the unique (experiment, name, digest). Reproduced in order: between this
    job's look-up and its insert, another job registers the dataset. The job must link to it and go on."""
    from pathlib import Path

    from mlflow.exceptions import MlflowException

    from lme.tracking.runs import DataInput

    settings = _settings(tmp_path)
    first, second = JobRun(settings, "a", {"lme.role": "job"}), JobRun(settings, "b", {"lme.role": "job"})
    data = DataInput("sample", Path("/data/sample.json"), "ab" * 32, 16, "cd" * 32)
    real_log_inputs = first.client.log_inputs
    calls = []

    def log_inputs_losing_the_race(run_id, datasets=None, **kwargs):
        calls.append(run_id)
        if len(calls) == 1:
            second.log_dataset(data)  # the other job wins the insert ...
            raise MlflowException(  # ... and the store answers this job as the server did in CI
                "BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                "datasets.name, datasets.digest")
        return real_log_inputs(run_id, datasets=datasets, **kwargs)

    first.client.log_inputs = log_inputs_losing_the_race
    first.log_dataset(data)
    assert len(calls) == 2
    for job in (first, second):
        inputs = job.client.get_run(job.run_id).inputs.dataset_inputs
        assert [(i.dataset.name, i.dataset.digest) for i in inputs] == [("sample", ("ab" * 32)[:12])]

    def other_failure(run_id, datasets=None, **kwargs):
        calls.append(run_id)
        raise MlflowException("RESOURCE_DOES_NOT_EXIST: run gone")

    calls.clear()
    first.client.log_inputs = other_failure
    with pytest.raises(MlflowException, match="run gone"):
        first.log_dataset(data)
    assert len(calls) == 1  # anything else is not retried


def test_the_store_modules_are_imported_without_opening_or_creating_anything(tmp_path):
    """`import_store_modules` (a single run calls it while its data file loads) imports MLflow's client and, for a
    SQLite store, its SQLAlchemy store; it opens nothing: no store file, no artifact folder. In a fresh process,
    where nothing of MLflow is imported yet."""
    import subprocess
    import sys

    store = tmp_path / "mlflow.db"
    code = (
        "import sys\n"
        "from lme.tracking.runs import TrackingSettings, import_store_modules\n"
        "assert 'mlflow' not in sys.modules\n"
        f"import_store_modules(TrackingSettings(uri='sqlite:///{store}', artifact_location='{tmp_path / 'mlruns'}'))\n"
        "print('sqlalchemy_store' in str(sorted(sys.modules)), 'mlflow.tracking.client' in sys.modules)\n"
        "import_store_modules(TrackingSettings(uri='http://127.0.0.1:9'))  # a server: the client only, no connection\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _store_with_an_experiment(tmp_path, view: str | None = None):
    """A store whose experiment an older lme made: without lme's runs view, or with `view`."""
    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import RUNS_VIEW_TAG

    settings = _settings(tmp_path)
    client = MlflowClient(settings.uri)
    created = client.create_experiment(settings.experiment, tags={RUNS_VIEW_TAG: view} if view else None)
    return settings, client, created


def _view(client, experiment):
    from lme.tracking.runs import RUNS_VIEW_TAG

    return client.get_experiment(experiment).tags.get(RUNS_VIEW_TAG)


def test_a_new_experiment_is_created_with_the_runs_view(tmp_path, monkeypatch):
    """The job that creates the experiment writes the view in the same transaction, so jobs starting beside it
    find it there and write nothing."""
    import json

    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import experiment_id, runs_view_state

    settings = _settings(tmp_path)
    tag_writes = []
    monkeypatch.setattr(MlflowClient, "set_experiment_tag", lambda self, *args: tag_writes.append(args))
    experiment = experiment_id(settings)
    assert tag_writes == []
    assert json.loads(_view(MlflowClient(settings.uri), experiment)) == runs_view_state()


@pytest.mark.parametrize(("winner_wrote", "refusal", "writes"), [
    ("this view", "(sqlite3.IntegrityError) UNIQUE constraint failed: experiment_tags.key, "
                  "experiment_tags.experiment_id", 1),  # read back: nothing written again
    ("an older view", "(psycopg2.errors.UniqueViolation) duplicate key value violates unique constraint", 2),
], ids=["this view", "an older view"])
def test_a_runs_view_write_that_lost_the_race_is_not_a_failure(tmp_path, monkeypatch, winner_wrote, refusal, writes):
    """Jobs starting together on a store whose experiment lacks the view (made by an older lme) all find the
    tag missing; MLflow writes a tag by a read and then an insert, and the slower job's insert fails on the
    tag's unique key (CI: three jobs on a fresh store, one exited 2). Reproduced in order: between this job's
    read and its write, another job writes a view. The job reads it back: this view is done; an older one
    (another lme) is written again, now an update, and it lands."""
    import json

    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import experiment_id, runs_view_state

    settings, client, created = _store_with_an_experiment(tmp_path)
    real_set = MlflowClient.set_experiment_tag
    calls = []

    def set_tag_losing_the_race(self, experiment, key, value):
        calls.append(value)
        if len(calls) == 1:  # the other job wins the insert, and the store answers this one with the unique key
            real_set(client, experiment, key, value if winner_wrote == "this view" else '{"orderByKey": "old"}')
            raise MlflowException(refusal)
        return real_set(self, experiment, key, value)

    monkeypatch.setattr(MlflowClient, "set_experiment_tag", set_tag_losing_the_race)
    assert experiment_id(settings) == created
    assert len(calls) == writes
    assert json.loads(_view(client, created)) == runs_view_state()


def test_a_view_write_failing_for_another_reason_is_raised_at_once(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import experiment_id

    settings, client, created = _store_with_an_experiment(tmp_path, view='{"old": true}')
    calls = []

    def set_tag_refused(self, experiment, key, value):
        calls.append(value)
        raise MlflowException("PERMISSION_DENIED: read-only store")

    monkeypatch.setattr(MlflowClient, "set_experiment_tag", set_tag_refused)
    with pytest.raises(MlflowException, match="read-only store"):
        experiment_id(settings)
    assert len(calls) == 1


def test_jobs_repairing_the_same_orphan_at_once_both_start(tmp_path, monkeypatch):
    """Every job marks KILLED the runs a SIGKILL left RUNNING before it starts; two jobs starting together after
    a kill find the same orphan, and the slower one's failure-tag insert fails on the tag's unique key.
    Reproduced in order: between this job's search and its write, another job repairs the orphan."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import FAILURE_TAG, repair_orphans

    settings = _settings(tmp_path)
    orphan = JobRun(settings, "killed", {"lme.role": "job"}, owner=ORPHAN_OWNER)
    real_set_tag = MlflowClient.set_tag
    calls = []

    def set_tag_losing_the_race(self, run_id, key, value, *args, **kwargs):
        calls.append(key)
        if key == FAILURE_TAG and calls.count(FAILURE_TAG) == 1:
            real_set_tag(self, run_id, key, "orphaned: marked by the other job")  # the other job wins ...
            raise MlflowException(  # ... and the store answers this one with the tag's unique key
                "(sqlite3.IntegrityError) UNIQUE constraint failed: tags.key, tags.run_uuid")
        return real_set_tag(self, run_id, key, value, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "set_tag", set_tag_losing_the_race)
    assert repair_orphans(settings, quiet=True) == [orphan.run_id]
    run = MlflowClient(settings.uri).get_run(orphan.run_id)
    assert run.info.status == "KILLED" and run.data.tags[FAILURE_TAG] == "orphaned: marked by the other job"

    def set_tag_refused(self, run_id, key, value, *args, **kwargs):
        raise MlflowException("PERMISSION_DENIED: read-only store")

    another = JobRun(settings, "killed too", {"lme.role": "job"}, owner=ORPHAN_OWNER)
    monkeypatch.setattr(MlflowClient, "set_tag", set_tag_refused)
    with pytest.raises(MlflowException, match="read-only store"):
        repair_orphans(settings, quiet=True)
    assert MlflowClient(settings.uri).get_run(another.run_id).info.status == "RUNNING"


@pytest.mark.slow
def test_jobs_starting_together_after_a_kill_all_start(tmp_path):
    """The race above between real processes: three orphans of a killed study, six jobs opening their runs at
    the same instant (each has opened the store before and spins until a shared start time). Before repairs
    tolerated each other, 3 of 4 runs of this test failed on the failure tag's unique key (the deterministic
    test above fails always)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    settings = _settings(tmp_path)
    orphans = [JobRun(settings, f"orphan {n}", {"lme.role": "job"}, owner=ORPHAN_OWNER).run_id for n in range(3)]
    start = time.time() + 12
    code = (
        "import sys, time\n"
        "from lme.tracking.runs import JobRun, TrackingSettings, client_for\n"
        f"settings = TrackingSettings(uri={settings.uri!r}, artifact_location={settings.artifact_location!r})\n"
        "client_for(settings)\n"
        f"while time.time() < {start!r}: pass\n"  # all on the CPU at the instant, not waking one by one
        "JobRun(settings, sys.argv[1], {'lme.role': 'job'}).finish()\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": str(root)}
    jobs = [subprocess.Popen([sys.executable, "-c", code, f"job {n}"], env=env, stderr=subprocess.PIPE, text=True)
            for n in range(6)]
    results = [(job.wait(timeout=120), job.stderr.read()) for job in jobs]
    assert [code for code, _ in results] == [0] * 6, [err[-1500:] for _, err in results]
    client = MlflowClient(settings.uri)
    assert [client.get_run(run_id).info.status for run_id in orphans] == ["KILLED"] * 3
    finished = [run for run in client.search_runs([client.get_experiment_by_name(settings.experiment).experiment_id])
                if run.data.tags.get("mlflow.runName", "").startswith("job ")]
    assert sorted(run.info.status for run in finished) == ["FINISHED"] * 6
