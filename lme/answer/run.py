"""One job: every selected question through memory, reader, re-read rules and judge.

Per question: the first pass (the first-pass memory and instruction), then each
rule in configured order (`lme.answer.rules`). A rule that fires re-reads: its
view's memory (built once per question and view) and its own instruction; a
re-read's answer replaces the current one, a failed re-read (call error or
empty answer) keeps it. Every step is recorded in `Outcome.steps`, also a rule
that did not fire, and the judge rules on the current answer after each step
(a step that leaves the answer unchanged reuses the verdict, with no call).

A memory that cannot be built (a model-built memory whose call failed or gave no text: `MemoryFailed`)
ends its question at that step, with no reader call on it: the outcome has no answer and names the memory
step, its model and the reason (`memory_error`, also `reader_error`), counts as missing like a failed
first pass, and is asked again on a rerun. The memory's model calls (tokens, dollars, cached or paid) are
counted per step and per outcome (`memory`).

A re-read whose request (memory text + instruction) was already sent for this
question, as the second `decline` (over the same view, or over another view whose
memory came out the same), is a new call and not the
cached answer of the first (`repeat_marker`): under lme's payload it carries
`"attempt": n` in its JSON; under the study's (`reader.payload=study`) the model
reads exactly the study's three keys on every step, and the repeat is marked in
the call's cache key only (`lme.models.cache.call_key`'s `repeat`). Every reader
call is keyed by the run's seed.

Questions run concurrently (bounded); each `Outcome` is appended to the job's
JSONL journal as soon as it completes, so a killed job keeps everything that
finished. A journal that already holds outcomes is resumed: those questions are
not asked again.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from lme.answer.reader import Reader, build_reader_messages
from lme.answer.rules import FIRST_PASS_VIEW, RuleStep, route_instruction
from lme.data.records import Question
from lme.data.validate import MAX_NESTING, nested_past
from lme.util.errors import LmeError, first_line
from lme.util.hashing import sha256_text
from lme.judge import Judge, Verdict
from lme.memory.base import Memory, MemoryBuilder, MemoryFailed
from lme.models.gateway import CallResult, Gateway
from lme.models.ledger import BudgetExhausted
from lme.models.pricing import INPUT

FIRST_PASS = "first_pass"  # the step name of the first read

# The format of an `outcomes.jsonl` row, written as its `"format"` key. Format 1 is the rows lme wrote
# before the key existed: the same fields, no `format`. Readers accept `READABLE_JOURNAL_FORMATS` and refuse
# any other format rather than misread it; a change to the row that an older reader would misread is a new
# format (and the previous one stays readable). Format 3 adds the memory step's model calls (`memory`) and
# failure (`memory_error`) to the outcome and to each step; rows of formats 1 and 2 read with none.
JOURNAL_FORMAT = 3
READABLE_JOURNAL_FORMATS = (1, 2, 3)


@dataclass(frozen=True)
class CallStats:
    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # what the answer costs at list price, cached or not
    spent_usd: float = 0.0  # what this job paid (calls not served from the cache)
    unpriced_calls: int = 0
    cached_input_tokens: int = 0  # of input_tokens, those the provider served from its prompt cache
    cached_input_at_input_price: int = 0  # of those, the ones priced as input (no cache-read price known)

    @classmethod
    def of(cls, call: CallResult | None) -> CallStats:
        if call is None:
            return cls()
        cost = call.cost_usd or 0.0
        return cls(
            calls=1,
            cached_calls=int(call.cached),
            failed_calls=int(not call.ok),
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cost_usd=cost,
            spent_usd=0.0 if call.cached else cost,
            unpriced_calls=int(call.ok and call.cost_usd is None),
            cached_input_tokens=call.cached_input_tokens,
            cached_input_at_input_price=call.cached_input_tokens if call.cached_input_price == INPUT else 0,
        )

    def __add__(self, other: CallStats) -> CallStats:
        return CallStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def total(cls, parts: Iterable[CallStats]) -> CallStats:
        result = cls()
        for part in parts:
            result = result + part
        return result

    @classmethod
    def of_calls(cls, calls: Iterable[CallResult]) -> CallStats:
        """The calls summed (a memory's model calls: `Memory.model_calls`, `MemoryFailed.calls`)."""
        return cls.total(cls.of(call) for call in calls)


@dataclass(frozen=True)
class SystemStats:
    """What an external memory system did for a question's first-pass memory (`lme.memory.systems.base` notes):
    its history's namespace, the sessions ingested by this build (`ingested_now`) and those already there, and
    this build's ingestion: seconds in the system's `ingest`, its model calls, tokens and list-price dollars
    (all 0 when nothing was ingested now, so a history's ingestion is counted once, on the question that did
    it), what the system says the ingestion cost (`reported_cost_usd`, None: not reported); the search's
    latency, model calls and dollars, the wait for readiness, the results returned and those the reader got."""

    system: str
    namespace: str
    sessions: int = 0
    ingested_now: int = 0
    ingested_reused: int = 0
    ingest_s: float = 0.0
    ingest_calls: int = 0
    ingest_input_tokens: int = 0
    ingest_output_tokens: int = 0
    ingest_cost_usd: float = 0.0
    reported_cost_usd: float | None = None
    search_latency_ms: float = 0.0
    search_calls: int = 0
    search_cost_usd: float = 0.0
    ready_wait_s: float = 0.0
    results: int = 0
    included: int = 0

    @classmethod
    def of(cls, memory: Memory | None) -> SystemStats | None:
        """The stats in a memory system's notes (None: not a memory system's memory, or an estimate's plan).
        A memory whose history was ingested by an earlier build (`ingested_now` 0: another question, job or
        process) counts no ingestion."""
        notes = memory.notes if memory is not None else {}
        if "namespace" not in notes or "ingested_now" not in notes:
            return None

        def number(key: str, kind: Any = int) -> Any:
            try:
                return kind(notes.get(key, 0) or 0)
            except ValueError:
                return kind(0)

        now = number("ingested_now")
        ingest = {"ingest_s": number("ingest_s", float), "ingest_calls": number("ingest_calls"),
                  "ingest_input_tokens": number("ingest_input_tokens"),
                  "ingest_output_tokens": number("ingest_output_tokens"),
                  "ingest_cost_usd": number("ingest_cost_usd", float),
                  "reported_cost_usd": number("ingest_reported_cost_usd", float)
                  if "ingest_reported_cost_usd" in notes else None} if now else {}
        return cls(system=str(notes.get("system", "")), namespace=str(notes["namespace"]),
                   sessions=number("sessions"), ingested_now=now, ingested_reused=number("ingested_reused"),
                   search_latency_ms=number("search_latency_ms", float), search_calls=number("search_calls"),
                   search_cost_usd=number("search_cost_usd", float), ready_wait_s=number("ready_wait_s", float),
                   results=number("results"), included=number("included"), **ingest)


@dataclass(frozen=True)
class Step:
    """One step of a question: the first pass, or a rule in configured order (also when it did not fire)."""

    rule: str  # "first_pass" or the rule's name
    view: str  # the memory the step reads: "first_pass" or a view's name
    instruction_sha256: str
    chosen: bool  # the trigger matched (always true for the first pass)
    reread: bool  # a re-read call was made (false for the first pass, which is the read itself)
    failed: bool  # the step's call failed or gave an empty answer
    error: str | None
    step_answer: str | None  # this call's own answer (None: no call, or it failed)
    answer: str | None  # the current answer after this step
    correct: bool | None  # the verdict on `answer` after this step; None without a judge
    reader: CallStats = field(default_factory=CallStats)
    judge: CallStats = field(default_factory=CallStats)
    judge_error: str | None = None  # the judge call on this step's answer failed: why
    memory: CallStats = field(default_factory=CallStats)  # the model calls of the memory this step built first
    memory_error: str | None = None  # its memory could not be built (`MemoryFailed`): no reader call was made

    @classmethod
    def from_dict(cls, raw: Any, source: str | Path | None = None) -> Step:
        """A step from a journal row's `steps` item; `LmeError` when it is not of the right shape."""
        where = str(source) if source is not None else "a journal row's step"
        return _build(cls, raw, where, "")


@dataclass(frozen=True)
class Outcome:
    question_id: str
    question_type: str
    abstention: bool
    answer: str | None  # the final answer; None when every read that could give one failed
    correct: bool  # the verdict on the final answer
    reader_error: str | None  # why there is no final answer (the first pass's error); None when there is one
    judge_reply: str | None
    judge_note: str
    memory_bytes: int
    memory_turns: int
    reader: CallStats = field(default_factory=CallStats)  # summed over the steps
    judge: CallStats = field(default_factory=CallStats)  # summed over the steps
    seconds: float = 0.0
    steps: tuple[Step, ...] = ()  # the first pass, then every configured rule in order
    judge_error: str | None = None  # the verdict on the final answer is missing: why (its judge call failed)
    memory: CallStats = field(default_factory=CallStats)  # a model-built memory's calls, summed over the steps
    memory_error: str | None = None  # a memory step failed (`MemoryFailed`): no answer, and why
    # A LoCoMo question's scoring inputs (`locomo_fields`). Any other benchmark's outcome has category 0 and its row
    # omits the three keys (`outcome_row`); the row parser knows plain types, so no None here.
    category: int = 0  # LoCoMo's category number, 1-5; 0: not a LoCoMo question
    reference_answer: str = ""  # the reference as LoCoMo scores it (`scored_reference`)
    locomo_f1: float = 0.0  # LoCoMo's F1 of `answer` (a missing answer: 0.0)
    # An external memory system's figures for the first-pass memory (`SystemStats`); None (and no `system` key in
    # the row, `outcome_row`) for every other memory
    system: SystemStats | None = None

    @property
    def complete(self) -> bool:
        """The question has an answer and a verdict on it, every memory built (a rerun asks again for
        anything less)."""
        return self.answer is not None and self.judge_error is None and self.memory_error is None

    @property
    def verdict(self) -> str:
        """`correct`, `wrong`, or `missing` (no answer, or no verdict on it)."""
        return verdict_word(self.answer, self.correct, self.judge_error)

    def to_json(self) -> str:
        """The journal row: the outcome's fields and `"format": JOURNAL_FORMAT`, on one line. Text is kept as
        it is (UTF-8) unless it holds something UTF-8 cannot carry (a lone surrogate in a model's reply): that
        row is written with JSON escapes instead, and reads back the same."""
        row = {"format": JOURNAL_FORMAT, **outcome_row(self)}
        line = json.dumps(row, ensure_ascii=False, sort_keys=True)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            line = json.dumps(row, ensure_ascii=True, sort_keys=True)
        return line

    @classmethod
    def from_dict(cls, raw: Any, source: str | Path | None = None) -> Outcome:
        """An outcome from a journal row of a readable format (`source`, the file and line, names it in the
        error); `LmeError` for a row of another format (a newer lme wrote it) or of the wrong shape (see
        `outcome_from_row`)."""
        return outcome_from_row(raw, source)


LOCOMO_KEYS = ("category", "reference_answer", "locomo_f1")  # an outcome row's keys only a LoCoMo question has


def outcome_row(outcome: Outcome) -> dict[str, Any]:
    """The outcome as a row (`asdict`), without `LOCOMO_KEYS` when it is not a LoCoMo question's (`category` 0)
    and without `system` when its memory is not a memory system's: a row keeps exactly the keys it had before
    LoCoMo and memory systems came."""
    row = asdict(outcome)
    if not outcome.category:
        for key in LOCOMO_KEYS:
            del row[key]
    if outcome.system is None:
        del row["system"]
    return row


def locomo_fields(question: Question, answer: str | None) -> dict[str, Any]:
    """What LoCoMo's measures are computed from, for a LoCoMo question (`{}` for any other): its `category`
    number, the `reference_answer` as LoCoMo scores it (`scored_reference` of the question's answer: for an
    adversarial question without one, lme's "Not mentioned in the conversation", which category 5's rule never
    reads) and the `locomo_f1` of the final answer (a missing answer scores 0.0)."""
    if question.benchmark != "locomo":
        return {}
    from lme.reporting.locomo_f1 import category_number, question_f1, scored_reference

    number = category_number(question.question_type)
    reference = scored_reference(question.answer, None, number)
    return {"category": number, "reference_answer": reference,
            "locomo_f1": question_f1(answer, reference, number)}


def journal_format(value: Any, source: str | Path | None = None) -> int:
    """The format of a journal row (its `"format"` value; 1 when absent), or `LmeError` when this lme
    cannot read it."""
    if type(value) is int and value in READABLE_JOURNAL_FORMATS:
        return value
    where = f"{source}" if source is not None else "an outcomes.jsonl file"
    raise LmeError(
        f"{where} holds an outcome row of format {_shown(value)}, which this version of lme cannot read (it reads "
        f"formats {', '.join(map(str, READABLE_JOURNAL_FORMATS))}); use the lme version that wrote it."
    )


# --- reading a journal row back: every field checked against its type ----------------------------------

_ROW_ADVICE = "this is not an outcome row lme wrote: restore the file, or delete that line to have its question asked again"


def _shown(value: Any) -> str:
    """A stored value in an error sentence: short, one line, whatever it holds."""
    import reprlib

    shown = reprlib.Repr()
    shown.maxlevel, shown.maxstring, shown.maxother = 2, 40, 40
    return shown.repr(value).replace("\n", " ")


def _kind(value: Any) -> str:
    """What a stored value is, in words (`a list`, `a string`, `null`)."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), f"a {type(value).__name__}")


def _bad(where: str, field: str, problem: str) -> LmeError:
    return LmeError(f"{where}: {'field ' + field + ' ' if field else ''}{problem}; {_ROW_ADVICE}.")


def _check_value(kind: str, value: Any, where: str, field: str) -> Any:
    """`value` checked against a field's annotation (`str`, `int`, `float`, `bool`, `str | None`, ...)."""
    optional = kind.endswith(" | None")
    base = kind.removesuffix(" | None")
    if value is None and optional:
        return None
    expected = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false"}[base]
    if optional:
        expected += " or null"
    if base == "str" and type(value) is str:
        return value
    if base == "bool" and type(value) is bool:
        return value
    if base == "int" and type(value) is int:
        return value
    if base == "float" and type(value) in (int, float):
        if not math.isfinite(value):
            raise _bad(where, field, f"is {value!r}, not a finite number")
        return float(value)
    raise _bad(where, field, f"is {_kind(value)} ({_shown(value)}), not {expected}")


def _build(cls: Any, raw: Any, where: str, prefix: str) -> Any:
    """An instance of the frozen dataclass `cls` (`CallStats`, `Step`, `Outcome`) from a journal row's
    object `raw`: every key a field of `cls`, every value of its field's type, every field without a default
    present; `LmeError` naming the field (`prefix` + its name) otherwise."""
    if not isinstance(raw, dict):
        raise _bad(where, prefix.rstrip("."), f"is {_kind(raw)}, not an object")
    spec = {f.name: f for f in fields(cls)}
    unknown = [key for key in raw if key not in spec]
    if unknown:
        raise _bad(where, "", f"holds the unknown field {prefix}{_shown(unknown[0])}")
    values: dict[str, Any] = {}
    for name, spec_field in spec.items():
        label = prefix + name
        if name not in raw:
            if spec_field.default is MISSING and spec_field.default_factory is MISSING:
                raise _bad(where, label, "is missing")
            continue
        value, kind = raw[name], str(spec_field.type)
        if kind == "CallStats":
            values[name] = CallStats() if value is None and name == "memory" else _build(CallStats, value, where,
                                                                                         label + ".")
        elif kind == "SystemStats | None":
            values[name] = None if value is None else _build(SystemStats, value, where, label + ".")
        elif kind == "tuple[Step, ...]":
            if value is None:
                values[name] = ()
                continue
            if not isinstance(value, list):
                raise _bad(where, label, f"is {_kind(value)}, not a list")
            values[name] = tuple(_build(Step, item, where, f"{label}[{index}].") for index, item in enumerate(value))
        else:
            values[name] = _check_value(kind, value, where, label)
    if cls is SystemStats and not values.get("namespace"):
        raise _bad(where, prefix + "namespace", "is missing or empty")
    if cls is Outcome and not values["question_id"]:
        raise _bad(where, "question_id", "is empty")
    return cls(**values)


def outcome_from_row(raw: Any, source: str | Path | None = None) -> Outcome:
    """The outcome of one journal row (a parsed JSON object), every field checked: the row is an object, its
    `format` one this lme reads (`journal_format`), every key a field of `Outcome` (of its steps, of their
    call counts), every value of its field's type (`question_id` a non-empty string, counts integers, dollars
    finite numbers, ...). Anything else is one `LmeError` sentence naming `source` and the field."""
    where = str(source) if source is not None else "a journal row"
    if not isinstance(raw, dict):
        raise _bad(where, "", f"is {_kind(raw)} ({_shown(raw)}), not an object")
    row = dict(raw)
    journal_format(row.pop("format", 1), where)
    return _build(Outcome, row, where, "")


JOURNAL_NESTING = MAX_NESTING  # arrays and objects open at once in a journal line (lme's rows need a handful)


class JournalLineError(LmeError):
    """A journal line that is not JSON at all (as a line cut by a kill is); `LmeError`'s sentence."""


def parse_journal_line(line: str, source: str | Path | None = None) -> Outcome:
    """One line of `outcomes.jsonl` (without its newline) as an `Outcome`. Any text either gives an outcome
    or raises `LmeError` (`JournalLineError` when the line is not JSON), one sentence naming `source`
    (the file and line number): never another exception, also for JSON nested past Python's recursion
    limit or numbers too long to convert."""
    where = str(source) if source is not None else "a journal line"
    try:
        if nested_past(line, JOURNAL_NESTING):  # before the C parser, whose depth check follows the recursion
            raise RecursionError  # limit: raised high (a library, a test) it would overflow the C stack instead
        raw = json.loads(line)
    except RecursionError:
        raise JournalLineError(f"{where}: JSON nested too deeply to read; {_ROW_ADVICE}.") from None
    except json.JSONDecodeError as exc:
        raise JournalLineError(f"{where}: not a JSON row ({first_line(exc)}); {_ROW_ADVICE}.") from None
    except ValueError:  # an integer past Python's digit limit (4300 digits)
        raise JournalLineError(f"{where}: holds a number too long to read; {_ROW_ADVICE}.") from None
    return outcome_from_row(raw, where)


class Journal:
    """Append-only JSONL of outcomes; one line per completed question.

    Reading it checks every line (`parse_journal_line`). One recovery is documented: the last line, when it
    has no newline after it and is the start of a row that does not parse (a kill or a crash mid-write), is
    dropped and its question asked again. Any other line that is not a valid row (not JSON, not UTF-8,
    nested too deeply, a field missing or of the wrong type), a row of a format this lme cannot read
    (`READABLE_JOURNAL_FORMATS`), or a file that cannot be read (a directory, a device, a permission or I/O
    error) raises `LmeError` naming the file and line, and the file is left as it is.

    `resume` prepares a journal for a rerun: the cut last line is dropped, and so are the outcomes that
    lack an answer or a verdict, so those questions run again; the file is rewritten (atomically: a full
    disk leaves it as it was) only when something was dropped or its last line lacks its newline, and is
    never appended onto a cut line. Every complete outcome is kept.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LmeError(f"{self.path.parent}: the job's folder cannot be made ({exc.strerror or type(exc).__name__});"
                           " pick another run directory or fix the path.") from None
        self._lock = threading.Lock()  # appends come from worker threads: one whole line at a time

    def _bytes(self) -> bytes | None:
        """The file's bytes; None when there is no file (a new job). `LmeError` when it cannot be read."""
        try:
            mode = os.stat(self.path).st_mode  # follows a link: what it points to
        except FileNotFoundError:
            if os.path.islink(self.path):
                raise LmeError(f"{self.path}: a link to a file that does not exist ({os.readlink(self.path)}); "
                               "restore the job's journal or remove the link.") from None
            return None
        except OSError as exc:  # a loop of links, a name too long, a folder in the path that is a file
            raise LmeError(f"{self.path}: the job's journal cannot be read ({exc.strerror or type(exc).__name__}); "
                           "restore the file or move it away.") from None
        if stat.S_ISDIR(mode):
            raise LmeError(f"{self.path}: a directory where the job's journal (outcomes.jsonl) should be; move it "
                           "away (its questions are then asked again) or restore the file.")
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
            raise LmeError(f"{self.path}: not a regular file (a pipe, socket or device) where the job's journal "
                           "should be; move it away or restore the file.")
        try:
            with self.path.open("rb") as handle:
                return handle.read()
        except OSError as exc:
            raise LmeError(f"{self.path}: the job's journal cannot be read ({exc.strerror or type(exc).__name__}); "
                           "check the file and its permissions.") from None

    def _scan(self) -> tuple[list[Outcome], int, bool]:
        """One read of the file: (the outcomes, a later line for a question replacing an earlier; 1 when the
        last line was cut by a kill, else 0; whether the file is already as a rewrite would leave it)."""
        data = self._bytes()
        if data is None:
            return [], 0, True
        by_id: dict[str, Outcome] = {}
        broken = lines = 0
        segments = data.split(b"\n")
        for index, segment in enumerate(segments):
            if not segment.strip():
                continue
            lines += 1
            where = f"{self.path}, line {index + 1}"
            cut = index == len(segments) - 1 and segment.lstrip().startswith(b"{")  # no newline after it
            try:
                text = segment.decode("utf-8")
            except UnicodeDecodeError as exc:
                if cut:  # a kill can cut a line inside a character
                    broken += 1
                    continue
                raise LmeError(f"{where}: not UTF-8 text (byte {exc.start} of the line); {_ROW_ADVICE}.") from None
            try:
                outcome = parse_journal_line(text, where)
            except JournalLineError:
                if cut:  # the start of a row, cut by a kill or a crash: that question runs again
                    broken += 1
                    continue
                raise
            by_id.pop(outcome.question_id, None)
            by_id[outcome.question_id] = outcome
        # a whole last line without its newline would be joined by the next append; a repeated id is redone
        tidy = not broken and lines == len(by_id) and (not data or data.endswith(b"\n"))
        return list(by_id.values()), broken, tidy

    def read(self) -> list[Outcome]:
        return self._scan()[0]

    def resume(self) -> tuple[dict[str, Outcome], dict[str, int]]:
        """The outcomes a rerun keeps, by question id, and what was dropped: `{"broken": the last line, cut
        by a kill, "incomplete": outcomes without an answer or a verdict}`."""
        outcomes, broken, tidy = self._scan()
        kept = {o.question_id: o for o in outcomes if o.complete}
        dropped = {"broken": broken, "incomplete": len(outcomes) - len(kept)}
        if not tidy or dropped["incomplete"]:
            self._rewrite(list(kept.values()))
        return kept, dropped

    def _rewrite(self, outcomes: list[Outcome]) -> None:
        from lme.util.files import write_bytes_atomic

        data = "".join(outcome.to_json() + "\n" for outcome in outcomes).encode("utf-8")
        with self._lock:
            write_bytes_atomic(self.path, data)  # whole or not at all; a refusal is one sentence

    def append(self, outcome: Outcome) -> None:
        line = outcome.to_json() + "\n"
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())  # a completed question survives a crash of the machine, not only of lme
        except OSError as exc:
            raise LmeError(f"{self.path}: the outcome of question {outcome.question_id} could not be journaled "
                           f"({exc.strerror or type(exc).__name__}); the questions journaled before it are kept: "
                           "free space or fix the folder, then rerun the same command to resume.") from None


