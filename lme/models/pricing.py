"""What a call can cost before it is sent: input tokens counted, output tokens bounded, list prices.

A call's maximum cost is its input tokens (litellm's `token_counter`, plus a
small margin for the provider's own framing) plus its maximum output tokens
(`max_completion_tokens` / `max_tokens` in the call's params, else the model's
limit in litellm's cost map) at the model's prices (`ModelSpec`'s
`input_cost_per_token` / `output_cost_per_token` when set, else litellm's cost
map). Offline models cost nothing. The ledger reserves this amount before a
call is sent; `lme estimate` prints it before a study is run.

After the call, input tokens the provider served from its prompt cache
(`usage.prompt_tokens_details.cached_tokens`) are priced at the model's
cache-read price when one is known (`cache_read_input_token_cost` in litellm's
cost map, or `cache_read_input_cost_per_token` on a model whose prices are set
in the config), else at the input price (`cached_input_basis` says which). The
maximum cost ignores caching: it is an upper bound.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lme.util.errors import LmeError
from lme.util.hashing import sha256_text

if TYPE_CHECKING:
    from lme.models.spec import ModelSpec

OUTPUT_LIMIT_PARAMS: tuple[str, ...] = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# The provider counts a prompt with its own framing; reserve a little more than litellm counts.
INPUT_MARGIN_RATIO = 0.02
INPUT_MARGIN_TOKENS = 32


CACHE_READ = "cache-read"  # cached input tokens priced at the model's cache-read price
INPUT = "input"  # no cache-read price known: cached input tokens priced as ordinary input


@dataclass(frozen=True)
class Prices:
    input_per_token: float
    output_per_token: float
    cache_read_per_token: float | None = None  # None: cached input tokens cost the input price

    @property
    def cached_input_basis(self) -> str:
        return INPUT if self.cache_read_per_token is None else CACHE_READ

    def dollars(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        """`input_tokens` includes the cached ones (as providers count them)."""
        cached = min(max(0, cached_input_tokens), input_tokens)
        cached_price = self.input_per_token if self.cache_read_per_token is None else self.cache_read_per_token
        uncached = input_tokens - cached
        return uncached * self.input_per_token + cached * cached_price + output_tokens * self.output_per_token


FREE = Prices(0.0, 0.0)


def _litellm():
    from lme.models.litellm_loader import import_litellm

    return import_litellm()


def _model_info(model: str) -> dict[str, Any] | None:
    litellm = _litellm()
    try:
        return dict(litellm.get_model_info(model))
    except Exception:  # litellm raises several kinds for a model it does not know
        return None


def _optional(value: Any) -> float | None:
    return None if value is None else float(value)


def model_prices(spec: ModelSpec) -> Prices | None:
    """The model's list prices, or None when neither the spec nor litellm's cost map has them.

    The cache-read price is the spec's `cache_read_input_cost_per_token` when set; else litellm's
    `cache_read_input_token_cost`, unless the spec sets its own input price (a cost-map cache-read
    price is not mixed with a configured input price); else None (cached input at the input price)."""
    if spec.is_offline:
        return FREE
    cache_read = _optional(spec.cache_read_input_cost_per_token)
    if spec.input_cost_per_token is not None and spec.output_cost_per_token is not None:
        return Prices(float(spec.input_cost_per_token), float(spec.output_cost_per_token), cache_read)
    info = _model_info(spec.model) or {}
    given_in = spec.input_cost_per_token if spec.input_cost_per_token is not None else info.get("input_cost_per_token")
    given_out = (
        spec.output_cost_per_token if spec.output_cost_per_token is not None else info.get("output_cost_per_token")
    )
    if given_in is None or given_out is None:
        return None
    if cache_read is None and spec.input_cost_per_token is None:
        cache_read = _optional(info.get("cache_read_input_token_cost"))
    return Prices(float(given_in), float(given_out), cache_read)


def cached_input_basis(spec: ModelSpec) -> str | None:
    """How the model's cached input tokens are priced: `CACHE_READ` or `INPUT`; None when unpriced."""
    prices = model_prices(spec)
    return None if prices is None else prices.cached_input_basis


def max_output_tokens(spec: ModelSpec) -> int | None:
    """The most output tokens the call may produce: its params' limit, else the model's, else None."""
    for name in OUTPUT_LIMIT_PARAMS:
        value = spec.params.get(name)
        if value is not None:
            return int(value)
    if spec.is_offline:
        return None
    info = _model_info(spec.model) or {}
    value = info.get("max_output_tokens") or info.get("max_tokens")
    return int(value) if value else None


