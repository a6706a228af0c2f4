"""The full history as memory: every turn of every session, user and assistant, in date order.

Each turn is one block in the retrieval baseline's form (`lme.memory.retrieved.format_turn_block`:
`[s0009:3] 2023-05-20 (Saturday) 02:21 user: <content>`, or the study's date form with `layout: study`),
blocks separated by a blank line, sessions in the history's (date) order. No retriever is read.

Overflow: a history whose blocks exceed `max_bytes` (UTF-8) is cut to whole turns by the declared
`overflow_policy`, never silently and never mid-turn:

- `oldest` (the default): keep the history from its first turn on and drop the newest turns that do not
  fit, as LongMemEval's own reader truncates the date-sorted history string to its first N tokens;
- `newest`: keep the latest turns and drop the oldest (current state over early history);
- `refuse`: stop the question with an error naming it (a run that must see every turn).

The kept part is contiguous (a turn that would fit after a bigger one was dropped is not added), so the
reader never sees a history with holes; `Memory.notes` records `overflow`, the turns kept and dropped.
On LongMemEval-S the whole history is 479 to 538 KB in this form, under the shipped 600,000-byte budget
(conf/memory/full_history.yaml); LongMemEval-M histories overflow it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lme.util.budget import utf8_len
from lme.data.records import Question
from lme.util.errors import LmeError
from lme.memory.base import Memory
from lme.memory.retrieved import BLOCK_SEPARATOR, LAYOUTS, format_turn_block

OVERFLOW_POLICIES = ("oldest", "newest", "refuse")


class FullHistoryMemoryBuilder:
    """Every turn of the history in date order, within `max_bytes`, cut by `overflow_policy` when it does
    not fit. `retriever` is accepted (every memory builder is given one) and never read.

    `describes`: the instruction paragraphs that describe this memory (none: `base` does)."""

    describes: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, retriever: Any = None, max_bytes: int = 600_000, overflow_policy: str = "oldest",
        name: str = "full_history", layout: str = "lme",
    ) -> None:
        if max_bytes < 0:
            raise LmeError(f"memory.max_bytes: expected an integer >= 0, got {max_bytes}.")
        if overflow_policy not in OVERFLOW_POLICIES:
            raise LmeError(f"memory.overflow_policy {overflow_policy!r} is unknown for the full history "
                           f"(known: {', '.join(OVERFLOW_POLICIES)}).")
        if layout not in LAYOUTS:
            raise LmeError(f"memory.layout {layout!r} is unknown (known: {', '.join(LAYOUTS)}).")
        self.max_bytes = max_bytes
        self.overflow_policy = overflow_policy
        self.name = name
        self.layout = layout

    def build(self, question: Question) -> Memory:
        blocks = [(turn.turn_id, format_turn_block(turn, session, self.layout))
                  for session in question.sessions for turn in session.turns]
        separator = utf8_len(BLOCK_SEPARATOR)
        sizes = [utf8_len(text) for _, text in blocks]
        total = sum(sizes) + separator * max(0, len(blocks) - 1)
        overflow = total > self.max_bytes
        kept = list(range(len(blocks)))
        if overflow:
            if self.overflow_policy == "refuse":
                raise LmeError(
                    f"question {question.question_id}: its full history is {total} bytes, over memory.max_bytes "
                    f"({self.max_bytes}), and memory.overflow_policy is refuse; raise the budget or choose "
                    "oldest or newest.")
            order = kept if self.overflow_policy == "oldest" else kept[::-1]
            chosen, used = [], 0
            for index in order:
                cost = sizes[index] + (separator if chosen else 0)
                if used + cost > self.max_bytes:
                    break  # contiguous: nothing after the first turn that does not fit
                chosen.append(index)
                used += cost
            kept = sorted(chosen)
        text = BLOCK_SEPARATOR.join(blocks[index][1] for index in kept)
        kept_ids = tuple(blocks[index][0] for index in kept)
        kept_set = set(kept_ids)
        dropped = tuple(turn_id for turn_id, _ in blocks if turn_id not in kept_set)
        return Memory(
            text=text,
            n_bytes=utf8_len(text),
            turn_ids=kept_ids,
            skipped_turn_ids=dropped,
            notes={
                "builder": self.name,
                "max_bytes": str(self.max_bytes),
                "history_bytes": str(total),
                "overflow": str(overflow).lower(),
                "overflow_policy": self.overflow_policy,
                "turns": str(len(blocks)),
                "turns_kept": str(len(kept_ids)),
            },
        )
