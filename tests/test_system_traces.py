"""A memory system's question in its trace (issue 40, item 4): the `search <system>` span holds every result the
system returned, in its order, before packing, beside the memory span with what the reader got; a metadata trace
keeps ids, scores and digests only. The memory is built by the real builder over lme's offline system; the
traces go to a real temporary SQLite MLflow store through the job's writer."""

from __future__ import annotations

import json
import time

import pytest

from histories import make_question
from lme.answer.run import MemoryEvent, Outcome, QuestionRecord, SystemStats
from lme.memory.systems.base import SystemMemoryBuilder
from lme.memory.systems.local import LocalSystem
from lme.tracking.runs import TrackingSettings, client_for, experiment_id
from lme.tracking.traces import TraceWriter
from lme.util.hashing import sha256_text

SESSIONS = [
    [("user", "I adopted a grey kitten named Pixel last week."), ("assistant", "Pixel is a lovely name.")],
    [("user", "Pixel sleeps on my grey scarf."), ("assistant", "Cats love warm wool.")],
]


@pytest.mark.parametrize("mode", ["full", "metadata"])
def test_a_system_s_raw_results_are_in_the_trace_beside_the_memory(tmp_path, mode):
    question = make_question("What is the grey kitten called?", SESSIONS)
    builder = SystemMemoryBuilder(LocalSystem(tmp_path / "local_system"), cache_path=tmp_path / "journal.sqlite",
                                  max_bytes=130, poll_interval_s=0.01, name="system_local")
    memory = builder.build(question)
    raw = json.loads(memory.notes["system_results"])
    assert int(memory.notes["results"]) == len(raw) > len(memory.turn_ids) >= 1  # some left out by the budget
    now = time.time_ns()
    record = QuestionRecord(start_ns=now, end_ns=now + 2_000_000)
    record.memories.append(MemoryEvent("first_pass", memory, now, now + 1_000_000))
    outcome = Outcome(question.question_id, question.question_type, False, None, False, "no read", None, "",
                      memory.n_bytes, len(memory.turn_ids), system=SystemStats.of(memory))
    settings = TrackingSettings(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "mlruns"),
                                experiment="systems", traces=mode)
    client = client_for(settings)
    experiment = experiment_id(settings)
    run = client.create_run(experiment, run_name="seed1").info.run_id
    writer = TraceWriter(settings, run, tags={"lme.seed": "1"}, judge=None, cache_dir=tmp_path / "cache")
    writer.write(question, outcome, record)
    writer.close()
    assert writer.written == 1 and writer.failed is None
    (trace,) = client.search_traces(locations=[experiment], run_id=run, max_results=5)
    spans = {span.name: span for span in trace.data.spans}
    search, memory_span = spans["search local"], spans["memory first_pass"]
    assert search.parent_id == memory_span.span_id and search.inputs["query"] == question.question
    assert search.attributes["included_ids"] == list(memory.turn_ids)
    assert search.attributes["results"] == str(len(raw)) and search.attributes["namespace"] == memory.notes["namespace"]
    assert "note.system_results" not in memory_span.attributes
    assert memory_span.attributes["note.ingested_now"] == "2"
    if mode == "full":
        assert search.outputs["results"] == raw  # as the system returned them, in its order
        assert memory_span.outputs["text"] == memory.text  # what the reader got
    else:
        assert search.outputs["results"] == [{"id": r["id"], "score": r["score"], "text_sha256": sha256_text(r["text"])}
                                             for r in raw]
        assert "text" not in memory_span.outputs
