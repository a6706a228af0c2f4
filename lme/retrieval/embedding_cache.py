"""A persistent, content-addressed store of embedding vectors, and batched encoding through it.

A vector is stored under `embedding_key(model_id, prompt, text)`: the SHA-256
of the three strings, each length-prefixed so no two triples collide. Identical
texts are therefore encoded once, across histories, questions and runs, and a
second run over the same texts encodes nothing. Vectors are float32 blobs in
one SQLite table (WAL, busy timeout), so several processes can share one file:
they read without blocking each other and write in short transactions, one per
encoded chunk; a text two processes encode at the same time is stored once
(`INSERT OR IGNORE`; the vectors are equal by construction).

`EmbeddingCache.embed` de-duplicates the texts it is given, looks them up in
chunks (`WHERE key IN (...)`), encodes only the missing ones, longest first in
chunks of whole batches (so the encoder pads about as little as when it sees
the whole list), stores each chunk as it completes (a killed job keeps what it
paid for) and returns one row per input text; `ensure` does the same without
reading any vector back, to warm the cache for a whole dataset. The counters
`hits` and `encoded` count distinct texts found and encoded since the cache
was opened (or `reset_counters`); `requested` counts texts asked for.

Encoding shows progress through `lme.progress` (texts encoded, texts/s, ETA):
a tqdm bar on a terminal, a line every 30 s otherwise, nothing when
`progress: false` (see `EmbeddingCache.embed`).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lme.errors import LmeError
from lme.progress import progress as progress_display
from lme.sqlite import connect

Encode = Callable[[list[str]], np.ndarray]  # texts -> float array of shape (len(texts), dim)

LOOKUP_CHUNK = 900  # keys per `IN (...)` query, below SQLite's historical 999-variable limit
DEFAULT_CHUNK_TEXTS = 1024  # texts per encoder call and per write transaction
PROGRESS_MIN_TEXTS = 1024  # fewer texts to encode than this: no progress unless asked (progress=True)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL
)
"""


def _length_prefixed(value: str) -> bytes:
    data = value.encode("utf-8")
    return len(data).to_bytes(8, "big") + data


class KeyMaker:
    """Keys for one (model id, prompt): the common prefix is hashed once and copied per text."""

    def __init__(self, model_id: str, prompt: str) -> None:
        self._prefix = hashlib.sha256(_length_prefixed(model_id) + _length_prefixed(prompt))

    def __call__(self, text: str) -> str:
        digest = self._prefix.copy()
        digest.update(_length_prefixed(text))
        return digest.hexdigest()


def embedding_key(model_id: str, prompt: str, text: str) -> str:
    """The content address of `text` encoded by `model_id` with `prompt` (SHA-256, hex)."""
    return KeyMaker(model_id, prompt)(text)


@dataclass(frozen=True, slots=True)
class CacheCounters:
    hits: int  # distinct texts found in the cache
    encoded: int  # distinct texts sent to the encoder
    requested: int  # texts asked for, duplicates included


