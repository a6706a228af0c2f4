"""A new SQLite tracking store made from an empty one, instead of by MLflow's migrations.

MLflow builds the schema of a new SQLite store by running every one of its migrations (dozens of Alembic
scripts): about 2-3 s of Python holding the GIL, on the path to a study's first request. The first time a
process of this machine makes a new store, lme keeps an empty copy of it (the schema and its Alembic
revision, without the default experiment, whose artifact location names the store it was made for), one
per MLflow version; later new stores start as a copy of it, and MLflow, opening the copy, verifies its
schema revision and adds the default experiment itself, with the new store's artifact location. A
template that is not one (`usable`) is neither copied nor kept: the next store MLflow makes replaces it.

The templates live in `$LME_MLFLOW_TEMPLATES` (default: `~/.cache/lme/mlflow-stores`). Anything that
goes wrong here (no room, a template another version of MLflow made, a read-only cache) leaves the store
to MLflow, as if there were no template.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sqlite3
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
        name = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}.tmp")
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
        conn = sqlite3.connect(f"file:{template}?mode=ro", uri=True)
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
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size == 0:
                path.unlink()  # an empty file (touched, or left by a crash) is no store
        try:
            os.link(temporary, path)
        except FileExistsError:  # another process made the store meanwhile
            return False
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


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
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
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
