"""`lme cache export` / `import`: embedding vectors to one verified file and back, never overwriting silently.

Real SQLite files throughout; the round trip runs the real semantic retriever (the packaged MiniLM) on an
excerpt of the mini file, and the importing side never loads the model.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from embedding_data import mini_excerpt

from lme.cli import run_subcommand
from lme.data.load import load_questions
from lme.util.errors import LmeError
from lme.retrieval.dense import DenseRetriever
from lme.retrieval.embedding_cache import (
    EmbeddingCache,
    embedding_key,
    export_embeddings,
    import_embeddings,
)
from shared_data import MINI, needs

MODEL_A = "model-a"
MODEL_B = "model-b"


def fill(path: Path, model: str, texts: list[str], dim: int = 8, offset: float = 0.0) -> dict[str, np.ndarray]:
    """Store one made-up vector per text under its real key; returns key -> vector."""
    vectors = {embedding_key(model, "", text): np.arange(dim, dtype=np.float32) + i + offset
               for i, text in enumerate(texts)}
    with EmbeddingCache(path) as cache:
        cache.store(model, vectors.items())
    return vectors


def stored(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as conn:
        return {key: bytes(vector) for key, vector in conn.execute("SELECT key, vector FROM embeddings")}


# -- the round trip with the real retriever -------------------------------------------------------


@needs(MINI)
def test_an_imported_cache_ranks_as_the_exporting_one_without_loading_the_model(tmp_path: Path) -> None:
    questions = load_questions(mini_excerpt(tmp_path / "mini.json", questions=2, other_sessions=1))
    filled = DenseRetriever(model="minilm-packaged", device="cpu", cache_path=tmp_path / "a" / "e.sqlite",
                            progress=False)
    before = [filled.rank(question, 20) for question in questions]
    encoded = filled.counters().encoded
    distinct = len({t.content for q in questions for t in q.turns()}) + len({q.question for q in questions})
    assert encoded == distinct
    filled.close()

    summary = export_embeddings(tmp_path / "a" / "e.sqlite", tmp_path / "vectors.lme-embeddings")
    assert summary.count == encoded
    assert [(m.model, m.dim, m.count) for m in summary.models] == [(filled.model_id, 384, encoded)]

    result = import_embeddings(tmp_path / "vectors.lme-embeddings", tmp_path / "b" / "e.sqlite")
    assert (result.added, result.identical, result.conflicting) == (encoded, 0, 0)

    teammate = DenseRetriever(model="minilm-packaged", device="cpu", cache_path=tmp_path / "b" / "e.sqlite",
                              progress=False)
    after = [teammate.rank(question, 20) for question in questions]
    assert after == before  # the same turns in the same order with the same scores
    assert teammate.counters().encoded == 0
    assert not teammate.encoder.loaded  # every vector came from the file: the model was never loaded


# -- verification and conflicts -------------------------------------------------------------------


def test_export_of_one_model_and_the_manifest(tmp_path: Path) -> None:
    cache = tmp_path / "e.sqlite"
    fill(cache, MODEL_A, ["one", "two", "three"])
    fill(cache, MODEL_B, ["one"], dim=4)
    only_b = export_embeddings(cache, tmp_path / "b.sqlite", model=MODEL_B)
    assert only_b.count == 1 and [(m.model, m.dim) for m in only_b.models] == [(MODEL_B, 4)]
    everything = export_embeddings(cache, tmp_path / "all.sqlite")
    assert everything.count == 4 and len(everything.digest) == 64
    assert not (tmp_path / "all.sqlite.partial").exists()
    with pytest.raises(LmeError, match=r"holds no vector of model 'model-c' \(models there: model-a, model-b\)"):
        export_embeddings(cache, tmp_path / "c.sqlite", model="model-c")
    assert not (tmp_path / "c.sqlite").exists() and not (tmp_path / "c.sqlite.partial").exists()
    with pytest.raises(LmeError, match="exists; remove it or pass --force"):
        export_embeddings(cache, tmp_path / "all.sqlite")
    with pytest.raises(LmeError, match="no embedding cache there"):
        export_embeddings(tmp_path / "absent.sqlite", tmp_path / "x.sqlite")


def test_identical_vectors_are_skipped_and_a_conflict_imports_nothing_unless_kept(tmp_path: Path) -> None:
    source = tmp_path / "source.sqlite"
    exported = fill(source, MODEL_A, ["alpha", "beta", "gamma", "delta"])
    export_embeddings(source, tmp_path / "file.sqlite")

    target = tmp_path / "target.sqlite"
    fill(target, MODEL_A, ["alpha"])  # the same vector as the file's
    theirs = fill(target, MODEL_A, ["beta", "gamma"], offset=0.5)  # other vectors under the same keys
    before = stored(target)

    with pytest.raises(LmeError, match=r"2 vector\(s\) differ from those .* nothing imported.*--keep-existing"):
        import_embeddings(tmp_path / "file.sqlite", target)
    assert stored(target) == before  # nothing written

    result = import_embeddings(tmp_path / "file.sqlite", target, keep_existing=True)
    assert (result.count, result.added, result.identical, result.conflicting) == (4, 1, 1, 2)
    after = stored(target)
    for key, vector in theirs.items():
        assert after[key] == vector.tobytes()  # the cache's own vectors were kept
    delta = embedding_key(MODEL_A, "", "delta")
    assert after[delta] == exported[delta].tobytes()

    again = import_embeddings(tmp_path / "file.sqlite", target, keep_existing=True)
    assert (again.added, again.identical, again.conflicting) == (0, 2, 2)


def test_a_damaged_or_foreign_file_is_refused_before_anything_is_imported(tmp_path: Path) -> None:
    source = tmp_path / "source.sqlite"
    fill(source, MODEL_A, ["alpha", "beta"])
    export_embeddings(source, tmp_path / "file.sqlite")
    target = tmp_path / "target.sqlite"

    with sqlite3.connect(tmp_path / "file.sqlite") as conn:  # one vector changed after export
        conn.execute("UPDATE embeddings SET vector = ? WHERE rowid = 1", (np.ones(8, "<f4").tobytes(),))
    with pytest.raises(LmeError, match="digest or count .* does not match its manifest"):
        import_embeddings(tmp_path / "file.sqlite", target)

    with sqlite3.connect(tmp_path / "file.sqlite") as conn:  # a vector cut short
        conn.execute("UPDATE embeddings SET vector = ? WHERE rowid = 1", (np.ones(7, "<f4").tobytes(),))
    with pytest.raises(LmeError, match="length does not match their dim"):
        import_embeddings(tmp_path / "file.sqlite", target)

    with pytest.raises(LmeError, match="not an lme embeddings export"):
        import_embeddings(source, target)  # a cache, not an export
    (tmp_path / "text.sqlite").write_text("not a database at all, just text\n" * 10)
    with pytest.raises(LmeError, match="text.sqlite"):
        import_embeddings(tmp_path / "text.sqlite", target)
    assert not target.exists() or stored(target) == {}


def test_a_model_whose_vectors_have_another_size_in_the_cache_is_refused(tmp_path: Path) -> None:
    fill(tmp_path / "source.sqlite", MODEL_A, ["alpha"], dim=8)
    export_embeddings(tmp_path / "source.sqlite", tmp_path / "file.sqlite")
    fill(tmp_path / "target.sqlite", MODEL_A, ["other"], dim=4)
    with pytest.raises(LmeError, match="model model-a has vectors of size 8 there but 4 in"):
        import_embeddings(tmp_path / "file.sqlite", tmp_path / "target.sqlite", keep_existing=True)


def test_the_commands_report_what_they_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill(tmp_path / "embeddings.sqlite", MODEL_A, ["alpha", "beta"])
    overrides = [f"cache_dir={tmp_path}", "tracking.enabled=false"]
    assert run_subcommand("cache", ["export", str(tmp_path / "out.sqlite"), *overrides]) == 0
    out = capsys.readouterr().out
    assert "exported 2 vectors from" in out and "model-a: 2 vectors of 8 dims" in out

    target = tmp_path / "other" / "e.sqlite"
    assert run_subcommand("cache", ["import", str(tmp_path / "out.sqlite"), "--cache", str(target)]) == 0
    assert "imported 2 of 2 vectors" in capsys.readouterr().out
    with sqlite3.connect(target) as conn:  # now a different vector under alpha's key
        conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?",
                     (np.ones(8, "<f4").tobytes(), embedding_key(MODEL_A, "", "alpha")))
    assert run_subcommand("cache", ["import", str(tmp_path / "out.sqlite"), "--cache", str(target)]) == 2
    assert "1 vector(s) differ" in capsys.readouterr().err
    assert run_subcommand("cache", ["import", str(tmp_path / "out.sqlite"), "--cache", str(target),
                                    "--keep-existing"]) == 0
    assert "1 different ones kept as the cache had them" in capsys.readouterr().out
