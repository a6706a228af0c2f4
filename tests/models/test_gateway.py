"""The gateway over the real litellm HTTP path, against a loopback OpenAI-compatible server.

No lme code is mocked: litellm sends real HTTP requests to 127.0.0.1, the cache
is a real SQLite file, and prices come from litellm's bundled cost map.
"""

from __future__ import annotations

import asyncio
import time

import litellm
import pytest
from loopback import LoopbackServer

from lme.util.errors import LmeError
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec, SystemicFailure

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

KEY_ENV = "LME_TEST_KEY"
MESSAGES = [{"role": "user", "content": "Where did I park my car yesterday?"}]


def spec_for(server: LoopbackServer, **changes) -> ModelSpec:
    settings = {
        "model": "openai/gpt-4o-mini",
        "api_base": server.base_url,
        "api_key_env": KEY_ENV,
        "timeout_s": 5.0,
        "max_attempts": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    } | changes
    return ModelSpec(**settings)


def call(gateway: Gateway, spec: ModelSpec, seed: int | None = 1, messages=MESSAGES):
    return asyncio.run(gateway.complete(spec, messages, seed=seed))


def gather(gateway: Gateway, spec: ModelSpec, requests: list[tuple[list[dict], int | None]]):
    async def all_of():
        return await asyncio.gather(*(gateway.complete(spec, messages, seed=seed) for messages, seed in requests))

    return asyncio.run(all_of())


@pytest.fixture
def cache(tmp_path):
    store = CallCache(tmp_path / "calls.sqlite")
    yield store
    store.close()


# -- the request itself --------------------------------------------------------------------------


def test_request_carries_messages_params_and_key(test_key):
    with LoopbackServer(reply="Level 3.") as server:
        result = call(Gateway(), spec_for(server, params={"temperature": 0.25, "max_tokens": 64}))
        (request,) = server.requests
    assert result.ok and result.text == "Level 3." and not result.cached and result.attempts == 1
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "gpt-4o-mini"
    assert request.body["messages"] == MESSAGES
    assert request.body["temperature"] == 0.25
    assert request.body["max_tokens"] == 64
    assert request.headers["authorization"] == f"Bearer {test_key}"


def test_reply_callable_sees_the_request():
    with LoopbackServer(reply=lambda body: body["messages"][-1]["content"].upper()) as server:
        result = call(Gateway(), spec_for(server))
    assert result.text == MESSAGES[0]["content"].upper()


# -- cache -----------------------------------------------------------------------------------------


def test_identical_call_with_same_seed_is_served_from_cache(cache):
    with LoopbackServer(reply="Level 3, bay 12.", prompt_tokens=40, completion_tokens=6) as server:
        gateway = Gateway(cache)
        first = call(gateway, spec_for(server), seed=7)
        second = call(gateway, spec_for(server), seed=7)
        assert len(server.requests) == 1
        # a new process on the same cache file (a resumed job) pays nothing either
        resumed = call(Gateway(CallCache(cache.path)), spec_for(server), seed=7)
        assert len(server.requests) == 1
    assert not first.cached and second.cached and resumed.cached
    for result in (second, resumed):
        assert result.text == first.text
        assert result.key == first.key
        assert (result.input_tokens, result.output_tokens) == (40, 6)
        assert result.cost_usd == first.cost_usd
    assert (gateway.calls_made, gateway.calls_cached) == (1, 1)


def test_different_seed_makes_a_new_request(cache):
    with LoopbackServer(reply="ok") as server:
        gateway = Gateway(cache)
        results = [call(gateway, spec_for(server), seed=seed) for seed in (1, 2, None, 0)]
        assert len(server.requests) == 4
    assert len({result.key for result in results}) == 4
    assert not any(result.cached for result in results)
    assert len(cache) == 4


def test_different_params_make_a_new_request(cache):
    with LoopbackServer(reply="ok") as server:
        gateway = Gateway(cache)
        call(gateway, spec_for(server, params={"temperature": 0}))
        call(gateway, spec_for(server, params={"temperature": 1}))
        assert len(server.requests) == 2


def test_without_a_cache_every_call_is_sent():
    with LoopbackServer(reply="ok") as server:
        gateway = Gateway(cache=None)
        call(gateway, spec_for(server))
        call(gateway, spec_for(server))
        assert len(server.requests) == 2


# -- cost accounting -------------------------------------------------------------------------------


def test_tokens_and_dollars_follow_litellm_cost_map(cache):
    price = litellm.model_cost["gpt-4o-mini"]
    with LoopbackServer(reply="Level 3.", prompt_tokens=1234, completion_tokens=56) as server:
        result = call(Gateway(cache), spec_for(server))
    assert (result.input_tokens, result.output_tokens) == (1234, 56)
    expected = 1234 * price["input_cost_per_token"] + 56 * price["output_cost_per_token"]
    assert expected > 0
    assert result.cost_usd == pytest.approx(expected, rel=1e-9)


