"""Opening the SQLite files lme keeps (call cache, ledger, embedding cache, trace text registry): one way
for all of them, and every fault in one sentence.

`open_store(path, kind)` returns an autocommit connection in WAL mode (readers run beside the one writer)
with a busy timeout (a connection waits for another process's lock instead of failing with `database is
locked`): `LME_SQLITE_BUSY_TIMEOUT_S` seconds, 60 by default. Switching a file to WAL takes a lock that
SQLite does not always wait for, so the switch is retried until the timeout. SQLite's locks do not hold on
network filesystems (NFS, SMB): each machine keeps its own files on local disk.

**Created whole or not at all.** A new store is written in a temporary file beside it
(`.NAME.PID.RANDOM.creating`: WAL mode and the schema), then linked into place, under a lock on the folder:
a kill or a full disk during creation leaves no half-made store, only a temporary file that the next open
removes (once the process that wrote it is gone). A zero-byte file in a store's place (a creation killed
by an older lme) holds nothing and is treated as absent: replaced by a new store.

**Every fault in one sentence.** At open and during use, every SQLite or system error becomes a
`StoreError` (an `LmeError`: the CLI prints it as one line and exits 2) naming the file, what is wrong
and what to do: damaged or not an SQLite file (including a zeroed or truncated one), a directory in its
place, unreadable, read-only, locked past the busy timeout, a full disk or a file size limit, another
program's tables (`wrong-schema`), or the file moved or replaced while in use (checked before every
write, so nothing more goes to a file no one will read). The store's file is never changed to repair it:
the sentence says to move it away, and what that costs. What was committed before an error is kept.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import sqlite3
import stat
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lme.util.errors import LmeError, first_line

BUSY_TIMEOUT_ENV = "LME_SQLITE_BUSY_TIMEOUT_S"
DEFAULT_BUSY_TIMEOUT_S = 60.0  # how long a connection waits for another process's lock
BUSY_TIMEOUT_S = DEFAULT_BUSY_TIMEOUT_S  # kept for callers that name it; `busy_timeout_s()` reads the variable
SQLITE_HEADER = b"SQLite format 3\x00"
CREATING = ".creating"  # the suffix of a store being created


def busy_timeout_s() -> float:
    """`LME_SQLITE_BUSY_TIMEOUT_S` (seconds > 0), else 60."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_BUSY_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise LmeError(f"{BUSY_TIMEOUT_ENV}={raw!r}: expected a number of seconds > 0 (default "
                       f"{DEFAULT_BUSY_TIMEOUT_S:g}).")
    return value


class StoreError(LmeError):
    """A store file lme keeps cannot be opened or used. `path` is the file, `fault` one of `damaged`,
    `not-a-file`, `unreadable`, `read-only`, `locked`, `full`, `wrong-schema`, `moved`."""

    def __init__(self, message: str, path: Path, fault: str) -> None:
        super().__init__(message)
        self.path = path
        self.fault = fault


@dataclass(frozen=True)
class StoreKind:
    """What a store is: its name in sentences, its schema (`CREATE ... IF NOT EXISTS` statements), the
    columns each of its tables must have, and what moving a damaged file away costs."""

    what: str  # "call cache"
    schema: str
    tables: Mapping[str, tuple[str, ...]]
    loss: str  # "its answers are asked for (and paid) again; nothing else is lost"
    # columns that must hold numbers (or NULL), checked over every row when the store is opened: a store
    # whose sums decide something (the ledger's caps) is refused when another program wrote text there
    numbers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    objects: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        names = re.findall(r"CREATE\s+(?:TABLE|INDEX|TRIGGER|VIEW)\s+IF\s+NOT\s+EXISTS\s+(\w+)", self.schema, re.I)
        object.__setattr__(self, "objects", tuple(names))


# -- the sentences ------------------------------------------------------------------------------------------

_DAMAGED = {"SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_CORRUPT_VTAB", "SQLITE_CORRUPT_SEQUENCE",
            "SQLITE_CORRUPT_INDEX", "SQLITE_IOERR_CORRUPTFS", "SQLITE_FORMAT"}
