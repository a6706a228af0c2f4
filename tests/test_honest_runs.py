"""What a whole run says when things go wrong: real `python -m lme` subprocesses against the loopback server
(litellm's real HTTP path), with a real journal, call cache, ledger and MLflow store in a temp dir.

- a study that cannot succeed (no key, 401, unknown model, a refused parameter) stops at once, exit 2 before
  anything is written or exit 4 during the run, with no further paid call and no MLflow run left RUNNING;
- failed calls are counted and shown, and a job with missing answers exits 5; the rerun asks for exactly those;
- a journal cut mid-line is repaired on resume; SIGINT stops with one line; SIGKILL's orphans are repaired;
- two processes on a fresh MLflow store both start.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback import LoopbackServer

from lme.util.errors import EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_SYSTEMIC

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-lme-honest-0123456789abcdefXYZ"
READER, JUDGE = "openai/gpt-4o-mini", "openai/gpt-4o-2024-08-06"


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "HYDRA"))}
    return base | {"LME_FAKE_KEY": KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LME_PROGRESS_INTERVAL_S": "0.5"} | extra


def command(tmp: Path, url: str, *extra: str, run: str = "run") -> list[str]:
    models = []
    for part, model in (("reader", READER), ("judge", JUDGE)):
        models += [
            f"{part}.model.model={model}", f"++{part}.model.api_base={url}", f"++{part}.model.api_key_env=LME_FAKE_KEY",
            f"{part}.model.max_attempts=2", f"{part}.model.timeout_s=2", f"++{part}.model.backoff_base_s=0.01",
            f"++{part}.model.input_cost_per_token=1e-6", f"++{part}.model.output_cost_per_token=2e-6",
        ]
    return [
        sys.executable, "-m", "lme", "limit=6", "concurrency=2",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/mlruns",
        f"cache_dir={tmp}/cache", f"hydra.run.dir={tmp}/{run}", f"hydra.sweep.dir={tmp}/multirun", *models, *extra,
    ]


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=kwargs.pop("env", env()),
                          **kwargs)


def runs(tmp: Path) -> list[dict[str, str]]:
    """Every MLflow run in the store: status and the failure tag."""
    db = tmp / "mlflow.db"
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT r.run_uuid, r.status, (SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid AND t.key = "
                "'lme.failure') FROM runs r"
            ).fetchall()
    except sqlite3.OperationalError as exc:  # polled while MLflow is still creating the store's tables
        if "no such table" not in str(exc):
            raise
        return []
    return [{"id": run_id, "status": status, "failure": failure or ""} for run_id, status, failure in rows]


def paid_calls(tmp: Path) -> list[str]:
    with sqlite3.connect(tmp / "cache" / "ledger.sqlite") as conn:
        return [row[0] for row in conn.execute("SELECT status FROM calls")]


def journal(tmp: Path, name: str = "run") -> list[dict]:
    path = tmp / name / "outcomes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# -- a study that cannot succeed ----------------------------------------------------------------------


@pytest.mark.slow
def test_no_key_is_refused_before_anything_is_written(tmp_path):
    with LoopbackServer(reply="offline") as server:
        result = run(command(tmp_path, server.base_url), env=env(LME_FAKE_KEY=""))
        assert server.requests == []
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "model openai/gpt-4o-mini: the environment variable LME_FAKE_KEY" in result.stderr
    assert "Traceback" not in result.stderr
    assert runs(tmp_path) == [] and not (tmp_path / "run" / "outcomes.jsonl").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "error_class"), [  # 404 and 400 take the same path: their class is checked
    (("401", "Incorrect API key provided: {api_key}."), "AuthenticationError"),  # in models/test_honest_failures
])
def test_a_failure_no_retry_can_fix_stops_the_study_at_once(tmp_path, fault, error_class):
    """Three questions answer, then the provider refuses: the study stops with exit 4, no further request,
    the MLflow run FAILED with the reason, the console naming model, error class and message, and the key
    nowhere; the resume command, once the provider accepts again, finishes the job."""
    with LoopbackServer(reply="offline") as server:
        first = run(command(tmp_path, server.base_url, "limit=3", "concurrency=1"))
        assert first.returncode == 0, first.stderr[-2000:]
        before = len(server.requests)
        server.add_faults(fault, *[fault] * 50)
        stopped = run(command(tmp_path, server.base_url, "concurrency=1"))
        sent = len(server.requests) - before
        assert sent == 1  # the one refused request; nothing after it
        server._faults.clear()  # the provider accepts again
        resume = [line for line in stopped.stderr.splitlines() if "resume with: " in line]
        assert resume, stopped.stderr
        printed = shlex.split(resume[0].split("resume with: ", 1)[1])
        assert printed[:3] == ["python", "-m", "lme"]
        resumed = run([sys.executable, *printed[1:]])
    assert stopped.returncode == EXIT_SYSTEMIC, stopped.stderr[-2000:]
    assert f"stopped: {READER} failed with {error_class}" in stopped.stderr
    assert "Traceback" not in stopped.stderr and KEY not in stopped.stderr + stopped.stdout
    assert "3 of 6 questions are journaled" in stopped.stderr
    statuses = {r["status"] for r in runs(tmp_path)}
    assert "RUNNING" not in statuses
    failed = [r for r in runs(tmp_path) if r["status"] == "FAILED"]
    assert len(failed) == 1 and error_class in failed[0]["failure"] and KEY not in failed[0]["failure"]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert len(journal(tmp_path)) == 6


# -- failures counted and shown; a rerun asks for exactly what is missing --------------------------------


@pytest.mark.slow
def test_failed_calls_are_counted_shown_and_asked_again_by_the_rerun(tmp_path):
    """Two reader calls fail (both attempts each): exit 5, the summary and metrics.json count them by
    class; the rerun sends exactly the missing questions' reader and judge calls."""
    with LoopbackServer(reply="offline") as server:
        server.add_faults(("500",), ("500",), ("500",), ("500",))  # the first two reader calls fail
        failing = run(command(tmp_path, server.base_url, "concurrency=1"))
        metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
        sent_before = len(server.requests)
        rerun = run(command(tmp_path, server.base_url, "concurrency=1"))
        resent = server.requests[sent_before:]
    assert failing.returncode == EXIT_INCOMPLETE, failing.stderr[-2000:]
    summary = failing.stdout + failing.stderr
    assert "2 reader calls failed (InternalServerError); 2 answers missing" in summary
    assert metrics["reader_failed_calls"] == 2 and metrics["missing_answers"] == 2 and metrics["answered"] == 4
    assert metrics["reader_failed_calls.InternalServerError"] == 2
    assert "rerun the same command" in failing.stderr
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    # exactly the two missing questions: their reader call and their judge call, nothing else
    assert len(resent) == 4
    rows = journal(tmp_path)
    assert len(rows) == 6 and all(row["answer"] is not None for row in rows)
    assert len({row["question_id"] for row in rows}) == 6  # the failed rows were replaced, not duplicated