@dataclass(frozen=True)
class MemoryEvent:
    """A memory built for a question (the first pass's or a view's), with its wall-clock span (ns)."""

    view: str
    memory: Memory
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReadEvent:
    """A reader call: the step, the view read, the exact messages sent, the result, its wall-clock span."""

    step: str
    view: str
    messages: list[dict[str, Any]]
    call: CallResult
    attempt: int  # 1, or n for the n-th identical read (`repeat_marker`: in the payload or the cache key)
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class JudgeEvent:
    """A judge call on an answer (a verdict reused for the same answer is not a new event)."""

    step: str
    answer: str | None
    verdict: Verdict
    start_ns: int
    end_ns: int


@dataclass
class QuestionRecord:
    """What one question's flow did, in order, for its trace (`lme.tracking.traces`); filled by `answer_question`."""

    start_ns: int = 0
    end_ns: int = 0
    memories: list[MemoryEvent] = field(default_factory=list)
    reads: list[ReadEvent] = field(default_factory=list)
    verdicts: list[JudgeEvent] = field(default_factory=list)


def verdict_word(answer: str | None, correct: bool, judge_error: str | None) -> str:
    """An outcome's verdict as a word (a journal row's fields or an `Outcome`'s): correct | wrong | missing."""
    if answer is None or judge_error:
        return "missing"
    return "correct" if correct else "wrong"


