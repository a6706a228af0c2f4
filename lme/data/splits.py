"""The development/test split of the 500 LongMemEval questions, and id-list files.

The split is fixed by a seed and stored in the project as two id lists,
`lme/data/split_ids/s_dev.txt` (100 ids) and `s_test.txt` (400 ids), one id per
line, sorted. LongMemEval-S, -M and the oracle file hold the same 500 question
ids with the same types, so the lists apply to all three.

How the split is drawn (`make_split`), deterministic and independent of file
order and of the Python version:

1. Development seats per question type, proportional to the type's size, by
   largest remainder: each type gets `floor(dev_size * n_type / n)`; the seats
   left go to the largest fractional parts (ties: the larger type, then the
   type name). For the 500 questions and 100 seats: multi-session 27,
   temporal-reasoning 27, knowledge-update 15, single-session-user 14,
   single-session-assistant 11, single-session-preference 6.
2. Within a type, the same rule splits its seats between abstention (`_abs`)
   and answerable questions: 5 of the 30 abstention questions go to dev
   (multi-session 2, the other types with abstention questions 1 each).
3. Within each such stratum, questions are ordered by the SHA-256 of
   `"{seed}:{question_id}"` (hex), and the first ones take the seats.

The reference study's split (`make_study_split`, its `selectSplit` in hraness/oh
`scripts/benchmarks/datasets.ts`, seed 17) is committed beside it as
`s_study_dev.txt` (100 ids) and `s_study_test.txt` (400), `split=study_dev|study_test`:
questions are grouped by id without a final `_abs` (a question and its abstention
twin are one group; 500 questions, 471 groups), the groups ordered by the SHA-256
of `"{seed}:{group}"` (hex), and the first `max(1, floor(0.2 * groups))` groups
(94) are development, with every question in them (100).

The committed lists were generated with seed 0 from the shared copy of
`longmemeval_oracle.json` (all 500 ids; its ids and types equal S's):
`python -m lme data split dataset.path=.../longmemeval_oracle.json.xz --out lme/data/split_ids`.
`--check` verifies that a file reproduces the committed lists.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lme.data.records import ABSTENTION_MARK
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text

SPLIT_DIR: Path = Path(__file__).resolve().parent / "split_ids"
SPLIT_NAMES: tuple[str, ...] = ("dev", "test")
SPLIT_SEED = 0
DEV_SIZE = 100
SPLIT_PREFIX = "s_"  # files s_dev.txt, s_test.txt
# The reference study's split: its rule (`make_study_split`), seed and names (files s_study_dev.txt, s_study_test.txt).
STUDY_SPLIT_NAMES: tuple[str, ...] = ("study_dev", "study_test")
STUDY_SPLIT_SEED = 17
STUDY_DEV_FRACTION = 0.2
SPLIT_RULES: tuple[str, ...] = ("stratified", "study")


@dataclass(frozen=True, slots=True)
class Split:
    seed: int
    dev: tuple[str, ...]  # sorted
    test: tuple[str, ...]  # sorted

    def ids(self, name: str) -> tuple[str, ...]:
        return {"dev": self.dev, "test": self.test}[name]


def allocate(counts: Mapping[str, int], seats: int) -> dict[str, int]:
    """Share `seats` among groups in proportion to `counts`, by largest remainder.

    Ties between equal remainders go to the larger group, then to the smaller name.

    >>> allocate({"a": 133, "b": 133, "c": 78, "d": 70, "e": 56, "f": 30}, 100)
    {'a': 27, 'b': 27, 'c': 15, 'd': 14, 'e': 11, 'f': 6}
    """
    total = sum(counts.values())
    if not 0 <= seats <= total:
        raise LmeError(f"cannot draw {seats} of {total} questions.")
    if total == 0:
        return dict.fromkeys(counts, 0)
    exact = {name: seats * count / total for name, count in counts.items()}
    shares = {name: math.floor(value) for name, value in exact.items()}
    left = seats - sum(shares.values())
    order = sorted(counts, key=lambda name: (-(exact[name] - shares[name]), -counts[name], name))
    for name in order[:left]:
        shares[name] += 1
    return shares


def _rank(seed: int, question_id: str) -> str:
    return sha256_text(f"{seed}:{question_id}")


def make_split(questions: Iterable[tuple[str, str]], seed: int = SPLIT_SEED, dev_size: int = DEV_SIZE) -> Split:
    """Draw the dev/test split from (question_id, question_type) pairs; see the module docstring."""
    by_type: dict[str, list[str]] = {}
    seen: set[str] = set()
    for question_id, question_type in questions:
        if question_id in seen:
            raise LmeError(f"question {question_id} is listed twice.")
        seen.add(question_id)
        by_type.setdefault(question_type, []).append(question_id)
    type_seats = allocate({name: len(ids) for name, ids in by_type.items()}, dev_size)
    dev: list[str] = []
    for question_type, ids in by_type.items():
        strata = {
            "abstention": [qid for qid in ids if ABSTENTION_MARK in qid],
            "answerable": [qid for qid in ids if ABSTENTION_MARK not in qid],
        }
        seats = allocate({name: len(members) for name, members in strata.items()}, type_seats[question_type])
        for name, members in strata.items():
            dev.extend(sorted(members, key=lambda qid: _rank(seed, qid))[: seats[name]])
    dev_set = set(dev)
    return Split(seed=seed, dev=tuple(sorted(dev)), test=tuple(sorted(seen - dev_set)))


def study_group(question_id: str) -> str:
    """The study's group of a question: its id without a final `_abs` (a question and its abstention twin)."""
    return re.sub(r"_abs$", "", question_id)


