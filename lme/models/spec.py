"""`ModelSpec`: a model and how to call it (the gateway's input; built from config by `_target_`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lme.util.errors import LmeError
from lme.models.offline import OFFLINE_MODELS, OFFLINE_PROVIDER


@dataclass(frozen=True)
class ModelSpec:
    """A model and how to call it. Holds the *name* of the key's variable, never a key."""

    model: str
    params: dict[str, Any] = field(default_factory=dict)
    api_base: str | None = None
    api_key_env: str | None = None
    concurrency: int = 8
    timeout_s: float = 120.0
    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0  # a provider's Retry-After is honoured up to this
    input_cost_per_token: float | None = None  # overrides litellm's cost map when set
    output_cost_per_token: float | None = None
    cache_read_input_cost_per_token: float | None = None  # with the two above: cached input's price (else input's)
    requests_per_minute: float | None = None  # optional client-side limits per model (None: none)
    tokens_per_minute: float | None = None  # input tokens (counted) + maximum output tokens per request
    unreachable_after_s: float = 60.0  # connections refused this long, with no success between: the study stops

    def __post_init__(self) -> None:
        if self.is_offline and self.model not in OFFLINE_MODELS:
            raise LmeError(f"model {self.model!r} is not an offline model (known: {', '.join(OFFLINE_MODELS)}).")
        for name in ("concurrency", "max_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LmeError(f"model {self.model}: {name} must be an integer >= 1, got {value!r}.")
        for name in ("timeout_s", "unreachable_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise LmeError(f"model {self.model}: {name} must be a number of seconds > 0, got {value!r}.")
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise LmeError(f"model {self.model}: {name} must be > 0 or null, got {value}.")

    @property
    def is_offline(self) -> bool:
        return self.model.startswith(OFFLINE_PROVIDER + "/")
