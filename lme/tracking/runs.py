"""MLflow: one run per job, one parent per multirun with the across-seed measures.

Runs are written through `MlflowClient` with explicit run ids (no global
"active run"), so jobs in other processes attach to the parent by the id in
`LME_PARENT_RUN_ID`. The tracking store is SQLite (`sqlite:///mlflow.db`) or a
tracking server (`tracking.uri=http://...`), artifacts go to `mlruns/`. mlflow
is imported lazily.

The multirun parent (a Hydra callback) is `lme.study.multirun.MultirunParent`; a job
that stops the study records why here (`note_stop`) for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.util.hashing import sha256_text
from lme.util.secrets import clean
from lme.util.errors import LmeError
from lme.tracking.store_template import is_new, sqlite_path

PARENT_ENV = "LME_PARENT_RUN_ID"
# lme's own path variables, read by the job's config (`${oc.env:...}`): forwarded to jobs in other processes.
# Never keys: a key would be written to the job's .hydra/hydra.yaml; workers take keys from their environment.
FORWARDED_ENV = ("LME_CACHE_DIR", "LME_DATA_DIR", "LME_JUDGE_TEMPLATES", "LME_STUDY_INSTRUCTIONS")
OUTCOMES_ARTIFACT = "outcomes.jsonl"
MAX_PARAM_CHARS = 500


TRACE_MODES = ("full", "metadata", "off")  # tracking.traces (lme.tracking.traces)


@dataclass(frozen=True)
class TrackingSettings:
    enabled: bool = True
    uri: str = "sqlite:///mlflow.db"
    artifact_location: str | None = "mlruns"
    experiment: str = "lme"
    traces: str = "full"  # one trace per question (lme.tracking.traces): one of TRACE_MODES


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
    `AKIA...`; `lme.util.secrets` has the rules), in a string or any string inside a list or mapping."""
    from lme.util import secrets

    return secrets.looks_like_a_key(value)


def params_from_config(config: Mapping[str, Any]) -> dict[str, str]:
    """MLflow params: secrets dropped, long texts replaced by their SHA-256 (the text is an artifact).

    A value that looks like an API key under any other name is refused (`LmeError`): keys belong in
    the environment, named by a model's `api_key_env`."""
    from lme.util import secrets

    params = {}
    for name, value in flatten(config).items():
        if secrets.secret_named(name.rsplit(".", 1)[-1]):
            continue
        found = secrets.findings(value, name)
        if found:  # refused, named by its flattened key (never the secret)
            raise secrets.refusal(name, found[0].kind)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > MAX_PARAM_CHARS:
            text = "sha256:" + sha256_text(text)
        params[name] = text
    return params


def import_store_modules(settings: TrackingSettings) -> None:
    """Import MLflow's client, and for a SQLite store its SQLAlchemy store (with SQLAlchemy and Alembic), without
    opening anything: a single run does it while its data file loads on another core, so that `client_for`
    later finds them imported (about 1.5 s of imports on 2 cores, otherwise after the load)."""
    _import_mlflow(sqlite_store=sqlite_path(settings.uri) is not None)


def _import_mlflow(sqlite_store: bool = False):
    """MLflow's client class (and, asked for, its SQLite store's modules), imported with a Ctrl-C during the
    imports handed on after them (lme.util.interrupts)."""
    from lme.util.interrupts import interrupts_held

    with interrupts_held():
        from mlflow.tracking import MlflowClient

        if sqlite_store:
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import logging

    # MLflow logs a SQL error's traceback before it raises it (mlflow.store.db.utils); lme says it in one sentence
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    return MlflowClient


def client_for(settings: TrackingSettings, create: bool = True):
    """A client of the tracking store; the first in this process checks the store (`check_store`) and opens it
    under `_store_lock`. `create`: a SQLite store that does not exist is made, whole or not at all
    (`lme.tracking.store_template.create_whole`), as a run does; otherwise (a command that reads a store: report, runs
    repair, export, ui) it is refused (`LmeError`: "no MLflow store at PATH", with the names close to it). Every
    fault in opening the store is one sentence (`LmeError`): a URI MLflow cannot use, an unreachable server, a
    store file that is damaged, empty, of another schema revision, locked, a directory, or an artifact folder
    that is a file. The store's file is never changed to repair it."""
    client_class = _import_mlflow(sqlite_store=sqlite_path(settings.uri) is not None)
    if settings.uri in _READY:
        return client_class(tracking_uri=settings.uri)
    if not create:
        _quick_http_failures()
    with _store_lock(settings):
        path = check_store(settings, create=create)
        if path is not None and is_new(path):
            _create_store(settings, client_class, path)
        try:
            client = client_class(tracking_uri=settings.uri)
            client.search_experiments(max_results=1)  # opens the store now, inside the lock
        except Exception as exc:  # noqa: BLE001 - MLflow's, SQLAlchemy's, SQLite's: one sentence naming the store
            raise store_failure(settings, exc) from None
        return client


MLFLOW_STORE = "MLflow tracking store"
# The tables every MLflow store holds since MLflow 1 (its own migrations add the rest): one missing is a
# broken store, not an old one.
STORE_TABLES = ("alembic_version", "experiments", "runs", "tags", "params", "metrics")
_MOVE_AWAY = ("move it away (it keeps whatever runs it holds; a run then starts a new store) or name another store "
              "with tracking.uri=sqlite:///PATH")
SERVER_PROBE_TIMEOUT_S = 5.0  # how long a tracking server's address may take to accept a connection


def _store_kind():
    from lme.util.sqlite import StoreKind

    return StoreKind(what=MLFLOW_STORE, schema="", tables={},
                     loss="the moved file keeps its runs; the new store starts without them")


def check_store(settings: TrackingSettings, create: bool = True) -> Path | None:
    """Check the store `settings.uri` names before MLflow opens it, each fault as one `LmeError` sentence; returns
    a SQLite store's file (None for other stores). A malformed `sqlite:` URI, a file that is missing (unless
    `create`), empty (0 bytes: unless `create`, which replaces it), a directory or not a regular file, not an
    SQLite file, locked past `LME_SQLITE_BUSY_TIMEOUT_S`, or without MLflow's tables; a tracking server whose
    address accepts no connection within `SERVER_PROBE_TIMEOUT_S`; a local artifact folder
    (`tracking.artifact_location`) that is not a folder. A SQLite store's schema revision is MLflow's to check
    (`store_failure` says it in one sentence)."""
    uri = settings.uri
    _check_artifact_folder(settings)
    if uri.startswith(("http://", "https://")):
        _check_server(uri)
        return None
    if not uri.lower().startswith("sqlite:"):
        return None
    path = sqlite_path(uri)
    if path is None:
        if uri.startswith("sqlite:///") and uri.removeprefix("sqlite:///").strip():
            return None  # a URI with options (`?mode=ro`, `file:`): MLflow's to open
        raise LmeError(f"tracking.uri={uri}: expected sqlite:///PATH (three slashes, then the store's file, e.g. "
                       "sqlite:///mlflow.db).")
    _check_store_file(path, uri, create)
    return path


