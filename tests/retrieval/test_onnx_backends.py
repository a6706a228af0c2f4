"""embedding.backend (torch | onnx | openvino) and embedding.precision (fp32 | int8): the exported model gives
torch's vectors at fp32 and close ones at int8, each backend's vectors are cached under their own key, and a
bad choice or a broken export is one sentence. Real MiniLM (the packaged model), real exports in temp dirs."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from lme.util.errors import LmeError
from lme.retrieval.dense import DenseRetriever, top_by_cosine
from lme.retrieval.onnx_runtime import EXPORTS_ENV, check_runtime, export_dir, exports_root, runtime_suffix
from shared_data import MINI, needs

needs_onnx = pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
                                reason="onnx / onnxruntime not installed (pip install -e .)")
needs_openvino = pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                                    reason="openvino not installed (pip install -e '.[fast-cpu]')")

TEXTS = [
    "I started learning the cello in January and practise every morning.",
    "My sister's wedding is in Porto on the 12th of June.",
    "Can you suggest a vegetarian lasagne recipe?",
    "We replaced the kitchen tap ourselves last Saturday.",
    "The dog needs his booster vaccine before the trip.",
    "I finished reading three novels during the holiday.",
    "Our team switched from Jira to Linear in the spring.",
    "What is a good stretching routine after running?",
    "I paid 240 dollars for the new road bike helmet.",
    "Remind me which museum we visited in Vienna.",
] * 2 + ["a short one", "x" * 3000]  # repeats, a one-liner and one longer than the model's token limit
QUERY = "when is my sister getting married"


@pytest.fixture(autouse=True)
def _exports_beside_the_cache(monkeypatch):
    """These tests check where exports go: the suite's shared export folder (conftest) is not theirs."""
    monkeypatch.delenv(EXPORTS_ENV, raising=False)


def test_exports_go_beside_the_cache_unless_one_shared_folder_is_named(tmp_path, monkeypatch):
    assert exports_root(tmp_path / "a" / "embeddings.sqlite") == tmp_path / "a" / "onnx"
    assert exports_root(None).name == "onnx"
    monkeypatch.setenv(EXPORTS_ENV, str(tmp_path / "shared"))
    assert exports_root(tmp_path / "a" / "embeddings.sqlite") == exports_root(None) == tmp_path / "shared"
    retriever = _retriever(tmp_path / "b", "onnx", "int8")
    assert retriever.encoder.files()[1].parent.parent == tmp_path / "shared"


def _retriever(tmp_path, runtime="torch", precision="fp32", cache="embeddings.sqlite"):
    return DenseRetriever("minilm-packaged", device="cpu", cache_path=tmp_path / cache, progress=False,
                          runtime=runtime, precision=precision)


@pytest.mark.parametrize("runtime, precision, message", [
    ("tensorrt", "fp32", "embedding.backend must be one of torch, onnx, openvino"),
    ("onnx", "fp16", "embedding.precision must be one of fp32, int8"),
    ("torch", "int8", "needs embedding.backend=onnx or openvino"),
])
def test_a_bad_backend_or_precision_is_one_sentence(tmp_path, runtime, precision, message):
    with pytest.raises(LmeError, match=message):
        check_runtime(runtime, precision)
    with pytest.raises(LmeError, match=message):
        _retriever(tmp_path, runtime, precision)


def test_a_local_backend_does_not_apply_to_an_api_model(tmp_path):
    """MiniLM's default (onnx, int8) comes with the embedding group; an API model's vectors are the API's."""
    api = DenseRetriever("openai/text-embedding-3-small", backend="litellm", runtime="onnx", precision="int8",
                         cache_path=tmp_path / "e.sqlite")
    assert api.model_id == DenseRetriever("openai/text-embedding-3-small", backend="litellm",
                                          cache_path=tmp_path / "e.sqlite").model_id == "litellm:openai/text-embedding-3-small"


