"""Shared test setup: no test may reach the network or read a real key.

litellm fetches its model price map from the internet on import unless told to
use the copy it ships with, so that is set before any test module imports it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


def _folder_of_this_process(env: str, prefix: str) -> None:
    """`env` names a temporary folder of this test process (removed at its exit), unless the caller set it."""
    if not os.environ.get(env):
        os.environ[env] = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, os.environ[env], True)


# MiniLM's default backend is an ONNX export (conf/embedding/minilm.yaml): one export per test process, shared by
# every test's cache (lme.retrieval.onnx_runtime.exports_root), instead of one per test's cache folder
_folder_of_this_process("LME_ONNX_DIR", "lme-test-onnx-")
# New MLflow SQLite stores start from an empty one (lme.store_template): the template of this test process, not
# the user's cache
_folder_of_this_process("LME_MLFLOW_TEMPLATES", "lme-test-mlflow-templates-")

import pytest  # noqa: E402

from loopback import LoopbackServer  # noqa: E402

TEST_KEY_ENV = "LME_TEST_KEY"
TEST_KEY = "sk-lme-test-0123456789abcdefSECRET"


@pytest.fixture
def test_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fake API key in `LME_TEST_KEY`; the value is distinctive so leaks are easy to spot."""
    monkeypatch.setenv(TEST_KEY_ENV, TEST_KEY)
    return TEST_KEY


@pytest.fixture
def loopback():
    """A running loopback chat-completions server answering "ok"; stopped after the test."""
    with LoopbackServer(reply="ok") as server:
        yield server


@pytest.fixture(scope="session")
def warm_litellm() -> None:
    """Import litellm and make one loopback call, so its seconds of start-up are paid once, in setup. The call
    meets one 429 first, so litellm's error path (its exception mapping loads lazily, about half a second) is
    warm too and timing tests of retries measure the retry, not that load."""
    import asyncio

    from lme.models.gateway import Gateway, ModelSpec

    with pytest.MonkeyPatch.context() as patch, LoopbackServer(reply="warm", faults=[("429",)]) as server:
        patch.setenv(TEST_KEY_ENV, TEST_KEY)
        spec = ModelSpec(
            model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env=TEST_KEY_ENV, max_attempts=2, timeout_s=10
        )
        result = asyncio.run(Gateway().complete(spec, [{"role": "user", "content": "warm up"}], seed=None))
        assert result.ok, result.error
