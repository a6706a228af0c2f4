"""The ingestion journal of external memory systems: which sessions of which namespace a system has
acknowledged, which namespaces are complete, and who is ingesting one now.

One SQLite store under `cache_dir` (`memory_systems.sqlite`), opened through `lme.util.sqlite.open_store`
like lme's other stores, so every fault (damaged, locked, read-only, full disk, another program's tables) is
one sentence naming the file. A session is recorded as soon as its system acknowledges it, so a killed
ingestion resumes at the next session; a finished namespace is marked done and never ingested again.

**One ingester per namespace.** Before ingesting, a job takes the namespace's claim row (its process id, its
host and a token of its own) in a write transaction; another job (thread or process) finding a live claim
waits. A claim is stale, and taken over, when its process is gone (or a zombie), or when it names this very
process under a token no thread of it holds any more.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lme.models.ledger import process_alive
from lme.util.sqlite import StoreConnection, StoreKind, immediate, open_store

JOURNAL_FILE = "memory_systems.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS namespaces (
    namespace TEXT PRIMARY KEY,
    system TEXT NOT NULL,
    settings TEXT NOT NULL,
    sessions INTEGER NOT NULL,
    created REAL NOT NULL,
    done REAL
);
CREATE TABLE IF NOT EXISTS ingested (
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    acknowledged REAL NOT NULL,
    PRIMARY KEY (namespace, session_id)
);
CREATE TABLE IF NOT EXISTS claims (
    namespace TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    token TEXT NOT NULL,
    claimed REAL NOT NULL
);
"""

SYSTEM_JOURNAL = StoreKind(
    "memory-system ingestion journal", _SCHEMA,
    {"namespaces": ("namespace", "system", "settings", "sessions", "created", "done"),
     "ingested": ("namespace", "session_id", "acknowledged"),
     "claims": ("namespace", "pid", "host", "token", "claimed")},
    "every history is ingested into its memory system again, into the same namespaces: a system that keeps "
    "them holds those sessions twice unless its namespaces are removed too",
    numbers={"namespaces": ("sessions", "created", "done"), "claims": ("pid", "claimed")},
)

_HELD: set[str] = set()  # the claim tokens this process's threads hold now
_HELD_LOCK = threading.Lock()


@dataclass(frozen=True)
class NamespaceState:
    """What the journal holds for a namespace: whether it is complete, and the sessions acknowledged."""

    done: bool
    acknowledged: frozenset[str]


class IngestionJournal:
    """The journal at `path` (created when absent); safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: StoreConnection = open_store(self.path, SYSTEM_JOURNAL)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def register(self, namespace: str, system: str, settings: str, sessions: int) -> None:
        """Name the namespace's system, its settings (canonical JSON) and its number of sessions (first time only)."""
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO namespaces (namespace, system, settings, sessions, created) VALUES (?,?,?,?,?)",
                (namespace, system, settings, sessions, time.time()))

    def state(self, namespace: str) -> NamespaceState:
        with self._lock:
            row = self._conn.execute("SELECT done FROM namespaces WHERE namespace = ?", (namespace,)).fetchone()
            acknowledged = self._conn.execute(
                "SELECT session_id FROM ingested WHERE namespace = ?", (namespace,)).fetchall()
        return NamespaceState(done=row is not None and row[0] is not None,
                              acknowledged=frozenset(str(r[0]) for r in acknowledged))

    def acknowledge(self, namespace: str, session_id: str) -> None:
        """Record that the system acknowledged the session (committed before the next one is sent)."""
        with self._lock:
            self._conn.execute("INSERT OR IGNORE INTO ingested (namespace, session_id, acknowledged) VALUES (?,?,?)",
                               (namespace, session_id, time.time()))

    def finish(self, namespace: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE namespaces SET done = ? WHERE namespace = ? AND done IS NULL",
                               (time.time(), namespace))

    def claim(self, namespace: str) -> str | None:
        """Take the namespace's claim: a token to release it with, or None while another live job holds it."""
        token = secrets.token_hex(8)
        host = socket.gethostname()
        with self._lock, immediate(self._conn):
            row = self._conn.execute("SELECT pid, host, token FROM claims WHERE namespace = ?",
                                     (namespace,)).fetchone()
            if row is not None and not self._stale(int(row[0]), str(row[1]), str(row[2]), host):
                return None
            self._conn.execute(
                "INSERT OR REPLACE INTO claims (namespace, pid, host, token, claimed) VALUES (?,?,?,?,?)",
                (namespace, os.getpid(), host, token, time.time()))
        with _HELD_LOCK:
            _HELD.add(token)
        return token

    @staticmethod
    def _stale(pid: int, host: str, token: str, this_host: str) -> bool:
        if host != this_host:
            return False  # another machine's process cannot be checked (and SQLite's locks do not span machines)
        if pid == os.getpid():
            with _HELD_LOCK:
                return token not in _HELD
        return not process_alive(pid, "")  # the ledger's test: gone, or a zombie not yet reaped

    def release(self, namespace: str, token: str) -> None:
        with _HELD_LOCK:
            _HELD.discard(token)
        with self._lock:
            self._conn.execute("DELETE FROM claims WHERE namespace = ? AND token = ?", (namespace, token))

    def counts(self, namespace: str) -> tuple[int, int]:
        """(sessions the namespace has, sessions acknowledged); (0, 0) for an unknown namespace."""
        with self._lock:
            row = self._conn.execute("SELECT sessions FROM namespaces WHERE namespace = ?", (namespace,)).fetchone()
            acknowledged = self._conn.execute("SELECT COUNT(*) FROM ingested WHERE namespace = ?",
                                              (namespace,)).fetchone()[0]
        return (int(row[0]) if row else 0), int(acknowledged)


def acknowledged_sessions(path: str | Path) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """For `lme estimate`: the journal's finished namespaces and every namespace's acknowledged sessions, read
    without writing (no file: nothing ingested yet). A faulty file is one sentence naming it (`StoreError`)."""
    path = Path(path)
    if not path.exists():
        return frozenset(), {}
    conn = open_store(path, SYSTEM_JOURNAL, readonly=True)
    try:
        done = frozenset(str(row[0]) for row in conn.execute("SELECT namespace FROM namespaces WHERE done IS NOT NULL"))
        acknowledged: dict[str, set[str]] = {}
        for namespace, session_id in conn.execute("SELECT namespace, session_id FROM ingested"):
            acknowledged.setdefault(str(namespace), set()).add(str(session_id))
    finally:
        conn.close()
    return done, {namespace: frozenset(ids) for namespace, ids in acknowledged.items()}
