"""`python -m lme data ...`: fetch, statistics and the dev/test split.

    python -m lme data fetch ...                         see `python -m lme data fetch --help`
    python -m lme data stats [--json] [overrides]         statistics of the selected questions
    python -m lme data split [overrides] [--seed N] [--dev-size N] [--out DIR] [--check]

`stats` takes the same overrides as a run (`dataset=s`, `dataset.path=FILE`,
`split=dev`, `question_types=[...]`, `limit=N`, ...) and describes exactly the
questions that run would use. `split` draws the dev/test split from the
question ids and types of the configured file (see `lme.data.splits`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from lme.errors import LmeError

USAGE = """usage: python -m lme data COMMAND ...

commands:
  fetch   download a LongMemEval file or the judge templates, verified by SHA-256
  stats   dataset statistics of the questions a run would use: [--json] [overrides]
  split   draw the dev/test split from a file's question ids and types
          [overrides] [--seed N] [--dev-size N] [--out DIR] [--check]

overrides are a run's: dataset=s|m|oracle|sample, dataset.path=FILE, split=dev|test,
question_ids=[...], question_types=[...], limit=N"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one sentence (an `LmeError`), not usage + exit."""

    def error(self, message: str) -> NoReturn:
        raise LmeError(f"{self.prog}: {message}.")


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "fetch":
        from lme.data.fetch import main as fetch_main

        return int(fetch_main(rest) or 0)
    if command == "stats":
        return stats_command(rest)
    if command == "split":
        return split_command(rest)
    raise LmeError(f"unknown data command {command!r} (known: fetch, stats, split); see python -m lme data --help.")


def stats_command(argv: Sequence[str]) -> int:
    from lme.app import load_dataset
    from lme.compose import compose_config, split_overrides
    from lme.data.stats import dataset_stats, format_table, stats_json

    overrides, rest = split_overrides(argv)
    parser = _Parser(prog="python -m lme data stats", description="Dataset statistics, no model call.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    options = parser.parse_args(rest)
    cfg = compose_config(overrides)
    path, questions = load_dataset(cfg)
    stats = dataset_stats(questions)
    if options.json:
        print(json.dumps(stats_json(stats)))
    else:
        print(f"{path}\n\n{format_table(stats)}")
    return 0


def split_command(argv: Sequence[str]) -> int:
    from lme.compose import compose_config, split_overrides
    from lme.data.load import load_questions
    from lme.data.splits import (
        DEV_SIZE,
        SPLIT_NAMES,
        SPLIT_SEED,
        committed_split,
        make_split,
        split_path,
        write_split,
    )

    overrides, rest = split_overrides(argv)
    parser = _Parser(prog="python -m lme data split", description="Draw the dev/test split from a file.")
    parser.add_argument("--seed", type=int, default=SPLIT_SEED, help=f"the split's seed (default {SPLIT_SEED})")
    parser.add_argument("--dev-size", type=int, default=DEV_SIZE, help=f"development questions (default {DEV_SIZE})")
    parser.add_argument("--out", type=Path, help="write s_dev.txt and s_test.txt into this folder")
    parser.add_argument("--check", action="store_true", help="fail unless the split equals the committed lists")
    options = parser.parse_args(rest)
    cfg = compose_config(overrides)
    path = Path(str(cfg.dataset.path)).expanduser()
    questions = load_questions(path)
    if not 0 <= options.dev_size <= len(questions):
        raise LmeError(f"{path}: holds {len(questions)} questions, too few for --dev-size {options.dev_size}.")
    types = {q.question_id: q.question_type for q in questions}
    split = make_split(((q.question_id, q.question_type) for q in questions), options.seed, options.dev_size)

    print(f"{path}: {len(questions)} questions, seed {options.seed}")
    print("| question_type | dev | test |\n|---|---:|---:|")
    for question_type in dict.fromkeys(types.values()):
        counts = [sum(types[qid] == question_type for qid in split.ids(name)) for name in SPLIT_NAMES]
        print(f"| {question_type} | {counts[0]} | {counts[1]} |")
    print(f"| all | {len(split.dev)} | {len(split.test)} |")

    committed = committed_split() if all(split_path(name).is_file() for name in SPLIT_NAMES) else None
    same = committed is not None and (split.dev, split.test) == (committed.dev, committed.test)
    print("equal to the committed lists" if same else "differs from the committed lists")
    if options.out is not None:
        for written in write_split(split, options.out):
            print(f"wrote {written}")
    if options.check and not same:
        changed = len(set(split.dev) ^ set(committed.dev if committed else ()))
        raise LmeError(
            f"{path}: the split drawn with seed {options.seed} differs from the committed lists "
            f"({changed} ids change sides or are absent)."
        )
    sys.stdout.flush()
    return 0
