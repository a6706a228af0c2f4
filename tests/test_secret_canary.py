"""A canary over every artifact lme writes (issue 36, item 3): no secret in any file, nor in what is printed.

A canary key sits in the model's key variable and a canary token in another secret variable (the environment: where
a user legitimately puts them). One real job runs against the loopback server, whose first two replies are errors
that quote the request's Authorization header (as some providers do): that answer is missing, the provider's error
kept in the journal with its quote of the key removed; the same command again finishes the job whole; then
`lme report`, `lme export`, `lme cost` and `prereg freeze` run in this process, and a last job whose key the
provider refuses with a message quoting it, as it reaches a question the cache does not hold (a systemic stop,
exit 4). Every byte under the temp dir (the job folders with Hydra's `.hydra/`, `mlflow.db`, `mlruns/` artifacts,
the caches, the ledger, the report, the export, the record) and everything printed is searched for the canaries,
raw. A config that carries a token in a URL (`api_base=...?sig=...`) is refused before anything is written.
"""

from __future__ import annotations

import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer

from lme.cli import main

ROOT = Path(__file__).resolve().parents[1]
_rng = random.SystemRandom()
CANARY_KEY = "sk-" + "canary-" + "".join(_rng.choice(string.digits) for _ in range(24))
CANARY_TOKEN = "Cn" + "".join(_rng.choice(string.ascii_letters + string.digits) for _ in range(30)) + "7q"
CANARIES = (CANARY_KEY, CANARY_TOKEN)


def _cli(*argv: str) -> int:
    try:
        main(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _leaks(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path} holds {'the key' if c == CANARY_KEY else 'the token'}" for c in CANARIES
                      if c.encode() in data]
    return found


@pytest.mark.slow  # a real job and its resumption in subprocesses (~20 s of CPU; 60 s wall on a loaded machine), then 4 s in-process
def test_no_artifact_holds_a_canary(tmp_path, capsys, monkeypatch):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env |= {"LME_CANARY_KEY": CANARY_KEY, "LME_CANARY_TOKEN": CANARY_TOKEN, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    quoting = "bad gateway: request had Authorization: Bearer {api_key}; key {api_key}"
    with LoopbackServer(reply="offline", faults=[("500", quoting), ("500", quoting)]) as server:
        base = server.base_url
        store = [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/mlruns"]
        command = [
            sys.executable, "-m", "lme", "limit=4", *store, f"cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/outputs/run", "reader.model.model=openai/gpt-4o-mini",
            f"++reader.model.api_base={server.base_url}", "++reader.model.api_key_env=LME_CANARY_KEY",
            "reader.model.max_attempts=2", "++reader.model.backoff_base_s=0.01", "concurrency=1",
            "++reader.model.input_cost_per_token=1e-6", "++reader.model.output_cost_per_token=2e-6", "verbose=true"]
        first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 5, first.stderr[-3000:]  # the call that failed twice, quoting the key, is missing
        journal = (tmp_path / "outputs/run/outcomes.jsonl").read_text()
        assert "bad gateway" in journal and "[redacted]" in journal  # the provider's error kept, its quote of the key not
        job = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # resumed
        assert job.returncode == 0, job.stderr[-3000:]  # the missing answer asked again, answered: a whole job
        requests = server.requests
    assert any(r.headers.get("authorization") == f"Bearer {CANARY_KEY}" for r in requests)  # the key was sent

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    run_id = client.search_runs([client.get_experiment_by_name("lme").experiment_id])[0].info.run_id
    codes = {
        "report": _cli("report", "--out", str(tmp_path / "report"), *store),
        "export": _cli("export", run_id, "--out", str(tmp_path / "hyp.jsonl"), *store),
        "cost": _cli("cost", str(tmp_path / "outputs"), "--ledger", str(tmp_path / "cache/ledger.sqlite")),
        "freeze": _cli("prereg", "freeze", "--out", str(tmp_path / "rec.yaml"), "limit=4",
                       f"++reader.model.api_base={base}", "++reader.model.api_key_env=LME_CANARY_KEY"),
    }
    printed = capsys.readouterr()
    assert codes["export"] == 0 and (tmp_path / "hyp.jsonl").exists(), printed.err[-2000:]
    assert codes["cost"] == 0, printed.err[-2000:]
    assert codes == {"report": 0, "export": 0, "cost": 0, "freeze": 0}, printed.err[-2000:]
    assert (tmp_path / "report/report.md").exists() and (tmp_path / "rec.yaml").exists()
    written = {path.relative_to(tmp_path).parts[0] for path in tmp_path.rglob("*") if path.is_file()}
    assert {"outputs", "mlflow.db", "mlruns", "cache", "hyp.jsonl"} <= written, written
    assert (tmp_path / "outputs/run/.hydra/config.yaml").exists()

    echo = ("401", "Incorrect API key provided: {api_key}. You can find your API key at the dashboard.")
    with LoopbackServer(reply="offline", faults=[echo]) as refusing:  # then the key is refused: a systemic stop at
        # the first question not in the call cache
        stopped = subprocess.run(
            [*[arg.replace(base, refusing.base_url) for arg in command if not arg.startswith(("hydra.run.dir=", "limit="))],
             "limit=6", f"hydra.run.dir={tmp_path}/outputs/refused"], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300)
    assert stopped.returncode == 4, stopped.stderr[-3000:]
    assert "Incorrect API key provided" in stopped.stderr  # the provider's message is shown, without the key

    assert _leaks(tmp_path) == []
    for text in (first.stdout, first.stderr, job.stdout, job.stderr, stopped.stdout, stopped.stderr, printed.out,
                 printed.err):
        assert not any(canary in text for canary in CANARIES)


def test_a_token_in_a_url_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    token = CANARY_TOKEN
    code = _cli("limit=2", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"cache_dir={tmp_path}/cache",
                f"hydra.run.dir={tmp_path}/outputs/run", f"++reader.model.api_base=https://host/v1?sig={token}")
    printed = capsys.readouterr()
    assert code == 2
    assert printed.err.strip().splitlines()[-1].startswith(
        "lme: error: config value reader.model.api_base holds a token in a URL (its user, path or query); ")
    assert token not in printed.out + printed.err
    assert list(tmp_path.rglob("*")) == []
