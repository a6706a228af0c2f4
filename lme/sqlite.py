"""Opening an SQLite file that several threads and processes share (call cache, ledger, embedding cache).

`connect` returns an autocommit connection in WAL mode (readers run beside the one writer) with a busy
timeout (a connection waits for another process's lock instead of failing with `database is locked`).
Switching a new file to WAL takes a lock that SQLite does not always wait for, so when many processes
open a fresh file at the same moment the switch is retried until the timeout. SQLite's locks do not
hold on network filesystems (NFS, SMB): each machine keeps its own files on local disk.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUSY_TIMEOUT_S = 60.0  # how long a connection waits for another process's lock


def connect(path: str | Path, timeout_s: float = BUSY_TIMEOUT_S, synchronous: str = "FULL") -> sqlite3.Connection:
    """An autocommit connection in WAL mode with a busy timeout. `synchronous=FULL`: each committed write
    is on disk when it returns; `NORMAL`: it survives a crash of the process, not of the machine."""
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
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def attached(conn: sqlite3.Connection, path: str | Path, alias: str) -> Iterator[None]:
    """Another database file attached as `alias` for the block (a merge's or an import's source)."""
    if not alias.isidentifier():
        raise ValueError(f"not an SQL name: {alias!r}")
    conn.execute(f"ATTACH DATABASE ? AS {alias}", (str(path),))
    try:
        yield
    finally:
        conn.execute(f"DETACH DATABASE {alias}")


def insert_missing(conn: sqlite3.Connection, table: str, columns: tuple[str, ...], source: str,
                   order_by: str | None = None) -> int:
    """Copy the rows of `source.table` whose key is not yet in `main.table` (`INSERT OR IGNORE`: a row
    already there is kept as it is); the number of rows added."""
    names = ", ".join(columns)
    order = f" ORDER BY {order_by}" if order_by else ""
    cursor = conn.execute(f"INSERT OR IGNORE INTO main.{table} ({names}) SELECT {names} FROM {source}.{table}{order}")
    return int(cursor.rowcount)
