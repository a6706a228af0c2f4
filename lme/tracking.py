"""MLflow: one run per job, one parent per multirun with the across-seed measures.

Runs are written through `MlflowClient` with explicit run ids (no global
"active run"), so jobs in other processes attach to the parent by the id in
`LME_PARENT_RUN_ID`. The tracking store is SQLite (`sqlite:///mlflow.db`) or a
tracking server (`tracking.uri=http://...`), artifacts go to `mlruns/`. mlflow
is imported lazily.

Any Hydra launcher works (basic, joblib, Ray, submitit): `MultirunParent`
creates the parent in the launching process and hands every job, through the
job's own config, what a worker in another process or on another machine
lacks (`job_overrides`): the parent id and lme's path variables as
`hydra.job.env_set` (Hydra sets them around the job wherever it runs) and the
sweep directory as an absolute path. A job whose process started elsewhere
(a Ray worker starts in the directory `ray start` ran in) moves to the launch
directory when it exists there, so relative paths mean the same in every job.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.hashing import sha256_text

PARENT_ENV = "LME_PARENT_RUN_ID"
# lme's own path variables, read by the job's config (`${oc.env:...}`): forwarded to jobs in other processes.
# Never keys: a key would be written to the job's .hydra/hydra.yaml; workers take keys from their environment.
FORWARDED_ENV = ("LME_CACHE_DIR", "LME_DATA_DIR", "LME_JUDGE_TEMPLATES")
OUTCOMES_ARTIFACT = "outcomes.jsonl"
_MAX_PARAM_CHARS = 500


@dataclass(frozen=True)
class TrackingSettings:
    enabled: bool = True
    uri: str = "sqlite:///mlflow.db"
    artifact_location: str | None = "mlruns"
    experiment: str = "lme"


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> dotted keys (lists kept as JSON)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def looks_like_a_key(value: Any) -> bool:
    """Whether a config value holds an API key or token anywhere in it (`sk-...`, `Bearer ...`, `hf_...`,
    `AKIA...`; `lme.secrets` has the rules), in a string or any string inside a list or mapping."""
    from lme import secrets

    return secrets.looks_like_a_key(value)


def params_from_config(config: Mapping[str, Any]) -> dict[str, str]:
    """MLflow params: secrets dropped, long texts replaced by their SHA-256 (the text is an artifact).

    A value that looks like an API key under any other name is refused (`LmeError`): keys belong in
    the environment, named by a model's `api_key_env`."""
    from lme import secrets

    params = {}
    for name, value in flatten(config).items():
        if secrets.secret_named(name.rsplit(".", 1)[-1]):
            continue
        found = secrets.findings(value, name)
        if found:  # refused, named by its flattened key (never the secret)
            raise secrets.refusal(name, found[0].kind)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > _MAX_PARAM_CHARS:
            text = "sha256:" + sha256_text(text)
        params[name] = text
    return params


def client_for(settings: TrackingSettings):
    """A client of the tracking store; the first in this process opens (and, when new, creates) the store
    under `_store_lock`."""
    from mlflow.tracking import MlflowClient

    with _store_lock(settings):
        client = MlflowClient(tracking_uri=settings.uri)
        if settings.uri not in _READY:
            client.search_experiments(max_results=1)  # opens the store now, inside the lock
        return client


def artifact_location(settings: TrackingSettings) -> str | None:
    """Where a new experiment keeps its artifacts. With a tracking server (`http(s)://`), a relative
    path such as the default `mlruns` would name a folder on whichever machine created the experiment,
    so the server decides (it proxies uploads with `mlflow server --artifacts-destination`); an
    absolute path or a URI is kept as given."""
    location = settings.artifact_location
    if not location:
        return None
    if "://" in location or location.startswith("mlflow-artifacts:"):
        return location
    if settings.uri.startswith(("http://", "https://")) and not Path(location).is_absolute():
        return None
    return Path(location).resolve().as_uri()


_READY: set[str] = set()  # tracking URIs whose store this process has opened (and, if new, created)


