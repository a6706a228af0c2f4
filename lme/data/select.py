"""Which questions of a file a run uses: a split, explicit ids, types, the first N.

The filters combine: a question is kept when it is in the split (`split`), among
the explicit ids (`question_ids`) and of one of the types (`question_types`);
`limit` then keeps the first N. The order is the file's, except that explicit
ids keep the order they were given in.

An explicit id the file lacks is always an error. A split id the file lacks is
an error too unless `split_missing="skip"`: a split is a property of the
benchmark, and a file may be a part of it (the shared development copy of S
lacks 2 of the 500 questions; the mini file holds 16), so a user can ask for
"the dev questions this file holds" -- but only on purpose, because a silently
shorter run is not comparable with a full one. Skipped ids are returned so the
caller can say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.data.records import KNOWN_TYPES, Question
from lme.data.splits import split_ids
from lme.util.errors import DataError, LmeError

SPLIT_MISSING_POLICIES: tuple[str, ...] = ("error", "skip")
_NAMED = 5  # ids named in a message before "and N more"


@dataclass(frozen=True, slots=True)
class Selection:
    split: str | None = None  # "dev", "test", or a .txt file of ids
    question_ids: tuple[str, ...] | None = None
    question_types: tuple[str, ...] | None = None
    limit: int | None = None
    split_missing: str = "error"  # "error" | "skip"

    def __post_init__(self) -> None:
        if self.question_ids is not None:
            seen: set[str] = set()
            for qid in self.question_ids:
                if qid in seen:
                    raise LmeError(f"config question_ids: {qid} is listed twice.")
                seen.add(qid)
        for question_type in self.question_types or ():
            if question_type not in KNOWN_TYPES:
                raise LmeError(
                    f"config question_types: unknown type {question_type!r} (known: {', '.join(KNOWN_TYPES)})."
                )
        limit = self.limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise LmeError(f"config limit={limit}: expected a whole number, 0 or more, or null.")
        if self.split_missing not in SPLIT_MISSING_POLICIES:
            raise LmeError(
                f"config split_missing={self.split_missing}: expected one of {', '.join(SPLIT_MISSING_POLICIES)}."
            )

    @classmethod
    def from_config(
        cls,
        split: Any = None,
        question_ids: Any = None,
        question_types: Any = None,
        limit: Any = None,
        split_missing: Any = "error",
    ) -> Selection:
        """From plain config values: a list or a single name; null or an empty list means no filter."""
        return cls(
            split=None if split is None else str(split),
            question_ids=_names("question_ids", question_ids),
            question_types=_names("question_types", question_types),
            limit=limit,
            split_missing=str(split_missing),
        )

    def describe(self) -> str:
        parts = []
        if self.split is not None:
            parts.append(f"split={self.split}")
        if self.question_ids is not None:
            parts.append(f"{len(self.question_ids)} question_ids")
        if self.question_types is not None:
            parts.append(f"question_types={','.join(self.question_types)}")
        if self.limit is not None:
            parts.append(f"limit={self.limit}")
        return ", ".join(parts) or "all questions"


@dataclass(frozen=True, slots=True)
class Selected:
    questions: tuple[Question, ...]
    skipped: tuple[str, ...]  # split ids the file lacks (only with split_missing="skip")
    split_size: int  # ids in the split (0 without a split)
    split_label: str = ""  # "split dev", "id list FILE"

    def skipped_note(self, source: str | Path) -> str | None:
        """One sentence for the user when split ids were skipped, else None."""
        if not self.skipped:
            return None
        return (
            f"{source} lacks {len(self.skipped)} of the {self.split_size} questions of {self.split_label} "
            f"({_named(self.skipped)}); they are skipped."
        )


def _names(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) or not isinstance(value, Sequence) else list(value)
    for item in items:
        # Hydra reads an unquoted 6e984301 as a float (inf): the id is lost, so say how to quote it
        if isinstance(item, (float, bool)) or item is None:
            raise LmeError(
                f"config {key}: {item!r} was read as a {type(item).__name__}, not a name; quote ids that look "
                f"like numbers, e.g. {key}=['6e984301']."
            )
    return tuple(str(item) for item in items) or None


def _named(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_NAMED])
    return shown if len(ids) <= _NAMED else f"{shown} and {len(ids) - _NAMED} more"


def select_questions(questions: Iterable[Question], selection: Selection, source: str | Path) -> Selected:
    """Apply `selection` to the questions of the file `source` (read once, in order)."""
    split_members: set[str] | None = None
    split_list: tuple[str, ...] = ()
    split_label = ""
    if selection.split is not None:
        split_list, split_label = split_ids(selection.split)
        split_members = set(split_list)
    wanted = set(selection.question_ids) if selection.question_ids is not None else None
    types = set(selection.question_types) if selection.question_types is not None else None

    in_file: set[str] = set()
    kept: list[Question] = []
    for question in questions:
        in_file.add(question.question_id)
        if split_members is not None and question.question_id not in split_members:
            continue
        if wanted is not None and question.question_id not in wanted:
            continue
        if types is not None and question.question_type not in types:
            continue
        kept.append(question)

    if selection.question_ids is not None:
        absent = [qid for qid in selection.question_ids if qid not in in_file]
        if absent:
            noun = "question" if len(absent) == 1 else "questions"
            verb = "is" if len(absent) == 1 else "are"
            raise DataError(
                f"{source}: {noun} {_named(absent)} selected in config question_ids {verb} not in the file."
            )
        order = {qid: position for position, qid in enumerate(selection.question_ids)}
        kept.sort(key=lambda question: order[question.question_id])

    skipped: tuple[str, ...] = ()
    if split_members is not None:
        absent = [qid for qid in split_list if qid not in in_file]
        if absent and len(absent) == len(split_members):
            raise DataError(f"{source}: holds none of the {len(split_members)} questions of {split_label}.")
        if absent and selection.split_missing == "error":
            raise DataError(
                f"{source}: lacks {len(absent)} of the {len(split_members)} questions of {split_label} "
                f"({_named(absent)}); pass split_missing=skip to select the "
                f"{len(split_members) - len(absent)} it holds."
            )
        skipped = tuple(absent)

    if selection.limit is not None:
        kept = kept[: selection.limit]
    return Selected(
        questions=tuple(kept), skipped=skipped, split_size=len(split_members or ()), split_label=split_label
    )