def test_the_backend_and_precision_are_part_of_the_vectors_key(tmp_path):
    ids = {(r, p): _retriever(tmp_path, r, p).model_id for r, p in
           [("torch", "fp32"), ("onnx", "fp32"), ("onnx", "int8"), ("openvino", "fp32"), ("openvino", "int8")]}
    assert ids[("torch", "fp32")] == "sentence-transformers/all-MiniLM-L6-v2"  # caches filled before keep working
    assert len(set(ids.values())) == 5
    assert ids[("onnx", "int8")] == ids[("torch", "fp32")] + runtime_suffix("onnx", "int8") == ids[("torch", "fp32")] + "|onnx-int8"
    # an export is named by the model, the library versions and the token limit: a new version exports anew
    assert export_dir(tmp_path, "m", None) != export_dir(tmp_path, "m", 128) != export_dir(tmp_path, "n", None)


@needs_onnx
@pytest.mark.slow  # exports MiniLM to ONNX and quantizes it (~20 s)
def test_onnx_gives_torchs_vectors_at_fp32_close_ones_at_int8_and_keeps_them_apart(tmp_path, monkeypatch):
    torch_side = _retriever(tmp_path)
    reference = torch_side.embed(TEXTS, "")
    query = torch_side.embed([QUERY], "")[0]
    fp32 = _retriever(tmp_path, "onnx", "fp32")
    vectors = fp32.embed(TEXTS, "")
    assert np.min(np.sum(vectors * reference, axis=1)) > 0.9999
    mine, theirs = top_by_cosine(vectors, fp32.embed([QUERY], "")[0], 5), top_by_cosine(reference, query, 5)
    assert [row for row, _ in mine] == [row for row, _ in theirs]
    assert [score for _, score in mine] == pytest.approx([score for _, score in theirs], abs=1e-4)
    assert fp32.encoder.probe_cosine > 0.9999
    int8 = _retriever(tmp_path, "onnx", "int8")
    close = int8.embed(TEXTS, "")
    cosines = np.sum(close * reference, axis=1)
    assert 0.97 < cosines.min() and cosines.max() < 1.0 - 1e-7  # quantized: close, not equal
    assert top_by_cosine(close, int8.embed([QUERY], "")[0], 1)[0][0] == top_by_cosine(reference, query, 1)[0][0]
    # one cache file, three backends: each vector under its own key, never one read for another
    distinct = len(set(TEXTS)) + 1  # + the query
    with sqlite3.connect(tmp_path / "embeddings.sqlite") as db:
        counts = dict(db.execute("SELECT model, COUNT(*) FROM embeddings GROUP BY model").fetchall())
    assert counts == {torch_side.model_id: distinct, fp32.model_id: distinct, int8.model_id: distinct}
    # the exports are kept beside the cache and reused: a new retriever exports nothing
    files = sorted(p.name for p in (tmp_path / "onnx").rglob("*.onnx"))
    assert files == ["model.fp32.onnx", "model.int8.onnx"]
    stamp = next((tmp_path / "onnx").rglob("model.int8.onnx")).stat().st_mtime_ns
    again = _retriever(tmp_path, "onnx", "int8", cache="other.sqlite")
    assert np.allclose(again.embed(TEXTS[:3], ""), close[:3], atol=1e-6)
    assert next((tmp_path / "onnx").rglob("model.int8.onnx")).stat().st_mtime_ns == stamp
    # with LME_ONNX_DIR naming that folder, a cache elsewhere uses the same exports
    monkeypatch.setenv(EXPORTS_ENV, str(tmp_path / "onnx"))
    elsewhere = _retriever(tmp_path / "elsewhere", "onnx", "int8")
    assert np.allclose(elsewhere.embed(TEXTS[:3], ""), close[:3], atol=1e-6)
    assert next((tmp_path / "onnx").rglob("model.int8.onnx")).stat().st_mtime_ns == stamp
    assert not (tmp_path / "elsewhere" / "onnx").exists()


