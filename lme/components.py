"""Config nodes -> components, with construction errors reported as one sentence."""

from __future__ import annotations

from typing import Any

from lme.errors import LmeError


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
        text = str(exc).strip()
        first_line = text.splitlines()[0] if text else type(exc).__name__
        raise LmeError(f"{what} config: {first_line}") from None


def build_retriever(cfg: Any) -> Any:
    return build(cfg.retriever, "retriever")


def build_memory(cfg: Any, retriever: Any) -> Any:
    return build(cfg.memory, "memory", retriever=retriever)


def build_view(cfg: Any, retriever: Any) -> Any:
    return build(cfg.view, "view", retriever=retriever)
