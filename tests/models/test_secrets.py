"""API keys never reach anything a run writes: a scan of every file of a real run for a fake key.

The run is a real `python -m lme` against the loopback server, with MLflow
tracking into the temp dir, the key in the environment only, and a provider
error that echoes the key back (as some providers do for a bad key).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer

from lme.util.errors import LmeError
from lme.study.resume import resume_command
from lme.tracking.runs import looks_like_a_key, params_from_config

ROOT = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-lme-scan-0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def test_key_like_config_values_are_refused_in_params():
    with pytest.raises(LmeError, match="config value reader.model.params.user looks like an API key"):
        params_from_config({"reader": {"model": {"params": {"user": "sk-proj-abcdef0123456789"}}}})
    with pytest.raises(LmeError, match="notes looks like an API key"):
        params_from_config({"notes": ["fine", "Bearer abc.def"]})
    assert params_from_config({"reader": {"api_key": "sk-dropped-by-name", "model": "openai/gpt-5-mini"}}) == {
        "reader.model": "openai/gpt-5-mini"
    }
    for value in ("openai/gpt-4o", "task: search result | query: ", "skills", "ask-me", 12, None):
        assert not looks_like_a_key(value)


def test_the_resume_command_leaves_key_like_overrides_out():
    command = resume_command(["seed=2", "+reader.model.params.user=sk-abc123", "hydra.run.dir=old"], "outputs/x y")
    assert command == "python -m lme seed=2 'hydra.run.dir=outputs/x y'"


def _run(tmp: Path, *overrides: str, server: LoopbackServer) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env["LME_FAKE_KEY"] = FAKE_KEY
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    args = [
        sys.executable, "-m", "lme", "limit=6",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/mlruns",
        f"cache_dir={tmp}/cache", f"hydra.run.dir={tmp}/outputs/run",
        "reader.model.model=openai/gpt-4o-mini", f"++reader.model.api_base={server.base_url}",
        "++reader.model.api_key_env=LME_FAKE_KEY", "reader.model.max_attempts=2", "++reader.model.backoff_base_s=0.01",
        "++reader.model.input_cost_per_token=1e-6", "++reader.model.output_cost_per_token=2e-6",
        "verbose=true", *overrides,
    ]
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


def _files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.mark.slow
def test_a_key_in_the_config_stops_the_run_before_mlflow_sees_it(tmp_path):
    with LoopbackServer(reply="offline") as server:
        result = _run(tmp_path, f"+notes={FAKE_KEY}", server=server)
        assert server.requests == []
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == (
        "lme: error: config value notes looks like an API key; keys are never logged: put the key in an "
        "environment variable and name that variable in the model's api_key_env."
    )
    for path in _files(tmp_path):
        if path.suffix != ".yaml":  # Hydra's own copy of the overrides (.hydra/*.yaml) is written before lme runs
            assert FAKE_KEY.encode() not in path.read_bytes(), path
    if (tmp_path / "mlflow.db").exists():
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
        experiment = client.get_experiment_by_name("lme")
        assert experiment is None or client.search_runs([experiment.experiment_id]) == []
