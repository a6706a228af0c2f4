"""Failures the gateway must report truthfully, against the loopback server over litellm's real HTTP path:
what no retry can fix stops everything at once, malformed replies are failed calls (never crashes, never
cached), nothing is paid twice, a reply over its reservation stops a capped study, offline stand-ins
never time out, and credentials are checked before the first call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time

import pytest
from loopback import LoopbackServer

from lme.util.errors import LmeError
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec, ReservationExceeded, SystemicFailure, classify_error, preflight
from lme.models.ledger import Budget, BudgetExhausted, Ledger
from lme.models.offline import READER_MODEL

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

MESSAGES = [{"role": "user", "content": "Which shelf holds the red notebook?"}]
PRICES = {"input_cost_per_token": 1e-6, "output_cost_per_token": 1e-5}


def spec_for(server: LoopbackServer | None, **changes) -> ModelSpec:
    settings = {
        "model": "openai/gpt-4o-mini",
        "api_base": server.base_url if server is not None else f"http://127.0.0.1:{closed_port()}/v1",
        "api_key_env": "LME_TEST_KEY",
        "timeout_s": 5.0,
        "max_attempts": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    } | changes
    return ModelSpec(**settings)


def closed_port() -> int:
    """A local port nothing listens on: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(gateway: Gateway, spec: ModelSpec, seed: int | None = 1, messages=MESSAGES):
    return asyncio.run(gateway.complete(spec, messages, seed=seed))


# -- malformed replies --------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["empty_choices", "null_content"])
def test_a_malformed_reply_is_a_failed_call_never_cached(fault, tmp_path):
    cache, ledger = CallCache(tmp_path / "c.sqlite"), Ledger(tmp_path / "l.sqlite")
    with LoopbackServer(reply="ok", faults=[(fault,)] * 3) as server:
        result = call(Gateway(cache, ledger=ledger), spec_for(server, **PRICES))
        assert len(server.requests) == 3  # retried like a 500
        again = call(Gateway(cache, ledger=ledger), spec_for(server, **PRICES))  # the server has recovered
    assert not result.ok and result.text is None and "MalformedReply" in result.error
    assert again.ok and again.text == "ok" and not again.cached
    rows = ledger.rows()
    # the malformed replies reported usage, so they were billed: paid, with their tokens, though nothing is cached
    assert [row["status"] for row in rows] == ["paid", "paid"]
    assert rows[0]["input_tokens"] > 0 and rows[0]["dollars"] > 0
    cache.close()
    ledger.close()


