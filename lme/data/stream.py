"""Stream LongMemEval files one question at a time (`.json`, `.json.gz`, `.json.xz`).

LongMemEval-M is about 2.6 GB of JSON; `json.load` of it needs many times that
in memory. `iter_questions` reads the file with `ijson` (C backend when
installed) and holds one raw record and one `Question` at a time, validated by
the same `lme.data.load.parse_question` as the non-streaming loader, so every
bad record fails with the same one-sentence `DataError`.

Numbers: ijson is asked for floats (`use_float=True`), so a non-integer number
reaches validation as a `float` exactly as with `json.load`, and is reported
as "found float".

Malformed JSON (truncated, invalid bytes, trailing garbage...) is reported in
one sentence naming the file and the record being read (its question id when
the record had got that far). ijson does not report positions, so on that
error path only the file is read a second time, up to the error, to find the
record; the normal path reads it once.

`scan_index` is a cheap pass that builds no history: ids, types and sizes of
every record, for counting and selecting before a run.
"""

from __future__ import annotations

import ast
import codecs
import gzip
import lzma
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import ijson

from lme.data.load import parse_question
from lme.data.records import Question
from lme.errors import DataError

# What `type(value).__name__` of `json.load`'s result would be, from ijson's first event.
_TOP_LEVEL_TYPES: dict[str, str] = {
    "start_map": "dict",
    "string": "str",
    "boolean": "bool",
    "null": "NoneType",
}
_READ_ERRORS = (OSError, EOFError, lzma.LZMAError)
_SCALARS = frozenset({"string", "number", "boolean", "null"})
_VALUE_STARTS = _SCALARS | {"start_map", "start_array"}  # events that begin a value
_VALUE_ENDS = _SCALARS | {"end_map", "end_array"}  # events that complete a value


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One record as `scan_index` sees it, without building its history."""

    index: int  # position in the file's array, from 0
    question_id: str | None  # None when missing or not a string
    question_type: str | None  # None when missing or not a string
    sessions: int  # items of haystack_sessions
    turns: int  # turns over all sessions


def iter_questions(path: str | Path, question_ids: Iterable[str] | None = None) -> Iterator[Question]:
    """Validated `Question`s of a LongMemEval file, one at a time, in file order.

    Holds one record in memory at a time. Ids are checked for duplicates as
    records are read. A file that is missing, empty, not a JSON array or an
    empty array fails here, at the call; a bad record fails when iteration
    reaches it, after every record before it has been yielded.

    `question_ids`, when given, selects those questions. They are yielded in
    file order (not in the order given, which would mean holding questions
    back); only selected records are validated; reading stops as soon as all
    have been found; an id the file does not hold fails after the whole file
    has been read (use `scan_index` first to fail early).
    """
    path = Path(path)
    _check_top_level(path)
    if question_ids is None:
        return _all_questions(path)
    wanted = list(dict.fromkeys(question_ids))
    return _selected_questions(path, wanted)


def scan_index(path: str | Path) -> list[IndexEntry]:
    """Ids, types and sizes of every record, in file order, without building any history.

    Memory stays small (one entry per record); costs one pass over the file's
    JSON events. Raises `DataError` on a missing, unreadable or malformed file
    or a top level that is not an array; records themselves are not validated.
    """
    path = Path(path)
    _check_top_level(path)
    entries: list[IndexEntry] = []
    current: dict[str, Any] = {}
    try:
        with _open_binary(path) as handle:
            for prefix, event, value in ijson.parse(handle, use_float=True):
                if prefix == "item":
                    if event in _VALUE_STARTS:
                        current = {"question_id": None, "question_type": None, "sessions": 0, "turns": 0}
                    if event in _VALUE_ENDS:
                        entries.append(IndexEntry(index=len(entries), **current))
                elif event not in _VALUE_STARTS:
                    continue
                elif prefix in ("item.question_id", "item.question_type"):
                    current[prefix[5:]] = value if event == "string" else None
                elif prefix == "item.haystack_sessions.item":
                    current["sessions"] += 1
                elif prefix == "item.haystack_sessions.item.item":
                    current["turns"] += 1
    except (ijson.JSONError, *_READ_ERRORS) as exc:
        raise _located_error(path, exc, len(entries)) from None
    return entries


def count_questions(path: str | Path) -> int:
    """How many records the file's array holds (one cheap pass, no history built)."""
    return len(scan_index(path))


# --- the two iteration modes ----------------------------------------------------


def _all_questions(path: Path) -> Iterator[Question]:
    seen: set[str] = set()
    for index, record in enumerate(_records(path)):
        question = parse_question(record, path, index)
        if question.question_id in seen:
            raise DataError(f"{path}: question {question.question_id}: field question_id: duplicate id.")
        seen.add(question.question_id)
        yield question


def _selected_questions(path: Path, wanted: list[str]) -> Iterator[Question]:
    remaining = set(wanted)
    seen: set[str] = set()
    if remaining:
        for index, record in enumerate(_records(path)):
            raw_id = record.get("question_id") if isinstance(record, dict) else None
            if not isinstance(raw_id, str):
                continue
            if raw_id in seen:
                raise DataError(f"{path}: question {raw_id}: field question_id: duplicate id.")
            seen.add(raw_id)
            if raw_id in remaining:
                yield parse_question(record, path, index)
                remaining.discard(raw_id)
                if not remaining:
                    return
    for question_id in wanted:
        if question_id in remaining:
            raise DataError(f"{path}: question {question_id} selected in the config is not in the file.")


