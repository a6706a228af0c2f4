"""`python -m lme ui [--port N] [--host H] [overrides]`: MLflow's UI on the study's store, opening on lme's runs view.

Starts `mlflow server` as a child process on the configured store (`tracking.uri`, default
`sqlite:///mlflow.db`; new experiments' artifacts where lme's runs put theirs, `tracking.artifact_location`),
with one worker, no job-queue workers (`MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`), litellm's bundled prices
instead of its remote cost map, no telemetry, no access log and no warnings. Once the server answers, every
experiment holding lme's jobs gets lme's runs view (accuracy, task-averaged accuracy, design, seed, dataset:
the shared view state `mlflow.sharedViewState.lme`) and the address that opens it is printed. Ctrl-C stops the
server. On a tracking server (`tracking.uri=http://...`) nothing is started: the views are set there and its
address printed.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from lme.util.errors import LmeError

HINT = "python -m lme ui [--port N] [--host H] [overrides, e.g. tracking.uri=sqlite:///mlflow.db]"
START_TIMEOUT_S = 120.0  # a server that has not answered by then is stopped, with what it printed
# The server's environment: offline and quiet. Ours win over the user's only where MLflow's defaults do harm here.
SERVER_ENV = {
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no job-queue (huey) workers beside the UI
    "PYTHONWARNINGS": "ignore",  # Starlette's deprecation notices at start-up
}
SERVER_ENV_DEFAULTS = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm's bundled prices: no download of its cost map at import
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def main(argv: Sequence[str]) -> int:
    from lme.cli.parser import make_parser
    from lme.config.compose import split_overrides
    from lme.tracking.runs import UI_HOST, UI_PORT

    overrides, rest = split_overrides(argv)
    parser = make_parser("python -m lme ui", (__doc__ or "").split("\n\n", 1)[1].strip(), hint=HINT)
    parser.add_argument("--port", type=int, default=UI_PORT, help=f"the port to serve on (default {UI_PORT})")
    parser.add_argument("--host", default=UI_HOST, help=f"the interface to serve on (default {UI_HOST}: this "
                        "machine only; 0.0.0.0: every interface)")
    options = parser.parse_args(rest)
    if not 0 < options.port < 65536:
        raise LmeError(f"ui: --port {options.port} is not a port (1 to 65535).")

    from lme.config.design import compose_design
    from lme.tracking.runs import is_server

    try:
        settings = compose_design(overrides).tracking
    except KeyboardInterrupt:
        print("lme: interrupted.", file=sys.stderr, flush=True)
        return 130
    if not settings.enabled:
        raise LmeError("ui: tracking is disabled (tracking.enabled=false); there is no store to show.")
    from lme.config.check import tracking_uri

    tracking_uri("tracking.uri", settings.uri)  # a URI MLflow cannot use: one sentence
    if is_server(settings):
        base = settings.uri.rstrip("/")
        _print_addresses(settings, base, _give_views(base))
        return 0
    return serve(settings, options.host, options.port)


def serve(settings: Any, host: str, port: int) -> int:
    """Run `mlflow server` on the settings' store until Ctrl-C (or SIGTERM); its exit status, 0 when stopped."""
    from lme.tracking.runs import artifact_location, check_store

    check_store(settings, create=False)  # missing (names close to it), damaged, locked...: one sentence, no server
    _check_free(host, port)
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", settings.uri, "--host", host,
               "--port", str(port), "--workers", "1", "--uvicorn-opts", "--no-access-log --log-level warning"]
    artifacts = artifact_location(settings)
    if artifacts:
        command += ["--default-artifact-root", artifacts]
    env = {**SERVER_ENV_DEFAULTS, **os.environ, **SERVER_ENV}
    started = time.monotonic()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, start_new_session=True)  # Ctrl-C reaches lme, which stops the server
    output = _Output(process)
    stop = _stop_on_sigterm()
    try:
        base = f"http://{_local(host)}:{port}"
        _wait_until_up(process, base, output)
        views = _give_views(base)
        output.ready()  # from now on the server's own messages (warnings, errors) are shown
        _print_addresses(settings, base, views, time.monotonic() - started)
        status = process.wait()
        print(f"lme: error: the MLflow UI stopped by itself (exit status {status}).", file=sys.stderr, flush=True)
        return status or 1
    except KeyboardInterrupt:
        _stop(process)
        print("lme: MLflow UI stopped.", file=sys.stderr, flush=True)
        return 0
    except BaseException:
        _stop(process)
        raise
    finally:
        signal.signal(signal.SIGTERM, stop)


