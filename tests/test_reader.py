"""Reader prompt composition: one JSON object, neutral ids only."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from lme.answer.reader import build_reader_messages, compose_instruction
from lme.data.records import Question, Session, Turn
from lme.errors import LmeError
from lme.memory.base import Memory


def _question() -> Question:
    session = Session(
        session_id="s0000",
        date=datetime(2023, 5, 20, 2, 21),
        date_text="2023/05/20 (Sat) 02:21",
        turns=(Turn("s0000:0", "user", "I adopted a cat named Pixel.", has_answer=True),),
        original_id="answer_deadbeef_1",
        is_evidence=True,
    )
    return Question(
        question_id="q1",
        question_type="single-session-user",
        question="What is my cat called?",
        answer="Pixel",
        question_date=datetime(2023, 5, 30, 23, 40),
        question_date_text="2023/05/30 (Tue) 23:40",
        sessions=(session,),
        answer_session_ids=("answer_deadbeef_1",),
    )


def test_compose_instruction_joins_base_and_listed_paragraphs_with_single_spaces():
    paragraphs = {"fmt": "  Open with the answer.  ", "cal": "Report values directly."}
    assert compose_instruction("Base text.", paragraphs, ["cal", "fmt"]) == (
        "Base text. Report values directly. Open with the answer."
    )
    assert compose_instruction("Base text.", paragraphs, []) == "Base text."


def test_compose_instruction_rejects_an_undefined_paragraph():
    with pytest.raises(LmeError, match="'advice'"):
        compose_instruction("Base.", {}, ["advice"])


def test_reader_messages_hold_one_json_object_after_the_instruction():
    memory = Memory(text="[s0000:0] 2023-05-20 (Saturday) 02:21 user: I adopted a cat named Pixel.", n_bytes=0, turn_ids=("s0000:0",))
    messages = build_reader_messages("Answer briefly.", _question(), memory)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == "Answer briefly."
    payload = json.loads(messages[1]["content"])
    assert payload == {
        "question": "What is my cat called?",
        "question_date": "2023-05-30 (Tuesday) 23:40",
        "memory": memory.text,
    }
    everything = json.dumps(messages)
    assert "answer_deadbeef" not in everything and "has_answer" not in everything


def test_instruction_role_is_configurable():
    memory = Memory(text="", n_bytes=0, turn_ids=())
    assert build_reader_messages("x", _question(), memory, instruction_role="developer")[0]["role"] == "developer"