def answer_of(call: CallResult) -> tuple[str | None, str | None]:
    """(answer, error) of a reader call: an empty answer is a failure."""
    if not call.ok:
        return None, call.error
    if not (call.text or "").strip():
        return None, "EmptyAnswer: empty answer (the reader's reply holds no text)"
    return call.text, None


def empty_as_failed(call: CallResult) -> CallResult:
    """A reader reply with no text counted as a failed call (its tokens and dollars kept)."""
    if call.ok and not (call.text or "").strip():
        return replace(call, text=None, error="EmptyAnswer: empty answer (the reader's reply holds no text)"
                       + (f" (refused: {call.refusal})" if call.refusal else ""))
    return call


def error_class(error: str | None) -> str:
    """The class of a recorded error (`"TimeoutError: ..."` -> `"TimeoutError"`)."""
    if not error:
        return "unknown"
    head = error.split(":", 1)[0].strip()
    return head if head.isidentifier() else "error"


async def answer_question(
    question: Question,
    builder: MemoryBuilder,
    reader: Reader,
    instruction: str,
    judge: Judge | None,
    gateway: Gateway,
    seed: int,
    rules: Sequence[RuleStep] = (),
    views: Mapping[str, MemoryBuilder] | None = None,
    record: QuestionRecord | None = None,
    routes: Sequence[RuleStep] = (),
) -> Outcome:
    """The first pass, then each rule in order (see the module docstring).

    `views` maps a rule's view name to its memory builder; `builder` is the
    first-pass memory (view "first_pass"). `record`, when given, receives every
    memory built and every reader and judge call, with their times. `routes`
    (`rules.routes`): the first whose trigger fires on the question text gives
    the first pass its instruction instead of `instruction`, in the same one read.
    """
    started = time.perf_counter()
    if record is not None:
        record.start_ns = time.time_ns()
    asking = _Asking(question, {**(views or {}), FIRST_PASS_VIEW: builder}, reader, judge, gateway, seed, record)
    instruction = route_instruction(routes, question.question, instruction)  # the question text only
    steps: list[Step] = []
    answer, verdict, first_error = await _first_pass(asking, instruction, steps)
    if not steps[0].memory_error:  # a failed first-pass memory ends the question
        answer, verdict = await _apply_rules(asking, rules, answer, verdict, steps)
    return _outcome(asking, steps, answer, verdict, first_error, started)


