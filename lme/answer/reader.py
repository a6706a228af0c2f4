"""The reader: instruction + one JSON object (question, question date, memory), in lme's form or the study's."""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lme.data.dates import format_moment
from lme.data.records import Question
from lme.util.errors import LmeError
from lme.util.memo import TextMemo
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


PAYLOADS: tuple[str, ...] = ("lme", "study")


def reader_payload(question: Question, memory: Memory, extra: Mapping[str, Any] | None = None,
                   payload: str = "lme") -> str:
    """The user message: one JSON object. Only neutral ids reach it.

    `payload` names its form:

    - `lme` (the default): keys `question`, `question_date` (as lme writes dates: `2023-05-30 (Tuesday)
      14:02`), `memory`, JSON with Python's default separators, non-ASCII kept;
    - `study`, the reference study's (its `answerMessages`, `JSON.stringify({question, questionDate,
      memory})`): keys `question`, `questionDate` (the data file's own date text, `2023/05/30 (Tue) 14:02`),
      `memory`, compact (separators `,` and `:`, no spaces), non-ASCII kept: the bytes JavaScript's
      `JSON.stringify` writes for the same strings.

    `extra` adds keys after the memory, in either form: `attempt` (2, 3, ...) when a re-read repeats a request
    already made for this question (the second decline re-read of an unchanged answer), so it is a new call
    rather than the cached one (lme's payload only: the study's keeps its three keys and marks a repeat in the cache
    key); the arbiter's `earlier_answers` (lme's payload; the study's opens the memory with them,
    `arbiter_messages`).

    Without `extra`, the text is remembered (`_PAYLOADS`): each seed of a study reads the same memory, and
    writing its ~100 KB out as JSON took half a millisecond on the event loop for every reader call."""
    if extra:
        return _encoded_payload(question, memory, extra, payload)
    key = (payload, question.question, question.question_date, question.question_date_text, id(memory))
    known = _PAYLOADS.get(key)
    if known is not None and known[0]() is memory:  # the same memory object, not a later one at its address
        return known[1]
    text = _encoded_payload(question, memory, None, payload)
    _PAYLOADS.put(key, (weakref.ref(memory), text), len(text))
    return text


# (form, question, date, memory) -> the memory (weakly) and the user message; the memory is named by its
# identity (a reused memory is the same object in every seed), so the memo holds no memory text of its own. The 3 seeds'
# payloads of an S question's memory: 0.64 ms of CPU instead of 1.90 ms (`python scripts/bench_tricks.py
# memo_payload`, 2026-12-07)
_PAYLOADS: TextMemo[tuple[weakref.ref[Memory], str]] = TextMemo(64_000_000)


def _encoded_payload(question: Question, memory: Memory, extra: Mapping[str, Any] | None, payload: str) -> str:
    if payload == "study":
        body: dict[str, Any] = {"question": question.question, "questionDate": question.question_date_text,
                                "memory": memory.text}
    elif payload == "lme":
        body = {"question": question.question, "question_date": format_moment(question.question_date),
                "memory": memory.text}
    else:
        raise LmeError(f"reader.payload {payload!r} is unknown (known: {', '.join(PAYLOADS)}).")
    for key, value in (extra or {}).items():
        if key in body:
            raise ValueError(f"reader payload key {key!r} is reserved")
        body[key] = value
    if payload == "study":
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(body, ensure_ascii=False)


def build_reader_messages(
    instruction: str,
    question: Question,
    memory: Memory,
    instruction_role: str = "system",
    extra: Mapping[str, Any] | None = None,
    payload: str = "lme",
) -> list[dict[str, Any]]:
    return [
        {"role": instruction_role, "content": instruction},
        {"role": "user", "content": reader_payload(question, memory, extra, payload)},
    ]


@dataclass(frozen=True)
class Reader:
    name: str
    model: ModelSpec
    instruction_role: str = "system"
    payload: str = "lme"  # the user message's form (`reader_payload`): lme | study


EARLIER_HEADING = "# Earlier answers: what earlier readings of this memory answered, one per line, in run order"


def earlier_section(shown: Sequence[str]) -> str:
    """The section that opens the memory under the study's payload: the heading, then each answer on its own
    line as a JSON string (an answer's own line breaks and quotes cannot run into the next one)."""
    lines = [f"{n}. {json.dumps(answer, ensure_ascii=False)}" for n, answer in enumerate(shown, 1)]
    return "\n".join([EARLIER_HEADING, *lines]) + "\n\n"


def arbiter_messages(instruction: str, question: Question, memory: Memory, reader: Reader,
                     shown: Sequence[str] | None) -> list[dict[str, Any]]:
    """The arbiter's request: `shown` (the earlier answers; None: the stage does not show them) under
    lme's payload as the key `earlier_answers`, under the study's as `earlier_section` before the memory."""
    if shown is None:
        return build_reader_messages(instruction, question, memory, reader.instruction_role, payload=reader.payload)
    if reader.payload == "study":
        text = earlier_section(shown) + memory.text
        opened = replace(memory, text=text, n_bytes=len(text.encode("utf-8")))
        return build_reader_messages(instruction, question, opened, reader.instruction_role, payload=reader.payload)
    return build_reader_messages(instruction, question, memory, reader.instruction_role,
                                 extra={"earlier_answers": list(shown)}, payload=reader.payload)
