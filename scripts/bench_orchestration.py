"""Orchestration benchmark: a whole study against a provider with a fixed latency, vs the ideal.

    python scripts/bench_orchestration.py --questions 500 --seeds 3 --latency 0.5 --concurrency 32 [--json]

A study here is what a user runs: `python -m lme +design=bm25 -m seed=1,2,3`, in
a fresh process, on the real LongMemEval-S file (or its first N questions), with
the GPT-5 mini reader and the LongMemEval judge (`reader=gpt5_mini
judge=longmemeval`, the official templates from the data folder) pointed at the
loopback OpenAI-compatible server (`scripts/loopback_server.py`, in this
process) that answers every call after `latency` seconds. C is the provider's
limit on calls in flight, reader and judge together (`calls_in_flight=C`, each
model's `concurrency=C`); the study keeps 2C questions in flight
(`concurrency=2C`), so that while C calls are out other questions build their
memory, count tokens and settle, as a user tuning for throughput would set it. Everything a paid
study does happens: litellm, the call cache, the spending ledger (the models'
list prices from litellm's cost map), the journal, and MLflow tracking into a
temporary SQLite store (with the multirun parent). The cache directory is a
fresh temporary one, so every call is paid.

Figures:

- the study's wall time (the command, start to exit) vs the ideal
  `calls x latency / concurrency`, as a ratio (target: within 1.25x at C = 32);
  also the span from the first request to the last reply, which leaves out
  start-up (imports, loading the file);
- lme's own overhead with zero latency: the same study's wall time over
  questions x seeds (target: under 25 ms per question), measured with no
  profiler attached, and where that time goes: a py-spy profile of a second
  zero-latency run of the same study (when py-spy is installed; its sampling
  takes CPU on a 2-core machine, so that run's wall time is shown apart),
  sorted into loading, memory building, token counting, the litellm call path,
  the call cache, the ledger, the journal, tracking and imports;
- start-up: the time to the first request for the whole file, from the
  uncompressed `.json` (as `lme data fetch` writes it) and from `.json.xz`,
  for a multirun of one seed and for a single run without `-m`
  (`--no-startup` skips it).

The server answers the reader with a short text unique to the call (so the judge
prompts differ across seeds, as a sampled model's would) and the judge with
"yes"; it counts the calls it answered and the most it held at once.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from loopback_server import LoopbackServer  # noqa: E402

from lme.tracking.store_template import TEMPLATES_ENV, template_path, usable  # noqa: E402  (studies share the caller's)

STAGE = "orchestration"
KEY_ENV = "LME_BENCH_KEY"
FAKE_KEY = "bench-not-a-key"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_cleaned.json.xz"
QUESTIONS_PER_SLOT = 2  # questions in flight per call slot: some build memory or settle while the slots are busy
RATIO_TARGET = 1.25  # the study's wall time within 1.25x of the ideal (at C = 32; issue 20)
OVERHEAD_TARGET_MS = 25.0  # lme's own time per question (and seed) at zero latency (issue 20)
STARTUP_QUESTIONS = 4  # the start-up studies: the whole file loaded, a few questions asked
PROFILE_RATE_HZ = 100


# -- the study, as a user runs it ---------------------------------------------------------------------


def ideal_seconds(calls: int, latency: float, concurrency: int) -> float:
    """The least wall time `calls` calls of `latency` seconds each can take with `concurrency` in flight."""
    return calls * latency / max(1, concurrency)


def ratio(measured: float, ideal: float) -> float | None:
    return measured / ideal if ideal > 0 else None


class CallCounter:
    """The server's reply function: a unique short answer to each reader call, "yes" to each judge call."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def __call__(self, body: Mapping[str, Any]) -> str:
        messages = body.get("messages") or []
        is_reader = any(isinstance(m, Mapping) and m.get("role") in ("system", "developer") for m in messages)
        with self._lock:
            self.counts["reader" if is_reader else "judge"] += 1
            number = next(self._numbers)
        return f"The answer is item {number}." if is_reader else "yes"