class EmbeddingCache:
    """Embedding vectors by content address in a SQLite file (or in memory when `path` is None).

    The file is opened on first use, so constructing a cache is free. One
    instance may be used from several threads; several processes may share
    the file (each opens its own connection; after a fork the child reopens).
    """

    def __init__(self, path: str | Path | None, timeout_s: float = 60.0) -> None:
        self.path = None if path is None else Path(path)
        self.timeout_s = timeout_s
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.hits = 0
        self.encoded = 0
        self.requested = 0

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path) if self.path else ':memory:'!r})"

    # -- storage ---------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        try:
            if self.path is None:
                conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = connect(self.path, self.timeout_s, synchronous="NORMAL")
            conn.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise LmeError(f"{self.path}: cannot open the embedding cache ({exc}).") from None
        self._conn, self._pid = conn, os.getpid()  # a forked child opens its own connection
        return conn

    def _select(self, columns: str, keys: Sequence[str]) -> Iterator[tuple]:
        """Rows of `columns` for those `keys` that are stored, LOOKUP_CHUNK keys per query."""
        with self._lock:
            conn = self._connection()
            for start in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[start : start + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                yield from conn.execute(f"SELECT {columns} FROM embeddings WHERE key IN ({marks})", chunk)

    def lookup(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of those `keys` that are in the cache."""
        return {key: np.frombuffer(blob, dtype="<f4") for key, blob in self._select("key, vector", keys)}

    def present(self, keys: Sequence[str]) -> set[str]:
        """Those `keys` that are in the cache (no vector is read)."""
        return {key for (key,) in self._select("key", keys)}

    def store(self, model_id: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Store (key, vector) pairs in one transaction; keys already present are kept as they are."""
        rows = [
            (key, model_id, int(vector.shape[0]), np.ascontiguousarray(vector, dtype="<f4").tobytes())
            for key, vector in items
        ]
        if not rows:
            return
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(
                        "INSERT OR IGNORE INTO embeddings (key, model, dim, vector) VALUES (?, ?, ?, ?)", rows
                    )
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                raise LmeError(f"{self.path}: cannot write to the embedding cache ({exc}).") from None

    def __len__(self) -> int:
        with self._lock:
            return self._connection().execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- counters --------------------------------------------------------------------------------

    def counters(self) -> CacheCounters:
        with self._lock:
            return CacheCounters(hits=self.hits, encoded=self.encoded, requested=self.requested)

    def reset_counters(self) -> None:
        with self._lock:
            self.hits = self.encoded = self.requested = 0

    # -- encoding through the cache --------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        model_id: str,
        prompt: str,
        encode: Encode,
        chunk_texts: int = DEFAULT_CHUNK_TEXTS,
        progress: bool | None = None,
        description: str = "embedding",
    ) -> np.ndarray:
        """One float32 row per text of `texts`: cached vectors, and the missing ones encoded and stored.

        `encode` is called with lists of distinct, not yet cached texts
        (prompt not applied: that is the encoder's job), longest first, at
        most `chunk_texts` at a time. `progress`: None shows progress for at
        least PROGRESS_MIN_TEXTS texts to encode (a tqdm bar on a terminal, a line
        every 30 s otherwise: `lme.progress`), True a tqdm bar on stderr whatever
        it is and however few texts, False nothing; `lme.progress.set_enabled(False)`
        (the config key `progress: false`) turns all of it off. `description`
        labels it.
        An empty `texts` gives an array of shape (0, 0).
        """
        make_key = KeyMaker(model_id, prompt)
        keys = [make_key(text) for text in texts]
        distinct = dict(zip(keys, texts))  # one text per key, first-seen order
        vectors = self.lookup(list(distinct))
        missing = [key for key in distinct if key not in vectors]
        self._count(requested=len(texts), hits=len(distinct) - len(missing))
        vectors.update(self._encode_missing(distinct, missing, model_id, encode, chunk_texts, progress, description))
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        dims = {vector.shape[0] for vector in vectors.values()}
        if len(dims) != 1:
            raise LmeError(f"{self.path}: vectors of embedding model {model_id} have different sizes {sorted(dims)}.")
        return np.stack([vectors[key] for key in keys])

    def ensure(
        self,
        texts: Sequence[str],
        model_id: str,
        prompt: str,
        encode: Encode,
        chunk_texts: int = DEFAULT_CHUNK_TEXTS,
        progress: bool | None = None,
        description: str = "embedding",
    ) -> None:
        """Encode and store the texts of `texts` not yet cached, without reading any vector back.

        For warming the cache over a whole dataset in one batched pass.
        """
        make_key = KeyMaker(model_id, prompt)
        distinct = {make_key(text): text for text in texts}
        present = self.present(list(distinct))
        missing = [key for key in distinct if key not in present]
        self._count(requested=len(texts), hits=len(distinct) - len(missing))
        for _ in self._encode_missing(distinct, missing, model_id, encode, chunk_texts, progress, description):
            pass

    def _count(self, requested: int = 0, hits: int = 0, encoded: int = 0) -> None:
        with self._lock:
            self.requested += requested
            self.hits += hits
            self.encoded += encoded

    def _encode_missing(
        self,
        distinct: dict[str, str],
        missing: list[str],
        model_id: str,
        encode: Encode,
        chunk_texts: int,
        progress: bool | None,
        description: str,
    ) -> Iterator[tuple[str, np.ndarray]]:
        """Encode the `missing` keys' texts longest first, chunk by chunk, storing each chunk as it completes."""
        if chunk_texts < 1:
            raise ValueError(f"chunk_texts must be >= 1, got {chunk_texts}.")
        if not missing:
            return
        missing = sorted(missing, key=lambda key: len(distinct[key]), reverse=True)
        show = progress if progress is not None else len(missing) >= PROGRESS_MIN_TEXTS
        from concurrent.futures import Future, ThreadPoolExecutor

        # Each chunk is written by a helper thread while the next one is encoded (at most one write
        # in flight), so on a fast encoder (a GPU) the writes cost no encoding time.
        with (
            progress_display(description, len(missing), "texts", enabled=show, bar=True if progress else None) as bar,
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="lme-embedding-cache") as writer,
        ):
            pending: Future[None] | None = None
            for start in range(0, len(missing), chunk_texts):
                chunk = missing[start : start + chunk_texts]
                encoded = np.asarray(encode([distinct[key] for key in chunk]), dtype=np.float32)
                if encoded.ndim != 2 or encoded.shape[0] != len(chunk):
                    raise LmeError(
                        f"embedding model {model_id}: the encoder returned shape {encoded.shape} "
                        f"for {len(chunk)} texts."
                    )
                pairs = list(zip(chunk, encoded))
                if pending is not None:
                    pending.result()
                pending = writer.submit(self.store, model_id, pairs)
                self._count(encoded=len(chunk))
                bar.update(len(chunk))
                yield from pairs
            if pending is not None:
                pending.result()
