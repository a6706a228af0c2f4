"""Limits on what a LongMemEval file may hold beyond its shape, shared by both loaders.

- Text: every string lme uses (ids, question, answer, dates, roles, contents, and every
  string and key of any extra field) must be valid Unicode that can be written as UTF-8. A
  JSON escape of a lone UTF-16 surrogate (`"\\ud800"` with no low half after it, or a low half
  alone) is not: `json.load` turns it into a Python string that crashes the first write to a
  file, a database or the console. It is refused where the record is read.
- Nesting: at most `MAX_NESTING` arrays and objects open at once, counting the file's
  top-level array. A LongMemEval record needs 5 (the array of records, the record,
  `haystack_sessions`, a session, a turn); the cap leaves room for extra fields, and keeps the
  streaming reader's memory bounded (ijson's own item builder needs memory quadratic in depth)
  and the normal loader free of `RecursionError`.
- Integers: at most `MAX_INT_DIGITS` digits (an integer answer, an integer session id, any
  integer in an extra field). Python refuses to convert integers of more than 4,300 digits,
  and ijson refuses any beyond 64 bits; no LongMemEval count comes near 15 digits.
- Answers: a string answer must hold text (not empty, not only whitespace): the offline judge
  would otherwise call any response correct.

`RawRecords` reads the records of a file's top-level array from ijson's `basic_parse`
events, one record at a time, enforcing the nesting cap as it goes and knowing, when reading
fails, which record and field it was in. `SurrogateGuard` wraps the binary file handed to
ijson: ijson's C parser silently turns a lone high surrogate escape into "?" (or pairs it with
whatever escape follows), so the raw bytes are checked before the parser sees them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

MAX_NESTING = 64
RECORD_NESTING = 5  # what a LongMemEval record needs, the file's array included
MAX_INT_DIGITS = 15
_INT_LIMIT = 10**MAX_INT_DIGITS
INT_RULE = f"integers in a LongMemEval file must have at most {MAX_INT_DIGITS} digits"
NESTING_PROBLEM = (
    f"arrays and objects nested more than {MAX_NESTING} deep (a LongMemEval record needs {RECORD_NESTING}, "
    f"counting the file's array)"
)
EMPTY_ANSWER = "empty (a reference answer must hold text)"


def surrogate_problem(escape: str) -> str:
    return f"holds a lone UTF-16 surrogate ({escape}), which is not text and cannot be encoded as UTF-8"


def text_problem(value: str) -> str | None:
    """Why `value` is not text lme can write as UTF-8, or None when it is."""
    if value.isascii():  # O(1) in CPython: most strings stop here
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return surrogate_problem(f"\\u{ord(value[exc.start]):04x}")
    return None


def int_problem(value: int) -> str | None:
    """Why an integer is out of bounds, or None."""
    if -_INT_LIMIT < value < _INT_LIMIT:
        return None
    return f"integer too large ({INT_RULE})"


def printable(value: Any) -> bool:
    """Whether `value` is a non-empty string that can name a question in a message."""
    return isinstance(value, str) and bool(value) and text_problem(value) is None


def value_problem(value: Any, depth: int) -> tuple[str, str] | None:
    """The first problem inside a JSON value held `depth` containers deep: (where below the value,
    e.g. "[0].x" or "", the problem). Checks strings and keys (text), integers (bounds) and nesting;
    iterative, so any depth is safe."""
    stack: list[tuple[Any, str, int]] = [(value, "", depth)]
    while stack:
        item, where, level = stack.pop()
        problem: str | None = None
        if isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            problem = int_problem(item)
        elif isinstance(item, (dict, list)):
            if level + 1 > MAX_NESTING:
                return where, NESTING_PROBLEM
            if isinstance(item, dict):
                for key in item:
                    if (key_problem := text_problem(key)) is not None:
                        return where, f"a key {key_problem}"
                stack.extend((child, f"{where}.{key}", level + 1) for key, child in reversed(item.items()))
            else:
                stack.extend((child, f"{where}[{index}]", level + 1) for index, child in reversed(list(enumerate(item))))
        if problem is not None:
            return where, problem
    return None


def join_field(field: str, below: str) -> str:
    """`field` + a path below it from `value_problem` ("[0].x"), shortened (`short_field`)."""
    return short_field(f"{field}{below}" if below else field)


_FIELD_PART = re.compile(r"\[\d+\]|\.?[^.\[]+")
_FIELD_PARTS_SHOWN = 6


def short_field(field: str) -> str:
    """A field path of at most 6 parts: a path 60 arrays deep is named by its first 6, then "...".
    (Names cannot be told apart from path syntax when a key holds "." or "[": the cut is cosmetic.)"""
    parts = _FIELD_PART.findall(field)
    if len(parts) <= _FIELD_PARTS_SHOWN:
        return field
    return "".join(parts[:_FIELD_PARTS_SHOWN]) + "..."


# --- lone surrogates in the raw bytes -------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LOW_ESCAPE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_ESCAPE_LEN = 6
_PAIR_LEN = 2 * _ESCAPE_LEN


class SurrogateGuard:
    """A binary file for ijson that hands on the bytes up to the first lone surrogate escape, then ends.

    The parser then fails on an unfinished string; `found` (the escape, e.g. "\\ud800") says why,
    and the reader's position is the field that holds it. An escape counts when the backslash
    before `u` is itself unescaped (an odd run of backslashes); a high half (d800-dbff) must be
    followed at once by a low half (dc00-dfff), and a low half must follow a high one."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.found: str | None = None
        self._pending = b""  # read but not yet handed on: may end inside an escape or a run of backslashes
        self._done = False

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        while not self._done:
            chunk = self.raw.read(size if size and size > 0 else 1 << 16)
            final = not chunk
            buffer = self._pending + chunk if self._pending else chunk
            ready, bad = self._check(buffer, final)
            if bad is not None:
                self.found = buffer[bad : bad + _ESCAPE_LEN].decode("ascii").lower()
                self._done = True
                self._pending = b""
                return buffer[:bad]
            if final:
                self._done = True
                return buffer
            if ready == len(buffer):  # the usual case: nothing held back, nothing copied
                self._pending = b""
                return buffer
            self._pending = buffer[ready:]
            if ready:
                return buffer[:ready]
        return b""

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.raw.close()

    @staticmethod
    def _check(buffer: bytes, final: bool) -> tuple[int, int | None]:
        """(how many leading bytes are checked and may be handed on, offset of a lone escape or None)."""
        limit = len(buffer)
        if not final and buffer.find(b"\\", max(0, len(buffer) - _PAIR_LEN)) >= 0:
            limit -= _PAIR_LEN  # an escape may start near the end: its partner must be in view
        ready = max(limit, 0)
        covered = 0  # end of the last pair accepted (its low half is not looked at again)
        for match in _SURROGATE_ESCAPE.finditer(buffer):
            start = match.start()
            if start < covered:
                continue
            if start >= limit:
                ready = min(ready, start)
                break
            run = 1
            while start - run >= 0 and buffer[start - run] == 0x5C:  # backslashes before this one
                run += 1
            if run % 2 == 0:  # "\\ud800" is a backslash followed by the letters ud800
                continue
            high = buffer[start + 3] in b"89abAB"
            if high and _LOW_ESCAPE.match(buffer, start + _ESCAPE_LEN):
                covered = start + _PAIR_LEN
                continue
            return ready, start
        ready = max(ready, covered)  # never split an accepted pair
        # never split a run of backslashes: the next check must see all of it
        while 0 < ready and buffer[ready - 1] == 0x5C:
            ready -= 1
        return ready, None


