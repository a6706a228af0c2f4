"""What the hosted memory systems (Supermemory, Zep) share: their key, their retries, their failures.

- **The key** comes from the environment only (`api_key_env`, e.g. `SUPERMEMORY_API_KEY`), checked as a value the
  way a model's key is (`lme.models.keys.check_key`: nothing an HTTP header cannot carry, no whitespace a shell
  left). A missing key is one sentence naming the variable (`LmeError`, exit status 2). The adapters ask for it in
  `attach_gateway`, which the job calls on its memory systems before the first question
  (`lme.memory.systems.base.attach_gateway`), and at the latest before their first request; `lme estimate`,
  which sends nothing, never needs it.
- **Retries** (`HostedCalls.call`): every HTTP call of the vendor's SDK goes through one loop, the SDK's own
  retries turned off (`max_retries=0`), so attempts are never multiplied. A 429, a 408, a 5xx or a connection
  failure is retried up to `max_attempts` in all, waiting the response's `Retry-After` (seconds or an HTTP date,
  at most `retry_after_max_s`) or else `backoff_base_s * 2**(attempt-1)` (at most `backoff_max_s`). Every request,
  retry and 429 is counted (`HostedCalls.counts`).
- **Failures**: a 401 or 403 (a bad key, a project the key may not use) raises
  `lme.models.gateway.SystemicFailure`, so the study stops with exit status 4 and sends nothing more, as for a
  model (and the adapter sends nothing more: a later call by another question raises it again, unsent); any
  other failure (a 400, a 404, retries exhausted) raises `HostedError`, which fails that question
  (`MemoryFailed`, through `SystemMemoryBuilder`). Every message is cleaned (`lme.util.secrets.clean`, plus the
  key's own value) before it is raised, so no secret reaches a log, MLflow or an artifact.
"""

from __future__ import annotations

import email.utils
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from lme.models.gateway import SystemicFailure
from lme.models.keys import check_key
from lme.util.errors import LmeError
from lme.util.secrets import clean

T = TypeVar("T")

RETRIED_STATUSES = frozenset({408, 429})  # and every 5xx
SYSTEMIC_STATUSES = {401: "AuthenticationError", 403: "PermissionDeniedError"}


class HostedError(RuntimeError):
    """A hosted system's call failed (its message cleaned of secrets): the question fails, the study goes on."""


def api_key(variable: str, system: str) -> str:
    """The key in the environment variable `variable`, checked as a value; one sentence naming the variable when it
    is not set or cannot be sent (never the key)."""
    if not isinstance(variable, str) or not variable.strip():
        raise LmeError(f"memory system {system}: memory.system.api_key_env names no environment variable.")
    value = os.environ.get(variable, "")
    if not value.strip():
        raise LmeError(f"memory system {system}: the environment variable {variable} (its api_key_env) is not set; "
                       "export it before the run.")
    check_key(variable, value, f"memory system {system}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a hosted system's call is retried (all run-only: not part of a design's digest)."""

    max_attempts: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 120.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise LmeError(f"memory.system.max_attempts: expected a whole number >= 1, got {self.max_attempts!r}.")
        for key in ("backoff_base_s", "backoff_max_s", "retry_after_max_s"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
                raise LmeError(f"memory.system.{key}: expected a number of seconds >= 0, got {value!r}.")

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` (1-based) when the response named none."""
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK's error carries (both SDKs' errors have `status_code`), else None."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after_of(exc: BaseException, now: float | None = None) -> float | None:
    """The seconds a response's `Retry-After` (or `retry-after-ms`) asks for, else None."""
    headers: Mapping[str, Any] | None = getattr(exc, "headers", None)
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    lowered = {str(key).lower(): str(value) for key, value in dict(headers).items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return max(0.0, email.utils.mktime_tz(parsed) - (time.time() if now is None else now))


def _transport_failure(exc: BaseException) -> bool:
    """A connection that failed or timed out (httpx's transport errors, or an SDK's wrapper of one)."""
    import httpx

    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, httpx.TransportError) or type(current).__name__ in (
                "APIConnectionError", "APITimeoutError"):
            return True
        current = current.__cause__ or current.__context__
    return False


def _detail(exc: BaseException, key: str | None) -> str:
    """The error's text on one line, at most 500 characters, cleaned of secrets (and of the key itself)."""
    body = getattr(exc, "body", None)
    status = status_of(exc)
    text = f"HTTP {status}: {body}" if status is not None and body is not None else str(exc)
    text = " ".join(text.split()) or type(exc).__name__
    return str(clean(text, [key]))[:500]


class HostedCalls:
    """One hosted system's calls: retried and counted (see the module's docstring). Safe to share by threads."""

    def __init__(self, system: str, policy: RetryPolicy, key: Callable[[], str | None],
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.system, self.policy, self._key, self._sleep = system, policy, key, sleep
        self._lock = threading.Lock()
        self._counts = {"requests": 0, "retries": 0, "rate_limited": 0, "failed": 0}
        self._stopped: SystemicFailure | None = None  # once a call failed systemically, nothing more is sent

    def counts(self) -> dict[str, int]:
        """Requests sent (attempts), retries among them, 429s received and calls that failed for good."""
        with self._lock:
            return dict(self._counts)

    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, increment in increments.items():
                self._counts[name] += increment

    def call(self, what: str, call: Callable[[], T]) -> T:
        """`call()` with the retries; `what` names it in a failure ("adding session s0001 as a document")."""
        return cast(T, self._run(what, call, frozenset()))

    def lookup(self, what: str, call: Callable[[], T]) -> T | None:
        """As `call`, but a 404 is an answer (nothing there): None."""
        return self._run(what, call, frozenset({404}))

    def _run(self, what: str, call: Callable[[], T], absent: frozenset[int]) -> T | None:
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                stopped = self._stopped
            if stopped is not None:  # another question's call found a bad key: this one is not sent
                raise SystemicFailure(stopped.model, stopped.error_class, stopped.detail)
            self._count(requests=1)
            try:
                return call()
            except LmeError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below: systemic, retried or this question's
                status = status_of(exc)
                if status is not None and status in absent:
                    return None
                if status in SYSTEMIC_STATUSES:
                    failure = SystemicFailure(f"memory system {self.system}", SYSTEMIC_STATUSES[status],
                                              f"{what}: {_detail(exc, self._key())}")
                    with self._lock:
                        self._counts["failed"] += 1
                        self._stopped = self._stopped or failure
                    raise failure from None
                retried = status in RETRIED_STATUSES or (status is not None and status >= 500) or (
                    status is None and _transport_failure(exc))
                if status == 429:
                    self._count(rate_limited=1)
                if not retried or attempt >= self.policy.max_attempts:
                    self._count(failed=1)
                    tries = f" after {attempt} attempts" if retried else ""
                    raise HostedError(f"{what} failed{tries}: {_detail(exc, self._key())}") from None
                asked = retry_after_of(exc)
                wait = min(asked, self.policy.retry_after_max_s) if asked is not None else self.policy.backoff(attempt)
                self._count(retries=1)
                self._sleep(wait)


__all__ = ["HostedCalls", "HostedError", "RetryPolicy", "api_key", "retry_after_of", "status_of"]
