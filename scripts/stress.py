"""Stress lme's gateway, ledger and resume against the loopback server: kill runs, resume them, cap them.

    python scripts/stress.py                       # 10 kills, 500 questions x 3 seeds, caps; a few minutes
    python scripts/stress.py --kills 3 --big-questions 100 --work /tmp/lme-stress

Every `python -m lme` here is a real subprocess whose reader and judge are
OpenAI-compatible models served by `scripts/loopback_server.py` (in this
process, on 127.0.0.1) with injected faults (429 with Retry-After, 500, 503,
malformed JSON, empty body, dropped connection, replies slower than the
timeout, and malformed completions: a 200 whose `choices` list is empty, one
whose content is null). The reader answers by lme's extractive rule and the
judge by its lexical rule, so an uninterrupted run's outcomes are known. Prices
are set on the models, so every call costs something and lands in the ledger.

1. Kill and resume: an uninterrupted reference run, then `--kills` runs each
   stopped at a random point (after a random number of journaled questions, or
   during start-up: each signal's first stop) and rerun with the same command (the same
   `hydra.run.dir`, so the journal is found again). The signal alternates
   (`--signals`): SIGKILL, then SIGINT (Ctrl-C), which must end the run with
   exit status 130 and exactly one `lme: interrupted` line on stderr, no
   traceback. Each resumed run's outcomes must equal the reference's, each paid
   call must be in the ledger once (paid calls == unique calls; calls cut off
   in flight are listed as interrupted; a call cancelled by SIGINT between
   attempts after a billed malformed reply is paid for that reply, unanswered,
   and asked again: such rows are counted apart), and the paid calls must be
   the reference's calls.
2. Caps: three jobs of one study run at once (three processes, 64 calls in
   flight each) against a study dollar cap, then one job against a call cap;
   the ledger's paid total must not exceed either cap (overshoot 0), and each
   job must stop cleanly (exit status 3, its journal whole). Then a provider
   that ignores `max_tokens` (every reply padded far past it) against a dollar
   cap, one call in flight: the first reply costs more than its reservation
   and more than the cap; the job must stop at once (exit status 3, saying the
   reply cost more than reserved, no further request), the reply kept (cached
   and paid), and the cap overshot by at most that one reply.
3. Volume: `--big-questions` questions x 3 seeds (`-m seed=1,2,3`) with 10%
   injected faults; every question of every seed must be in its journal.

A SIGINT at start-up is sent once Hydra has written the run's `.hydra/`
config (lme's own Ctrl-C handling is then in place); one sent while Python
is still importing Hydra gets Python's default traceback.

The last lines are the figures the issue asks for; the exit status is 0 when
every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from loopback_server import DEFAULT_FAULT_MIX, LoopbackServer, mixed_fault_rates  # noqa: E402

KEY_ENV = "LME_FAKE_KEY"
READER = "openai/gpt-4o-mini"
JUDGE = "openai/gpt-4o-2024-08-06"
PRICES = {"reader": (1.5e-07, 6e-07), "judge": (2.5e-06, 1e-05)}
# Row keys that differ between an uninterrupted run and a resumed one without the outcome differing:
# timing, and whether a call came from the cache (and so what this job paid).
VOLATILE_KEYS = frozenset({"seconds", "cached_calls", "spent_usd", "attempts"})
BUDGET_EXIT = 3
INTERRUPTED_EXIT = 130
# The faults the stress runs draw from: the loopback server's default mix (429, 500, 503, malformed JSON, empty
# body, dropped connection, slow) and malformed completions, which the gateway retries as failed attempts
# (billed when the reply reported usage; one call is still one ledger row).
FAULT_MIX: dict[str, float] = {**DEFAULT_FAULT_MIX, "empty_choices": 1, "null_content": 1}
SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT}


def fault_rates(total: float) -> dict[str, float]:
    """`total` (the share of requests faulted) spread over `FAULT_MIX`."""
    return mixed_fault_rates(total, FAULT_MIX)


# -- data and commands ---------------------------------------------------------------------------------


def write_dataset(path: Path, n: int) -> list[str]:
    """`n` synthetic questions in the LongMemEval format (lme's sample generator over several seeds)."""
    from lme.data.sample import generate_sample

    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    seed = 0
    while len(records) < n:
        for record in generate_sample(seed):
            if record["question_id"] not in seen and len(records) < n:
                seen.add(record["question_id"])
                records.append(record)
        seed += 1
        if seed > 10 + n:  # pragma: no cover - the generator always yields new ids
            raise RuntimeError("the sample generator stopped giving new question ids")
    path.write_text(json.dumps(records), encoding="utf-8")
    return [record["question_id"] for record in records]


def model_overrides(base_url: str, timeout_s: float = 1.0, attempts: int = 8) -> list[str]:
    """Reader and judge as priced OpenAI-compatible models at `base_url`, with quick retries."""
    overrides = []
    for part, model in (("reader", READER), ("judge", JUDGE)):
        price_in, price_out = PRICES[part]
        overrides += [
            f"{part}.model.model={model}",
            f"++{part}.model.api_base={base_url}",
            f"++{part}.model.api_key_env={KEY_ENV}",
            f"{part}.model.max_attempts={attempts}",
            f"{part}.model.timeout_s={timeout_s}",
            f"++{part}.model.backoff_base_s=0.01",
            f"++{part}.model.backoff_max_s=0.05",
            f"++{part}.model.retry_after_max_s=0.2",
            f"++{part}.model.input_cost_per_token={price_in}",
            f"++{part}.model.output_cost_per_token={price_out}",
        ]
    return overrides


def lme_command(dataset: Path, run_dir: Path, cache_dir: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "lme",
        f"dataset.path={dataset}",
        f"hydra.run.dir={run_dir}",
        f"cache_dir={cache_dir}",
        "tracking.enabled=false",
        *model_overrides(base_url),
        *extra,
    ]


def lme_env(key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env[KEY_ENV] = key
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# -- reading what a run left -------------------------------------------------------------------------------


def journal_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The journal's complete rows (a line cut by a kill is not a row), in question-id order."""
    path = run_dir / "outcomes.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return sorted(rows, key=lambda row: row["question_id"])


def journal_lines(run_dir: Path) -> int:
    try:
        with (run_dir / "outcomes.jsonl").open("rb") as handle:
            return handle.read().count(b"\n")
    except FileNotFoundError:
        return 0


def stable(value: Any) -> Any:
    """A row without the keys that may differ between an uninterrupted and a resumed run."""
    if isinstance(value, Mapping):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def outcomes_by_id(run_dir: Path) -> dict[str, Any]:
    return {row["question_id"]: stable(row) for row in journal_rows(run_dir)}


@dataclass(frozen=True)
class LedgerFigures:
    paid: int
    unique: int
    interrupted: int
    failed: int
    dollars: float
    keys: frozenset[str]
    largest: float = 0.0  # the most one paid call cost

    @classmethod
    def read(cls, path: Path, study: str | None = None, exclude: frozenset[int] = frozenset()) -> LedgerFigures:
        """The ledger's figures (of one study), leaving out the rows whose ids are in `exclude`."""
        if not path.exists():
            return cls(0, 0, 0, 0, 0.0, frozenset())
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            where, args = (" WHERE study = ?", (study,)) if study else ("", ())
            rows = conn.execute(f"SELECT id, status, call_key, dollars FROM calls{where}", args).fetchall()
        finally:
            conn.close()
        rows = [(status, key, dollars) for row_id, status, key, dollars in rows if row_id not in exclude]
        paid = [(key, dollars) for status, key, dollars in rows if status == "paid"]
        return cls(
            paid=len(paid),
            unique=len({key for key, _ in paid}),
            interrupted=sum(1 for status, _, _ in rows if status == "interrupted"),
            failed=sum(1 for status, _, _ in rows if status == "failed"),
            dollars=sum(dollars or 0.0 for _, dollars in paid),
            keys=frozenset(key for key, _ in paid),
            largest=max((dollars or 0.0 for _, dollars in paid), default=0.0),
        )


# -- running and killing -------------------------------------------------------------------------------------


def run_to_end(command: Sequence[str], env: Mapping[str, str], log: Path, timeout: float = 900) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.run(list(command), env=dict(env), stdout=out, stderr=out, timeout=timeout, cwd=ROOT).returncode


@dataclass(frozen=True)
class Stop:
    """How a run given a signal ended."""

    sig: int
    sent: bool  # the signal was sent while the run was still going
    returncode: int
    stderr: str  # the run's stderr (also appended to its log)

    @property
    def killed(self) -> bool:
        """The signal stopped the run: SIGKILL's -9, or lme's exit status 130 after SIGINT (or Python's -2, a
        problem `sigint_problems` names)."""
        if not self.sent:
            return False
        if self.sig == signal.SIGINT:
            return self.returncode in (INTERRUPTED_EXIT, -signal.SIGINT)
        return self.returncode == -self.sig

    @property
    def name(self) -> str:
        return signal.Signals(self.sig).name


def run_and_kill(command: Sequence[str], env: Mapping[str, str], run_dir: Path, log: Path, after_lines: int,
                 delay_s: float, timeout: float = 600, sig: int = signal.SIGKILL) -> Stop:
    """Start the run; send it `sig` `delay_s` after its journal holds `after_lines` lines (`after_lines` 0:
    during start-up; for SIGINT, once Hydra has written this run's `.hydra/` config)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    hydra_config = run_dir / ".hydra" / "config.yaml"
    started = time.time()
    with log.open("ab") as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(list(command), env=dict(env), stdout=out, stderr=err, cwd=ROOT)
        deadline = time.monotonic() + timeout
        try:
            def waiting() -> bool:
                if journal_lines(run_dir) < after_lines:
                    return True
                if sig == signal.SIGINT and after_lines == 0:  # not while Python is still importing Hydra
                    try:
                        return hydra_config.stat().st_mtime < started
                    except FileNotFoundError:
                        return True
                return False

            while process.poll() is None and waiting():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run did not reach {after_lines} journaled questions in {timeout} s")
                time.sleep(0.002)
            if process.poll() is None:
                time.sleep(delay_s)
            sent = process.poll() is None
            if sent:
                process.send_signal(sig)
            process.wait(timeout=timeout)  # reaped: the next run's ledger sees this process as dead
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            err.seek(0)
            stderr = err.read()
            out.write(stderr)
    return Stop(sig, sent, process.returncode, stderr.decode("utf-8", errors="replace"))


def sigint_problems(stop: Stop) -> list[str]:
    """What is wrong with how a run stopped by SIGINT ended: exit 130, one `lme: interrupted` line, no traceback."""
    if not stop.sent or stop.sig != signal.SIGINT:
        return []
    problems = []
    if stop.returncode != INTERRUPTED_EXIT:
        problems.append(f"exit {stop.returncode} after SIGINT, expected {INTERRUPTED_EXIT}")
    lines = [line for line in stop.stderr.splitlines() if line.startswith("lme: interrupted")]
    if len(lines) != 1:
        problems.append(f"{len(lines)} 'lme: interrupted' lines on stderr after SIGINT, expected 1")
    if "Traceback" in stop.stderr:
        problems.append("a traceback on stderr after SIGINT")
    return problems


def paid_without_answer(cache_dir: Path) -> frozenset[int]:
    """Ledger ids of `paid` rows whose call has no answer in the call cache: after a SIGINT, calls cancelled
    between attempts whose malformed replies were billed (settled as paid, not cached, asked again on resume)."""
    ledger, calls = cache_dir / "ledger.sqlite", cache_dir / "calls.sqlite"
    if not ledger.exists():
        return frozenset()
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, call_key FROM calls WHERE status = 'paid'").fetchall()
    finally:
        conn.close()
    cached: set[str] = set()
    if calls.exists():
        conn = sqlite3.connect(f"file:{calls}?mode=ro", uri=True)
        try:
            cached = {key for (key,) in conn.execute("SELECT key FROM calls")}
        finally:
            conn.close()
    return frozenset(row_id for row_id, key in rows if key not in cached)


@dataclass
class KillReport:
    killed: int = 0
    resumed: int = 0
    identical: int = 0
    runs: int = 0
    paid: int = 0  # paid rows that are a call's answer (billed-without-answer rows are counted apart)
    unique: int = 0
    interrupted: int = 0
    same_calls_as_reference: int = 0
    sent: dict[str, int] = field(default_factory=dict)  # signal name -> runs it was sent to
    stopped: dict[str, int] = field(default_factory=dict)  # signal name -> runs it stopped
    sigint_clean: int = 0  # SIGINT runs that exited 130 with one `lme: interrupted` line and no traceback
    billed_without_answer: int = 0
    problems: list[str] = field(default_factory=list)

    def record(self, name: str, stop: Stop) -> None:
        self.sent[stop.name] = self.sent.get(stop.name, 0) + 1
        if stop.killed:
            self.killed += 1
            self.stopped[stop.name] = self.stopped.get(stop.name, 0) + 1
        problems = sigint_problems(stop)
        if stop.sent and stop.sig == signal.SIGINT and not problems:
            self.sigint_clean += 1
        self.problems += [f"{name}: {problem}" for problem in problems]

    def by_signal(self) -> str:
        return ", ".join(f"{sig} {self.stopped.get(sig, 0)} of {count}" for sig, count in sorted(self.sent.items()))


def kill_and_resume(
    dataset: Path, work: Path, base_url: str, env: Mapping[str, str], kills: int, rng: random.Random,
    n_questions: int, extra: Sequence[str] = (), chain: bool = False, signals: Sequence[int] = (signal.SIGKILL,),
) -> KillReport:
    """The reference run, then `kills` killed-and-resumed runs (each its own run dir, cache and ledger; with
    `chain`, one run killed `kills` times in a row, then finished). The i-th kill sends `signals[i % len]`;
    without `chain` and with at least two kills per signal, each signal's first kill is during start-up."""
    report = KillReport()
    reference_dir = work / "reference"
    code = run_to_end(lme_command(dataset, reference_dir / "run", reference_dir / "cache", base_url, *extra), env,
                      work / "reference.log")
    if code != 0:
        raise RuntimeError(f"the reference run failed (exit {code}); see {work / 'reference.log'}")
    reference = outcomes_by_id(reference_dir / "run")
    reference_ledger = LedgerFigures.read(reference_dir / "cache" / "ledger.sqlite")
    if len(reference) != n_questions:
        raise RuntimeError(f"the reference run journaled {len(reference)} of {n_questions} questions")

    points = sorted(rng.randrange(0, n_questions) for _ in range(kills)) if chain else [
        rng.randrange(0, n_questions) for _ in range(kills)
    ]
    if not chain and kills >= 2 * len(signals):  # the first stop by each signal lands during start-up
        points[: len(signals)] = [0] * len(signals)
    targets = [(f"kill-{i:02d}", after) for i, after in enumerate(points)]
    if chain:
        targets = [("chain", after) for after in points]
    unanswered: frozenset[int] = frozenset()
    for i, (name, after) in enumerate(targets):
        sig = signals[i % len(signals)]
        run_dir, cache_dir = work / name / "run", work / name / "cache"
        command = lme_command(dataset, run_dir, cache_dir, base_url, *extra)
        delay = rng.uniform(0.0, 3.0) if after == 0 else rng.uniform(0.0, 0.05)  # 0: during start-up
        report.record(name if not chain else f"{name} stop {i + 1}",
                      run_and_kill(command, env, run_dir, work / f"{name}.log", after, delay, sig=sig))
        unanswered |= paid_without_answer(cache_dir)
        if not chain:
            _finish(report, name, command, env, work, run_dir, cache_dir, reference, reference_ledger, unanswered)
            unanswered = frozenset()
    if chain:
        _finish(report, "chain", command, env, work, run_dir, cache_dir, reference, reference_ledger, unanswered)
    return report


def _finish(report: KillReport, name: str, command: Sequence[str], env: Mapping[str, str], work: Path,
            run_dir: Path, cache_dir: Path, reference: Mapping[str, Any], reference_ledger: LedgerFigures,
            unanswered: frozenset[int] = frozenset()) -> None:
    """Resume the run to its end and check it; `unanswered` are the ledger ids of the paid-without-answer rows
    its stopped runs left (see `paid_without_answer`), counted apart from the paid answers."""
    report.runs += 1
    code = run_to_end(command, env, work / f"{name}.log")
    if code == 0:
        report.resumed += 1
    else:
        report.problems.append(f"{name}: the resumed run exited {code} (see {work / f'{name}.log'})")
    outcomes = outcomes_by_id(run_dir)
    if outcomes == reference:
        report.identical += 1
    else:
        differing = sorted(q for q in set(outcomes) | set(reference) if outcomes.get(q) != reference.get(q))
        report.problems.append(f"{name}: {len(differing)} outcomes differ from the reference, e.g. {differing[:3]}")
    figures = LedgerFigures.read(cache_dir / "ledger.sqlite", exclude=unanswered)
    report.paid += figures.paid
    report.unique += figures.unique
    report.interrupted += figures.interrupted
    report.billed_without_answer += len(unanswered)
    if figures.keys == reference_ledger.keys:
        report.same_calls_as_reference += 1
    else:
        report.problems.append(
            f"{name}: paid calls differ from the reference's ({len(figures.keys - reference_ledger.keys)} extra, "
            f"{len(reference_ledger.keys - figures.keys)} missing)"
        )
    if figures.paid != figures.unique:
        report.problems.append(f"{name}: {figures.paid} paid calls for {figures.unique} unique calls")


@dataclass
class CapReport:
    cap_dollars: float
    paid_dollars: float
    cap_calls: int
    paid_calls: int
    jobs: int
    stopped_cleanly: int
    problems: list[str] = field(default_factory=list)
    paid: int = 0
    unique: int = 0

    @property
    def overshoot_dollars(self) -> float:
        return max(0.0, self.paid_dollars - self.cap_dollars)

    @property
    def overshoot_calls(self) -> int:
        return max(0, self.paid_calls - self.cap_calls)


def caps_under_concurrency(dataset: Path, work: Path, base_url: str, env: Mapping[str, str], job_dollars: float,
                           n_questions: int) -> CapReport:
    """Three jobs of one study at once against a study dollar cap; then one job against a call cap."""
    cache_dir = work / "cache"
    cap = round(0.5 * job_dollars, 8)  # room for about half of one job's calls, shared by three jobs
    fast = ["concurrency=64", "reader.model.concurrency=64", "judge.model.concurrency=64", "budget.study=capped",
            f"budget.study_dollars={cap}"]
    commands = [lme_command(dataset, work / f"seed-{seed}", cache_dir, base_url, f"seed={seed}", *fast)
                for seed in (1, 2, 3)]
    processes = []
    work.mkdir(parents=True, exist_ok=True)
    for seed, command in zip((1, 2, 3), commands):
        log = (work / f"seed-{seed}.log").open("ab")
        processes.append((subprocess.Popen(command, env=dict(env), stdout=log, stderr=log, cwd=ROOT), log))
    codes = []
    for process, log in processes:
        codes.append(process.wait(timeout=900))
        log.close()
    problems = []
    stopped = 0
    for seed, code in zip((1, 2, 3), codes):
        rows = journal_rows(work / f"seed-{seed}")
        text = (work / f"seed-{seed}.log").read_text(errors="replace")
        if code == BUDGET_EXIT and "To resume" in text and len(rows) < n_questions:
            stopped += 1
        elif code != 0:
            problems.append(f"seed {seed}: exit {code} (see {work / f'seed-{seed}.log'})")
    dollars = LedgerFigures.read(cache_dir / "ledger.sqlite", "capped")

    # a call cap on one job, a fresh study
    call_cap = max(3, n_questions // 3)
    command = lme_command(dataset, work / "call-cap", cache_dir, base_url, "seed=9", "concurrency=64",
                          "reader.model.concurrency=64", "judge.model.concurrency=64", "budget.study=call-capped",
                          f"budget.job_calls={call_cap}")
    code = run_to_end(command, env, work / "call-cap.log")
    calls = LedgerFigures.read(cache_dir / "ledger.sqlite", "call-capped")
    if code == BUDGET_EXIT:
        stopped += 1
    else:
        problems.append(f"call cap: exit {code}, expected {BUDGET_EXIT}")
    if dollars.paid != dollars.unique:
        problems.append(f"study cap: {dollars.paid} paid calls for {dollars.unique} unique calls")
    return CapReport(cap, dollars.dollars, call_cap, calls.paid + calls.interrupted, 4, stopped, problems,
                     dollars.paid, dollars.unique)


@dataclass
class OversizeReport:
    cap_dollars: float
    words: int  # every reply padded to this many words, whatever the request's max_tokens
    exit_code: int
    requests: int  # requests the provider received
    paid_dollars: float
    paid: int
    largest_reply: float  # the most one paid reply cost
    message: str  # the job's `lme: stopped at a spending cap` line
    kept: bool  # every paid reply is in the call cache
    problems: list[str] = field(default_factory=list)

    @property
    def overshoot_dollars(self) -> float:
        return max(0.0, self.paid_dollars - self.cap_dollars)

    @property
    def overshoot_beyond_one_reply(self) -> float:
        """What the ledger's paid total exceeds the cap by, beyond the one reply in flight when the first
        oversize reply was seen (one call in flight: the cap may be overshot by that reply, and no more)."""
        return max(0.0, self.paid_dollars - self.cap_dollars - self.largest_reply)


def oversize_under_a_cap(dataset: Path, work: Path, env: Mapping[str, str], cap: float = 0.01,
                         n_questions: int | None = None) -> OversizeReport:
    """A provider that ignores `max_tokens` (every reply padded to twice the cap's worth of reader output) against
    a study dollar cap, one call in flight: the job stops at the first reply (exit 3, the reply cost more than
    reserved), keeps it, and sends nothing more."""
    words = int(2 * cap / PRICES["reader"][1]) + 1
    run_dir, cache_dir = work / "run", work / "cache"
    with LoopbackServer(reply="offline", ignore_max_tokens=True, pad_to_words=words, record_bodies=False) as server:
        command = lme_command(dataset, run_dir, cache_dir, server.base_url, "concurrency=1",
                              "reader.model.concurrency=1", "judge.model.concurrency=1", "budget.study=oversize",
                              f"budget.study_dollars={cap}")
        work.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command, env=dict(env), capture_output=True, timeout=900, cwd=ROOT)
        requests = len(server.completion_requests)
    stderr = done.stderr.decode("utf-8", errors="replace")
    (work / "oversize.log").write_bytes(done.stdout + done.stderr)
    figures = LedgerFigures.read(cache_dir / "ledger.sqlite", "oversize")
    kept = not paid_without_answer(cache_dir)
    message = next((line for line in stderr.splitlines() if line.startswith("lme: stopped at a spending cap")), "")
    problems = []
    if done.returncode != BUDGET_EXIT:
        problems.append(f"exit {done.returncode}, expected {BUDGET_EXIT} (see {work / 'oversize.log'})")
    if not ("more than the $" in message and "reserved for it" in message):
        problems.append(f"the stop message does not say the reply cost more than reserved: {message[:300]!r}")
    if "Traceback" in stderr:
        problems.append("a traceback on stderr")
    if requests != 1:
        problems.append(f"{requests} requests sent with one call in flight, expected 1 (nothing after the stop)")
    if figures.paid != 1 or not kept:
        problems.append(f"{figures.paid} paid replies, {'all' if kept else 'not all'} kept in the call cache; "
                        "expected the one oversize reply, paid and kept")
    if n_questions is not None and len(journal_rows(run_dir)) >= n_questions:
        problems.append("the job was not stopped before its last question")
    report = OversizeReport(cap, words, done.returncode, requests, figures.dollars, figures.paid, figures.largest,
                            message, kept, problems)
    if figures.largest <= cap:
        problems.append(f"the oversize reply cost ${figures.largest:.4f}, not more than the ${cap:.4f} cap")
    return report


@dataclass
class VolumeReport:
    seeds: int
    questions: int
    accounted: int
    answered: int
    failed: list[str]
    seconds: float
    paid: int
    unique: int
    problems: list[str] = field(default_factory=list)


def volume(dataset: Path, ids: Sequence[str], work: Path, base_url: str, env: Mapping[str, str]) -> VolumeReport:
    """Every question x 3 seeds in one multirun, 10% of the requests faulted."""
    sweep = work / "sweep"
    command = [
        sys.executable, "-m", "lme", "-m", "seed=1,2,3", f"dataset.path={dataset}", f"hydra.sweep.dir={sweep}",
        f"cache_dir={work / 'cache'}", "tracking.enabled=false", "concurrency=64", "reader.model.concurrency=64",
        "judge.model.concurrency=64", *model_overrides(base_url),
    ]
    started = time.monotonic()
    code = run_to_end(command, env, work / "volume.log", timeout=3600)
    seconds = time.monotonic() - started
    problems = [] if code == 0 else [f"the multirun exited {code} (see {work / 'volume.log'})"]
    accounted = answered = 0
    failed: list[str] = []
    job_dirs = sorted(path for path in sweep.glob("*") if path.is_dir() and (path / "outcomes.jsonl").exists())
    for job_dir in job_dirs:
        rows = journal_rows(job_dir)
        got = [row["question_id"] for row in rows]
        if sorted(got) != sorted(ids) or len(set(got)) != len(got):
            problems.append(f"{job_dir.name}: journal has {len(got)} rows for {len(ids)} questions")
        accounted += len(set(got) & set(ids))
        answered += sum(1 for row in rows if row["answer"] is not None)
        failed += [f"{job_dir.name}/{row['question_id']}: {row['reader_error']}" for row in rows if row["answer"] is None]
    if len(job_dirs) != 3:
        problems.append(f"{len(job_dirs)} job directories instead of 3")
    figures = LedgerFigures.read(work / "cache" / "ledger.sqlite")
    return VolumeReport(3, len(ids), accounted, answered, failed, seconds, figures.paid, figures.unique, problems)


# -- the report ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="runs killed at random points (default 10)")
    parser.add_argument("--questions", type=int, default=60, help="questions in each killed run (default 60)")
    parser.add_argument("--big-questions", type=int, default=500, help="questions of the 3-seed volume run (default 500)")
    parser.add_argument("--fault-rate", type=float, default=0.10, help="share of requests faulted (default 0.10)")
    parser.add_argument("--latency", type=float, default=0.02, help="server seconds per reply (default 0.02)")
    parser.add_argument("--seed", type=int, default=0, help="seed of kill points and fault draws (default 0)")
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir, removed at the end)")
    parser.add_argument("--signals", default="kill,int",
                        help="the signals the kills send in turn: kill (SIGKILL), int (SIGINT) (default kill,int)")
    parser.add_argument("--skip", action="append", default=[], choices=["kills", "caps", "volume"])
    args = parser.parse_args(argv)
    try:
        signals = [SIGNALS[name.strip()] for name in args.signals.split(",") if name.strip()]
    except KeyError as exc:
        parser.error(f"--signals: unknown signal {exc.args[0]!r} (known: {', '.join(SIGNALS)})")
    if not signals:
        parser.error("--signals: give at least one of kill, int")

    rng = random.Random(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="lme-stress-"))
    work.mkdir(parents=True, exist_ok=True)
    fake_key = f"sk-lme-stress-{rng.getrandbits(64):016x}"
    env = lme_env(fake_key)
    rates = fault_rates(args.fault_rate)
    ok = True
    lines: list[str] = []
    try:
        with LoopbackServer(reply="offline", latency_s=args.latency, fault_rates=rates, fault_seed=args.seed,
                            retry_after_s=0.05, slow_s=1.5, record_bodies=False) as server:
            big = work / "questions.json"
            ids = write_dataset(big, max(args.big_questions, args.questions))
            small = work / "questions_small.json"
            write_dataset(small, args.questions)
            print(f"stress: loopback server {server.base_url}, faults {args.fault_rate:.0%} "
                  f"({', '.join(f'{k} {v:.1%}' for k, v in sorted(rates.items()))}); work dir {work}", flush=True)
            reference_dollars = None
            if "kills" not in args.skip:
                started = time.monotonic()
                kills = kill_and_resume(small, work / "kills", base_url=server.base_url, env=env, kills=args.kills,
                                        rng=rng, n_questions=args.questions, signals=signals)
                reference_dollars = LedgerFigures.read(work / "kills" / "reference" / "cache" / "ledger.sqlite").dollars
                lines += [
                    f"kill and resume ({args.questions} questions a run, {time.monotonic() - started:.0f} s):",
                    f"  runs killed: {kills.killed} of {args.kills} ({kills.by_signal()})",
                    f"  SIGINT runs that exited {INTERRUPTED_EXIT} with one 'lme: interrupted' line and no traceback: "
                    f"{kills.sigint_clean} of {kills.sent.get('SIGINT', 0)}",
                    f"  runs resumed: {kills.resumed} of {kills.runs}",
                    f"  outcomes identical to the uninterrupted run: {kills.identical} of {kills.runs}",
                    f"  calls paid vs unique calls: {kills.paid} vs {kills.unique} "
                    f"(+{kills.interrupted} interrupted in flight by the kills, listed in the ledger; "
                    f"+{kills.billed_without_answer} paid for billed malformed replies of calls SIGINT cancelled "
                    "between attempts, asked again)",
                    f"  paid calls are the uninterrupted run's calls: {kills.same_calls_as_reference} of {kills.runs}",
                ]
                lines += [f"  PROBLEM {p}" for p in kills.problems]
                ok &= not kills.problems and kills.killed == args.kills and kills.paid == kills.unique
            if "caps" not in args.skip:
                if reference_dollars is None:
                    reference = work / "caps-reference"
                    run_to_end(lme_command(small, reference / "run", reference / "cache", server.base_url), env,
                               work / "caps-reference.log")
                    reference_dollars = LedgerFigures.read(reference / "cache" / "ledger.sqlite").dollars
                caps = caps_under_concurrency(small, work / "caps", server.base_url, env, reference_dollars,
                                              args.questions)
                lines += [
                    "caps (3 concurrent jobs of one study, 64 calls in flight each; then a call cap on one job):",
                    f"  study dollar cap ${caps.cap_dollars:.6f}, paid ${caps.paid_dollars:.6f}: "
                    f"cap overshoot ${caps.overshoot_dollars:.6f}",
                    f"  job call cap {caps.cap_calls}, calls counted {caps.paid_calls}: "
                    f"cap overshoot {caps.overshoot_calls} calls",
                    f"  jobs stopped cleanly at a cap (exit {BUDGET_EXIT}, how to resume printed): "
                    f"{caps.stopped_cleanly} of {caps.jobs}",
                    f"  calls paid vs unique calls (three processes sharing judge prompts): {caps.paid} vs {caps.unique}",
                ]
                lines += [f"  PROBLEM {p}" for p in caps.problems]
                ok &= not caps.problems and caps.overshoot_dollars == 0 and caps.overshoot_calls == 0
                oversize = oversize_under_a_cap(small, work / "oversize", env, n_questions=args.questions)
                lines += [
                    f"  a provider ignoring max_tokens (every reply {oversize.words:,} words), one call in flight, "
                    f"study dollar cap ${oversize.cap_dollars:.4f}: exit {oversize.exit_code} after "
                    f"{oversize.requests} request{'s' if oversize.requests != 1 else ''}; paid "
                    f"${oversize.paid_dollars:.4f} in {oversize.paid} repl{'ies' if oversize.paid != 1 else 'y'} "
                    f"({'kept' if oversize.kept else 'NOT kept'} in the call cache), the largest "
                    f"${oversize.largest_reply:.4f}: cap overshot by ${oversize.overshoot_dollars:.4f}, "
                    f"oversize overshoot beyond one reply ${oversize.overshoot_beyond_one_reply:.4f}",
                ]
                lines += [f"  PROBLEM oversize: {p}" for p in oversize.problems]
                ok &= not oversize.problems and oversize.overshoot_beyond_one_reply == 0
            if "volume" not in args.skip:
                report = volume(big, ids[: args.big_questions], work / "volume", server.base_url, env)
                lines += [
                    f"volume ({report.questions} questions x {report.seeds} seeds, {args.fault_rate:.0%} faults, "
                    f"{report.seconds:.0f} s):",
                    f"  questions accounted for: {report.accounted} of {report.questions * report.seeds}; "
                    f"answered {report.answered}, failed {len(report.failed)} (counted wrong, listed)",
                    f"  calls paid vs unique calls: {report.paid} vs {report.unique}",
                ]
                lines += [f"  failed: {item}" for item in report.failed[:20]]
                lines += [f"  PROBLEM {p}" for p in report.problems]
                ok &= not report.problems and report.accounted == report.questions * report.seeds
            counts = ", ".join(f"{name} {count}" for name, count in sorted(server.counts.items()))
            lines.append(f"server: {counts}")
        leaks = scan_for(fake_key.encode(), [work])
        lines.append(f"secret scan of {work}: {len(leaks)} files hold the fake key" + (f": {leaks[:5]}" if leaks else ""))
        ok &= not leaks
    finally:
        print("\n".join(lines), flush=True)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print("stress: all checks hold" if ok else "stress: SOME CHECKS FAILED", flush=True)
    return 0 if ok else 1


def scan_for(secret: bytes, roots: Iterable[Path]) -> list[str]:
    """Files under `roots` whose bytes contain `secret`."""
    hits = []
    for root in roots:
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    if secret in path.read_bytes():
                        hits.append(str(path))
                except OSError:
                    continue
    return hits


if __name__ == "__main__":
    sys.exit(main())
