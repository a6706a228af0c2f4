"""Load and validate LongMemEval files (`.json`, `.json.gz`, `.json.xz`).

Every kind of bad input raises `DataError` with one sentence naming the file,
the question id (or record index) and the field.
"""

from __future__ import annotations

import gzip
import json
import lzma
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lme.data.dates import parse_lme_date
from lme.data.records import (
    QUESTION_TYPES,
    ROLES,
    Question,
    Session,
    Turn,
    session_id_for,
    turn_id_for,
)
from lme.errors import DataError

REQUIRED_FIELDS: tuple[str, ...] = (
    "question_id",
    "question_type",
    "question",
    "answer",
    "question_date",
    "haystack_dates",
    "haystack_session_ids",
    "haystack_sessions",
    "answer_session_ids",
)


def read_json(path: Path) -> Any:
    """Parse a JSON file, transparently decompressing `.gz` and `.xz`."""
    if not path.exists():
        raise DataError(f"{path}: file not found.")
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    kind = {".gz": "gzip-compressed UTF-8 JSON", ".xz": "xz-compressed UTF-8 JSON"}.get(path.suffix, "UTF-8 JSON")
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            raise DataError(f"{path}: is empty (no JSON in it).") from None
        raise DataError(f"{path}: not valid JSON ({exc.msg}; line {exc.lineno}, column {exc.colno}).") from None
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read as {kind} ({exc}).") from None