@dataclass(frozen=True)
class _Asking:
    """One question as `answer_question` asks it: its memory builders by view, the reader, judge and gateway, the
    record it fills, and what it has built, sent and judged so far (a memory is built once per view, a verdict
    asked once per answer, a repeated read numbered)."""

    question: Question
    builders: dict[str, MemoryBuilder]
    reader: Reader
    judge: Judge | None
    gateway: Gateway
    seed: int
    record: QuestionRecord | None
    memories: dict[str, Memory] = field(default_factory=dict)
    verdicts: dict[str | None, Verdict] = field(default_factory=dict)
    sent: Counter[tuple[str, str]] = field(default_factory=Counter)  # (memory text, instruction) -> reads


async def _memory_for(asking: _Asking, view: str) -> tuple[Memory, CallStats]:
    """The view's memory and what its model calls cost (nothing once built for this question); a memory
    step that fails raises `MemoryFailed`."""
    memories, record = asking.memories, asking.record
    if view in memories:
        return memories[view], CallStats()
    begun = time.time_ns()
    memories[view] = await asyncio.get_running_loop().run_in_executor(_memory_pool(), asking.builders[view].build,
                                                                      asking.question)
    if record is not None:
        record.memories.append(MemoryEvent(view, memories[view], begun, time.time_ns()))
    return memories[view], CallStats.of_calls(memories[view].model_calls)


