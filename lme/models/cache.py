"""A persistent cache of model calls (SQLite), shared safely between processes.

Keys are SHA-256 digests of the canonical request: model, messages, parameters
and the seed the caller asks to key on (a run's seed for reader calls, none for
the deterministic judge). API keys and endpoints are not part of a request.

Every `put` is one SQLite transaction (autocommit, WAL, synchronous=FULL): a
process killed mid-write leaves the entry either whole or absent, never half.

Several processes on one machine (the jobs of a joblib or Ray sweep) share one
file safely: WAL lets readers run beside the one writer, and every connection
waits up to `LME_SQLITE_BUSY_TIMEOUT_S` (60 s) for a lock instead of failing with `database is
locked`. The file is opened by `lme.util.sqlite.open_store`: created whole, and every fault (damaged, locked,
read-only, full disk, another program's tables, ...) is one sentence naming it (`StoreError`). SQLite's locks do not hold on network filesystems (NFS, SMB), so
machines do not share one file: each keeps its own cache on local disk and
`merge_caches` (`python -m lme cache merge`) folds them into one afterwards.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lme.util.memo import TextMemo
from lme.util.sqlite import StoreKind, attached, immediate, insert_missing, open_store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created REAL NOT NULL
)
"""
# a row lme can use: a text key and model, a reply that is a JSON object (another program's row, or one of the
# wrong types, is a miss: asked again and replaced; `cache merge` leaves it out)
SOUND_ROW = ("typeof(key) = 'text' AND typeof(model) = 'text' AND typeof(response) = 'text' "
          "AND CASE WHEN json_valid(response) THEN json_type(response) = 'object' ELSE 0 END")
CALL_CACHE = StoreKind(
    "call cache", _SCHEMA, {"calls": ("key", "model", "response", "created")},
    "its answers are asked for, and paid, again; nothing else is lost",
)


def call_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any], seed: int | None,
             repeat: int | None = None) -> str:
    """Content address of one request; `seed` is None for calls shared across seeds.

    The SHA-256 of `{"messages":...,"model":...,"params":...,"seed":...}` (keys sorted at every level, compact,
    non-ASCII kept). `repeat` (2, 3, ...) keeps apart a request its caller sends again on purpose with the
    same messages (the study's second decline re-read of an unchanged answer, whose payload has no room for a
    marker): it adds `"repeat":n` after `seed`; None (every other call) leaves the key as it always was.
    The digest of its messages part is remembered for long prompts (`_MESSAGES`): each seed
    of a study sends the same ~100 KB reader prompt, and writing it out as JSON to hash it took half a
    millisecond on the event loop every time."""
    digest = _messages_digest(messages).copy()
    fields: dict[str, Any] = {"model": model, "params": params, "seed": seed}
    if repeat is not None:
        fields["repeat"] = repeat
    rest = _compact(fields)
    digest.update(("," + rest[1:]).encode("utf-8"))  # the keys after "messages", in sorted order
    return digest.hexdigest()


