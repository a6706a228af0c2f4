"""Shared test setup: no test may reach the network or read a real key.

litellm fetches its model price map from the internet on import unless told to
use the copy it ships with, so that is set before any test module imports it.

Tests that read the real LongMemEval files find them through `shared_data` (LME_TEST_DATA) and skip without
them; the end of the run counts those skips in one line, and names anything the run left in the checkout.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# The hub's offline switches are the user's shell's, not the tests': a test that needs one sets it itself. Left
# on, HF_HUB_OFFLINE=1 (which the README suggests for offline work) made the fetch tests' loopback hub unreachable
# (15 failures); huggingface_hub reads it once, on import, so it goes before any test module imports it.
for _switch in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.pop(_switch, None)


def _folder_of_this_process(env: str, prefix: str) -> None:
    """`env` names a temporary folder of this test process (removed at its exit), unless the caller set it."""
    if not os.environ.get(env):
        os.environ[env] = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, os.environ[env], True)


# MiniLM's default backend is an ONNX export (conf/embedding/minilm.yaml): one export per test process, shared by
# every test's cache (lme.retrieval.onnx_runtime.exports_root), instead of one per test's cache folder
_folder_of_this_process("LME_ONNX_DIR", "lme-test-onnx-")
# New MLflow SQLite stores start from an empty one (lme.tracking.store_template): the template of this test process, not
# the user's cache
_folder_of_this_process("LME_MLFLOW_TEMPLATES", "lme-test-mlflow-templates-")
# Hypothesis keeps its examples and a cache of the constants it scans lme's modules for (8 s when cold) in
# `.hypothesis/` of the current folder, the checkout: outside it instead, kept between runs, unless the caller set it
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), f"lme-test-hypothesis-{os.getuid()}"))

import subprocess  # noqa: E402

import pytest  # noqa: E402

import shared_data  # noqa: E402
from loopback import LoopbackServer  # noqa: E402


def pytest_report_header(config: pytest.Config) -> str:
    found = "" if shared_data.ROOT.is_dir() else " (not there: the tests that need it skip)"
    return f"lme: real test data from {shared_data.ROOT}{found}"


_CHECKOUT_BEFORE = pytest.StashKey["set[str] | None"]()


def _checkout_files() -> set[str] | None:
    """`git status --porcelain --ignored` of the checkout, less Python's and pytest's own caches (None when the
    checkout is not a git one)."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=shared_data.CHECKOUT,
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return {line for line in done.stdout.splitlines() if "__pycache__" not in line and ".pytest_cache" not in line}


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the run's one process, or xdist's controller
        session.config.stash[_CHECKOUT_BEFORE] = _checkout_files()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """One line counting the tests skipped for want of the real data (xdist's workers report their skips to the
    controller, whose stats these are), and one naming anything new in the checkout."""
    skipped = sum(shared_data.is_data_skip(report) for report in terminalreporter.stats.get("skipped", []))
    if skipped:
        terminalreporter.write_line(shared_data.summary(skipped))
    before = config.stash.get(_CHECKOUT_BEFORE, None)
    after = _checkout_files() if before is not None else None
    if before is not None and after is not None and (new := sorted(after - before)):
        terminalreporter.write_line(
            f"lme: new in the checkout since the tests started (tests write only under tmp_path): {'; '.join(new)}",
            yellow=True)
    from corruption.conftest import pytest_terminal_summary as corruption_summary  # the harness's count line

    corruption_summary(terminalreporter, exitstatus, config)


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