def templates_path(data_path: Path) -> Path | None:
    """The LongMemEval judge templates next to the data file, when present."""
    path = data_path.parent / "judge_templates.json"
    return path if path.exists() else None


def study_command(data_path: Path, work: Path, base_url: str, questions: int | None, seeds: int, concurrency: int,
                  tracking: bool = True, traces: str = "full", multirun: bool = True) -> list[str]:
    """`python -m lme +design=bm25 -m seed=1,...` against the loopback server, everything under `work`;
    `multirun=False`: one run without `-m` (seed 1), its folder where a sweep's first job's would be."""
    templates = templates_path(data_path)
    judge = ["judge=longmemeval", f"judge.templates_path={templates}"] if templates else []
    if multirun:
        launch = ["-m", f"seed={','.join(str(s) for s in range(1, seeds + 1))}", f"hydra.sweep.dir={work / 'sweep'}"]
    else:
        if seeds != 1:
            raise ValueError("a single run has one seed")
        launch = ["seed=1", f"hydra.run.dir={work / 'sweep' / '0'}"]
    command = [
        sys.executable, "-m", "lme", "+design=bm25", *launch,
        f"dataset.path={data_path}", f"cache_dir={work / 'cache'}",
        f"concurrency={QUESTIONS_PER_SLOT * concurrency}", f"calls_in_flight={concurrency}", "reader=gpt5_mini", *judge,
    ]
    if questions is not None:
        command.append(f"limit={questions}")
    for part in ("reader", "judge"):
        command += [
            f"++{part}.model.api_base={base_url}", f"++{part}.model.api_key_env={KEY_ENV}",
            f"{part}.model.concurrency={concurrency}",
        ]
    if tracking:
        command += [f"tracking.uri=sqlite:///{work / 'mlflow.db'}", f"tracking.artifact_location={work / 'mlruns'}",
                    "tracking.experiment=bench", f"tracking.traces={traces}"]
    else:
        command.append("tracking.enabled=false")
    return command


def study_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI")) or k == TEMPLATES_ENV}
    env[KEY_ENV] = FAKE_KEY
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no fetch of the price map at import
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@dataclass(frozen=True)
class StudyRun:
    """What one study did and how long it took."""

    latency: float
    concurrency: int
    seeds: int
    questions: int  # per seed (what the journals hold)
    wall_s: float  # the command, start to exit
    first_request_s: float  # start to the server's first request (start-up: imports, loading, first memory)
    call_span_s: float  # first request to last reply
    calls: int  # completions the server answered
    reader_calls: int
    judge_calls: int
    max_in_flight: int
    journaled: int  # outcome rows over all seeds
    ledger_paid: int
    exit_code: int
    tracking: bool
    profile: dict[str, float] | None = None  # category -> active seconds (py-spy), when profiled
    traces: str = "full"  # tracking.traces of the study
    store_bytes: int = 0  # the MLflow store after the study: mlflow.db and mlruns/
    store_from_template: bool = False  # the new SQLite store was a copy of lme's empty one (lme.tracking.store_template)
    trace_cpu_ms: float | None = None  # the trace helper's CPU per question and seed (the jobs' metric), when traced

    @property
    def question_runs(self) -> int:
        return self.questions * self.seeds

    @property
    def ideal_s(self) -> float:
        return ideal_seconds(self.calls, self.latency, self.concurrency)


def _journal_rows(sweep: Path) -> tuple[int, int]:
    """(rows over every job, rows of the job with most) in the sweep's journals."""
    counts = []
    for path in sorted(sweep.glob("*/outcomes.jsonl")):
        counts.append(sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()))
    return sum(counts), max(counts, default=0)


def _ledger_paid(path: Path) -> int:
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM calls WHERE status = 'paid'").fetchone()[0])
    finally:
        conn.close()


