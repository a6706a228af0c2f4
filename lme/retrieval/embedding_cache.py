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
was opened (or `reset_counters`); `requested` counts texts asked for. An encoder
that fails mid-chunk may hand over the rows it finished (`with_partial_rows`):
they are stored before its exception goes on.

Encoding shows progress through `lme.util.progress` (texts encoded, texts/s, ETA):
a tqdm bar on a terminal, a line every 30 s otherwise, nothing when
`progress: false` (see `EmbeddingCache.embed`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lme.util.errors import LmeError
from lme.util.progress import is_enabled as progress_enabled
from lme.util.progress import progress as progress_display
from lme.util.sqlite import StoreKind, attached, immediate, insert_missing, open_store

Encode = Callable[[list[str]], np.ndarray]  # texts -> float array of shape (len(texts), dim)

LOOKUP_CHUNK = 900  # keys per `IN (...)` query, below SQLite's historical 999-variable limit
DEFAULT_CHUNK_TEXTS = 1024  # texts per encoder call and per write transaction
PROGRESS_MIN_TEXTS = 1024  # fewer texts to encode than this: no progress unless asked (progress=True)

_COLUMNS = ("key", "model", "dim", "vector")
_NAMES = ", ".join(_COLUMNS)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL
)
"""
EMBEDDINGS = StoreKind(
    "embedding cache", _SCHEMA, {"embeddings": _COLUMNS},
    "its vectors are encoded again; nothing else is lost",
)


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


def _sound(dim: object, blob: object) -> np.ndarray | None:
    """The stored vector when it is sound (`dim` >= 1 float32 values, all finite), else None."""
    if not isinstance(dim, int) or dim < 1 or not isinstance(blob, bytes) or len(blob) != 4 * dim:
        return None
    vector = np.frombuffer(blob, dtype="<f4")
    return vector if np.isfinite(vector).all() else None


_PARTIAL = "lme_partial_rows"


def with_partial_rows(exc: BaseException, rows: dict[int, np.ndarray]) -> BaseException:
    """`exc`, carrying the vectors an encoder finished before it failed (row in the texts it was given ->
    vector), so the cache stores them before the exception goes on (`EmbeddingCache.embed`): an API encoder
    stopped by a spending cap keeps the batches it paid for."""
    setattr(exc, _PARTIAL, rows)
    return exc


def partial_rows(exc: BaseException) -> dict[int, np.ndarray]:
    rows = getattr(exc, _PARTIAL, None)
    return rows if isinstance(rows, dict) else {}


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

    def __init__(self, path: str | Path | None, timeout_s: float | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.timeout_s = timeout_s  # None: LME_SQLITE_BUSY_TIMEOUT_S, else 60 s
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.hits = 0
        self.encoded = 0
        self.requested = 0
        self.replaced = 0  # damaged vectors found, encoded again and replaced

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path) if self.path else ':memory:'!r})"

    # -- storage ---------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """The file's connection (`lme.util.sqlite.open_store`: created whole; every fault at open or during use a
        `StoreError` naming the file), opened on first use and again in a forked child."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self.path is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            conn.execute(_SCHEMA)
        else:
            conn = open_store(self.path, EMBEDDINGS, synchronous="NORMAL", timeout_s=self.timeout_s)
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

    def lookup(self, keys: Sequence[str], damaged: set[str] | None = None) -> dict[str, np.ndarray]:
        """The stored vectors of those `keys` that are in the cache and sound: a vector whose byte length is
        not 4 x its dim, or that holds a NaN or an infinity, is left out as if missing (and its key added to
        `damaged`, when given, so that its new vector replaces it)."""
        found: dict[str, np.ndarray] = {}
        for key, dim, blob in self._select("key, dim, vector", keys):
            vector = _sound(dim, blob)
            if vector is None:
                if damaged is not None:
                    damaged.add(key)
            else:
                found[key] = vector
        return found

    def present(self, keys: Sequence[str], damaged: set[str] | None = None) -> set[str]:
        """Those `keys` that are in the cache (no vector is read: a vector whose byte length is not 4 x its dim
        counts as absent, and goes to `damaged`; a NaN is found when the vector is read, by `lookup`)."""
        found: set[str] = set()
        for key, sound in self._select("key, dim >= 1 AND typeof(vector) = 'blob' AND length(vector) = 4 * dim", keys):
            if sound:
                found.add(key)
            elif damaged is not None:
                damaged.add(key)
        return found

    def store(self, model_id: str, items: Iterable[tuple[str, np.ndarray]],
              replace: Iterable[str] = ()) -> None:
        """Store (key, vector) pairs in one transaction; keys already present are kept as they are, except those
        in `replace` (damaged vectors), which are overwritten."""
        replace = set(replace)
        rows = [
            (key, model_id, int(vector.shape[0]), np.ascontiguousarray(vector, dtype="<f4").tobytes())
            for key, vector in items
        ]
        if not rows:
            return
        kept = [row for row in rows if row[0] not in replace]
        renewed = [row for row in rows if row[0] in replace]
        with self._lock:
            conn = self._connection()
            with immediate(conn):  # a full disk, a lock, a moved file: StoreError naming the file
                if kept:
                    conn.executemany(f"INSERT OR IGNORE INTO embeddings ({_NAMES}) VALUES (?, ?, ?, ?)", kept)
                if renewed:
                    conn.executemany(f"INSERT OR REPLACE INTO embeddings ({_NAMES}) VALUES (?, ?, ?, ?)", renewed)

    def _say_replaced(self, count: int, model_id: str) -> None:
        if count:
            with self._lock:
                self.replaced += count
            print(f"lme: {self.path or ':memory:'}: {count:,} damaged vector(s) of {model_id} (a wrong length or size, "
                  "or NaN) were encoded again and replaced.", file=sys.stderr, flush=True)

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
        every 30 s otherwise: `lme.util.progress`), True a tqdm bar on stderr whatever
        it is and however few texts, False nothing; `lme.util.progress.set_enabled(False)`
        (the config key `progress: false`) turns all of it off. `description`
        labels it.
        An empty `texts` gives an array of shape (0, 0).
        """
        make_key = KeyMaker(model_id, prompt)
        keys = [make_key(text) for text in texts]
        distinct = dict(zip(keys, texts))  # one text per key, first-seen order
        damaged: set[str] = set()
        vectors = self.lookup(list(distinct), damaged)
        missing = [key for key in distinct if key not in vectors]
        self._count(requested=len(texts), hits=len(distinct) - len(missing))
        new = dict(self._encode_missing(distinct, missing, model_id, encode, chunk_texts, progress, description,
                                        replace=damaged))
        vectors.update(new)
        if not keys:
            self._say_replaced(len(damaged), model_id)
            return np.zeros((0, 0), dtype=np.float32)
        sizes = Counter(vector.shape[0] for vector in vectors.values())
        if len(sizes) > 1:  # stored vectors of another size than the encoder's (or than most): encoded again
            encoder_dims = {vector.shape[0] for vector in new.values()}
            if len(encoder_dims) == 1:
                dim = encoder_dims.pop()
            else:
                (dim, most), *rest = sizes.most_common()
                dim = dim if most > rest[0][1] else -1  # a tie: every stored vector is encoded again
            wrong = [key for key, vector in vectors.items() if vector.shape[0] != dim and key not in new]
            damaged.update(wrong)
            self._count(hits=-len(wrong))
            vectors.update(self._encode_missing(distinct, wrong, model_id, encode, chunk_texts, progress, description,
                                                replace=set(wrong)))
            sizes = Counter(vector.shape[0] for vector in vectors.values())
            if len(sizes) != 1:
                raise LmeError(f"embedding model {model_id}: the encoder returned vectors of different sizes "
                               f"{sorted(sizes)}.")
        self._say_replaced(len(damaged), model_id)
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
        min_texts: int | None = None,
        load: Callable[[], object] | None = None,
    ) -> None:
        """Encode and store the texts of `texts` not yet cached, without reading any vector back.

        For warming the cache over a whole dataset in one batched pass. `min_texts`: with `progress` None,
        progress is shown for at least this many texts to encode (None: PROGRESS_MIN_TEXTS; a job's preparation: 1).
        `load` (the encoder's model), when there is something to encode, is called before the progress starts, with
        a line saying so where progress shows: its rate and ETA are the encoding's, not the model's load.
        """
        make_key = KeyMaker(model_id, prompt)
        distinct = {make_key(text): text for text in texts}
        damaged: set[str] = set()
        present = self.present(list(distinct), damaged)
        missing = [key for key in distinct if key not in present]
        self._count(requested=len(texts), hits=len(distinct) - len(missing))
        for _ in self._encode_missing(distinct, missing, model_id, encode, chunk_texts, progress, description,
                                      min_texts, load, replace=damaged):
            pass
        self._say_replaced(len(damaged), model_id)

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
        min_texts: int | None = None,
        load: Callable[[], object] | None = None,
        replace: set[str] | frozenset[str] = frozenset(),
    ) -> Iterator[tuple[str, np.ndarray]]:
        """Encode the `missing` keys' texts longest first, chunk by chunk, storing each chunk as it completes
        (the keys in `replace`, damaged vectors, overwritten)."""
        if chunk_texts < 1:
            raise ValueError(f"chunk_texts must be >= 1, got {chunk_texts}.")
        if not missing:
            return
        missing = sorted(missing, key=lambda key: len(distinct[key]), reverse=True)
        show = progress if progress is not None else len(missing) >= (
            PROGRESS_MIN_TEXTS if min_texts is None else min_texts)
        if load is not None:
            if show and progress_enabled():
                print(f"lme: {description}: loading the model for {len(missing):,} texts", file=sys.stderr, flush=True)
            load()
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
                try:
                    encoded = np.asarray(encode([distinct[key] for key in chunk]), dtype=np.float32)
                except BaseException as exc:  # a cap or a failure mid-chunk: keep the rows the encoder finished
                    done = [(chunk[row], np.asarray(vector, dtype=np.float32))
                            for row, vector in sorted(partial_rows(exc).items()) if 0 <= row < len(chunk)]
                    if done:
                        if pending is not None:
                            pending.result()
                            pending = None
                        self.store(model_id, done, replace)
                        self._count(encoded=len(done))
                        bar.update(len(done))
                    raise
                if encoded.ndim != 2 or encoded.shape[0] != len(chunk):
                    raise LmeError(
                        f"embedding model {model_id}: the encoder returned shape {encoded.shape} "
                        f"for {len(chunk)} texts."
                    )
                if not np.isfinite(encoded).all():
                    raise LmeError(f"embedding model {model_id}: the encoder returned NaN or infinite values; "
                                   "nothing of this chunk is stored.")
                pairs = list(zip(chunk, encoded))
                if pending is not None:
                    pending.result()
                pending = writer.submit(self.store, model_id, pairs, replace)
                self._count(encoded=len(chunk))
                bar.update(len(chunk))
                yield from pairs
            if pending is not None:
                pending.result()


# -- export and import: one portable file of vectors, for a team to fill the cache once ------------------

EXPORT_FORMAT = "lme-embeddings"
EXPORT_VERSION = 1
EXPORT_DTYPE = "float32-le"  # every vector: little-endian float32, `dim` of them
_KEY_CHARS = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class ModelVectors:
    model: str  # the model id the vectors are keyed by (with its backend and precision, where it has them)
    dim: int
    count: int


@dataclass(frozen=True, slots=True)
class ExportSummary:
    path: Path
    count: int
    models: tuple[ModelVectors, ...]
    digest: str  # SHA-256 over every (key, model, dim, vector) in key order (`vectors_digest`)
    bytes: int
    damaged: int = 0  # rows of the cache left out: a vector NaN, infinite, of a wrong length or type


@dataclass(frozen=True, slots=True)
class ImportSummary:
    path: Path
    target: Path
    count: int  # vectors in the file
    added: int  # new to the target
    identical: int  # already in the target with the same vector: skipped
    conflicting: int  # already in the target with another vector: kept as they were (--keep-existing)
    models: tuple[ModelVectors, ...]


def vectors_digest(conn: sqlite3.Connection, schema: str = "main") -> tuple[str, int]:
    """(SHA-256, rows) over every row of `schema`.embeddings in key order: each key, model, dim and vector
    length-prefixed, so no two different contents share a digest."""
    digest = hashlib.sha256()
    rows = 0
    for key, model, dim, vector in conn.execute(f"SELECT key, model, dim, vector FROM {schema}.embeddings ORDER BY key"):
        digest.update(_length_prefixed(key) + _length_prefixed(model) + int(dim).to_bytes(8, "big"))
        digest.update(len(vector).to_bytes(8, "big") + bytes(vector))
        rows += 1
    return digest.hexdigest(), rows


# a row whose columns have the types a vector needs (its values are checked by `_sound`)
_TYPED = ("typeof(key) = 'text' AND typeof(model) = 'text' AND typeof(dim) = 'integer' AND dim >= 1 "
          "AND typeof(vector) = 'blob' AND length(vector) = 4 * dim")


def _models(conn: sqlite3.Connection, schema: str) -> tuple[ModelVectors, ...]:
    rows = conn.execute(f"SELECT model, dim, COUNT(*) FROM {schema}.embeddings WHERE {_TYPED} "
                        "GROUP BY model, dim ORDER BY model, dim")
    return tuple(ModelVectors(str(model), int(dim), int(count)) for model, dim, count in rows)


def _has_embeddings(conn: sqlite3.Connection, schema: str) -> bool:
    return conn.execute(
        f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'embeddings'"
    ).fetchone() is not None


def export_embeddings(cache_path: str | Path, out_path: str | Path, model: str | None = None,
                      overwrite: bool = False) -> ExportSummary:
    """Write the vectors of the cache at `cache_path` (of `model` only, when given) to `out_path`: one SQLite
    file (no side files) holding the table `embeddings` (key, model, dim, vector), as in the cache, and
    `manifest` (format, version, dtype, count, models with their dims, digest). Written whole under a
    temporary name, then renamed: an interrupted export leaves no file that looks complete."""
    cache_path, out_path = Path(cache_path), Path(out_path)
    if not cache_path.is_file():
        raise LmeError(f"cache export: {cache_path}: no embedding cache there, nothing to export.")
    if out_path.exists() and not overwrite:
        raise LmeError(f"cache export: {out_path} exists; remove it or pass --force.")
    if out_path.resolve() == cache_path.resolve():
        raise LmeError(f"cache export: {out_path} is the cache itself.")
    open_store(cache_path, EMBEDDINGS, readonly=True).close()  # a faulty cache: the store's one sentence
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        conn = sqlite3.connect(partial, isolation_level=None)
    except sqlite3.Error as exc:
        raise LmeError(f"cache export: cannot write {out_path} ({exc}).") from None
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute(_SCHEMA)
        conn.execute("CREATE TABLE manifest (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        with attached(conn, cache_path, "source"):
            if not _has_embeddings(conn, "source"):
                raise LmeError(f"cache export: {cache_path}: not an lme embedding cache (no embeddings table).")
            where, args = ("AND model = ?", (model,)) if model is not None else ("", ())
            with immediate(conn):  # damaged rows left out (the cache encodes them again when next used)
                conn.execute(f"INSERT INTO main.embeddings ({_NAMES}) "
                             f"SELECT {_NAMES} FROM source.embeddings WHERE {_TYPED} {where} ORDER BY key", args)
                unsound = [key for key, dim, blob in conn.execute("SELECT key, dim, vector FROM main.embeddings")
                           if _sound(dim, blob) is None]  # NaN or infinite values
                conn.executemany("DELETE FROM main.embeddings WHERE key = ?", [(key,) for key in unsound])
            selected = conn.execute(
                "SELECT COUNT(*) FROM source.embeddings" + (" WHERE model = ?" if model is not None else ""),
                args).fetchone()[0]
            available = _models(conn, "source")
        models = _models(conn, "main")
        if model is not None and not models:
            names = ", ".join(sorted({entry.model for entry in available})) or "none"
            raise LmeError(f"cache export: {cache_path} holds no vector of model {model!r} (models there: {names}).")
        digest, count = vectors_digest(conn)
        manifest = {
            "format": EXPORT_FORMAT, "version": str(EXPORT_VERSION), "dtype": EXPORT_DTYPE, "count": str(count),
            "digest": digest, "models": json.dumps([[m.model, m.dim, m.count] for m in models]),
        }
        conn.executemany("INSERT INTO manifest (name, value) VALUES (?, ?)", sorted(manifest.items()))
    except sqlite3.Error as exc:
        conn.close()
        partial.unlink(missing_ok=True)
        raise LmeError(f"cache export: {cache_path} -> {out_path}: {exc}.") from None
    except BaseException:
        conn.close()
        partial.unlink(missing_ok=True)
        raise
    conn.close()
    os.replace(partial, out_path)
    return ExportSummary(out_path, count, models, digest, out_path.stat().st_size, int(selected) - count)


def _read_manifest(conn: sqlite3.Connection, path: Path) -> dict[str, str]:
    what = f"cache import: {path}: not an lme embeddings export"
    try:
        if conn.execute("SELECT 1 FROM imported.sqlite_master WHERE type = 'table' AND name = 'manifest'"
                        ).fetchone() is None or not _has_embeddings(conn, "imported"):
            raise LmeError(f"{what} (no manifest or embeddings table).")
        manifest = {str(name): str(value) for name, value in conn.execute("SELECT name, value FROM imported.manifest")}
    except sqlite3.DatabaseError as exc:
        raise LmeError(f"{what} ({exc}).") from None
    if manifest.get("format") != EXPORT_FORMAT:
        raise LmeError(f"{what} (format {manifest.get('format')!r}).")
    if not manifest.get("version", "").isdigit() or int(manifest["version"]) > EXPORT_VERSION:
        raise LmeError(f"cache import: {path}: export version {manifest.get('version')!r} is newer than this lme "
                       f"reads ({EXPORT_VERSION}); upgrade lme.")
    if manifest.get("dtype") != EXPORT_DTYPE:
        raise LmeError(f"cache import: {path}: vectors of dtype {manifest.get('dtype')!r}, expected {EXPORT_DTYPE}.")
    return manifest


def verify_export(conn: sqlite3.Connection, path: Path) -> tuple[ModelVectors, ...]:
    """Check the export attached as `imported` against its manifest: digest and count, every vector's byte
    length against its dim, one dim per model and the manifest's, keys of 64 hex digits. Returns its models."""
    manifest = _read_manifest(conn, path)
    bad = conn.execute(
        "SELECT COUNT(*) FROM imported.embeddings WHERE dim < 1 OR length(vector) != 4 * dim OR length(key) != 64"
    ).fetchone()[0]
    if bad:
        raise LmeError(f"cache import: {path}: {bad} vector(s) whose length does not match their dim or whose key "
                       "is not a SHA-256; the file is damaged.")
    if any(set(key) - _KEY_CHARS for (key,) in conn.execute("SELECT key FROM imported.embeddings")):
        raise LmeError(f"cache import: {path}: a key is not a lower-case hex SHA-256; the file is damaged.")
    models = _models(conn, "imported")
    listed = sorted(tuple(item) for item in json.loads(manifest.get("models", "[]")))
    if sorted((m.model, m.dim, m.count) for m in models) != listed:
        raise LmeError(f"cache import: {path}: its models and dims differ from its manifest; the file is damaged.")
    for name in {m.model for m in models}:
        dims = sorted({m.dim for m in models if m.model == name})
        if len(dims) > 1:
            raise LmeError(f"cache import: {path}: model {name} has vectors of sizes {dims}; the file is damaged.")
    digest, count = vectors_digest(conn, "imported")
    if str(count) != manifest.get("count") or digest != manifest.get("digest"):
        raise LmeError(f"cache import: {path}: its digest or count ({count} vectors) does not match its manifest; "
                       "the file is damaged or was changed after export.")
    return models


def _check_export_file(path: Path) -> None:
    """`LmeError` naming the export file when it is not a readable SQLite file with the export's tables (before
    it is attached to the cache, so that its faults are not taken for the cache's)."""
    what = f"cache import: {path}: not an lme embeddings export"
    try:
        with open(path, "rb") as handle:
            if handle.read(16) != b"SQLite format 3\x00":
                raise LmeError(f"{what} (not an SQLite file).")
        conn = sqlite3.connect(Path(os.path.abspath(path)).as_uri() + "?mode=ro", uri=True)
        try:
            names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        raise LmeError(f"{what} ({getattr(exc, 'strerror', None) or exc}).") from None
    if not {"manifest", "embeddings"} <= names:
        raise LmeError(f"{what} (no manifest or embeddings table).")


def import_embeddings(path: str | Path, cache_path: str | Path, keep_existing: bool = False) -> ImportSummary:
    """Verify the export at `path` (`verify_export`), then add its vectors to the cache at `cache_path`, in
    one transaction. A key already in the cache with the same vector is skipped; with another vector it is
    a conflict: without `keep_existing` nothing is imported and `LmeError` says how many; with it, the
    cache's vectors are kept and the rest imported. A model whose vectors in the cache have another size
    is refused whatever `keep_existing` says."""
    path, cache_path = Path(path), Path(cache_path)
    if not path.is_file():
        raise LmeError(f"cache import: {path}: no such file.")
    if cache_path.exists() and cache_path.resolve() == path.resolve():
        raise LmeError(f"cache import: {path} is the target cache itself.")
    _check_export_file(path)
    cache = EmbeddingCache(cache_path)
    try:
        with cache._lock:
            conn = cache._connection()
            with attached(conn, path, "imported"):
                models = verify_export(conn, path)
                for entry in models:
                    dims = [dim for (dim,) in conn.execute(
                        "SELECT DISTINCT dim FROM main.embeddings WHERE model = ? AND dim != ?", (entry.model, entry.dim))]
                    if dims:
                        raise LmeError(f"cache import: {path}: model {entry.model} has vectors of size {entry.dim} "
                                       f"there but {dims[0]} in {cache_path}; nothing imported.")
                with immediate(conn):
                    identical, conflicting = conn.execute(
                        "SELECT COALESCE(SUM(m.model = i.model AND m.dim = i.dim AND m.vector = i.vector), 0), "
                        "COALESCE(SUM(NOT (m.model = i.model AND m.dim = i.dim AND m.vector = i.vector)), 0) "
                        "FROM imported.embeddings AS i JOIN main.embeddings AS m ON m.key = i.key"
                    ).fetchone()
                    if conflicting and not keep_existing:
                        raise LmeError(
                            f"cache import: {path}: {conflicting} vector(s) differ from those {cache_path} holds "
                            "under the same key (same model, prompt and text); nothing imported. Pass "
                            "--keep-existing to keep the cache's and import the rest."
                        )
                    added = insert_missing(conn, "embeddings", _COLUMNS, "imported")
                count = sum(entry.count for entry in models)
    except sqlite3.Error as exc:
        raise LmeError(f"cache import: {path} -> {cache_path}: {exc}.") from None
    finally:
        cache.close()
    return ImportSummary(path, cache_path, count, int(added), int(identical), int(conflicting), models)