# -- interruption and the records it leaves --------------------------------------------------------------


@pytest.mark.slow
def test_a_journal_cut_mid_line_is_repaired_on_resume(tmp_path):
    with LoopbackServer(reply="offline") as server:
        assert run(command(tmp_path, server.base_url, "limit=4", "tracking.enabled=false")).returncode == 0
        path = tmp_path / "run" / "outcomes.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # a kill in the middle of a write
        resumed = run(command(tmp_path, server.base_url, "limit=6", "tracking.enabled=false"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    text = path.read_text()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]  # every line whole
    assert len(rows) == 6 and len({row["question_id"] for row in rows}) == 6


@pytest.mark.slow
def test_sigint_stops_with_one_line_and_the_runs_are_closed(tmp_path):
    with LoopbackServer(reply="offline", latency_s=0.5) as server:
        process = subprocess.Popen(command(tmp_path, server.base_url, "limit=30", "concurrency=1"), cwd=ROOT,
                                   env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not (tmp_path / "run" / "outcomes.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, err[-2000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("lme:") and "interrupted" in line]
    assert len(lines) == 1 and "To resume: python -m lme" in lines[0]
    assert [r["status"] for r in runs(tmp_path)] == ["KILLED"]


@pytest.mark.slow
def test_runs_orphaned_by_sigkill_are_marked_killed(tmp_path):
    with LoopbackServer(reply="offline", latency_s=0.5) as server:
        process = subprocess.Popen(command(tmp_path, server.base_url, "limit=30", "concurrency=1", "-m", "seed=1,2"),
                                   cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(runs(tmp_path)) < 2 and time.monotonic() < deadline:  # the parent and the first job
            time.sleep(0.1)
        time.sleep(0.5)
        process.kill()
        process.wait()
        assert sorted(r["status"] for r in runs(tmp_path)) == ["RUNNING", "RUNNING"]
        repaired = run([sys.executable, "-m", "lme", "runs", "repair", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"])
    assert repaired.returncode == 0, repaired.stderr
    assert "2 orphaned run(s) marked KILLED" in repaired.stdout
    assert all(r["status"] == "KILLED" and "orphaned" in r["failure"] for r in runs(tmp_path))


@pytest.mark.slow
def test_two_processes_start_together_on_a_fresh_mlflow_store(tmp_path):
    with LoopbackServer(reply="offline") as server:
        processes = [
            subprocess.Popen(command(tmp_path, server.base_url, "limit=2", f"seed={n}", run=f"run{n}"), cwd=ROOT,
                             env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for n in range(3)
        ]
        results = [(process.wait(timeout=300), process.stderr.read()) for process in processes]
    assert [code for code, _ in results] == [0, 0, 0], [err[-1500:] for _, err in results]
    assert sorted(r["status"] for r in runs(tmp_path)) == ["FINISHED"] * 3
