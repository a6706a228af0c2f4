"""Offline by itself: a hub model that is not in the local Hugging Face cache is one sentence at once (gated, unknown,
or no hub), with no retries; one that is cached, or a local model, loads without any request to the hub.

Each case runs in its own process (huggingface_hub reads HF_HOME, HF_ENDPOINT and HF_HUB_OFFLINE on import) with
an empty HF cache in tmp_path and HF_HUB_OFFLINE unset unless the case sets it. The hub is a loopback server that
answers as the hub does for a gated model (401, `X-Error-Code: GatedRepo`), records every request, or a port
where nothing listens; one case uses the real endpoint, which this test machine cannot reach (elsewhere the hub
answers that the model is gated): the sentence must come at once either way.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

GEMMA = "google/embeddinggemma-300m"
HOW = ("embedding=minilm (no hub access)", "embedding.model=PATH")

# The child: load the model through lme's one loading point, time it, report the sentence (or success).
CHILD = """
import json, sys, time
from lme.util.errors import LmeError
from lme.retrieval.dense import load_sentence_transformer, resolve_model
started = time.perf_counter()
try:
    model, _ = load_sentence_transformer(resolve_model(sys.argv[1]), "cpu", None)
    outcome = {"loaded": True, "dims": int(model.encode(["hello"]).shape[1])}
except LmeError as exc:
    outcome = {"loaded": False, "error": str(exc)}
from huggingface_hub import constants
outcome |= {"seconds": time.perf_counter() - started, "st_imported": "sentence_transformers" in sys.modules,
            "hub_offline_after": bool(constants.HF_HUB_OFFLINE)}
print(json.dumps(outcome))
"""


class _Hub:
    """A loopback hub: every model is gated for this (anonymous) machine; every request recorded."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _gated(self) -> None:
                hub.requests.append((self.command, self.path))
                self.send_response(401)
                self.send_header("X-Error-Code", "GatedRepo")
                self.send_header("X-Error-Message", "Access to model is restricted. You must have access to it "
                                                    "and be authenticated to access it. Please log in.")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET = _gated

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@contextmanager
def _hub() -> Iterator[_Hub]:
    hub = _Hub()
    try:
        yield hub
    finally:
        hub.server.shutdown()
        hub.server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def _load(model: str, tmp_path: Path, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HF_", "HUGGINGFACE_")) and k not in ("TRANSFORMERS_OFFLINE",)}
    done = subprocess.run([sys.executable, "-c", CHILD, model], capture_output=True, text=True, timeout=300,
                          env=base | {"HF_HOME": str(tmp_path / "hf")} | env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_sentence(text: str) -> None:
    assert "\n" not in text and text.endswith(".") and "Traceback" not in text


def test_a_gated_model_not_in_the_cache_is_said_at_once_after_one_request(tmp_path):
    with _hub() as hub:
        outcome = _load(GEMMA, tmp_path, HF_ENDPOINT=hub.url)
    assert not outcome["loaded"]
    error = outcome["error"]
    assert error.startswith(f"embedding model '{GEMMA}' is not in the local Hugging Face cache ({tmp_path}/hf/hub), "
                            f"and the hub gates it (this machine is not logged in)")
    assert f"accept its licence at {hub.url}/{GEMMA}" in error and "`hf auth login`" in error
    assert all(how in error for how in HOW)
    _one_sentence(error)
    assert outcome["seconds"] < 2 and not outcome["st_imported"]  # no retries; sentence-transformers not even loaded
    assert hub.requests == [("HEAD", f"/{GEMMA}/resolve/main/config.json")]


def test_no_hub_to_reach_is_said_at_once(tmp_path):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    outcome = _load(GEMMA, tmp_path, HF_ENDPOINT=endpoint)
    assert outcome["error"].startswith(f"embedding model '{GEMMA}' is not in the local Hugging Face cache "
                                       f"({tmp_path}/hf/hub), and the hub ({endpoint}) cannot be reached (")
    assert all(how in outcome["error"] for how in HOW)
    _one_sentence(outcome["error"])
    assert outcome["seconds"] < 2


def test_the_real_hub_unreachable_or_gated_is_said_at_once(tmp_path):
    """No HF_ENDPOINT, no HF_HUB_OFFLINE: on this machine (no internet) the sentence that the hub cannot be reached,
    with internet the one that it gates the model; about 90 s of retries before either, before."""
    started = time.perf_counter()
    outcome = _load(GEMMA, tmp_path)
    assert not outcome["loaded"]
    assert ("cannot be reached" in outcome["error"]) or ("the hub gates it" in outcome["error"])
    assert all(how in outcome["error"] for how in HOW)
    assert outcome["seconds"] < 15  # the hub's metadata timeout (10 s) at worst, once
    assert time.perf_counter() - started < 60


def test_with_the_hub_switched_off_nothing_is_asked_of_it(tmp_path):
    with _hub() as hub:
        outcome = _load("someone/some-model", tmp_path, HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="1")
    assert outcome["error"] == (
        f"embedding model 'someone/some-model' is not in the local Hugging Face cache ({tmp_path}/hf/hub) and the "
        f"hub is off (HF_HUB_OFFLINE); download it once where the hub can be reached (`hf download "
        f"someone/some-model`); or pass a local copy as embedding.model=PATH; or use embedding=minilm (no hub access).")
    assert hub.requests == [] and outcome["seconds"] < 2


def _cache_a_copy_of_minilm(hf_home: Path, repo_id: str) -> None:
    """The packaged MiniLM laid out as the HF cache holds a downloaded model (refs/main -> a snapshot)."""
    from lme.retrieval.dense import packaged_model_path

    source = packaged_model_path("minilm-packaged")
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    for path in source.rglob("*"):
        if path.is_file():
            target = snapshot / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)


@pytest.mark.slow
def test_a_cached_hub_model_and_a_local_one_load_with_no_request_to_the_hub(tmp_path):
    _cache_a_copy_of_minilm(tmp_path / "hf", "someone/cached-minilm")
    with _hub() as hub:
        cached = _load("someone/cached-minilm", tmp_path, HF_ENDPOINT=hub.url)
        local = _load("minilm-packaged", tmp_path, HF_ENDPOINT=hub.url)
    assert cached["loaded"] and cached["dims"] == 384, cached
    assert local["loaded"] and local["dims"] == 384, local
    assert hub.requests == []  # the gated-for-everyone hub was never asked
    assert not cached["hub_offline_after"] and not local["hub_offline_after"]  # offline mode for the loads only
