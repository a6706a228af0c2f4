"""What a call can cost before it is sent: input tokens counted, output tokens bounded, list prices.

A call's maximum cost is its input tokens (litellm's `token_counter`, plus a
small margin for the provider's own framing) plus its maximum output tokens
(`max_completion_tokens` / `max_tokens` in the call's params, else the model's
limit in litellm's cost map) at the model's prices (`ModelSpec`'s
`input_cost_per_token` / `output_cost_per_token` when set, else litellm's cost
map). Offline models cost nothing. The ledger reserves this amount before a
call is sent; `lme estimate` prints it before a study is run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lme.errors import LmeError

if TYPE_CHECKING:
    from lme.models.gateway import ModelSpec

OUTPUT_LIMIT_PARAMS: tuple[str, ...] = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# The provider counts a prompt with its own framing; reserve a little more than litellm counts.
INPUT_MARGIN_RATIO = 0.02
INPUT_MARGIN_TOKENS = 32


@dataclass(frozen=True)
class Prices:
    input_per_token: float
    output_per_token: float

    def dollars(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens * self.input_per_token + output_tokens * self.output_per_token


FREE = Prices(0.0, 0.0)


def _litellm():
    from lme.models.gateway import _import_litellm

    return _import_litellm()


def _model_info(model: str) -> dict[str, Any] | None:
    litellm = _litellm()
    try:
        return dict(litellm.get_model_info(model))
    except Exception:  # litellm raises several kinds for a model it does not know
        return None


def model_prices(spec: ModelSpec) -> Prices | None:
    """The model's list prices, or None when neither the spec nor litellm's cost map has them."""
    if spec.is_offline:
        return FREE
    if spec.input_cost_per_token is not None and spec.output_cost_per_token is not None:
        return Prices(float(spec.input_cost_per_token), float(spec.output_cost_per_token))
    info = _model_info(spec.model) or {}
    given_in = spec.input_cost_per_token if spec.input_cost_per_token is not None else info.get("input_cost_per_token")
    given_out = (
        spec.output_cost_per_token if spec.output_cost_per_token is not None else info.get("output_cost_per_token")
    )
    if given_in is None or given_out is None:
        return None
    return Prices(float(given_in), float(given_out))


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


def count_input_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Input tokens as litellm counts them for `model` (its default tokenizer when it does not know the model)."""
    litellm = _litellm()
    try:
        return int(litellm.token_counter(model=model, messages=messages))
    except Exception:  # an unknown model: count with litellm's default tokenizer
        return int(litellm.token_counter(messages=messages))


def reserved_input_tokens(counted: int) -> int:
    """`counted` plus the safety margin the ledger reserves for the provider's framing."""
    return math.ceil(counted * (1 + INPUT_MARGIN_RATIO)) + INPUT_MARGIN_TOKENS


@dataclass(frozen=True)
class CallBound:
    """The most a call can use and cost: `dollars` is None when the model has no known price."""

    input_tokens: int
    output_tokens: int
    dollars: float | None


def max_call_cost(spec: ModelSpec, messages: list[dict[str, Any]]) -> CallBound:
    """Input tokens (with margin) + maximum output tokens, priced; offline models cost 0."""
    if spec.is_offline:
        return CallBound(0, 0, 0.0)
    input_tokens = reserved_input_tokens(count_input_tokens(spec.model, messages))
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
