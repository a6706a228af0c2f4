"""A job whose disk fills as it runs stops in one sentence naming the file, keeps every answer it journaled and
resumes to a whole job with the command it printed (issue 36: nothing computed earlier is lost)."""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path


def _file_size_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return apply


def test_a_full_disk_mid_job_stops_in_one_sentence_and_the_printed_command_finishes_the_job(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LME_")}
    command = [sys.executable, "-m", "lme", "tracking.enabled=false", "limit=20", f"cache_dir={tmp_path}/cache",
               f"hydra.run.dir={tmp_path}/out"]
    stopped = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                             preexec_fn=_file_size_limit(200_000))
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