async def _read(asking: _Asking, step: str, view: str, text: str) -> tuple[CallResult, CallStats]:
    """One reader call on the view's memory (built first if needed), numbered when the same read repeats; the
    call (an empty answer counted as failed) and what building the memory cost."""
    memory, memory_stats = await _memory_for(asking, view)
    reader = asking.reader
    asking.sent[(memory.text, text)] += 1  # the same request, whatever view gave its memory (two views can agree)
    attempt = asking.sent[(memory.text, text)]
    extra, repeat = repeat_marker(reader.payload, attempt)
    messages = build_reader_messages(text, asking.question, memory, reader.instruction_role, extra=extra,
                                     payload=reader.payload)
    begun = time.time_ns()
    call = empty_as_failed(await asking.gateway.complete(reader.model, messages, seed=asking.seed, repeat=repeat))
    if asking.record is not None:
        asking.record.reads.append(ReadEvent(step, view, messages, call, attempt, begun, time.time_ns()))
    return call, memory_stats


def repeat_marker(payload: str, attempt: int) -> tuple[dict[str, int] | None, int | None]:
    """How the `attempt`-th identical read of a question (1, 2, ...) is kept apart from the earlier ones: (the
    payload's extra keys, the cache key's `repeat`). A first read: neither. lme's payload: `{"attempt": n}` in
    the JSON the model reads (lme's own form; the key that kept repeats apart before the study's form existed).
    The study's payload (`study`): nothing the model reads, since the study sent `question`, `questionDate`,
    `memory` and nothing else on every step; the repeat lives in the call's cache key."""
    if attempt <= 1:
        return None, None
    if payload == "study":
        return None, attempt
    return {"attempt": attempt}, None


