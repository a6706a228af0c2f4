"""Each step's composed instruction in MLflow's Prompt Registry: the prompt `lme-<design>-<step>`, one version per
distinct text (its SHA-256 the version's tag `lme.sha256`), linked both ways to the runs that read it (the run's
`mlflow.linkedPrompts`, the version's `mlflow.prompt.run_ids`), the prompt listed in the experiment's Prompts tab.
Against real SQLite stores in tmp_path; the races are reproduced in order between two clients of one store, and for
real between processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lme.util.hashing import sha256_text
from lme.tracking.runs import JobRun, TrackingSettings, prompt_name

ROOT = Path(__file__).resolve().parents[1]
TEXTS = {"first_pass": "Answer from the memory. {{not a variable}}", "decline": "Say you do not know."}


def _settings(tmp_path) -> TrackingSettings:
    return TrackingSettings(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "mlruns"))


def _versions(client, name: str) -> dict[int, dict]:
    """Version -> (text, tags) of prompt `name`."""
    return {int(v.version): {"text": v.template, "tags": dict(v.tags)} for v in client.search_prompt_versions(name)}


def _linked(client, run_id: str) -> list[dict]:
    return json.loads(client.get_run(run_id).data.tags["mlflow.linkedPrompts"])


def test_one_version_per_distinct_text_linked_to_every_run_that_read_it(tmp_path):
    settings = _settings(tmp_path)
    first, second = JobRun(settings, "a", {"lme.role": "job"}), JobRun(settings, "b", {"lme.role": "job"})
    assert first.register_instructions("pipeline", TEXTS) == {
        "first_pass": "prompts:/lme-pipeline-first_pass/1", "decline": "prompts:/lme-pipeline-decline/1"}
    assert second.register_instructions("pipeline", TEXTS) == {
        "first_pass": "prompts:/lme-pipeline-first_pass/1", "decline": "prompts:/lme-pipeline-decline/1"}
    changed = JobRun(settings, "c", {"lme.role": "job"})
    assert changed.register_instructions("pipeline", {**TEXTS, "decline": "Decline when unsure."}) == {
        "first_pass": "prompts:/lme-pipeline-first_pass/1", "decline": "prompts:/lme-pipeline-decline/2"}

    client = first.client
    first_pass = _versions(client, "lme-pipeline-first_pass")
    assert list(first_pass) == [1] and first_pass[1]["text"] == TEXTS["first_pass"]
    assert first_pass[1]["tags"]["lme.sha256"] == sha256_text(TEXTS["first_pass"])
    assert first_pass[1]["tags"]["mlflow.prompt.run_ids"].split(",") == [first.run_id, second.run_id, changed.run_id]
    decline = _versions(client, "lme-pipeline-decline")
    assert sorted(decline) == [1, 2]
    assert decline[2]["text"] == "Decline when unsure." and decline[2]["tags"]["lme.sha256"] == sha256_text(
        "Decline when unsure.")
    assert decline[1]["tags"]["mlflow.prompt.run_ids"].split(",") == [first.run_id, second.run_id]
    assert decline[2]["tags"]["mlflow.prompt.run_ids"] == changed.run_id
    assert _linked(client, second.run_id) == [{"name": "lme-pipeline-first_pass", "version": "1"},
                                              {"name": "lme-pipeline-decline", "version": "1"}]
    assert {"name": "lme-pipeline-decline", "version": "2"} in _linked(client, changed.run_id)
    # the experiment's Prompts tab lists them (MLflow filters prompts by this tag)
    found = client.search_prompts(filter_string=f"experiment_id = '{first.experiment_id}'")
    assert sorted(p.name for p in found) == ["lme-pipeline-decline", "lme-pipeline-first_pass"]


def test_a_prompt_name_keeps_to_mlflows_alphabet():
    assert prompt_name("study_01_user_log_bm25", "first_pass") == "lme-study_01_user_log_bm25-first_pass"
    assert prompt_name("my design/x", "re read") == "lme-my.design.x-re.read"


def test_a_version_another_job_made_at_the_same_time_is_kept_once(tmp_path, monkeypatch):
    """Two jobs that both found no version of a text (on a tracking server they do not take turns) both make one:
    both must then use the lower-numbered one, and the other is deleted. Reproduced in order: between this job's
    look-up and its write, the other job registers the same text."""
    from mlflow.tracking import MlflowClient

    settings = _settings(tmp_path)
    run = JobRun(settings, "a", {"lme.role": "job"})
    other = MlflowClient(settings.uri)
    create = MlflowClient.create_prompt_version
    raced = []

    def create_after_the_other_job(self, name, template, *args, **kwargs):
        if not raced:
            raced.append(create(other, name, template, *args, **kwargs))  # the other job, first
        return create(self, name, template, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "create_prompt_version", create_after_the_other_job)
    linked = run.register_instructions("bm25", {"first_pass": "Answer."})
    assert linked == {"first_pass": "prompts:/lme-bm25-first_pass/1"}  # the other job's version
    assert list(_versions(other, "lme-bm25-first_pass")) == [1]  # this job's copy (version 2) deleted


def test_a_prompt_another_job_created_first_is_not_a_failure(tmp_path, monkeypatch):
    """Between this job's look-up (no prompt) and its creation of the prompt, another job creates it: the creation
    fails as already existing, and the job goes on with the other's prompt."""
    from mlflow.tracking import MlflowClient

    settings = _settings(tmp_path)
    run = JobRun(settings, "a", {"lme.role": "job"})
    other = MlflowClient(settings.uri)
    create = MlflowClient.create_prompt

    def create_losing_the_race(self, name, *args, **kwargs):
        if other.get_prompt(name) is None:
            create(other, name, *args, **kwargs)
        return create(self, name, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "create_prompt", create_losing_the_race)
    assert run.register_instructions("bm25", {"first_pass": "Answer."}) == {
        "first_pass": "prompts:/lme-bm25-first_pass/1"}