# --- reading ---------------------------------------------------------------------


def _kind(path: Path) -> str:
    """What the file should be, as the non-streaming loader words it."""
    return {".gz": "gzip-compressed UTF-8 JSON", ".xz": "xz-compressed UTF-8 JSON"}.get(path.suffix, "UTF-8 JSON")


def _open_binary(path: Path) -> IO[bytes]:
    opener: Callable[..., IO[bytes]] = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    try:
        return opener(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found.") from None
    except _READ_ERRORS as exc:
        raise DataError(f"{path}: cannot be read as {_kind(path)} ({exc}).") from None


def _check_top_level(path: Path) -> None:
    """Fail in one sentence unless the file's JSON is an array holding at least one value."""
    if not path.exists():
        raise DataError(f"{path}: file not found.")
    try:
        with _open_binary(path) as handle:
            while chunk := handle.read(1 << 16):
                if chunk.strip():
                    break
            else:
                raise DataError(f"{path}: is empty (no JSON in it).")
        with _open_binary(path) as handle:
            events = iter(ijson.parse(handle, use_float=True))
            _, event, value = next(events)
            if event == "start_array" and next(events)[:2] == ("", "end_array"):
                raise DataError(f"{path}: holds no question (an empty JSON array).")
    except (ijson.JSONError, *_READ_ERRORS) as exc:
        raise _located_error(path, exc, 0) from None
    if event != "start_array":
        found = _TOP_LEVEL_TYPES.get(event) or type(value).__name__
        raise DataError(f"{path}: expected a JSON array of question records, found {found}.")


def _records(path: Path) -> Iterator[Any]:
    """The raw records of the file's top-level array, one at a time."""
    count = 0
    try:
        with _open_binary(path) as handle:
            for record in ijson.items(handle, "item", use_float=True):
                yield record
                count += 1
    except (ijson.JSONError, *_READ_ERRORS) as exc:
        raise _located_error(path, exc, count) from None


def _reason(exc: BaseException) -> str:
    """The first line of a parser or decompressor message, without the echoed input or a final period."""
    if isinstance(exc, EOFError) and not str(exc):
        return "the compressed data ends early"
    text = str(exc)
    if text[:2] in ("b'", 'b"'):  # ijson's C backend sometimes gives the message as bytes
        try:
            text = ast.literal_eval(text).decode("utf-8", "replace")
        except (ValueError, SyntaxError, AttributeError):
            pass
    first = text.strip().splitlines()[0].strip() if text.strip() else type(exc).__name__
    return first.rstrip(".")


def _first_bad_utf8(path: Path) -> str | None:
    """Where the file's (decompressed) bytes first stop being UTF-8, as a clause; None when they never do."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with _open_binary(path) as handle:
            while chunk := handle.read(1 << 20):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    return f"byte 0x{exc.object[exc.start]:02x} at offset {offset + exc.start} is not UTF-8: {exc.reason}"
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        return f"the file ends inside a UTF-8 character at offset {offset + exc.start}"
    except (*_READ_ERRORS, DataError):
        return None
    return None


def _located_error(path: Path, exc: BaseException, records_read: int) -> DataError:
    """One sentence for a read or parse error, naming the record being read (re-reads up to the error)."""
    if isinstance(exc, ijson.JSONError):
        kind, reason = "not valid JSON", _reason(exc)
        if "UTF8" in reason and (where_utf8 := _first_bad_utf8(path)):
            kind, reason = f"cannot be read as {_kind(path)}", where_utf8
    else:
        kind, reason = f"cannot be read as {_kind(path)}", _reason(exc)
    where = _locate_failure(path)
    if where is None:  # the second read did not fail: name what the first one knew
        where = (True, records_read, None)
    inside, index, question_id = where
    if inside and question_id:
        return DataError(f"{path}: question {question_id}: {kind} in record {index} ({reason}).")
    if inside:
        return DataError(f"{path}: record {index}: {kind} ({reason}).")
    if index:
        return DataError(f"{path}: {kind} after record {index - 1} ({reason}).")
    return DataError(f"{path}: {kind} ({reason}).")


def _locate_failure(path: Path) -> tuple[bool, int, str | None] | None:
    """Where reading fails: (inside a record?, that record's index or records done, its question id).

    None when the file reads without error this time.
    """
    index = 0
    inside = False
    question_id: str | None = None
    try:
        with _open_binary(path) as handle:
            for prefix, event, value in ijson.parse(handle, use_float=True):
                if prefix == "item.question_id" and event == "string":
                    question_id = value
                elif prefix == "item" and event in _VALUE_STARTS:
                    inside, question_id = True, None
                if prefix == "item" and event in _VALUE_ENDS:
                    inside, index = False, index + 1
    except (ijson.JSONError, *_READ_ERRORS, DataError):
        return inside, index, question_id if inside else None
    return None
