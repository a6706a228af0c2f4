"""Small synthetic histories for retriever and memory tests (our own text, built through the real loader)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from lme.data.dates import LME_DATE_FORMAT
from lme.data.load import parse_question
from lme.data.records import Question

FIRST_DAY = datetime(2023, 6, 1, 9, 0)


def question_record(question: str, sessions: list[list[tuple[str, str]]], question_id: str = "q1",
                    question_date: str = "2023/06/30 (Fri) 10:00", session_prefix: str = "orig_") -> dict:
    """A LongMemEval record whose history holds `sessions` (lists of (role, content)), one day apart from
    FIRST_DAY, sessions named `<session_prefix><index>`."""
    return {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": question,
        "answer": "x",
        "question_date": question_date,
        "haystack_dates": [(FIRST_DAY + timedelta(days=day)).strftime(LME_DATE_FORMAT) for day in range(len(sessions))],
        "haystack_session_ids": [f"{session_prefix}{index}" for index in range(len(sessions))],
        "haystack_sessions": [[{"role": role, "content": content} for role, content in turns] for turns in sessions],
        "answer_session_ids": [],
    }


def make_question(question: str, sessions: list[list[tuple[str, str]]], question_id: str = "q1") -> Question:
    """A question whose history holds `sessions` (lists of (role, content)), one day apart from FIRST_DAY."""
    return parse_question(question_record(question, sessions, question_id), Path("synthetic.json"), 0)