@contextlib.contextmanager
def _store_lock(settings: TrackingSettings):
    """Several processes opening a fresh SQLite tracking store at once would race in MLflow's schema
    migration (one crashes): the first opening in each process holds an exclusive lock on a file beside
    the store (in the temporary directory, named by the store's path). Other stores (a tracking server)
    need none."""
    uri = settings.uri
    if uri in _READY or not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    path = Path(uri.removeprefix("sqlite:///"))
    if uri.startswith("sqlite:////"):
        path = Path("/" + uri.removeprefix("sqlite:////"))
    digest = sha256_text(str(path.absolute()))[:16]
    with open(Path(tempfile.gettempdir()) / f"lme-mlflow-store-{digest}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
            _READY.add(uri)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def experiment_id(settings: TrackingSettings) -> str:
    client = client_for(settings)
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(settings.experiment, artifact_location=artifact_location(settings))
    except Exception:  # another job created it first
        experiment = client.get_experiment_by_name(settings.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


class JobRun:
    """One MLflow run, written through the client."""

    def __init__(self, settings: TrackingSettings, run_name: str, tags: Mapping[str, str], parent_id: str | None = None):
        self.settings = settings
        self.client = client_for(settings)
        all_tags = dict(tags) | owner_tags()
        if parent_id:
            all_tags["mlflow.parentRunId"] = parent_id
        experiment = experiment_id(settings)
        repair_orphans(settings, experiment_ids=[experiment], quiet=True)  # runs a SIGKILL left RUNNING
        run = self.client.create_run(experiment, run_name=run_name, tags=all_tags)
        self.run_id = run.info.run_id

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)) for key, value in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(value), now, 0) for key, value in metrics.items() if value == value]
        for start in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[start : start + 500])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def finish(self, status: str = "FINISHED", failure: str | None = None) -> None:
        """End the run; `failure` (why it failed or stopped) goes into the tag `lme.failure`."""
        if failure:
            self.client.set_tag(self.run_id, FAILURE_TAG, failure[:5000])
        self.client.set_terminated(self.run_id, status)


FAILURE_TAG = "lme.failure"
_OWNER_TAGS = ("lme.host", "lme.pid", "lme.pid_start")


def owner_tags() -> dict[str, str]:
    """Which process owns a run: a run left RUNNING by a process that is gone was orphaned (SIGKILL)."""
    import socket

    from lme.models.ledger import process_start

    pid = os.getpid()
    return {"lme.host": socket.gethostname(), "lme.pid": str(pid), "lme.pid_start": process_start(pid)}


def repair_orphans(settings: TrackingSettings, experiment_ids: list[str] | None = None, quiet: bool = False) -> list[str]:
    """Mark KILLED every RUNNING run whose owning process, on this machine, is gone; returns their ids.
    Runs owned by another machine are left alone (their process cannot be checked from here)."""
    import socket

    from lme.models.ledger import process_alive

    client = client_for(settings)
    ids = experiment_ids or [experiment_id(settings)]
    host = socket.gethostname()
    repaired = []
    try:
        running = client.search_runs(ids, filter_string="attributes.status = 'RUNNING'", max_results=10_000)
    except Exception:  # noqa: BLE001 - a store that cannot be searched has nothing to repair here
        return []
    for run in running:
        tags = run.data.tags
        if tags.get("lme.host") != host or not str(tags.get("lme.pid", "")).isdigit():
            continue
        if process_alive(int(tags["lme.pid"]), tags.get("lme.pid_start", "")):
            continue
        client.set_tag(run.info.run_id, FAILURE_TAG, "orphaned: the process running it ended without closing it "
                       f"(killed?); marked KILLED by process {os.getpid()}")
        client.set_terminated(run.info.run_id, "KILLED")
        repaired.append(run.info.run_id)
    if repaired and not quiet:
        print(f"lme: marked {len(repaired)} orphaned MLflow run(s) KILLED: {', '.join(repaired)}", flush=True)
    return repaired


def read_outcome_rows(settings: TrackingSettings, run_id: str) -> list[dict[str, Any]] | None:
    """The per-question outcomes a job logged (journal rows, `format` key included), or None when it logged
    none; `LmeError` when a row is of a format this lme cannot read (`lme.run.READABLE_JOURNAL_FORMATS`)."""
    from lme.run import journal_format

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=OUTCOMES_ARTIFACT, dst_path=tmp, tracking_uri=settings.uri
            )
        except Exception:
            return None
        lines = Path(local).read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    for row in rows:
        journal_format(row.get("format", 1), f"the {OUTCOMES_ARTIFACT} of MLflow run {run_id}")
    return rows


def across_seed_metrics(groups: Mapping[str, list[list[dict[str, Any]]]]) -> dict[str, float]:
    """Across-run measures per design; keys are prefixed with the design when there are several."""
    from lme.measures import across_runs

    metrics: dict[str, float] = {}
    for design, runs in sorted(groups.items()):
        types: dict[str, str] = {}
        for rows in runs:
            for row in rows:
                types.setdefault(row["question_id"], row["question_type"])
        correct_maps = [{row["question_id"]: bool(row["correct"]) for row in rows} for rows in runs]
        prefix = "" if len(groups) == 1 else f"{design}/"
        for key, value in across_runs(correct_maps, types).as_metrics().items():
            metrics[prefix + key] = value
    return metrics


