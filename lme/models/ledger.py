"""The spending ledger: every paid model call of a study, append-only, in SQLite; caps enforced by reservation.

One SQLite file (WAL, busy timeout) is shared by every job of a study, in one
process or many. Before a call is sent, the gateway *reserves* its maximum cost
(`lme.models.pricing.max_call_cost`) in a write transaction that first checks
every cap: what the job and the study have paid, plus what calls in flight
have reserved, plus this call's maximum must stay within the caps. Concurrent
calls, in this process or another, therefore never overshoot a cap while every
reply costs at most what was reserved for it. When a
reservation does not fit but other calls are in flight, the caller waits for
them to settle (their actual cost is usually far below their maximum); when
nothing is in flight and it still does not fit, `BudgetExhausted` is raised and
the job stops cleanly. A call whose key another job has reserved (the same
judge prompt, say, in a concurrent job of the study) waits for that job's
answer in the call cache rather than paying for it again.

After the call the reservation is settled: deleted, and the call's row written
(`paid`, with its tokens and dollars), in one transaction. A call that failed
after all its attempts is written as `failed` (nothing was returned, nothing is
counted against the caps). A reservation left by a process that died (SIGKILL
mid-call) is recovered by the next gateway on the same ledger: when the call
cache holds the response, the process died between caching and settling, and
the call is written as `paid` with the cached tokens and dollars; otherwise it
was in flight, may have been billed, and is written as `interrupted`, counted
against the caps at its reserved maximum. A call served from the cache was not
paid and is not written. So each paid call appears exactly once.

A reply that cost more than its reservation (a provider that ignores `max_tokens`, a wrong price) is
settled at its real cost, and under a dollar cap the settle also writes an `overruns` row in the same
transaction: from then on no reservation of the study is granted (`ReservationExceeded`, in this process or
any other on the ledger) until a dollar cap is raised above the one in force when it happened, and a gateway
asks `stopped_by_overrun` before each request it sends, so a reservation granted just before is not sent
either. The calls already out finish and are settled at their cost. What a cap can then be overshot by is
what those calls cost beyond their reservations (README, "Spending").

Rows hold: time, study, job, model, call key (a SHA-256 of the request), status,
tokens (input, cached input, output, reasoning), dollars, reserved dollars and
attempts. Never a key, a prompt or a response. Triggers refuse UPDATE and
DELETE on the calls table.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.util.errors import LmeError
from lme.util.sqlite import StoreKind, open_store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    study TEXT NOT NULL,
    job TEXT NOT NULL,
    model TEXT NOT NULL,
    call_key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('paid', 'failed', 'interrupted')),
    input_tokens INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    dollars REAL,
    reserved_dollars REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS calls_by_job ON calls (study, job);
CREATE INDEX IF NOT EXISTS calls_by_key ON calls (call_key);
CREATE TRIGGER IF NOT EXISTS calls_no_update BEFORE UPDATE ON calls
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS calls_no_delete BEFORE DELETE ON calls
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TABLE IF NOT EXISTS reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    study TEXT NOT NULL,
    job TEXT NOT NULL,
    model TEXT NOT NULL,
    call_key TEXT NOT NULL,
    dollars REAL NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    process_start TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS overruns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    study TEXT NOT NULL,
    job TEXT NOT NULL,
    model TEXT NOT NULL,
    call_key TEXT NOT NULL,
    dollars REAL NOT NULL,
    reserved_dollars REAL NOT NULL,
    job_cap REAL,
    study_cap REAL
);
"""
LEDGER = StoreKind(  # how the file is opened: lme.util.sqlite.open_store (created whole; every fault one sentence)
    "ledger", _SCHEMA,
    {"calls": ("id", "time", "study", "job", "model", "call_key", "status", "dollars", "reserved_dollars"),
     "reservations": ("id", "study", "job", "model", "call_key", "dollars", "host", "pid", "process_start")},
    "the caps then count from zero: lower them by what it recorded; nothing else is lost",
    numbers={  # the caps sum these: text where a number belongs would count as nothing
        "calls": ("time", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "dollars",
                  "reserved_dollars", "attempts"),
        "reservations": ("time", "dollars", "pid"),
        "overruns": ("time", "dollars", "reserved_dollars", "job_cap", "study_cap")},
)
_EPSILON = 1e-12
OVERRUN_TOLERANCE = 1e-9  # dollars: a reply costing more than its reservation by this much overran it
FOREIGN_STALE_AFTER_S = 24 * 3600.0  # a reservation from another host is presumed dead after this


