"""lme.models.litellm_loader: litellm imported once, quietly, and its first-call set-up done ahead of a study."""

from __future__ import annotations

import socket

import pytest

from lme.models import litellm_loader


@pytest.fixture
def unwarmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm_loader, "_warmed", False)


def test_the_warm_up_answers_without_a_connection_and_runs_once(unwarmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm's mock completion: nothing leaves the process (every connection refused here), and a
    second call in the same process does nothing."""
    attempts: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    assert litellm_loader.warm_call_path() is True
    assert attempts == []
    assert litellm_loader.warm_call_path() is False


def test_a_failing_warm_up_never_stops_the_study(unwarmed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    litellm = litellm_loader.import_litellm()

    def broken(**kwargs: object) -> None:
        raise RuntimeError("a litellm whose mock path broke")

    monkeypatch.setattr(litellm, "completion", broken)
    assert litellm_loader.warm_call_path() is False


_COUNT_IMPORT = """
import gc, json, sys
from lme.models import litellm_loader
{before}
started = []
gc.callbacks.append(lambda phase, info: phase == "start" and started.append(info["generation"]))
litellm_loader.import_litellm()
litellm_loader.import_litellm()  # a second call: litellm is imported, nothing more is frozen
print(json.dumps({{"collections": len(started), "frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}}))
"""


def _import_in_fresh_process(before: str = "") -> dict:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", _COUNT_IMPORT.format(before=before)], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh interpreters importing litellm (~2 s each)
def test_litellm_imports_with_the_collector_paused_and_what_it_made_frozen() -> None:
    """No collection walks litellm's half a million objects while it imports (left running, the collector
    ran ~940 times during the import), none afterwards (they are frozen), and the collector runs again once
    it is done. A litellm some other code imported first is left as it is: nothing is frozen for it."""
    fresh = _import_in_fresh_process()
    assert fresh["collections"] < 50
    assert fresh["frozen"] > 100_000
    assert fresh["enabled"] is True
    imported_before = _import_in_fresh_process("import litellm")
    assert imported_before["frozen"] == 0 and imported_before["enabled"] is True