def _check_store_file(path: Path, uri: str, create: bool) -> None:
    import sqlite3
    import stat

    from lme.util.sqlite import SQLITE_HEADER, busy_timeout_s, cut_short, store_error

    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise LmeError(f"{path}: a broken link stands where the {MLFLOW_STORE} should be; {_MOVE_AWAY}.") from None
        if create:
            return
        raise LmeError(f"no MLflow store at {path} (tracking.uri={uri}){_did_you_mean(path)}") from None
    except OSError as exc:
        raise store_error(path, _store_kind(), exc, "open") from None
    if stat.S_ISDIR(info.st_mode):
        raise LmeError(f"{path}: a directory stands where the {MLFLOW_STORE} file should be; move it away, or name "
                       "the store's file with tracking.uri=sqlite:///PATH.")
    if not stat.S_ISREG(info.st_mode):
        raise LmeError(f"{path}: not a regular file, so not an {MLFLOW_STORE}; {_MOVE_AWAY}.")
    if info.st_size == 0:
        if create:
            return  # holds nothing: replaced by a new store (lme.tracking.store_template.create_whole)
        raise LmeError(f"{path}: empty (0 bytes), not an {MLFLOW_STORE}: no run was ever recorded there; run a study "
                       f"first (python -m lme), or name another store with tracking.uri=sqlite:///PATH.")
    try:
        with open(path, "rb") as handle:
            head = handle.read(100)
    except OSError as exc:
        raise store_error(path, _store_kind(), exc, "open") from None
    if head[:len(SQLITE_HEADER)] != SQLITE_HEADER or len(head) < 100:
        raise LmeError(f"{path}: not an {MLFLOW_STORE} (not an SQLite file: damaged, zeroed or another kind of "
                       f"file); {_MOVE_AWAY}.")
    cut = cut_short(path, head, info.st_size)
    if cut is not None:  # SQLite reads a missing page's bytes as zeros, silently
        raise LmeError(f"{path}: the {MLFLOW_STORE} is cut short ({cut}: damaged by a copy or a full disk), so runs "
                       f"or their data may be lost; restore it from a backup (or save what it holds with "
                       f"`sqlite3 {path} .recover`), then {_MOVE_AWAY}.")
    try:
        conn = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True, timeout=busy_timeout_s())
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            revisions = conn.execute("SELECT COUNT(*) FROM alembic_version").fetchone()[0] \
                if "alembic_version" in tables else 0
        finally:
            conn.close()
    except (sqlite3.Error, OSError) as exc:
        raise store_error(path, _store_kind(), exc, "open") from None
    missing = [table for table in STORE_TABLES if table not in tables]
    if missing or revisions != 1:
        what = (f"it lacks MLflow's table(s) {', '.join(missing)}" if missing
                else f"its alembic_version table holds {revisions} schema revisions, not one")
        raise LmeError(f"{path}: an SQLite file but not a whole {MLFLOW_STORE} ({what}); {_MOVE_AWAY}.")


def _did_you_mean(path: Path) -> str:
    """"; did you mean X?" with the SQLite files beside `path` whose names are close to its, else what to do."""
    import difflib

    folder = path.parent if str(path.parent) else Path(".")
    candidates = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith(".") or not entry.is_file():
                continue
            with contextlib.suppress(OSError), open(entry.path, "rb") as handle:
                if handle.read(16) == b"SQLite format 3\x00":
                    candidates.append(entry.name)
    close = difflib.get_close_matches(path.name, candidates, n=3, cutoff=0.5)
    if close:
        return "; did you mean " + " or ".join(f"tracking.uri=sqlite:///{folder / name}" for name in close) + "?"
    if not folder.is_dir():
        return f"; its folder {folder} does not exist either: check the path in tracking.uri=sqlite:///PATH."
    return "; run a study first (python -m lme), or name the store with tracking.uri=sqlite:///PATH."


def _check_artifact_folder(settings: TrackingSettings) -> None:
    location = settings.artifact_location
    if not location or location.startswith("mlflow-artifacts:") or settings.uri.startswith(("http://", "https://")):
        return
    if "://" in location:
        if not location.startswith("file://"):
            return
        from urllib.parse import unquote, urlparse

        location = unquote(urlparse(location).path)
    folder = Path(location)
    if os.path.lexists(folder) and not folder.is_dir():
        raise LmeError(f"{folder}: a file stands where the MLflow artifact folder (tracking.artifact_location) should "
                       "be; move it away, or name another folder with tracking.artifact_location=PATH.")


