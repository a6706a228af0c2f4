"""Check a data file before it is opened, and parse one LongMemEval record into a validated `Question`.

Shared by the whole-file loader (`lme.data.load`) and the streaming reader (`lme.data.stream`). Every kind
of bad input raises `DataError` with one sentence naming the file, the question id (or record index) and
the field.

`check_data_file` refuses, before anything opens it, a path that is not a readable regular file: missing,
a symbolic link loop or a dangling link, a directory, a FIFO (which would block the reader forever), a
socket or device, or a file without read permission.
"""

from __future__ import annotations

import errno
import os
import stat
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
    turn_id_in,
)
from lme.data.validate import (
    EMPTY_ANSWER,
    int_problem,
    join_field,
    printable,
    text_problem,
    value_problem,
)
from lme.util.errors import DataError

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
_RECORD_KEYS = frozenset(REQUIRED_FIELDS)
_TURN_KEYS = frozenset(("role", "content", "has_answer"))
_RECORD_DEPTH = 2  # the file's array, then the record
_TURN_DEPTH = 5  # ... haystack_sessions, a session, then the turn

_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def check_data_file(path: Path, what: str = "") -> None:
    """Raise `DataError` (one sentence) unless `path` is a regular file this process can read.

    Refuses a missing path, a dangling symbolic link, a symbolic link loop, a directory, a FIFO,
    a socket or a device (reading a FIFO would block until a writer comes), and a file without read
    permission. `what` (e.g. "dataset s") is added in parentheses to say what the file is for.
    Opens nothing but a regular file, and reads none of it.
    """
    path = Path(path)
    note = f" ({what})" if what else ""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DataError(
                f"{path}: is a symbolic link to {os.readlink(path)}, which does not exist{note}."
            ) from None
        raise DataError(f"{path}: file not found{note}.") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DataError(
                f"{path}: is a symbolic link loop (or a chain of too many links) and cannot be resolved "
                f"to a file{note}."
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise DataError(f"{path}: file not found (a part of the path is a file, not a directory){note}.") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise DataError(f"{path}: cannot be reached: permission denied on a directory of the path{note}.") from None
        raise DataError(f"{path}: cannot be opened ({exc.strerror or exc}){note}.") from None
    if stat.S_ISDIR(info.st_mode):
        raise DataError(f"{path}: is a directory, not a file{note}.")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "a special file")
        raise DataError(f"{path}: is {kind}, not a regular file{note}.")
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        raise DataError(f"{path}: cannot be read: permission denied{note}.") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be opened ({exc.strerror or exc}){note}.") from None


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Where:
    """Builds the one-sentence error for a record."""

    def __init__(self, path: Path, record: Any, index: int) -> None:
        qid = record.get("question_id") if isinstance(record, dict) else None
        self.prefix = f"{path}: question {qid}" if printable(qid) else f"{path}: record {index}"

    def error(self, field: str, problem: str) -> DataError:
        return DataError(f"{self.prefix}: field {field}: {problem}.")

    def expect(self, value: Any, kinds: type | tuple[type, ...], field: str, what: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise self.error(field, f"expected {what}, found {_type_name(value)}")
        return value

    def text(self, value: str, field: str) -> str:
        """`value`, unless it is not text that can be written as UTF-8 (a lone surrogate)."""
        if not value.isascii() and (problem := text_problem(value)) is not None:
            raise self.error(field, problem)
        return value

    def scalar(self, value: Any, field: str) -> Any:
        """A string or integer item: text that can be written as UTF-8, an integer within bounds."""
        if isinstance(value, str):
            return self.text(value, field)
        if isinstance(value, int) and (problem := int_problem(value)) is not None:
            raise self.error(field, problem)
        return value

    def extras(self, holder: dict[str, Any], known: frozenset[str], field: str, depth: int) -> None:
        """Fields lme does not read: their keys and values must still be text, integers in bounds,
        nested within the cap (the streaming reader could not read them otherwise)."""
        for key, value in holder.items():
            if key in known:
                continue
            name = f"{field}.{key}" if field else key
            if (problem := text_problem(key)) is not None:
                if field:
                    raise self.error(field, f"a key {problem}")
                raise DataError(f"{self.prefix}: a key {problem}.")
            if (found := value_problem(value, depth)) is not None:
                raise self.error(join_field(name, found[0]), found[1])

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

    question_id = where.text(where.expect(record["question_id"], str, "question_id", "a string"), "question_id")
    if not question_id:
        raise where.error("question_id", "empty")
    question_type = where.text(where.expect(record["question_type"], str, "question_type", "a string"), "question_type")
    if question_type not in QUESTION_TYPES:
        raise where.error("question_type", f"unknown type {question_type!r} (known: {', '.join(QUESTION_TYPES)})")
    question = where.text(where.expect(record["question"], str, "question", "a string"), "question")
    answer_raw = where.scalar(where.expect(record["answer"], (str, int), "answer", "a string or an integer"), "answer")
    if isinstance(answer_raw, str) and not answer_raw.strip():
        raise where.error("answer", EMPTY_ANSWER)
    answer = str(answer_raw)
    question_date_text = where.text(
        where.expect(record["question_date"], str, "question_date", "a string"), "question_date"
    )
    question_date = _parse_date(where, question_date_text, "question_date")

    dates = where.expect_list(record["haystack_dates"], "haystack_dates", str, "date strings")
    session_ids = where.expect_list(record["haystack_session_ids"], "haystack_session_ids", (str, int), "session ids")
    raw_sessions = where.expect_list(record["haystack_sessions"], "haystack_sessions", list, "sessions (lists of turns)")
    answer_session_ids = where.expect_list(
        record["answer_session_ids"], "answer_session_ids", (str, int), "session ids"
    )
    for field, values in (
        ("haystack_dates", dates),
        ("haystack_session_ids", session_ids),
        ("answer_session_ids", answer_session_ids),
    ):
        for position, value in enumerate(values):
            where.scalar(value, f"{field}[{position}]")
    if len(record) > len(_RECORD_KEYS):
        where.extras(record, _RECORD_KEYS, "", _RECORD_DEPTH)
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
        session_id = session_id_for(session_index)
        sessions.append(
            Session(
                session_id=session_id,
                date=moment,
                date_text=date_text,
                turns=_parse_turns(where, raw_turns, position, session_id),
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


def _parse_turns(where: _Where, raw_turns: list[Any], position: int, session_id: str) -> tuple[Turn, ...]:
    """A session's turns. The usual turn (an object of role, content and perhaps a boolean has_answer, its
    content text that can be written as UTF-8) is checked inline: S holds 245,625 of them, and building
    each one's field name for an error that never comes was most of the loading time. Any other turn
    goes through `_parse_turn`, which names the field that is wrong."""
    turns = []
    for turn_index, raw in enumerate(raw_turns):
        if type(raw) is dict:
            role, content, size = raw.get("role"), raw.get("content"), len(raw)
            if (type(role) is str and role in ROLES and type(content) is str
                    and (size == 2 or (size == 3 and type(raw.get("has_answer")) is bool))
                    and (content.isascii() or text_problem(content) is None)):
                turns.append(Turn(turn_id_in(session_id, turn_index), role, content, raw.get("has_answer", False)))
                continue
        turns.append(_parse_turn(where, raw, f"haystack_sessions[{position}][{turn_index}]",
                                 turn_id_in(session_id, turn_index)))
    return tuple(turns)


def _parse_turn(where: _Where, raw: Any, field: str, turn_id: str) -> Turn:
    where.expect(raw, dict, field, "a turn object")
    for key in ("role", "content"):
        if key not in raw:
            raise where.error(f"{field}.{key}", "missing")
    role = where.expect(raw["role"], str, f"{field}.role", "a string")
    if role not in ROLES:
        where.text(role, f"{field}.role")
        raise where.error(f"{field}.role", f"unknown role {role!r} (known: user, assistant)")
    content = where.expect(raw["content"], str, f"{field}.content", "a string")
    if not content.isascii():
        where.text(content, f"{field}.content")
    has_answer = raw.get("has_answer", False)
    if not isinstance(has_answer, bool):
        raise where.error(f"{field}.has_answer", f"expected true or false, found {_type_name(has_answer)}")
    if len(raw) > 2 and (len(raw) > 3 or "has_answer" not in raw):
        where.extras(raw, _TURN_KEYS, field, _TURN_DEPTH)
    return Turn(turn_id=turn_id, role=role, content=content, has_answer=has_answer)
