"""What every retriever returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lme.data.records import Question


@dataclass(frozen=True, slots=True)
class Ranking:
    """Turn ids, best first, with the retriever's scores (higher is better)."""

    retriever: str
    turn_ids: tuple[str, ...]
    scores: tuple[float, ...]


class Retriever(Protocol):
    name: str

    def rank(self, question: Question, top_k: int) -> Ranking:
        """The top `top_k` turns of the question's history for its question text."""
        ...
