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
