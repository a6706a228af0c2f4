"""The embedding cache: content addresses, counters, batching, persistence, two processes at once.

The encoder here is a plain deterministic function (a vector derived from the
text's SHA-256), so these tests exercise the cache itself, fast, with no model.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from lme.util.errors import LmeError
from lme.retrieval.embedding_cache import (
    LOOKUP_CHUNK,
    CacheCounters,
    EmbeddingCache,
    KeyMaker,
    embedding_key,
)

DIM = 8
MODEL = "test/hash-model"


def hash_vector(text: str) -> np.ndarray:
    """A float32 vector of DIM values in [0, 1) determined by `text`."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return np.frombuffer(digest[:DIM], dtype=np.uint8).astype(np.float32) / 256


class RecordingEncoder:
    """Encodes with `hash_vector` and records every call's texts."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([hash_vector(text) for text in texts]) if texts else np.zeros((0, DIM), np.float32)

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]


def test_key_is_sha256_hex_and_depends_on_every_part() -> None:
    key = embedding_key(MODEL, "query: ", "a car")
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == embedding_key(MODEL, "query: ", "a car")
    assert key != embedding_key("other/model", "query: ", "a car")
    assert key != embedding_key(MODEL, "", "a car")
    assert key != embedding_key(MODEL, "query: ", "a car ")
    assert KeyMaker(MODEL, "query: ")("a car") == key


def test_key_parts_cannot_run_into_each_other() -> None:
    assert embedding_key(MODEL, "ab", "c") != embedding_key(MODEL, "a", "bc")
    assert embedding_key("m", "p", "t") != embedding_key("mp", "", "t")
    assert embedding_key(MODEL, "", "query: x") != embedding_key(MODEL, "query: ", "x")


def test_constructing_opens_nothing(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "embeddings.sqlite"
    EmbeddingCache(path)
    assert not path.parent.exists()


def test_embed_encodes_each_distinct_text_once_and_keeps_input_order(tmp_path: Path) -> None:
    encoder = RecordingEncoder()
    texts = ["b", "a longer text", "b", "c", "a longer text", "b"]
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        vectors = cache.embed(texts, MODEL, "", encoder)
        assert vectors.shape == (6, DIM) and vectors.dtype == np.float32
        for row, text in zip(vectors, texts):
            np.testing.assert_array_equal(row, hash_vector(text))
        assert sorted(encoder.texts) == ["a longer text", "b", "c"]
        assert encoder.texts[0] == "a longer text"  # longest first
        assert cache.counters() == CacheCounters(hits=0, encoded=3, requested=6)
        assert len(cache) == 3


def test_second_pass_encodes_nothing_and_counts_hits(tmp_path: Path) -> None:
    encoder = RecordingEncoder()
    texts = [f"turn {i}" for i in range(50)] + ["turn 3", "turn 4"]
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        first = cache.embed(texts, MODEL, "doc: ", encoder)
    calls = len(encoder.calls)
    with EmbeddingCache(tmp_path / "e.sqlite") as reopened:  # persisted across instances (and runs)
        again = reopened.embed(texts, MODEL, "doc: ", encoder)
        assert len(encoder.calls) == calls
        assert reopened.encoded == 0
        assert reopened.hits == 50
        np.testing.assert_array_equal(first, again)
        reopened.reset_counters()
        assert reopened.counters() == CacheCounters(0, 0, 0)


def test_a_new_prompt_or_model_is_a_miss(tmp_path: Path) -> None:
    encoder = RecordingEncoder()
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        cache.embed(["x", "y"], MODEL, "query: ", encoder)
        cache.embed(["x", "y"], MODEL, "passage: ", encoder)
        cache.embed(["x", "y"], "other/model", "query: ", encoder)
        assert cache.encoded == 6 and cache.hits == 0
        assert len(cache) == 6


def test_partial_hits_encode_only_the_missing(tmp_path: Path) -> None:
    encoder = RecordingEncoder()
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        cache.embed(["a", "b"], MODEL, "", encoder)
        encoder.calls.clear()
        cache.embed(["a", "b", "c", "d"], MODEL, "", encoder)
        assert sorted(encoder.texts) == ["c", "d"]
        assert cache.counters() == CacheCounters(hits=2, encoded=4, requested=6)


def test_chunks_are_whole_and_bounded_and_lookups_exceed_one_in_clause(tmp_path: Path) -> None:
    encoder = RecordingEncoder()
    n = LOOKUP_CHUNK * 2 + 17
    texts = [f"text number {i}" for i in range(n)]
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        cache.embed(texts, MODEL, "", encoder, chunk_texts=100)
        assert [len(call) for call in encoder.calls] == [100] * (n // 100) + [n % 100]
        vectors = cache.embed(texts, MODEL, "", encoder)
        assert cache.hits == n and cache.encoded == n
        assert vectors.shape == (n, DIM)
        np.testing.assert_array_equal(vectors[-1], hash_vector(texts[-1]))


def test_ensure_stores_without_reading_back(tmp_path: Path) -> None:
    encoder = RecordingEncoder()
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        assert cache.ensure(["a", "b", "a"], MODEL, "", encoder) is None
        assert cache.counters() == CacheCounters(hits=0, encoded=2, requested=3)
        cache.ensure(["a", "b", "c"], MODEL, "", encoder)
        assert cache.counters() == CacheCounters(hits=2, encoded=3, requested=6)
        cache.embed(["c", "b"], MODEL, "", encoder)
        assert cache.encoded == 3


def test_vectors_are_float32_blobs(tmp_path: Path) -> None:
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        cache.embed(["a"], MODEL, "", RecordingEncoder())
    with sqlite3.connect(tmp_path / "e.sqlite") as conn:
        key, model, dim, blob = conn.execute("SELECT key, model, dim, vector FROM embeddings").fetchone()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert key == embedding_key(MODEL, "", "a") and model == MODEL and dim == DIM
    assert len(blob) == 4 * DIM
    np.testing.assert_array_equal(np.frombuffer(blob, dtype="<f4"), hash_vector("a"))


def test_empty_input_and_in_memory_cache() -> None:
    encoder = RecordingEncoder()
    cache = EmbeddingCache(None)
    assert cache.embed([], MODEL, "", encoder).shape == (0, 0)
    assert encoder.calls == []
    cache.embed(["a"], MODEL, "", encoder)
    cache.embed(["a"], MODEL, "", encoder)
    assert cache.counters() == CacheCounters(hits=1, encoded=1, requested=2)


def test_encoder_returning_the_wrong_shape_is_one_clear_error(tmp_path: Path) -> None:
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        with pytest.raises(LmeError, match=r"returned shape \(1, 8\) for 2 texts"):
            cache.embed(["a", "b"], MODEL, "", lambda texts: np.zeros((1, DIM)))
        assert len(cache) == 0


def test_unopenable_path_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(LmeError, match="a file stands in its path where a folder should be"):
        EmbeddingCache(blocker / "embeddings.sqlite").embed(["a"], MODEL, "", RecordingEncoder())


def test_a_file_that_is_not_a_cache_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.sqlite"
    path.write_bytes(b"this is not an SQLite database, just some bytes" * 100)
    with pytest.raises(LmeError, match="not an lme embedding cache, or a damaged one"):
        EmbeddingCache(path).embed(["a"], MODEL, "", RecordingEncoder())


def test_progress_bar_only_when_asked_or_on_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        cache.embed([f"t{i}" for i in range(5000)], MODEL, "", RecordingEncoder())  # stderr is not a terminal
        assert capsys.readouterr().err == ""
        cache.embed(["new 1", "new 2"], MODEL, "", RecordingEncoder(), progress=True, description="turns")
        err = capsys.readouterr().err
        assert "turns" in err and "2/2" in err


def _worker(path: str, start: int, count: int, barrier, results) -> None:
    """One process: embed texts start..start+count-1 in small chunks, each chunk its own write."""
    cache = EmbeddingCache(path)
    barrier.wait(timeout=60)
    texts = [f"shared text {i}" for i in range(start, start + count)]
    vectors = cache.embed(texts, MODEL, "", lambda batch: np.stack([hash_vector(t) for t in batch]), chunk_texts=25)
    ok = all(np.array_equal(row, hash_vector(text)) for row, text in zip(vectors, texts))
    results.put((start, cache.encoded, cache.hits, ok))
    cache.close()


def test_two_processes_share_one_cache_file(tmp_path: Path) -> None:
    """Two processes encode overlapping texts at once: no lock error, every text stored once, right vectors."""
    path = tmp_path / "shared.sqlite"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    workers = [
        context.Process(target=_worker, args=(str(path), start, 1500, barrier, results)) for start in (0, 1000)
    ]
    for worker in workers:
        worker.start()
    outcomes = sorted(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    for _, encoded, hits, ok in outcomes:
        assert ok
        assert encoded + hits == 1500
    assert sum(encoded for _, encoded, _, _ in outcomes) >= 2500  # the union; a text may be encoded by both
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM embeddings").fetchone() == (2500, 2500)
    with EmbeddingCache(path) as cache:
        encoder = RecordingEncoder()
        vectors = cache.embed([f"shared text {i}" for i in range(2500)], MODEL, "", encoder)
        assert encoder.calls == [] and cache.hits == 2500
        np.testing.assert_array_equal(vectors[1234], hash_vector("shared text 1234"))
