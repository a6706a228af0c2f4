"""Hydra launchers beyond one process: the same offline sweep (2 designs x 3 seeds) through the basic
launcher, a Ray cluster started here on loopback, and joblib workers logging to an MLflow tracking
server started here on loopback, must give the same MLflow structure and the same measures.

Each service runs in its own session (`start_new_session`) and is stopped by the ids of the processes
in that session, never by name. Needs the `ray` and `joblib` extras; skipped without them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

DESIGNS = ("bm25", "first_pass")
SEEDS = ("1", "2", "3")
# first_pass with the FTS5 retriever: a second design with different answers and no embedding model to load
SWEEP = ["+design=" + ",".join(DESIGNS), "retriever=fts5", "limit=16", "-m", "seed=" + ",".join(SEEDS)]
RAY_EXTRA = 'the ray extra is not installed (pip install -e ".[ray]")'
# per-job measures that must not depend on the launcher (call counts and costs do: jobs share a cache)
JOB_MEASURES = ("accuracy", "task_averaged_accuracy", "abstention_accuracy", "n_correct", "n_questions")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "RAY_", "MLFLOW_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["RAY_AUTH_MODE"] = "disabled"  # a loopback test cluster; else Ray's token state in ~/.ray decides
    return env | extra


def run_lme(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "lme", *args], cwd=cwd, env=env or _clean_env(), capture_output=True, text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """Every live process of session `sid` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.append(int(entry.name))
    return pids


def stop_session(sid: int, grace_s: float = 5.0) -> list[int]:
    """SIGTERM every process of the session, SIGKILL what is left after `grace_s`; returns survivors (none)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_pids(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not session_pids(sid):
            break
    return session_pids(sid)


def sweep_result(uri: str) -> dict:
    """The sweep's MLflow structure, checked, and its measures: parent metrics and each job's measures."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("lme")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("lme.role") == "parent"]
    assert len(parents) == 1, [r.data.tags for r in runs]
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 1 + len(children)  # no orphan job
    assert sorted((r.data.tags["lme.design"], r.data.tags["lme.seed"]) for r in children) == [
        (design, seed) for design in DESIGNS for seed in SEEDS
    ]
    assert all(r.info.status == "FINISHED" for r in [parent, *children])
    assert all(r.data.tags["lme.role"] == "job" for r in children)
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"across_runs.json"}
    for child in children:
        assert {a.path for a in client.list_artifacts(child.info.run_id)} >= {"outcomes.jsonl", "config.yaml"}
    return {
        "parent": dict(parent.data.metrics),
        "jobs": {
            (r.data.tags["lme.design"], r.data.tags["lme.seed"]): {
                k: v for k, v in r.data.metrics.items() if k in JOB_MEASURES or k.startswith("accuracy.")
            }
            for r in children
        },
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The sweep through Hydra's basic launcher (one process, one job after another)."""
    tmp = tmp_path_factory.mktemp("basic")
    run_lme(tmp, *SWEEP, f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/mlruns",
            f"cache_dir={tmp}/cache")
    result = sweep_result(f"sqlite:///{tmp}/mlflow.db")
    assert "bm25/mean_accuracy" in result["parent"] and "first_pass/mean_accuracy" in result["parent"]
    assert result["parent"]["n_failed_runs"] == 0
    return result


@pytest.fixture(scope="module")
def ray_cluster():
    """A one-node Ray cluster on loopback: 2 CPUs, bounded memory, no dashboard, its own temp dir.

    `ray start` runs in the background while the next fixture (the basic launcher's sweep) runs;
    `ready()` waits for it and returns the cluster's address."""
    pytest.importorskip("ray", reason=RAY_EXTRA)
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason=RAY_EXTRA)
    ray_bin = Path(sys.executable).with_name("ray")
    temp_dir = Path(tempfile.mkdtemp(prefix="lmeray", dir="/tmp"))  # short: Ray's socket paths have a length limit
    node_dir = temp_dir / "node"
    node_dir.mkdir()
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--include-dashboard=false", "--num-cpus=2", "--memory=2000000000", "--object-store-memory=100000000",
         "--disable-usage-stats", f"--temp-dir={temp_dir}"],
        cwd=node_dir, env=_clean_env(), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
    sid = process.pid  # the session leader; Ray's daemons stay in its session after `ray start` exits
    timing: dict[str, float] = {}

    def ready() -> str:
        if "start_s" not in timing:
            output, _ = process.communicate(timeout=180)
            assert process.returncode == 0, output[-3000:]
            timing["start_s"] = time.monotonic() - started
        return f"127.0.0.1:{port}"

    try:
        yield {"ready": ready, "node_dir": node_dir, "timing": timing}
    finally:
        if process.poll() is None:
            process.communicate(timeout=180)
        survivors = stop_session(sid)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not survivors, f"Ray processes left running: {survivors}"


