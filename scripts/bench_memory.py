"""Time and peak memory of building the first-pass memory (`memory=user_log`) on a real file.

    python scripts/bench_memory.py                                # all questions of the shared S file
    python scripts/bench_memory.py --limit 50                     # the first 50
    python scripts/bench_memory.py --hybrid                       # also with the hybrid retriever
    python scripts/bench_memory.py path/to/longmemeval_s_cleaned.json --json

Each row runs in a fresh Python process, so its peak RSS
(VmHWM of that child, see `bench_common.child_peak_mib`) is its own. The
questions are streamed (`lme.data.stream.iter_questions`, one history in
memory at a time) and the components come from the composed config, built
exactly as `python -m lme memory` builds them (`lme.cli.memory.build_components`):

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
- `bm25 baseline`: `+design=bm25`, the retrieval baseline memory, for comparison;
- `rank_bm25 (LongMemEval's way)`: what the LongMemEval repository does for turn
  retrieval (`src/retrieval/run_retrieval.py`, `flat-bm25`, granularity `turn`):
  `rank_bm25.BM25Okapi` over `content.split(" ")` of the user turns, scored for
  `question.split(" ")`, every turn ranked (`np.argsort`): ranking only, no memory text;
- `rank_bm25, all turns`: the same over every turn, the corpus lme's BM25 indexes:
  the reference for the ratios.

`rows(path, questions)` gives these figures as `bench_common.Row`s for the
`memory` stage of `scripts/bench.py`; `measure` is also used by its `scale` stage.

`build s` is the time spent in `builder.build` alone (ranking included),
`total s` the child's wall time (reading the file included). Outside the timed
part, each memory is checked: no memory over the configured `max_bytes`, and
(for `user_log`) every user message of the history verbatim in the memory
unless the log overflowed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import DEFAULT_S, S_QUESTIONS, Row, child_peak_mib, missing_extra, ratio, run_child  # noqa: E402

DEFAULT_PATH = DEFAULT_S
STAGE = "memory"
TARGET_FIRST_PASS_S = 60.0  # first-pass memory for all of S, on 2 cores, reading included
ROWS: dict[str, tuple[str, list[str]]] = {  # name -> (label, config overrides)
    "stream": ("stream only", []),
    "user_log_bm25": ("user_log, BM25 replies", ["memory=user_log", "retriever=fts5"]),
    "user_log_hybrid": ("user_log, hybrid replies", ["memory=user_log", "retriever=hybrid"]),
    "bm25": ("bm25 baseline", ["+design=bm25"]),
    "rank_bm25_user": ("rank_bm25 (LongMemEval's way)", []),
    "rank_bm25": ("rank_bm25, all turns", []),
}
TOP_K = 100


# --- child: one row ---------------------------------------------------------------------


def rank_bm25_top(question: object, top_k: int | None = TOP_K, user_only: bool = False) -> list[str]:
    """The LongMemEval repository's turn retrieval: BM25Okapi over `split(" ")`, best first.

    `user_only`: index the user turns only, as LongMemEval's `flat-bm25` at turn granularity does;
    `top_k` None: every turn, ranked with `np.argsort` as there.
    """
    import numpy as np
    from rank_bm25 import BM25Okapi

    turns = [turn for turn in question.turns() if turn.role == "user" or not user_only]  # type: ignore[attr-defined]
    if not turns:
        return []
    scores = BM25Okapi([turn.content.split(" ") for turn in turns]).get_scores(question.question.split(" "))  # type: ignore[attr-defined]
    order = np.argsort(scores, kind="stable")[::-1][:top_k]
    return [turns[index].turn_id for index in order]


def child(name: str, path: Path, limit: int | None) -> dict[str, object]:
    """Build every question's memory for row `name` in this process; return the figures."""
    started = time.perf_counter()
    cpu_started = time.process_time()
    from lme.data.stream import iter_questions

    builder = None
    max_bytes = None
    if name.startswith("rank_bm25"):
        import rank_bm25  # noqa: F401  (imported before the clock, as the builders are)
    elif name != "stream":
        from lme.cli.memory import build_components
        from lme.config.design import compose_design

        design = compose_design([*ROWS[name][1], f"dataset.path={path}"])
        _, builder = build_components(design, None)
        max_bytes = int(design.memory.node["max_bytes"])
    setup_seconds = time.perf_counter() - started  # imports and config, before the first question
    build_seconds = 0.0
    sizes: list[int] = []
    resolved: list[int] = []
    replies: list[int] = []
    over_budget = missing_user_messages = overflow = same_day = questions = 0
    for question in iter_questions(path):
        if limit is not None and questions >= limit:
            break
        questions += 1
        if name.startswith("rank_bm25"):
            before = time.perf_counter()
            rank_bm25_top(question, None, user_only=name == "rank_bm25_user")
            build_seconds += time.perf_counter() - before
            continue
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
        "setup_seconds": setup_seconds,
        "cpu_seconds": time.process_time() - cpu_started,  # user + sys of this process: what the load cannot inflate
        "build_seconds": build_seconds,
        "peak_rss_mib": child_peak_mib(),
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
    """Run `child(name, ...)` in a fresh interpreter; its figures, or a `skipped` note (rank_bm25 comes with the
    test extra: without it those rows say so)."""
    absent = missing_extra("rank_bm25") if name.startswith("rank_bm25") else None
    if absent:
        return {"row": name, "skipped": absent}
    try:
        return run_child(Path(__file__).resolve(), name, str(path),
                         *(["--limit", str(limit)] if limit is not None else []))
    except RuntimeError as exc:
        return {"row": name, "skipped": str(exc).rsplit(": ", 1)[-1]}


