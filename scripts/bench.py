"""lme's performance benchmark: one table of figures, each against what it is compared to and its target.

    python scripts/bench.py                                   # every stage, all of the shared S file
    python scripts/bench.py --questions 50 --skip embedding   # the first 50 questions, no embedding stage
    python scripts/bench.py --json                            # the rows as JSON instead of a table
    python scripts/bench.py path/to/longmemeval_s_cleaned.json

Stages (see each module's docstring for how it measures):

- `load` (scripts/bench_load.py): load + validate vs `json.load` of the same
  file, decompression on both sides; target within 2x;
- `memory` (scripts/bench_memory.py): first-pass user log with BM25-only
  fusion and the bm25 baseline, built for every question, each in a fresh
  process (total, per question, peak RSS), vs the LongMemEval repository's
  `rank_bm25` turn ranking; target: first pass for all of S under 60 s;
- `embedding` (scripts/bench_embedding.py): lme's cached encoding vs
  `SentenceTransformer.encode` on the same texts; target overhead under 5%;
  cache and de-duplication effects;
- `fill` (scripts/bench_fill.py): `lme embed` on the first questions, the
  whole file's fill projected from its rate (target under 50 min for S),
  then `lme cache export`/`import` and a teammate's `lme embed` (target 0
  texts encoded);
- `orchestration` (scripts/bench_orchestration.py, when present): a whole
  offline study against the loopback server, vs the ideal wall time;
- `scale` (scripts/bench_scale.py): the memory build on M-sized (500-session)
  synthetic histories; targets under 2 s and 2 GB per question.

Without lme's optional extras the bench still prints every row: a row whose
extra is missing (OpenVINO's backends without `fast-cpu`, the rank_bm25 rows
without `test`) reads "skipped: needs the fast-cpu extra (openvino)", and the
other rows run (tests/test_bench_extras.py).

Exit status 0 when it ran (a missed target is a figure, not an error), 2 on
a missing file or a bad flag.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import DEFAULT_S, EXTRAS, Row, markdown, missing_extra, skipped  # noqa: E402

STAGES: tuple[str, ...] = ("load", "memory", "embedding", "backends", "fill", "orchestration", "scale")


def _orchestration(options: argparse.Namespace) -> list[Row]:
    if not (HERE / "bench_orchestration.py").exists():
        return [Row("orchestration", "skipped: scripts/bench_orchestration.py is not there", 0.0, "")]
    module = importlib.import_module("bench_orchestration")
    questions = options.orchestration_questions or options.questions or 500
    dicts = module.orchestration_rows(
        questions=questions, seeds=options.seeds, latency=options.latency,
        concurrency=options.concurrency, data_path=options.path,
    )
    return [Row.from_dict(dict(item)) for item in dicts]


def _runners(options: argparse.Namespace) -> dict[str, Callable[[], list[Row]]]:
    import bench_backends
    import bench_embedding
    import bench_fill
    import bench_load
    import bench_memory
    import bench_scale

    return {
        "load": lambda: bench_load.rows(options.path),
        "memory": lambda: bench_memory.rows(options.path, options.questions),
        "embedding": lambda: bench_embedding.rows(options.path, options.questions, options.embed_texts,
                                                  options.embed_block, options.device),
        "backends": lambda: bench_backends.rows(options.backend_texts, options.embed_block,
                                                recall_file=options.backend_recall_file,
                                                recall_questions=options.backend_recall_questions, data=options.path,
                                                recall_cache=options.backend_recall_cache),
        "fill": lambda: bench_fill.rows(options.path, options.fill_questions, options.fill_backend),
        "orchestration": lambda: _orchestration(options),
        "scale": lambda: bench_scale.rows(options.scale_questions, options.scale_sessions),
    }


def _run_stage(stage: str, runner: Callable[[], list[Row]]) -> list[Row]:
    """The stage's rows. A stage skips the rows whose optional extra is not installed itself; should one still
    stop on an import of an extra's package, the stage is one skipped row naming the extra, and the others run."""
    try:
        return runner()
    except ImportError as exc:
        name = exc.name or ""
        if name.split(".")[0] not in EXTRAS:
            raise
        reason = missing_extra(name) or f"needs the {EXTRAS[name.split('.')[0]]} extra ({name})"
        print(f"bench: {stage}: skipped: {reason}", file=sys.stderr, flush=True)
        return [skipped(stage, f"the {stage} stage", reason)]