def _check_server(uri: str) -> None:
    """`LmeError` at once when nothing accepts a connection at the tracking server's address (MLflow would retry
    for minutes)."""
    import socket
    from urllib.parse import urlparse

    try:
        parsed = urlparse(uri)
        host, port = parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError as exc:
        raise LmeError(f"tracking.uri={uri}: not a tracking server's address ({exc}).") from None
    if not host:
        raise LmeError(f"tracking.uri={uri}: no host in the tracking server's address (expected http://HOST:PORT).")
    try:
        socket.create_connection((host, port), timeout=SERVER_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise LmeError(f"tracking.uri={uri}: no tracking server answers at {host}:{port} ({reason}); start it "
                       "(mlflow server ...) or fix tracking.uri.") from None


# MLflow retries a tracking server's failing requests for minutes by default (7 retries, backoff factor 2, 120 s
# each): a command that only reads a store gives up sooner, unless these are set.
QUICK_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
              "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def _quick_http_failures() -> None:
    for name, value in QUICK_HTTP.items():
        os.environ.setdefault(name, value)


def store_failure(settings: TrackingSettings, exc: BaseException) -> LmeError:
    """The one sentence for `exc`, raised by MLflow (or SQLAlchemy, SQLite, the network) while opening or reading the
    tracking store `settings.uri`."""
    from lme.util.errors import first_line

    if isinstance(exc, LmeError):
        return exc
    uri = settings.uri
    path = sqlite_path(uri)
    cause = _low_level_cause(exc)
    if path is not None and cause is not None:
        from lme.util.sqlite import store_error

        return store_error(path, _store_kind(), cause, "open")
    text = first_line(exc)
    found = re.search(r"found version (\S+), but expected (\S+?)\)", text)
    if found:
        where = str(path) if path is not None else f"tracking.uri={uri}"
        from importlib.metadata import version

        return LmeError(f"{where}: an {MLFLOW_STORE} of schema revision {found[1]}, which MLflow {version('mlflow')} "
                        f"(revision {found[2]}) does not read; open it with the MLflow that made it, or back it up and "
                        f"run `mlflow db upgrade {uri}` if it is older.")
    if "unsupported uri" in text.lower() or "could not find a registered" in text.lower():
        return LmeError(f"tracking.uri={uri}: MLflow cannot use this tracking URI; use sqlite:///PATH, http(s)://HOST, "
                        "postgresql://, mysql://, mssql:// or databricks.")
    where = str(path) if path is not None else f"tracking.uri={uri}"
    return LmeError(f"{where}: the {MLFLOW_STORE} cannot be opened ({type(exc).__name__}: {text[:300]}); check "
                    "tracking.uri and the store.")


def _create_store(settings: TrackingSettings, client_class: Any, path: Path) -> None:
    """A new SQLite store at `path`, whole or not at all (`lme.tracking.store_template.create_whole`): MLflow's migrations run
    on a temporary file beside it. A failure (a full disk) is one sentence; nothing is left at `path`."""
    from lme.tracking.store_template import create_whole

    def make(temporary: Path) -> None:
        client_class(tracking_uri=f"sqlite:///{temporary.absolute()}").search_experiments(max_results=1)

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_whole(path, make)
    except Exception as exc:  # noqa: BLE001 - one sentence; nothing was made at `path`
        from lme.util.errors import first_line
        from lme.util.sqlite import store_error

        cause = _low_level_cause(exc)
        if cause is None:
            raise store_failure(settings, exc) from None
        detail = first_line(cause)
        if store_error(path, _store_kind(), cause, "create").fault == "full":
            raise LmeError(f"{path}: the {MLFLOW_STORE} could not be created ({detail}: the disk is full or a file "
                           "size limit was reached); nothing was made there: free space and run again.") from None
        raise LmeError(f"{path}: the {MLFLOW_STORE} could not be created ({detail}); nothing was made there: make "
                       "its folder writable, or name another store with tracking.uri=sqlite:///PATH.") from None


def _low_level_cause(exc: BaseException) -> BaseException | None:
    """The SQLite or system error under `exc` (SQLAlchemy's `.orig`, a chained cause), if any."""
    import sqlite3

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (sqlite3.Error, OSError)):
            return cause
        seen.add(id(cause))
        cause = getattr(cause, "orig", None) or cause.__cause__ or cause.__context__
    return None


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

    path = Path(uri.removeprefix("sqlite:///"))  # sqlite:////abs/path leaves /abs/path
    digest = sha256_text(str(path.absolute()))[:16]
    with open(Path(tempfile.gettempdir()) / f"lme-mlflow-store-{digest}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
            _READY.add(uri)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# The runs table as lme's view: MLflow's runs table shows Source, Models and Dataset by default and has no
# per-experiment default columns; a shared view (an experiment tag `mlflow.sharedViewState.<key>`, opened with
# `?viewStateShareKey=<key>`, the mechanism behind the UI's "Share" button) selects the columns and the order.
RUNS_VIEW_KEY = "lme"
RUNS_VIEW_TAG = "mlflow.sharedViewState." + RUNS_VIEW_KEY
RUNS_VIEW_COLUMNS = (  # in this order after the run's name (MLflow keeps Created first)
    "metrics.`accuracy`",
    "metrics.`task_averaged_accuracy`",
    "params.`design`",
    "tags.`lme.seed`",
    "metrics.`mean_accuracy`",           # a one-design multirun's parent: the mean of its runs
    "metrics.`majority_correct_count`",  # ... and the questions correct in a majority of them
    "metrics.`reader_cost_usd`",
    "attributes.`Dataset`",
)


def runs_view_state() -> dict[str, Any]:
    """lme's runs-table view: accuracy, task-averaged accuracy, design, seed, reader cost and dataset per job
    (the parent of a one-design multirun: its mean of runs and majority count), sorted by accuracy, which
    MLflow lists flat (sorted by creation, it folds the jobs under their parent)."""
    return {"searchFilter": "", "orderByKey": "metrics.`accuracy`", "orderByAsc": False,
            "selectedColumns": list(RUNS_VIEW_COLUMNS), "columnOrder": ["attributes.`Run Name`", *RUNS_VIEW_COLUMNS]}


UI_HOST, UI_PORT = "127.0.0.1", 5000  # where `python -m lme ui` serves MLflow's UI by default


def is_server(settings: TrackingSettings) -> bool:
    """Whether the store is a tracking server (`http(s)://`), which serves its own UI."""
    return settings.uri.startswith(("http://", "https://"))


def runs_view_url(settings: TrackingSettings, experiment: str, base: str | None = None) -> str:
    """Where lme's runs-table view opens: on the tracking server, on `base`, or on `python -m lme ui`'s default
    address."""
    if base is None:
        base = settings.uri if is_server(settings) else f"http://{UI_HOST}:{UI_PORT}"
    return f"{base.rstrip('/')}/#/experiments/{experiment}/runs?viewStateShareKey={RUNS_VIEW_KEY}"


def ui_hint(settings: TrackingSettings, experiment: str) -> str:
    """How to look at a study's runs: `python -m lme ui` (naming the store unless it is the default one), then
    the address of lme's runs view; on a tracking server, the address alone."""
    url = runs_view_url(settings, experiment)
    if is_server(settings):
        return f"open {url}"
    store = "" if settings.uri == TrackingSettings.uri else f" tracking.uri={settings.uri}"
    return f"python -m lme ui{store}, then open {url}"


def run_stamp(folder: str | Path) -> str:
    """What tells two runs (or two sweeps) of one design apart in their names: the name of the folder that holds
    their outputs (Hydra's start time, `2026-12-07_02-15-34`), so that a run and its folder name each other."""
    return Path(folder).absolute().name or time.strftime("%Y-%m-%d_%H-%M-%S")


def job_run_name(design: str, dataset: str, seed: Any, stamp: str) -> str:
    return f"{design}-{dataset}-seed{seed}-{stamp}"


MULTIRUN = "multirun"


def parent_run_name(design: str, dataset: str, stamp: str) -> str:
    return f"{design}-{dataset}-{MULTIRUN}-{stamp}"


def names_parent(name: str, run_name: str) -> bool:
    """Whether `name` names the parent run `run_name`: its whole name, or the name without its stamp
    (`bm25-sample-multirun` for every `bm25-sample-multirun-<time>`)."""
    return name == run_name or (name.endswith("-" + MULTIRUN) and run_name.startswith(name + "-"))


def _runs_view_value() -> str:
    return json.dumps(runs_view_state(), sort_keys=True)


_VIEW_TAG_ATTEMPTS = 3


def lost_an_insert_race(error: BaseException) -> bool:
    """Whether a store refused a write because another writer inserted the same key first (SQLite's `UNIQUE
    constraint failed`, PostgreSQL's `violates unique constraint`, MySQL's `Duplicate entry`), through MLflow's
    client or its tracking server."""
    text = str(error).lower()
    return "unique constraint" in text or "duplicate entry" in text


def _ensure_runs_view(client: Any, experiment: Any) -> None:
    """Give the experiment lme's runs view, unless it has it. Jobs starting together on one store may all
    find the tag missing, and MLflow writes a tag by reading, then inserting: all but the first insert fail
    on the tag's unique key. After such a failure the tag is read back: when another job wrote this view,
    that is done; otherwise the write is tried again (now an update). Any other failure is raised."""
    value = _runs_view_value()
    for attempt in range(_VIEW_TAG_ATTEMPTS):
        if (experiment.tags or {}).get(RUNS_VIEW_TAG) == value:
            return
        try:
            client.set_experiment_tag(experiment.experiment_id, RUNS_VIEW_TAG, value)
            return
        except Exception as error:
            if not lost_an_insert_race(error) or attempt == _VIEW_TAG_ATTEMPTS - 1:
                raise
            experiment = client.get_experiment(experiment.experiment_id)


def experiment_id(settings: TrackingSettings) -> str:
    """The id of the study's experiment, created when new; it carries lme's runs-table view (`runs_view_url`)."""
    client = client_for(settings)
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        try:
            client.create_experiment(settings.experiment, artifact_location=artifact_location(settings),
                                     tags={RUNS_VIEW_TAG: _runs_view_value()})  # one transaction with the view
        except Exception:  # another job created it first
            experiment = client.get_experiment_by_name(settings.experiment)
            if experiment is None:
                raise
        experiment = experiment or client.get_experiment_by_name(settings.experiment)
    if (settings.uri, settings.experiment) not in _VIEW_SET:
        _ensure_runs_view(client, experiment)
        _VIEW_SET.add((settings.uri, settings.experiment))
    return experiment.experiment_id


_VIEW_SET: set[tuple[str, str]] = set()  # (store, experiment) this process has given lme's runs view


# MLflow's compare page opens on a parallel-coordinates plot: the first three params that differ between the runs
# (alphabetically: `choice.*` first) coloured by the first metric they share, in the order the store returns a
# run's metrics, which is the order they were first logged. A run logs these first, so that plot is of accuracy.
LEADING_METRICS = ("accuracy", "task_averaged_accuracy", "mean_accuracy", "majority_correct_accuracy",
                   "majority_correct_count")


def leading_first(metrics: Mapping[str, float]) -> dict[str, float]:
    """`metrics` with `LEADING_METRICS` first, in that order (a design's too: `bm25/mean_accuracy`), then the rest
    as given."""
    def rank(item: tuple[int, tuple[str, float]]) -> tuple[int, int]:
        name = item[1][0].rsplit("/", 1)[-1]
        return (LEADING_METRICS.index(name) if name in LEADING_METRICS else len(LEADING_METRICS), item[0])

    return dict(item for _, item in sorted(enumerate(metrics.items()), key=rank))


DATASET_DIGEST_CHARS = 12  # the Dataset column's digest: the file's SHA-256, shortened (the profile holds all of it)


@dataclass(frozen=True)
class DataInput:
    """What a job read: the data file, its digest, and the questions selected from it."""

    name: str
    path: Path
    sha256: str
    n_questions: int
    question_ids_sha256: str


@contextlib.contextmanager
def cleaned_file(path: Path, limit: int = 256 * 2**20):
    """`path`, or a copy of it (same name, in a temporary folder) cleaned by `lme.util.secrets.clean` when the file holds a
    secret: an artifact lme wrote (a journal holding a provider's error, a table) never carries a secret into the
    store. A file that is not UTF-8 text, or over `limit` bytes, is given as it is."""
    try:
        if path.stat().st_size > limit:
            raise ValueError
        text = path.read_bytes().decode("utf-8")
    except (OSError, ValueError):
        yield path
        return
    cleaned = clean(text)
    if cleaned == text:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="lme-artifact-") as folder:
        copy = Path(folder) / path.name
        copy.write_text(cleaned, encoding="utf-8")
        yield copy


