"""How long `python -m lme ui` takes, offline, from the command to the runs view served with its metric columns.

    python scripts/bench_ui.py [--rounds 3]

Makes a temporary store holding one finished offline run (`python -m lme limit=2`), then, each round, starts
`python -m lme ui` on a free loopback port with no network (proxies pointed at a closed port), waits for the address it
prints, reads the experiment's runs view from the REST API (the metric columns checked), and stops it with Ctrl-C.
Prints each round's seconds and their median. The issue's target is 15 s on this 2-core machine; the test
(`tests/test_mlflow_ui.py`) checks the behaviour and only catches a hang, since a timed test on a loaded machine says
little.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEW_TAG = "mlflow.sharedViewState.lme"


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "LITELLM_", "MLFLOW_"))}
    return env | {"PYTHONPATH": str(ROOT), "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_round(where: Path, uri: str) -> float:
    """Seconds from `python -m lme ui` to its runs view read back with metric columns; the server stopped after."""
    port = free_port()
    started = time.monotonic()
    ui = subprocess.Popen([sys.executable, "-m", "lme", "ui", "--port", str(port), f"tracking.uri={uri}"], cwd=where,
                          env=offline_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ui.stdout.readline()
        match = re.search(r"open (http://127\.0\.0\.1:\d+)/#/experiments/(\d+)/runs", line)
        if not match:
            raise SystemExit(f"bench_ui: lme ui printed no address: {line!r}")
        url = f"{match.group(1)}/api/2.0/mlflow/experiments/get?experiment_id={match.group(2)}"
        with urllib.request.urlopen(url, timeout=30) as reply:
            tags = {t["key"]: t["value"] for t in json.loads(reply.read())["experiment"]["tags"]}
        elapsed = time.monotonic() - started
        columns = json.loads(tags[VIEW_TAG])["selectedColumns"]
        if "metrics.`accuracy`" not in columns:
            raise SystemExit(f"bench_ui: the runs view has no accuracy column: {columns}")
        return elapsed
    finally:
        ui.send_signal(signal.SIGINT)
        ui.communicate(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lme-bench-ui-") as folder:
        where = Path(folder)
        uri = f"sqlite:///{where}/mlflow.db"
        subprocess.run([sys.executable, "-m", "lme", f"tracking.uri={uri}", f"cache_dir={where}/cache", "limit=2",
                        "progress=false", f"hydra.run.dir={where}/out"], cwd=where, env=offline_env(), check=True,
                       capture_output=True)
        times = []
        for n in range(args.rounds):
            times.append(one_round(where, uri))
            print(f"round {n + 1}: runs view served {times[-1]:.2f} s after `python -m lme ui` started", flush=True)
        print(f"lme ui start, offline: median {statistics.median(times):.2f} s over {len(times)} rounds "
              f"(min {min(times):.2f}, max {max(times):.2f}); target 15 s")


if __name__ == "__main__":
    main()
