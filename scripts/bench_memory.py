"""Time and peak memory of building the first-pass memory (`memory=user_log`) on a real file.

    python scripts/bench_memory.py                                # all questions of the shared S file
    python scripts/bench_memory.py --limit 50                     # the first 50
    python scripts/bench_memory.py --hybrid                       # also with the hybrid retriever
    python scripts/bench_memory.py path/to/longmemeval_s_cleaned.json --json

Each row runs in a fresh Python process, so its peak RSS
(`resource.getrusage(RUSAGE_SELF).ru_maxrss` of that child) is its own. The
questions are streamed (`lme.data.stream.iter_questions`, one history in
memory at a time) and the components come from the composed config, built
exactly as `python -m lme memory` builds them (`lme.memory.cli.build_components`):

- `stream only`: reading and validating the file, no memory: the floor under
  the other rows;
- `user_log, BM25 replies`: overrides `memory=user_log retriever=fts5`: the
  replies follow the BM25 ranking alone (RRF of a single list keeps its order,
  so this is BM25-only fusion);
- `user_log, hybrid replies` (`--hybrid`): `memory=user_log retriever=hybrid`,
  BM25 and semantic fused by RRF; the semantic part reads its vectors from the
  embedding cache (`cache_dir`, see `lme/retrieval/dense.py`) and encodes what
  is missing, which on a CPU can take hours for the whole S file; skipped with
  a note when the semantic retriever or its model is not installed;
- `bm25 baseline`: `+design=bm25`, the retrieval baseline memory, for comparison.

`build s` is the time spent in `builder.build` alone (ranking included),
`total s` the child's wall time (reading the file included). Outside the timed
part, each memory is checked: no memory over the configured `max_bytes`, and
(for `user_log`) every user message of the history verbatim in the memory
unless the log overflowed.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PATH = HERE.parents[1] / "shared/data/longmemeval/longmemeval_s_cleaned.json.xz"
ROWS: dict[str, tuple[str, list[str]]] = {  # name -> (label, config overrides)
    "stream": ("stream only", []),
    "user_log_bm25": ("user_log, BM25 replies", ["memory=user_log", "retriever=fts5"]),
    "user_log_hybrid": ("user_log, hybrid replies", ["memory=user_log", "retriever=hybrid"]),
    "bm25": ("bm25 baseline", ["+design=bm25"]),
}


# --- child: one row ---------------------------------------------------------------------


def _peak_mib() -> float:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / (1024 * 1024) if sys.platform == "darwin" else maxrss / 1024  # bytes there, KiB on Linux


def child(name: str, path: Path, limit: int | None) -> dict[str, object]:
    """Build every question's memory for row `name` in this process; return the figures."""
    started = time.perf_counter()
    from lme.data.stream import iter_questions

    builder = None
    max_bytes = None
    if name != "stream":
        from lme.cli import compose_config
        from lme.memory.cli import build_components

        cfg = compose_config([*ROWS[name][1], f"dataset.path={path}"])
        _, builder = build_components(cfg, None)
        max_bytes = int(cfg.memory.max_bytes)
    build_seconds = 0.0
    sizes: list[int] = []
    resolved: list[int] = []
    replies: list[int] = []
    over_budget = missing_user_messages = overflow = same_day = questions = 0
    for question in iter_questions(path):
        if limit is not None and questions >= limit:
            break
        questions += 1
        if builder is None:
            continue
        before = time.perf_counter()
        memory = builder.build(question)
        build_seconds += time.perf_counter() - before
        sizes.append(memory.n_bytes)
        over_budget += memory.n_bytes > max_bytes  # type: ignore[operator]
        notes = memory.notes
        if "resolved_date_lines" in notes:
            resolved.append(int(notes["resolved_date_lines"]))
            replies.append(int(notes["replies"]))
            overflow += notes["overflow"] == "true"
            same_day += notes["same_day"] == "true"
            if notes["overflow"] != "true":
                missing_user_messages += any(
                    f"[{turn.turn_id}] {turn.content}" not in memory.text
                    for turn in question.turns()
                    if turn.role == "user"
                )
    return {
        "row": name,
        "questions": questions,
        "total_seconds": time.perf_counter() - started,
        "build_seconds": build_seconds,
        "peak_rss_mib": _peak_mib(),
        "max_memory_bytes": max(sizes) if sizes else None,
        "mean_memory_bytes": statistics.fmean(sizes) if sizes else None,
        "budget_bytes": max_bytes,
        "over_budget": over_budget if builder is not None else None,
        "mean_resolved_date_lines": statistics.fmean(resolved) if resolved else None,
        "mean_replies": statistics.fmean(replies) if replies else None,
        "overflow": overflow if resolved else None,
        "same_day": same_day if resolved else None,
        "histories_missing_a_user_message": missing_user_messages if resolved else None,
    }


