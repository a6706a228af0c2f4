"""The loopback OpenAI-compatible server for tests: `scripts/loopback_server.py`, imported by path.

There is one implementation; this module only makes it importable as
`from loopback import LoopbackServer, Fault` from any test (the script is not
part of the `lme` package). See the script's docstring for replies and faults.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "loopback_server.py"

if "loopback_server" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("loopback_server", SCRIPT)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["loopback_server"] = _module  # dataclasses look their module up while the class is made
    _spec.loader.exec_module(_module)

from loopback_server import (  # noqa: E402
    DEFAULT_FAULT_MIX,
    NAMED_KINDS,
    REFUSAL_TEXT,
    Fault,
    LoopbackServer,
    RecordedRequest,
    count_words,
    echo_reply,
    embedding_vector,
    mixed_fault_rates,
    offline_reply,
    scripted_reply,
)

__all__ = [
    "DEFAULT_FAULT_MIX",
    "NAMED_KINDS",
    "REFUSAL_TEXT",
    "SCRIPT",
    "Fault",
    "LoopbackServer",
    "RecordedRequest",
    "count_words",
    "echo_reply",
    "embedding_vector",
    "mixed_fault_rates",
    "offline_reply",
    "scripted_reply",
]