def summarise_children(settings: TrackingSettings, parent_id: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Read every finished child of `parent_id` and compute the across-seed measures."""
    client = client_for(settings)
    children = client.search_runs(
        [experiment_id(settings)], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=10_000
    )
    groups: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    seeds: dict[str, list[str]] = defaultdict(list)
    failed = 0
    for child in sorted(children, key=lambda run: run.info.start_time or 0):
        rows = read_outcome_rows(settings, child.info.run_id) if child.info.status == "FINISHED" else None
        if rows is None:
            failed += 1
            continue
        design = child.data.tags.get("lme.design", "default")
        groups[design].append(rows)
        seeds[design].append(child.data.tags.get("lme.seed", "?"))
    metrics = across_seed_metrics(groups)
    metrics["n_failed_runs"] = float(failed)
    summary = {"designs": {design: {"seeds": seeds[design], "n_runs": len(groups[design])} for design in groups}}
    return metrics, summary


try:
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover - hydra is a dependency
    _HydraCallback = object  # type: ignore[misc,assignment]


def _quoted(value: str) -> str:
    """A Hydra override value as a quoted string (any path: spaces, colons, quotes)."""
    # Hydra's grammar: a backslash is an escape only before a quote (or the closing quote).
    escaped = re.sub(r"(\\*)'", lambda match: match.group(1) * 2 + "\\'", value)
    trailing = len(escaped) - len(escaped.rstrip("\\"))
    return "'" + escaped + "\\" * trailing + "'"


def job_overrides(parent_id: str | None, sweep_dir: str, environ: Mapping[str, str]) -> list[str]:
    """Hydra overrides that make each job of a multirun self-sufficient in any process on any launcher:
    the parent run id and lme's path variables set around the job (`hydra.job.env_set`), and the sweep
    directory as an absolute path (a worker's current directory may not be the launch directory)."""
    env = {PARENT_ENV: parent_id} if parent_id else {}
    env |= {name: environ[name] for name in FORWARDED_ENV if environ.get(name)}
    overrides = [f"++hydra.job.env_set.{name}={_quoted(value)}" for name, value in env.items()]
    overrides.append(f"hydra.sweep.dir={_quoted(str(Path(sweep_dir).absolute()))}")
    return overrides


BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def runs_jobs_here(config: Any) -> bool:
    """Whether the sweep's jobs run in this process, one after another (Hydra's basic launcher)."""
    launcher = config.hydra.get("launcher") if config.get("hydra") is not None else None
    return launcher is not None and str(launcher.get("_target_", "")) == BASIC_LAUNCHER


class MultirunParent(_HydraCallback):
    """Hydra callback: a parent MLflow run around a multirun, with across-seed measures at the end.

    `on_multirun_start`/`on_multirun_end` run in the launching process; `on_job_start` runs wherever
    the launcher runs the job (this process, a joblib worker, a Ray worker, a SLURM node). The callback
    is pickled to those workers with the rest of Hydra's context, so it carries only plain data there."""

    def __init__(self) -> None:
        self.parent: JobRun | None = None
        self.settings: TrackingSettings | None = None
        self.prefetch: Any = None  # the thread loading the data file for this process's jobs, if any

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}  # the parent's client (open connections) stays in the launching process

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.parent = None
        self.prefetch = None
        self.settings = state.get("settings")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from omegaconf import OmegaConf, read_write

        from lme.config_check import validate_config
        from lme.errors import EXIT_BAD_INPUT, LmeError

        try:  # the sweep's common config, before the parent run exists (each job checks its own again)
            validate_config(config)
        except LmeError as exc:
            import sys

            print(f"lme: error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_BAD_INPUT) from None
        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        self.settings = TrackingSettings(**tracking)  # type: ignore[arg-type]
        if runs_jobs_here(config):  # the jobs will load the data file in this process: start now
            from lme.app import prefetch_dataset

            self.prefetch = prefetch_dataset(config)
            if self.prefetch is not None:  # import litellm now, while the file decompresses on another core,
                from lme.models.litellm_loader import import_litellm  # not on the event loop at the first call

                import_litellm()
        if self.settings.enabled:
            overrides = list(config.hydra.overrides.task)
            dataset = str(config.dataset.name) if not _sweeps(overrides, "dataset") else "datasets"
            design = str(config.design_name) if not _sweeps(overrides, "+design", "design") else "designs"
            self.parent = JobRun(
                self.settings,
                run_name=f"{design}-{dataset}-multirun",
                tags={"lme.role": "parent", "lme.design": str(config.design_name), "lme.dataset": dataset,
                      "lme.overrides": " ".join(overrides)},
            )
            self.parent.log_params({"sweep.overrides": " ".join(overrides)[:_MAX_PARAM_CHARS]})
            os.environ[PARENT_ENV] = self.parent.run_id  # jobs in this process (the basic launcher)
            atexit.register(self._fail_if_open)  # a job that stops the sweep must not leave the parent RUNNING
        # Every launcher composes each job's config from `hydra.overrides.hydra` + the job's overrides.
        extra = job_overrides(self.parent.run_id if self.parent else None, str(config.hydra.sweep.dir), os.environ)
        with read_write(config.hydra.overrides):
            config.hydra.overrides.hydra.extend(extra)

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """In the job's process: start from the launch directory, as a job of the basic launcher does."""
        launch_dir = str(config.hydra.runtime.cwd)
        if os.getcwd() != launch_dir and Path(launch_dir).is_dir():
            os.chdir(launch_dir)

    def _fail_if_open(self) -> None:
        """At exit, a parent still open was left by a job that stopped the study (a cap, a failure no retry
        can fix, Ctrl-C): it ends FAILED (KILLED when stopped on purpose) with the job's reason."""
        if self.parent is not None:
            status, reason = STOPPED or ("FAILED", "a job stopped the sweep before it ended")
            self.parent.finish(status, f"{reason} (see the job's run)")
            self.parent = None

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self.parent is None or self.settings is None:
            return
        status, failure = "FINISHED", None
        try:
            metrics, summary = summarise_children(self.settings, self.parent.run_id)
            self.parent.log_metrics(metrics)
            self.parent.log_text(json.dumps({"metrics": metrics, **summary}, indent=2, sort_keys=True), "across_runs.json")
            if metrics.get("n_failed_runs"):
                status, failure = "FAILED", f"{int(metrics['n_failed_runs'])} job(s) failed or are incomplete"
            from lme.app import after_multirun  # the parent's own stages: steps.json, the arbiter

            if not after_multirun(config, self.parent, self.settings):
                status, failure = "FAILED", failure or "a stage after the jobs failed"
            print(multirun_summary(metrics, summary, self.parent.run_id, self.settings), flush=True)
        finally:
            if status != "FINISHED":
                FAILED_STUDIES.append(self.parent.run_id)
            self.parent.finish(status, failure)
            self.parent = None
            os.environ.pop(PARENT_ENV, None)


STOPPED: tuple[str, str] | None = None  # (MLflow status, reason) of a job that stopped this process's study
FAILED_STUDIES: list[str] = []  # parent runs of this process that ended FAILED (the exit status says so)


def note_stop(status: str, reason: str) -> None:
    """A job is stopping the study (SystemExit follows): the multirun parent ends with this status and reason."""
    global STOPPED
    STOPPED = (status, reason)


def _sweeps(overrides: list[str], *keys: str) -> bool:
    """Whether the sweep's overrides give the jobs several values of a key starting with one of `keys`."""
    for override in overrides:
        key, _, value = str(override).partition("=")
        if key.lstrip("+~").startswith(tuple(k.lstrip("+") for k in keys)) and ("," in value or "(" in value):
            return True
    return False


def multirun_summary(metrics: Mapping[str, float], summary: Mapping[str, Any], parent_id: str,
                     settings: TrackingSettings) -> str:
    """What a multirun prints at the end: per design, the mean of runs and the count correct in a majority of
    runs, the failed jobs, the parent run and how to look at it."""
    designs = summary.get("designs", {})
    lines = []
    for design, info in sorted(designs.items()):
        prefix = "" if len(designs) == 1 else f"{design}/"
        n_runs = int(info.get("n_runs", 0))
        mean = metrics.get(prefix + "mean_accuracy")
        count = metrics.get(prefix + "majority_correct_count")
        share = metrics.get(prefix + "majority_correct_accuracy")
        threshold = n_runs // 2 + 1
        line = f"multirun, design {design}: {n_runs} run{'s' if n_runs != 1 else ''}"
        if mean is not None:
            line += f", mean of runs {mean:.3f}"
        if count is not None:
            line += f", correct in at least {threshold} of {n_runs}: {int(count)}"
            line += f" ({share:.3f})" if share is not None else ""
        lines.append(line)
    failed = int(metrics.get("n_failed_runs", 0))
    if failed or not designs:
        lines.append(f"multirun: {failed} job(s) failed or are incomplete; they are left out of the measures above")
    uri = settings.uri
    lines.append(f"MLflow parent run {parent_id}; to compare: mlflow ui --backend-store-uri {uri}")
    return "\n".join(lines)