def test_a_malformed_reply_then_a_good_one_is_one_answer(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    with LoopbackServer(reply="top shelf", faults=[("empty_choices",)]) as server:
        result = call(Gateway(cache), spec_for(server))
        assert len(server.requests) == 2
    assert result.ok and result.text == "top shelf" and result.attempts == 2
    assert cache.get(result.key)["text"] == "top shelf"
    cache.close()


# -- what no retry can fix --------------------------------------------------------------------------


def test_missing_credentials_stop_at_the_first_call(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with LoopbackServer(reply="ok") as server:
        gateway = Gateway()
        with pytest.raises(SystemicFailure, match="(?i)credentials|api_key"):
            call(gateway, spec_for(server, api_key_env=None, max_attempts=6))
        assert len(server.requests) == 0  # the client refused before sending


def test_refused_connections_stop_the_study_after_the_window():
    gateway = Gateway()
    spec = spec_for(None, max_attempts=1000, unreachable_after_s=0.4)
    started = time.monotonic()
    with pytest.raises(SystemicFailure, match="refused") as stopped:
        call(gateway, spec)
    assert 0.4 <= time.monotonic() - started < 10
    assert "connections refused" in stopped.value.error_class


def test_refused_connections_within_the_window_are_retried_and_counted():
    result = call(Gateway(), spec_for(None, max_attempts=2, unreachable_after_s=60))
    assert not result.ok and result.attempts == 2


def test_a_success_resets_the_refusal_window():
    with LoopbackServer(reply="ok") as server:
        gateway = Gateway()
        gateway._refused_since["openai/gpt-4o-mini"] = time.monotonic() - 1000  # refused long ago
        assert call(gateway, spec_for(server)).ok
        assert "openai/gpt-4o-mini" not in gateway._refused_since


@pytest.mark.parametrize(("name", "status", "expected"), [
    ("AuthenticationError", 401, "systemic"),
    ("NotFoundError", 404, "systemic"),
    ("BadRequestError", 400, "systemic"),
    ("ContextWindowExceededError", 400, "final"),
    ("RateLimitError", 429, "retryable"),
    ("InternalServerError", 500, "retryable"),
    ("Timeout", None, "retryable"),
])
def test_error_classes(name, status, expected):
    base = type("BadRequestError", (Exception,), {}) if name == "ContextWindowExceededError" else Exception
    error = type(name, (base,), {})("message")
    error.status_code = status
    assert classify_error(error) == expected


# -- preflight: credentials before the first question -------------------------------------------------


def test_preflight_names_the_model_and_the_missing_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("LME_ABSENT_KEY", raising=False)
    with pytest.raises(LmeError, match=r"model openai/gpt-4o-2024-08-06: OPENAI_API_KEY is not set"):
        preflight([ModelSpec(model="openai/gpt-4o-2024-08-06")])
    with pytest.raises(LmeError, match=r"model openai/gpt-4o-mini: the environment variable LME_ABSENT_KEY"):
        preflight([ModelSpec(model="openai/gpt-4o-mini", api_key_env="LME_ABSENT_KEY")])
    with pytest.raises(LmeError, match=r"model nonsense-model: litellm does not know which provider"):
        preflight([ModelSpec(model="nonsense-model")])
    preflight([ModelSpec(model=READER_MODEL)])  # offline: nothing to check
    preflight([ModelSpec(model="openai/gpt-4o-mini", api_key_env="LME_TEST_KEY")])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-present-0123456789")
    preflight([ModelSpec(model="openai/gpt-4o-2024-08-06")])


# -- nothing paid twice -------------------------------------------------------------------------------


def test_two_gateways_on_one_cache_never_pay_the_same_call_twice(tmp_path):
    """Two "processes" (gateways with their own connections, on their own threads and event loops) ask the
    same 60 judge prompts at once; each prompt is sent and paid once, whoever asks first."""
    prompts = [[{"role": "user", "content": f"Is answer {n} right?"}] for n in range(60)]
    with LoopbackServer(reply="yes") as server:
        spec = spec_for(server, **PRICES, params={"max_tokens": 10}, concurrency=4)

        def one_process(order: list[int]) -> None:
            cache, ledger = CallCache(tmp_path / "calls.sqlite"), Ledger(tmp_path / "ledger.sqlite", job=str(order[0]))
            gateway = Gateway(cache, ledger=ledger)

            async def all_prompts():
                return await asyncio.gather(*(gateway.complete(spec, prompts[n], seed=None) for n in order))

            try:
                assert all(result.ok for result in asyncio.run(all_prompts()))
            finally:
                cache.close()
                ledger.close()

        forward, backward = list(range(60)), list(range(59, -1, -1))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for done in [pool.submit(one_process, forward), pool.submit(one_process, backward)]:
                done.result()
        sent = [request.body["messages"][0]["content"] for request in server.completion_requests]
    assert len(sent) == len(set(sent)) == 60
    ledger = Ledger(tmp_path / "ledger.sqlite")
    paid = [row["call_key"] for row in ledger.rows() if row["status"] == "paid"]
    assert len(paid) == len(set(paid)) == 60
    ledger.close()


def test_the_cache_is_read_again_once_the_reservation_is_granted(tmp_path):
    """Process B looked in the cache (a miss), then process A answered and settled the same call; B's
    reservation is granted (nothing is reserved any more), and B must find A's answer instead of paying."""
    cache_a, cache_b = CallCache(tmp_path / "calls.sqlite"), CallCache(tmp_path / "calls.sqlite")
    ledger_a, ledger_b = Ledger(tmp_path / "l.sqlite", job="a"), Ledger(tmp_path / "l.sqlite", job="b")
    with LoopbackServer(reply="yes") as server:
        spec = spec_for(server, **PRICES, params={"max_tokens": 10})
        gateway_b = Gateway(cache_b, ledger=ledger_b)
        missed = threading.Event()
        real_get = cache_b.get

        def get_then_let_a_answer(key):  # B's first look-up misses; A answers before B reserves
            found = real_get(key)
            if not missed.is_set():
                missed.set()
                assert found is None
                with concurrent.futures.ThreadPoolExecutor(1) as other:  # process A, on its own event loop
                    assert other.submit(call, Gateway(cache_a, ledger=ledger_a), spec, None).result().ok
            return found

        cache_b.get = get_then_let_a_answer  # the timing of another process, not a change of what lme does
        result = call(gateway_b, spec, seed=None)
        assert len(server.requests) == 1
    assert result.ok and result.cached
    assert [row["status"] for row in ledger_a.rows()] == ["paid"]
    for store in (cache_a, cache_b, ledger_a, ledger_b):
        store.close()


# -- a reply over its reservation ---------------------------------------------------------------------


def test_a_reply_far_over_max_tokens_stops_a_capped_study(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    cache = CallCache(tmp_path / "c.sqlite")
    budget = Budget(job_dollars=0.05)
    with LoopbackServer(reply="short", ignore_max_tokens=True, pad_to_words=20_000) as server:
        spec = spec_for(server, **PRICES, params={"max_tokens": 16})
        gateway = Gateway(cache, ledger=ledger, budget=budget)
        with pytest.raises(ReservationExceeded, match=r"more than the \$.* reserved"):
            call(gateway, spec)
        assert isinstance(ReservationExceeded("x"), BudgetExhausted)  # stops the job like a cap
        with pytest.raises(BudgetExhausted):  # the next call does not fit: the first reply spent the cap
            call(gateway, spec, seed=2)
        assert len(server.requests) == 1
    (row,) = ledger.rows()
    assert row["status"] == "paid" and row["dollars"] > row["reserved_dollars"]
    assert row["dollars"] == pytest.approx(0.2, rel=0.01)  # 20,000 words at $1e-5: what it really cost
    ledger.close()
    cache.close()


def test_a_reply_over_its_reservation_without_a_dollar_cap_is_kept(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    with LoopbackServer(reply="short", ignore_max_tokens=True, pad_to_words=500) as server:
        result = call(Gateway(ledger=ledger), spec_for(server, **PRICES, params={"max_tokens": 16}))
    assert result.ok and result.output_tokens == 500
    assert ledger.rows()[0]["dollars"] == pytest.approx(500 * 1e-5 + result.input_tokens * 1e-6)
    ledger.close()


# -- offline stand-ins never time out -----------------------------------------------------------------


def test_an_offline_call_waits_for_a_busy_machine_instead_of_timing_out():
    """The offline reader runs in litellm's worker threads; with every worker busy for longer than the
    model's timeout (plus the 5 s grace a paid call gets), it still answers, as it would on an idle machine."""
    spec = ModelSpec(model=READER_MODEL, timeout_s=0.001, max_attempts=1)
    payload = '{"question": "Which shelf holds the red notebook?", "memory": "The red notebook is on the top shelf."}'

    async def busy_then_call():
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
        blocker = asyncio.get_running_loop().run_in_executor(None, time.sleep, 5.5)
        result = await Gateway().complete(spec, [{"role": "user", "content": payload}], seed=0)
        await blocker
        return result

    result = asyncio.run(busy_then_call())
    assert result.ok, result.error
    assert "top shelf" in result.text
