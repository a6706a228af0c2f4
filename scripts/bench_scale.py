"""Benchmark stage `scale`: the memory build on LongMemEval-M-sized histories (500 sessions each).

    python scripts/bench_scale.py [--questions 5] [--sessions 500]

Writes a synthetic file (`scripts/make_synthetic_m.py`: M's shape, about
5 MB of JSON and 5,000 turns per history, no LongMemEval text) of
`--questions` questions into a temporary directory, then builds the same
memories as the `memory` stage on it, each row in a fresh process
(`bench_memory.measure`): the first-pass user log (BM25-only fusion) and the
bm25 baseline. Time per question is `builder.build` alone; peak RSS is the
child's, reading (streamed, one history at a time) included, so it bounds the
memory one question needs. Targets: under 2 s and 2 GB per question.
(Loading a whole M file, streamed or with `json.load`: `scripts/bench_m.py`.)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import Row, markdown  # noqa: E402
from bench_memory import build_rows, measure  # noqa: E402
from make_synthetic_m import write_synthetic  # noqa: E402

STAGE = "scale"
TARGET_PER_QUESTION_S = 2.0
TARGET_PEAK_MIB = 2048.0


def rows(questions: int = 5, sessions: int = 500, seed: int = 0, tmp: Path | None = None) -> list[Row]:
    """The `scale` stage's rows on a synthetic file of `questions` x `sessions` sessions."""
    with tempfile.TemporaryDirectory(prefix="lme-bench-scale-", dir=tmp) as scratch:
        path = Path(scratch) / f"synthetic_m_{questions}x{sessions}.json"
        size = write_synthetic(path, questions, sessions, seed)
        note = f"synthetic M-shaped file: {questions} questions x {sessions} sessions, {size / 1e6:,.0f} MB of JSON"
        out = [Row(STAGE, "synthetic history", sessions, "sessions", note=note)]
        for name, label in (("user_log_bm25", "first-pass user log, M-sized"), ("bm25", "bm25 baseline, M-sized")):
            out += build_rows(STAGE, label, measure(name, path, None), None,
                              target_per_question_s=TARGET_PER_QUESTION_S, target_peak_mib=TARGET_PEAK_MIB)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=5, help="synthetic questions (5)")
    parser.add_argument("--sessions", type=int, default=500, help="sessions per history (500)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic file seed (0)")
    parser.add_argument("--tmp", type=Path, default=None, help="where to write the synthetic file (system temp dir)")
    args = parser.parse_args(argv)
    print(markdown(rows(args.questions, args.sessions, args.seed, args.tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