@pytest.mark.slow
def test_ray_launcher_gives_the_basic_launchers_structure_and_measures(ray_cluster, tracking_server, reference, tmp_path):
    # (tracking_server is requested here only so that it starts, in the background, with the cluster)
    # The launch directory differs from the workers' (Ray starts them where `ray start` ran), the paths
    # are relative, and LME_CACHE_DIR is in the launching environment only: the jobs must still write
    # where a basic-launcher job would.
    launch = tmp_path / "launch"
    launch.mkdir()
    cache = tmp_path / "cache"
    address = ray_cluster["ready"]()
    started = time.monotonic()
    run_lme(launch, *SWEEP, "hydra/launcher=ray_cluster", f"hydra.launcher.ray.init.address={address}",
            "tracking.uri=sqlite:///mlflow.db", "tracking.artifact_location=mlruns",
            env=_clean_env(LME_CACHE_DIR=str(cache)))
    print(f"ray cluster start {ray_cluster['timing']['start_s']:.1f} s, sweep {time.monotonic() - started:.1f} s")
    result = sweep_result(f"sqlite:///{launch}/mlflow.db")
    assert result == reference
    assert (cache / "calls.sqlite").is_file()
    assert sorted(p.name for p in launch.iterdir()) == ["mlflow.db", "mlruns", "multirun"]
    jobs = sorted((launch / "multirun").glob("*/*/[0-9]*/outcomes.jsonl"))
    assert len(jobs) == len(DESIGNS) * len(SEEDS)
    assert list(ray_cluster["node_dir"].iterdir()) == []  # nothing written where the workers started


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory):
    """`mlflow server` on loopback with a SQLite store; artifacts uploaded through the server. Started in the
    background like the Ray cluster (`ready()` waits for /health)."""
    port = free_port()
    store = tmp_path_factory.mktemp("server")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{store}/mlflow.db", "--artifacts-destination", str(store / "artifacts")],
        cwd=store, env=_clean_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> str:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return url
            except OSError:
                pass
            assert process.poll() is None, "mlflow server exited"
            assert time.monotonic() < deadline, "mlflow server did not answer in 120 s"
            time.sleep(0.5)

    try:
        yield {"ready": ready, "store": store}
    finally:
        survivors = stop_session(process.pid)
        process.wait(timeout=10)
        assert not survivors, f"mlflow server processes left running: {survivors}"


@pytest.mark.slow
def test_joblib_launcher_logging_to_a_tracking_server_gives_the_same_measures(tracking_server, reference, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher",
                        reason='the joblib extra is not installed (pip install -e ".[joblib]")')
    launch = tmp_path / "launch"
    launch.mkdir()
    url = tracking_server["ready"]()
    run_lme(launch, *SWEEP, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"tracking.uri={url}",
            f"cache_dir={tmp_path}/cache")
    assert sweep_result(url) == reference
    assert not (launch / "mlruns").exists()  # artifacts went through the server, not to a local folder
    logged = list((tracking_server["store"] / "artifacts").rglob("outcomes.jsonl"))
    assert len(logged) == len(DESIGNS) * len(SEEDS)


def test_job_overrides_carry_the_parent_id_path_variables_and_an_absolute_sweep_dir_never_a_key():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from lme.study.multirun import job_overrides

    environ = {"LME_CACHE_DIR": "/data/it's here\\", "LME_DATA_DIR": "/d a/t:a", "OPENAI_API_KEY": "sk-x", "LME_TEST_KEY": "sk-y",
               "LME_STUDY_INSTRUCTIONS": "/o/study_instructions.json"}
    overrides = job_overrides("0123abcd", "multirun/bm25/2026-12-02_10-00-00", environ)
    parsed = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(overrides)}
    assert parsed == {
        "hydra.job.env_set.LME_PARENT_RUN_ID": "0123abcd",
        "hydra.job.env_set.LME_CACHE_DIR": environ["LME_CACHE_DIR"],
        "hydra.job.env_set.LME_DATA_DIR": environ["LME_DATA_DIR"],
        "hydra.job.env_set.LME_STUDY_INSTRUCTIONS": environ["LME_STUDY_INSTRUCTIONS"],
        "hydra.sweep.dir": str(Path.cwd() / "multirun/bm25/2026-12-02_10-00-00"),
    }
    assert "sk-" not in " ".join(overrides)
    assert job_overrides(None, "/abs/sweep", {}) == ["hydra.sweep.dir='/abs/sweep'"]


