"""ONNX Runtime's int8 encodes one text per call, the calls side by side (one thread each): the vectors are the
same bit for bit as one call at a time, in the caller's order, and a failure on any text stops the encode and
is raised in the caller. Real MiniLM, its int8 export in the test process's shared folder (conftest)."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

from lme.retrieval.dense import DenseRetriever

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
                       reason="onnx / onnxruntime not installed (pip install -e .)"),
    pytest.mark.slow,  # exports and quantizes MiniLM once per test process (~20 s)
]

TEXTS = [f"On day {n} I {'walked to the harbour and ' * (n % 7)}wrote {n} lines in my notebook." for n in range(40)]
LONGEST = "x" * 3000
TEXTS += ["ok", LONGEST, "Where did I leave the spare key to the shed?"]


def _encoder(tmp_path, workers: int):
    retriever = DenseRetriever("minilm-packaged", device="cpu", cache_path=tmp_path / f"cache{workers}.sqlite",
                               progress=False, runtime="onnx", precision="int8")
    encoder = retriever.encoder
    encoder.workers = workers  # before the first load: the session's own threads follow it
    return encoder


def test_int8_calls_side_by_side_give_one_at_a_times_vectors_bit_for_bit(tmp_path):
    alone, side_by_side = _encoder(tmp_path, 1), _encoder(tmp_path, 3)
    expected = alone.encode(TEXTS, "")
    side_by_side.load()
    tokenizer, names = side_by_side._tokenizer, set()

    def noting_thread(batch, **kwargs):
        names.add(threading.current_thread().name)
        return tokenizer(batch, **kwargs)

    side_by_side._tokenizer = noting_thread
    got = side_by_side.encode(TEXTS, "")
    assert got.shape == expected.shape == (len(TEXTS), 384)
    assert np.array_equal(got, expected)  # same order, same bits
    assert len(names) == 3 and threading.current_thread().name in names  # the caller works too
    assert np.array_equal(side_by_side.encode(TEXTS[5:9], ""), expected[5:9])


def test_a_failure_on_one_text_stops_the_encode_and_reaches_the_caller(tmp_path):
    encoder = _encoder(tmp_path, 2)
    encoder.load()
    tokenizer = encoder._tokenizer
    calls = []

    def failing_on_the_key(batch, **kwargs):
        calls.append(batch[0])
        if batch[0] == LONGEST:
            raise ValueError("tokenizer broke on this text")
        return tokenizer(batch, **kwargs)

    encoder._tokenizer = failing_on_the_key
    with pytest.raises(ValueError, match="tokenizer broke on this text"):
        encoder.encode(TEXTS, "")
    # the longest text goes first: the other thread finishes at most the text it holds, then stops too
    assert LONGEST in calls and len(calls) <= 3 < len(TEXTS)
    assert not [t for t in threading.enumerate() if t.name.startswith("lme-onnx-")]  # the helpers have ended
    encoder._tokenizer = tokenizer
    assert encoder.encode(TEXTS[:2], "").shape == (2, 384)  # the encoder is still usable
