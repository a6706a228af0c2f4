"""A persistent cache of model calls (SQLite), shared safely between processes.

Keys are SHA-256 digests of the canonical request: model, messages, parameters
and the seed the caller asks to key on (a run's seed for reader calls, none for
the deterministic judge). API keys and endpoints are not part of a request.

Every `put` is one SQLite transaction (autocommit, WAL, synchronous=FULL): a
process killed mid-write leaves the entry either whole or absent, never half.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def call_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any], seed: int | None) -> str:
    """Content address of one request; `seed` is None for calls shared across seeds."""
    canonical = json.dumps(
        {"model": model, "messages": messages, "params": params, "seed": seed},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CallCache:
    """Maps a call key to the stored response (a JSON object)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=60000")
        self._conn.execute("PRAGMA synchronous=FULL")  # each put is its own transaction, on disk when it returns
        self._conn.execute(_SCHEMA)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, model: str, response: dict[str, Any]) -> None:
        payload = json.dumps(response, sort_keys=True, ensure_ascii=False)
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO calls (key, model, response, created) VALUES (?, ?, ?, ?)",
                (key, model, payload, time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
