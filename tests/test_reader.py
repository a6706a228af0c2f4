"""Reader prompt composition: one JSON object, neutral ids only."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from lme.answer.reader import build_reader_messages, compose_instruction, reader_payload
from lme.data.records import Question, Session, Turn
from lme.util.errors import LmeError
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


def test_a_memory_read_again_gets_the_same_payload_and_a_different_memory_or_question_its_own():
    """The payload is remembered per memory object (each seed reads the same one): the same object gives the
    same text; an equal-looking memory with other text, another question, another form or `extra` never
    gets a remembered payload that is not its own."""
    import dataclasses

    question = _question()
    memory = Memory(text="[s0000:0] user: I adopted a cat named Pixel. " * 50, n_bytes=0, turn_ids=("s0000:0",))
    first = reader_payload(question, memory)
    assert reader_payload(question, memory) == first
    assert json.loads(first)["memory"] == memory.text
    other_text = dataclasses.replace(memory, text=memory.text + "She is grey.")
    assert json.loads(reader_payload(question, other_text))["memory"] == other_text.text
    asked_again = dataclasses.replace(question, question="What colour is my cat?")
    assert json.loads(reader_payload(asked_again, memory))["question"] == "What colour is my cat?"
    later = dataclasses.replace(question, question_date=datetime(2024, 1, 2, 3, 4))
    assert json.loads(reader_payload(later, memory))["question_date"] == "2024-01-02 (Tuesday) 03:04"
    study = json.loads(reader_payload(question, memory, payload="study"))
    assert set(study) == {"question", "questionDate", "memory"}
    assert json.loads(reader_payload(question, memory, {"attempt": 2}))["attempt"] == 2
    assert "attempt" not in json.loads(reader_payload(question, memory))


def test_a_memory_made_where_an_earlier_one_lived_gets_its_own_payload():
    """Memories are remembered by identity; a new memory at a freed one's address must not get its text."""
    question = _question()
    seen = {}
    for number in range(200):  # CPython reuses the addresses of freed objects (freed at `del`: no cycle holds one)
        memory = Memory(text=f"memory number {number} " * 40, n_bytes=0, turn_ids=())
        seen.setdefault(id(memory), []).append(number)
        assert json.loads(reader_payload(question, memory))["memory"] == memory.text
        del memory
    assert any(len(numbers) > 1 for numbers in seen.values())  # an address was reused: the case was exercised