_COUNTS: dict[str, int] = {}  # digest of (model, messages) -> tokens: the seeds of a study send the same prompts
_COUNTS_KEPT = 100_000
_COUNTS_LOCK = threading.Lock()


def count_input_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Input tokens as litellm counts them for `model` (its default tokenizer when it does not know the model).

    Counting a 100 KB prompt takes about 10 ms of CPU, so each count is remembered for this process
    (up to `_COUNTS_KEPT` prompts), keyed by a digest of the model and the messages."""
    canonical = json.dumps([model, messages], sort_keys=True, ensure_ascii=False, default=str)
    key = sha256_text(canonical)
    with _COUNTS_LOCK:
        known = _COUNTS.get(key)
    if known is not None:
        return known
    litellm = _litellm()
    try:
        counted = int(litellm.token_counter(model=model, messages=messages))
    except Exception:  # an unknown model: count with litellm's default tokenizer
        counted = int(litellm.token_counter(messages=messages))
    with _COUNTS_LOCK:
        if len(_COUNTS) >= _COUNTS_KEPT:
            _COUNTS.clear()
        _COUNTS[key] = counted
    return counted


def reserved_input_tokens(counted: int) -> int:
    """`counted` plus the safety margin the ledger reserves for the provider's framing."""
    return math.ceil(counted * (1 + INPUT_MARGIN_RATIO)) + INPUT_MARGIN_TOKENS


@dataclass(frozen=True)
class CallBound:
    """The most a call can use and cost: `dollars` is None when the model has no known price."""

    input_tokens: int
    output_tokens: int
    dollars: float | None


def input_is_counted(caps_dollars: bool, tokens_per_minute: float | None) -> bool:
    """Whether a call's input is tokenized before it is sent: only where the count is read, by a dollar cap of
    the job or a token rate limit (`tokens_per_minute`) of its model. Otherwise a reservation bounds the
    input by `byte_bound_tokens` and no tokenizer runs (nor needs loading)."""
    return caps_dollars or tokens_per_minute is not None


def byte_bound_tokens(messages: list[dict[str, Any]]) -> int:
    """An upper bound on the input tokens of `messages` with no tokenizer: the UTF-8 bytes of the messages'
    text, with JSON's framing (quotes, brackets, separators; escapes not counted) around every string, key
    and value. A token of a byte-level tokenizer (OpenAI's, and those with byte fallback) covers at least one
    byte of text, and the framing (`{"role":..., "content":...}`, 25 bytes and more a message) outweighs the
    few tokens a provider adds per message. About four times the real count for English.

    Walked, not serialised: a reader's prompt is 100 KB, and writing it out as JSON only to measure it took
    half a millisecond on the event loop for every call."""
    return _framed_bytes(messages)


def _framed_bytes(value: Any) -> int:
    if isinstance(value, str):
        return 2 + (len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass")))
    if isinstance(value, Mapping):
        return 2 + sum(_framed_bytes(str(key)) + 2 + _framed_bytes(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return 2 + sum(_framed_bytes(item) + 1 for item in value)
    if value is None or isinstance(value, (bool, int, float)):
        return len(json.dumps(value))
    return _framed_bytes(str(value))


def max_call_cost(spec: ModelSpec, messages: list[dict[str, Any]], exact: bool = True) -> CallBound:
    """Input tokens (with margin) + maximum output tokens, priced; offline models cost 0.

    `exact` False bounds the input by `byte_bound_tokens` instead of counting it (tokenizing a 100 KB
    prompt takes tens of milliseconds): for a reservation that no dollar cap or token rate limit reads,
    where a larger bound is as good as the count."""
    if spec.is_offline:
        return CallBound(0, 0, 0.0)
    counted = count_input_tokens(spec.model, messages) if exact else byte_bound_tokens(messages)
    input_tokens = reserved_input_tokens(counted)
    output_tokens = max_output_tokens(spec)
    prices = model_prices(spec)
    if output_tokens is None or prices is None:
        return CallBound(input_tokens, output_tokens or 0, None)
    return CallBound(input_tokens, output_tokens, prices.dollars(input_tokens, output_tokens))


def require_bound(spec: ModelSpec, bound: CallBound) -> float:
    """The bound's dollars, or one sentence saying what to configure so a dollar cap can hold."""
    if bound.dollars is not None:
        return bound.dollars
    if model_prices(spec) is None:
        raise LmeError(
            f"model {spec.model}: no price in litellm's cost map, so a dollar cap cannot be enforced; "
            "set input_cost_per_token and output_cost_per_token on the model, or remove the dollar caps."
        )
    raise LmeError(
        f"model {spec.model}: no maximum output length is known, so a dollar cap cannot be enforced; "
        "set max_tokens (or max_completion_tokens) in the model's params."
    )
