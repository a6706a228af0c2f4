"""`python -m lme ui`: MLflow's UI on the study's store, offline, opening on lme's runs view; Ctrl-C stops it. Against a
real store in tmp_path holding a finished offline run, with a real `mlflow server` on a free loopback port."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from lme.util.hashing import sha256_text

ROOT = Path(__file__).resolve().parents[1]
# Issue 35's target is the runs view within 15 s, offline: measured by scripts/bench_ui.py (7.0-7.8 s on an idle
# 2-core machine). A timed test on a machine shared with other tests says little, so this one only catches a hang.
START_LIMIT_S = 60.0


def _env() -> dict[str, str]:
    """No key, no lme settings from the outside; offline: no proxy that could reach anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "LITELLM_", "MLFLOW_"))}
    return env | {"PYTHONPATH": str(ROOT), "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding one finished offline run of the pipeline (several steps, so several prompts), whose experiment
    has lost lme's runs view (an older store): the UI must give it back."""
    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import RUNS_VIEW_TAG

    where = tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{where}/mlflow.db"
    done = subprocess.run([sys.executable, "-m", "lme", "+design=pipeline", "retriever=fts5", f"tracking.uri={uri}",
                           f"tracking.artifact_location={where}/mlruns", f"cache_dir={where}/cache", "limit=2",
                           "progress=false"],
                          cwd=where, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"MLflow: python -m lme ui tracking.uri={uri}, then open http://127.0.0.1:5000/#/experiments/" in done.stdout
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("lme").experiment_id
    client.delete_experiment_tag(experiment, RUNS_VIEW_TAG)
    return where, uri, experiment


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.status, reply.read()


@pytest.mark.slow
def test_the_ui_serves_the_runs_view_with_metric_columns_offline(store):
    where, uri, experiment = store
    port = _free_port()
    started = time.monotonic()
    ui = subprocess.Popen([sys.executable, "-m", "lme", "ui", "--port", str(port), f"tracking.uri={uri}"],
                          cwd=where, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ui.stdout.readline()
        match = re.search(r"open (http://127\.0\.0\.1:(\d+))/#/experiments/(\d+)/runs\?viewStateShareKey=lme", line)
        assert match, (line, ui.stderr.read() if ui.poll() is not None else "")
        base, experiment_id = match.group(1), match.group(3)
        assert int(match.group(2)) == port and experiment_id == experiment
        status, body = _get(f"{base}/api/2.0/mlflow/experiments/get?experiment_id={experiment_id}")
        elapsed = time.monotonic() - started
        tags = {tag["key"]: tag["value"] for tag in json.loads(body)["experiment"]["tags"]}
        view = json.loads(tags["mlflow.sharedViewState.lme"])
        assert {"metrics.`accuracy`", "metrics.`task_averaged_accuracy`", "params.`design`", "tags.`lme.seed`",
                "attributes.`Dataset`"} <= set(view["selectedColumns"])
        assert view["orderByKey"] == "metrics.`accuracy`"
        print(f"lme ui: runs view served {elapsed:.1f} s after the command started")
        status, page = _get(f"{base}/")  # the UI itself
        assert status == 200 and b"<html" in page.lower()
        runs = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{base}/api/2.0/mlflow/runs/search", data=json.dumps({"experiment_ids": [experiment_id]}).encode(),
            headers={"Content-Type": "application/json"}), timeout=10).read())["runs"]
        assert [m["key"] for m in runs[0]["data"]["metrics"]][0] == "accuracy"  # the column the view sorts by
        # The Prompts page's requests (as its JavaScript makes them): the prompts, a prompt's versions (each with its
        # text's digest and the runs that read it), and a run page's prompt versions.
        query = urllib.parse.urlencode({"filter": "tags.`mlflow.prompt.is_prompt` = 'true'"})
        prompts = json.loads(_get(f"{base}/api/2.0/mlflow/registered-models/search?{query}")[1])["registered_models"]
        steps = ("first_pass", "advice", "decline", "recall")
        assert sorted(p["name"] for p in prompts) == sorted(f"lme-pipeline-{step}" for step in steps)
        (run,) = runs
        for step in steps:
            query = urllib.parse.urlencode(
                {"filter": f"name='lme-pipeline-{step}' AND tags.`mlflow.prompt.is_prompt` = 'true'"})
            (version,) = json.loads(_get(f"{base}/api/2.0/mlflow/model-versions/search?{query}")[1])["model_versions"]
            tags = {tag["key"]: tag["value"] for tag in version["tags"]}
            query = urllib.parse.urlencode({"path": f"instructions/{step}.txt", "run_uuid": run["info"]["run_id"]})
            text = _get(f"{base}/get-artifact?{query}")[1].decode("utf-8").removesuffix("\n")  # where lme put it
            assert tags["mlflow.prompt.text"] == text and tags["lme.sha256"] == sha256_text(text)
            assert tags["mlflow.prompt.run_ids"] == run["info"]["run_id"]
        query = urllib.parse.urlencode({"filter": "tags.`mlflow.prompt.is_prompt` = 'true' AND "
                                                  f"tags.`mlflow.prompt.run_ids` ILIKE \"%{run['info']['run_id']}%\""})
        read = json.loads(_get(f"{base}/api/2.0/mlflow/model-versions/search?{query}")[1])["model_versions"]
        assert sorted(v["name"] for v in read) == sorted(f"lme-pipeline-{step}" for step in steps)
        # On a tracking server (this one, by its address) nothing is started: its address is printed.
        other = subprocess.run([sys.executable, "-m", "lme", "ui", f"tracking.uri={base}"], cwd=where, env=_env(),
                               capture_output=True, text=True, timeout=120)
        assert other.returncode == 0, other.stderr[-2000:]
        assert other.stdout.strip() == (f"MLflow UI on {base}: open {base}/#/experiments/{experiment_id}/runs?"
                                        "viewStateShareKey=lme (design, dataset, seed, accuracy per run)")
        assert elapsed < START_LIMIT_S, f"the runs view took {elapsed:.1f} s"
    finally:
        ui.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = ui.communicate(timeout=60)
    assert ui.returncode == 0, err[-2000:]
    assert err.strip().splitlines()[-1] == "lme: MLflow UI stopped."
    assert "Traceback" not in err and "Warning" not in err  # quiet: no start-up chatter, no deprecation notices
    with pytest.raises(OSError):  # the server is gone with it
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_store_that_is_not_there_is_one_sentence_and_nothing_is_created(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lme", "ui", f"tracking.uri=sqlite:///{tmp_path}/none.db"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"lme: error: no MLflow store at {tmp_path}/none.db (tracking.uri=sqlite:///"
                                   f"{tmp_path}/none.db); run a study first (python -m lme), or name the store with "
                                   "tracking.uri=sqlite:///PATH.")
    assert list(tmp_path.iterdir()) == []


def test_a_port_in_use_is_one_sentence(tmp_path):
    import sqlite3

    from lme.tracking.runs import STORE_TABLES

    with sqlite3.connect(tmp_path / "mlflow.db") as conn:  # what the store check before the port's looks for
        conn.executescript("".join(f"CREATE TABLE {table} (x);" for table in STORE_TABLES))
        conn.execute("INSERT INTO alembic_version VALUES ('head')")
    conn.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "lme", "ui", "--port", str(port),
                               f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
                              cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"lme: error: ui: cannot serve on 127.0.0.1:{port} (") and line.endswith("--port N.")
