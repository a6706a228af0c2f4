"""Benchmark stage `load`: reading and validating a LongMemEval file, against `json.load` of the same file.

    python scripts/bench_load.py [FILE]      # this stage alone, as a table

Each measurement runs in a fresh interpreter (`bench_common.run_child`), so
its peak RSS is its own; imports happen before the clock starts. Both sides
decompress the file the same way (`lzma.open`/`gzip.open` in binary mode,
streamed), so the ratio is parsing + validation against parsing alone:

- `json.load`: `json.load(opener(path, "rb"))`, the plain way to read the
  file (json decodes the UTF-8 bytes itself), no validation, no objects built;
- `load_questions` (`lme.data.load`): `json.load` as above, then every record
  validated into frozen `Question`s, all held in memory (what a run on S uses);
- `iter_questions` (`lme.data.stream`): ijson events, one record validated and
  held at a time (what a run on M uses, `dataset.stream=true`);
- `decompress only`: reading the decompressed bytes and dropping them: the
  floor under all three, reported in the notes.

The whole file is read whatever `--questions` says (`json.load` cannot stop early).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import DEFAULT_S, Row, child_peak_mib, markdown, ratio, run_child  # noqa: E402

STAGE = "load"
TARGET_RATIO = 2.0
MODES = ("decompress", "json_load", "load_questions", "iter_questions")


def _open(path: Path):
    return {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)(path, "rb")


def child(mode: str, path: Path) -> dict[str, object]:
    """One measurement in this process."""
    from lme.data.load import load_questions
    from lme.data.stream import iter_questions

    started = time.perf_counter()
    if mode == "decompress":
        size = 0
        with _open(path) as handle:
            while chunk := handle.read(1 << 20):
                size += len(chunk)
        questions = 0
    elif mode == "json_load":
        with _open(path) as handle:
            questions = len(json.load(handle))
    elif mode == "load_questions":
        questions = len(load_questions(path))
    elif mode == "iter_questions":
        questions = sum(1 for _ in iter_questions(path))
    else:
        raise SystemExit(f"bench_load: unknown mode {mode!r}")
    seconds = time.perf_counter() - started
    result: dict[str, object] = {"mode": mode, "seconds": seconds, "questions": questions,
                                 "peak_rss_mib": child_peak_mib()}
    if mode == "decompress":
        result["json_bytes"] = size
    return result


def rows(path: Path) -> list[Row]:
    """The stage's rows for the file at `path`."""
    script = Path(__file__).resolve()
    got = {mode: run_child(script, mode, str(path)) for mode in MODES}
    base = got["json_load"]
    base_s = float(base["seconds"])
    floor = got["decompress"]
    reference = f"json.load of the same file: {base_s:.3f} s"
    notes = (f"{got['iter_questions']['questions']} questions, {int(floor['json_bytes']) / 1e6:,.0f} MB of JSON; "
             f"decompression alone {float(floor['seconds']):.2f} s (in both sides)")
    out: list[Row] = []
    for mode, label in (("load_questions", "load + validate, all held (load_questions)"),
                        ("iter_questions", "load + validate, streamed (iter_questions)")):
        seconds = float(got[mode]["seconds"])
        share = ratio(seconds, base_s)
        out.append(Row(STAGE, label, seconds, "s", reference, share, f"within {TARGET_RATIO:g}x",
                       share is not None and share <= TARGET_RATIO, notes if mode == "load_questions" else ""))
    base_peak = float(base["peak_rss_mib"])
    for mode, label in (("load_questions", "peak RSS, all held"), ("iter_questions", "peak RSS, streamed")):
        peak = float(got[mode]["peak_rss_mib"])
        out.append(Row(STAGE, label, peak, "MiB", f"json.load: {base_peak:,.0f} MiB", ratio(peak, base_peak)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_S, help=f"a LongMemEval file ({DEFAULT_S.name})")
    parser.add_argument("--child", default=None, choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.path)))
        return 0
    print(markdown(rows(args.path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