class JobRun:
    """One MLflow run, written through the client: every run name, tag, param, text, table and artifact through
    `lme.util.secrets.clean` (the one sanitizer on every path out)."""

    def __init__(self, settings: TrackingSettings, run_name: str, tags: Mapping[str, str], parent_id: str | None = None,
                 owner: Mapping[str, str] | None = None):
        from lme.util.code_version import code_tags

        self.settings = settings
        self.client = client_for(settings)
        # which code made the run (git commit, versions; once per process), then the caller's tags and the owner
        all_tags = code_tags() | dict(tags) | dict(owner or owner_tags())  # `owner`: a study's process, its helper
        if parent_id:
            all_tags["mlflow.parentRunId"] = parent_id
        experiment = experiment_id(settings)
        repair_orphans(settings, experiment_ids=[experiment], quiet=True)  # runs a SIGKILL left RUNNING
        run = self.client.create_run(experiment, run_name=clean(run_name), tags=clean(all_tags))
        self.run_id = run.info.run_id
        self.experiment_id = experiment

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)) for key, value in clean(dict(params)).items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, float(value), now, 0) for key, value in leading_first(metrics).items() if value == value]
        for start in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[start : start + 500])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """A file lme wrote, logged as it is, or (when it holds a secret by `lme.util.secrets.clean`) a cleaned copy."""
        with cleaned_file(Path(path)) as logged:
            self.client.log_artifact(self.run_id, str(logged), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, clean(text), artifact_file)

    def log_dataset(self, data: DataInput) -> None:
        """The job's input as an MLflow dataset: the runs table's Dataset column shows it, and runs can be
        filtered by it (`dataset.name = 's'`, `dataset.digest = '...'`)."""
        from mlflow.entities import Dataset

        dataset = Dataset(
            name=data.name,
            digest=data.sha256[:DATASET_DIGEST_CHARS],
            source_type="local",
            source=json.dumps({"uri": clean(str(data.path))}),
            profile=json.dumps({"num_questions": data.n_questions, "sha256": data.sha256,
                                "question_ids_sha256": data.question_ids_sha256}),
        )
        self._log_evaluation_input(dataset)

    def _log_evaluation_input(self, dataset: Any, attempts: int = 5) -> None:
        """Log `dataset` (an MLflow `Dataset`) as this run's evaluation input. The store inserts a dataset it has not seen (experiment, name, digest) in its
        own step, so jobs of one sweep logging the same file at once can collide on that insert
        (`UNIQUE constraint failed: datasets...`); the dataset then exists, and the next attempt links to it."""
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.exceptions import MlflowException

        dataset_input = DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "evaluation")])
        for attempt in range(attempts):
            try:
                self.client.log_inputs(self.run_id, datasets=[dataset_input])
                return
            except MlflowException as error:
                if not lost_an_insert_race(error) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def adopt_children_dataset(self) -> bool:
        """Log on this (parent) run the dataset its finished children all read, so the runs table shows it on the
        parent's row too; nothing when they read different files. Returns whether one was logged."""
        children = self.client.search_runs([experiment_id(self.settings)],
                                           filter_string=f"tags.mlflow.parentRunId = '{self.run_id}'", max_results=10_000)
        datasets = {(d.dataset.name, d.dataset.digest): d.dataset for child in children
                    for d in (child.inputs.dataset_inputs if child.inputs else [])}
        if len(datasets) != 1:
            return False
        (dataset,) = datasets.values()
        self._log_evaluation_input(dataset)
        return True

    def log_table(self, rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
        """Rows (one mapping each, the same keys) as an MLflow table artifact, viewable in the UI."""
        columns = list(rows[0]) if rows else []
        table = {clean(column): [clean(row.get(column)) for row in rows] for column in columns}
        self.client.log_table(self.run_id, table, artifact_file)

    def register_instructions(self, design: str, texts: Mapping[str, str]) -> dict[str, str]:
        """Each step's instruction as a version of the prompt `lme-<design>-<step>` in MLflow's Prompt Registry,
        linked to this run (`register_instructions`); step -> `prompts:/name/version`."""
        return register_instructions(self.settings, self.client, self.run_id, self.experiment_id, clean(design),
                                     clean(dict(texts)))

    def finish(self, status: str = "FINISHED", failure: str | None = None) -> None:
        """End the run; `failure` (why it failed or stopped) goes into the tag `lme.failure`."""
        if failure:
            self.client.set_tag(self.run_id, FAILURE_TAG, clean(failure)[:5000])
        self.client.set_terminated(self.run_id, status)



class RemoteRun:
    """A `JobRun` that this process's helper (`lme.tracking.helper`) holds: the same methods, each carried out by the
    helper while this process waits (its interpreter lock released), so that a study's process never imports
    MLflow (about 2 s of imports at start-up, on the path to the first request). A call that fails raises
    `lme.tracking.helper.HelperError` with MLflow's reason in one sentence."""

    def __init__(self, settings: TrackingSettings, run_name: str, tags: Mapping[str, str], parent_id: str | None = None):
        from lme.tracking.helper import helper

        self.settings = settings
        self._helper = helper()  # the run lives in this helper: one that stopped is not replaced for it
        self.run_id, self.experiment_id = self._helper.call(
            "run", ("open", settings, run_name, dict(tags), parent_id, owner_tags()))

    def _method(self, name: str, *args: Any) -> Any:
        return self._helper.call("run", ("method", self.run_id, name, args))

    def log_params(self, params: Mapping[str, str]) -> None:
        self._method("log_params", dict(params))

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        self._method("log_metrics", dict(metrics))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._method("log_artifact", str(Path(path).absolute()), artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._method("log_text", text, artifact_file)

    def log_dataset(self, data: DataInput) -> None:
        self._method("log_dataset", data)

    def adopt_children_dataset(self) -> bool:
        return bool(self._method("adopt_children_dataset"))

    def log_table(self, rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
        self._method("log_table", [dict(row) for row in rows], artifact_file)

    def register_instructions(self, design: str, texts: Mapping[str, str]) -> None:
        """Carried out by the helper while the job goes on (about 0.1 s a step on a SQLite store): a failure is
        one warning on stderr, never a reason to stop the job; the run's `finish` comes after it."""
        self._helper.send(("later", ("method", self.run_id, "register_instructions", (design, dict(texts)))))

    def finish(self, status: str = "FINISHED", failure: str | None = None) -> None:
        """End the run. A job that is stopping (`failure` given: a full disk, a cap) goes on to say why and how to
        resume when the store cannot record its end: one warning line (`lme runs repair` marks the run later)."""
        try:
            self._method("finish", status, failure)
        except LmeError as exc:
            if failure is None:
                raise
            import sys

            print(f"lme: warning: MLflow run {self.run_id} could not be marked {status} ({exc}); `python -m lme runs "
                  "repair` marks it KILLED once the store is fixed.", file=sys.stderr, flush=True)


def open_run(settings: TrackingSettings, run_name: str, tags: Mapping[str, str],
             parent_id: str | None = None) -> RemoteRun:
    """A study's run (a job's, a multirun's parent), held by this process's helper (`RemoteRun`)."""
    return RemoteRun(settings, run_name, tags, parent_id)


def study_call(name: str, *args: Any) -> Any:
    """`summarise_children` or `children_rows` (by `name`), carried out by this process's helper, where MLflow is."""
    from lme.tracking.helper import helper

    return helper().call("run", ("function", name, args))


_RUN_METHODS = frozenset({"log_params", "log_metrics", "log_artifact", "log_text", "log_dataset",
                          "adopt_children_dataset", "log_table", "register_instructions", "finish"})


def serve_run(runs: dict[str, JobRun], request: tuple[Any, ...]) -> Any:
    """The helper's side of `RemoteRun` and `study_call`: carry out `request` on the runs it holds (`runs`, by id).
    A fault of the store or of an artifact's file (a full disk, a store moved or damaged) is `LmeError`, one
    sentence naming the file (`run_failure`)."""
    try:
        return _serve_run(runs, request)
    except (LmeError, ValueError, KeyError):
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow's, SQLAlchemy's, SQLite's, the system's: one sentence
        settings, artifact = None, None
        if request[0] == "open" or (request[0] == "function" and request[2]):
            settings = request[1] if request[0] == "open" else request[2][0]
        elif request[0] == "method" and request[1] in runs:
            settings = runs[request[1]].settings
            artifact = _artifact_written(request[1], request[2], request[3])
        if not isinstance(settings, TrackingSettings):
            raise
        raise run_failure(settings, exc, artifact) from None


def _artifact_written(run_id: str, method: str, args: Sequence[Any]) -> tuple[str, str] | None:
    """(run id, artifact path) of the artifact a run's method writes, if it writes one."""
    if method == "log_artifact" and args:
        folder = args[1] if len(args) > 1 and args[1] else ""
        return run_id, f"{folder}/{Path(args[0]).name}".lstrip("/")
    if method in ("log_text", "log_table") and len(args) > 1:
        return run_id, str(args[1])
    return None


def run_failure(settings: TrackingSettings, exc: BaseException, artifact: tuple[str, str] | None = None) -> LmeError:
    """The one sentence for `exc`, raised while writing a run to the store `settings.uri`: a file of the run's
    artifacts that could not be written (an `OSError` naming it, or `artifact`: the run id and artifact path being
    written), else the store's sentence (`store_failure`)."""
    from lme.util.errors import first_line

    cause = _low_level_cause(exc)
    if isinstance(cause, OSError) and (cause.filename or artifact):
        import errno

        name = cause.filename or artifact_place(settings, *artifact)  # type: ignore[misc]
        detail = cause.strerror or first_line(cause)
        if cause.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return LmeError(f"{name}: an MLflow artifact could not be written ({detail}: the disk is full or a file "
                            "size limit was reached); free space and run again.")
        return LmeError(f"{name}: an MLflow artifact could not be logged ({detail}); check this file, the artifact "
                        "folder (tracking.artifact_location) and their permissions.")
    return store_failure(settings, exc)


def _serve_run(runs: dict[str, JobRun], request: tuple[Any, ...]) -> Any:
    kind = request[0]
    if kind == "open":
        settings, run_name, tags, parent_id, owner = request[1:]
        run = JobRun(settings, run_name, tags, parent_id, owner=owner)
        runs[run.run_id] = run
        return run.run_id, run.experiment_id
    if kind == "method":
        run_id, name, args = request[1:]
        if name not in _RUN_METHODS:
            raise ValueError(f"no run method {name!r}")
        if run_id not in runs:
            raise KeyError(f"run {run_id} is not open in this helper")
        result = getattr(runs[run_id], name)(*args)
        if name == "finish":
            del runs[run_id]
        return result
    if kind == "function":
        name, args = request[1:]
        functions = {"summarise_children": summarise_children, "children_rows": children_rows}
        if name not in functions:
            raise ValueError(f"no study function {name!r}")
        return functions[name](*args)
    raise ValueError(f"no run request {kind!r}")

# MLflow's Prompt Registry: each step's composed instruction is a version of the prompt `lme-<design>-<step>`, one
# version per distinct text (found by its digest), linked both ways to the runs that read it.
PROMPT_DIGEST_TAG = "lme.sha256"  # on a prompt version: its text's SHA-256
PROMPT_RUNS_TAG = "mlflow.prompt.run_ids"  # on a prompt version: the runs that read it (its page and theirs list it)
LINKED_PROMPTS_TAG = "mlflow.linkedPrompts"  # on a run: the prompt versions it read (MLflow's run page lists them)
PROMPT_EXPERIMENTS_TAG = "_mlflow_experiment_ids"  # on a prompt: ",1,4,", the experiments whose Prompts tab lists it
_REGISTRY_ATTEMPTS = 5
_MAX_RUN_IDS_CHARS = 100_000  # MLflow's limit on a registry tag's value


def prompt_name(design: str, step: str) -> str:
    """The prompt holding a design's step instruction, in MLflow's prompt-name alphabet (letters, digits, `_.-`)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", ".", f"lme-{design}-{step}")


def register_instructions(settings: TrackingSettings, client: Any, run_id: str, experiment_id: str, design: str,
                          texts: Mapping[str, str]) -> dict[str, str]:
    """Register each step's instruction (`texts`: step -> text) as a prompt version and link it to the run; returns
    step -> `prompts:/<name>/<version>`.

    A version is looked up by its text's digest (the tag `lme.sha256`) before one is made, so a text gets one
    version however many runs read it, and a changed text a new one. Jobs of a sweep register the same texts at
    once: on a SQLite store they take turns (a file lock); on a tracking server, two that both found no version
    may both make one, and both then keep the lower-numbered (the other is deleted), and a write that lost an
    insert race to another job's is retried after reading again. The run's own tag `mlflow.linkedPrompts` lists
    its versions; each version's `mlflow.prompt.run_ids` lists its runs; the prompt names the experiment, so the
    experiment's Prompts tab shows it."""
    linked: dict[str, tuple[str, int]] = {}
    with _registry_lock(settings):
        for step, text in texts.items():
            name = prompt_name(design, step)
            version = _retrying(lambda: _prompt_version(client, name, text, design, step, experiment_id))
            _retrying(lambda: _add_run_to_version(client, name, version, run_id))
            linked[step] = (name, version)
    current = client.get_run(run_id).data.tags.get(LINKED_PROMPTS_TAG)
    entries = json.loads(current) if current else []
    for name, version in linked.values():
        entry = {"name": name, "version": str(version)}
        if entry not in entries:
            entries.append(entry)
    if entries:
        client.set_tag(run_id, LINKED_PROMPTS_TAG, json.dumps(entries))
    return {step: f"prompts:/{name}/{version}" for step, (name, version) in linked.items()}


def _retrying(write: Any) -> Any:
    """`write()`, again after a short wait when it lost an insert race to another writer (anything else raises)."""
    from mlflow.exceptions import MlflowException

    for attempt in range(_REGISTRY_ATTEMPTS):
        try:
            return write()
        except MlflowException as error:
            raced = lost_an_insert_race(error) or error.error_code == "RESOURCE_ALREADY_EXISTS"
            if not raced or attempt == _REGISTRY_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _prompt_version(client: Any, name: str, text: str, design: str, step: str, experiment_id: str) -> int:
    """The version of prompt `name` holding `text` (made, with the prompt, when there is none)."""
    digest = sha256_text(text)
    prompt = client.get_prompt(name)
    if prompt is None:
        client.create_prompt(name, description=f"lme design {design}: the instruction of step {step}", tags={
            PROMPT_EXPERIMENTS_TAG: f",{experiment_id},", "lme.design": design, "lme.step": step})
    else:
        ids = [part for part in (prompt.tags.get(PROMPT_EXPERIMENTS_TAG) or "").split(",") if part]
        if experiment_id not in ids:
            client.set_prompt_tag(name, PROMPT_EXPERIMENTS_TAG, "," + ",".join([*ids, experiment_id]) + ",")
    found = _versions_holding(client, name, digest)
    if found:
        return min(found)
    created = int(client.create_prompt_version(
        name, text, description=f"sha256 {digest[:12]}", tags={PROMPT_DIGEST_TAG: digest, "lme.design": design,
                                                               "lme.step": step}).version)
    keep = min(_versions_holding(client, name, digest) or [created])
    if keep != created:  # another job made a version of this text at the same time: its is kept
        client.delete_prompt_version(name, str(created))
    return keep


def _versions_holding(client: Any, name: str, digest: str) -> list[int]:
    """The versions of prompt `name` whose text has SHA-256 `digest`."""
    versions: list[int] = []
    token = None
    while True:
        page = client.search_prompt_versions(name, max_results=1000, page_token=token)
        versions += [int(v.version) for v in page if (v.tags or {}).get(PROMPT_DIGEST_TAG) == digest]
        token = getattr(page, "token", None)
        if not token:
            return versions


def _add_run_to_version(client: Any, name: str, version: int, run_id: str) -> None:
    """Add `run_id` to the version's list of runs (unless the list is at MLflow's length limit)."""
    current = (client.get_prompt_version(name, version).tags or {}).get(PROMPT_RUNS_TAG) or ""
    ids = [part for part in current.split(",") if part]
    value = ",".join([*ids, run_id])
    if run_id not in ids and len(value) <= _MAX_RUN_IDS_CHARS:
        client.set_prompt_version_tag(name, version, PROMPT_RUNS_TAG, value)


@contextlib.contextmanager
def _registry_lock(settings: TrackingSettings):
    """On a SQLite store, one process at a time registers prompts (an exclusive lock on a file beside the store's, in
    the temporary directory); a tracking server's clients need none (`register_instructions` says why)."""
    path = sqlite_path(settings.uri)
    if path is None:
        yield
        return
    import fcntl

    digest = sha256_text(str(Path(path).absolute()))[:16]
    with open(Path(tempfile.gettempdir()) / f"lme-mlflow-prompts-{digest}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


FAILURE_TAG = "lme.failure"
_OWNER_TAGS = ("lme.host", "lme.pid", "lme.pid_start")


def owner_tags() -> dict[str, str]:
    """Which process owns a run: a run left RUNNING by a process that is gone was orphaned (SIGKILL)."""
    import socket

    from lme.models.ledger import process_start

    pid = os.getpid()
    return {"lme.host": socket.gethostname(), "lme.pid": str(pid), "lme.pid_start": process_start(pid)}


def repair_orphans(settings: TrackingSettings, experiment_ids: list[str] | None = None, quiet: bool = False,
                   strict: bool = False) -> list[str]:
    """Mark KILLED every RUNNING run whose owning process, on this machine, is gone; returns their ids.
    Runs owned by another machine are left alone (their process cannot be checked from here). Every job
    repairs on starting, so jobs starting together may mark the same orphan: the failure tag's insert that
    loses to another job's is not an error. A store that cannot be searched has nothing to repair for a job
    starting; `strict` (`lme runs repair`): its failure is raised."""
    import socket

    from lme.models.ledger import process_alive

    client = client_for(settings)
    ids = experiment_ids or [experiment_id(settings)]
    host = socket.gethostname()
    repaired = []
    try:
        running = client.search_runs(ids, filter_string="attributes.status = 'RUNNING'", max_results=10_000)
    except Exception:  # noqa: BLE001 - a store that cannot be searched has nothing to repair here
        if strict:
            raise
        return []
    for run in running:
        tags = run.data.tags
        if tags.get("lme.host") != host or not str(tags.get("lme.pid", "")).isdigit():
            continue
        if process_alive(int(tags["lme.pid"]), tags.get("lme.pid_start", "")):
            continue
        try:
            client.set_tag(run.info.run_id, FAILURE_TAG, "orphaned: the process running it ended without closing "
                           f"it (killed?); marked KILLED by process {os.getpid()}")
        except Exception as error:  # noqa: BLE001 - jobs starting together repair the same orphans at once
            if not lost_an_insert_race(error):
                raise
        client.set_terminated(run.info.run_id, "KILLED")  # an update: repeating another job's is harmless
        repaired.append(run.info.run_id)
    if repaired and not quiet:
        print(f"lme: marked {len(repaired)} orphaned MLflow run(s) KILLED: {', '.join(repaired)}", flush=True)
    return repaired


def artifact_place(settings: TrackingSettings, run_id: str, artifact_path: str) -> str:
    """Where a run's artifact lies, for a message: its local path for a file store, else its URI (best effort)."""
    try:
        uri = client_for(settings, create=False).get_run(run_id).info.artifact_uri or ""
    except Exception:  # noqa: BLE001 - only for a message
        return f"{artifact_path} of MLflow run {run_id}"
    if uri.startswith("file:"):
        from urllib.parse import unquote, urlparse

        uri = unquote(urlparse(uri).path)
    elif "://" not in uri and uri:
        uri = str(Path(uri))
    return f"{uri.rstrip('/')}/{artifact_path}"


def read_artifact_bytes(settings: TrackingSettings, run_id: str, artifact_path: str,
                        limit: int = 2**31) -> bytes | None:
    """A run's artifact file, or None when the run has no artifact at `artifact_path`; `LmeError` (one sentence
    naming the run and where the artifact lies) when one is there but cannot be read: a directory in its place, an
    I/O error, an artifact store that cannot be listed."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    def refuse(why: str) -> LmeError:
        place = artifact_place(settings, run_id, artifact_path)
        kept = " (the job's folder keeps its journal, outcomes.jsonl)" if artifact_path == OUTCOMES_ARTIFACT else ""
        return LmeError(f"{place}: the {artifact_path} artifact of MLflow run {run_id} {why}; restore it{kept} or "
                        "rerun the job.")

    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=artifact_path, dst_path=tmp, tracking_uri=settings.uri))
        except Exception as exc:  # noqa: BLE001 - absent (None), or there and unreadable (one sentence)
            failure = exc
        else:
            if local.is_dir():
                raise refuse("is a directory, not a file") from None
            try:
                with open(local, "rb") as handle:
                    data = handle.read(limit + 1)
            except OSError as exc:
                raise refuse(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
            if len(data) > limit:
                raise refuse(f"is larger than {limit} bytes, more than lme ever logs") from None
            return data
    try:  # the download failed: was it ever there?
        folder, _, name = artifact_path.rpartition("/")
        listed = client_for(settings, create=False).list_artifacts(run_id, folder or None)
    except Exception as exc:  # noqa: BLE001
        from lme.util.errors import first_line

        raise refuse(f"cannot be read: the run's artifacts cannot be listed ({first_line(exc)[:200]})") from None
    if not any(entry.path.rpartition("/")[2] == name for entry in listed):
        return None
    from lme.util.errors import first_line

    reason = first_line(failure)[:200]
    place = artifact_place(settings, run_id, artifact_path)
    if Path(place).is_absolute():  # a local artifact store: the system's reason (MLflow's message has none)
        try:
            with open(place, "rb") as handle:
                handle.read(1)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
    raise refuse(f"cannot be read ({reason})") from None


def read_outcome_rows(settings: TrackingSettings, run_id: str, *, job: str | None = None,
                      n_questions: Any = None) -> list[dict[str, Any]] | None:
    """The per-question outcomes a job logged (journal rows, `format` key included), or None when it logged
    none; `LmeError` when the artifact cannot be read, or a row is not one lme wrote or of a format this lme cannot
    read (`lme.answer.run.READABLE_JOURNAL_FORMATS`). With `job` (the run's name: a job that logged its outcomes, as every
    finished job does), a missing artifact, or one holding fewer questions than the job's `n_questions` (emptied
    or cut short), is `LmeError` too: a report never counts a job from part of its answers."""
    from lme.answer.run import journal_format

    data = read_artifact_bytes(settings, run_id, OUTCOMES_ARTIFACT)
    named = f"MLflow run {job} ({run_id})" if job else f"MLflow run {run_id}"
    if data is None:
        if job is None:
            return None
        place = artifact_place(settings, run_id, OUTCOMES_ARTIFACT)
        raise LmeError(f"{place}: {named} finished but its {OUTCOMES_ARTIFACT} artifact is missing; copy the job's "
                       f"journal ({OUTCOMES_ARTIFACT} in the job's folder) there, or rerun the job.")
    where = f"the {OUTCOMES_ARTIFACT} of {named}"
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise LmeError(f"{where}: not UTF-8 text (byte {exc.start}); log the job's journal again by rerunning it.") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, nested past the recursion limit, a number past the digit limit
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("question_id"), str):
            raise LmeError(f"{where}, line {number}: not an outcome row lme wrote (a JSON object with a question_id); "
                           "rerun the job to log its journal again.")
        rows.append(row)
    for row in rows:
        journal_format(row.get("format", 1), where)
    try:
        expected = int(n_questions) if n_questions is not None else None
    except (TypeError, ValueError):
        expected = None
    held = len({row["question_id"] for row in rows})
    if job is not None and expected is not None and held < expected:
        place = artifact_place(settings, run_id, OUTCOMES_ARTIFACT)
        raise LmeError(f"{place}: the {OUTCOMES_ARTIFACT} artifact of {named} holds {held} of the job's {expected} "
                       f"questions (emptied or cut short); copy the job's journal ({OUTCOMES_ARTIFACT} in the job's "
                       "folder) there, or rerun the job.")
    return rows


def across_seed_metrics(groups: Mapping[str, list[list[dict[str, Any]]]]) -> dict[str, float]:
    """Across-run measures per design; keys are prefixed with the design when there are several. A design whose
    rows are LoCoMo questions also gets the mean over its runs of each job's LoCoMo figures, recomputed from the rows
    (`mean_locomo.f1`, `mean_locomo.f1_without_adversarial`, `mean_locomo.f1.<category>`,
    `mean_locomo.j_without_adversarial`: `lme.reporting.locomo_measures.locomo_across_runs`); none for LongMemEval."""
    from lme.reporting.locomo_measures import locomo_across_runs
    from lme.reporting.measures import across_runs

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
        locomo = locomo_across_runs(runs)  # a LoCoMo sweep: the mean over runs of each job's LoCoMo figures
        if locomo is not None:
            for key, value in locomo.as_metrics().items():
                metrics[prefix + key] = value
    return metrics


ACROSS_SEEDS_TABLE = "tables/across_seeds.json"  # the parent's per-question table: each seed's verdict, majority


def across_seed_table(runs: Mapping[str, Sequence[tuple[str, Sequence[Mapping[str, Any]]]]]) -> list[dict[str, Any]]:
    """Design -> [(seed, journal rows)] as one row per design and question: its type, the verdict of each seed
    (`seed 1`: correct | wrong | missing), how many runs were correct, and the majority verdict (correct in
    more than half of the runs)."""
    from lme.answer.run import verdict_word

    table: list[dict[str, Any]] = []
    for design, seeded in sorted(runs.items()):
        seeds = [seed for seed, _ in seeded]
        verdicts: dict[str, dict[str, str]] = {}
        types: dict[str, str] = {}
        for seed, rows in seeded:
            for row in rows:
                qid = str(row["question_id"])
                types.setdefault(qid, str(row.get("question_type", "")))
                verdicts.setdefault(qid, {})[seed] = verdict_word(row.get("answer"), bool(row.get("correct")),
                                                                  row.get("judge_error"))
        for qid, by_seed in verdicts.items():
            correct = sum(1 for verdict in by_seed.values() if verdict == "correct")
            table.append({"design": design, "question_id": qid, "question_type": types[qid],
                          **{f"seed {seed}": by_seed.get(seed, "missing") for seed in seeds},
                          "runs_correct": correct, "majority": "correct" if 2 * correct > len(seeds) else "wrong"})
    return table


def summarise_children(settings: TrackingSettings, parent_id: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Read every finished child of `parent_id` and compute the across-seed measures; the summary's
    `table` is `across_seed_table` of the children."""
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
    summary: dict[str, Any] = {
        "designs": {design: {"seeds": seeds[design], "n_runs": len(groups[design])} for design in groups}}
    summary["table"] = across_seed_table({design: list(zip(seeds[design], groups[design])) for design in groups})
    return metrics, summary



def children_rows(settings: TrackingSettings, parent_id: str) -> dict[str, list[tuple[str, list[dict[str, Any]]]]]:
    """Design -> [(seed, journal rows)] of the parent's finished jobs, in seed order."""
    client = client_for(settings)
    children = client.search_runs(
        [experiment_id(settings)], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=10_000
    )
    groups: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    for child in children:
        if child.info.status != "FINISHED" or child.data.tags.get("lme.role", "job") != "job":
            continue
        rows = read_outcome_rows(settings, child.info.run_id)
        if rows is not None:
            design = child.data.tags.get("lme.design", "default")
            groups.setdefault(design, []).append((child.data.tags.get("lme.seed", "?"), rows))
    for runs in groups.values():
        runs.sort(key=lambda run: seed_order(run[0]))
    return groups


def seed_order(seed: str) -> tuple[int, int, str]:
    """Numeric seeds in numeric order, then any other tag."""
    try:
        return (0, int(seed), seed)
    except ValueError:
        return (1, 0, seed)

STOPPED: tuple[str, str] | None = None  # (MLflow status, reason) of a job that stopped this process's study
FAILED_STUDIES: list[str] = []  # parent runs of this process that ended FAILED (the exit status says so)


def note_stop(status: str, reason: str) -> None:
    """A job is stopping the study (SystemExit follows): the multirun parent ends with this status and reason."""
    global STOPPED
    STOPPED = (status, reason)
