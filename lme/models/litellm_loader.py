"""litellm, imported on first use (it takes seconds to import) and told to keep its per-call chatter to itself.

The one place that imports litellm for the gateway, the pricing, the embedding API path and the multirun
parent's early import.
"""

from __future__ import annotations

from typing import Any

_litellm: Any = None  # the module, once imported and quietened: every later call returns it at once


def import_litellm() -> Any:
    """litellm, imported on first use and told to keep its per-call chatter to itself.

    The import makes about half a million objects (its provider types, the OpenAI SDK's) that live until
    exit, none of them garbage: the cyclic collector, left running, walked them ~940 times over, 0.45 s
    of the import's 2.2 s, holding the GIL. It is paused for the import, and what the import made is frozen
    (`lme.util.heap`), so that no later collection walks it either (the young collection a freeze would start
    with would walk it all: 0.17 s to find 2,000 objects of garbage). Measured again (`python
    scripts/bench_tricks.py litellm_freeze`, 2026-12-07, 3 pairs): the import 2.87 s of CPU instead of 3.45 s,
    a full collection afterwards 0.08 ms instead of 167 ms.

    Called for every model request: once imported, the module is returned with nothing else done (no
    signal handler swapped, no import statement run)."""
    global _litellm
    if _litellm is not None:
        return _litellm
    import logging
    import sys

    from lme.util.heap import collection_paused, freeze_long_lived
    from lme.util.interrupts import interrupts_held

    with interrupts_held():  # a Ctrl-C during the import is raised after it (lme.util.interrupts)
        if "litellm" in sys.modules:  # imported by someone else: nothing of ours to freeze
            import litellm
        else:
            with collection_paused():
                import litellm

                freeze_long_lived("litellm", collect_young=False)

    litellm.suppress_debug_info = True
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)
    _litellm = litellm
    return litellm


_warmed = False


def warm_call_path() -> bool:
    """One mock completion (litellm's `mock_response`: no request leaves this process, nothing is counted,
    cached or paid): litellm builds on its first completion the classes and tables every later one reuses
    (about 0.13 s of CPU), and a study calls this while its data file loads, so that the first question's
    request does not wait for them (its first completion: 7 ms of CPU instead of 167 ms, `python
    scripts/bench_tricks.py warm_call`, 2026-12-07). Once per process; True when the mock call answered. A failure is
    ignored: the first real call does the same work and says what is wrong."""
    global _warmed
    if _warmed:
        return False
    _warmed = True
    litellm = import_litellm()
    try:
        response = litellm.completion(model="openai/gpt-4o-mini", messages=[{"role": "user", "content": "warm"}],
                                      mock_response="warm", api_key="lme-warm-up-not-a-key", num_retries=0)
    except Exception:  # noqa: BLE001 - a warm-up is never a reason to stop
        return False
    return response.choices[0].message.content == "warm"
