"""litellm, imported on first use (it takes seconds to import) and told to keep its per-call chatter to itself.

The one place that imports litellm for the gateway, the pricing, the embedding API path and the multirun
parent's early import.
"""

from __future__ import annotations

from typing import Any

_quietened = False


def import_litellm() -> Any:
    """litellm, imported on first use and told to keep its per-call chatter to itself."""
    global _quietened
    from lme.interrupts import interrupts_held

    with interrupts_held():  # a Ctrl-C during the import is raised after it (lme.interrupts)
        import litellm

    if not _quietened:
        import logging

        litellm.suppress_debug_info = True
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
            logging.getLogger(name).setLevel(logging.WARNING)
        _quietened = True
    return litellm