def _check_free(host: str, port: int) -> None:
    """`LmeError` when the address is taken (another UI?)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise LmeError(f"ui: cannot serve on {host}:{port} ({exc.strerror or exc}); another MLflow UI? "
                           "Choose another port with --port N.") from None


def _local(host: str) -> str:
    """The address to reach a server bound to `host` from this machine."""
    return "127.0.0.1" if host in ("", "0.0.0.0") else ("[::1]" if host == "::" else host)


def _stop_on_sigterm() -> Any:
    """SIGTERM stops the UI as Ctrl-C does; returns the handler it replaced."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server and its workers (their own process group) and wait for them."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


class _Output:
    """The server's output, read by a thread: kept (the last lines) until the server is up, then passed on to
    stderr, so its start-up chatter is not shown but a failure's reason is."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=30)
        self.shown = False
        self.lock = threading.Lock()
        threading.Thread(target=self._read, args=(process,), name="lme-ui-output", daemon=True).start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        for raw in process.stdout:  # type: ignore[union-attr]
            line = raw.decode("utf-8", "replace").rstrip()
            with self.lock:
                if self.shown:
                    print(line, file=sys.stderr, flush=True)
                else:
                    self.lines.append(line)

    def ready(self) -> None:
        with self.lock:
            self.shown = True

    def tail(self) -> str:
        with self.lock:
            return "\n".join(self.lines)


def _wait_until_up(process: subprocess.Popen[bytes], base: str, output: _Output) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            time.sleep(0.2)  # the rest of its output
            raise LmeError(f"ui: mlflow server exited with status {process.returncode} before it answered; "
                           f"it said:\n{output.tail()}")
        try:
            with _open(f"{base}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    _stop(process)
    raise LmeError(f"ui: mlflow server did not answer within {START_TIMEOUT_S:.0f} s; it said:\n{output.tail()}")


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # this machine's server: never via a proxy


def _open(request: str | urllib.request.Request, timeout: float) -> Any:
    """urlopen, straight to a server on this machine (a proxy from the environment would refuse or reach out)."""
    url = request if isinstance(request, str) else request.full_url
    host = urllib.parse.urlsplit(url).hostname or ""
    local = host in ("localhost", "127.0.0.1", "::1") or host == socket.gethostname()
    return (_DIRECT.open if local else urllib.request.urlopen)(request, timeout=timeout)


def _rest(base: str, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/{endpoint}", data=json.dumps(body).encode("utf-8"),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with _open(request, timeout=30) as reply:
            return json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:300]
        raise LmeError(f"ui: the MLflow server refused {endpoint} ({exc.code}): {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LmeError(f"ui: the MLflow server at {base} did not answer {endpoint}: {exc}") from None


def _give_views(base: str) -> dict[str, str]:
    """Give every active experiment that holds lme's jobs lme's runs view (unless it has this one), through the
    server's REST API; experiment name -> id of those experiments."""
    from lme.tracking.runs import RUNS_VIEW_TAG, runs_view_state

    value = json.dumps(runs_view_state(), sort_keys=True)
    experiments: list[dict[str, Any]] = []
    token = None
    while True:
        page = _rest(base, "experiments/search", {"max_results": 1000, **({"page_token": token} if token else {})})
        experiments += page.get("experiments", [])
        token = page.get("next_page_token")
        if not token:
            break
    lme_experiments: dict[str, str] = {}
    for experiment in experiments:
        found = _rest(base, "runs/search", {"experiment_ids": [experiment["experiment_id"]], "max_results": 1,
                                            "filter": "tags.`lme.role` = 'job'"})
        if not found.get("runs"):
            continue
        lme_experiments[experiment["name"]] = experiment["experiment_id"]
        tags = {tag["key"]: tag.get("value") for tag in experiment.get("tags", [])}
        if tags.get(RUNS_VIEW_TAG) != value:
            _rest(base, "experiments/set-experiment-tag",
                  {"experiment_id": experiment["experiment_id"], "key": RUNS_VIEW_TAG, "value": value})
    return lme_experiments


def _print_addresses(settings: Any, base: str, experiments: dict[str, str], seconds: float | None = None) -> None:
    from lme.tracking.runs import runs_view_url

    ready = f" (ready in {seconds:.1f} s)" if seconds is not None else ""
    stop = "; Ctrl-C stops it" if seconds is not None else ""
    if settings.experiment in experiments:
        url = runs_view_url(settings, experiments[settings.experiment], base)
        print(f"MLflow UI on {settings.uri}{ready}: open {url} (design, dataset, seed, accuracy per run){stop}",
              flush=True)
    else:
        print(f"MLflow UI on {settings.uri}{ready}: open {base} (no lme job in experiment {settings.experiment!r} "
              f"yet){stop}", flush=True)
    for name, experiment_id in sorted(experiments.items()):
        if name != settings.experiment:
            print(f"  experiment {name!r}: {runs_view_url(settings, experiment_id, base)}", flush=True)