# --- records from parser events -------------------------------------------------------------------


class TooDeep(Exception):
    """Raised by `RawRecords` when a container opens beyond `MAX_NESTING`."""


_STARTS = frozenset({"start_map", "start_array"})
_ENDS = frozenset({"end_map", "end_array"})


@dataclass(frozen=True, slots=True)
class Where:
    """Where reading was when it failed."""

    inside: bool = False  # inside a record (else between records)
    index: int = 0  # that record's index, or the records done
    question_id: str | None = None  # the record's question id, when read already and printable
    field: str = ""  # the field being read ("" for the record itself)
    in_key: bool = False  # the parser was reading a key of `field`, not its value


class RawRecords:
    """The values of a file's top-level array, built one at a time from ijson `basic_parse` events.

    Holds one record at a time. Raises `TooDeep` when nesting passes `MAX_NESTING`. When anything
    raises while reading (the parser, the decompressor, the nesting cap), `where` then says where
    reading was."""

    def __init__(self) -> None:
        self.count = 0
        self.where = Where()

    def records(self, events: Iterable[tuple[str, Any]]) -> Iterator[Any]:
        stack: list[Any] = []  # the open containers of the current record, its root first
        limit = MAX_NESTING - 1  # the file's own array is not on the stack
        key: Any = None
        event: str = ""
        opened = False  # the file's array has started
        try:
            for event, value in events:
                if event == "map_key":
                    key = value
                elif event in _STARTS:
                    if not opened:
                        opened = True
                        continue
                    new: Any = {} if event == "start_map" else []
                    if stack:
                        top = stack[-1]
                        if top.__class__ is dict:
                            top[key] = new
                        else:
                            top.append(new)
                    stack.append(new)
                    if len(stack) > limit:
                        raise TooDeep
                elif event in _ENDS:
                    if not stack:
                        continue  # the file's array ends; the parser still checks what follows
                    done = stack.pop()
                    if not stack:
                        self.count += 1
                        yield done
                elif stack:
                    top = stack[-1]
                    if top.__class__ is dict:
                        top[key] = value
                    else:
                        top.append(value)
                else:  # a record that is a plain value
                    self.count += 1
                    yield value
        except Exception as exc:
            self.where = self._locate(stack, key, pending=event == "map_key", opening=isinstance(exc, TooDeep))
            raise

    def _locate(self, stack: list[Any], key: Any, pending: bool, opening: bool) -> Where:
        """`pending`: a key was read and its value not yet; `opening`: the last container on the stack
        is the one being read (it just opened)."""
        if not stack:
            return Where(inside=False, index=self.count)
        root = stack[0]
        question_id = root.get("question_id") if isinstance(root, dict) else None
        parts: list[str] = []
        for parent, child in zip(stack, stack[1:]):
            if isinstance(parent, dict):
                name = next((k for k, v in reversed(parent.items()) if v is child), "?")
                parts.append(f".{name}")
            else:
                parts.append(f"[{len(parent) - 1}]")
        in_key = False
        top = stack[-1]
        if not opening:
            if isinstance(top, dict):
                if pending:
                    parts.append(f".{key}")
                else:
                    in_key = True
            else:
                parts.append(f"[{len(top)}]")
        field = short_field("".join(parts).lstrip("."))
        return Where(
            inside=True,
            index=self.count,
            question_id=question_id if printable(question_id) else None,
            field=field if printable(field) else "",
            in_key=in_key,
        )


def located(path: Path, where: Where, problem: str) -> str:
    """One sentence for a problem found while reading: the file, the question id (or record) and the field."""
    if not where.inside:
        return f"{path}: {f'after record {where.index - 1}: ' if where.index else ''}{problem}."
    subject = f"question {where.question_id}" if where.question_id else f"record {where.index}"
    return f"{path}: {subject}: {f'field {where.field}: ' if where.field else ''}{problem}."


def nested_past(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether JSON `text` opens more than `limit` arrays or objects at once (brackets in strings not counted),
    checked before the C parser sees it: its own depth check follows the recursion limit, and with the limit
    raised a deep enough text overflows the C stack. Text with few brackets (every row lme writes) is answered
    by a count alone. Used by the journal reader and the LoCoMo judge's template reader."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False
