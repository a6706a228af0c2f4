"""The pipeline's first-pass memory: the complete user log plus retrieved assistant replies.

Layout (every number comes from config):

1. a header with the question date; when every session falls on one calendar
   day, a sentence saying session dates carry no information; when the log had
   to be cut (LongMemEval-M), a sentence saying it is partial and how it was cut;
2. every user message verbatim, sessions in date order, each session under a
   heading with its date, neutral id and distance from the question date, each
   message prefixed with its turn id and followed, when it holds relative time
   expressions, by one "Resolved dates:" line;
3. assistant replies in the retriever's (fused) order among its top `top_k` turns (200: with the
   hybrid retriever, the whole merge of its two top-100 lists), user turns dropped, each
   with its date, turn id and the id of the user message it answered, until the
   replies reach `reply_max_bytes` or the memory reaches `max_bytes`; a reply
   that does not fit is skipped, never cut.

`layout` chooses the headings and line formats: `lme` (the default, above) or `study`, the reference
study's ("What the reader sees" in hraness/oh `benchmarks/LONGMEMEVAL_S_500_RESULT_V1.md`): a
`# Complete log of the user's messages: ...` title, one `## 2023-05-22 (Monday) — session s0009 — 8 days
(1 week 1 day) before the question date` heading per session, `[s0009:0] user: ...` lines, `Resolved dates
(from this message's date 2023-05-22): "last weekend" = 2023-05-20 … 2023-05-21 [ends 9 days (1 week 2 days)
before the question date]` lines (`format_study_resolved_line`), a `# Retrieved assistant replies: ...` title
and `[s0031:5] [2023/05/28 (Sun) 14:02] assistant (reply to [s0031:4]): ...` replies. The write-up shows one
example of each; what it does not show is lme's reading of its instructions: an approximate reading is
written `≈` instead of `=`, an ambiguous expression lists its readings joined by ` or `, a single day's
bracket gives its distance, a range's `ends ...` (`starts ...` after the question date), and notes are
left out; the header sentences (same-day history, partial log) are lme's.

Overflow: when header plus log exceed `max_bytes - overflow_reply_reserve_bytes`,
whole sessions are kept by the declared `overflow_policy`:
`retrieved_and_newest` (default) alternates the session holding the next
best-ranked user turn and the next newest session, skipping one that does not
fit; `newest` keeps the newest sessions back to the first that does not fit. Kept sessions are shown in date order; the budget is never exceeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import ClassVar

from lme.util.budget import utf8_len
from lme.data.dates import WEEKDAYS, format_day, format_moment
from lme.data.benchmark import require_one_user
from lme.data.records import Question, Session, Turn
from lme.memory.base import Memory
from lme.memory.speakers import SPEAKER_CHOICES, speaker_view, speakers_of
from lme.memory.dates import ResolvedDate, describe_distance, format_resolved_line, resolve_relative_dates
from lme.retrieval.base import Retriever

OVERFLOW_POLICIES = ("retrieved_and_newest", "newest")
LAYOUTS = ("lme", "study")
STUDY_REPLIES_TITLE = ("# Retrieved assistant replies: the assistant messages that best match the question, verbatim, "
                       "in retrieval order (only a subset of the history; each names the user message it replied to)")


def is_same_day(question: Question) -> bool:
    """Every session of the history falls on one calendar day."""
    return len({session.date.date() for session in question.sessions}) == 1


def answered_user_turn(session: Session, turn_index: int) -> str | None:
    """The user message an assistant turn answers: the closest earlier user turn of its session."""
    for index in range(turn_index - 1, -1, -1):
        if session.turns[index].role == "user":
            return session.turns[index].turn_id
    return None


def turn_index(turn_id: str) -> int:
    return int(turn_id.split(":", 1)[1])


def _study_range(start: date, end: date, question_day: date) -> str:
    """One reading in the study's form: `2023-05-20 … 2023-05-21 [ends 9 days (1 week 2 days) before the
    question date]`."""
    if start == end:
        return f"{start:%Y-%m-%d} [{describe_distance(start, question_day)}]"
    if end <= question_day:
        where = f"ends {describe_distance(end, question_day)}"
    elif start > question_day:
        where = f"starts {describe_distance(start, question_day)}"
    else:
        where = "includes the question date"
    return f"{start:%Y-%m-%d} … {end:%Y-%m-%d} [{where}]"


def format_study_resolution(resolved: ResolvedDate, question_day: date) -> str:
    """One expression in the study's form: `"last weekend" = 2023-05-20 … 2023-05-21 [ends ...]`; `≈` for an
    approximate reading, every reading of an ambiguous one joined by ` or `."""
    readings = [(resolved.start, resolved.end), *resolved.alternatives]
    sign = "≈" if resolved.approximate else "="
    expression = " ".join(resolved.expression.split())
    return f'"{expression}" {sign} ' + " or ".join(_study_range(start, end, question_day) for start, end in readings)


def format_study_resolved_line(resolved: list[ResolvedDate], message_day: date, question_day: date) -> str:
    """The study's line after a message: `Resolved dates (from this message's date 2023-05-22): ...`, the
    expressions joined by `; `; "" when there is none."""
    if not resolved:
        return ""
    items = "; ".join(format_study_resolution(item, question_day) for item in resolved)
    return f"Resolved dates (from this message's date {message_day:%Y-%m-%d}): {items}"


def study_moment(moment: datetime) -> str:
    """A date as the data file writes it, `2023/05/28 (Sun) 14:02` (English weekday, whatever the locale)."""
    return f"{moment:%Y/%m/%d} ({WEEKDAYS[moment.weekday()][:3]}) {moment:%H:%M}"


@dataclass(frozen=True)
class SessionBlock:
    session_id: str
    text: str
    user_messages: int
    resolved_lines: int


def session_block(session: Session, question: Question, layout: str = "lme") -> SessionBlock:
    """A session's heading and its user messages, each followed by its resolved dates."""
    question_day = question.question_date.date()
    distance = describe_distance(session.date.date(), question_day)
    if layout == "study":
        lines = [f"## {format_day(session.date)} — session {session.session_id} — {distance}"]
    else:
        lines = [f"### Session {session.session_id}, {format_moment(session.date)}, {distance}"]
    messages = resolved = 0
    for turn in session.turns:
        if turn.role != "user":
            continue
        messages += 1
        if turn.speaker:  # two people: the name says who wrote it
            lines.append(f"[{turn.turn_id}] {turn.speaker}: {turn.content}")
        else:
            lines.append(f"[{turn.turn_id}] user: {turn.content}" if layout == "study" else f"[{turn.turn_id}] {turn.content}")
        dates = resolve_relative_dates(turn.content, session.date)
        if layout == "study":
            line = format_study_resolved_line(dates, session.date.date(), question_day)
        else:
            line = format_resolved_line(dates, question_day) if dates else ""
        if line:
            lines.append(line)
            resolved += 1
    return SessionBlock(session.session_id, "\n".join(lines), messages, resolved)


def reply_block(turn: Turn, session: Session, layout: str = "lme") -> str:
    answered = answered_user_turn(session, turn_index(turn.turn_id))
    if layout == "study":
        to = f" (reply to [{answered}])" if answered else ""
        return f"[{turn.turn_id}] [{study_moment(session.date)}] {turn.label}{to}: {turn.content}"
    who = f" {turn.speaker}" if turn.speaker else ""
    return f"[{turn.turn_id}] {format_moment(session.date)},{who} answering [{answered or 'none'}]: {turn.content}"


class UserLogMemoryBuilder:
    """First-pass memory of the reference pipeline (see the module docstring).

    `describes`: the instruction paragraphs that describe this memory (lme.memory.paragraphs)."""

    describes: ClassVar[tuple[str, ...]] = ("user_log",)

    def __init__(
        self,
        retriever: Retriever,
        top_k: int = 200,
        max_bytes: int = 180_000,
        reply_max_bytes: int = 96_000,
        overflow_policy: str = "retrieved_and_newest",
        overflow_reply_reserve_bytes: int = 30_000,
        name: str = "user_log",
        layout: str = "lme",
        speakers: str | None = None,
    ) -> None:
        from lme.util.errors import LmeError

        if overflow_policy not in OVERFLOW_POLICIES:
            raise LmeError(f"memory.overflow_policy {overflow_policy!r} is unknown (known: {', '.join(OVERFLOW_POLICIES)}).")
        if layout not in LAYOUTS:
            raise LmeError(f"memory.layout {layout!r} is unknown (known: {', '.join(LAYOUTS)}).")
        if speakers is not None and speakers not in SPEAKER_CHOICES:
            raise LmeError(f"memory.speakers {speakers!r} is unknown (known: {', '.join(SPEAKER_CHOICES)}).")
        self.layout = layout
        self.speakers = speakers  # two people (LoCoMo): who the log is of (lme.memory.speakers); None: refused
        self.retriever = retriever
        self.top_k = top_k
        self.max_bytes = max_bytes
        self.reply_max_bytes = reply_max_bytes
        self.overflow_policy = overflow_policy
        self.overflow_reply_reserve_bytes = overflow_reply_reserve_bytes
        self.name = name

    # -- parts ---------------------------------------------------------------------------------

    def header(self, question: Question, shown: int | None = None, total: int | None = None) -> str:
        lines = [f"Question date: {format_day(question.question_date)}."]
        if is_same_day(question):
            day = format_day(question.sessions[0].date)
            lines.append(
                f"Every session of this history is dated {day}, so session dates carry no information: "
                "date events from what the messages themselves say."
            )
        if shown is not None and total is not None and shown < total:
            lines.append(
                f"The user log is partial: it did not fit, so {shown} of {total} sessions are shown whole "
                f"({self._policy_words()}); the other sessions' messages are missing."
            )
        return "\n".join(lines)

    def _log_title(self, total: int, kept: int | None = None, logged: tuple[str, ...] = ()) -> str:
        """The log's title; `kept`: how many sessions an overflow kept (the study's title, sized in its longest
        form, `N of the N sessions`, before the cut is made); `logged`: the speakers whose log it is (two people)."""
        if logged:
            who = " and ".join(logged)
            return (f"## Messages of {who} (every session, oldest first)" if kept is None
                    else f"## Messages of {who} (the sessions kept, oldest first)")
        if self.layout == "study":
            which = f"all {total} sessions" if kept is None else f"{kept} of the {total} sessions"
            return (f"# Complete log of the user's messages: every message the user sent, verbatim, from {which} of "
                    "the history, in chronological order and grouped by session")
        if kept is None:
            return "## User messages (every session, oldest first)"
        return "## User messages (the sessions kept, oldest first)"

    def _policy_words(self) -> str:
        if self.overflow_policy == "newest":
            return "the newest sessions"
        return "alternately the session holding the next best-retrieved user message and the next newest session"

    def _overflow_order(self, question: Question, ranked: Sequence[str]) -> list[int]:
        """Session indexes in the order the overflow policy keeps them."""
        newest = list(range(len(question.sessions) - 1, -1, -1))
        if self.overflow_policy == "newest":
            return newest
        by_rank: list[int] = []
        turns = {turn.turn_id: turn for turn in question.turns()}
        for turn_id in ranked:
            turn = turns.get(turn_id)
            index = int(turn_id.split(":", 1)[0][1:])
            if turn is not None and turn.role == "user" and index not in by_rank:
                by_rank.append(index)
        order: list[int] = []
        for pair in zip(by_rank + [None] * len(newest), newest):
            for index in pair:
                if index is not None and index not in order:
                    order.append(index)
        return order

    # -- the memory ----------------------------------------------------------------------------

    def build(self, question: Question) -> Memory:
        ranking = self.retriever.rank(question, self.top_k)
        logged: tuple[str, ...] = ()
        if question.benchmark != "longmemeval" and speakers_of(question):
            if self.speakers is None:
                require_one_user(question, "memory=user_log (the complete log of the user's messages)")
            question, logged = speaker_view(question, self.speakers or "both")
        blocks = [session_block(session, question, self.layout) for session in question.sessions]
        log_title = self._log_title(len(blocks), logged=logged)
        separator = "\n\n"
        full_log = separator.join([log_title, *(block.text for block in blocks)])
        header = self.header(question)
        overflow = utf8_len(header + separator + full_log) > self.max_bytes - self.overflow_reply_reserve_bytes
        kept = list(range(len(blocks)))
        if overflow:
            budget = self.max_bytes - self.overflow_reply_reserve_bytes
            header = self.header(question, shown=0, total=len(blocks))  # longest form, to size the budget
            sizing_title = (self._log_title(len(blocks), len(blocks), logged) if self.layout == "study"
                            else log_title)
            used = utf8_len(header + separator + sizing_title)
            kept = []
            for index in self._overflow_order(question, ranking.turn_ids):
                cost = utf8_len(separator + blocks[index].text)
                if used + cost <= budget:
                    kept.append(index)
                    used += cost
                elif self.overflow_policy == "newest":
                    break  # the newest sessions, contiguous: no older one fills a gap
            kept.sort()
            header = self.header(question, shown=len(kept), total=len(blocks))
            log_title = self._log_title(len(blocks), len(kept), logged)
        log = separator.join([log_title, *(blocks[i].text for i in kept)])
        text = header + separator + log

        replies_title = (STUDY_REPLIES_TITLE if self.layout == "study"
                         else "## Assistant replies (retrieved, most relevant first)")
        if logged:  # two people: the other speaker's messages
            others = " and ".join(name for name in speakers_of(question) if name not in logged)
            replies_title = f"## Messages of {others} (retrieved, most relevant first)"
        turns = {turn.turn_id: turn for turn in question.turns()}
        used = utf8_len(text)
        reply_bytes = 0
        included: list[str] = []
        skipped: list[str] = []
        reply_parts: list[str] = []
        title_cost = utf8_len(separator + replies_title)
        for turn_id in ranking.turn_ids[: self.top_k]:
            turn = turns.get(turn_id)
            if turn is None or turn.role != "assistant" or turn_id in included:
                continue
            block = reply_block(turn, question.session_of(turn_id), self.layout)
            cost = utf8_len(separator + block)
            extra = title_cost if not reply_parts else 0
            if reply_bytes + cost <= self.reply_max_bytes and used + extra + cost <= self.max_bytes:
                reply_parts.append(block)
                included.append(turn_id)
                reply_bytes += cost
                used += extra + cost
            else:
                skipped.append(turn_id)
        if reply_parts:
            text = separator.join([text, replies_title, *reply_parts])
        user_turns = tuple(t.turn_id for i in kept for t in question.sessions[i].turns if t.role == "user")
        return Memory(
            text=text,
            n_bytes=utf8_len(text),
            turn_ids=user_turns + tuple(included),
            skipped_turn_ids=tuple(skipped),
            notes={
                "builder": self.name,
                "retriever": ranking.retriever,
                "header_bytes": str(utf8_len(header)),
                "user_log_bytes": str(utf8_len(log)),
                "user_messages": str(sum(blocks[i].user_messages for i in kept)),
                "resolved_date_lines": str(sum(blocks[i].resolved_lines for i in kept)),
                "replies": str(len(included)),
                "replies_ran_out": str(not skipped).lower(),  # no budget refused a reply: the ranked turns ended first
                "reply_bytes": str(reply_bytes),
                "same_day": str(is_same_day(question)).lower(),
                "overflow": str(overflow).lower(),
                "sessions_kept": str(len(kept)),
                "sessions": str(len(blocks)),
            },
            ranking=ranking,
        )