# --- the `memory` stage of scripts/bench.py -------------------------------------------------


def build_rows(stage: str, label: str, result: dict[str, object], reference: dict[str, object] | None,
               target_total_s: float | None = None, target_per_question_s: float | None = None,
               target_peak_mib: float | None = None, total_questions: int | None = None) -> list[Row]:
    """Rows for one measured builder: build total, build per question, wall total, peak RSS.

    `reference` (the rank_bm25 child's figures) gives the comparisons; `target_total_s`
    applies to the wall total projected to `total_questions` (when fewer were run).
    """
    if "skipped" in result:
        return [Row(stage, f"{label}: skipped", 0.0, "", note=f"skipped: {result['skipped']}")]
    questions = int(result["questions"])  # type: ignore[arg-type]
    build = float(result["build_seconds"])  # type: ignore[arg-type]
    wall = float(result["total_seconds"])  # type: ignore[arg-type]
    peak = float(result["peak_rss_mib"])  # type: ignore[arg-type]
    per_question = build / questions if questions else 0.0
    ref_build = float(reference["build_seconds"]) if reference and "skipped" not in reference else None  # type: ignore[arg-type]
    ref_peak = float(reference["peak_rss_mib"]) if reference and "skipped" not in reference else None  # type: ignore[arg-type]
    ref_per_question = ref_build / questions if ref_build is not None and questions else None
    name = "rank_bm25, all turns"
    rows = [
        Row(stage, f"{label}: build, {questions} questions", build, "s",
            f"{name}: {ref_build:.2f} s" if ref_build is not None else "",
            ratio(build, ref_build) if ref_build is not None else None),
        Row(stage, f"{label}: build per question", per_question * 1000, "ms",
            f"{name}: {ref_per_question * 1000:.1f} ms" if ref_per_question is not None else "",
            ratio(per_question, ref_per_question) if ref_per_question is not None else None,
            f"< {target_per_question_s:g} s" if target_per_question_s else "",
            per_question < target_per_question_s if target_per_question_s else None),
    ]
    wall_row = Row(stage, f"{label}: wall, reading + build, {questions} questions", wall, "s",
                   note="fresh process; imports and config included")
    if target_total_s is not None and questions:
        setup = float(result.get("setup_seconds", 0.0))  # type: ignore[arg-type]
        whole = total_questions is None or questions >= total_questions
        note = wall_row.note
        if not whole:
            projected = setup + (wall - setup) * total_questions / questions  # type: ignore[operator]
            note += (f"; projected to {total_questions} questions: {projected:.1f} s "
                     f"(the target is judged on all of S only)")
        wall_row = Row(stage, wall_row.figure, wall, "s", target=f"< {target_total_s:g} s for all of S",
                       met=wall < target_total_s if whole else None, note=note)
    rows.append(wall_row)
    if target_total_s is not None and "cpu_seconds" in result and questions:
        cpu = float(result["cpu_seconds"])  # type: ignore[arg-type]
        whole = total_questions is None or questions >= total_questions
        rows.append(Row(stage, f"{label}: CPU time (user + sys), {questions} questions", cpu, "s",
                        f"wall {wall:.1f} s", ratio(cpu, wall), f"< {target_total_s:g} s for all of S",
                        cpu < target_total_s if whole else None,
                        "one thread: the wall time on an otherwise idle machine; "
                        "the wall row above counts time lost to other processes"))
    rows.append(Row(stage, f"{label}: peak RSS", peak, "MiB",
                    f"{name}: {ref_peak:,.0f} MiB" if ref_peak is not None else "",
                    ratio(peak, ref_peak) if ref_peak is not None else None,
                    f"< {target_peak_mib:,.0f} MiB" if target_peak_mib else "",
                    peak < target_peak_mib if target_peak_mib else None))
    return rows


def rows(path: Path, questions: int | None) -> list[Row]:
    """The `memory` stage: first-pass user log (BM25-only fusion) and the bm25 baseline, against rank_bm25."""
    out: list[Row] = []
    for name, corpus in (("rank_bm25_user", "user turns, as LongMemEval's flat-bm25 at turn granularity"),
                         ("rank_bm25", "every turn, the corpus lme's BM25 indexes: the reference below")):
        reference = measure(name, path, questions)
        if "skipped" in reference:
            out.append(Row(STAGE, f"{ROWS[name][0]}: skipped", 0.0, "",
                           note=f"skipped: {reference['skipped']}"))
            continue
        count = int(reference["questions"])  # type: ignore[arg-type]
        build = float(reference["build_seconds"])  # type: ignore[arg-type]
        out.append(Row(STAGE, f"rank_bm25 BM25Okapi over split(' ') of {corpus.split(',')[0]}, {count} questions",
                       build, "s",
                       note=f"{build * 1000 / count:.1f} ms per question; {corpus}; ranking only, no memory text; "
                            f"peak RSS {float(reference['peak_rss_mib']):,.0f} MiB"))  # type: ignore[arg-type]
    first_pass = measure("user_log_bm25", path, questions)
    out += build_rows(STAGE, "first-pass user log (memory=user_log retriever=fts5)", first_pass, reference,
                      target_total_s=TARGET_FIRST_PASS_S, total_questions=S_QUESTIONS)
    out += build_rows(STAGE, "bm25 baseline (+design=bm25)", measure("bm25", path, questions), reference)
    return out


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
    names = ["stream", "user_log_bm25"] + (["user_log_hybrid"] if args.hybrid else []) + ["bm25", "rank_bm25_user", "rank_bm25"]
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
