"""Time and peak memory of loading LongMemEval-M-sized files: streaming versus `json.load`.

    python scripts/bench_m.py                       # generates a synthetic M file (500 x 500 sessions) in a temp dir
    python scripts/bench_m.py path/to/longmemeval_m_cleaned.json
    python scripts/bench_m.py --questions 50        # a smaller synthetic file

Each measurement runs in a fresh Python process, so its peak RSS
(`resource.getrusage(RUSAGE_SELF).ru_maxrss` of that child, also checked
against the kernel's `VmHWM`) is its own. (Linux carries the parent's peak
into a child's ru_maxrss across exec, so this parent stays small and leaves
even the decompressed-size count to a child; VmHWM is the child's alone.)

- `imports only`: the interpreter with lme's data, retrieval and memory modules
  imported: the floor under every other row;
- `scan_index`: ids, types and sizes of every record, no history built;
- `iter_questions`: streaming load and full validation, one question at a time;
- `iter_questions + BM25 memory`: the same, plus the BM25 baseline memory
  (`RetrievedMemoryBuilder(FTS5Retriever())`, top 100 turns, 96,000 bytes) built
  for each question as it streams by, then dropped;
- `read_json (json.load)`: the non-streaming loader's read of the whole file
  (`lme.data.load.read_json`), skipped when free memory is under 4x the file.

When no file is given, a synthetic one is written by
`scripts/make_synthetic_m.py` into a temporary directory (removed at the end).
If the file would take more than half the free disk space, fewer questions are written and the
table says so; streaming peak memory does not grow with the number of questions,
time grows linearly and `json.load`'s memory roughly with the file size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import peak_rss_mib, run_child  # noqa: E402

GENERATOR = HERE / "make_synthetic_m.py"
SESSION_BYTES = 10_400  # JSON bytes of one synthetic session, for the disk check
TARGET_QUESTIONS = 500
MODES: dict[str, str] = {
    "imports": "imports only",
    "scan": "scan_index",
    "stream": "iter_questions",
    "bm25": "iter_questions + BM25 memory",
    "json_load": "read_json (json.load)",
}


# --- children: one measurement each ------------------------------------------------


def child(mode: str, path: Path) -> dict[str, object]:
    """Run one measurement in this process and return its figures."""
    from lme.data.load import read_json
    from lme.data.stream import iter_questions, scan_index
    from lme.memory.retrieved import RetrievedMemoryBuilder
    from lme.retrieval.fts5 import FTS5Retriever

    questions = turns = evidence_found = size = 0
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    started = time.perf_counter()
    if mode == "scan":
        entries = scan_index(path)
        questions, turns = len(entries), sum(entry.turns for entry in entries)
    elif mode == "stream":
        for question in iter_questions(path):
            questions += 1
            turns += sum(len(session.turns) for session in question.sessions)
    elif mode == "bm25":
        builder = RetrievedMemoryBuilder(FTS5Retriever())
        for question in iter_questions(path):
            memory = builder.build(question)
            questions += 1
            turns += sum(len(session.turns) for session in question.sessions)
            evidence = {turn.turn_id for turn in question.turns() if turn.has_answer}
            evidence_found += bool(evidence & set(memory.turn_ids))
    elif mode == "json_load":
        records = read_json(path)
        questions = len(records)
        turns = sum(len(session) for record in records for session in record["haystack_sessions"])
    elif mode == "size":  # not a measurement: keeps decompression buffers out of the parent
        size = json_bytes(path)
    elif mode != "imports":
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    maxrss_mib, hwm_mib = peak_rss_mib()
    maxrss, hwm = round(maxrss_mib * 1024), (round(hwm_mib * 1024) if hwm_mib is not None else None)
    return {
        "mode": mode,
        "seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime - cpu_before,
        "questions": questions,
        "turns": turns,
        "evidence_found": evidence_found,
        "json_bytes": size,
        "maxrss_kib": maxrss,
        "vmhwm_kib": hwm,
    }


def measure(mode: str, path: Path) -> dict[str, object]:
    """Run `child(mode, path)` in a fresh interpreter and return its figures."""
    try:
        return run_child(Path(__file__).resolve(), mode, str(path))
    except RuntimeError as exc:
        raise SystemExit(f"bench_m: {MODES.get(mode, mode)} failed: {exc}") from None


# --- the parent: file, disk and memory checks, table -----------------------------------


def json_bytes(path: Path) -> int:
    """Size of the file's JSON (for .gz/.xz, the decompressed size, read through)."""
    if not path.name.endswith((".gz", ".xz")):
        return path.stat().st_size
    import gzip
    import lzma

    opener = gzip.open if path.name.endswith(".gz") else lzma.open
    total = 0
    with opener(path, "rb") as handle:
        while chunk := handle.read(1 << 16):
            total += len(chunk)
    return total


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _generate(directory: Path, questions: int, sessions: int, seed: int) -> tuple[Path, int, str]:
    """Write a synthetic file, fewer questions if the disk is short; returns (path, questions, note)."""
    free = shutil.disk_usage(directory).free
    per_question = sessions * SESSION_BYTES
    usable = free // 2 - (1 << 30)  # leave half the free space, and 1 GB more, to everyone else
    note = f"disk: {free / 1e9:.1f} GB free in {directory}"
    if questions * per_question > usable:
        fitting = max(1, usable // per_question)
        note += f"; only {fitting} of {questions} questions fit, so times are extrapolated"
        questions = int(fitting)
    path = directory / f"synthetic_m_{questions}x{sessions}.json"
    started = time.perf_counter()
    command = [sys.executable, str(GENERATOR), "--questions", str(questions), "--sessions", str(sessions)]
    subprocess.run([*command, "--seed", str(seed), "--out", str(path)], check=True, stdout=subprocess.DEVNULL)
    note += f"; generated in {time.perf_counter() - started:.0f} s"
    return path, questions, note


def _row(name: str, result: dict[str, object], scale: float) -> str:
    seconds = float(result["seconds"])  # type: ignore[arg-type]
    questions = int(result["questions"])  # type: ignore[arg-type]
    per_question = f"{seconds / questions:.3f}" if questions else "-"
    maxrss = int(result["maxrss_kib"]) / 1024  # type: ignore[arg-type]
    hwm = result["vmhwm_kib"]
    hwm_text = f"{int(hwm) / 1024:,.0f}" if hwm is not None else "-"  # type: ignore[arg-type]
    cpu = float(result["cpu_seconds"])  # type: ignore[arg-type]
    row = f"| {name} | {questions} | {seconds:,.1f} | {cpu:,.1f} | {per_question} | {maxrss:,.0f} | {hwm_text} |"
    return row + (f" {seconds * scale:,.1f} |" if scale != 1 else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, help="a LongMemEval file (default: generate a synthetic M file)")
    parser.add_argument("--questions", type=int, default=TARGET_QUESTIONS, help="synthetic file: questions (500)")
    parser.add_argument("--sessions", type=int, default=500, help="synthetic file: sessions per history (500)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic file: seed (0)")
    parser.add_argument("--tmp", type=Path, default=None, help="where to write the synthetic file (system temp dir)")
    parser.add_argument("--skip", action="append", default=[], choices=sorted(MODES), help="leave a measurement out")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(child(args.child, args.path)))
        return 0

    notes: list[str] = []
    scale = 1.0
    with tempfile.TemporaryDirectory(prefix="lme-bench-m-", dir=args.tmp) as scratch:
        if args.path is None:
            path, made, note = _generate(Path(scratch), args.questions, args.sessions, args.seed)
            notes.append(note)
            if made < args.questions:
                scale = args.questions / made
        else:
            path = args.path
            if not path.exists():
                raise SystemExit(f"bench_m: {path}: file not found.")
        size = int(measure("size", path)["json_bytes"])  # type: ignore[arg-type]
        modes = [mode for mode in MODES if mode not in args.skip]
        available = _mem_available()
        if "json_load" in modes and available is not None and available < 4 * size:
            modes.remove("json_load")
            notes.append(f"read_json skipped: {available / 1e9:.1f} GB available, under 4x the file's JSON")
        load_before = os.getloadavg()[0]
        results = {mode: measure(mode, path) for mode in modes}
        notes.append(f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after the measurements")

    import ijson

    print(f"file: {path if args.path else path.name + ' (synthetic, deleted)'}, {size / 1e9:.2f} GB of JSON")
    print(f"python {sys.version.split()[0]}, ijson {ijson.__version__} backend {ijson.backend}, {os.cpu_count()} CPUs")
    print()
    header = "| measurement | questions | wall s | CPU s | wall s / question | peak RSS MiB (ru_maxrss) | VmHWM MiB |"
    header += f" wall s for {args.questions} questions (extrapolated) |" if scale != 1 else ""
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if scale != 1 else ""))
    for mode, result in results.items():
        print(_row(MODES[mode], result, scale))
    if "bm25" in results:
        bm25 = results["bm25"]
        notes.append(
            f"BM25 memory held an evidence turn for {bm25['evidence_found']} of {bm25['questions']} questions"
        )
    stream = results.get("stream")
    if stream:
        notes.append(f"{int(stream['turns']):,} turns in all")  # type: ignore[arg-type]
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
