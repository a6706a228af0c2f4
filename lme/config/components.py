"""Config nodes -> components, with construction errors reported as one sentence (`lme.config.design.Component.build`)."""

from __future__ import annotations

from typing import Any

from lme.util.errors import LmeError


def build(node: Any, what: str, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate(node, **kwargs)`; an `LmeError` raised by a constructor is passed on
    as itself, any other failure becomes one sentence naming the config group `what`."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        while cause is not None and not isinstance(cause, LmeError):
            cause = cause.__cause__
        if isinstance(cause, LmeError):
            raise cause from None
        raise LmeError(f"{what} config: {_reason(node, exc)}") from None


def _reason(node: Any, exc: Exception) -> str:
    """Why a component could not be built, in one line ending with a period: the constructor's own
    error (Hydra's message puts it on the line after "Error in call to target ..."), with the target."""
    target = node.get("_target_") if hasattr(node, "get") else None
    cause = exc.__cause__
    if cause is not None:
        detail = " ".join(str(cause).split()) or type(cause).__name__
        if isinstance(cause, TypeError) or not str(cause).strip():
            detail = f"{type(cause).__name__}: {detail}"
    else:  # Hydra's own complaint (no _target_, a target that cannot be imported): all of it, on one line
        lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.strip().startswith("full_key:")]
        detail = " ".join(lines) or type(exc).__name__
    where = f"cannot build {target}: " if target and str(target) not in detail else ""
    return f"{where}{detail.rstrip('.?! ')}."