async def _verdict_on(asking: _Asking, answer: str | None, step: str) -> tuple[Verdict | None, CallStats]:
    """The judge's verdict on `answer`; an answer already judged for this question costs nothing."""
    if asking.judge is None:
        return None, CallStats()
    if answer in asking.verdicts:
        return asking.verdicts[answer], CallStats()
    begun = time.time_ns()
    verdict = await asking.judge.judge(asking.gateway, asking.question, answer)
    asking.verdicts[answer] = verdict
    if asking.record is not None:
        asking.record.verdicts.append(JudgeEvent(step, answer, verdict, begun, time.time_ns()))
    return verdict, CallStats.of(verdict.call)


async def _first_pass(asking: _Asking, instruction: str,
                      steps: list[Step]) -> tuple[str | None, Verdict | None, str | None]:
    """The first read and its verdict, appended to `steps` (a failed memory: its failed step); (answer, verdict,
    the read's error)."""
    answer, verdict, first_error = None, None, None
    try:
        call, memory_stats = await _read(asking, FIRST_PASS, FIRST_PASS_VIEW, instruction)
    except MemoryFailed as failed:  # no reader call on a memory that is not the design's
        steps.append(memory_failed_step(FIRST_PASS, FIRST_PASS_VIEW, instruction, failed))
    else:
        answer, first_error = answer_of(call)
        verdict, judge_stats = await _verdict_on(asking, answer, FIRST_PASS)
        steps.append(Step(
            rule=FIRST_PASS, view=FIRST_PASS_VIEW, instruction_sha256=sha256_text(instruction), chosen=True,
            reread=False, failed=first_error is not None, error=first_error, step_answer=answer, answer=answer,
            correct=verdict.correct if verdict else None, reader=CallStats.of(call), judge=judge_stats,
            judge_error=judge_error_of(verdict, judge_stats), memory=memory_stats,
        ))
    return answer, verdict, first_error