def load_questions(path: str | Path, question_ids: Iterable[str] | None = None) -> list[Question]:
    """Load a LongMemEval file into validated `Question`s, in file order.

    `question_ids`, when given, selects those questions (in the order given) and
    fails on an id the file does not hold.
    """
    path = Path(path)
    raw = read_json(path)
    if not isinstance(raw, list):
        raise DataError(f"{path}: expected a JSON array of question records, found {type(raw).__name__}.")
    if not raw:
        raise DataError(f"{path}: holds no question (an empty JSON array).")
    questions = [parse_question(record, path, index) for index, record in enumerate(raw)]
    seen: set[str] = set()
    for question in questions:
        if question.question_id in seen:
            raise DataError(f"{path}: question {question.question_id}: field question_id: duplicate id.")
        seen.add(question.question_id)
    if question_ids is None:
        return questions
    by_id = {question.question_id: question for question in questions}
    selected = []
    for question_id in question_ids:
        if question_id not in by_id:
            raise DataError(f"{path}: question {question_id} selected in the config is not in the file.")
        selected.append(by_id[question_id])
    return selected


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Where:
    """Builds the one-sentence error for a record."""

    def __init__(self, path: Path, record: Any, index: int) -> None:
        qid = record.get("question_id") if isinstance(record, dict) else None
        self.prefix = f"{path}: question {qid}" if isinstance(qid, str) and qid else f"{path}: record {index}"

    def error(self, field: str, problem: str) -> DataError:
        return DataError(f"{self.prefix}: field {field}: {problem}.")

    def expect(self, value: Any, kinds: type | tuple[type, ...], field: str, what: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise self.error(field, f"expected {what}, found {_type_name(value)}")
        return value

    def expect_list(self, value: Any, field: str, item_kinds: type | tuple[type, ...], what: str) -> list[Any]:
        self.expect(value, list, field, f"a list of {what}")
        for position, item in enumerate(value):
            self.expect(item, item_kinds, f"{field}[{position}]", what)
        return value


def parse_question(record: Any, path: Path, index: int) -> Question:
    """Validate one raw record and build its `Question`."""
    where = _Where(path, record, index)
    if not isinstance(record, dict):
        raise DataError(f"{path}: record {index}: expected a JSON object, found {_type_name(record)}.")
    for field in REQUIRED_FIELDS:
        if field not in record:
            raise where.error(field, "missing")

    question_id = where.expect(record["question_id"], str, "question_id", "a string")
    if not question_id:
        raise where.error("question_id", "empty")
    question_type = where.expect(record["question_type"], str, "question_type", "a string")
    if question_type not in QUESTION_TYPES:
        raise where.error("question_type", f"unknown type {question_type!r} (known: {', '.join(QUESTION_TYPES)})")
    question = where.expect(record["question"], str, "question", "a string")
    answer_raw = where.expect(record["answer"], (str, int), "answer", "a string or an integer")
    answer = str(answer_raw)
    question_date_text = where.expect(record["question_date"], str, "question_date", "a string")
    question_date = _parse_date(where, question_date_text, "question_date")

    dates = where.expect_list(record["haystack_dates"], "haystack_dates", str, "date strings")
    session_ids = where.expect_list(record["haystack_session_ids"], "haystack_session_ids", (str, int), "session ids")
    raw_sessions = where.expect_list(record["haystack_sessions"], "haystack_sessions", list, "sessions (lists of turns)")
    answer_session_ids = where.expect_list(
        record["answer_session_ids"], "answer_session_ids", (str, int), "session ids"
    )
    lengths = {"haystack_dates": len(dates), "haystack_session_ids": len(session_ids), "haystack_sessions": len(raw_sessions)}
    if len(set(lengths.values())) != 1:
        described = ", ".join(f"{name} has {count}" for name, count in lengths.items())
        raise where.error("haystack_sessions", f"parallel lists of unequal length ({described})")
    if not raw_sessions:
        raise where.error("haystack_sessions", "empty history")

    parsed = []
    for position, (date_text, original_id, raw_turns) in enumerate(zip(dates, session_ids, raw_sessions)):
        moment = _parse_date(where, date_text, f"haystack_dates[{position}]")
        parsed.append((moment, position, date_text, str(original_id), raw_turns))
    parsed.sort(key=lambda item: (item[0], item[1]))  # stable: equal dates keep file order

    evidence = {str(value) for value in answer_session_ids}
    sessions = []
    for session_index, (moment, position, date_text, original_id, raw_turns) in enumerate(parsed):
        turns = tuple(
            _parse_turn(where, raw_turn, f"haystack_sessions[{position}][{turn_index}]", session_index, turn_index)
            for turn_index, raw_turn in enumerate(raw_turns)
        )
        sessions.append(
            Session(
                session_id=session_id_for(session_index),
                date=moment,
                date_text=date_text,
                turns=turns,
                original_id=original_id,
                is_evidence=original_id in evidence,
            )
        )
    if not any(session.turns for session in sessions):
        raise where.error("haystack_sessions", "empty history (no session holds a turn)")
    return Question(
        question_id=question_id,
        question_type=question_type,
        question=question,
        answer=answer,
        question_date=question_date,
        question_date_text=question_date_text,
        sessions=tuple(sessions),
        answer_session_ids=tuple(str(value) for value in answer_session_ids),
    )


def _parse_date(where: _Where, text: str, field: str):
    try:
        return parse_lme_date(text)
    except ValueError:
        raise where.error(field, f"unparseable date {text!r} (expected like '2023/05/20 (Sat) 02:21')") from None


def _parse_turn(where: _Where, raw: Any, field: str, session_index: int, turn_index: int) -> Turn:
    where.expect(raw, dict, field, "a turn object")
    for key in ("role", "content"):
        if key not in raw:
            raise where.error(f"{field}.{key}", "missing")
    role = where.expect(raw["role"], str, f"{field}.role", "a string")
    if role not in ROLES:
        raise where.error(f"{field}.role", f"unknown role {role!r} (known: user, assistant)")
    content = where.expect(raw["content"], str, f"{field}.content", "a string")
    has_answer = raw.get("has_answer", False)
    if not isinstance(has_answer, bool):
        raise where.error(f"{field}.has_answer", f"expected true or false, found {_type_name(has_answer)}")
    return Turn(turn_id=turn_id_for(session_index, turn_index), role=role, content=content, has_answer=has_answer)


def select(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """The first `limit` questions (all when `limit` is None)."""
    return list(questions if limit is None else questions[:limit])
