"""Memories kept for the later jobs of one process.

A question's memory depends on the question, the memory's config and the
retriever's, never on the seed; so the jobs of a multirun that share a process
(Hydra's basic launcher runs the seeds one after another in the launching
process) build each question's memory once and reuse it. `ReusedMemory` wraps a
builder under a digest of everything the memory depends on (`memory_digest`:
the builder's and retriever's configs and the data file's identity); the store
is per process and keeps only the digests the current job uses (`keep_only`),
so a sweep over designs holds one design's memories at a time.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from typing import Any

from lme.data.load import file_identity  # noqa: F401  (a memory key names its data file by it)
from lme.data.records import Question
from lme.util.hashing import sha256_text
from lme.memory.base import Memory, MemoryBuilder

_STORE: dict[str, dict[str, Memory]] = {}  # digest -> question id -> memory
_LOCK = threading.Lock()


def memory_digest(*parts: Any) -> str:
    """SHA-256 of the parts (plain config containers, file identities) as canonical JSON."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return sha256_text(text)


@dataclass(frozen=True)
class ReusedMemory:
    """A memory builder whose memories stay in the process for the later jobs with the same digest."""

    builder: MemoryBuilder
    digest: str

    @property
    def name(self) -> str:
        return self.builder.name

    def build(self, question: Question) -> Memory:
        with _LOCK:
            memories = _STORE.setdefault(self.digest, {})
            memory = memories.get(question.question_id)
        if memory is None:
            memory = self.builder.build(question)  # a failed memory (`MemoryFailed`) is not kept
            with _LOCK:
                memories[question.question_id] = memory
            return memory
        return reused(memory)


def reused(memory: Memory) -> Memory:
    """A kept memory as a later job sees it: the model calls that built it (a model-built memory) were paid by
    the job that built it, so here they count as served from the cache (list price kept, nothing spent); a memory
    system's sessions ingested by that job count as reused here (`ingested_now` 0)."""
    if memory.notes.get("ingested_now", "0") != "0":
        sessions = str(int(memory.notes["ingested_now"]) + int(memory.notes.get("ingested_reused", "0")))
        memory = replace(memory, notes={**memory.notes, "ingested_now": "0", "ingested_reused": sessions})
    if not memory.model_calls:
        return memory
    return replace(memory, model_calls=tuple(replace(call, cached=True) for call in memory.model_calls))


def keep_only(digests: set[str]) -> None:
    """Drop the memories of every digest not in `digests` (called at a job's start)."""
    with _LOCK:
        for digest in [d for d in _STORE if d not in digests]:
            del _STORE[digest]


def stored() -> int:
    """How many memories the process holds."""
    with _LOCK:
        return sum(len(memories) for memories in _STORE.values())