def py_spy() -> str | None:
    """The py-spy executable (in this venv or on PATH), or None."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def store_size(work: Path) -> int:
    """Bytes of the study's MLflow store: the SQLite file (and its WAL) and the artifacts folder."""
    files = [*work.glob("mlflow.db*"), *((work / "mlruns").rglob("*") if (work / "mlruns").exists() else [])]
    return sum(path.stat().st_size for path in files if path.is_file())


def run_study(data_path: Path, questions: int | None, seeds: int, latency: float, concurrency: int, work: Path,
              tracking: bool = True, profile: bool = False, log: Path | None = None, traces: str = "full",
              multirun: bool = True) -> StudyRun:
    """One study in a fresh process against a loopback server with `latency` seconds per call (a multirun,
    or with `multirun=False` a single run of one seed)."""
    work.mkdir(parents=True, exist_ok=True)
    replies = CallCounter()
    spy = py_spy() if profile else None
    raw = work / "profile.txt"
    from_template = tracking and usable(template_path())  # the study's environment keeps the user's template folder
    with LoopbackServer(reply=replies, latency_s=latency, record_bodies=False) as server:
        command = study_command(data_path, work, server.base_url, questions, seeds, concurrency, tracking, traces,
                                multirun)
        if spy:
            command = [spy, "record", "--nonblocking", "--format", "raw", "--rate", str(PROFILE_RATE_HZ),
                       "--output", str(raw), "--", *command]
        log = log or work / "study.log"
        started = time.time()
        with log.open("wb") as out:
            code = subprocess.run(command, env=study_env(), cwd=ROOT, stdout=out, stderr=out).returncode
        wall = time.time() - started
        requests = server.completion_requests
        completed = server.counts["completed"]
        max_in_flight = server.max_in_flight
    if code != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the study exited {code}; the end of {log}:\n{tail}")
    times = sorted(request.received_at for request in requests)
    total, per_job = _journal_rows(work / "sweep")
    return StudyRun(
        latency=latency, concurrency=concurrency, seeds=seeds, questions=per_job, wall_s=wall,
        first_request_s=(times[0] - started) if times else wall,
        call_span_s=(times[-1] + latency - times[0]) if times else 0.0,
        calls=completed, reader_calls=replies.counts["reader"], judge_calls=replies.counts["judge"],
        max_in_flight=max_in_flight, journaled=total, ledger_paid=_ledger_paid(work / "cache" / "ledger.sqlite"),
        exit_code=code, tracking=tracking, profile=profile_categories(raw) if spy and raw.exists() else None,
        traces=traces if tracking else "off", store_bytes=store_size(work), store_from_template=from_template,
        trace_cpu_ms=trace_cpu_ms(work) if tracking and traces != "off" else None,
    )


def trace_cpu_ms(work: Path) -> float | None:
    """The trace helper's CPU time per question and seed over the study's jobs (their `traces_written` and
    `trace_cpu_ms_per_question` metrics), weighted by traces written."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("bench")
    if experiment is None:
        return None
    runs = [run.data.metrics for run in client.search_runs([experiment.experiment_id])]
    written = sum(m.get("traces_written", 0) for m in runs)
    spent = sum(m.get("traces_written", 0) * m.get("trace_cpu_ms_per_question", 0) for m in runs)
    return spent / written if written else None


# -- where the time goes (py-spy raw stacks) -----------------------------------------------------------

# (category, pattern on a frame "function (file:line)"); the first category whose pattern any frame of a
# sample matches, scanning from the innermost frame outwards, takes the sample; imports take it first.
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("token counting (ledger reservation)", re.compile(r"lme/models/pricing\.py|token_counter|tiktoken")),
    ("ledger (SQLite)", re.compile(r"lme/models/ledger\.py")),
    ("call cache (SQLite)", re.compile(r"lme/models/cache\.py")),
    ("journal", re.compile(r"\(append \(.*lme/run\.py|\bappend \(lme/run\.py|Journal")),
    ("tracking (MLflow)", re.compile(r"mlflow|lme/tracking\.py|sqlalchemy|alembic")),
    ("memory building", re.compile(r"lme/memory/|lme/retrieval/")),
    ("loading the file", re.compile(r"lme/data/")),
    ("litellm call path", re.compile(r"litellm|httpx|aiohttp|openai/|httpcore|anyio|pydantic")),
    ("other lme", re.compile(r"lme/")),
)
IMPORTS = "imports (start-up)"
_IMPORT_FRAME = re.compile(r"_find_and_load|_call_with_frames_removed \(<frozen importlib")


def categorize(stack: str) -> str:
    """The category of one sample's stack (frames joined by ';', outermost first)."""
    frames = stack.split(";")
    if any(_IMPORT_FRAME.search(frame) for frame in frames):
        return IMPORTS
    for frame in reversed(frames):
        for name, pattern in CATEGORIES:
            if pattern.search(frame):
                return name
    return "other (interpreter, event loop, Hydra)"