@needs_onnx
@needs_openvino
@pytest.mark.slow  # exports MiniLM to ONNX and compiles it with OpenVINO (~15 s)
def test_openvino_runs_the_export_with_torchs_vectors(tmp_path):
    reference = _retriever(tmp_path).embed(TEXTS, "")
    vectors = _retriever(tmp_path, "openvino", "fp32").embed(TEXTS, "")
    assert np.min(np.sum(vectors * reference, axis=1)) > 0.9999


@needs_onnx
def test_a_broken_export_is_refused_in_one_sentence_naming_it(tmp_path):
    retriever = _retriever(tmp_path, "onnx", "fp32")
    fp32, _ = retriever.encoder.files()
    fp32.parent.mkdir(parents=True)
    fp32.write_bytes(b"not an onnx model")  # a truncated or foreign file where the export should be
    with pytest.raises(LmeError, match=r"backend onnx \(fp32\) cannot use the export at .*model\.fp32\.onnx .*"
                       r"delete it and lme exports the model again") as caught:
        retriever.embed(TEXTS[:2], "")
    assert "\n" not in str(caught.value)
    assert fp32.read_bytes() == b"not an onnx model"  # left as it was
    fp32.write_bytes(b"")  # cut short to nothing: the same sentence
    with pytest.raises(LmeError, match=r"cannot use the export at .*model\.fp32\.onnx"):
        retriever.embed(TEXTS[:2], "")


@needs_onnx
@pytest.mark.slow  # exports MiniLM to ONNX and quantizes it (~20 s)
def test_an_int8_file_that_gives_other_vectors_is_refused(tmp_path):
    """A quantized file that loads but is not this model (here: its word embeddings scrambled) is caught by the
    probe texts before any vector reaches the cache."""
    import onnx
    from onnx import numpy_helper

    good = _retriever(tmp_path, "onnx", "int8")
    assert good.encoder.load() is None and 0.95 <= good.encoder.probe_cosine < 1.0
    _, int8 = good.encoder.files()
    model = onnx.load(str(int8))
    largest = max(model.graph.initializer, key=lambda tensor: int(np.prod(tensor.dims)))
    values = numpy_helper.to_array(largest)
    scrambled = np.random.default_rng(0).permutation(values.reshape(values.shape[0], -1)).reshape(values.shape)
    largest.CopyFrom(numpy_helper.from_array(scrambled, largest.name))
    onnx.save(model, str(int8))
    broken = _retriever(tmp_path, "onnx", "int8", cache="other.sqlite")
    with pytest.raises(LmeError, match=r"the onnx int8 export at .*model\.int8\.onnx gives other vectors than torch"):
        broken.embed(TEXTS[:2], "")
    with sqlite3.connect(tmp_path / "other.sqlite") as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert not tables or db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == 0


@needs_onnx
@pytest.mark.slow  # one mini question ranked twice, 60 texts timed (~1-2 min)
@needs(MINI)
def test_the_backends_benchmark_compares_speed_and_recall_side_by_side():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import bench_backends

    rows = bench_backends.rows(texts=60, block=30, backends=("torch/fp32", "onnx/int8"), recall_file=MINI,
                               recall_questions=1, data=MINI)
    torch_row, int8_row = rows
    assert torch_row.figure == "MiniLM torch/fp32" and torch_row.ratio == 1.0 and torch_row.met is None
    assert int8_row.value > 0 and int8_row.ratio == pytest.approx(int8_row.value / torch_row.value, rel=0.02)
    assert isinstance(int8_row.met, bool) and "on the same 60 S turns" in int8_row.compared_to
    mean = float(int8_row.note.split("cosine to torch mean ")[1].split(",")[0])
    assert 0.97 < mean < 1.0
    recall = int8_row.note.split("recall@10 on ")[1]
    assert recall.split(" questions of ")[1].startswith("longmemeval_s_cleaned_mini.json.xz: turn ")
    turn = float(recall.split("turn ")[1].split(",")[0])
    assert 0.0 <= turn <= 1.0
