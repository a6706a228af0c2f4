"""Embedding API calls through the gateway, against the loopback server's `/v1/embeddings`.

No lme code is mocked: litellm sends real HTTP requests to 127.0.0.1, the call cache and the ledger
are real SQLite files. The calls appear in the ledger with their tokens and dollars, a second run is
served by the call cache, and a call or dollar cap stops cleanly with one clear sentence.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from embedding_data import record, write_dataset
from loopback import LoopbackServer, embedding_vector

from lme.cli import run_subcommand
from lme.util.errors import EXIT_BUDGET
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec, SystemicFailure
from lme.models.ledger import Budget, BudgetExhausted, Ledger
from lme.retrieval.dense import (
    DenseRetriever,
    LiteLLMEncoder,
    attach_gateway,
    normalise_rows,
)
from lme.retrieval.fts5 import FTS5Retriever
from lme.retrieval.fusion import FusedRetriever

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

KEY_ENV = "LME_TEST_KEY"
MODEL = "openai/test-embedding"
PRICE = 2e-8  # dollars per input token
TEXTS = [f"note {i}: the red kite flew over hill {i}" for i in range(10)]  # 9 words each


def spec_for(server: LoopbackServer, **changes) -> ModelSpec:
    settings = {"model": MODEL, "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 5.0,
                "max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                "input_cost_per_token": PRICE, "output_cost_per_token": 0.0} | changes
    return ModelSpec(**settings)


def encoder_for(server: LoopbackServer, **changes) -> LiteLLMEncoder:
    settings = {"api_base": server.base_url, "api_key_env": KEY_ENV, "batch_size": 4, "backoff_s": 0.01,
                "input_cost_per_token": PRICE} | changes
    return LiteLLMEncoder(MODEL, **settings)


@pytest.fixture
def store(tmp_path: Path):
    cache, ledger = CallCache(tmp_path / "calls.sqlite"), Ledger(tmp_path / "ledger.sqlite", study="s", job="j")
    yield cache, ledger
    cache.close()
    ledger.close()


def test_gateway_embed_returns_the_providers_vectors_and_is_cached(store, test_key: str) -> None:
    cache, ledger = store
    with LoopbackServer() as server:
        gateway = Gateway(cache, ledger=ledger)
        spec = spec_for(server)
        first = asyncio.run(gateway.embed(spec, TEXTS[:3]))
        assert first.ok and not first.cached and first.attempts == 1
        np.testing.assert_array_equal(first.vectors, np.array([embedding_vector(t) for t in TEXTS[:3]], "<f4"))
        assert first.input_tokens == 27 and first.cost_usd == pytest.approx(27 * PRICE)
        again = asyncio.run(gateway.embed(spec, TEXTS[:3]))
        assert again.cached and np.array_equal(again.vectors, first.vectors)
        assert len(server.embedding_requests) == 1
        body = server.embedding_requests[0]
        assert body.body["input"] == TEXTS[:3] and body.headers["authorization"] == f"Bearer {test_key}"
        sized = spec_for(server, model="openai/text-embedding-3-small", params={"dimensions": 16})
        assert asyncio.run(gateway.embed(sized, TEXTS[:3])).vectors.shape == (3, 16)
    rows = ledger.rows()
    assert [row["status"] for row in rows] == ["paid", "paid"]  # the cached call is not written again
    assert rows[0]["input_tokens"] == 27 and rows[0]["output_tokens"] == 0
    assert rows[0]["dollars"] == pytest.approx(27 * PRICE) and rows[0]["model"] == MODEL


@pytest.mark.filterwarnings("ignore::UserWarning")  # litellm's pydantic model expects floats, not base64
def test_base64_vectors_are_read_exactly() -> None:
    with LoopbackServer() as server:
        gateway = Gateway()
        result = asyncio.run(gateway.embed(spec_for(server, params={"encoding_format": "base64"}), TEXTS[:2]))
        assert server.embedding_requests[0].body["encoding_format"] == "base64"
        np.testing.assert_array_equal(result.vectors, np.array([embedding_vector(t) for t in TEXTS[:2]], "<f4"))


def test_encoder_calls_appear_in_the_ledger_and_a_second_run_makes_no_call(store, tmp_path: Path) -> None:
    cache, ledger = store
    with LoopbackServer() as server:
        encoder = encoder_for(server)
        encoder.use_gateway(Gateway(cache, ledger=ledger))
        vectors = encoder.encode(TEXTS, "passage: ")
        assert vectors.shape == (10, 64)
        expected = normalise_rows(np.array([embedding_vector("passage: " + t) for t in TEXTS]))
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
        assert len(server.embedding_requests) == 3  # batches of 4, 4 and 2
        rows = ledger.rows()
        assert len(rows) == 3 and all(row["status"] == "paid" for row in rows)
        assert sum(row["input_tokens"] for row in rows) == 100  # 10 words each with the prompt
        assert sum(row["dollars"] for row in rows) == pytest.approx(100 * PRICE)

        # a second run (a new encoder, a new gateway on the same call cache and ledger): no request at all
        second = encoder_for(server)
        second.use_gateway(Gateway(CallCache(tmp_path / "calls.sqlite"), ledger=Ledger(tmp_path / "ledger.sqlite")))
        np.testing.assert_array_equal(second.encode(TEXTS, "passage: "), vectors)
        assert len(server.embedding_requests) == 3
        assert second.calls_cached == 3 and second.attempts == 0
        assert len(ledger.rows()) == 3


@pytest.mark.parametrize("cap", [{"job_calls": 2}, {"job_dollars": 100 * PRICE}])
def test_a_cap_stops_embedding_cleanly(store, cap: dict) -> None:
    cache, ledger = store
    with LoopbackServer() as server:
        encoder = encoder_for(server, batch_size=2, concurrency=1)
        encoder.use_gateway(Gateway(cache, ledger=ledger, budget=Budget(**cap)))
        with pytest.raises(BudgetExhausted, match="cap of .* is reached") as stopped:
            encoder.encode(TEXTS, "")
        assert str(stopped.value).startswith("budget: the job 'j' ")
        sent = len(server.embedding_requests)
        assert 1 <= sent < 5  # stopped before the fifth batch
        rows = ledger.rows()
        assert len(rows) == sent and all(row["status"] == "paid" for row in rows)
        assert ledger.open_reservations() == 0
        if "job_dollars" in cap:
            assert sum(row["dollars"] for row in rows) <= cap["job_dollars"]
        else:
            assert sent == 2


def test_a_bad_key_stops_everything_and_the_key_is_never_shown(store, test_key: str) -> None:
    cache, ledger = store
    with LoopbackServer(faults=[("401", "Incorrect API key provided: {api_key}")]) as server:
        gateway = Gateway(cache, ledger=ledger)
        encoder = encoder_for(server)
        encoder.use_gateway(gateway)
        with pytest.raises(SystemicFailure, match="AuthenticationError") as failure:
            encoder.encode(TEXTS[:2], "")
        assert test_key not in str(failure.value)
        with pytest.raises(SystemicFailure):  # nothing more is sent, chat or embedding
            encoder.encode(TEXTS[2:4], "")
        assert len(server.embedding_requests) == 1
    assert ledger.rows() == [] and ledger.open_reservations() == 0  # refused, not billed: no row


def test_retries_a_server_error_then_a_malformed_reply(store) -> None:
    cache, ledger = store
    with LoopbackServer(faults=[("503",), ("empty_choices",)]) as server:
        result = asyncio.run(Gateway(cache, ledger=ledger).embed(spec_for(server), TEXTS[:2]))
        assert result.ok and result.vectors.shape == (2, 64)
        assert len(server.embedding_requests) >= 3  # 503 (the provider's SDK may retry it too), no embeddings, whole
        assert result.attempts >= 2


def test_a_jobs_gateway_reaches_the_semantic_part_of_a_hybrid_retriever(store, tmp_path: Path) -> None:
    cache, ledger = store
    with LoopbackServer() as server:
        dense = DenseRetriever(model=MODEL, backend="litellm", api_base=server.base_url, api_key_env=KEY_ENV,
                               cache_path=tmp_path / "emb" / "e.sqlite", batch_size=8, input_cost_per_token=PRICE)
        hybrid = FusedRetriever({"bm25": FTS5Retriever(), "semantic": dense})
        gateway = Gateway(cache, ledger=ledger)
        attach_gateway(hybrid, gateway)
        assert dense.encoder.gateway is gateway
        from histories import make_question

        question = make_question("Where did the red kite fly?", [[("user", t), ("assistant", "ok")] for t in TEXTS[:3]])
        assert hybrid.rank(question, 3).turn_ids
        assert ledger.rows() and not (tmp_path / "emb" / "ledger.sqlite").exists()  # the job's, not one beside
        dense.close()


def test_lme_embed_with_an_api_stops_at_a_call_cap_with_what_was_stored_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_dataset(tmp_path / "data.json", [
        record(f"q{n}", f"What did I say about hill {n}?", [[("user", t), ("assistant", "Noted.")] for t in TEXTS])
        for n in range(2)
    ])
    with LoopbackServer() as server:
        args = ["retriever=semantic", "retriever.backend=litellm", f"retriever.model={MODEL}",
                f"retriever.api_base={server.base_url}", f"retriever.api_key_env={KEY_ENV}",
                "retriever.batch_size=2", "retriever.concurrency=1", f"retriever.input_cost_per_token={PRICE}",
                f"dataset.path={data}", f"cache_dir={tmp_path / 'cache'}", "tracking.enabled=false",
                "budget.job_calls=3"]
        assert run_subcommand("embed", args) == EXIT_BUDGET
        out, err = capsys.readouterr()
        assert "call cap of 3 is reached" in err and "rerun the same command" in err
        assert len(server.embedding_requests) == 3
        # the three batches answered before the cap are stored: every text they carried. A chunk's batches
        # are sent as concurrent tasks, so which three go first varies: the one-text batch may be among them
        sent = sum(len(request.body["input"]) for request in server.embedding_requests)
        assert 3 <= sent <= 6 and f"0 already cached, {sent} encoded" in out
        ledger = Ledger(tmp_path / "cache" / "ledger.sqlite")
        rows = ledger.rows()
        assert len(rows) == 3 and {row["job"] for row in rows} == {"embed"}
        assert {row["status"] for row in rows} == {"paid"} and sum(row["input_tokens"] for row in rows) > 0
        ledger.close()

        # the same command without the cap finishes the job from there: each distinct text is sent once
        assert run_subcommand("embed", args[:-1]) == 0
        out = capsys.readouterr().out
        assert f"42 texts requested, 13 distinct; {sent} already cached, {13 - sent} encoded" in out
        texts_sent = [text for request in server.embedding_requests for text in request.body["input"]]
        assert len(texts_sent) == len(set(texts_sent)) == 13
        assert run_subcommand("embed", args[:-1]) == 0  # a third run: all cached, no request
        assert "13 distinct; 13 already cached, 0 encoded" in capsys.readouterr().out
        assert len(server.embedding_requests) == 7


@pytest.mark.slow
def test_a_runs_embedding_calls_count_against_its_caps(tmp_path: Path, test_key: str) -> None:
    """A whole `python -m lme` job whose semantic retriever calls an embedding API: the calls are in the
    study's ledger under the job's name, and the job's call cap stops it (exit 3) with the resume hint."""
    import os
    import subprocess
    import sys

    from lme.util.errors import EXIT_BUDGET

    with LoopbackServer() as server:
        command = [sys.executable, "-m", "lme", "retriever=semantic", "retriever.backend=litellm",
                   f"retriever.model={MODEL}", f"retriever.api_base={server.base_url}",
                   f"retriever.api_key_env={KEY_ENV}", "retriever.batch_size=8", "retriever.concurrency=1",
                   f"retriever.input_cost_per_token={PRICE}", "limit=2", "concurrency=1", "tracking.enabled=false",
                   f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}", "budget.job_calls=2"]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA")}
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environ)
        assert result.returncode == EXIT_BUDGET, result.stderr
        assert "call cap of 2 is reached" in result.stderr and "Traceback" not in result.stderr
        assert test_key not in result.stderr + result.stdout
        assert len(server.embedding_requests) == 2
    ledger = Ledger(tmp_path / "cache" / "ledger.sqlite")
    rows = ledger.rows()
    ledger.close()
    assert len(rows) == 2 and {row["model"] for row in rows} == {MODEL}
    assert {row["job"] for row in rows} == {str((tmp_path / "run").resolve())}  # the job's own name
    assert all(row["status"] == "paid" and row["input_tokens"] > 0 and row["dollars"] > 0 for row in rows)