# SQLite's I/O errors of a write (a full disk or a file size limit, EFBIG, surface as these)
_WRITE_IOERRS = {"SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE", "SQLITE_IOERR_SHMSIZE",
                 "SQLITE_IOERR_DIR_FSYNC", "SQLITE_IOERR_SHMMAP"}
_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_DENIED_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}


def store_error(path: str | Path, kind: StoreKind, exc: BaseException, doing: str = "use") -> StoreError:
    """The one sentence for `exc` (an `sqlite3.Error` or `OSError`) met while `doing` something with the
    store at `path`."""
    path = Path(path)
    if isinstance(exc, StoreError):
        return exc
    what = kind.what
    detail = first_line(exc)
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    lowered = detail.lower()
    number = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    move_away = f"move it away and lme starts a new one ({kind.loss})"
    if name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED") or "locked" in lowered:
        return StoreError(
            f"{path}: another process has held the {what} locked for more than {busy_timeout_s():g} s; wait for it "
            f"to finish or stop it, then run again ({BUSY_TIMEOUT_ENV} sets how long lme waits).", path, "locked")
    if name == "SQLITE_FULL" or number in _FULL_ERRNOS or name in _WRITE_IOERRS or "disk is full" in lowered:
        return StoreError(
            f"{path}: the {what} could not be written ({detail}: the disk is full or the file is past a size "
            "limit); free space and run again; what it already holds is kept.", path, "full")
    if name in _DAMAGED or "malformed" in lowered or "not a database" in lowered:
        return StoreError(f"{path}: not an lme {what}, or a damaged one ({detail}); {move_away}.",
                          path, "damaged")
    if name.startswith("SQLITE_READONLY") or number in _DENIED_ERRNOS or "readonly" in lowered:
        return StoreError(
            f"{path}: the {what} cannot be {'written' if doing != 'read' else 'read'} ({detail}); make the file "
            "and its folder readable and writable by this user, or use another cache folder.", path, "read-only")
    if number == errno.EISDIR:
        return StoreError(f"{path}: a directory stands where the {what} file should be; move it away and lme "
                          "creates the file anew.", path, "not-a-file")
    if number in (errno.ENOTDIR, errno.EEXIST):
        return StoreError(f"{path}: a file stands in its path where a folder should be ({detail}); move it away "
                          "or use another cache folder.", path, "not-a-file")
    if doing == "create":
        return StoreError(f"{path}: the {what} could not be created ({detail}); make its folder writable or use "
                          "another cache folder.", path, "read-only")
    return StoreError(
        f"{path}: the {what} cannot be {'opened' if doing == 'open' else 'read or written'} ({detail}); check "
        f"the file and its folder (a broken link, a failing disk, permissions), or {move_away}.", path, "unreadable")


def _wrong_schema(path: Path, kind: StoreKind, detail: str) -> StoreError:
    return StoreError(f"{path}: not an lme {kind.what} ({detail}); move it away and lme starts a new one "
                      f"({kind.loss}), or use another cache folder.", path, "wrong-schema")


def _moved(path: Path, kind: StoreKind) -> StoreError:
    return StoreError(f"{path}: the {kind.what} was moved, replaced or deleted while this process used it; nothing "
                      "more is written to it: run again to use the file now there.", path, "moved")


# -- a connection whose every error is one sentence ---------------------------------------------------------


# errors of lme's own statements or of the rows it writes (a constraint, a misuse): bugs, raised as they are
_BUGS = (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError, sqlite3.NotSupportedError)


class StoreCursor(sqlite3.Cursor):
    """A cursor of a `StoreConnection`: its errors become `StoreError`s."""

    def _fail(self, exc: BaseException) -> StoreError:
        conn = self.connection
        assert isinstance(conn, StoreConnection)
        return conn.error(exc)

    def execute(self, sql: str, parameters: Any = (), /) -> StoreCursor:
        try:
            return super().execute(sql, parameters)
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> StoreCursor:
        try:
            return super().executemany(sql, seq_of_parameters)
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def executescript(self, sql_script: str, /) -> StoreCursor:
        try:
            return super().executescript(sql_script)
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except _BUGS:
            raise
        except sqlite3.Error as exc:
            raise self._fail(exc) from None


