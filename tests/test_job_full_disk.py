"""A job whose disk fills as it runs stops in one sentence naming the file, keeps every answer it journaled and
resumes to a whole job with the command it printed (issue 36: nothing computed earlier is lost)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from full_disk import limit_child


def test_a_full_disk_mid_job_stops_in_one_sentence_and_the_printed_command_finishes_the_job(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LME_")}
    command = [sys.executable, "-m", "lme", "tracking.enabled=false", "limit=20", f"cache_dir={tmp_path}/cache",
               f"hydra.run.dir={tmp_path}/out"]
    stopped = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                             preexec_fn=limit_child(200_000))
    journal = tmp_path / "out" / "outcomes.jsonl"
    lines = [line for line in stopped.stderr.splitlines() if line.startswith("lme:")]
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    assert lines[0].startswith("lme: stopped: ") and "could not be written" in lines[0], lines
    kept = journal.read_bytes()
    done = len(kept.splitlines())
    assert 0 < done < 20 and f"{done} of 20 questions are journaled in {journal}" in lines[1]
    resume = shlex.split(lines[1].split("resume with: ", 1)[1])
    assert resume[:3] == ["python", "-m", "lme"]
    finished = subprocess.run([sys.executable, *resume[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    assert len({row["question_id"] for row in rows}) == 20
    assert journal.read_bytes().startswith(kept)  # the answers kept before the disk filled are the same bytes


@pytest.mark.slow
def test_a_full_disk_as_hydra_writes_its_files_is_one_sentence_and_keeps_the_earlier_ones(tmp_path: Path) -> None:
    """Hydra writes a job's `.hydra/*.yaml` (and a sweep's multirun.yaml) before the job starts: a full disk there
    is one sentence naming the file, the earlier run's files are kept whole (written whole or not at all), and
    the printed command is the job's own (slow: three `python -m lme` processes, ~15 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LME_")}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "lme", "tracking.enabled=false", "limit=1", f"cache_dir={tmp_path}/cache",
               f"hydra.run.dir={out}"]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    kept = {path.name: path.read_bytes() for path in (out / ".hydra").iterdir()}
    journal = (out / "outcomes.jsonl").read_bytes()
    stopped = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                             preexec_fn=limit_child(1000))  # smaller than any of Hydra's files
    lines = [line for line in stopped.stderr.splitlines() if line.startswith("lme:")]
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    assert lines[0].startswith(f"lme: error: {out / '.hydra'}/") and "could not be written (File too large)" in lines[0]
    assert f"hydra.run.dir={out}" in lines[1] and str(out / "outcomes.jsonl") in lines[1], lines
    assert {path.name: path.read_bytes() for path in (out / ".hydra").iterdir()} == kept  # no file left cut
    assert (out / "outcomes.jsonl").read_bytes() == journal

    sweep = subprocess.run([sys.executable, "-m", "lme", "-m", "tracking.enabled=false", "limit=1", "seed=1,2",
                            f"cache_dir={tmp_path}/cache", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, preexec_fn=limit_child(100))
    lines = [line for line in sweep.stderr.splitlines() if line.startswith("lme:")]
    assert sweep.returncode == 2 and "Traceback" not in sweep.stderr, sweep.stderr[-3000:]
    assert lines[0].startswith("lme: error: ") and "multirun.yaml: could not be written" in lines[0], lines


def test_a_log_line_that_cannot_be_written_is_said_once_and_the_job_goes_on(tmp_path: Path, capsys) -> None:
    import logging

    from lme.study.hydra_run import quiet_log_errors

    handler = logging.FileHandler(tmp_path / "hydra_run.log")
    root = logging.getLogger()
    others = root.handlers[:]  # what earlier in-process runs of this worker left (their streams may be closed)
    root.handlers = [handler]
    try:
        quiet_log_errors()
        handler.stream.close()  # every write now fails, as on a full disk
        for _ in range(3):
            root.warning("a line")
    finally:
        root.handlers = others
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"lme: note: {tmp_path / 'hydra_run.log'}: a log line could not be written"), err
