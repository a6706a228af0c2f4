"""Memories kept for a process's later jobs (lme.memory.reuse): built once per question and digest, dropped
when a job no longer uses the digest; a run's builders are wrapped by `lme.study.job.reuse_memories`."""

from __future__ import annotations

import sys
from pathlib import Path

from lme.data.records import Question
from lme.memory.base import Memory
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.memory.reuse import ReusedMemory, file_identity, keep_only, memory_digest, stored
from lme.retrieval.fts5 import FTS5Retriever

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from histories import make_question  # noqa: E402

SESSIONS = [
    [("user", "I adopted a beagle named Pixel."), ("assistant", "Beagles are curious dogs.")],
    [("user", "Planning a trip to Lisbon in autumn."), ("assistant", "Lisbon has lovely tiled facades.")],
]


class Counting:
    """A real builder, counting how often it is asked."""

    def __init__(self) -> None:
        self.inner = RetrievedMemoryBuilder(FTS5Retriever())
        self.name = self.inner.name
        self.calls = 0

    def build(self, question: Question) -> Memory:
        self.calls += 1
        return self.inner.build(question)


def test_a_memory_is_built_once_per_question_and_digest() -> None:
    keep_only(set())
    first, second = make_question("Which dog?", SESSIONS, "q1"), make_question("Where to?", SESSIONS, "q2")
    builder = Counting()
    job_1 = ReusedMemory(builder, "digest-a")
    job_2 = ReusedMemory(builder, "digest-a")  # the next seed's job: same config, same file
    memory = job_1.build(first)
    assert job_2.build(first) is memory and builder.calls == 1
    assert job_2.build(second).text == builder.inner.build(second).text and builder.calls == 2
    assert job_1.name == "retrieved" and stored() == 2
    other = ReusedMemory(builder, "digest-b")  # another memory config: its own memories
    other.build(first)
    assert builder.calls == 3 and stored() == 3
    keep_only({"digest-b"})
    assert stored() == 1
    job_1.build(first)
    assert builder.calls == 4  # dropped, so built again
    keep_only(set())


def test_the_digest_follows_config_and_file(tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text("[]", encoding="utf-8")
    identity = file_identity(data)
    assert memory_digest({"top_k": 100}, identity) == memory_digest({"top_k": 100}, file_identity(data))
    assert memory_digest({"top_k": 100}, identity) != memory_digest({"top_k": 50}, identity)
    data.write_text("[ ]", encoding="utf-8")  # the file changed: its memories are not reused
    assert memory_digest({"top_k": 100}, identity) != memory_digest({"top_k": 100}, file_identity(data))


def test_a_run_wraps_its_builders_by_config(tmp_path: Path) -> None:
    from lme.config.design import compose_design
    from lme.study.job import reuse_memories

    data = tmp_path / "data.json"
    data.write_text("[]", encoding="utf-8")
    digests = []
    for overrides in (["+design=bm25", "seed=1"], ["+design=bm25", "seed=2"], ["+design=bm25", "memory.top_k=10"]):
        design = compose_design(overrides)
        retriever = design.build_retriever()
        builder, views = reuse_memories(design, data, design.build_memory(retriever), {})
        assert isinstance(builder, ReusedMemory) and views == {}
        digests.append(builder.digest)
    assert digests[0] == digests[1] != digests[2]  # the seed is not part of a memory; top_k is
    keep_only(set())


def test_a_memory_systems_ingestion_counts_once_in_a_process():
    """The job that built a memory-system memory ingested its sessions; a later job reusing it ingested none."""
    from lme.memory.base import Memory
    from lme.memory.reuse import reused

    built = Memory(text="t", n_bytes=1, turn_ids=(), notes={"ingested_now": "3", "ingested_reused": "1", "x": "y"})
    again = reused(built)
    assert again.notes == {"ingested_now": "0", "ingested_reused": "4", "x": "y"}
    assert built.notes["ingested_now"] == "3"  # the kept memory itself is unchanged
    plain = Memory(text="t", n_bytes=1, turn_ids=())
    assert reused(plain) is plain