async def _apply_rules(asking: _Asking, rules: Sequence[RuleStep], answer: str | None, verdict: Verdict | None,
                       steps: list[Step]) -> tuple[str | None, Verdict | None]:
    """Each rule in order, appended to `steps`: a rule that fires re-reads, and an answer it gives replaces the
    current one and is judged; a failed memory ends the question. The (answer, verdict) after them."""
    question = asking.question
    for step in rules:
        rule = step.rule
        chosen = rule.fires(question.question, answer)  # the rule sees the question text and the answer only
        call, step_answer, error, judge_stats, memory_stats = None, None, None, CallStats(), CallStats()
        if chosen:
            try:
                call, memory_stats = await _read(asking, rule.name, rule.view, step.instruction)
            except MemoryFailed as failed:  # the question stops here: a rerun asks it again
                steps.append(memory_failed_step(rule.name, rule.view, step.instruction, failed))
                break
            step_answer, error = answer_of(call)
            if step_answer is not None:
                answer = step_answer
                verdict, judge_stats = await _verdict_on(asking, answer, rule.name)
        steps.append(Step(
            rule=rule.name, view=rule.view, instruction_sha256=sha256_text(step.instruction), chosen=chosen,
            reread=call is not None, failed=error is not None, error=error, step_answer=step_answer, answer=answer,
            correct=verdict.correct if verdict else None, reader=CallStats.of(call), judge=judge_stats,
            judge_error=judge_error_of(verdict, judge_stats), memory=memory_stats,
        ))
    return answer, verdict


def _outcome(asking: _Asking, steps: list[Step], answer: str | None, verdict: Verdict | None,
             first_error: str | None, started: float) -> Outcome:
    """The question's outcome from its steps (a failed memory step: no final answer, so no verdict), its record
    closed."""
    question, record = asking.question, asking.record
    memory_error = steps[-1].memory_error  # a failed memory step is the question's last
    if memory_error is not None:  # the design's steps did not all run: no final answer, so no verdict
        answer, verdict = None, None
    first_memory = asking.memories.get(FIRST_PASS_VIEW)
    if record is not None:
        record.end_ns = time.time_ns()
    return Outcome(
        question_id=question.question_id,
        question_type=question.question_type,
        abstention=question.is_abstention,
        answer=answer,
        correct=bool(verdict and verdict.correct),
        reader_error=(memory_error or first_error) if answer is None else None,
        judge_reply=verdict.reply if verdict else None,
        judge_note=verdict.note if verdict else ("no answer: a memory step failed" if memory_error else "not judged"),
        memory_bytes=first_memory.n_bytes if first_memory is not None else 0,
        memory_turns=len(first_memory.turn_ids) if first_memory is not None else 0,
        reader=CallStats.total(s.reader for s in steps),
        judge=CallStats.total(s.judge for s in steps),
        seconds=round(time.perf_counter() - started, 4),
        steps=tuple(steps),
        judge_error=verdict.error if verdict is not None else None,
        memory=CallStats.total(s.memory for s in steps),
        memory_error=memory_error,
        **locomo_fields(question, answer),
        system=SystemStats.of(first_memory),
    )


