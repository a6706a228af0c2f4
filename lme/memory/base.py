"""What every memory builder returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from lme.data.records import Question
from lme.retrieval.base import Ranking


@dataclass(frozen=True, slots=True)
class Memory:
    """The text a reader sees, with its size and where each part came from."""

    text: str
    n_bytes: int  # UTF-8 bytes of `text`
    turn_ids: tuple[str, ...]  # turns included, in the order they appear
    skipped_turn_ids: tuple[str, ...] = ()  # ranked turns left out because they did not fit
    notes: dict[str, str] = field(default_factory=dict)
    ranking: Ranking | None = None  # the retriever's ranking the memory was built from (its trace shows the top)


class MemoryBuilder(Protocol):
    name: str

    def build(self, question: Question) -> Memory:
        ...
