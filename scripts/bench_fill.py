"""Benchmark stage `fill`: filling the embedding cache ahead of a study, and a teammate who imports it.

    python scripts/bench_fill.py [--questions 10] [--backend onnx/int8] [--data S] [--json FILE]

Three commands, as a team runs them, each in a fresh process on fresh caches:

1. `python -m lme embed +design=first_pass dataset.path=S limit=N embedding.backend=... embedding.precision=...`
   into cache A: what it printed (texts, seconds, texts/s). The time to fill all of S is projected from that
   rate over S's distinct texts (its turns and questions, counted here); `lme embed` encodes the longest
   texts first, and the first N questions' texts are drawn from the same kind of histories as the rest.
   The full fill, once run, is recorded in the README;
2. `python -m lme cache export FILE` from cache A;
3. `python -m lme cache import FILE` into cache B, then the same `lme embed` on cache B: the texts it
   encoded (target 0) and its wall time.

Prints a markdown table; `--json FILE` writes the rows.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_common import DEFAULT_S, ROOT, Row, missing_extra, report, skipped  # noqa: E402

STAGE = "fill"
TARGET_MINUTES = 50.0  # filling S with `lme embed` on 2 cores (issue 20)
SUMMARY = re.compile(r"([\d,]+) texts requested, ([\d,]+) distinct;\s+([\d,]+) already cached, ([\d,]+) encoded "
                     r"in ([\d.]+) s")


@dataclass(frozen=True)
class EmbedRun:
    """What one `lme embed` printed (its semantic part), and its wall time."""

    requested: int
    distinct: int
    cached: int
    encoded: int
    encode_s: float
    wall_s: float

    @property
    def texts_per_s(self) -> float:
        return self.encoded / self.encode_s if self.encode_s > 0 else float("nan")


def parse_summary(text: str) -> EmbedRun:
    """The figures of `lme embed`'s summary line (wall time 0: the caller's to set)."""
    found = SUMMARY.search(text)
    if found is None:
        raise RuntimeError(f"no `lme embed` summary in its output:\n{text[-1500:]}")
    numbers = [int(value.replace(",", "")) for value in found.groups()[:4]]
    return EmbedRun(*numbers, encode_s=float(found.group(5)), wall_s=0.0)


def _lme(args: list[str], cache_dir: Path) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "HYDRA"))}
    env["LME_CACHE_DIR"] = str(cache_dir)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lme", *args], capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"`lme {' '.join(args)}` exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout, wall


def embed(data: Path, questions: int | None, backend: str, cache_dir: Path) -> EmbedRun:
    runtime, _, precision = backend.partition("/")
    args = ["embed", "+design=first_pass", f"dataset.path={data}", f"embedding.backend={runtime}",
            f"embedding.precision={precision or 'fp32'}", "tracking.enabled=false", "progress=false"]
    if questions is not None:
        args.append(f"limit={questions}")
    out, wall = _lme(args, cache_dir)
    run = parse_summary(out)
    return EmbedRun(run.requested, run.distinct, run.cached, run.encoded, run.encode_s, wall)


def distinct_texts(data: Path) -> int:
    """S's distinct turn texts plus its distinct questions: what a full fill encodes."""
    from lme.data.load import load_questions

    questions = load_questions(data)
    return len({turn.content for q in questions for turn in q.turns()}) + len({q.question for q in questions})


def rows(data: Path = DEFAULT_S, questions: int | None = 10, backend: str = "onnx/int8",
         work: Path | None = None) -> list[Row]:
    absent = missing_extra("openvino") if backend.startswith("openvino/") else None
    if absent:
        return [skipped(STAGE, f"filling {data.name} with lme embed ({backend}, projected)", absent)]
    root = Path(tempfile.mkdtemp(prefix="lme-bench-fill-")) if work is None else work
    try:
        return _rows(data, questions, backend, root)
    finally:
        if work is None:
            shutil.rmtree(root, ignore_errors=True)


def _rows(data: Path, questions: int | None, backend: str, root: Path) -> list[Row]:
    first = embed(data, questions, backend, root / "a")
    export = root / "vectors.sqlite"
    _, export_s = _lme(["cache", "export", str(export)], root / "a")
    _, import_s = _lme(["cache", "import", str(export)], root / "b")
    second = embed(data, questions, backend, root / "b")
    total = distinct_texts(data)
    minutes = total / first.texts_per_s / 60
    sample = f"the first {questions} questions" if questions is not None else "the whole file"
    return [
        Row(STAGE, f"filling {data.name} with lme embed ({backend}, projected)", round(minutes, 1), "min",
            f"{total:,} distinct texts at the {first.texts_per_s:.1f} texts/s measured on {sample}", None,
            f"< {TARGET_MINUTES:g} min on 2 cores", minutes < TARGET_MINUTES,
            f"`lme embed` on {sample}: {first.distinct:,} distinct texts, {first.encoded:,} encoded in "
            f"{first.encode_s:.1f} s ({first.wall_s:.1f} s wall, start-up included)"),
        Row(STAGE, "a second teammate after lme cache import", second.encoded, "texts encoded",
            f"the first fill: {first.encoded:,} encoded", None, "0 texts encoded", second.encoded == 0,
            f"export {export_s:.1f} s ({export.stat().st_size / 2**20:.1f} MiB), import {import_s:.1f} s, then "
            f"`lme embed` {second.wall_s:.1f} s wall with {second.cached:,} of {second.distinct:,} cached"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=10, help="the first N questions (default 10)")
    parser.add_argument("--backend", default="onnx/int8", help="RUNTIME/PRECISION (default onnx/int8)")
    parser.add_argument("--data", type=Path, default=DEFAULT_S)
    parser.add_argument("--work", type=Path, help="keep the caches and the export here (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    found = rows(args.data, args.questions, args.backend, args.work)
    report(found, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
