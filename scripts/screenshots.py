"""Screenshots of a small study in the MLflow UI, for the README: the runs table, one question's trace, and a
comparison of runs, taken with headless Chromium (Debian's `chromium` package).

    python scripts/screenshots.py [--out docs/img] [--work DIR] [--width 1400] [--height 900] [--scale 0.6]

It runs an offline two-design, two-seed sweep on the bundled sample with `tracking.traces=full` into a fresh
SQLite store, starts `mlflow server` on loopback over that store, and saves `runs_table.png`, `trace.png` and
`compare_runs.png` (scaled by `--scale` so they stay small). Prints each file's path and size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["+design=bm25,first_pass", "retriever=fts5", "limit=4", "-m", "seed=1,2", "tracking.traces=full"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("screenshots: error: no chromium on PATH (Debian: apt-get install chromium).")


def run_study(work: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-m", "lme", *SWEEP, f"tracking.uri=sqlite:///{work}/mlflow.db",
               f"tracking.artifact_location={work}/mlruns", f"cache_dir={work}/cache", "progress=false"]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"screenshots: error: the study exited {done.returncode}:\n{done.stderr[-2000:]}")


def start_server(work: Path, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{work}/mlflow.db"],
        cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            time.sleep(0.5)
    os.killpg(process.pid, signal.SIGTERM)
    raise SystemExit("screenshots: error: mlflow server did not answer in 120 s.")


def shoot(browser: str, url: str, out: Path, width: int, height: int, scale: float, profile: Path) -> None:
    raw = out.with_suffix(".raw.png")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=20000",
                    f"--screenshot={raw}", url], check=True, capture_output=True, timeout=180)
    from PIL import Image

    with Image.open(raw) as image:
        small = image.resize((int(image.width * scale), int(image.height * scale)), Image.LANCZOS)
        small.convert("P", palette=Image.ADAPTIVE, colors=128).save(out, optimize=True)
    raw.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--work", type=Path, help="keep the study here (default: a temp dir, removed)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--scale", type=float, default=0.6)
    args = parser.parse_args(argv)
    browser = chromium()
    work = args.work or Path(tempfile.mkdtemp(prefix="lme-screens-"))
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    try:
        run_study(work)
        server = start_server(work, port)
        try:
            from mlflow.tracking import MlflowClient

            from lme.tracking.runs import TrackingSettings, runs_view_url

            url = f"http://127.0.0.1:{port}"
            client = MlflowClient(url)
            experiment = client.get_experiment_by_name("lme").experiment_id
            runs = client.search_runs([experiment])
            jobs = [run for run in runs if run.data.tags.get("lme.role") == "job"]
            trace = client.search_traces(locations=[experiment], run_id=jobs[0].info.run_id, max_results=1)[0]
            ids = ",".join(f'"{run.info.run_id}"' for run in jobs)
            pages = {
                # lme's runs-table view (an experiment tag every job sets; MLflow has no default columns
                # per experiment): design, dataset, seed, accuracy, sorted by accuracy
                "runs_table.png": runs_view_url(TrackingSettings(uri=url), experiment),
                "trace.png": f"{url}/#/experiments/{experiment}/traces?selectedEvaluationId={trace.info.trace_id}",
                "compare_runs.png": f"{url}/#/compare-runs?runs=[{ids}]&experiments=[\"{experiment}\"]",
            }
            for name, page in pages.items():
                shoot(browser, page, args.out / name, args.width, args.height, args.scale, work / "chromium")
                print(f"{args.out / name}: {(args.out / name).stat().st_size / 1024:.0f} KiB ({page})")
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