def _skips(text: str) -> set[str]:
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = names - set(STAGES)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown stage {', '.join(sorted(unknown))} (stages: {', '.join(STAGES)})")
    return names


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog="scripts/bench.py", description=__doc__.split("\n\n")[0])
    out.add_argument("path", nargs="?", type=Path, default=DEFAULT_S, help=f"a LongMemEval file (default {DEFAULT_S})")
    out.add_argument("--questions", type=int, default=None, help="the first N questions of the file (default all)")
    out.add_argument("--skip", type=_skips, action="append", default=[], metavar="STAGE[,STAGE]",
                     help=f"leave stages out ({', '.join(STAGES)})")
    out.add_argument("--json", action="store_true", help="print the rows as a JSON array instead of a table")
    group = out.add_argument_group("embedding")
    group.add_argument("--embed-texts", type=int, default=500, help="distinct turn texts to encode (500)")
    group.add_argument("--embed-block", type=int, default=100, help="texts per alternating block (100)")
    group.add_argument("--device", default="cpu", help="embedding device, the same for both sides (cpu)")
    group.add_argument("--backend-texts", type=int, default=2000,
                       help="S turns each embedding backend encodes, side by side (2000; stage backends)")
    group.add_argument("--backend-recall-file", type=Path, default=None,
                       help="the file recall@10 per backend is measured on (default: the mini file)")
    group.add_argument("--backend-recall-questions", type=int, default=None,
                       help="its first N questions (default all; the README's figure: S, 100)")
    group.add_argument("--backend-recall-cache", type=Path, default=None,
                       help="a folder keeping the recall runs' embedding caches (default: fresh temporary ones)")
    group = out.add_argument_group("fill")
    group.add_argument("--fill-questions", type=int, default=10,
                       help="questions `lme embed` fills, to project the whole file's fill from (10)")
    group.add_argument("--fill-backend", default="onnx/int8", help="RUNTIME/PRECISION of the fill (onnx/int8)")
    group = out.add_argument_group("orchestration")
    group.add_argument("--orchestration-questions", type=int, default=None,
                       help="questions of the study (default: --questions, else 500, i.e. the whole file)")
    group.add_argument("--seeds", type=int, default=3, help="seeds of the study (3)")
    group.add_argument("--latency", type=float, default=0.5, help="seconds per model call (0.5)")
    group.add_argument("--concurrency", type=int, default=32, help="calls in flight (32)")
    group = out.add_argument_group("scale")
    group.add_argument("--scale-questions", type=int, default=5, help="synthetic M-sized questions (5)")
    group.add_argument("--scale-sessions", type=int, default=500, help="sessions per synthetic history (500)")
    return out


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    skipped = set().union(*options.skip) if options.skip else set()
    if not options.path.exists():
        print(f"bench: error: {options.path}: no such file; pass a LongMemEval file.", file=sys.stderr)
        return 2
    if options.questions is not None and options.questions < 1:
        print("bench: error: --questions must be at least 1.", file=sys.stderr)
        return 2
    runners = _runners(options)
    rows: list[Row] = []
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    for stage in STAGES:
        if stage in skipped:
            print(f"bench: {stage}: skipped (--skip)", file=sys.stderr, flush=True)
            continue
        print(f"bench: {stage} ...", file=sys.stderr, flush=True)
        stage_started = time.perf_counter()
        rows += _run_stage(stage, runners[stage])
        print(f"bench: {stage} done in {time.perf_counter() - stage_started:.0f} s", file=sys.stderr, flush=True)
    if options.json:
        print(json.dumps([row.as_dict() for row in rows], indent=1))
        return 0
    command = " ".join(["python scripts/bench.py", *(sys.argv[1:] if argv is None else argv)])
    print(f"`{command}` on {options.path.name}; {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{time.perf_counter() - started:.0f} s in all; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after"
          + (f"; skipped: {', '.join(sorted(skipped))}" if skipped else "") + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
