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

Overflow: when header plus log exceed `max_bytes - overflow_reply_reserve_bytes`,
whole sessions are kept by the declared `overflow_policy`:
`retrieved_and_newest` (default) alternates the session holding the next
best-ranked user turn and the next newest session, skipping one that does not
fit; `newest` keeps the newest sessions back to the first that does not fit. Kept sessions are shown in date order; the budget is never exceeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from lme.budget import utf8_len
from lme.data.dates import format_day, format_moment
from lme.data.records import Question, Session, Turn
from lme.memory.base import Memory
from lme.memory.dates import describe_distance, format_resolved_line, resolve_relative_dates
from lme.retrieval.base import Retriever

OVERFLOW_POLICIES = ("retrieved_and_newest", "newest")


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


@dataclass(frozen=True)
class SessionBlock:
    session_id: str
    text: str
    user_messages: int
    resolved_lines: int


def session_block(session: Session, question: Question) -> SessionBlock:
    """A session's heading and its user messages, each followed by its resolved dates."""
    distance = describe_distance(session.date.date(), question.question_date.date())
    lines = [f"### Session {session.session_id}, {format_moment(session.date)}, {distance}"]
    messages = resolved = 0
    for turn in session.turns:
        if turn.role != "user":
            continue
        messages += 1
        lines.append(f"[{turn.turn_id}] {turn.content}")
        dates = resolve_relative_dates(turn.content, session.date)
        line = format_resolved_line(dates, question.question_date.date()) if dates else ""
        if line:
            lines.append(line)
            resolved += 1
    return SessionBlock(session.session_id, "\n".join(lines), messages, resolved)


def reply_block(turn: Turn, session: Session) -> str:
    answered = answered_user_turn(session, turn_index(turn.turn_id)) or "none"
    return f"[{turn.turn_id}] {format_moment(session.date)}, answering [{answered}]: {turn.content}"


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
    ) -> None:
        if overflow_policy not in OVERFLOW_POLICIES:
            from lme.errors import LmeError

            raise LmeError(f"memory.overflow_policy {overflow_policy!r} is unknown (known: {', '.join(OVERFLOW_POLICIES)}).")
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
        blocks = [session_block(session, question) for session in question.sessions]
        log_title = "## User messages (every session, oldest first)"
        separator = "\n\n"
        full_log = separator.join([log_title, *(block.text for block in blocks)])
        header = self.header(question)
        overflow = utf8_len(header + separator + full_log) > self.max_bytes - self.overflow_reply_reserve_bytes
        kept = list(range(len(blocks)))
        if overflow:
            budget = self.max_bytes - self.overflow_reply_reserve_bytes
            header = self.header(question, shown=0, total=len(blocks))  # longest form, to size the budget
            used = utf8_len(header + separator + log_title)
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
            log_title = "## User messages (the sessions kept, oldest first)"
        log = separator.join([log_title, *(blocks[i].text for i in kept)])
        text = header + separator + log

        replies_title = "## Assistant replies (retrieved, most relevant first)"
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
            block = reply_block(turn, question.session_of(turn_id))
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