def memory_failed_step(rule: str, view: str, instruction: str, failed: MemoryFailed) -> Step:
    """The step whose memory could not be built: no reader call, no answer after it, the failed calls' cost."""
    return Step(
        rule=rule, view=view, instruction_sha256=sha256_text(instruction), chosen=True, reread=False, failed=True,
        error=str(failed), step_answer=None, answer=None, correct=None,
        memory=CallStats.of_calls(failed.calls), memory_error=str(failed),
    )


def judge_error_of(verdict: Verdict | None, stats: CallStats) -> str | None:
    """The judge's error on a step whose verdict was asked for in it (a reused verdict is not counted again)."""
    return verdict.error if verdict is not None and stats.calls else None


_MEMORY_POOL: list[Any] = []  # this process's threads that build memories, once started
_MEMORY_POOL_LOCK = threading.Lock()


def _memory_pool() -> Any:
    """The threads that build memories, apart from the event loop's default ones: at a job's start every
    question in flight builds its memory at once (S: 64 BM25 indexes, 20 ms of CPU each), and in the default
    pool the first questions' ledger reservations, cache writes and journal appends queued behind all of
    them, so no request went out until the last memory was built (0.85 s). As many threads as the default
    pool has (a model-built memory waits on its model's calls, not on a core)."""
    with _MEMORY_POOL_LOCK:
        if not _MEMORY_POOL:
            from concurrent.futures import ThreadPoolExecutor

            workers = min(32, (os.cpu_count() or 1) + 4)  # the default pool's size
            _MEMORY_POOL.append(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lme-memory"))
        return _MEMORY_POOL[0]


async def run_questions(
    questions: Iterable[Question],
    builder: MemoryBuilder,
    reader: Reader,
    instruction: str,
    judge: Judge | None,
    gateway: Gateway,
    seed: int,
    journal: Journal,
    concurrency: int = 8,
    on_outcome: Callable[[Outcome, int], None] | None = None,
    on_resume: Callable[[int], None] | None = None,
    rules: Sequence[RuleStep] = (),
    views: Mapping[str, MemoryBuilder] | None = None,
    on_record: Callable[[Question, Outcome, QuestionRecord], None] | None = None,
    routes: Sequence[RuleStep] = (),
) -> list[Outcome]:
    """Answer every question not yet in the journal; return all outcomes in question order.

    `rules` (in order) and `views` are the re-reads, `routes` the first pass's routed instructions (see
    `answer_question`). `on_record`, when given, gets
    each answered question's `QuestionRecord` (its trace) once its outcome is journaled.

    `questions` may be a lazy stream (LongMemEval-M): at most `concurrency`
    questions are held at once, so memory grows with that, not with the file.
    """
    done, _ = journal.resume()  # what lacks an answer or a verdict, or was cut by a kill, runs again
    if on_resume is not None:
        on_resume(len(done))  # the outcomes kept from an earlier run, before any question starts
    order: list[str] = []
    slots = asyncio.Semaphore(max(1, concurrency))
    running: set[asyncio.Task[None]] = set()
    errors: list[BaseException] = []
    finished = 0

    def settle(task: asyncio.Task[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            errors.append(task.exception())  # type: ignore[arg-type]
        slots.release()  # after recording the error, so the loop sees it before starting another question

    async def one(question: Question) -> None:
        nonlocal finished
        record = QuestionRecord() if on_record is not None else None
        outcome = await answer_question(question, builder, reader, instruction, judge, gateway, seed, rules, views,
                                        record, routes)
        await asyncio.to_thread(journal.append, outcome)  # its fsync off the event loop
        if on_record is not None and record is not None:
            on_record(question, outcome, record)
        done[outcome.question_id] = outcome
        finished += 1
        if on_outcome is not None:
            on_outcome(outcome, finished)

    try:
        for question in questions:
            order.append(question.question_id)
            if question.question_id in done:
                finished += 1
                continue
            await slots.acquire()
            if errors:
                slots.release()
                raise errors[0]
            task = asyncio.create_task(one(question))
            running.add(task)
            task.add_done_callback(settle)
        await asyncio.gather(*running)
        if errors:
            raise errors[0]
    except BaseException as exc:
        if not isinstance(exc, BudgetExhausted):  # at a cap, calls in flight hold reservations: let them finish
            for task in running:
                task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    return [done[question_id] for question_id in order]
