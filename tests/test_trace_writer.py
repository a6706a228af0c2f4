"""The trace writer against a real temporary SQLite MLflow store: traces written in batches by its thread,
each memory text and reader prompt stored once per store (a second seed's traces name the trace holding
them), retrieval spans with scores, and a store that refuses traces never stops the job."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.memory.base import Memory
from lme.models.gateway import CallResult
from lme.retrieval.base import Ranking
from lme.answer.run import MemoryEvent, Outcome, QuestionRecord, ReadEvent
from lme.tracking.traces import BATCH, TraceWriter, messages_sha256
from lme.tracking.runs import TrackingSettings, client_for, experiment_id


def _settings(tmp_path, traces="full"):
    return TrackingSettings(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "mlruns"),
                            experiment="writer", traces=traces)


def _record(question, text, answer="an answer"):
    now = time.time_ns()
    turn_ids = tuple(turn.turn_id for turn in question.turns())[:30]
    ranking = Ranking("fts5", turn_ids, tuple(float(30 - i) for i in range(len(turn_ids))))
    memory = Memory(text=text, n_bytes=len(text.encode()), turn_ids=turn_ids, ranking=ranking)
    messages = [{"role": "system", "content": "Answer from memory."},
                {"role": "user", "content": f"Memory:\n{text}\n\nQuestion: {question.question}"}]
    call = CallResult(model="openai/test", key="k1", text=answer, input_tokens=120, output_tokens=7, cost_usd=0.001)
    record = QuestionRecord(start_ns=now, end_ns=now + 5_000_000)
    record.memories.append(MemoryEvent("first_pass", memory, now, now + 1_000_000))
    record.reads.append(ReadEvent("first_pass", "first_pass", messages, call, 1, now + 1_000_000, now + 4_000_000))
    outcome = Outcome(question_id=question.question_id, question_type=question.question_type, abstention=False,
                      answer=answer, correct=True, reader_error=None, judge_reply="yes", judge_note="",
                      memory_bytes=memory.n_bytes, memory_turns=len(turn_ids))
    return outcome, record, messages


def _job(tmp_path, questions, seed, traces="full", delete_experiment=False):
    settings = _settings(tmp_path, traces)
    client = client_for(settings)
    experiment = experiment_id(settings)
    run = client.create_run(experiment, run_name=f"seed{seed}").info.run_id
    writer = TraceWriter(settings, run, tags={"lme.seed": str(seed)}, judge=None, cache_dir=tmp_path / "cache")
    if delete_experiment:
        client.delete_experiment(experiment)
    sent = []
    for question in questions:
        outcome, record, messages = _record(question, f"memory of {question.question_id}\n" + "x" * 5000)
        writer.write(question, outcome, record)
        sent.append(messages)
    writer.close()
    if not delete_experiment:
        client.set_terminated(run)
    return client, experiment, run, writer, sent


def _traces(client, experiment, run):
    return list(client.search_traces(locations=[experiment], run_id=run, max_results=500))


@pytest.mark.slow  # two jobs of 70 traces (~25 s)
def test_traces_are_written_in_batches_and_each_text_once_per_store(tmp_path):
    questions = (load_questions(SAMPLE_PATH) * 5)[: BATCH + 6]  # more than one batch
    questions = [q for i, q in enumerate(questions) if q.question_id not in {p.question_id for p in questions[:i]}]
    client, experiment, first, writer, sent = _job(tmp_path, questions, seed=1)
    assert writer.failed is None and writer.written == len(questions)
    assert 0 < writer.cpu_s < 60  # the helper's CPU time on these traces, as it measured it
    traces = _traces(client, experiment, first)
    assert sorted(t.info.tags["mlflow.traceName"] for t in traces) == sorted(
        f"question {q.question_id}" for q in questions)
    held = {}
    for trace in traces:
        spans = {span.name: span for span in trace.data.spans}
        assert set(spans) == {f"question {trace.info.tags['mlflow.traceName'][9:]}", "memory first_pass",
                              "retrieve fts5", "reader first_pass"}
        reader, memory, retrieve = spans["reader first_pass"], spans["memory first_pass"], spans["retrieve fts5"]
        assert reader.attributes["messages_sha256"] == messages_sha256(reader.inputs["messages"])
        held[reader.attributes["messages_sha256"]] = trace.info.trace_id
        # the memory text is inside the stored prompt, so the memory span points there instead of repeating it
        assert memory.outputs == {"sha256": memory.attributes["sha256"], "bytes": memory.attributes["bytes"],
                                  "text_in_span": "reader first_pass"}
        turns = memory.attributes["turns"]
        assert retrieve.parent_id == memory.span_id and len(retrieve.outputs) == min(20, turns) and turns > 0
        scores = [hit["score"] for hit in retrieve.outputs]
        assert scores == sorted(scores, reverse=True) and retrieve.attributes["ranked"] == turns
        assert [a.value for a in trace.info.assessments if a.name == "correct"] == [True]
        assert trace.info.token_usage["input_tokens"] == 120
    assert sorted(held) == sorted(messages_sha256(m) for m in sent)

    # a second seed sends the same prompts: its traces name the trace holding each text, and the store barely grows
    size = (tmp_path / "mlflow.db").stat().st_size
    client, experiment, second, writer, _ = _job(tmp_path, questions, seed=2)
    for trace in _traces(client, experiment, second):
        spans = {span.name: span for span in trace.data.spans}
        reader, memory = spans["reader first_pass"], spans["memory first_pass"]
        sha = reader.inputs["messages_sha256"]
        assert "messages" not in reader.inputs and reader.inputs["messages_in_trace"] == held[sha]
        assert memory.outputs["text_in_trace"] == held[sha]  # the first seed's trace holds it (in its prompt)
    assert (tmp_path / "mlflow.db").stat().st_size - size < 0.5 * size


def test_metadata_mode_keeps_no_text(tmp_path):
    questions = load_questions(SAMPLE_PATH)[:3]
    client, experiment, run, writer, _ = _job(tmp_path, questions, seed=1, traces="metadata")
    for trace in _traces(client, experiment, run):
        for span in trace.data.spans:
            assert "messages" not in (span.inputs or {}) and "text" not in (span.outputs or {})
    assert not (tmp_path / "cache" / "traces.sqlite").exists()


def test_a_store_that_refuses_traces_is_reported_once_and_the_job_goes_on(tmp_path, capfd):
    questions = load_questions(SAMPLE_PATH)[:5]
    _, _, _, writer, _ = _job(tmp_path, questions, seed=1, delete_experiment=True)  # closes without raising
    assert writer.failed is not None and writer.written == 0
    err = capfd.readouterr().err
    assert err.count("traces stopped after 0 of 5 for this job") == 1 and "the run went on" in err


@pytest.mark.parametrize("mode", ["full", "metadata"])
def test_a_question_without_an_answer_is_an_error_trace_without_feedback(tmp_path, mode):
    (question,) = load_questions(SAMPLE_PATH)[:1]
    settings = _settings(tmp_path, mode)
    client = client_for(settings)
    experiment = experiment_id(settings)
    run = client.create_run(experiment).info.run_id
    writer = TraceWriter(settings, run, tags={}, judge=None, cache_dir=tmp_path / "cache")
    outcome, record, _ = _record(question, "memory")
    failed = CallResult(model="openai/test", key="k2", text=None, error="RateLimitError: slow down")
    record.reads[0] = ReadEvent("first_pass", "first_pass", record.reads[0].messages, failed, 1, 1, 2)
    outcome = replace(outcome, answer=None, correct=False, reader_error="RateLimitError")
    writer.write(question, outcome, record)
    writer.close()
    (trace,) = _traces(client, experiment, run)
    assert trace.info.state.value == "ERROR" and trace.info.tags["lme.verdict"] == "missing"
    assert not [a for a in trace.info.assessments if a.name == "correct"]
    (reader,) = [s for s in trace.data.spans if s.name == "reader first_pass"]
    assert reader.status.status_code.value == "ERROR" and reader.outputs["error"] == "RateLimitError: slow down"


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the helper's memory map in /proc: Linux only")
def test_the_helper_started_early_imports_the_store_modules_before_any_job_and_is_the_jobs_helper(tmp_path):
    """`start_helper` (called while a study starts up) starts the helper and has it import MLflow's store
    modules at once, before any job hands it a trace; the first job's writer then uses that same process.
    With tracking off it starts nothing."""
    from lme.tracking.helper import running_helper, stop_helper
    from lme.tracking.traces import start_helper

    stop_helper()  # a fresh helper for this test: an earlier test's may be running
    start_helper(replace(_settings(tmp_path), enabled=False))
    assert running_helper() is None
    start_helper(_settings(tmp_path))
    helper = running_helper()
    assert helper is not None
    maps = f"/proc/{helper.process.pid}/maps"
    deadline = time.monotonic() + 60
    while "pandas/_libs" not in open(maps).read():  # MLflow's store modules import pandas (compiled parts)
        assert time.monotonic() < deadline, "the helper did not import the store modules"
        time.sleep(0.1)
    questions = load_questions(SAMPLE_PATH)[:1]
    writer = _job(tmp_path, questions, seed=1)[3]
    assert running_helper() is helper and writer.written == 1
