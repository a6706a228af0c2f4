"""A finished job's outcomes.jsonl artifact that is gone, a directory, unreadable, emptied or cut short: `lme report`
and `lme export` refuse in one sentence naming the run and where the artifact lies (issue 36); nothing is changed,
and a report never counts a job from part of its answers."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from report_fixtures import PLAIN, fresh_store, log_study, rows_from


def _lme(argv, capsys) -> tuple[int, str]:
    from lme.cli import run_subcommand

    code = run_subcommand(argv[0], argv[1:])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A real MLflow store with one finished job of 8 questions (its n_questions param, as lme.study.job logs it)."""
    from mlflow.tracking import MlflowClient

    settings, tmp = fresh_store(tmp_path_factory, "artifact")
    rows = rows_from(PLAIN[0])
    _, jobs = log_study(settings, "plain", [rows], tmp, parent=False)
    MlflowClient(tracking_uri=settings.uri).log_param(jobs[0], "n_questions", str(len(rows)))
    artifact = next(Path(settings.artifact_location).rglob("outcomes.jsonl"))
    return settings, jobs[0], artifact, artifact.read_bytes()


def _break(artifact: Path, how: str, good: bytes) -> None:
    if artifact.is_dir() and not artifact.is_symlink():
        shutil.rmtree(artifact)
    elif os.path.lexists(artifact):
        artifact.unlink()
    if how == "directory":
        artifact.mkdir()
        (artifact / "inside.txt").write_text("a directory where the artifact was\n")
    elif how == "io-error":
        artifact.symlink_to("/proc/self/mem")  # reading it fails with EIO
    elif how == "empty":
        artifact.write_bytes(b"")
    elif how == "cut short":
        artifact.write_bytes(b"".join(good.splitlines(keepends=True)[:3]))  # whole lines: still valid JSONL
    elif how == "whole":
        artifact.write_bytes(good)


@pytest.mark.parametrize("how,said", [("missing", "is missing"), ("directory", "is a directory"),
                                      ("io-error", "cannot be read (Input/output error)"),
                                      ("empty", "holds 0 of the job's 8 questions"),
                                      ("cut short", "holds 3 of the job's 8 questions")])
def test_a_broken_outcomes_artifact_is_one_sentence_naming_the_run(logged, capsys, how, said):
    settings, run_id, artifact, good = logged
    overrides = [f"tracking.uri={settings.uri}", f"tracking.artifact_location={settings.artifact_location}"]
    try:
        _break(artifact, how, good)
        for argv in (["report", "--resamples", "100", *overrides], ["export", run_id, *overrides]):
            code, err = _lme(argv, capsys)
            lines = [line for line in err.splitlines() if line.startswith("lme")]
            assert code == 2 and "Traceback" not in err and len(lines) == 1, err
            assert lines[0].startswith(f"lme: error: {artifact}: ") and run_id in lines[0] and said in lines[0], err
            assert "rerun the job" in lines[0]
        assert how not in ("empty", "cut short") or artifact.read_bytes() != good  # left as it was, not "repaired"
    finally:
        _break(artifact, "whole", good)
    code, err = _lme(["export", run_id, *overrides], capsys)
    assert code == 0, err
