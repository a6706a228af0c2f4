"""Run the relative-date rules over every user message of a LongMemEval file and report how they fire.

    python scripts/date_rules_on_s.py                      # the real S file in ../shared/data/longmemeval
    python scripts/date_rules_on_s.py --path FILE --sample 40 --seed 1 --match "this weekend"

Anchor = the session date of each message. Prints: user messages, messages with at least one
expression, "Resolved dates" lines per history on average (one line per such message), the 30 most
frequent expressions (lower case, whitespace collapsed), readings that are approximate / ambiguous,
and the time taken (loading apart). `--sample N` prints N random matches with their context and
resolved line, for reading false positives (`--match TEXT` keeps expressions containing TEXT).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from lme.data.load import load_questions
from lme.util.errors import LmeError
from lme.memory.dates import format_resolution, resolve_relative_dates

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "shared/data/longmemeval/longmemeval_s_cleaned.json.xz"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH, help="LongMemEval file (.json, .json.gz, .json.xz)")
    parser.add_argument("--top", type=int, default=30, help="how many frequent expressions to list")
    parser.add_argument("--sample", type=int, default=0, help="print this many random matches with context")
    parser.add_argument("--match", default="", help="with --sample: only expressions containing this text")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    try:
        questions = load_questions(args.path)
    except LmeError as exc:
        print(f"date_rules_on_s: error: {exc}", file=sys.stderr)
        return 2
    loaded = time.perf_counter()

    messages = with_dates = expressions = approximate = ambiguous = 0
    lines_per_history: list[int] = []
    counts: Counter[str] = Counter()
    found: list[tuple[str, object, object, str]] = []  # (text, resolved, session date, question id)
    for question in questions:
        lines = 0
        for session in question.sessions:
            for turn in session.turns:
                if turn.role != "user":
                    continue
                messages += 1
                resolved = resolve_relative_dates(turn.content, session.date)
                if not resolved:
                    continue
                lines += 1
                for item in resolved:
                    expressions += 1
                    approximate += item.approximate
                    ambiguous += bool(item.alternatives)
                    counts[" ".join(item.expression.lower().split())] += 1
                    if args.sample:
                        found.append((turn.content, item, session.date, question.question_id))
        with_dates += lines
        lines_per_history.append(lines)
    finished = time.perf_counter()

    print(f"file: {args.path}")
    print(f"questions: {len(questions)}, user messages: {messages}")
    print(f"messages with at least one expression: {with_dates} ({100 * with_dates / max(messages, 1):.1f}%)")
    print(
        f"resolved-date lines per history: mean {statistics.fmean(lines_per_history):.1f}, "
        f"median {statistics.median(lines_per_history):g}, min {min(lines_per_history)}, max {max(lines_per_history)}"
    )
    print(f"expressions: {expressions} (approximate {approximate}, ambiguous {ambiguous})")
    print(f"time: load {loaded - started:.1f} s, rules {finished - loaded:.2f} s "
          f"({1e6 * (finished - loaded) / max(messages, 1):.0f} us per message)")
    print(f"\n{args.top} most frequent expressions:")
    for expression, count in counts.most_common(args.top):
        print(f"{count:7d}  {expression}")

    if args.sample:
        pool = [entry for entry in found if args.match.lower() in entry[1].expression.lower()]
        print(f"\nsample of {min(args.sample, len(pool))} of {len(pool)} matches:")
        for text, item, anchor, question_id in random.Random(args.seed).sample(pool, min(args.sample, len(pool))):
            start, end = item.span
            context = " ".join(text[max(0, start - 70) : end + 50].split())
            print(f"- [{question_id} @ {anchor:%Y-%m-%d %a}] ...{context}...")
            print(f"    {format_resolution(item, anchor)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