def test_with_a_tracking_server_a_relative_artifact_location_is_left_to_the_server(tmp_path):
    from lme.tracking.runs import TrackingSettings, artifact_location

    assert artifact_location(TrackingSettings(uri="http://127.0.0.1:5000")) is None
    assert artifact_location(TrackingSettings(uri="http://h:5000", artifact_location="s3://b/lme")) == "s3://b/lme"
    assert artifact_location(TrackingSettings(uri="http://h:5000", artifact_location="/shared/mlruns")) == "file:///shared/mlruns"
    assert artifact_location(TrackingSettings(uri=f"sqlite:///{tmp_path}/m.db", artifact_location=None)) is None
    local = TrackingSettings(uri=f"sqlite:///{tmp_path}/m.db", artifact_location="mlruns")
    assert artifact_location(local) == (Path.cwd() / "mlruns").as_uri()


def test_launcher_configs_compose():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason=RAY_EXTRA)
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason='the submitit extra is not installed (pip install -e ".[submitit]")')
    from hydra import compose, initialize_config_dir

    from lme.cli import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        local = compose("config", overrides=["hydra/launcher=ray_local"], return_hydra_config=True).hydra.launcher
        cluster = compose("config", overrides=["hydra/launcher=ray_cluster"], return_hydra_config=True).hydra.launcher
        slurm = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True).hydra.launcher
    assert local.ray.init.address == "local" and local.ray.init.num_cpus == 2 and local.ray.remote.num_cpus == 1
    assert cluster.ray.init.object_store_memory is None
    assert slurm._target_.endswith("SlurmLauncher") and slurm.array_parallelism == 16


@pytest.mark.slow
def test_a_sweep_logged_to_a_tracking_server_reads_as_a_lab_notebook(tracking_server, tmp_path):
    """Through the server's REST API, as the UI reads it: each job's question is a trace with memory, reader and
    judge spans and its verdict as feedback; each job's input is a dataset; a job has fewer than 60 params; the
    parent holds the across-seed table."""
    from mlflow.tracking import MlflowClient

    url = tracking_server["ready"]()
    launch = tmp_path / "launch"
    launch.mkdir()
    result = run_lme(launch, "+design=bm25,first_pass", "retriever=fts5", "limit=3", "-m", "seed=1,2",
                     f"tracking.uri={url}", "tracking.experiment=notebook", "tracking.traces=full",
                     f"cache_dir={tmp_path}/cache")
    assert result.returncode == 0, result.stderr[-3000:]
    client = MlflowClient(url)
    experiment = client.get_experiment_by_name("notebook").experiment_id
    runs = client.search_runs([experiment])
    jobs = [run for run in runs if run.data.tags.get("lme.role") == "job"]
    (sweep,) = [p for p in (launch / "multirun").glob("*/*") if p.is_dir()]  # named by the sweep's folder
    assert sorted(run.info.run_name for run in jobs) == [f"{name}-{sweep.name}" for name in (
        "bm25-sample-seed1", "bm25-sample-seed2", "first_pass-sample-seed1", "first_pass-sample-seed2")]
    for job in jobs:
        assert len(job.data.params) < 60, sorted(job.data.params)
        (data,) = job.inputs.dataset_inputs
        assert data.dataset.name == "sample" and job.data.params["dataset.sha256"].startswith(data.dataset.digest)
        traces = client.search_traces(locations=[experiment], run_id=job.info.run_id, max_results=100)
        assert len(traces) == 3
        for trace in traces:
            names = [span.name for span in trace.data.spans]
            assert {"memory first_pass", "reader first_pass", "judge first_pass"} <= set(names), names
            assert trace.info.tags["lme.design"] == job.data.tags["lme.design"]
            assert [a.name for a in trace.info.assessments] == ["correct"]
    (parent,) = [run for run in runs if run.data.tags.get("lme.role") == "parent"]
    assert "tables/across_seeds.json" in {a.path for a in client.list_artifacts(parent.info.run_id, "tables")}
