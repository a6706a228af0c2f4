"""The retrieval baseline memory: top-ranked turns packed into a byte budget.

Each turn is one block, `[s0009:3] 2023-05-20 (Saturday) 02:21 user: <content>`,
in rank order, blocks separated by a blank line. With `layout: study`, a block is
written as the reference study writes a retrieved reply in its first-pass memory,
`[s0009:3] [2023/05/20 (Sat) 02:21] user: <content>` (the data file's date form); the
study's own baseline rendering (`renderTurn` in its harness) is not published, so this
form is inferred from that reply line. A block that does not fit in
what is left of the budget is skipped whole (never cut) and later, smaller ones
are still tried. Only neutral ids, dates, roles and contents reach the text.

With `resolved_dates: true` (the study's development memory "BM25 with resolved-date lines"), a user
turn's block is followed, when the message holds relative time expressions, by the user log's
"Resolved dates" line for it (`lme.memory.user_log`, in the layout's form), counted in the block's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from lme.util.budget import utf8_len
from lme.data.dates import WEEKDAYS, format_moment
from lme.data.records import Question, Session, Turn
from lme.memory.base import Memory
from lme.retrieval.base import Retriever

BLOCK_SEPARATOR = "\n\n"


def pack_blocks(
    blocks: Sequence[tuple[str, str]], max_bytes: int, separator: str = BLOCK_SEPARATOR
) -> tuple[str, list[str], list[str]]:
    """Pack (id, text) blocks in order into at most `max_bytes` UTF-8 bytes.

    Blocks are joined with `separator` (counted in the budget); a block that
    does not fit is skipped whole and the next ones are still tried. Returns
    the packed text, the ids included and the ids skipped, each in input order.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}.")
    separator_bytes = utf8_len(separator)
    parts: list[str] = []
    included: list[str] = []
    skipped: list[str] = []
    used = 0
    for block_id, text in blocks:
        cost = utf8_len(text) + (separator_bytes if parts else 0)
        if used + cost <= max_bytes:
            parts.append(text)
            included.append(block_id)
            used += cost
        else:
            skipped.append(block_id)
    return separator.join(parts), included, skipped


LAYOUTS = ("lme", "study")


def format_turn_block(turn: Turn, session: Session, layout: str = "lme") -> str:
    """`[s0009:3] 2023-05-20 (Saturday) 02:21 user: <content verbatim>`; `study`: `[s0009:3] [2023/05/20 (Sat)
    02:21] user: <content verbatim>`."""
    if layout == "study":
        moment = f"{session.date:%Y/%m/%d} ({WEEKDAYS[session.date.weekday()][:3]}) {session.date:%H:%M}"
        return f"[{turn.turn_id}] [{moment}] {turn.label}: {turn.content}"
    return f"[{turn.turn_id}] {format_moment(session.date)} {turn.label}: {turn.content}"


def with_resolved_dates(block: str, turn: Turn, session: Session, question: Question, layout: str = "lme") -> str:
    """A user turn's block followed by its "Resolved dates" line, as the user log writes it (no line: unchanged)."""
    from lme.memory.dates import format_resolved_line, resolve_relative_dates
    from lme.memory.user_log import format_study_resolved_line

    dates = resolve_relative_dates(turn.content, session.date)
    if not dates:
        return block
    question_day = question.question_date.date()
    if layout == "study":
        line = format_study_resolved_line(dates, session.date.date(), question_day)
    else:
        line = format_resolved_line(dates, question_day)
    return f"{block}\n{line}" if line else block


class RetrievedMemoryBuilder:
    """The top `top_k` turns of one retriever, in rank order, within `max_bytes`.

    `describes`: the instruction paragraphs that describe this memory (none: `base` does)."""

    describes: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, retriever: Retriever, top_k: int = 100, max_bytes: int = 96_000, name: str = "retrieved",
        layout: str = "lme", resolved_dates: bool = False,
    ) -> None:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}.")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}.")
        if layout not in LAYOUTS:
            from lme.util.errors import LmeError

            raise LmeError(f"memory.layout {layout!r} is unknown (known: {', '.join(LAYOUTS)}).")
        self.retriever = retriever
        self.layout = layout
        self.resolved_dates = bool(resolved_dates)
        self.top_k = top_k
        self.max_bytes = max_bytes
        self.name = name

    def build(self, question: Question) -> Memory:
        ranking = self.retriever.rank(question, self.top_k)
        turns = {turn.turn_id: turn for turn in question.turns()}
        blocks = []
        seen: set[str] = set()
        for turn_id in ranking.turn_ids[: self.top_k]:
            if turn_id in seen:
                continue
            seen.add(turn_id)
            turn = turns.get(turn_id)
            if turn is None:
                raise ValueError(
                    f"question {question.question_id}: retriever {ranking.retriever!r} "
                    f"returned turn id {turn_id!r}, which is not in the history."
                )
            block = format_turn_block(turn, question.session_of(turn_id), self.layout)
            if self.resolved_dates and turn.role == "user":
                block = with_resolved_dates(block, turn, question.session_of(turn_id), question, self.layout)
            blocks.append((turn_id, block))
        text, included, skipped = pack_blocks(blocks, self.max_bytes)
        return Memory(
            text=text,
            n_bytes=utf8_len(text),
            turn_ids=tuple(included),
            skipped_turn_ids=tuple(skipped),
            notes={
                "builder": self.name,
                "retriever": ranking.retriever,
                "top_k": str(self.top_k),
                "max_bytes": str(self.max_bytes),
                "ranked": str(len(blocks)),
                **({"resolved_dates": "true"} if self.resolved_dates else {}),
            },
            ranking=ranking,
        )
