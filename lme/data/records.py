"""Typed records of a benchmark's questions (LongMemEval's shape; other benchmarks map onto it, `lme.data.benchmark`).

A `Question` holds its history as `Session`s sorted by parsed date (stable) and
renamed with neutral ids (`s0000`, `s0001`, ...); turns are `s0009:3`. The
original session ids and the `has_answer` flags are kept for retrieval metrics
and statistics only: nothing that builds a prompt may read `original_id` or
`has_answer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
# LoCoMo's categories (lme.data.locomo), as question types: a `question_types=` filter knows every built-in
# benchmark's names (KNOWN_TYPES)
LOCOMO_TYPES: tuple[str, ...] = ("multi-hop", "temporal", "open-domain", "single-hop", "adversarial")
KNOWN_TYPES: tuple[str, ...] = (*QUESTION_TYPES, *LOCOMO_TYPES)
ABSTENTION_MARK = "_abs"
ROLES: tuple[str, ...] = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class Turn:
    turn_id: str  # neutral, e.g. "s0009:3"
    role: str  # "user" | "assistant"
    content: str
    has_answer: bool = False  # evidence flag: never shown to a model
    speaker: str | None = None  # the speaker's name where the benchmark has two people (LoCoMo); memories show it
    # in place of the role. None: LongMemEval's user and assistant.

    @property
    def label(self) -> str:
        """Who is speaking, as a memory shows it: the speaker's name, else the role."""
        return self.speaker or self.role


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str  # neutral, e.g. "s0009"
    date: datetime
    date_text: str  # as written in the file
    turns: tuple[Turn, ...]
    original_id: str  # label-leaking id from the file: never shown to a model
    is_evidence: bool  # original id listed in answer_session_ids


@dataclass(frozen=True, slots=True)
class Question:
    question_id: str
    question_type: str
    question: str
    answer: str  # integer answers are kept as their decimal text
    question_date: datetime
    question_date_text: str
    sessions: tuple[Session, ...]
    answer_session_ids: tuple[str, ...]
    abstains: bool = False  # the right answer is that the history does not say (beside LongMemEval's `_abs` ids)
    benchmark: str = "longmemeval"  # the benchmark the question comes from (`lme.data.benchmark`)

    @property
    def is_abstention(self) -> bool:
        return self.abstains or ABSTENTION_MARK in self.question_id

    def turns(self) -> list[Turn]:
        """Every turn of the history, in date order."""
        return [turn for session in self.sessions for turn in session.turns]

    def session_of(self, turn_id: str) -> Session:
        """The session a neutral turn id belongs to."""
        index = int(turn_id.split(":", 1)[0][1:])
        return self.sessions[index]


def session_id_for(index: int) -> str:
    return f"s{index:04d}"


def turn_id_in(session_id: str, turn_index: int) -> str:
    return f"{session_id}:{turn_index}"


def turn_id_for(session_index: int, turn_index: int) -> str:
    return turn_id_in(session_id_for(session_index), turn_index)