def test_a_failure_to_register_is_raised_not_hidden(tmp_path):
    """A registered model (not a prompt) holding the prompt's name: MLflow refuses, and the reason comes out (the job's
    helper turns it into one warning; the job goes on)."""
    from mlflow.exceptions import MlflowException

    settings = _settings(tmp_path)
    run = JobRun(settings, "a", {"lme.role": "job"})
    run.client.create_registered_model("lme-bm25-first_pass")
    with pytest.raises(MlflowException):
        run.register_instructions("bm25", {"first_pass": "Answer."})


_REGISTER = """
import sys
from lme.tracking.runs import JobRun, TrackingSettings
settings = TrackingSettings(uri=sys.argv[1], artifact_location=sys.argv[2])
run = JobRun(settings, "job", {"lme.role": "job"})
print(run.run_id, flush=True)
sys.stdin.readline()  # every process has its run: register together
run.register_instructions("pipeline", {"first_pass": "Answer.", "decline": "Decline.", "recall": "Recall."})
run.finish()
"""


@pytest.mark.slow
def test_jobs_registering_the_same_texts_at_once_make_one_version_each(tmp_path):
    """Four processes on a fresh store register the same three texts at the same moment: one version per text,
    linked to all four runs."""
    from mlflow.tracking import MlflowClient

    settings = _settings(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [subprocess.Popen([sys.executable, "-c", _REGISTER, settings.uri, settings.artifact_location],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env) for _ in range(4)]
    run_ids = [process.stdout.readline().strip() for process in processes]
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
    client = MlflowClient(settings.uri)
    for step in ("first_pass", "decline", "recall"):
        versions = _versions(client, f"lme-pipeline-{step}")
        assert list(versions) == [1], versions
        assert sorted(versions[1]["tags"]["mlflow.prompt.run_ids"].split(",")) == sorted(run_ids)
    for run_id in run_ids:
        assert [entry["version"] for entry in _linked(client, run_id)] == ["1", "1", "1"]


@pytest.mark.slow
def test_a_pipeline_runs_instructions_are_its_prompts(tmp_path):
    """An offline `+design=pipeline` sweep of two seeds, then a run whose recall paragraph was changed: one version per
    distinct composed instruction, each tagged with its digest and linked to the runs that read it."""
    from mlflow.tracking import MlflowClient

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))} | {"PYTHONPATH": str(ROOT)}
    common = ["+design=pipeline", "retriever=fts5", "limit=1", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
              f"tracking.artifact_location={tmp_path}/mlruns", f"cache_dir={tmp_path}/cache", "progress=false"]
    for args in (["-m", "seed=1,2"], ["instructions.paragraphs.recall=Read again and recall every detail."]):
        done = subprocess.run([sys.executable, "-m", "lme", *common, *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "warning" not in done.stderr, done.stderr[-2000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    jobs = {run.data.tags["lme.seed"]: run for run in client.search_runs(
        [client.get_experiment_by_name("lme").experiment_id], filter_string="tags.`lme.role` = 'job'")}
    assert sorted(jobs) == ["0", "1", "2"]
    texts = {seed: {step: (Path(client.download_artifacts(run.info.run_id, "instructions", str(tmp_path / seed)))
                           / f"{step}.txt").read_text(encoding="utf-8").removesuffix("\n")
                    for step in ("first_pass", "advice", "decline", "recall")} for seed, run in jobs.items()}
    for step in ("first_pass", "advice", "decline", "recall"):
        versions = _versions(client, f"lme-pipeline-{step}")
        distinct = {texts[seed][step] for seed in jobs}
        assert len(versions) == len(distinct) == (2 if step == "recall" else 1), versions
        for number, version in versions.items():
            assert version["tags"]["lme.sha256"] == sha256_text(version["text"])
            readers = {run.info.run_id for seed, run in jobs.items() if texts[seed][step] == version["text"]}
            assert set(version["tags"]["mlflow.prompt.run_ids"].split(",")) == readers
            for run_id in readers:
                assert {"name": f"lme-pipeline-{step}", "version": str(number)} in _linked(client, run_id)