_READS = ("SELECT", "PRAGMA", "ATTACH", "DETACH", "ROLLBACK", "COMMIT", "WITH", "EXPLAIN")


class StoreConnection(sqlite3.Connection):
    """A connection to one store file (`open_store`): every error is a `StoreError` naming the file, and
    before each write the file is checked to be the one opened (not moved, replaced or deleted)."""

    store_path: Path
    kind: StoreKind
    identity: tuple[int, int] | None  # (device, inode) of the file opened; None: not watched
    attached_paths: dict[str, Path]

    def error(self, exc: BaseException, doing: str = "use") -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        error = store_error(self.store_path, self.kind, exc, doing)
        if self.attached_paths and error.fault in ("damaged", "unreadable"):
            others = ", ".join(str(path) for path in self.attached_paths.values())
            error = StoreError(f"{error} (The file may instead be {others}, read with it.)", error.path, error.fault)
        return error

    def check_identity(self) -> None:
        """`StoreError` (`moved`) when the path no longer names the file this connection writes."""
        if self.identity is None:
            return
        try:
            now = os.stat(self.store_path)
        except OSError:
            raise _moved(self.store_path, self.kind) from None
        if (now.st_dev, now.st_ino) != self.identity:
            raise _moved(self.store_path, self.kind)

    def cursor(self, factory: Any = StoreCursor) -> Any:  # type: ignore[override]
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> StoreCursor:  # type: ignore[override]
        if self.identity is not None and not sql.lstrip()[:9].upper().startswith(_READS):
            self.check_identity()
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> StoreCursor:  # type: ignore[override]
        self.check_identity()
        return self.cursor().executemany(sql, seq_of_parameters)

    def executescript(self, sql_script: str, /) -> StoreCursor:  # type: ignore[override]
        self.check_identity()
        return self.cursor().executescript(sql_script)


# -- opening ------------------------------------------------------------------------------------------------


