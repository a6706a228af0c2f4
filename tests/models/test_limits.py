"""Requests/tokens-per-minute limits: the bucket's arithmetic, and the gateway honouring them over HTTP."""

from __future__ import annotations

import asyncio
import time

import pytest
from loopback import LoopbackServer

from lme.util.errors import LmeError
from lme.models.gateway import Gateway, ModelSpec
from lme.models.limits import RateLimits, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_starts_full_refills_per_second_and_caps_at_a_minute():
    clock = Clock()
    bucket = TokenBucket(120, clock)  # 2 a second, bursts of 120
    assert bucket.wait_time(120) == 0
    bucket._level -= 120
    assert bucket.wait_time(1) == pytest.approx(0.5)
    clock.now += 10
    assert bucket.wait_time(20) == 0 and bucket.wait_time(21) == pytest.approx(0.5)
    clock.now += 3600
    assert bucket.wait_time(120) == 0 and bucket._level == 120  # never more than a minute's allowance
    assert bucket.wait_time(10_000) == 0  # larger than a minute's allowance: goes on a full bucket


def test_bucket_take_waits_for_the_refill():
    bucket = TokenBucket(600)  # 10 a second

    async def take_all():
        waited = [await bucket.take(300), await bucket.take(300)]
        started = time.monotonic()
        waited.append(await bucket.take(4))
        return waited, time.monotonic() - started

    waited, elapsed = asyncio.run(take_all())
    assert waited[:2] == [0, 0]
    assert 0.3 <= elapsed < 1.0 and waited[2] == pytest.approx(elapsed, abs=0.1)


def test_limits_are_optional_and_must_be_positive():
    assert RateLimits().requests is None and RateLimits().tokens is None
    with pytest.raises(LmeError, match="requests_per_minute must be > 0"):
        ModelSpec(model="openai/gpt-4o-mini", requests_per_minute=0)


@pytest.mark.usefixtures("warm_litellm")
def test_gateway_spaces_requests_beyond_the_per_minute_limit(test_key):
    """60 requests a minute: the first minute's 60 may go at once; by t seconds at most 60 + t have gone."""
    with LoopbackServer(reply="ok") as server:
        spec = ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY",
                         concurrency=16, requests_per_minute=60, timeout_s=5)
        gateway = Gateway()

        async def many():
            return await asyncio.gather(
                *(gateway.complete(spec, [{"role": "user", "content": f"q{i}"}], seed=1) for i in range(62))
            )

        started = time.time()
        results = asyncio.run(many())
        times = sorted(request.received_at for request in server.requests)
    assert all(result.ok for result in results)
    assert len(times) == 62
    assert times[60] - started >= 0.95 and times[61] - started >= 1.95


@pytest.mark.usefixtures("warm_litellm")
def test_gateway_counts_tokens_against_the_tokens_per_minute_limit(test_key):
    """A bucket holding 2.5 requests' tokens, refilling 2.5 requests' worth a second: two go at once,
    the third waits about 0.2 s for its tokens."""
    from lme.models.pricing import max_call_cost

    messages = [{"role": "user", "content": "Where did I park?"}]
    with LoopbackServer(reply="ok") as server:
        probe = ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, params={"max_tokens": 10})
        per_request = max_call_cost(probe, messages)
        tokens = per_request.input_tokens + per_request.output_tokens
        # 60 x (2.5 requests) a minute: 2.5 requests a second refill rate, so the third waits ~0.2 s
        spec = ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY",
                         params={"max_tokens": 10}, tokens_per_minute=tokens * 2.5 * 60, timeout_s=5)
        gateway = Gateway()
        gateway._rate_limits(spec).tokens._level = tokens * 2.5  # start with 2.5 requests' worth

        async def three():
            return await asyncio.gather(*(gateway.complete(spec, messages, seed=s) for s in range(3)))

        started = time.time()
        results = asyncio.run(three())
        times = sorted(request.received_at for request in server.requests)
    assert all(result.ok for result in results)
    assert times[2] - started >= 0.18  # the third request's tokens were not there before 0.2 s
