"""The whole-session view re-reads use: complete sessions, verbatim, within a byte budget.

Sessions are chosen in three steps until the budget is full (a session that
does not fit is skipped and the next one tried):

1. dates: up to `date_sessions` sessions dated within `date_window_days` of a
   date the question refers to ("last Saturday", "Valentine's Day", "in
   March"), resolved with `lme.memory.dates` against the question date, every
   reading of an ambiguous expression included; closest first. Skipped when all
   sessions share one day (their dates say nothing).
2. content: the `content_sessions` sessions whose messages hold the most of the
   question's content words, scaled for session length: score = occurrences of
   the question's content words / sqrt(words in the session); highest first.
   `content_sessions: 0` switches the step off (the study's earlier view, which
   its design runs' first decline re-read: conf/view/whole_sessions_no_content_words.yaml).
3. retrieval: sessions in the retriever's (fused) order of their turns.

The chosen sessions are shown in date order, every message (user and
assistant) verbatim, each cut at `message_max_chars` characters.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from datetime import date
from typing import ClassVar

from lme.util.budget import utf8_len
from lme.data.dates import format_day, format_moment
from lme.data.records import Question, Session
from lme.memory.base import Memory
from lme.memory.dates import describe_distance, resolve_relative_dates
from lme.memory.user_log import is_same_day
from lme.retrieval.base import Ranking, Retriever
from lme.util.text import content_words, words

CUT_MARK = " [message cut]"
STEPS = ("dates", "content", "retrieval")


def question_date_ranges(question: Question) -> list[tuple[date, date]]:
    """Every (start, end) the question's own words refer to, alternatives included."""
    ranges: list[tuple[date, date]] = []
    for resolved in resolve_relative_dates(question.question, question.question_date):
        ranges.append((resolved.start, resolved.end))
        ranges.extend(resolved.alternatives)
    return ranges


def _day_distance(day: date, span: tuple[date, date]) -> int:
    start, end = span
    if day < start:
        return (start - day).days
    if day > end:
        return (day - end).days
    return 0


def sessions_near_dates(
    sessions: Sequence[Session], ranges: Iterable[tuple[date, date]], window_days: int, limit: int
) -> list[int]:
    """Indexes of up to `limit` sessions within `window_days` of any range, closest first (then date order)."""
    spans = list(ranges)
    near = []
    for index, session in enumerate(sessions):
        distances = [_day_distance(session.date.date(), span) for span in spans]
        best = min(distances, default=None)
        if best is not None and best <= window_days:
            near.append((best, index))
    return [index for _, index in sorted(near)[:limit]]


@lru_cache(maxsize=65_536)
def _word_counts(text: str) -> tuple[Counter[str], int]:
    """Stemmed word counts of one message and its length in words (histories share many messages)."""
    tokens = words(text)
    return Counter(tokens), len(tokens)


def content_scores(sessions: Sequence[Session], question_text: str) -> list[float]:
    """Per session: occurrences of the question's content words / sqrt(session words)."""
    wanted = content_words(question_text)
    scores = []
    for session in sessions:
        hits = length = 0
        for turn in session.turns:
            counts, n = _word_counts(turn.content)
            hits += sum(counts[word] for word in wanted)
            length += n
        scores.append(hits / math.sqrt(length) if length else 0.0)
    return scores


def render_session(session: Session, question: Question, message_max_chars: int) -> str:
    distance = describe_distance(session.date.date(), question.question_date.date())
    lines = [f"### Session {session.session_id}, {format_moment(session.date)}, {distance}"]
    for turn in session.turns:
        content = turn.content
        if len(content) > message_max_chars:
            content = content[:message_max_chars] + CUT_MARK
        lines.append(f"[{turn.turn_id}] {turn.label}: {content}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Choice:
    index: int
    step: str


class WholeSessionView:
    """Complete sessions chosen by dates, content and retrieval (see the module docstring).

    `describes`: the instruction paragraphs that describe this view (lme.memory.paragraphs)."""

    describes: ClassVar[tuple[str, ...]] = ("whole_sessions",)

    def __init__(
        self,
        retriever: Retriever,
        max_bytes: int = 100_000,
        message_max_chars: int = 12_000,
        date_sessions: int = 4,
        date_window_days: int = 3,
        content_sessions: int = 3,
        top_k: int = 100,
        name: str = "whole_sessions",
    ) -> None:
        self.retriever = retriever
        self.max_bytes = max_bytes
        self.message_max_chars = message_max_chars
        self.date_sessions = date_sessions
        self.date_window_days = date_window_days
        self.content_sessions = content_sessions
        self.top_k = top_k
        self.name = name

    def candidates(self, question: Question) -> list[Choice]:
        """Sessions in the order the three steps propose them (no repeats)."""
        return self._candidates(question)[0]

    def _candidates(self, question: Question) -> tuple[list[Choice], Ranking]:
        sessions = question.sessions
        proposed: list[Choice] = []
        seen: set[int] = set()

        def propose(indexes: Iterable[int], step: str) -> None:
            for index in indexes:
                if index not in seen:
                    seen.add(index)
                    proposed.append(Choice(index, step))

        if not is_same_day(question):
            ranges = question_date_ranges(question)
            propose(sessions_near_dates(sessions, ranges, self.date_window_days, self.date_sessions), "dates")
        if self.content_sessions > 0:  # 0: the step is off, and the scores are not computed
            scores = content_scores(sessions, question.question)
            by_score = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
            propose([i for i in by_score if i not in seen][: self.content_sessions], "content")
        ranking = self.retriever.rank(question, self.top_k)
        propose((int(turn_id.split(":", 1)[0][1:]) for turn_id in ranking.turn_ids), "retrieval")
        return proposed, ranking

    def build(self, question: Question) -> Memory:
        separator = "\n\n"
        header_lines = [f"Question date: {format_day(question.question_date)}."]
        if is_same_day(question):
            header_lines.append(
                f"Every session of this history is dated {format_day(question.sessions[0].date)}, so session "
                "dates carry no information: date events from what the messages themselves say."
            )
        header_lines.append("Whole sessions chosen for this question, oldest first:")
        header = "\n".join(header_lines)
        used = utf8_len(header)
        chosen: list[Choice] = []
        rendered: dict[int, str] = {}
        candidates, ranking = self._candidates(question)
        for choice in candidates:
            text = render_session(question.sessions[choice.index], question, self.message_max_chars)
            cost = utf8_len(separator + text)
            if used + cost <= self.max_bytes:
                chosen.append(choice)
                rendered[choice.index] = text
                used += cost
        order = sorted(rendered)
        text = separator.join([header, *(rendered[i] for i in order)])
        counts = Counter(choice.step for choice in chosen)
        return Memory(
            text=text,
            n_bytes=utf8_len(text),
            turn_ids=tuple(t.turn_id for i in order for t in question.sessions[i].turns),
            notes={
                "builder": self.name,
                "sessions": str(len(order)),
                "bytes": str(utf8_len(text)),
                **{f"from_{step}": str(counts.get(step, 0)) for step in STEPS},
                "session_ids": " ".join(question.sessions[i].session_id for i in order),
            },
            ranking=ranking,
        )