def profile_categories(raw: Path, rate_hz: float = PROFILE_RATE_HZ) -> dict[str, float]:
    """Active thread-seconds per category from py-spy's raw output (`stack count` per line)."""
    seconds: Counter[str] = Counter()
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            seconds[categorize(stack)] += int(count) / rate_hz
    return dict(seconds.most_common())


# -- the rows ------------------------------------------------------------------------------------------


def row(figure: str, value: float | int | None, unit: str, compared_to: str = "", ratio_: float | None = None,
        target: str = "", met: bool | None = None, note: str = "") -> dict[str, Any]:
    return {"stage": STAGE, "figure": figure, "value": value, "unit": unit, "compared_to": compared_to,
            "ratio": ratio_, "target": target, "met": met, "note": note}


def _counts_note(run: StudyRun) -> str:
    return (f"{run.questions} questions x {run.seeds} seeds, {run.calls} calls ({run.reader_calls} reader, "
            f"{run.judge_calls} judge; {run.ledger_paid} paid in the ledger), server held at most "
            f"{run.max_in_flight} at once; tracking {_store_note(run) if run.tracking else 'off'}")


def _store_note(run: StudyRun) -> str:
    how = "a copy of lme's empty store" if run.store_from_template else "made by MLflow's migrations"
    return f"MLflow, new temp SQLite store ({how}, lme.tracking.store_template)"


def latency_rows(run: StudyRun) -> list[dict[str, Any]]:
    ideal = run.ideal_s
    measured = ratio(run.wall_s, ideal)
    span = ratio(run.call_span_s, ideal)
    at = f"L={run.latency:g} s, C={run.concurrency}"
    return [
        row(f"study wall time ({at})", round(run.wall_s, 2), "s",
            f"ideal calls x L / C = {run.calls} x {run.latency:g} / {run.concurrency} = {ideal:.1f} s",
            None if measured is None else round(measured, 3), f"<= {RATIO_TARGET}x (at C = 32)",
            None if measured is None else measured <= RATIO_TARGET, _counts_note(run)),
        row(f"first request to last reply ({at})", round(run.call_span_s, 2), "s", f"ideal {ideal:.1f} s",
            None if span is None else round(span, 3), "", None,
            f"start-up before the first request (imports, loading the file, first memory): "
            f"{run.first_request_s:.1f} s"),
    ]


