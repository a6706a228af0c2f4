"""What every memory builder returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from lme.data.records import Question
from lme.util.errors import LmeError
from lme.retrieval.base import Ranking

if TYPE_CHECKING:
    from lme.models.gateway import CallResult


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Memory:
    """The text a reader sees, with its size and where each part came from. (Weakly referable: the reader's
    encoded prompts are remembered by the memory they came from, `lme.answer.reader`.)"""

    text: str
    n_bytes: int  # UTF-8 bytes of `text`
    turn_ids: tuple[str, ...]  # turns included, in the order they appear
    skipped_turn_ids: tuple[str, ...] = ()  # ranked turns left out because they did not fit
    notes: dict[str, str] = field(default_factory=dict)
    ranking: Ranking | None = None  # the retriever's ranking the memory was built from (its trace shows the top)
    model_calls: tuple[CallResult, ...] = ()  # the model calls that built it (a model-built memory): its cost


class MemoryFailed(LmeError):
    """A memory step could not build a question's memory: its model call failed or gave no text. That question
    gets no answer and no reader call (a rerun asks it again); the job goes on with the other questions.
    `calls` are the failed calls (their tokens and dollars count)."""

    def __init__(self, step: str, model: str, reason: str, calls: tuple[CallResult, ...] = ()) -> None:
        self.step, self.model, self.reason, self.calls = step, model, reason, calls
        head, _, detail = reason.partition(": ")
        kind, detail = (head, detail) if detail and head.isidentifier() else ("MemoryModelError", reason)
        super().__init__(f"{kind}: memory step {step} (model {model}) failed: {detail}")


class MemoryBuilder(Protocol):
    name: str

    def build(self, question: Question) -> Memory:
        ...
