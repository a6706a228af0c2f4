"""Rows of lme's SQLite stores that another program wrote with the wrong types or values (issue 36): the ledger
refuses them in one sentence (its sums decide the caps); the call cache and the embedding cache treat such a
row as missing, say so, and never pass it on (`cache merge`, `cache export`)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from lme.models.cache import CallCache, merge_caches
from lme.models.ledger import Ledger, read_rows
from lme.retrieval.embedding_cache import EmbeddingCache, export_embeddings
from lme.util.sqlite import StoreError

DIM = 8


def _encode(texts: list[str]) -> np.ndarray:
    return np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest()[:DIM], np.uint8).astype(np.float32) + 1
                     for t in texts]) if texts else np.zeros((0, DIM), np.float32)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ledger_text_where_a_number_belongs_is_refused(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path, study="s", job="j")
    ledger.settle(ledger.reserve("m", "k", 0.5), {"input_tokens": 1}, 0.25, 1)
    ledger.close()
    conn = sqlite3.connect(path)
    with conn:  # another program, past the append-only trigger
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'calls_no_update'").fetchone()[0]
        conn.execute("DROP TRIGGER calls_no_update")
        conn.execute("UPDATE calls SET dollars = 'a quarter'")
        conn.execute(sql)
    conn.close()
    before = _sha(path)
    for use in (lambda: Ledger(path, study="s", job="j"), lambda: read_rows(path)):
        with pytest.raises(StoreError) as caught:
            use()
        message = str(caught.value)
        assert str(path) in message and "dollars" in message and "not a number" in message and "\n" not in message
    assert _sha(path) == before


def test_call_cache_damaged_row_is_a_said_miss_and_left_out_of_a_merge(tmp_path, capsys):
    first, second = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    for path, reply in ((first, {"text": "a"}), (second, {"text": "b"})):
        cache = CallCache(path)
        cache.put("k", "m", reply)
        cache.close()
    conn = sqlite3.connect(first)
    with conn:
        conn.execute("UPDATE calls SET response = 12345, model = 7")
    conn.close()
    cache = CallCache(first)
    assert cache.get("k") is None and cache.get("k") is None
    cache.close()
    assert capsys.readouterr().err.count(f"{first}: a cached reply could not be read") == 1
    added = merge_caches(tmp_path / "merged.sqlite", [first, second])
    assert added == {str(first): 0, str(second): 1}
    assert "1 damaged entry" in capsys.readouterr().err
    merged = CallCache(tmp_path / "merged.sqlite")
    assert merged.get("k") == {"text": "b"}  # the sound answer of the later source, not blocked by the damaged one
    merged.close()


@pytest.mark.parametrize("damage", ["nan", "short", "types"])
def test_embedding_export_leaves_damaged_vectors_out(tmp_path, damage):
    path = tmp_path / "embeddings.sqlite"
    with EmbeddingCache(path) as cache:
        cache.embed(["one", "two", "three"], "model", "", _encode)
    conn = sqlite3.connect(path)
    key = conn.execute("SELECT key FROM embeddings ORDER BY key LIMIT 1").fetchone()[0]
    change = {"nan": ("vector = ?", (bytes.fromhex("0000c07f") * DIM,)), "short": ("vector = ?", (b"\0" * 8,)),
              "types": ("dim = 'x', model = 5", ())}[damage]
    with conn:
        conn.execute(f"UPDATE embeddings SET {change[0]} WHERE key = ?", (*change[1], key))
    conn.close()
    summary = export_embeddings(path, tmp_path / "out.sqlite")
    assert (summary.count, summary.damaged) == (2, 1)
    out = sqlite3.connect(tmp_path / "out.sqlite")
    assert out.execute("SELECT COUNT(*) FROM embeddings WHERE key = ?", (key,)).fetchone()[0] == 0
    out.close()
    with EmbeddingCache(path) as cache:  # the cache itself encodes it again
        vectors = cache.embed(["one", "two", "three"], "model", "", _encode)
    assert np.isfinite(vectors).all() and vectors.shape == (3, DIM)
