"""A new SQLite tracking store made from an empty one, instead of by MLflow's migrations.

MLflow builds the schema of a new SQLite store by running every one of its migrations (dozens of Alembic
scripts): about 2-3 s of Python holding the GIL, on the path to a study's first request. From the template a
new store is ready in 0.87 s of CPU instead of 1.84 s (2.1 s wall instead of 4.8 s; `python
scripts/bench_tricks.py store_template`, 2026-12-07, MLflow's imports excluded). The first time a
process of this machine makes a new store, lme keeps an empty copy of it (the schema and its Alembic
revision, without the default experiment, whose artifact location names the store it was made for), one
per MLflow version; later new stores start as a copy of it, and MLflow, opening the copy, verifies its
schema revision and adds the default experiment itself, with the new store's artifact location. A
template that is not one (`usable`) is neither copied nor kept: the next store MLflow makes replaces it.

The templates live in `$LME_MLFLOW_TEMPLATES` (default: `~/.cache/lme/mlflow-stores`). Anything that
goes wrong with a template (no room, a template another version of MLflow made, a read-only cache) is as if
there were none.

**A new store appears whole or not at all** (`create_whole`): the copy of the template, or without one the
store MLflow's migrations make, is written in a temporary file beside the store
(`.mlflow.db.PID.RANDOM.tmp`), then linked into place. A full disk, a file size limit or a kill during
creation leaves no `mlflow.db` (only the temporary file, which the next creation in that folder removes once
its process is gone): the next run finds no store and makes one. A zero-byte `mlflow.db` (left by an older
lme, or touched) holds nothing and is replaced.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

TEMPLATES_ENV = "LME_MLFLOW_TEMPLATES"
# The rows a new store holds that name the store itself: MLflow adds them again when it opens a copy.
_STORE_OWN_ROWS = ("experiment_tags", "experiments")


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///PATH` tracking URI (a plain path: no query, not in memory), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    raw = uri.removeprefix("sqlite:///")
    if not raw or "?" in raw or raw == ":memory:" or raw.startswith("file:"):
        return None
    return Path(raw)


def templates_dir() -> Path:
    configured = os.environ.get(TEMPLATES_ENV)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "lme" / "mlflow-stores"


def template_path() -> Path:
    """This MLflow version's template (the version decides the schema and its revision)."""
    from importlib.metadata import version

    return templates_dir() / f"mlflow-{version('mlflow')}.db"


def is_new(path: Path) -> bool:
    """Whether MLflow would make a new store here: no file, or an empty one."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


def _new_file(folder: Path, prefix: str) -> str:
    """A new empty file in `folder` with the permissions a new file gets there (the umask's, as MLflow's own
    store would have; `tempfile.mkstemp` would make it private to the user)."""
    for _ in range(100):
        name = os.path.join(folder, f"{prefix}{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return name
    raise FileExistsError(f"no free temporary name in {folder}")


def usable(template: Path) -> bool:
    """Whether `template` is an SQLite file with one schema revision and no experiment (what `keep_template`
    writes); MLflow checks the revision against its own when it opens the copy."""
    if not template.is_file():
        return False
    try:
        conn = sqlite3.connect(template.absolute().as_uri() + "?mode=ro", uri=True)
        try:
            (revisions,) = conn.execute("SELECT COUNT(*) FROM alembic_version").fetchone()
            (experiments,) = conn.execute("SELECT COUNT(*) FROM experiments").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return revisions == 1 and experiments == 0


def start_from_template(path: Path) -> bool:
    """Put a copy of the template at `path` when the store there is new and a template exists. True when it
    did. The copy appears whole or not at all (written beside, then linked into place)."""
    template = template_path()
    if not is_new(path) or not path.parent.is_dir() or not usable(template):
        return False
    try:
        temporary = _new_file(path.parent, f".{path.name}.")
    except OSError:
        return False
    try:
        shutil.copyfile(template, temporary)
        _sync(temporary)
        return _link_into_place(temporary, path)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _sync(name: str) -> None:
    """The file's bytes on disk before its name is (a crash after the link leaves a whole store)."""
    handle = os.open(name, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _link_into_place(temporary: str, path: Path) -> bool:
    """Link the whole file `temporary` at `path` (an empty file there, touched or left by an older lme, is no
    store and is replaced); False when another process made the store meanwhile (its store is kept)."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size == 0:
            path.unlink()
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    return True


LEFTOVER_AGE_S = 600.0  # a temporary file of a creation this old, whose process is gone, is removed


def remove_leftovers(path: Path) -> list[Path]:
    """Remove the temporary files that creations of the store `path` killed midway left beside it (named
    `.NAME.PID.RANDOM.tmp`, older than `LEFTOVER_AGE_S`, their process gone); returns those removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            parts = entry.name.removeprefix(f".{path.name}.").split(".")
            if not entry.name.startswith(f".{path.name}.") or len(parts) != 3 or parts[2] != "tmp":
                continue
            if not parts[0].isdigit() or _alive(int(parts[0])):
                continue
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and \
                        time.time() - entry.stat(follow_symlinks=False).st_mtime > LEFTOVER_AGE_S:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def create_whole(path: Path, make: Callable[[Path], None]) -> None:
    """Make the new store `path` whole or not at all: a copy of the template when there is one, else `make(temporary)`
    (MLflow's migrations, on an empty file beside `path`), kept as the template, then a consistent copy of it linked
    into place. Whatever `make` raises (a full disk: `sqlite3.Error`, SQLAlchemy's errors) and any `OSError` are
    raised, with nothing made at `path`. Another process that made the store meanwhile wins: its store is kept."""
    remove_leftovers(path)
    if start_from_template(path):
        return
    made = _new_file(path.parent, f".{path.name}.")
    try:
        make(Path(made))
        keep_template(Path(made))  # the template of the next new store (nothing when it cannot be kept)
        if start_from_template(path):
            return
        copy = _new_file(path.parent, f".{path.name}.")
        try:
            source = sqlite3.connect(Path(made).absolute().as_uri() + "?mode=ro", uri=True)
            target = sqlite3.connect(copy)
            try:
                source.backup(target)  # whole: `made` is still open in MLflow's engine, which is left to it
            finally:
                source.close()
                target.close()
            _sync(copy)
            _link_into_place(copy, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(copy)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(made)


def keep_template(path: Path) -> bool:
    """After MLflow made a new store at `path`: keep an empty copy of it as this MLflow version's template
    (unless one exists). True when it did."""
    template = template_path()
    if usable(template):
        return False
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        temporary = _new_file(template.parent, ".template.")
    except OSError:
        return False
    try:
        source = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True)
        target = sqlite3.connect(temporary)
        try:
            source.backup(target)  # a consistent copy, whatever journal mode the store uses
            with target:
                for table in _STORE_OWN_ROWS:
                    target.execute(f"DELETE FROM {table}")
            target.execute("VACUUM")
        finally:
            source.close()
            target.close()
        os.replace(temporary, template)
        return True
    except (OSError, sqlite3.Error):
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