def test_lme_embed_stops_with_exit_4_on_a_bad_key(tmp_path: Path, test_key: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from lme.util.errors import EXIT_SYSTEMIC

    data = write_dataset(tmp_path / "data.json", [record("q0", "Which hill?", [[("user", TEXTS[0])]])])
    with LoopbackServer(faults=[("401", "Incorrect API key provided: {api_key}")]) as server:
        code = run_subcommand("embed", [
            "retriever=semantic", "retriever.backend=litellm", f"retriever.model={MODEL}",
            f"retriever.api_base={server.base_url}", f"retriever.api_key_env={KEY_ENV}", f"dataset.path={data}",
            f"cache_dir={tmp_path / 'cache'}", "tracking.enabled=false"])
        assert code == EXIT_SYSTEMIC
        out, err = capsys.readouterr()
        assert "AuthenticationError" in err and test_key not in out + err
        assert len(server.embedding_requests) == 1


def test_an_uncapped_embedding_call_reserves_the_byte_bound_of_its_texts(store) -> None:
    """With no dollar cap nothing is tokenized: the reservation is each text's bytes as a message
    (`pricing.byte_bound_tokens`, the chat calls' bound) with the usual margin, and never below the bill."""
    from lme.models.pricing import byte_bound_tokens, reserved_input_tokens

    cache, ledger = store
    texts = TEXTS[:3] + ["naïve café ☕ — 東京"]
    with LoopbackServer() as server:
        encoder = encoder_for(server, batch_size=4)
        encoder.use_gateway(Gateway(cache, ledger=ledger))
        encoder.encode(texts, "")
    (row,) = ledger.rows()
    bytes_bound = sum(byte_bound_tokens([{"role": "user", "content": text}]) for text in texts)
    assert bytes_bound > sum(len(text.encode("utf-8")) for text in texts)
    assert row["reserved_dollars"] == pytest.approx(reserved_input_tokens(bytes_bound) * PRICE)
    assert row["reserved_dollars"] > row["dollars"] > 0
