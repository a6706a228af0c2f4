"""The reader: instruction + one JSON object (question, question date, memory)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lme.data.dates import format_moment
from lme.data.records import Question
from lme.errors import LmeError
from lme.memory.base import Memory
from lme.models.gateway import ModelSpec


def compose_instruction(base: str, paragraphs: Mapping[str, str], names: Sequence[str]) -> str:
    """The base instruction followed by the named paragraphs, joined by single spaces."""
    parts = [base.strip()]
    for name in names:
        if name not in paragraphs:
            raise LmeError(f"instructions: paragraph {name!r} is listed but not defined in instructions.paragraphs.")
        parts.append(str(paragraphs[name]).strip())
    return " ".join(part for part in parts if part)


def reader_payload(question: Question, memory: Memory, extra: Mapping[str, Any] | None = None) -> str:
    """The user message: one JSON object. Only neutral ids reach it.

    `extra` adds keys after the memory: `attempt` (2, 3, ...) when a re-read repeats a request
    already made for this question, so it is a new call rather than the cached one; the
    arbiter's `earlier_answers`."""
    payload: dict[str, Any] = {
        "question": question.question,
        "question_date": format_moment(question.question_date),
        "memory": memory.text,
    }
    for key, value in (extra or {}).items():
        if key in payload:
            raise ValueError(f"reader payload key {key!r} is reserved")
        payload[key] = value
    return json.dumps(payload, ensure_ascii=False)


def build_reader_messages(
    instruction: str,
    question: Question,
    memory: Memory,
    instruction_role: str = "system",
    extra: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    return [
        {"role": instruction_role, "content": instruction},
        {"role": "user", "content": reader_payload(question, memory, extra)},
    ]


@dataclass(frozen=True)
class Reader:
    name: str
    model: ModelSpec
    instruction_role: str = "system"
