"""Requests-per-minute and tokens-per-minute limits for one model, as token buckets.

A bucket holds up to one minute's allowance and refills continuously at
`per_minute / 60` a second; taking more than is there waits for the refill.
Waiters are served in arrival order. A request larger than a whole minute's
allowance waits for a full bucket and then goes (it could never fit otherwise).

The limiter binds to the event loop that first uses it and starts afresh in a
new loop (a test may call `asyncio.run` several times with one gateway).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """`per_minute` units a minute, with bursts up to one minute's allowance."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"a per-minute limit must be > 0, got {per_minute}")
        self.capacity = float(per_minute)
        self.rate = self.capacity / 60.0
        self._clock = clock
        self._level = self.capacity
        self._last = clock()
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._last) * self.rate)
        self._last = now

    def wait_time(self, amount: float) -> float:
        """Seconds until `amount` could be taken (0 when it can be now)."""
        self._refill()
        amount = min(float(amount), self.capacity)
        return max(0.0, (amount - self._level) / self.rate)

    def _lock_for_loop(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock

    async def take(self, amount: float) -> float:
        """Take `amount` (capped at a full bucket), waiting as needed; returns the seconds waited."""
        waited = 0.0
        async with self._lock_for_loop():
            while True:
                delay = self.wait_time(amount)
                if delay <= 0:
                    self._level -= min(float(amount), self.capacity)
                    return waited
                await asyncio.sleep(delay)
                waited += delay


class RateLimits:
    """A model's optional request and token limits; `acquire` waits until one more request fits both."""

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requests = TokenBucket(requests_per_minute, clock) if requests_per_minute else None
        self.tokens = TokenBucket(tokens_per_minute, clock) if tokens_per_minute else None

    @property
    def counts_tokens(self) -> bool:
        return self.tokens is not None

    async def acquire(self, tokens: int = 0) -> float:
        """Wait for one request of `tokens` tokens; returns the seconds waited."""
        waited = 0.0
        if self.requests is not None:
            waited += await self.requests.take(1)
        if self.tokens is not None and tokens > 0:
            waited += await self.tokens.take(tokens)
        return waited