def make_study_split(question_ids: Iterable[str], seed: int = STUDY_SPLIT_SEED) -> Split:
    """The reference study's dev/test split (its `selectSplit`): groups (`study_group`) ordered by the SHA-256
    hex of `"{seed}:{group}"`, the first `max(1, floor(0.2 * groups))` of them development, with all their
    questions; every other question is test."""
    ids: list[str] = []
    for question_id in question_ids:
        if question_id in ids:
            raise LmeError(f"question {question_id} is listed twice.")
        ids.append(question_id)
    groups = sorted(dict.fromkeys(study_group(qid) for qid in ids), key=lambda group: _rank(seed, group))
    if len(groups) < 2:
        raise LmeError(f"the study's split needs at least two groups of questions, got {len(groups)}.")
    dev_groups = set(groups[: max(1, math.floor(len(groups) * STUDY_DEV_FRACTION))])
    dev = [qid for qid in ids if study_group(qid) in dev_groups]
    return Split(seed=seed, dev=tuple(sorted(dev)), test=tuple(sorted(set(ids) - set(dev))))


def split_path(name: str, directory: Path = SPLIT_DIR) -> Path:
    return directory / f"{SPLIT_PREFIX}{name}.txt"


def read_ids(path: Path) -> tuple[str, ...]:
    """An id-list file: one id per line, in order; blank lines and `#` comments ignored."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LmeError(f"{path}: cannot read the id list ({exc}).") from None
    ids = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return tuple(dict.fromkeys(qid for qid in ids if qid))  # a repeated id counts once


def split_ids(split: str) -> tuple[tuple[str, ...], str]:
    """The ids of a committed split (`dev`, `test`) or of an id-list file; also a name for messages."""
    if split in SPLIT_NAMES or split in STUDY_SPLIT_NAMES:
        return read_ids(split_path(split)), f"split {split}"
    path = Path(split).expanduser()
    if path.suffix == ".txt" or "/" in split:
        if not path.is_file():
            raise LmeError(f"config split={split}: no such id-list file.")
        return read_ids(path), f"id list {path}"
    raise LmeError(f"config split={split}: unknown split (known: {', '.join(SPLIT_NAMES + STUDY_SPLIT_NAMES)}, or a "
                   ".txt file of ids).")


def split_names(rule: str = "stratified") -> tuple[str, ...]:
    """The (dev, test) names of a rule's committed lists: `dev`, `test` or `study_dev`, `study_test`."""
    return STUDY_SPLIT_NAMES if rule == "study" else SPLIT_NAMES


def committed_split(rule: str = "stratified") -> Split:
    dev, test = split_names(rule)
    return Split(seed=STUDY_SPLIT_SEED if rule == "study" else SPLIT_SEED, dev=split_ids(dev)[0], test=split_ids(test)[0])


def write_split(split: Split, directory: Path, rule: str = "stratified") -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, ids in zip(split_names(rule), (split.dev, split.test)):
        path = split_path(name, directory)
        path.write_text("".join(f"{qid}\n" for qid in ids), encoding="utf-8")
        paths.append(path)
    return paths
