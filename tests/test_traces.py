"""Every question of a job is one MLflow trace linked to its run: memory, reader and judge spans, the reader span
holding the exact messages the model server received, and the verdict as feedback. A real job against the
loopback OpenAI server, into a temporary SQLite store, read back through MlflowClient."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer

pytestmark = pytest.mark.slow  # two real jobs (~40 s)

ROOT = Path(__file__).resolve().parents[1]


def _job(where: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env |= {"PYTHONPATH": str(ROOT), "LME_TEST_KEY": "lme-test-not-a-key"}
    return subprocess.run(
        [sys.executable, "-m", "lme", "+design=bm25", "limit=3", "rules=pipeline", "instructions=pipeline",
         "memory=user_log", "reader.model.model=openai/gpt-4o-mini", f"++reader.model.api_base={base_url}",
         "++reader.model.api_key_env=LME_TEST_KEY", "++reader.model.input_cost_per_token=1e-6",
         "++reader.model.output_cost_per_token=4e-6", f"tracking.uri=sqlite:///{where}/mlflow.db",
         f"tracking.artifact_location={where}/mlruns", f"cache_dir={where}/cache", "progress=false", *extra],
        cwd=where, env=env, capture_output=True, text=True, timeout=600)


def _traces(where: Path, run_name_part: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{where}/mlflow.db")
    experiment = client.get_experiment_by_name("lme").experiment_id
    (run,) = [r for r in client.search_runs([experiment]) if run_name_part in r.info.run_name]
    return run, list(client.search_traces(locations=[experiment], run_id=run.info.run_id, max_results=100))


def test_each_question_is_a_trace_with_the_exact_prompt_and_its_verdict(tmp_path):
    with LoopbackServer(reply="offline") as server:
        done = _job(tmp_path, server.base_url, "seed=5")  # traces are full by default
        again = _job(tmp_path, server.base_url, "seed=8")  # the same prompts: each text stays stored once
        sent = [request.body["messages"] for request in server.completion_requests]
    assert done.returncode == 0, done.stderr[-3000:]
    assert again.returncode == 0, again.stderr[-3000:]
    run, traces = _traces(tmp_path, "seed5")
    journal = [json.loads(line) for line in (next(tmp_path.glob("outputs/**/outcomes.jsonl"))).read_text().splitlines()]
    outcomes = {row["question_id"]: row for row in journal}
    assert sorted(t.info.tags["lme.question_id"] for t in traces) == sorted(outcomes)
    assert run.data.metrics["traces_written"] == len(outcomes) and run.data.metrics["trace_cpu_ms_per_question"] > 0
    received = sorted({json.dumps(messages, ensure_ascii=False) for messages in sent})
    traced, held = [], {}
    for trace in traces:
        qid = trace.info.tags["lme.question_id"]
        assert trace.info.tags["lme.design"] == "bm25" and trace.info.tags["lme.seed"] == "5"
        assert trace.info.tags["lme.dataset_sha256"] == run.data.params["dataset.sha256"]
        names = [span.name for span in trace.data.spans]
        assert names[0] == f"question {qid}" and "memory first_pass" in names and "reader first_pass" in names
        assert "judge first_pass" in names and "retrieve bm25" in names
        rereads = [step["rule"] for step in outcomes[qid]["steps"] if step["reread"]]
        assert sorted(n for n in names if n.startswith("reader ") and n != "reader first_pass") == sorted(
            f"reader {rule}" for rule in rereads)
        for span in trace.data.spans:
            if span.name.startswith("reader "):
                traced.append(json.dumps(span.inputs["messages"], ensure_ascii=False))
                held[span.attributes["messages_sha256"]] = trace.info.trace_id
                assert span.attributes["model"] == "openai/gpt-4o-mini" and span.attributes["input_tokens"] > 0
                assert span.attributes["from_cache"] is False and span.attributes["cost_usd"] > 0
            if span.name == "memory first_pass":
                assert span.attributes["bytes"] == outcomes[qid]["memory_bytes"]
                assert span.outputs.get("text") or span.outputs.get("text_in_span") == "reader first_pass"
        feedback = [a for a in trace.info.assessments if a.name == "correct"]
        assert len(feedback) == 1 and feedback[0].value == outcomes[qid]["correct"]
        assert trace.info.tags["lme.verdict"] == ("correct" if outcomes[qid]["correct"] else "wrong")
    assert sorted(traced) == received  # byte for byte what the model server was sent, each prompt once

    _, traces = _traces(tmp_path, "seed8")  # the second seed names the first seed's trace for each prompt
    assert len(traces) == len(outcomes)
    for trace in traces:
        for span in trace.data.spans:
            if span.name.startswith("reader "):
                assert "messages" not in span.inputs
                assert span.inputs["messages_in_trace"] == held[span.inputs["messages_sha256"]]


def test_metadata_traces_hold_no_texts_and_off_writes_none(tmp_path):
    with LoopbackServer(reply="offline") as server:
        assert _job(tmp_path, server.base_url, "seed=6", "tracking.traces=metadata").returncode == 0
        assert _job(tmp_path, server.base_url, "seed=7", "tracking.traces=off").returncode == 0
    _, traces = _traces(tmp_path, "seed6")
    assert len(traces) == 3
    for trace in traces:
        for span in trace.data.spans:
            assert "messages" not in (span.inputs or {}) and "text" not in (span.outputs or {})
            if span.name.startswith("reader "):
                assert len(span.inputs["messages_sha256"]) == 64
    _, traces = _traces(tmp_path, "seed7")
    assert traces == []
