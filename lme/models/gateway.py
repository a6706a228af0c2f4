"""Every model call goes through `Gateway.complete` (chat) or `Gateway.embed` (an embedding request, the
same path: cache, limits, ledger and caps, retries; its vectors are cached as base64 float32). Synchronous
callers (a retriever ranking in a worker thread) use `run_blocking`, the gateway's own event loop.

It looks the request up in the call cache, limits the requests in flight per
model (`ModelSpec.concurrency`) and, optionally, across every model
(`calls_in_flight`: one provider account serving reader and judge), and
requests and tokens per minute; a request holds its place only while it is out,
not while its tokens are counted, its cost reserved or its answer stored. It reserves the call's maximum cost in
the spending ledger within the caps (`lme.models.ledger`; `BudgetExhausted` when
the caps leave no room), retries transient failures with exponential backoff
and jitter (honouring `Retry-After`), bounds the attempts and the time per call,
and accounts tokens and dollars per call. A call that still fails is returned
as a failed `CallResult` (never raised, never cached) so the caller records it.
A malformed reply (no choices, null content without a refusal, a body that is
not JSON) is a failed attempt like a 500: retried, never cached; what such a
reply was billed is still settled in the ledger as paid.

Failures no retry can fix raise `SystemicFailure` and stop the study: an
authentication or permission error, a model the provider does not know, a
request it rejects for its parameters, missing credentials, or an `api_base`
that has refused connections for `ModelSpec.unreachable_after_s`. From then on
the gateway sends nothing: every later `complete` raises the same failure.
`preflight` checks, before the first question and with no paid call, that every
paid model's credentials are in the environment.

Offline stand-ins run with no time limit: their answers must not depend on how
busy the machine is.

A reply that cost more than its reservation (a provider that ignores
`max_tokens`, a wrong price) is kept and settled at its real cost; when the
budget caps dollars, nothing more is sent: the overrun is marked in this
gateway before the reply's place is given up (so no waiting request of this
process goes out after it) and written to the ledger with the settle (so no
other process's does: each request under a dollar cap asks the ledger first).
The requests already out finish and are settled at their cost, then
`ReservationExceeded` says by how much the reply exceeded its reservation and
where the caps stand. A cap is thus overshot by at most what the requests out
at that moment cost beyond their reservations (README, "Spending").

A key read from `api_key_env` is checked as a value before any request
(`lme.models.keys`): whitespace, control or non-ASCII characters are refused in
one sentence naming the variable and the character, never sent.

Order of writes for a paid call: the response goes into the call cache, then the
ledger's reservation is settled; a process killed between the two leaves a
reservation that the next gateway on the ledger settles from the cache.

litellm is imported lazily: it takes seconds to import.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from lme.util.errors import LmeError
from lme.util.hashing import sha256_text
from lme.models.cache import CallCache, call_key
from lme.models.keys import check_key
from lme.models.ledger import OVERRUN_TOLERANCE, BudgetExhausted, ReservationExceeded
from lme.models.limits import RateLimits
from lme.models.litellm_loader import import_litellm
from lme.models.offline import register_offline_providers
from lme.models.spec import ModelSpec

if TYPE_CHECKING:
    import numpy as np

    from lme.models.ledger import Budget, Ledger, Overrun, Reservation
    from lme.models.pricing import CallBound

T = TypeVar("T")

_RETRYABLE = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
    "APIError",
    "MalformedReply",
)
# Errors no retry can fix: the whole study stops at the first one (`SystemicFailure`).
_SYSTEMIC = (
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "BadRequestError",
    "UnprocessableEntityError",
    "UnsupportedParamsError",
    "InvalidRequestError",
)
# Subclasses of the above that concern one request only (its prompt), not the study.
_PER_REQUEST = ("ContextWindowExceededError", "ContentPolicyViolationError")
_MISSING_CREDENTIALS = ("api_key client option must be set", "missing credentials", "no api key provided")
_CONNECTION = ("APIConnectionError",)


class SystemicFailure(LmeError):
    """A model call failed in a way no retry can fix (a bad key, an unknown model, a refused parameter,
    an endpoint that refuses connections): the study stops, sending nothing more."""

    def __init__(self, model: str, error_class: str, detail: str) -> None:
        self.model = model
        self.error_class = error_class
        self.detail = detail
        super().__init__(f"model {model}: {error_class}: {detail}")


class MalformedReply(Exception):
    """A provider's reply that cannot be read as a chat completion; `usage` holds the tokens it reported
    (billed all the same; empty when it reported none) and `response` the reply itself, for its price."""

    def __init__(self, reason: str, response: Any) -> None:
        super().__init__(reason)
        self.response = response
        usage = _usage_numbers(getattr(response, "usage", None))
        self.usage: dict[str, int] = usage if any(usage.values()) else {}


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes (litellm wraps the provider SDK's error, which wraps the transport's)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


_REFUSED = ("ConnectionRefusedError", "ConnectError", "ClientConnectorError", "gaierror")


def classify_error(exc: BaseException) -> str:
    """'systemic' (no retry can fix it: the study stops), 'connection' (the endpoint refuses connections:
    retryable until it has refused for a while), 'retryable' or 'final' (a failure of this request only)."""
    names = {klass.__name__ for klass in type(exc).__mro__}
    if names & set(_PER_REQUEST):
        return "final"
    if any(marker in str(exc).lower() for marker in _MISSING_CREDENTIALS):
        return "systemic"
    status = getattr(exc, "status_code", None)
    if names & set(_SYSTEMIC) or status in (400, 401, 403, 404, 422):
        return "systemic"
    chain_names = {klass.__name__ for link in _chain(exc) for klass in type(link).__mro__}
    if chain_names & set(_REFUSED):
        return "connection"
    if names & set(_RETRYABLE) or isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return "retryable"
    return "final"


_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?")


def provider_message(text: str) -> str:
    """A provider's error message without litellm's class prefixes, on one line, at most 300 characters."""
    line = _LITELLM_PREFIX.sub("", " ".join(text.split()))
    return line if len(line) <= 300 else line[:297] + "..."


@dataclass(frozen=True)
class CallResult:
    model: str
    key: str
    text: str | None  # None when the call failed
    error: str | None = None
    cached: bool = False
    attempts: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = 0.0  # None when the price is unknown
    refusal: str | None = None  # the model's refusal message, when it refused (text is then "")
    cached_input_price: str | None = None  # with cached input tokens: "cache-read" or "input" (lme.models.pricing)

    @property
    def ok(self) -> bool:
        return self.text is not None


@dataclass(frozen=True)
class EmbeddingResult:
    """One embedding request's answer: `vectors` (float32, one row per input, as the provider returned them:
    not normalised), or None when the call failed."""

    model: str
    key: str
    vectors: np.ndarray | None = dataclasses.field(repr=False)
    error: str | None = None
    cached: bool = False
    attempts: int = 0
    input_tokens: int = 0
    cost_usd: float | None = 0.0  # None when the price is unknown

    @property
    def ok(self) -> bool:
        return self.vectors is not None


def embedding_call_key(model: str, inputs: list[str], params: dict[str, Any]) -> str:
    """Content address of one embedding request (never equal to a chat call's: the kind is part of it)."""
    canonical = json.dumps(
        {"kind": "embedding", "model": model, "input": inputs, "params": params},
        sort_keys=True, ensure_ascii=False, separators=(",", ":"),
    )
    return sha256_text(canonical)


R = TypeVar("R", CallResult, EmbeddingResult)


class _Request(Generic[R]):
    """What differs between a chat completion and an embedding request: what is sent, how a reply is read
    and cached, how its maximum cost is bounded, and the result it becomes."""

    def chars(self) -> int:
        raise NotImplementedError

    def bound(self, spec: ModelSpec, exact: bool = True) -> CallBound:
        """The most the request can use and cost: its input counted (`exact`), or bounded by its bytes."""
        raise NotImplementedError

    async def send(self, gateway: Gateway, litellm: Any, spec: ModelSpec, kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def read(self, response: Any) -> dict[str, Any]:
        """The reply's own fields to store (besides usage, cost and attempts); `MalformedReply` if unreadable."""
        raise NotImplementedError

    def cacheable(self, stored: dict[str, Any]) -> bool:
        return True

    def overrun(self, usage: dict[str, int]) -> str:
        return f"{usage['input_tokens']} input tokens, more than counted"

    def result(self, model: str, key: str, stored: dict[str, Any], cached: bool) -> R:
        raise NotImplementedError

    def failed(self, model: str, key: str, error: str, attempts: int) -> R:
        raise NotImplementedError


class _Chat(_Request[CallResult]):
    def __init__(self, messages: list[dict[str, Any]], seed: int | None = None) -> None:
        self.messages = messages
        self.seed = seed  # sent as the request's `seed` (an offline stand-in's only)

    def chars(self) -> int:
        return _message_chars(self.messages)

    def bound(self, spec: ModelSpec, exact: bool = True) -> CallBound:
        from lme.models.pricing import max_call_cost

        return max_call_cost(spec, self.messages, exact)

    async def send(self, gateway: Gateway, litellm: Any, spec: ModelSpec, kwargs: dict[str, Any]) -> Any:
        if self.seed is not None:
            kwargs = {**kwargs, "seed": self.seed}
        return await gateway._send(litellm, spec, self.messages, kwargs)

    def read(self, response: Any) -> dict[str, Any]:
        text, message = _reply_text(response)
        fields: dict[str, Any] = {"text": text}
        refusal = getattr(message, "refusal", None)
        if refusal and not text:
            fields["refusal"] = str(refusal)
        return fields

    def cacheable(self, stored: dict[str, Any]) -> bool:
        # An empty reply is kept for this run (the reader counts it as no answer) but not cached, so a
        # rerun asks again; a refusal is the model's answer and is cached.
        return bool(stored["text"].strip()) or "refusal" in stored

    def overrun(self, usage: dict[str, int]) -> str:
        return f"{usage['output_tokens']} output tokens: the provider ignored the request's maximum"

    def result(self, model: str, key: str, stored: dict[str, Any], cached: bool) -> CallResult:
        return CallResult(model=model, key=key, cached=cached, **stored)

    def failed(self, model: str, key: str, error: str, attempts: int) -> CallResult:
        return CallResult(model=model, key=key, text=None, error=error, attempts=attempts)


class _Embedding(_Request[EmbeddingResult]):
    """An embedding request. Its vectors are stored in the call cache as base64 of little-endian float32
    (`vectors`, with `count` and `dim`): exact, and a quarter of their size as JSON numbers."""

    def __init__(self, inputs: list[str]) -> None:
        self.inputs = inputs

    def chars(self) -> int:
        return sum(len(text) for text in self.inputs)

    def bound(self, spec: ModelSpec, exact: bool = True) -> CallBound:
        from lme.models.pricing import (
            CallBound,
            byte_bound_tokens,
            count_input_tokens,
            model_prices,
            reserved_input_tokens,
        )

        if spec.is_offline:
            return CallBound(0, 0, 0.0)
        if exact:
            counted = sum(count_input_tokens(spec.model, [{"role": "user", "content": text}]) for text in self.inputs)
        else:
            counted = sum(byte_bound_tokens([{"role": "user", "content": text}]) for text in self.inputs)
        tokens = reserved_input_tokens(counted)
        prices = model_prices(spec)
        return CallBound(tokens, 0, None if prices is None else prices.dollars(tokens, 0))

    async def send(self, gateway: Gateway, litellm: Any, spec: ModelSpec, kwargs: dict[str, Any]) -> Any:
        # litellm 1.110's embedding path does not honour max_retries=0 (its OpenAI handler takes `max_retries or
        # DEFAULT_MAX_RETRIES`; even a client built with max_retries=0 saw a 500 retried once), so a provider's
        # 5xx may be retried inside one of the gateway's attempts: `attempts` counts the gateway's own.
        return await asyncio.wait_for(
            litellm.aembedding(model=spec.model, input=self.inputs, timeout=spec.timeout_s, num_retries=0, max_retries=0,
                              **kwargs),
            timeout=spec.timeout_s + 5,
        )

    def read(self, response: Any) -> dict[str, Any]:
        import numpy as np

        data = _get(response, "data")
        if not isinstance(data, list) or len(data) != len(self.inputs):
            count = len(data) if isinstance(data, list) else 0
            raise MalformedReply(f"{count} embeddings returned for {len(self.inputs)} texts", response)
        try:
            ordered = sorted(data, key=lambda item: int(_get(item, "index")))
            rows = [_vector(_get(item, "embedding")) for item in ordered]
            vectors = np.stack(rows).astype("<f4") if rows else np.zeros((0, 0), "<f4")
        except (TypeError, ValueError) as exc:
            raise MalformedReply(f"the embeddings cannot be read ({exc})", response) from None
        if vectors.ndim != 2 or vectors.shape[1] == 0 or not np.isfinite(vectors).all():
            raise MalformedReply(f"the embeddings have shape {vectors.shape} or values that are not finite", response)
        return {"vectors": base64.b64encode(vectors.tobytes()).decode("ascii"), "count": int(vectors.shape[0]),
                "dim": int(vectors.shape[1])}

    def overrun(self, usage: dict[str, int]) -> str:
        return f"{usage['input_tokens']} input tokens, more than counted before the request"

    def result(self, model: str, key: str, stored: dict[str, Any], cached: bool) -> EmbeddingResult:
        import numpy as np

        vectors = np.frombuffer(base64.b64decode(stored["vectors"]), dtype="<f4").reshape(
            int(stored["count"]), int(stored["dim"]))
        return EmbeddingResult(model=model, key=key, vectors=vectors, cached=cached,
                               attempts=int(stored.get("attempts") or 0),
                               input_tokens=int(stored.get("input_tokens") or 0), cost_usd=stored.get("cost_usd"))

    def failed(self, model: str, key: str, error: str, attempts: int) -> EmbeddingResult:
        return EmbeddingResult(model=model, key=key, vectors=None, error=error, attempts=attempts)


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _vector(value: Any) -> Any:
    """One embedding as a float32 array: a list of numbers, or base64 of float32 (`encoding_format=base64`)."""
    import numpy as np

    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value, dtype=np.float64).astype("<f4")


_LOGGING_WORKERS: set[asyncio.Task[Any]] = set()


def hold_logging_worker() -> None:
    """Keep a reference to litellm's logging worker task of the running loop until it ends.

    litellm (1.110) runs one logging worker task per event loop and drops its reference to it when calls come from
    another loop; a job's reader and judge call from the job's loop and a memory's model calls from the gateway's
    own (`run_blocking`), so each switch left a pending task with no reference, which the garbage collector destroyed
    mid-run ("Task was destroyed but it is pending!", four such lines in an offline mem0 job of 6 questions, one in
    a model-built memory's). Held here, each task ends when its loop does (`asyncio.run`'s end, `close_background`)."""
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

    task = getattr(GLOBAL_LOGGING_WORKER, "_worker_task", None)
    if isinstance(task, asyncio.Task) and not task.done() and task not in _LOGGING_WORKERS:
        _LOGGING_WORKERS.add(task)
        task.add_done_callback(_LOGGING_WORKERS.discard)


async def _cancel_other_tasks() -> None:
    """Cancel every other task of the running loop and wait for them to end."""
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _usage_numbers(usage: Any) -> dict[str, int]:
    def get(obj: Any, name: str) -> Any:
        if obj is None:
            return None
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    prompt_details = get(usage, "prompt_tokens_details")
    completion_details = get(usage, "completion_tokens_details")
    return {
        "input_tokens": int(get(usage, "prompt_tokens") or 0),
        "cached_input_tokens": int(get(prompt_details, "cached_tokens") or 0),
        "output_tokens": int(get(usage, "completion_tokens") or 0),
        "reasoning_tokens": int(get(completion_details, "reasoning_tokens") or 0),
    }


def _price(spec: ModelSpec, response: Any, usage: dict[str, int]) -> float | None:
    if spec.is_offline:
        return 0.0
    if spec.input_cost_per_token is not None and spec.output_cost_per_token is not None:
        from lme.models.pricing import model_prices

        prices = model_prices(spec)
        assert prices is not None
        return prices.dollars(usage["input_tokens"], usage["output_tokens"], usage["cached_input_tokens"])
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if cost is not None:
        return float(cost)
    litellm = import_litellm()
    try:
        return float(litellm.completion_cost(completion_response=response, model=spec.model))
    except Exception:  # litellm raises many kinds for an unpriced model
        return None


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # the HTTP-date form
        from datetime import datetime, timezone
        from email.utils import parsedate_to_datetime

        return max(0.0, (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds())
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class _Sending:
    """One call as `Gateway._call` sends it: what each attempt is sent with, and the state its exception path
    reads (the reservation still open, a request out, tokens billed for malformed replies, a count in
    `Gateway._unsettled`)."""

    litellm: Any
    kwargs: dict[str, Any]
    limits: RateLimits | None
    request_tokens: int
    paid: bool
    capped: bool
    reservation: Reservation | None
    attempts: int = 0
    last_error: str = "no attempt made"
    in_flight: bool = False  # a request is out and unanswered (if cancelled now, it may still be billed)
    billed: dict[str, int] = dataclasses.field(default_factory=dict)  # tokens of malformed replies billed all the same
    billed_dollars: float = 0.0
    unsettled: bool = False  # counted in Gateway._unsettled: a request of this call went out, its reservation is open


class Gateway:
    """The single place where model calls happen.

    `ledger` (optional) records every paid call and, with `budget`, enforces the caps: a call's
    maximum cost is reserved before it is sent and settled after. Building a gateway on a ledger
    first closes the reservations that dead processes left (see `Ledger.recover`).
    """

    def __init__(
        self,
        cache: CallCache | None = None,
        rng: random.Random | None = None,
        ledger: Ledger | None = None,
        budget: Budget | None = None,
        calls_in_flight: int | None = None,
    ) -> None:
        if calls_in_flight is not None and int(calls_in_flight) < 1:
            raise LmeError(f"calls_in_flight must be a positive number of calls or null, got {calls_in_flight}.")
        self.cache = cache
        self.calls_in_flight = None if calls_in_flight is None else int(calls_in_flight)
        self.ledger = ledger
        self.budget = budget
        self._rng = rng or random.Random()
        self._semaphores: dict[tuple[int, str], asyncio.Semaphore] = {}
        self._limits: dict[str, RateLimits] = {}
        self._inflight: dict[tuple[int, str], asyncio.Future[Any]] = {}  # (event loop, call key) -> its call
        self._background: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None  # see run_blocking
        self._background_lock = threading.Lock()
        self._settled: dict[int, asyncio.Event] = {}  # per event loop: pulsed when a reservation closes
        self.calls_made = 0
        self.calls_cached = 0
        self.calls_failed = 0
        self.failure: SystemicFailure | None = None  # set at the first failure no retry can fix: nothing is sent after it
        # set when a reply cost more than its reservation under a dollar cap: nothing is sent after it
        self.overrun: ReservationExceeded | None = None
        self._unsettled = 0  # paid calls with a request sent whose reservation is not yet closed
        self._unsettled_lock = threading.Lock()
        self._overrun_reported = False  # the overrun's final sentence is being or has been written
        self._out_at_overrun: int | None = None  # other requests out when this gateway saw its first overrun
        self._refused_since: dict[str, float] = {}  # model -> when its endpoint began refusing connections
        self.recovered = None
        if ledger is not None:
            self.recovered = ledger.recover(cache.get if cache is not None else None)

    def _semaphore(self, spec: ModelSpec | None) -> asyncio.Semaphore:
        """The event loop's semaphore of `spec`'s model, or (None) of every model together."""
        slot = (id(asyncio.get_running_loop()), spec.model if spec is not None else "")
        if slot not in self._semaphores:
            size = spec.concurrency if spec is not None else (self.calls_in_flight or 1)
            self._semaphores[slot] = asyncio.Semaphore(max(1, size))
        return self._semaphores[slot]

    @contextlib.asynccontextmanager
    async def _slot(self, spec: ModelSpec) -> AsyncIterator[None]:
        """A place for one request: within its model's `concurrency` and the gateway's `calls_in_flight`."""
        async with self._semaphore(spec):
            if self.calls_in_flight is None:
                yield
            else:
                async with self._semaphore(None):
                    yield

    def _rate_limits(self, spec: ModelSpec) -> RateLimits | None:
        if spec.requests_per_minute is None and spec.tokens_per_minute is None:
            return None
        if spec.model not in self._limits:
            self._limits[spec.model] = RateLimits(spec.requests_per_minute, spec.tokens_per_minute)
        return self._limits[spec.model]

    async def complete(self, spec: ModelSpec, messages: list[dict[str, Any]], seed: int | None,
                       repeat: int | None = None) -> CallResult:
        """One chat completion; identical concurrent requests share one call. `repeat` (2, 3, ...): the same
        request sent again on purpose, a new call under its own cache key (`call_key`), never in the messages.

        Raises `SystemicFailure` once any call has failed in a way no retry can fix, and
        `ReservationExceeded` for a paid request once a reply cost more than its reservation under a dollar
        cap (an offline stand-in's call and an answer in the call cache are still served: they are free)."""
        if self.failure is not None:
            raise self.failure
        # An offline stand-in is sent the seed too (it draws with it at a temperature above 0); a provider's
        # model is not: the seed keys its call cache only.
        chat = _Chat(messages, seed if spec.is_offline else None)
        return await self._request(spec, call_key(spec.model, messages, spec.params, seed, repeat), chat)

    async def embed(self, spec: ModelSpec, inputs: list[str]) -> EmbeddingResult:
        """One embedding request for `inputs` (texts, prompts already applied): the vectors as the provider
        returned them (float32, not normalised), in input order. Cached, capped, retried and accounted
        in the ledger like a chat completion (its tokens are input tokens; output tokens are 0); a call
        that still fails is returned failed (`ok` False), never cached.

        Raises `SystemicFailure` and `BudgetExhausted` as `complete` does."""
        if self.failure is not None:
            raise self.failure
        if not inputs:
            raise LmeError(f"model {spec.model}: an embedding request needs at least one text.")
        return await self._request(spec, embedding_call_key(spec.model, inputs, spec.params), _Embedding(inputs))

    def run_blocking(self, awaitable: Awaitable[T]) -> T:
        """Run `awaitable` (e.g. `embed` calls) to completion on this gateway's own event loop, a daemon thread
        started on first use, and return its result: for synchronous callers such as a retriever ranking in a
        worker thread. All such calls share that one loop, so a model's `concurrency` bounds them together.
        Must not be called from that loop itself."""
        with self._background_lock:
            if self._background is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="lme-gateway", daemon=True)
                thread.start()
                self._background = (loop, thread)
            loop = self._background[0]
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("Gateway.run_blocking was called from the gateway's own event loop.")
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()

    def close_background(self) -> None:
        """Stop the event loop `run_blocking` started, if any (a later `run_blocking` starts another)."""
        with self._background_lock:
            background, self._background = self._background, None
        if background is not None:
            loop, thread = background
            try:  # tasks litellm left on the loop (its logging worker) end now, not as "destroyed but pending"
                asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), loop).result(timeout=5)
            except Exception:  # noqa: BLE001 - a loop that cannot take it is stopped all the same
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            if not thread.is_alive():
                loop.close()

    async def _request(self, spec: ModelSpec, key: str, request: _Request[R]) -> R:
        """The call cache, then one shared call per key and event loop, then `_call`."""
        if self.cache is not None:
            stored = self.cache.get(key)
            if stored is not None:
                self.calls_cached += 1
                return request.result(spec.model, key, stored, cached=True)
        slot = (id(asyncio.get_running_loop()), key)
        if slot in self._inflight:
            shared = await asyncio.shield(self._inflight[slot])
            if shared.ok:
                self.calls_cached += 1
            return dataclasses.replace(shared, cached=shared.ok)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[slot] = future
        try:
            result = await self._call(spec, key, request)
            future.set_result(result)
            return result
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved
            raise
        finally:
            del self._inflight[slot]

    async def _reserve(self, spec: ModelSpec, key: str, dollars: float) -> Reservation | dict[str, Any]:
        """Reserve within the caps, waiting while calls in flight may still free room, or while another
        process makes this same call (then its cached response is returned instead)."""
        assert self.ledger is not None
        delay, next_recovery = 0.01, time.monotonic() + 5.0
        waited = False
        while True:
            if self.overrun is not None:  # a reply of this gateway overran its reservation: reserve nothing more
                raise self.overrun
            reservation, stored = await self._reserve_once(spec, key, dollars, waited)
            if stored is not None:  # answered by another process meanwhile
                return stored
            if reservation is not None:
                return reservation
            waited = True
            try:  # woken by a settle in this process, or polling for other processes
                await asyncio.wait_for(self._settle_event().wait(), timeout=delay)
            except asyncio.TimeoutError:
                delay = min(0.25, delay * 2)
            if time.monotonic() > next_recovery:  # a dead process's reservation would block us for ever
                cache_get = self.cache.get if self.cache is not None else None
                await asyncio.to_thread(self.ledger.recover, cache_get)
                next_recovery = time.monotonic() + 5.0

    async def _reserve_once(self, spec: ModelSpec, key: str, dollars: float,
                            waited: bool) -> tuple[Reservation | None, dict[str, Any] | None]:
        """`Ledger.reserve` in a worker thread (its committed write, and any wait for the ledger's lock,
        off the event loop), then the call cache looked up again there: (the reservation or None, None), or
        (None, the response another process stored meanwhile; the reservation, if granted, cancelled).
        A task cancelled meanwhile leaves no reservation behind: whichever side
        learns of the other second, the worker (cancelled before it returned) or this task (cancelled
        after), takes the reservation back."""
        assert self.ledger is not None
        ledger, cache, handover = self.ledger, self.cache, threading.Lock()
        abandoned = False
        handed: list[Reservation] = []

        def reserve() -> tuple[Reservation | None, dict[str, Any] | None]:
            reservation = ledger.reserve(spec.model, key, dollars, self.budget)
            # Looked up again whenever the reservation is granted (it is this call's lock across processes: no
            # other process can be paying for it now) or after a wait: another process may have answered it
            # between our first look-up and the reservation, and would otherwise be paid for twice.
            try:
                stored = cache.get(key) if cache is not None and (waited or reservation is not None) else None
            except BaseException:
                if reservation is not None:
                    ledger.cancel(reservation)
                raise
            if stored is not None and reservation is not None:
                ledger.cancel(reservation)
                reservation = None
            with handover:
                if not abandoned:
                    if reservation is not None:
                        handed.append(reservation)
                    return reservation, stored
            if reservation is not None:
                ledger.cancel(reservation)
            return None, None

        future = asyncio.ensure_future(asyncio.to_thread(reserve))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with handover:
                abandoned = True
                orphan = handed[0] if handed else None
            if orphan is not None:
                ledger.cancel(orphan)
            raise

    def _settle_event(self) -> asyncio.Event:
        loop = id(asyncio.get_running_loop())
        if loop not in self._settled:
            self._settled[loop] = asyncio.Event()
        return self._settled[loop]

    def _pulse_settled(self) -> None:
        event = self._settle_event()
        self._settled[id(asyncio.get_running_loop())] = asyncio.Event()
        event.set()

    def _store_and_settle(self, key: str, model: str, stored: dict[str, Any] | None, reservation: Reservation | None,
                          usage: dict[str, int], attempts: int, dollars: float | None) -> Overrun | None:
        """In a worker thread: the response into the call cache (unless `stored` is None: not to be cached),
        then the reservation settled, in that order; the overrun the settle wrote, if the reply cost more than
        its reservation under a dollar cap."""
        if self.cache is not None and stored is not None:
            self.cache.put(key, model, stored)
        if reservation is not None:
            assert self.ledger is not None
            return self.ledger.settle(reservation, usage, dollars, attempts, self.budget)
        return None

    async def _call(self, spec: ModelSpec, key: str, request: _Request[R]) -> R:
        """The call sent until it succeeds, fails for good or is stopped: bounded, reserved in the ledger, sent
        within its model's limits and slots, retried with backoff, and its reservation closed whatever ends it."""
        litellm, kwargs = self._prepare(spec)
        limits = self._rate_limits(spec)
        paid = self.ledger is not None and not spec.is_offline
        if paid and self.overrun is not None:  # a reply overran its reservation: no paid request goes out (an
            raise self.overrun  # offline stand-in's call, or an answer in the call cache, still may: both are free)
        request_tokens, reserve_dollars = await self._bound(spec, request, limits, paid)
        reservation = await self._reserve(spec, key, reserve_dollars) if paid else None
        if isinstance(reservation, dict):  # another process made this call meanwhile
            self.calls_cached += 1
            return request.result(spec.model, key, reservation, cached=True)
        capped = reservation is not None and self.budget is not None and self.budget.caps_dollars
        call = _Sending(litellm, kwargs, limits, request_tokens, paid, capped, reservation)
        try:
            result = await self._attempts(spec, key, request, call)
            if result is not None:
                return result
        except BaseException:
            self._abandon(call)
            raise
        finally:
            if call.unsettled:
                self._count_unsettled(-1)
        await self._close_failed(spec, call)
        self.calls_failed += 1
        return request.failed(spec.model, key, call.last_error, call.attempts)

    def _prepare(self, spec: ModelSpec) -> tuple[Any, dict[str, Any]]:
        """litellm (the offline stand-ins registered for one) and the request's arguments: params, endpoint, key."""
        litellm = import_litellm()
        if spec.is_offline:
            register_offline_providers()
        kwargs: dict[str, Any] = dict(spec.params)
        if spec.api_base:
            kwargs["api_base"] = spec.api_base
        if spec.api_key_env:
            api_key = os.environ.get(spec.api_key_env)
            if api_key:
                check_key(spec.api_key_env, api_key, f"model {spec.model}")  # never sent with a newline in it
                kwargs["api_key"] = api_key
        return litellm, kwargs

    async def _bound(self, spec: ModelSpec, request: _Request[Any], limits: RateLimits | None,
                     paid: bool) -> tuple[int, float]:
        """The request's tokens for its rate limits and the dollars to reserve for it (0 where neither counts)."""
        request_tokens = 0
        reserve_dollars = 0.0
        counts_tokens = limits is not None and limits.counts_tokens
        if paid or counts_tokens:
            from lme.models.pricing import input_is_counted, require_bound

            caps_dollars = self.budget is not None and self.budget.caps_dollars
            # An input not counted is bounded by its bytes (larger, so safe for another process's study
            # cap reading this ledger).
            exact = input_is_counted(caps_dollars, spec.tokens_per_minute)
            if not exact or request.chars() <= INLINE_BOUND_CHARS:  # a judge's prompt: counted faster than a hop
                bound = request.bound(spec, exact)
            else:  # tokenizing a long prompt takes milliseconds: off the event loop
                bound = await asyncio.to_thread(request.bound, spec, exact)
            request_tokens = bound.input_tokens + bound.output_tokens
            if paid:
                reserve_dollars = require_bound(spec, bound) if caps_dollars else (bound.dollars or 0.0)
        return request_tokens, reserve_dollars

    async def _attempts(self, spec: ModelSpec, key: str, request: _Request[R], call: _Sending) -> R | None:
        """Up to `spec.max_attempts` requests, waiting between them as their errors say; the first reply's result,
        or None once an attempt failed for good or the last one failed."""
        for attempt in range(1, max(1, spec.max_attempts) + 1):
            call.attempts = attempt
            if self.failure is not None:  # another call found the study cannot succeed: send nothing more
                raise self.failure
            if call.paid and self.overrun is not None:
                raise self.overrun
            if call.limits is not None:
                await call.limits.acquire(call.request_tokens)
            try:
                response = await self._send_in_slot(spec, request, call)
                fields = request.read(response)
            except (SystemicFailure, BudgetExhausted):
                raise
            except Exception as exc:
                call.in_flight = False
                if not self._note_failed_attempt(spec, exc, attempt, call):
                    return None
                await asyncio.sleep(self._retry_delay(spec, exc, attempt))
                continue
            return await self._succeeded(spec, key, request, response, fields, attempt, call)
        return None

    async def _send_in_slot(self, spec: ModelSpec, request: _Request[Any], call: _Sending) -> Any:
        """One request in a slot of its model and of the gateway, unless a failure or an overrun stops it first;
        its reply, checked against the reservation before the slot is given up."""
        async with self._slot(spec):  # a slot is held by the request only, not by the bookkeeping
            if self.failure is not None:
                raise self.failure
            if call.capped:  # an overrun here or in another process on the ledger: send nothing more
                await self._check_overrun()
            if not call.unsettled and call.reservation is not None:
                call.unsettled = True
                self._count_unsettled(+1)
            call.in_flight = True
            response = await request.send(self, call.litellm, spec, call.kwargs)
            call.in_flight = False
            if call.capped and call.reservation is not None:  # marked before the slot is given up
                self._mark_if_over(spec, request, call.reservation, response, call.billed_dollars)
        return response

    def _note_failed_attempt(self, spec: ModelSpec, exc: Exception, attempt: int, call: _Sending) -> bool:
        """A failed attempt noted (a malformed reply's billed tokens, the error); a failure no retry can fix stops
        the gateway (raised); whether another attempt may follow."""
        if isinstance(exc, MalformedReply) and exc.usage:
            usage = exc.usage
            call.billed = {name: call.billed.get(name, 0) + usage.get(name, 0) for name in usage}
            call.billed_dollars += _price(spec, exc.response, usage) or 0.0
        name = type(exc).__name__
        detail = _redact(str(exc), call.kwargs.get("api_key"))
        call.last_error = f"{name}: {detail}"[:500]
        kind = classify_error(exc)
        if kind == "connection":
            kind, refused_s = self._refused(spec)
            if kind == "systemic":
                name = f"{name} (connections refused for {refused_s:.0f} s)"
        if kind == "systemic":
            self.failure = SystemicFailure(spec.model, name, provider_message(detail))
            raise self.failure from None
        return not (kind == "final" or attempt == spec.max_attempts)

    def _retry_delay(self, spec: ModelSpec, exc: Exception, attempt: int) -> float:
        """Seconds before the next attempt: the reply's Retry-After (capped), else exponential backoff with jitter."""
        delay = _retry_after(exc)
        if delay is not None:
            return min(delay, spec.retry_after_max_s)
        delay = min(spec.backoff_max_s, spec.backoff_base_s * 2 ** (attempt - 1))
        delay *= 0.5 + self._rng.random()  # jitter
        return delay

    async def _succeeded(self, spec: ModelSpec, key: str, request: _Request[R], response: Any,
                         fields: dict[str, Any], attempt: int, call: _Sending) -> R:
        """A reply priced, cached and its reservation settled (off the event loop), then counted; one that cost more
        than its reservation stops the gateway once the other requests out are settled."""
        self._refused_since.pop(spec.model, None)
        stored, usage = self._priced(spec, response, fields, attempt)
        cacheable = request.cacheable(stored)
        # the cache write and the settle (each a committed SQLite transaction) run off the event loop;
        # the reservation is taken first, so a cancel from here on cannot release a paid call
        done, call.reservation = call.reservation, None
        settle_usage = {name: usage.get(name, 0) + call.billed.get(name, 0) for name in usage}
        settle_cost = None if stored["cost_usd"] is None else stored["cost_usd"] + call.billed_dollars
        overran = None
        if (self.cache is not None and cacheable) or done is not None:
            overran = await asyncio.to_thread(self._store_and_settle, key, spec.model, stored if cacheable else None,
                                              done, settle_usage, attempt, settle_cost)
        if done is not None:
            if call.unsettled:
                call.unsettled = False
                self._count_unsettled(-1)
            self._pulse_settled()
        self.calls_made += 1
        result = request.result(spec.model, key, stored, cached=False)
        if overran is not None:  # kept and settled; now nothing more is sent
            await self._stop_for_overrun(spec, request.overrun(usage), overran)
        return result

    @staticmethod
    def _priced(spec: ModelSpec, response: Any, fields: dict[str, Any],
                attempt: int) -> tuple[dict[str, Any], dict[str, int]]:
        """The response as the call cache stores it (fields, attempts, usage, cost) and its usage."""
        usage = _usage_numbers(getattr(response, "usage", None))
        stored: dict[str, Any] = {**fields, "attempts": attempt, **usage}
        stored["cost_usd"] = _price(spec, response, usage)
        if usage["cached_input_tokens"] and stored["cost_usd"] is not None:
            from lme.models.pricing import cached_input_basis

            stored["cached_input_price"] = cached_input_basis(spec)
        return stored, usage

    def _abandon(self, call: _Sending) -> None:
        """A call stopped by an exception: its open reservation released (a request out may have been billed),
        settled for the malformed replies billed, or cancelled (nothing out), and the waiters woken."""
        if call.reservation is not None and self.ledger is not None:
            if call.in_flight:  # cancelled mid-request: it may have been billed
                self.ledger.release(call.reservation, "interrupted", call.attempts)
            elif call.billed:  # malformed replies that were billed, then stopped
                self.ledger.settle(call.reservation, call.billed, call.billed_dollars, call.attempts, self.budget)
            else:  # cancelled between attempts: nothing is out
                self.ledger.cancel(call.reservation)
            call.reservation = None
            self._pulse_settled()

    async def _close_failed(self, spec: ModelSpec, call: _Sending) -> None:
        """Every attempt failed: the reservation settled for the malformed replies billed (paid, not cached) or
        released, off the event loop; an overrun that settle wrote stops the gateway."""
        if call.reservation is not None and self.ledger is not None:
            overran = None
            if call.billed:  # no usable reply, but malformed ones were billed: paid, and not cached
                overran = await asyncio.to_thread(self.ledger.settle, call.reservation, call.billed,
                                                  call.billed_dollars, call.attempts, self.budget)
            else:
                await asyncio.to_thread(self.ledger.release, call.reservation, "failed", call.attempts)
            self._pulse_settled()
            if overran is not None:
                await self._stop_for_overrun(spec, f"{call.billed.get('output_tokens', 0)} output tokens billed for "
                                                   "malformed replies", overran)


    # -- a reply over its reservation under a dollar cap -----------------------------------------------------

    def _count_unsettled(self, change: int) -> None:
        with self._unsettled_lock:
            self._unsettled += change

    async def _check_overrun(self) -> None:
        """Raise the overrun that stops this gateway, or one another process wrote to the ledger."""
        if self.overrun is not None:
            raise self.overrun
        assert self.ledger is not None
        reason = await asyncio.to_thread(self.ledger.stopped_by_overrun, self.budget)
        if reason is not None:
            if self.overrun is None:
                self.overrun = ReservationExceeded(reason)
            raise self.overrun

    def _mark_if_over(self, spec: ModelSpec, request: _Request[Any], reservation: Reservation, response: Any,
                      billed_dollars: float) -> None:
        """Right after a reply, before its place is given up: when it cost more than reserved, mark this gateway
        stopped, so no request waiting for the place goes out (the ledger learns of it at the settle)."""
        if self.overrun is not None:
            return
        try:
            cost = _price(spec, response, _usage_numbers(getattr(response, "usage", None)))
        except Exception:  # noqa: BLE001 - an unreadable reply is the caller's to report; priced again there
            return
        if cost is not None and cost + billed_dollars > reservation.dollars + OVERRUN_TOLERANCE:
            with self._unsettled_lock:
                self._out_at_overrun = max(0, self._unsettled - 1)  # the others out as the reply came in
            self.overrun = ReservationExceeded(
                f"budget: a reply of {spec.model} cost ${cost + billed_dollars:.4f}, more than the "
                f"${reservation.dollars:.4f} reserved for it; nothing more is sent."
            )

    async def _stop_for_overrun(self, spec: ModelSpec, detail: str, overrun: Overrun) -> None:
        """A reply cost more than its reservation under a dollar cap and is settled (kept): wait for this
        gateway's other requests already out to finish and be settled, then raise `ReservationExceeded` saying by
        how much the reply exceeded its reservation and where the caps stand (the same exception for every call
        this gateway stops)."""
        stop = self.overrun
        if stop is None:
            stop = self.overrun = ReservationExceeded("budget: a reply overran its reservation; nothing more is sent.")
        if not self._overrun_reported:  # the first call to get here reports for every call this gateway stops
            self._overrun_reported = True
            with self._unsettled_lock:
                out = self._unsettled if self._out_at_overrun is None else self._out_at_overrun
            while True:
                with self._unsettled_lock:
                    if self._unsettled <= 0:
                        break
                try:
                    await asyncio.wait_for(self._settle_event().wait(), timeout=0.05)
                except asyncio.TimeoutError:
                    pass
            assert self.ledger is not None
            standing = await asyncio.to_thread(self.ledger.cap_standing, self.budget)
            others = f"the {out} other requests already out finished and are kept" if out != 1 else \
                "the 1 other request already out finished and is kept"
            stop.args = (
                f"budget: a reply of {spec.model} cost ${overrun.dollars:.4f}, ${overrun.excess:.4f} more than the "
                f"${overrun.reserved_dollars:.4f} reserved for it ({detail}), so nothing more was sent in this "
                f"study; {others}, and {standing}.",
            )
        raise stop

    async def _send(self, litellm: Any, spec: ModelSpec, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> Any:
        """One request. An offline stand-in runs with no time limit (its answer must not depend on machine load)."""
        try:
            if spec.is_offline:
                return await litellm.acompletion(model=spec.model, messages=messages, num_retries=0, **kwargs)
            return await asyncio.wait_for(
                litellm.acompletion(model=spec.model, messages=messages, timeout=spec.timeout_s, num_retries=0,
                                    **kwargs),
                timeout=spec.timeout_s + 5,
            )
        finally:
            hold_logging_worker()

    def _refused(self, spec: ModelSpec) -> tuple[str, float]:
        """A refused connection: retryable until the endpoint has refused, with no success between, for
        `spec.unreachable_after_s`; then systemic. Returns (kind, seconds refused so far)."""
        now = time.monotonic()
        refused = now - self._refused_since.setdefault(spec.model, now)
        return ("systemic" if refused >= spec.unreachable_after_s else "retryable"), refused


def _reply_text(response: Any) -> tuple[str, Any]:
    """(text, message) of a chat completion; `MalformedReply` when it has no choice or no content."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedReply("the reply has no choices", response)
    message = getattr(choices[0], "message", None)
    if message is None:
        raise MalformedReply("the reply's first choice has no message", response)
    text = getattr(message, "content", None)
    if text is None:
        if getattr(message, "refusal", None):
            return "", message
        if getattr(message, "tool_calls", None) or getattr(message, "function_call", None):
            raise MalformedReply("the reply holds a tool call instead of text", response)
        raise MalformedReply("the reply's content is null", response)
    if not isinstance(text, str):
        raise MalformedReply(f"the reply's content is a {type(text).__name__}, not text", response)
    return text, message


INLINE_BOUND_CHARS = 4_000  # a prompt this short is counted on the event loop (well under a millisecond)


def _message_chars(messages: list[dict[str, Any]]) -> int:
    return sum(len(content) if isinstance(content := message.get("content"), str) else len(str(content))
               for message in messages)


def _redact(message: str, secret: str | None) -> str:
    """A provider's error without the key it was sent nor anything else `lme.util.secrets.clean` removes (it is journaled,
    traced and printed)."""
    from lme.util.secrets import clean

    return clean(message, [secret])


def preflight(specs: list[ModelSpec] | tuple[ModelSpec, ...]) -> None:
    """Before the first question: every paid model's credentials are in the environment, a key named by
    `api_key_env` is one an HTTP header can carry (`lme.models.keys.check_key`), and litellm knows its provider.
    No request is sent. Raises `LmeError` naming the model and the variable (never the key)."""
    seen: set[tuple[str, str | None, str | None]] = set()
    for spec in specs:
        if spec.is_offline or (spec.model, spec.api_base, spec.api_key_env) in seen:
            continue
        seen.add((spec.model, spec.api_base, spec.api_key_env))
        if spec.api_key_env:
            if not os.environ.get(spec.api_key_env, "").strip():
                raise LmeError(
                    f"model {spec.model}: the environment variable {spec.api_key_env} (its api_key_env) is not set; "
                    "export it before the run."
                )
            check_key(spec.api_key_env, os.environ[spec.api_key_env], f"model {spec.model}")  # whitespace, non-ASCII
            continue
        litellm = import_litellm()
        try:
            litellm.get_llm_provider(spec.model, api_base=spec.api_base)
            found = litellm.validate_environment(model=spec.model, api_base=spec.api_base)
        except Exception:  # noqa: BLE001 - litellm raises many kinds for a model it cannot route
            raise LmeError(
                f"model {spec.model}: litellm does not know which provider serves it; name it as provider/model "
                "(e.g. openai/gpt-4o-mini), see https://docs.litellm.ai/docs/providers."
            ) from None
        missing = [str(name) for name in found.get("missing_keys") or []]
        if not found.get("keys_in_environment") and missing:
            names = " and ".join(missing)
            raise LmeError(
                f"model {spec.model}: {names} {'is' if len(missing) == 1 else 'are'} not set; export "
                f"{'it' if len(missing) == 1 else 'them'} (or name another variable in the model's api_key_env)."
            )


__all__ = [
    "CallResult", "EmbeddingResult", "Gateway", "MalformedReply", "ModelSpec", "ReservationExceeded", "SystemicFailure", "classify_error",
    "preflight", "provider_message",
]