def overhead_rows(run: StudyRun, profiled: StudyRun | None = None) -> list[dict[str, Any]]:
    """lme's time per question and seed at zero latency, from `run` (no profiler attached: on 2 cores py-spy's
    own sampling added 0.5-1.1 ms per question), and where the time goes from `profiled`, a second
    zero-latency run of the same study under py-spy, when there is one."""
    per_question = 1000 * run.wall_s / max(1, run.question_runs)
    rows = [
        row(f"lme overhead per question (L=0, C={run.concurrency})", round(per_question, 2), "ms",
            f"wall {run.wall_s:.1f} s / ({run.questions} questions x {run.seeds} seeds)", None,
            f"< {OVERHEAD_TARGET_MS:g} ms", per_question < OVERHEAD_TARGET_MS, _counts_note(run) + "; no profiler"),
        row("  start-up before the first call (L=0)", round(run.first_request_s, 2), "s", "", None, "", None,
            f"{1000 * run.first_request_s / max(1, run.question_runs):.1f} ms per question"),
    ]
    if profiled is not None and profiled.profile:
        active = sum(profiled.profile.values())
        under_spy = 1000 * profiled.wall_s / max(1, profiled.question_runs)
        rows.append(row("  the same study under py-spy (L=0)", round(under_spy, 2), "ms",
                        f"wall {profiled.wall_s:.1f} s, the profiler's sampling included", None, "", None,
                        f"py-spy {PROFILE_RATE_HZ} Hz, non-blocking, every thread; the rows below are its samples"))
        for name, seconds in profiled.profile.items():
            rows.append(row(
                f"  profile: {name}", round(1000 * seconds / max(1, profiled.question_runs), 2), "ms/question",
                f"{seconds:.1f} of {active:.1f} thread-seconds active", round(seconds / active, 3) if active else None,
                "", None, f"py-spy {PROFILE_RATE_HZ} Hz, non-blocking, on the profiled L=0 run"))
    return rows


def traces_rows(full: StudyRun, off: StudyRun) -> list[dict[str, Any]]:
    """The same study with one trace per question (`tracking.traces=full`) and without (`off`), side by side."""
    runs = full.question_runs
    return [
        row(f"wall with traces (L={full.latency:g}, C={full.concurrency})", round(full.wall_s, 1), "s",
            f"tracking.traces=off: {off.wall_s:.1f} s", round(full.wall_s / off.wall_s, 3) if off.wall_s else None,
            "no slower", full.wall_s <= off.wall_s * 1.05,
            f"{1000 * (full.wall_s - off.wall_s) / max(1, runs):.1f} ms per question and seed added"),
        row("  MLflow store with traces", round(full.store_bytes / 2**20, 1), "MiB",
            f"tracking.traces=off: {off.store_bytes / 2**20:.1f} MiB", None, "", None,
            f"{(full.store_bytes - off.store_bytes) / max(1, runs) / 1024:.0f} KiB per question and seed added"),
        row("  trace helper CPU per question and seed", None if full.trace_cpu_ms is None else round(full.trace_cpu_ms, 1),
            "ms", "in the helper process, off the job's loop", None, "", None, ""),
    ]


def startup_rows(data_path: Path, root: Path, concurrency: int, tracking: bool = True) -> list[dict[str, Any]]:
    """Time to the first request for the whole file, from the uncompressed `.json` (as `lme data fetch`
    writes it) and from `.json.xz`: a one-seed study of the first few questions at zero latency (the
    whole file is loaded and validated all the same). A `.xz` file is decompressed once for the `.json` side."""
    sources: list[tuple[str, Path]] = []
    if data_path.suffix == ".xz":
        import lzma

        plain_copy = root / data_path.with_suffix("").name
        root.mkdir(parents=True, exist_ok=True)
        with lzma.open(data_path, "rb") as source, plain_copy.open("wb") as target:
            shutil.copyfileobj(source, target, 1 << 22)
        sources = [(".json", plain_copy), (".json.xz", data_path)]
    else:
        sources = [(data_path.suffix or "file", data_path)]
    rows = []
    for multirun in (True, False):
        for label, path in sources:
            kind = "" if multirun else "single run, "
            folder = root / f"startup{'' if multirun else '-single'}{label}"
            run = run_study(path, STARTUP_QUESTIONS, 1, 0.0, concurrency, folder, tracking, multirun=multirun)
            parent = " and parent run" if multirun else ""
            rows.append(row(f"start-up to the first request, {kind}from {label}", round(run.first_request_s, 2), "s",
                            "", None, "", None,
                            f"{path.name}: imports, {_store_note(run) if tracking else 'no tracking'}{parent}, "
                            f"loading and validating all of it, the first memory and token count; wall "
                            f"{run.wall_s:.1f} s for {STARTUP_QUESTIONS} questions"))
    return rows


