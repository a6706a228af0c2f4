"""The spending ledger: every paid model call of a study, append-only, in SQLite; caps enforced by reservation.

One SQLite file (WAL, busy timeout) is shared by every job of a study, in one
process or many. Before a call is sent, the gateway *reserves* its maximum cost
(`lme.models.pricing.max_call_cost`) in a write transaction that first checks
every cap: what the job and the study have paid, plus what calls in flight
have reserved, plus this call's maximum must stay within the caps. Concurrent
calls, in this process or another, therefore can never overshoot a cap. When a
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

from lme.errors import LmeError
from lme.sqlite import connect

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
"""
_EPSILON = 1e-12
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.study = str(study)
        self.job = str(job)
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._start = process_start(self._pid)
        self._lock = threading.Lock()
        # WAL, a busy timeout, synchronous=FULL, and a wait when another process is switching a new file to WAL
        self._conn = connect(self.path)
        self._conn.executescript(_SCHEMA)

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

    def settle(self, reservation: Reservation, usage: Mapping[str, Any], dollars: float | None, attempts: int) -> None:
        """The call was answered: its reservation becomes a `paid` row with its tokens and dollars."""
        self._close(reservation, "paid", usage, dollars, attempts)

    def release(self, reservation: Reservation, status: str = "failed", attempts: int = 0) -> None:
        """The call failed (nothing returned; not counted) or was cancelled mid-flight (`interrupted`; counted)."""
        if status not in ("failed", "interrupted"):
            raise ValueError(f"release status must be failed or interrupted, got {status!r}")
        self._close(reservation, status, {}, 0.0 if status == "failed" else None, attempts)

    def cancel(self, reservation: Reservation) -> None:
        """The call was never sent (its answer turned up in the cache): drop the reservation, write no row."""
        self._write(lambda conn: conn.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,)))

    def _close(self, reservation: Reservation, status: str, usage: Mapping[str, Any], dollars: float | None,
               attempts: int) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,))
            self._insert(conn, self.study, self.job, reservation.model, reservation.key, status, usage, dollars,
                         reservation.dollars, attempts)

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
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    except sqlite3.Error as exc:
        raise LmeError(f"{path}: cannot open the ledger ({exc}).") from None
    try:
        return _call_rows(conn)
    except sqlite3.Error as exc:
        raise LmeError(f"{path}: not an lme ledger (no readable calls table: {exc}).") from None
    finally:
        conn.close()


def counted_dollars(row: Mapping[str, Any]) -> float:
    """What one call row counts against the caps, the rule `Ledger.spending` sums in SQL: a paid call at
    its cost, an interrupted one at its reserved maximum (it may have been billed), a failed one at 0."""
    if row.get("status") == "failed":
        return 0.0
    dollars = row.get("dollars")
    return float(dollars if dollars is not None else row.get("reserved_dollars") or 0.0)
