"""Stream LongMemEval files one question at a time (`.json`, `.json.gz`, `.json.xz`).

LongMemEval-M is about 2.6 GB of JSON; `json.load` of it needs many times that
in memory. `iter_questions` reads the file with `ijson` (C backend when
installed) and holds one raw record and one `Question` at a time, validated by
the same `lme.data.load.parse_question` as the non-streaming loader, so every
bad record fails with the same one-sentence `DataError`.

Numbers: ijson is asked for floats (`use_float=True`), so a non-integer number
reaches validation as a `float` exactly as with `json.load`, and is reported
as "found float".

Records are built from ijson's `basic_parse` events by
`lme.data.validate.RawRecords`, one at a time, which knows where it is when
reading fails: malformed JSON (truncated, invalid bytes, trailing garbage...)
is reported in one sentence naming the file and the record being read (its
question id when the record had got that far), without reading the file again.
The same reader enforces `lme.data.validate`'s limits as it goes, naming the
record and field: nesting deeper than 64 (ijson's own `items` keeps a prefix
string per level, so its memory grows with the square of the depth: a file of
100,000 nested arrays needed tens of GB), a lone UTF-16 surrogate escape (which
ijson's parser would silently turn into "?"; `SurrogateGuard` finds it in the
raw bytes), an integer of more than 15 digits.

`scan_index` is a pass that keeps no history: ids, types and sizes of every
record, for counting and selecting before a run (one record held at a time).
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

from lme.data.parse import check_data_file, parse_question
from lme.data.records import Question
from lme.data.validate import (
    INT_RULE,
    MAX_NESTING,
    NESTING_PROBLEM,
    RawRecords,
    SurrogateGuard,
    TooDeep,
    Where,
    located,
    surrogate_problem,
)
from lme.util.errors import DataError, first_line

# What `type(value).__name__` of `json.load`'s result would be, from ijson's first event.
_TOP_LEVEL_TYPES: dict[str, str] = {
    "start_map": "dict",
    "string": "str",
    "boolean": "bool",
    "null": "NoneType",
}
_READ_ERRORS = (OSError, EOFError, lzma.LZMAError)


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
    back); only selected records are validated, and records without a usable
    id (which no selection can name: their error is reported); reading stops
    as soon as all have been found; an id the file does not hold fails after
    the whole file has been read (use `scan_index` first to fail early).
    """
    path = Path(path)
    _check_top_level(path)
    if question_ids is None:
        return _all_questions(path)
    wanted = list(dict.fromkeys(question_ids))
    return _selected_questions(path, wanted)


def scan_index(path: str | Path) -> list[IndexEntry]:
    """Ids, types and sizes of every record, in file order, without building any history.

    Memory stays small (one entry per record); costs one pass over the file's JSON events.
    Raises `DataError` on a missing, unreadable or malformed file, a top level that is not an
    array, or anything beyond `lme.data.validate`'s limits (nesting, lone surrogates, integer
    size), with the same sentence as `iter_questions`, and on a question id that repeats (a
    selection by id would otherwise stop at its first record); records are not otherwise validated.
    """
    path = Path(path)
    _check_top_level(path)
    try:
        with _open_binary(path) as handle:
            entries = _index_entries(ijson.basic_parse(SurrogateGuard(handle), use_float=True))
    except (TooDeep, ijson.JSONError, UnicodeDecodeError, *_READ_ERRORS) as exc:
        # read it again, building records, for the sentence that names the record and field
        found = first_problem(path)
        raise (found or DataError(f"{path}: cannot be read as {_kind(path)} ({_reason(exc)}).")) from None
    seen: set[str] = set()
    for entry in entries:
        if entry.question_id in seen:
            raise DataError(f"{path}: question {entry.question_id}: field question_id: duplicate id.")
        if entry.question_id is not None:
            seen.add(entry.question_id)
    return entries


def _index_entries(events: Iterable[tuple[str, Any]]) -> list[IndexEntry]:
    """IndexEntry per record from `basic_parse` events, counting without building (depth: containers
    open, the file's array being 1, a record 2, haystack_sessions 3, a session 4, a turn 5)."""
    entries: list[IndexEntry] = []
    depth = 0
    key: Any = None  # the record's current key
    record_is_map = in_sessions = session_is_list = False
    question_id: str | None = None
    question_type: str | None = None
    sessions = turns = 0
    for event, value in events:
        if event == "map_key":
            if depth == 2:
                key = value
        elif event == "start_map" or event == "start_array":
            depth += 1
            if depth > 3:
                if depth > MAX_NESTING:
                    raise TooDeep
                if in_sessions:
                    if depth == 4:
                        sessions += 1
                        session_is_list = event == "start_array"
                    elif depth == 5 and session_is_list:
                        turns += 1
            elif depth == 3:
                if record_is_map and key == "haystack_sessions" and event == "start_array":
                    in_sessions, sessions, turns = True, 0, 0
                elif record_is_map and key in ("question_id", "question_type"):
                    question_id = None if key == "question_id" else question_id
                    question_type = None if key == "question_type" else question_type
            elif depth == 2:
                record_is_map, key = event == "start_map", None
                question_id = question_type = None
                sessions = turns = 0
        elif event == "end_map" or event == "end_array":
            if depth == 3:
                in_sessions = False
            elif depth == 2:
                entries.append(IndexEntry(len(entries), question_id, question_type, sessions, turns))
            depth -= 1
        elif depth == 2:
            if record_is_map and key in ("question_id", "question_type"):
                text = value if event == "string" else None
                if key == "question_id":
                    question_id = text
                else:
                    question_type = text
        elif in_sessions:
            if depth == 3:
                sessions += 1
            elif depth == 4 and session_is_list:
                turns += 1
        elif depth == 1:  # a record that is a plain value
            entries.append(IndexEntry(len(entries), None, None, 0, 0))
    return entries