def orchestration_rows(questions: int, seeds: int, latency: float, concurrency: int, data_path: Path, *,
                       tracking: bool = True, profile: bool = True, work: Path | None = None,
                       traces: str = "full", compare_traces: bool = False, startup: bool = True) -> list[dict[str, Any]]:
    """The orchestration rows of the benchmark table: the study at `latency` vs its ideal, and at zero
    latency lme's own time per question, with a py-spy breakdown when py-spy is installed.

    `questions` >= the file's count runs the whole file; the studies run in a temp dir (or `work`)."""
    data_path = Path(data_path)
    root = Path(tempfile.mkdtemp(prefix="lme-bench-orch-")) if work is None else work
    try:
        from lme.data.stream import count_questions  # a cheap index pass

        limit = questions if questions < count_questions(data_path) else None
        rows: list[dict[str, Any]] = []
        if latency > 0:
            run = run_study(data_path, limit, seeds, latency, concurrency, root / f"L{latency:g}", tracking,
                            traces=traces)
            rows += latency_rows(run)
            if compare_traces and tracking:
                off = run_study(data_path, limit, seeds, latency, concurrency, root / f"L{latency:g}-off", tracking,
                                traces="off")
                rows += traces_rows(run, off)
        zero = run_study(data_path, limit, seeds, 0.0, concurrency, root / "L0", tracking, traces=traces)
        profiled = None
        if profile and py_spy():  # a second run for the breakdown: the figure above is free of the profiler's CPU
            profiled = run_study(data_path, limit, seeds, 0.0, concurrency, root / "L0-profiled", tracking,
                                 profile=True, traces=traces)
        rows += overhead_rows(zero, profiled)
        if startup:
            rows += startup_rows(data_path, root, concurrency, tracking)
        return rows
    finally:
        if work is None:
            shutil.rmtree(root, ignore_errors=True)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| figure | value | compared to | ratio | target | met |", "|---|---:|---|---:|---|---|"]
    for r in rows:
        met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
        ratio_text = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['figure']} | {r['value']} {r['unit']} | {r['compared_to']} | {ratio_text} | "
                     f"{r['target']} | {met} |")
    notes = [f"- {r['figure'].strip()}: {r['note']}" for r in rows if r["note"] and not r["figure"].startswith("  ")]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=500, help="questions (default 500: all of S)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per call at the server (default 0.5)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="calls in flight, over reader and judge together (default 32); questions in flight: twice that")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-tracking", action="store_true", help="run with tracking.enabled=false")
    parser.add_argument("--no-profile", action="store_true", help="no py-spy breakdown of the zero-latency run")
    parser.add_argument("--traces", choices=("full", "metadata", "off"), default="full",
                        help="tracking.traces of the studies (default full)")
    parser.add_argument("--compare-traces", action="store_true",
                        help="run the latency study again with tracking.traces=off: wall time and store size side by side")
    parser.add_argument("--no-startup", action="store_true",
                        help="skip the start-up rows (time to the first request from .json and .json.xz)")
    parser.add_argument("--work", type=Path, help="keep the studies' files here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"bench_orchestration: error: {args.data}: data file not found.", file=sys.stderr)
        return 2
    rows = orchestration_rows(args.questions, args.seeds, args.latency, args.concurrency, args.data,
                              tracking=not args.no_tracking, profile=not args.no_profile, work=args.work,
                              traces=args.traces, compare_traces=args.compare_traces, startup=not args.no_startup)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