def _compact(value: Any) -> str:
    """The request's canonical JSON: keys sorted at every level, compact, non-ASCII kept (NaN allowed, as the
    key always allowed it: not `lme.util.hashing.canonical_json`)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


MEMO_MIN_CHARS = 10_000  # shorter messages (a judge's prompt) are hashed each time: cheaper than remembering
# messages -> SHA-256 state after `{"messages":<JSON>`: a ~100 KB reader prompt sent by 3 seeds is keyed in 1.9 ms
# instead of 3.8 ms per question (`python scripts/bench_tricks.py memo_key`, 2026-12-07)
_MESSAGES: TextMemo[Any] = TextMemo(64_000_000)


def _messages_digest(messages: list[dict[str, Any]]) -> Any:
    """SHA-256 fed with `{"messages":` and the messages as canonical JSON (shared: `copy` it to use)."""
    key, chars = _messages_memo_key(messages)
    if key is not None:
        known = _MESSAGES.get(key)
        if known is not None:
            return known
    digest = hashlib.sha256(('{"messages":' + _compact(messages)).encode("utf-8"))
    if key is not None:
        _MESSAGES.put(key, digest, chars)
    return digest


def _messages_memo_key(messages: Any) -> tuple[tuple[tuple[tuple[str, str], ...], ...] | None, int]:
    """(the messages as a hashable value, the characters of their texts) when they are plain text (a list of
    dicts of str to str) and long enough to be worth remembering; otherwise (None, 0)."""
    if type(messages) is not list:
        return None, 0
    key = []
    chars = 0
    for message in messages:
        if type(message) is not dict:
            return None, 0
        pairs = []
        for name, value in message.items():
            if type(name) is not str or type(value) is not str:
                return None, 0
            pairs.append((name, value))
            chars += len(name) + len(value)
        key.append(tuple(sorted(pairs)))
    return (tuple(key), chars) if chars >= MEMO_MIN_CHARS else (None, 0)


def merge_caches(target: str | Path, sources: list[str | Path]) -> dict[str, int]:
    """Copy into the cache at `target` every entry of `sources` it lacks; returns the entries added per
    source. An entry already present is kept (the first answer stored for a call stays the answer),
    so merging is idempotent and the order of sources decides between two different answers."""
    from lme.util.errors import LmeError

    for source in sources:
        if not Path(source).is_file():
            raise LmeError(f"cache merge: {source}: no such cache file.")
        if Path(source).resolve() == Path(target).resolve():
            raise LmeError(f"cache merge: {source} is the target itself.")
        open_store(source, CALL_CACHE, readonly=True).close()  # a faulty source: its own sentence, before any write
    cache = CallCache(target)
    added: dict[str, int] = {}
    try:
        with cache._lock:
            conn = cache._conn
            for source in sources:
                with attached(conn, source, "source"):
                    if conn.execute(
                        "SELECT 1 FROM source.sqlite_master WHERE type = 'table' AND name = 'calls'"
                    ).fetchone() is None:
                        raise LmeError(f"cache merge: {source}: not an lme call cache (no calls table).")
                    with immediate(conn):
                        added[str(source)] = insert_missing(conn, "calls", ("key", "model", "response", "created"),
                                                            "source", order_by="created", where=SOUND_ROW)
                    damaged = conn.execute(f"SELECT COUNT(*) FROM source.calls WHERE NOT ({SOUND_ROW})").fetchone()[0]
                    if damaged:
                        print(f"lme: warning: {source}: {damaged:,} damaged entr{'y' if damaged == 1 else 'ies'} "
                              "(not a reply lme stored: another program's or of the wrong types) left out of the "
                              "merge; those calls are asked again when next needed.", file=sys.stderr, flush=True)
    except sqlite3.DatabaseError as exc:
        raise LmeError(f"cache merge: {exc}.") from None
    finally:
        cache.close()
    return added


class CallCache:
    """Maps a call key to the stored response (a JSON object)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = open_store(self.path, CALL_CACHE)
        # lookups on a connection of their own: in WAL mode a reader never waits for the writer, so a
        # lookup on the event loop does not stall behind a write's commit in a worker thread
        self._read_lock = threading.Lock()
        self._said_damaged = False
        try:
            self._reader = open_store(self.path, CALL_CACHE)
        except BaseException:
            self._conn.close()
            raise

    def get(self, key: str) -> dict[str, Any] | None:
        with self._read_lock:
            row = self._reader.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            stored = json.loads(row[0])
        except (TypeError, ValueError, RecursionError):
            stored = None
        if isinstance(stored, dict):
            return stored
        if not self._said_damaged:  # a damaged entry is a miss: asked again, replaced; said once per cache
            self._said_damaged = True
            print(f"lme: warning: {self.path}: a cached reply could not be read (not a reply lme stored: another "
                  "program's or of the wrong types); such calls are asked again and their entries replaced.",
                  file=sys.stderr, flush=True)
        return None

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
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._conn.close()
