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