def measure(name: str, path: Path, limit: int | None) -> dict[str, object]:
    """Run `child(name, ...)` in a fresh interpreter; its figures, or a `skipped` note."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name, str(path)]
    done = subprocess.run(
        command + (["--limit", str(limit)] if limit is not None else []),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False,
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        return {"row": name, "skipped": lines[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- parent: the table -------------------------------------------------------------------


def _fmt(value: object, pattern: str = "{:,.0f}") -> str:
    return "-" if value is None else pattern.format(value)


def markdown(results: list[dict[str, object]]) -> str:
    lines = [
        "| row | questions | total s | build s | build ms/question | peak RSS MiB | max memory bytes "
        "| mean memory bytes | mean resolved-date lines | mean replies | over budget | overflow | same day "
        "| missing a user message |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for result in results:
        label = ROWS[str(result["row"])][0]
        if "skipped" in result:
            lines.append(f"| {label} | skipped: {result['skipped']} |" + " |" * 12)
            continue
        questions = int(result["questions"])  # type: ignore[arg-type]
        build = float(result["build_seconds"])  # type: ignore[arg-type]
        per_question = build * 1000 / questions if questions and result["row"] != "stream" else None
        lines.append(
            f"| {label} | {questions} | {_fmt(result['total_seconds'], '{:,.1f}')} "
            f"| {_fmt(build if result['row'] != 'stream' else None, '{:,.1f}')} | {_fmt(per_question, '{:,.1f}')} "
            f"| {_fmt(result['peak_rss_mib'])} | {_fmt(result['max_memory_bytes'])} "
            f"| {_fmt(result['mean_memory_bytes'])} | {_fmt(result['mean_resolved_date_lines'], '{:.1f}')} "
            f"| {_fmt(result['mean_replies'], '{:.1f}')} | {_fmt(result['over_budget'])} "
            f"| {_fmt(result['overflow'])} | {_fmt(result['same_day'])} "
            f"| {_fmt(result['histories_missing_a_user_message'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH,
                        help=f"a LongMemEval file (default {DEFAULT_PATH})")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of the file")
    parser.add_argument("--hybrid", action="store_true", help="also with the hybrid (BM25 + semantic) retriever")
    parser.add_argument("--hybrid-limit", type=int, default=None,
                        help="the hybrid row on the first N questions only (default: as --limit)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row instead of a table")
    parser.add_argument("--child", default=None, choices=sorted(ROWS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.path.exists():
        raise SystemExit(f"bench_memory: {args.path}: no such file; pass a LongMemEval file.")
    if args.child is not None:
        print(json.dumps(child(args.child, args.path, args.limit)))
        return 0
    names = ["stream", "user_log_bm25"] + (["user_log_hybrid"] if args.hybrid else []) + ["bm25"]
    results = []
    for name in names:
        print(f"bench_memory: {ROWS[name][0]} ...", file=sys.stderr, flush=True)
        limit = args.hybrid_limit if name == "user_log_hybrid" and args.hybrid_limit is not None else args.limit
        results.append(measure(name, args.path, limit))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    if not args.json:
        print(" ".join(["python scripts/bench_memory.py", *(sys.argv[1:] if argv is None else argv)]) + "\n")
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
