"""A memory system that runs offline: each namespace is its own SQLite FTS5 index under `index_dir`.

`ingest` writes one session a call (its turns, each a row of an FTS5 table over the stored text, BM25-ranked),
after `ingest_latency_s` of artificial delay (a slow system, for tests of a killed ingestion); a session already
stored is not stored twice, and every call received is logged in the index's `calls` table (so tests can count
what a system was sent). `ready` says yes only once `index_delay_s` have passed since the last session was
stored (a system that indexes in the background), and `search` refuses to run before that, so a test proves
the builder never searches early. `search` ranks the stored turns by FTS5's `bm25()` for the question's word
tokens joined with OR (as lme's BM25 retriever, `lme.retrieval.fts5`); a result's text is
`<date> <speaker or role>: <message>` and its id the turn's neutral id.

What it stores depends on `tokenizer` and `roles` (its `settings()`); the delays change only when.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lme.data.dates import format_moment
from lme.data.records import ROLES, turn_id_in
from lme.memory.systems.base import Result, SystemSession
from lme.retrieval.fts5 import DEFAULT_TOKENIZER, build_index, match_expression
from lme.util.errors import LmeError
from lme.util.sqlite import StoreConnection, StoreKind, immediate, open_store

INDEX_SUFFIX = ".fts5.sqlite"


def index_kind(tokenizer: str) -> StoreKind:
    """The store of one namespace's index, its FTS5 table made with `tokenizer`."""
    quoted = "'" + tokenizer.replace("'", "''") + "'"
    schema = f"""
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, position INTEGER NOT NULL, date TEXT NOT NULL, stored REAL NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY, turn_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL, role TEXT NOT NULL,
    speaker TEXT, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (session_id TEXT NOT NULL, received REAL NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS turns_fts USING fts5(text, tokenize = {quoted}, content = 'turns', content_rowid = 'id');
"""
    return StoreKind(
        "local memory system's index", schema,
        {"sessions": ("session_id", "position", "date", "stored"),
         "turns": ("id", "turn_id", "session_id", "role", "speaker", "text"),
         "calls": ("session_id", "received")},
        "its history is not ingested again unless the ingestion journal (memory_systems.sqlite) is moved away too: "
        "move both",
        numbers={"sessions": ("position", "stored"), "calls": ("received",)})


class LocalSystem:
    """The offline memory system (see the module's docstring)."""

    def __init__(self, index_dir: str | Path, tokenizer: str = DEFAULT_TOKENIZER,
                 roles: Sequence[str] = ROLES, ingest_latency_s: float = 0.0, index_delay_s: float = 0.0,
                 name: str = "local") -> None:
        roles = tuple(str(role) for role in roles)
        unknown = [role for role in roles if role not in ROLES]
        if unknown or not roles:
            raise LmeError(f"memory.system.roles: expected some of {', '.join(ROLES)}, got {list(roles)!r}.")
        for key, value in (("ingest_latency_s", ingest_latency_s), ("index_delay_s", index_delay_s)):
            if not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
                raise LmeError(f"memory.system.{key}: expected a number of seconds >= 0, got {value!r}.")
        build_index((), tokenizer).close()  # a tokenizer SQLite refuses: one sentence now
        self.index_dir = Path(index_dir)
        self.tokenizer, self.roles, self.name = str(tokenizer), roles, name
        self.ingest_latency_s, self.index_delay_s = float(ingest_latency_s), float(index_delay_s)
        self._kind = index_kind(self.tokenizer)

    def settings(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer, "roles": list(self.roles)}

    def index_path(self, namespace: str) -> Path:
        return self.index_dir / f"{namespace}{INDEX_SUFFIX}"

    def _open(self, namespace: str) -> StoreConnection:
        return open_store(self.index_path(namespace), self._kind)

    def ingest(self, namespace: str, sessions: Sequence[SystemSession]) -> Iterator[str]:
        """Store each session (one call each, after the artificial latency); yield its id once committed."""
        for position, session in enumerate(sessions):
            if self.ingest_latency_s:
                time.sleep(self.ingest_latency_s)
            conn = self._open(namespace)
            try:
                with immediate(conn):
                    conn.execute("INSERT INTO calls (session_id, received) VALUES (?, ?)",
                                 (session.session_id, time.time()))
                    known = conn.execute("SELECT 1 FROM sessions WHERE session_id = ?",
                                         (session.session_id,)).fetchone()
                    if known is None:
                        self._store(conn, session, position)
            finally:
                conn.close()
            yield session.session_id

    def _store(self, conn: StoreConnection, session: SystemSession, position: int) -> None:
        conn.execute("INSERT INTO sessions (session_id, position, date, stored) VALUES (?, ?, ?, ?)",
                     (session.session_id, position, session.date.isoformat(), time.time()))
        for index, turn in enumerate(session.turns):
            if turn.role not in self.roles:
                continue
            cursor = conn.execute("INSERT INTO turns (turn_id, session_id, role, speaker, text) VALUES (?, ?, ?, ?, ?)",
                                  (turn_id_in(session.session_id, index), session.session_id, turn.role,
                                   turn.speaker, turn.text))
            conn.execute("INSERT INTO turns_fts (rowid, text) VALUES (?, ?)", (cursor.lastrowid, turn.text))

    def last_stored(self, namespace: str) -> float | None:
        """When the namespace's last session was stored (wall clock); None when nothing was."""
        if not os.path.exists(self.index_path(namespace)):
            return None
        conn = self._open(namespace)
        try:
            row = conn.execute("SELECT MAX(stored) FROM sessions").fetchone()
        finally:
            conn.close()
        return None if row is None or row[0] is None else float(row[0])

    def ready(self, namespace: str) -> bool:
        last = self.last_stored(namespace)
        return last is None or time.time() - last >= self.index_delay_s

    def search(self, namespace: str, question_text: str, top_k: int) -> list[Result]:
        """The best `top_k` stored turns for the question by BM25 (`-bm25` as the score, higher is better)."""
        if not self.ready(namespace):
            raise RuntimeError(f"namespace {namespace} searched before it was ready (index_delay_s "
                               f"{self.index_delay_s:g})")
        expression = match_expression(question_text)
        if expression is None or top_k <= 0 or not os.path.exists(self.index_path(namespace)):
            return []
        conn = self._open(namespace)
        try:
            rows = conn.execute(
                "SELECT t.turn_id, t.role, t.speaker, t.text, s.date, bm25(turns_fts) AS score "
                "FROM turns_fts JOIN turns t ON t.id = turns_fts.rowid JOIN sessions s ON s.session_id = t.session_id "
                "WHERE turns_fts MATCH ? ORDER BY score, t.id LIMIT ?", (expression, top_k)).fetchall()
        finally:
            conn.close()
        return [Result(text=f"{format_moment(datetime.fromisoformat(date))} {speaker or role}: {text}",
                       score=-float(score), id=str(turn_id))
                for turn_id, role, speaker, text, date, score in rows]

    def calls(self, namespace: str) -> dict[str, int]:
        """How many ingest calls the namespace received per session id (for tests and checks)."""
        if not os.path.exists(self.index_path(namespace)):
            return {}
        conn = self._open(namespace)
        try:
            rows = conn.execute("SELECT session_id, COUNT(*) FROM calls GROUP BY session_id").fetchall()
        finally:
            conn.close()
        return {str(session_id): int(count) for session_id, count in rows}
