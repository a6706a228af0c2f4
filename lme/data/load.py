"""Load and validate LongMemEval files (`.json`, `.json.gz`, `.json.xz`).

Every kind of bad input raises `DataError` with one sentence naming the file,
the question id (or record index) and the field. Beyond the format's shape,
`lme.data.validate` sets the limits both loaders enforce: text that can be
written as UTF-8 (no lone surrogates), nesting at most 64 deep, integers of at
most 15 digits, and a reference answer that holds text.

`check_data_file` refuses, before anything opens it, a path that is not a
readable regular file: missing, a symbolic link loop or a dangling link, a
directory, a FIFO (which would block the reader forever), a socket or device,
or a file without read permission.
"""

from __future__ import annotations

import gzip
import json
import lzma
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lme.data.parse import REQUIRED_FIELDS, check_data_file, parse_question
from lme.data.records import Question
from lme.data.validate import NESTING_PROBLEM
from lme.util.errors import DataError, first_line
from lme.util.heap import collection_paused

__all__ = ["REQUIRED_FIELDS", "check_data_file", "load_questions", "parse_question", "read_json", "select"]


def read_json(path: Path) -> Any:
    """Parse a JSON file, transparently decompressing `.gz` and `.xz`."""
    try:
        return _parse_json(path)
    except _JSON_FAILURES as exc:
        raise _json_failure(path, exc) from None


_JSON_FAILURES = (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, lzma.LZMAError, RecursionError,
                  ValueError)


def read_data(path: Path) -> bytes:
    """The bytes `load_questions` parses: the file's, decompressed for `.gz` and `.xz` (the decompressor
    releases the GIL while it works)."""
    check_data_file(path)
    return _decompressed(path)


def _parse_json(path: Path, data: bytes | None = None) -> Any:
    return json.loads((read_data(path) if data is None else data).decode("utf-8"))


def _json_failure(path: Path, exc: BaseException) -> DataError:
    """The one sentence for what `_parse_json` raised (`_JSON_FAILURES`)."""
    kind = {".gz": "gzip-compressed UTF-8 JSON", ".xz": "xz-compressed UTF-8 JSON"}.get(path.suffix, "UTF-8 JSON")
    if isinstance(exc, json.JSONDecodeError):
        if not exc.doc.strip():
            return DataError(f"{path}: is empty (no JSON in it).")
        return DataError(f"{path}: not valid JSON ({exc.msg}; line {exc.lineno}, column {exc.colno}).")
    if isinstance(exc, UnicodeDecodeError):  # the streaming reader names the record and the byte's offset
        return _located(path, exc) or DataError(f"{path}: cannot be read as {kind} ({exc}).")
    if isinstance(exc, (OSError, EOFError, lzma.LZMAError)):
        return DataError(f"{path}: cannot be read as {kind} ({exc}).")
    return _located(path, exc) or _beyond_json_limits(path, exc)  # nesting too deep, an integer of 4,300+ digits


def _decompressed(path: Path) -> bytes:
    """The file's bytes, decompressed in one call for `.gz` and `.xz`.

    One call, not a file object's 8 KiB reads: the decompressor releases the GIL while it works, and a file is
    usually loaded in a background thread while the main thread imports and sets up tracking. Read in small
    pieces, each piece waits for the GIL again (up to 5 ms each, thousands of times): S's `.json.xz` took 58 s
    beside a busy main thread that way, 3.2 s in one call (2.7 s on an idle core)."""
    raw = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(raw)
    if path.suffix == ".gz":
        return gzip.decompress(raw)
    return raw


def _located(path: Path, exc: BaseException) -> DataError | None:
    """The sentence naming the record and field for what `json.load` refused, found again by the
    streaming reader (which reads one record at a time and knows where it is), or None."""
    from lme.data.stream import first_problem  # lme.data.stream imports this module

    return first_problem(path)


def _beyond_json_limits(path: Path, exc: BaseException) -> DataError:
    if isinstance(exc, RecursionError):
        return DataError(f"{path}: {NESTING_PROBLEM}.")
    reason = first_line(exc).rstrip(".")
    return DataError(f"{path}: cannot be read as JSON ({reason}).")


def load_questions(path: str | Path, question_ids: Iterable[str] | None = None, *,
                   data: bytes | None = None) -> list[Question]:
    """Load a LongMemEval file into validated `Question`s, in file order.

    `question_ids`, when given, selects those questions (in the order given) and
    fails on an id the file does not hold. `data`, when given, is the file's
    bytes as `read_data(path)` returned them (read and decompressed earlier).
    """
    path = Path(path)
    failure: BaseException | None = None
    # millions of objects, none of them garbage (lme.util.heap): S's load spends 0.11 s in the collector instead of
    # 0.45 s (`python scripts/bench_tricks.py parse_pause --pairs 4`, 2026-12-07)
    with collection_paused():
        try:
            raw = _parse_json(path, data)
        except _JSON_FAILURES as exc:
            failure = exc  # said below, with the collector back: locating it streams the file again
        else:
            if not isinstance(raw, list):
                raise DataError(f"{path}: expected a JSON array of question records, found {type(raw).__name__}.")
            if not raw:
                raise DataError(f"{path}: holds no question (an empty JSON array).")
            questions = [parse_question(record, path, index) for index, record in enumerate(raw)]
    if failure is not None:
        raise _json_failure(path, failure) from None
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


def select(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """The first `limit` questions (all when `limit` is None)."""
    return list(questions if limit is None else questions[:limit])


def file_identity(path: str | Path) -> list[Any]:
    """The data file as a memory key sees it: resolved path, size and modification time."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return [str(resolved), stat.st_size, stat.st_mtime_ns]