def test_word_count_usage_is_what_gets_accounted():
    with LoopbackServer(reply="Level three bay twelve") as server:
        result = call(Gateway(), spec_for(server))
    assert result.input_tokens == len(MESSAGES[0]["content"].split())
    assert result.output_tokens == 4


def test_price_override_in_spec_wins_over_cost_map(cache):
    with LoopbackServer(reply="ok", prompt_tokens=1000, completion_tokens=10) as server:
        spec = spec_for(server, input_cost_per_token=1e-3, output_cost_per_token=2e-2)
        result = call(Gateway(cache), spec)
        again = call(Gateway(cache), spec)
    assert result.cost_usd == pytest.approx(1000 * 1e-3 + 10 * 2e-2)
    assert again.cached and again.cost_usd == result.cost_usd


# -- retries ---------------------------------------------------------------------------------------


def test_rate_limit_honours_retry_after():
    with LoopbackServer(reply="ok", faults=[("429", 0.3)]) as server:
        started = time.monotonic()
        result = call(Gateway(), spec_for(server))
        elapsed = time.monotonic() - started
        first, second = server.requests
    assert result.ok and result.attempts == 2
    assert second.received_at - first.received_at >= 0.28  # the header's wait, not the 10 ms backoff
    assert elapsed >= 0.28


def test_rate_limit_without_retry_after_uses_backoff():
    with LoopbackServer(reply="ok", faults=[("429",)]) as server:
        result = call(Gateway(), spec_for(server))
        first, second = server.requests
    assert result.ok and result.attempts == 2
    assert second.received_at - first.received_at < 0.25


@pytest.mark.parametrize("fault", ["500", "503", "malformed", "empty", "disconnect"])
def test_transient_failure_then_success(fault, cache):
    with LoopbackServer(reply="recovered", faults=[(fault,)]) as server:
        result = call(Gateway(cache), spec_for(server))
        assert len(server.requests) == 2
    assert result.ok and result.text == "recovered" and result.attempts == 2
    assert cache.get(result.key)["text"] == "recovered"


def test_persistent_failure_is_returned_not_raised_and_not_cached(cache):
    with LoopbackServer(reply="finally", faults=[("500",)] * 3) as server:
        gateway = Gateway(cache)
        failed = call(gateway, spec_for(server, max_attempts=3))
        assert len(server.requests) == 3
        assert len(cache) == 0
        later = call(gateway, spec_for(server, max_attempts=3))  # the server has recovered
        assert len(server.requests) == 4
    assert not failed.ok and failed.text is None and not failed.cached
    assert failed.attempts == 3
    assert "InternalServerError" in failed.error
    assert later.ok and later.text == "finally" and not later.cached
    assert gateway.calls_failed == 1 and gateway.calls_made == 1


@pytest.mark.parametrize("status", ["400", "401", "403", "404", "422"])
def test_client_errors_stop_everything_at_once(status, cache):
    """No retry can fix a bad key, an unknown model or a refused parameter: one request, then nothing more."""
    with LoopbackServer(reply="ok", faults=[(status,)]) as server:
        gateway = Gateway(cache)
        with pytest.raises(SystemicFailure) as stopped:
            call(gateway, spec_for(server, max_attempts=5))
        assert len(server.requests) == 1
        with pytest.raises(SystemicFailure):  # a later call, even another one, is not sent
            call(gateway, spec_for(server, max_attempts=5), seed=2)
        assert len(server.requests) == 1
    assert stopped.value.model == "openai/gpt-4o-mini" and stopped.value.detail
    assert len(cache) == 0


def test_per_call_timeout_fails_the_call():
    with LoopbackServer(reply="too late", latency_s=1.0) as server:
        started = time.monotonic()
        result = call(Gateway(), spec_for(server, timeout_s=0.2, max_attempts=1))
        elapsed = time.monotonic() - started
        assert len(server.requests) == 1
    assert not result.ok and "Timeout" in result.error
    assert elapsed < 0.9


# -- concurrency -----------------------------------------------------------------------------------


def test_concurrency_limit_per_model():
    with LoopbackServer(reply="ok", latency_s=0.2) as server:
        results = gather(Gateway(), spec_for(server, concurrency=2), [(MESSAGES, seed) for seed in range(6)])
        assert len(server.requests) == 6
        assert server.max_in_flight == 2
    assert all(result.ok for result in results)


