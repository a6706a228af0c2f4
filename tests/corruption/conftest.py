"""The corruption harness's warm worker and workspace (one of each per test process), and its summary line."""

from __future__ import annotations

import pytest

from corruption.harness import OUTCOME_KEY, Worker, build_mem0_workspace, build_workspace, summary_line


@pytest.fixture(scope="session")
def harness_worker():
    worker = Worker()
    yield worker
    worker.close()


@pytest.fixture(scope="session")
def harness_embedding_server():
    """The embedding API of the workspace's semantic retriever (loopback), up while the cases run."""
    from loopback import LoopbackServer

    with LoopbackServer(reply="ok") as server:
        yield server


@pytest.fixture(scope="session")
def harness_workspace(harness_worker, harness_embedding_server, tmp_path_factory):
    return build_workspace(harness_worker, tmp_path_factory.mktemp("corruption") / "workspace",
                           harness_embedding_server.base_url)


@pytest.fixture(scope="session")
def harness_mem0_workspace(harness_worker, harness_workspace, tmp_path_factory):
    """The workspace of the Mem0 cases (memory=mem0 ingested two histories), built at the first such case."""
    return build_mem0_workspace(harness_worker, harness_workspace,
                                tmp_path_factory.mktemp("corruption-mem0") / "workspace")


def harness_outcomes(terminalreporter) -> list[str]:
    """The outcome each harness case recorded (xdist's workers send their reports' user_properties here)."""
    outcomes = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            outcomes += [value for key, value in getattr(report, "user_properties", ()) if key == OUTCOME_KEY]
    return outcomes


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if getattr(config, "_lme_corruption_summary_written", False):
        return
    line = summary_line(harness_outcomes(terminalreporter))
    if line:
        config._lme_corruption_summary_written = True
        terminalreporter.write_line(line)