@dataclass(frozen=True)
class Budget:
    """Caps on paid calls; None means no cap. Dollars at list price, calls counted as sent and answered."""

    job_dollars: float | None = None
    job_calls: int | None = None
    study_dollars: float | None = None
    study_calls: int | None = None

    def __post_init__(self) -> None:
        for name in ("job_dollars", "job_calls", "study_dollars", "study_calls"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise LmeError(f"budget.{name}: expected a number >= 0 or null, got {value!r}.")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Budget:
        return cls(**{name: config.get(name) for name in ("job_dollars", "job_calls", "study_dollars", "study_calls")})

    @property
    def caps_dollars(self) -> bool:
        return self.job_dollars is not None or self.study_dollars is not None

    @property
    def caps_anything(self) -> bool:
        return self.caps_dollars or self.job_calls is not None or self.study_calls is not None


class BudgetExhausted(LmeError):
    """A cap would be exceeded by the next call and no call in flight can free room: the job stops cleanly."""


class ReservationExceeded(BudgetExhausted):
    """A reply cost more than the maximum reserved for it (its provider ignored `max_tokens`, or a price was
    wrong): under a dollar cap nothing more is sent in the study, until a dollar cap is raised."""


@dataclass(frozen=True)
class Overrun:
    """A reply that cost more than its reservation, under the dollar caps then in force (None: no cap)."""

    time: float
    job: str
    model: str
    dollars: float
    reserved_dollars: float
    job_cap: float | None
    study_cap: float | None

    @property
    def excess(self) -> float:
        return self.dollars - self.reserved_dollars


def _raised(now: float | None, then: float | None) -> bool:
    """Whether a cap is higher now than when an overrun happened (cleared counts as raised; added does not)."""
    if then is None:
        return False
    return now is None or now > then + _EPSILON


def overrun_holds(overrun: Overrun, budget: Budget | None) -> bool:
    """Whether `overrun` still stops calls under `budget`: it caps dollars and raises neither dollar cap above
    the one in force at the overrun."""
    if budget is None or not budget.caps_dollars:
        return False
    return not (_raised(budget.study_dollars, overrun.study_cap) or _raised(budget.job_dollars, overrun.job_cap))


@dataclass(frozen=True)
class Reservation:
    id: int
    model: str
    key: str
    dollars: float


@dataclass(frozen=True)
class Spending:
    """What a job or a study has used: counted calls (paid + interrupted) and dollars, and what is reserved."""

    paid_calls: int = 0
    interrupted_calls: int = 0
    failed_calls: int = 0
    dollars: float = 0.0  # paid at actual cost, interrupted at their reserved maximum
    reserved_calls: int = 0
    reserved_dollars: float = 0.0

    @property
    def counted_calls(self) -> int:
        return self.paid_calls + self.interrupted_calls


@dataclass(frozen=True)
class Recovery:
    paid: int = 0  # died after caching the response: written as paid from the cache
    interrupted: int = 0  # died with the call in flight


def process_start(pid: int) -> str:
    """The kernel's start time of `pid` (Linux), so a reused pid is not taken for the dead process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def _process_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else ""


def process_alive(pid: int, start: str) -> bool:
    """Whether the process that made a reservation still runs (same pid and, on Linux, same start time)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _process_state(pid) in ("Z", "X"):  # killed, not yet reaped
        return False
    return not start or process_start(pid) in ("", start)


class Ledger:
    """The study's ledger file; `study` and `job` name the jobs' rows and scope the caps."""

    def __init__(self, path: str | Path, study: str = "default", job: str = "job") -> None:
        self.path = Path(path)
        self.study = str(study)
        self.job = str(job)
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._start = process_start(self._pid)
        self._lock = threading.Lock()
        # WAL, a busy timeout, synchronous=FULL, created whole; every fault (damaged, locked, full, ...) and
        # every error during use a StoreError naming the file
        self._conn = open_store(self.path, LEDGER)

    # -- transactions ----------------------------------------------------------------------------

    def _write(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return result

    def _spending(self, conn: sqlite3.Connection, job: str | None) -> Spending:
        where, args = ("study = ? AND job = ?", (self.study, job)) if job is not None else ("study = ?", (self.study,))
        paid, interrupted, failed, dollars = conn.execute(
            "SELECT COALESCE(SUM(status = 'paid'), 0), COALESCE(SUM(status = 'interrupted'), 0), "
            "COALESCE(SUM(status = 'failed'), 0), "
            "COALESCE(SUM(CASE WHEN status = 'failed' THEN 0 ELSE COALESCE(dollars, reserved_dollars) END), 0) "
            f"FROM calls WHERE {where}",
            args,
        ).fetchone()
        reserved_calls, reserved_dollars = conn.execute(
            f"SELECT COUNT(*), COALESCE(SUM(dollars), 0) FROM reservations WHERE {where}", args
        ).fetchone()
        return Spending(int(paid), int(interrupted), int(failed), float(dollars), int(reserved_calls),
                        float(reserved_dollars))

    # -- the gateway's side ----------------------------------------------------------------------

    def reserve(self, model: str, key: str, dollars: float, budget: Budget | None = None) -> Reservation | None:
        """Reserve one call of at most `dollars` within every cap of `budget`.

        Returns the reservation; None when it does not fit now but calls in flight may free room
        (wait for one to settle, then ask again), or when the same call (`key`) is in flight in
        another process (wait, then look in the call cache first); raises `BudgetExhausted` when it
        cannot fit.
        """
        dollars = max(0.0, float(dollars))

        def work(conn: sqlite3.Connection) -> Reservation | None:
            overrun = self._holding_overrun(conn, budget)
            if overrun is not None:  # a reply overran its reservation: nothing more is sent under these caps
                raise ReservationExceeded(self._overrun_sentence(conn, overrun, budget))
            if conn.execute("SELECT 1 FROM reservations WHERE call_key = ? LIMIT 1", (key,)).fetchone():
                return None  # another job is paying for this very call: share its answer
            if budget is not None and budget.caps_anything:
                scopes = (
                    ("job", self.job, budget.job_dollars, budget.job_calls),
                    ("study", None, budget.study_dollars, budget.study_calls),
                )
                for scope, job, cap_dollars, cap_calls in scopes:
                    if cap_dollars is None and cap_calls is None:
                        continue
                    spent = self._spending(conn, job)
                    name = f"job {self.job!r}" if scope == "job" else f"study {self.study!r}"
                    over = None
                    if cap_calls is not None and spent.counted_calls + spent.reserved_calls + 1 > cap_calls:
                        over = f"the {name} call cap of {cap_calls} is reached ({spent.counted_calls} calls made"
                    elif cap_dollars is not None and spent.dollars + spent.reserved_dollars + dollars > cap_dollars + _EPSILON:
                        over = (
                            f"the {name} dollar cap of ${cap_dollars:.4f} is reached (${spent.dollars:.4f} spent, "
                            f"the next call may cost up to ${dollars:.4f}"
                        )
                    if over is not None:
                        if spent.reserved_calls:
                            return None
                        raise BudgetExhausted(f"budget: {over}).")
            cursor = conn.execute(
                "INSERT INTO reservations (time, study, job, model, call_key, dollars, host, pid, process_start) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), self.study, self.job, model, key, dollars, self._host, self._pid, self._start),
            )
            return Reservation(int(cursor.lastrowid), model, key, dollars)

        return self._write(work)

    def settle(self, reservation: Reservation, usage: Mapping[str, Any], dollars: float | None, attempts: int,
               budget: Budget | None = None) -> Overrun | None:
        """The call was answered: its reservation becomes a `paid` row with its tokens and dollars. When it cost
        more than reserved and `budget` caps dollars, an `overruns` row is written in the same transaction (every
        later reservation of the study under these caps is refused) and returned."""
        overran = (dollars is not None and budget is not None and budget.caps_dollars
                   and float(dollars) > reservation.dollars + OVERRUN_TOLERANCE)
        if not overran:
            self._close(reservation, "paid", usage, dollars, attempts)
            return None
        assert budget is not None and dollars is not None
        overrun = Overrun(time.time(), self.job, reservation.model, float(dollars), reservation.dollars,
                          None if budget.job_dollars is None else float(budget.job_dollars),
                          None if budget.study_dollars is None else float(budget.study_dollars))

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO overruns (time, study, job, model, call_key, dollars, reserved_dollars, job_cap, "
                "study_cap) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (overrun.time, self.study, self.job, reservation.model, reservation.key, overrun.dollars,
                 overrun.reserved_dollars, overrun.job_cap, overrun.study_cap),
            )

        self._close(reservation, "paid", usage, dollars, attempts, also=work)
        return overrun

    def stopped_by_overrun(self, budget: Budget | None) -> str | None:
        """Why nothing may be sent now under `budget` (a reply of the study overran its reservation under these
        caps, in this process or another), as the sentence `reserve` raises; None when calls may go. A read:
        a gateway asks it before each request it sends under a dollar cap."""
        if budget is None or not budget.caps_dollars:
            return None
        with self._lock:
            overrun = self._holding_overrun(self._conn, budget)
            return None if overrun is None else self._overrun_sentence(self._conn, overrun, budget)

    def cap_standing(self, budget: Budget | None) -> str:
        """Where the job and the study stand against `budget`'s dollar caps, counted calls only ("the study 's'
        has paid $0.0123 against its dollar cap of $0.0100, $0.0023 over it")."""
        with self._lock:
            return self._cap_standing(self._conn, budget)

    def _cap_standing(self, conn: sqlite3.Connection, budget: Budget | None) -> str:
        parts = []
        if budget is not None:
            for job, cap, name in ((self.job, budget.job_dollars, f"job {self.job!r}"),
                                   (None, budget.study_dollars, f"study {self.study!r}")):
                if cap is None:
                    continue
                paid = self._spending(conn, job).dollars
                over = paid - float(cap)
                where = f"${over:.4f} over it" if over > _EPSILON else "within it"
                parts.append(f"the {name} has paid ${paid:.4f} against its dollar cap of ${float(cap):.4f}, {where}")
        return "; ".join(parts) if parts else "no dollar cap is set"

    def _holding_overrun(self, conn: sqlite3.Connection, budget: Budget | None) -> Overrun | None:
        """The study's first overrun that still stops calls under `budget` (None without a dollar cap)."""
        if budget is None or not budget.caps_dollars:
            return None
        rows = conn.execute(
            "SELECT time, job, model, dollars, reserved_dollars, job_cap, study_cap FROM overruns WHERE study = ? "
            "ORDER BY id", (self.study,),
        ).fetchall()
        for row in rows:
            overrun = Overrun(float(row[0]), str(row[1]), str(row[2]), float(row[3]), float(row[4]),
                              None if row[5] is None else float(row[5]), None if row[6] is None else float(row[6]))
            if overrun_holds(overrun, budget):
                return overrun
        return None

    def _overrun_sentence(self, conn: sqlite3.Connection, overrun: Overrun, budget: Budget | None) -> str:
        caps = " and ".join(
            f"{name} ${cap:.4f}" for name, cap in (("budget.job_dollars", overrun.job_cap),
                                                  ("budget.study_dollars", overrun.study_cap)) if cap is not None
        )
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(overrun.time))
        return (
            f"budget: at {when} a reply of {overrun.model} in job {overrun.job!r} cost ${overrun.dollars:.4f}, "
            f"${overrun.excess:.4f} more than the ${overrun.reserved_dollars:.4f} reserved for it (its provider "
            f"ignores max_tokens, or its price is wrong), so no call of study {self.study!r} is sent under the "
            f"dollar caps then in force ({caps}) and {self._cap_standing(conn, budget)}."
        )

    def release(self, reservation: Reservation, status: str = "failed", attempts: int = 0) -> None:
        """The call failed (nothing returned; not counted) or was cancelled mid-flight (`interrupted`; counted)."""
        if status not in ("failed", "interrupted"):
            raise ValueError(f"release status must be failed or interrupted, got {status!r}")
        self._close(reservation, status, {}, 0.0 if status == "failed" else None, attempts)

    def cancel(self, reservation: Reservation) -> None:
        """The call was never sent (its answer turned up in the cache): drop the reservation, write no row."""
        self._write(lambda conn: conn.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,)))

    def _close(self, reservation: Reservation, status: str, usage: Mapping[str, Any], dollars: float | None,
               attempts: int, also: Callable[[sqlite3.Connection], None] | None = None) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,))
            self._insert(conn, self.study, self.job, reservation.model, reservation.key, status, usage, dollars,
                         reservation.dollars, attempts)
            if also is not None:
                also(conn)

        self._write(work)

    def recover(self, lookup: Callable[[str], Mapping[str, Any] | None] | None = None) -> Recovery:
        """Close the reservations of processes that died: `paid` when `lookup` (the call cache) has the
        response, else `interrupted`."""

        def work(conn: sqlite3.Connection) -> Recovery:
            rows = conn.execute(
                "SELECT id, time, study, job, model, call_key, dollars, host, pid, process_start FROM reservations"
            ).fetchall()
            paid = interrupted = 0
            for rid, created, study, job, model, key, reserved, host, pid, start in rows:
                if host == self._host:
                    if pid == self._pid and start == self._start:
                        continue  # one of ours, in flight
                    if process_alive(int(pid), str(start)):
                        continue
                elif time.time() - float(created) < FOREIGN_STALE_AFTER_S:
                    continue
                stored = lookup(key) if lookup is not None else None
                conn.execute("DELETE FROM reservations WHERE id = ?", (rid,))
                if stored is not None:
                    self._insert(conn, study, job, model, key, "paid", stored, stored.get("cost_usd"), reserved,
                                 int(stored.get("attempts") or 0))
                    paid += 1
                else:
                    self._insert(conn, study, job, model, key, "interrupted", {}, None, reserved, 0)
                    interrupted += 1
            return Recovery(paid, interrupted)

        return self._write(work)

    def _insert(self, conn: sqlite3.Connection, study: str, job: str, model: str, key: str, status: str,
                    usage: Mapping[str, Any], dollars: float | None, reserved: float, attempts: int) -> None:
        conn.execute(
            "INSERT INTO calls (time, study, job, model, call_key, status, input_tokens, cached_input_tokens, "
            "output_tokens, reasoning_tokens, dollars, reserved_dollars, attempts) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time.time(), study, job, model, key, status,
                int(usage.get("input_tokens") or 0), int(usage.get("cached_input_tokens") or 0),
                int(usage.get("output_tokens") or 0), int(usage.get("reasoning_tokens") or 0),
                None if dollars is None else float(dollars), float(reserved), int(attempts or 0),
            ),
        )

    # -- reading ---------------------------------------------------------------------------------

    def spending(self, scope: str = "job") -> Spending:
        """This job's (`scope="job"`) or this study's (`"study"`) spending so far."""
        with self._lock:
            return self._spending(self._conn, self.job if scope == "job" else None)

    def rows(self, study: str | None = None) -> list[dict[str, Any]]:
        """Every call row (of `study`, or of every study), oldest first."""
        with self._lock:
            return _call_rows(self._conn, study)

    def open_reservations(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM reservations").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# -- reading a ledger file without opening it as a writer (`lme cost`) ----------------------------------


def _call_rows(conn: sqlite3.Connection, study: str | None = None) -> list[dict[str, Any]]:
    cursor = conn.execute(
        "SELECT * FROM calls" + (" WHERE study = ?" if study is not None else "") + " ORDER BY id",
        (study,) if study is not None else (),
    )
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every call row of the ledger file at `path`, oldest first, read-only: the file is never created,
    migrated or changed (a `Ledger` would). One sentence naming the file when it is not a ledger."""
    conn = open_store(path, LEDGER, readonly=True)  # StoreError: one sentence naming the file
    try:
        return _call_rows(conn)
    finally:
        conn.close()


def counted_dollars(row: Mapping[str, Any]) -> float:
    """What one call row counts against the caps, the rule `Ledger.spending` sums in SQL: a paid call at
    its cost, an interrupted one at its reserved maximum (it may have been billed), a failed one at 0."""
    if row.get("status") == "failed":
        return 0.0
    dollars = row.get("dollars")
    return float(dollars if dollars is not None else row.get("reserved_dollars") or 0.0)