def test_calls_in_flight_bound_every_model_together():
    """Reader and judge on one provider account: each model allows 4, the gateway 3 in all."""
    with LoopbackServer(reply="ok", latency_s=0.2) as server:
        gateway = Gateway(calls_in_flight=3)
        reader, judge = spec_for(server, concurrency=4), spec_for(server, model="openai/gpt-4o", concurrency=4)

        async def both():
            return await asyncio.gather(*(
                gateway.complete(spec, MESSAGES, seed=seed) for seed in range(5) for spec in (reader, judge)
            ))

        results = asyncio.run(both())
        assert len(server.requests) == 10 and server.max_in_flight == 3
    assert all(result.ok for result in results)
    with pytest.raises(LmeError, match="calls_in_flight"):
        Gateway(calls_in_flight=0)


def test_identical_concurrent_calls_are_sent_once():
    with LoopbackServer(reply="shared", latency_s=0.2) as server:
        gateway = Gateway(cache=None)
        results = gather(gateway, spec_for(server, concurrency=8), [(MESSAGES, 3)] * 4)
        assert len(server.requests) == 1
    assert [result.text for result in results] == ["shared"] * 4
    assert sorted(result.cached for result in results) == [False, True, True, True]
    assert gateway.calls_made == 1 and gateway.calls_cached == 3


# -- the key stays secret --------------------------------------------------------------------------


def test_key_reaches_server_but_not_the_cache_file(test_key, tmp_path):
    path = tmp_path / "calls.sqlite"
    store = CallCache(path)
    with LoopbackServer(reply="ok") as server:
        result = call(Gateway(store), spec_for(server))
        (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {test_key}"
    assert test_key not in repr(result)
    snapshots = {file.name: file.read_bytes() for file in tmp_path.glob("calls.sqlite*")}  # database and WAL
    assert "calls.sqlite-wal" in snapshots
    store.close()
    snapshots["calls.sqlite (checkpointed)"] = path.read_bytes()
    assert b"Bearer" not in b"".join(snapshots.values())
    for name, data in snapshots.items():
        assert test_key.encode() not in data, name


def test_key_echoed_by_the_provider_is_redacted_from_the_error(test_key):
    fault = ("401", "Incorrect API key provided: {api_key}. You can find your API key at the dashboard.")
    with LoopbackServer(reply="ok", faults=[fault]) as server:
        with pytest.raises(SystemicFailure) as stopped:
            call(Gateway(), spec_for(server))
        assert len(server.requests) == 1
    assert "Incorrect API key provided" in str(stopped.value)  # the message itself survives
    assert stopped.value.error_class == "AuthenticationError"
    assert test_key not in str(stopped.value) and test_key not in repr(stopped.value)


def test_key_in_retried_errors_is_redacted(test_key):
    faults = [("500", "upstream rejected key {api_key}")] * 2
    with LoopbackServer(reply="ok", faults=faults) as server:
        result = call(Gateway(), spec_for(server, max_attempts=2))
        assert len(server.requests) == 2
    assert not result.ok and test_key not in result.error


def test_retry_after_is_capped_by_the_spec():
    with LoopbackServer(reply="ok", faults=[("429", 30)]) as server:
        started = time.monotonic()
        result = call(Gateway(), spec_for(server, retry_after_max_s=0.1))
        elapsed = time.monotonic() - started
    assert result.ok and result.attempts == 2
    assert elapsed < 5


def test_an_unknown_offline_model_is_refused_when_configured():
    from lme.util.errors import LmeError

    with pytest.raises(LmeError, match="lme-offline/nope"):
        ModelSpec(model="lme-offline/nope")


@pytest.mark.parametrize("value, says", [
    ("sk-test-key\n", "ends with a newline (character 12, U+000A); remove it"),
    ("sk-test\u2013key", "holds a non-ASCII character (character 8, U+2013)"),
])
def test_a_key_that_cannot_be_sent_is_refused_by_the_gateway_before_any_request(tmp_path, monkeypatch, value, says):
    """Paths that run no `preflight` (`lme embed`, a retriever's own gateway) meet the same check in the gateway:
    one sentence (an `LmeError`: exit 2) for a chat and an embedding request, nothing sent, nothing in the
    ledger; before, every call failed as a retryable InternalServerError."""
    from lme.models.keys import KeyRefused
    from lme.models.ledger import Ledger

    monkeypatch.setenv(KEY_ENV, value)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    with LoopbackServer(reply="ok") as server:
        gateway = Gateway(CallCache(tmp_path / "calls.sqlite"), ledger=ledger)
        spec = spec_for(server)
        with pytest.raises(KeyRefused) as chat:
            call(gateway, spec)
        with pytest.raises(KeyRefused) as embedding:
            asyncio.run(gateway.embed(spec_for(server, model="openai/text-embedding-3-small"), ["a text"]))
        assert server.requests == []
    for refused in (chat, embedding):
        assert isinstance(refused.value, LmeError)
        assert f"the environment variable {KEY_ENV} (its api_key_env) {says}" in str(refused.value)
        assert "sk-test" not in str(refused.value)
    assert ledger.rows() == [] and ledger.open_reservations() == 0
    ledger.close()