def _uri(path: Path, mode: str) -> str:
    return Path(os.path.abspath(path)).as_uri() + f"?mode={mode}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _leftovers(path: Path) -> Iterator[Path]:
    """Temporary files of creations of `path` whose process is gone."""
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        stem = name[len(prefix):]
        for suffix in ("-wal", "-shm", "-journal"):
            stem = stem.removesuffix(suffix)
        if not stem.endswith(CREATING):
            continue
        pid = stem.removesuffix(CREATING).split(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            yield path.parent / name


@contextmanager
def _folder_lock(folder: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive lock on `folder` (flock on the directory itself: no file added), so that two processes
    do not create the same store at once."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise sqlite3.OperationalError("database is locked") from None
                time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


def _unlink_quietly(path: Path) -> None:
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        try:
            name.unlink()
        except OSError:
            pass


def _create(path: Path, kind: StoreKind, replace_empty: bool, timeout_s: float) -> None:
    """Create the store at `path` whole: schema in a temporary file beside it, then linked into place (or
    renamed over the zero-byte file found there). Another process that created it meanwhile wins."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    with _folder_lock(folder, timeout_s):
        for leftover in _leftovers(path):
            _unlink_quietly(leftover)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = None
        if size is not None and (size > 0 or not replace_empty):
            return  # created by another process meanwhile
        temp = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{CREATING}"
        try:
            conn = sqlite3.connect(temp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")  # kept in the file's header
                conn.executescript(kind.schema)
            finally:
                conn.close()
            handle = os.open(temp, os.O_RDONLY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
            if size is None:
                os.link(temp, path)  # fails if another program made the file meanwhile: theirs stays
            else:
                os.replace(temp, path)  # the zero-byte file found there holds nothing
            handle = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
        finally:
            _unlink_quietly(temp)


def cut_short(path: str | Path, head: bytes, size: int) -> str | None:
    """How an SQLite file of `size` bytes whose first 100 bytes are `head` was cut (None when it is whole):
    SQLite writes whole pages, so a size that is not a whole number of pages was cut, and a file shorter than
    its header's page count says lost its last pages, which SQLite would read as zeros. The count is used only
    when valid (SQLite >= 3.7 keeps it) and while no `-wal` or `-journal` beside the file may change it (a
    checkpoint writes page 1 before it extends the file; a rollback restores it)."""
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size >= 512 and size % page_size:
        return f"{size:,} bytes is not a whole number of {page_size:,}-byte pages"
    pages = int.from_bytes(head[28:32], "big")
    sidecar = any(os.path.exists(f"{path}{tail}") for tail in ("-wal", "-journal"))
    if head[92:96] == head[24:28] and pages and size < pages * page_size and not sidecar:
        return f"{size:,} of its {pages * page_size:,} bytes"
    return None


def _check_header(path: Path) -> bool:
    """True when the file is empty (zero bytes: treated as absent); `sqlite3.DatabaseError` when it does not
    start as an SQLite file does (a zeroed or foreign file); OSError when it cannot be read."""
    with open(path, "rb") as handle:
        head = handle.read(100)
        size = os.fstat(handle.fileno()).st_size
    if not head:
        return True
    if head[: len(SQLITE_HEADER)] != SQLITE_HEADER or len(head) < 100:
        raise sqlite3.DatabaseError("file is not a database")
    cut = cut_short(path, head, size)
    if cut is not None:
        raise sqlite3.DatabaseError(f"database disk image is malformed: truncated, {cut}")
    return False


def _validate(conn: sqlite3.Connection, path: Path, kind: StoreKind) -> list[str]:
    """The schema's objects missing from the file; `StoreError` (`wrong-schema`) when a table of the store
    lacks a column it needs, or the file holds other tables and none of the store's."""
    present = {str(name): str(type_) for type_, name in
               sqlite3.Connection.execute(conn, "SELECT type, name FROM sqlite_master")}
    ours = [table for table in kind.tables if present.get(table) == "table"]
    tables = sorted(name for name, type_ in present.items() if type_ == "table" and not name.startswith("sqlite_"))
    if not ours and tables:
        raise _wrong_schema(path, kind, f"it holds the table(s) {', '.join(tables[:5])}, not "
                            f"{', '.join(kind.tables)}")
    for table in ours:
        columns = {str(row[1]) for row in sqlite3.Connection.execute(conn, f"PRAGMA table_info({table})")}
        lacking = [column for column in kind.tables[table] if column not in columns]
        if lacking:
            raise _wrong_schema(path, kind, f"its table {table} lacks the column(s) {', '.join(lacking)}")
    for name in kind.objects:  # a name of the schema taken by another kind of object (a view called calls)
        if name in present and name in kind.tables and present[name] != "table":
            raise _wrong_schema(path, kind, f"{name} is a {present[name]}, not a table")
    for table, numeric in kind.numbers.items():
        if present.get(table) != "table":
            continue
        columns = {str(row[1]) for row in sqlite3.Connection.execute(conn, f"PRAGMA table_info({table})")}
        for column in (name for name in numeric if name in columns):
            bad = sqlite3.Connection.execute(
                conn, f"SELECT COUNT(*) FROM {table} WHERE typeof({column}) NOT IN ('integer', 'real', 'null')"
            ).fetchone()[0]
            if bad:
                raise StoreError(
                    f"{path}: {bad:,} row(s) of its table {table} hold a {column} that is not a number (written by "
                    f"another program), so lme cannot use this {kind.what}; restore it from a backup, or move it "
                    f"away and lme starts a new one ({kind.loss}).", path, "wrong-types")
    return [name for name in kind.objects if name not in present]


def open_store(path: str | Path, kind: StoreKind, *, synchronous: str = "FULL", readonly: bool = False,
               timeout_s: float | None = None) -> StoreConnection:
    """The store at `path` (see the module's docstring), created whole when absent (or zero bytes), its
    schema checked (`wrong-schema`) and completed (objects a newer lme added). `readonly`: opened with
    `mode=ro`, never created or changed (an absent file is `StoreError` `unreadable`; a zero-byte one opens
    as an empty store in memory). `synchronous=FULL`: each committed write is on disk when it returns;
    `NORMAL`: it survives a crash of the process, not of the machine."""
    path = Path(path)
    timeout_s = busy_timeout_s() if timeout_s is None else timeout_s
    doing = "open"
    try:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise StoreError(f"{path}: a directory stands where the {kind.what} file should be; move it away and "
                             "lme creates the file anew.", path, "not-a-file")
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path}: not a regular file (a device, a pipe or a socket) where the {kind.what} "
                             "should be; move it away and lme creates the file anew.", path, "not-a-file")
        empty = info is None or _check_header(path)
        if readonly:
            if info is None:
                raise StoreError(f"{path}: cannot open the {kind.what} (no such file).", path, "unreadable")
            if empty:
                conn = sqlite3.connect(":memory:", factory=StoreConnection, check_same_thread=False,
                                       isolation_level=None)
                conn.store_path, conn.kind, conn.identity, conn.attached_paths = path, kind, None, {}
                sqlite3.Connection.executescript(conn, kind.schema)
                return conn  # type: ignore[return-value]
        elif empty:
            doing = "create"
            target = Path(os.path.realpath(path)) if os.path.islink(path) else path  # a link: create its target
            _create(target, kind, replace_empty=info is not None, timeout_s=timeout_s)
            doing = "open"
        conn = sqlite3.connect(_uri(path, "ro" if readonly else "rw"), uri=True, timeout=timeout_s,
                               factory=StoreConnection, check_same_thread=False, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise store_error(path, kind, exc, doing) from None
    conn.store_path, conn.kind, conn.identity, conn.attached_paths = path, kind, None, {}
    raw = sqlite3.Connection.execute
    try:
        raw(conn, f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        missing = _validate(conn, path, kind)
        if not readonly:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    raw(conn, "PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            raw(conn, f"PRAGMA synchronous={synchronous}")
            if missing:
                sqlite3.Connection.executescript(conn, kind.schema)
            now = os.stat(path)
            conn.identity = (now.st_dev, now.st_ino)
        elif missing and any(name in kind.tables for name in missing):
            absent = [name for name in missing if name in kind.tables]
            raise _wrong_schema(path, kind, f"it has no table {', '.join(absent)}")
    except StoreError:
        conn.close()
        raise
    except (OSError, sqlite3.Error) as exc:
        conn.close()
        raise store_error(path, kind, exc, "open") from None
    return conn  # type: ignore[return-value]


# -- the older helpers, for a plain connection (tests, exports) -----------------------------------------------


def connect(path: str | Path, timeout_s: float | None = None, synchronous: str = "FULL") -> sqlite3.Connection:
    """An autocommit connection in WAL mode with a busy timeout, to a file that is not one of lme's stores
    (an export being written, a test's file). Stores are opened with `open_store`."""
    timeout_s = busy_timeout_s() if timeout_s is None else timeout_s
    conn = sqlite3.connect(path, timeout=timeout_s, check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction on an autocommit connection: `BEGIN IMMEDIATE` (the write lock is taken at once,
    waiting out the busy timeout), `COMMIT` when the block ends, `ROLLBACK` when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except (sqlite3.Error, LmeError):
                pass  # the error that stopped the block is the one to report
        raise
    conn.execute("COMMIT")


@contextmanager
def attached(conn: sqlite3.Connection, path: str | Path, alias: str) -> Iterator[None]:
    """Another database file attached as `alias` for the block (a merge's or an import's source)."""
    if not alias.isidentifier():
        raise ValueError(f"not an SQL name: {alias!r}")
    conn.execute(f"ATTACH DATABASE ? AS {alias}", (str(path),))
    names = getattr(conn, "attached_paths", None)
    if names is not None:
        names[alias] = Path(path)
    try:
        yield
    finally:
        if names is not None:
            names.pop(alias, None)
        conn.execute(f"DETACH DATABASE {alias}")


def insert_missing(conn: sqlite3.Connection, table: str, columns: tuple[str, ...], source: str,
                   order_by: str | None = None, where: str | None = None) -> int:
    """Copy the rows of `source.table` (those `where` holds, when given) whose key is not yet in `main.table`
    (`INSERT OR IGNORE`: a row already there is kept as it is); the number of rows added."""
    names = ", ".join(columns)
    order = f" ORDER BY {order_by}" if order_by else ""
    condition = f" WHERE {where}" if where else ""
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO main.{table} ({names}) SELECT {names} FROM {source}.{table}{condition}{order}")
    return int(cursor.rowcount)