def first_problem(path: str | Path) -> DataError | None:
    """The sentence for the first thing in the file that stops reading (malformed JSON, nesting,
    a lone surrogate, a huge integer), or None when the whole file reads. Records are not validated."""
    try:
        _check_top_level(Path(path))
        for _ in _records(Path(path)):
            pass
    except DataError as exc:
        return exc
    return None


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
            if not isinstance(raw_id, str) or not raw_id:
                parse_question(record, path, index)  # no usable id: says what is wrong with the record
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


def check_top_level(path: str | Path) -> None:
    """`_check_top_level`: the file's first bytes, read as its suffix says (a few ms, whatever the file's size);
    what `python -m lme` checks of a data file before a run starts (`lme.study.before_run`)."""
    _check_top_level(Path(path))


def _check_top_level(path: Path) -> None:
    """Fail in one sentence unless the file's JSON is an array holding at least one value.

    Reads the first events with `basic_parse`: ijson's `parse` builds a prefix string per level for
    every event of a 64 KB block before handing on the first, which for a block of nothing but
    `[` is gigabytes."""
    check_data_file(path)
    guard: SurrogateGuard | None = None
    try:
        with _open_binary(path) as handle:
            while chunk := handle.read(1 << 16):
                if chunk.strip():
                    break
            else:
                raise DataError(f"{path}: is empty (no JSON in it).")
        with _open_binary(path) as handle:
            guard = SurrogateGuard(handle)
            events = iter(ijson.basic_parse(guard, use_float=True))
            event, value = next(events)
            if event == "start_array" and next(events)[0] == "end_array":
                raise DataError(f"{path}: holds no question (an empty JSON array).")
    except (ijson.JSONError, UnicodeDecodeError, *_READ_ERRORS) as exc:
        raise _read_error(path, exc, Where(), guard) from None
    if event != "start_array":
        found = _TOP_LEVEL_TYPES.get(event) or type(value).__name__
        raise DataError(f"{path}: expected a JSON array of question records, found {found}.")


def _records(path: Path) -> Iterator[Any]:
    """The raw records of the file's top-level array, one at a time."""
    reader = RawRecords()
    with _open_binary(path) as handle:
        guard = SurrogateGuard(handle)
        try:
            yield from reader.records(ijson.basic_parse(guard, use_float=True))
        except (TooDeep, ijson.JSONError, UnicodeDecodeError, *_READ_ERRORS) as exc:
            raise _read_error(path, exc, reader.where, guard) from None


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
    return first_line(text, fallback=type(exc).__name__).rstrip(".")


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


def _read_error(path: Path, exc: BaseException, where: Where, guard: SurrogateGuard | None) -> DataError:
    """One sentence for what stopped reading, naming the record (and, for the limits, the field) being read."""
    if isinstance(exc, TooDeep):
        return DataError(located(path, where, NESTING_PROBLEM))
    if guard is not None and guard.found is not None and isinstance(exc, ijson.JSONError):
        problem = surrogate_problem(guard.found)
        return DataError(located(path, where, f"a key {problem}" if where.in_key else problem))
    if isinstance(exc, ijson.JSONError):
        kind, reason = "not valid JSON", _reason(exc)
        if "integer overflow" in reason:
            return DataError(located(path, where, f"integer too large ({INT_RULE})"))
        if "overflow" in reason:
            return DataError(located(path, where, f"number too large ({reason})"))
        if "UTF8" in reason and (where_utf8 := _first_bad_utf8(path)):
            kind, reason = f"cannot be read as {_kind(path)}", where_utf8
    elif isinstance(exc, UnicodeDecodeError):  # bytes the parser let through, e.g. an encoded surrogate
        kind, reason = f"cannot be read as {_kind(path)}", _first_bad_utf8(path) or _reason(exc)
    else:
        kind, reason = f"cannot be read as {_kind(path)}", _reason(exc)
    if where.inside and where.question_id:
        return DataError(f"{path}: question {where.question_id}: {kind} in record {where.index} ({reason}).")
    if where.inside:
        return DataError(f"{path}: record {where.index}: {kind} ({reason}).")
    if where.index:
        return DataError(f"{path}: {kind} after record {where.index - 1} ({reason}).")
    return DataError(f"{path}: {kind} ({reason}).")
