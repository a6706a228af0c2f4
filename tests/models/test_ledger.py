"""The spending ledger: append-only rows, caps by reservation, recovery after a killed process.

Everything is real: a temp SQLite ledger, the call cache, litellm's HTTP path
against the loopback server with prices set on the ModelSpec.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from loopback import LoopbackServer

from lme.util.errors import LmeError
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.ledger import Budget, BudgetExhausted, Ledger, ReservationExceeded
from lme.models.pricing import max_call_cost
from shared_data import MINI, needs

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

KEY_ENV = "LME_TEST_KEY"
PRICE_IN, PRICE_OUT = 1e-3, 2e-3


def spec_for(server: LoopbackServer, **changes) -> ModelSpec:
    settings = {
        "model": "openai/gpt-4o-mini",
        "api_base": server.base_url,
        "api_key_env": KEY_ENV,
        "timeout_s": 5.0,
        "max_attempts": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        "params": {"max_tokens": 20},
        "input_cost_per_token": PRICE_IN,
        "output_cost_per_token": PRICE_OUT,
    } | changes
    return ModelSpec(**settings)


def messages(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Question number {i}: where did I leave the blue umbrella?"}]


@pytest.fixture
def ledger(tmp_path):
    store = Ledger(tmp_path / "ledger.sqlite", study="study-a", job="job-1")
    yield store
    store.close()


@pytest.fixture
def cache(tmp_path):
    store = CallCache(tmp_path / "calls.sqlite")
    yield store
    store.close()


def gather(gateway: Gateway, spec: ModelSpec, n: int, seed: int = 1):
    async def all_of():
        return await asyncio.gather(
            *(gateway.complete(spec, messages(i), seed=seed) for i in range(n)), return_exceptions=True
        )

    return asyncio.run(all_of())


# -- rows -------------------------------------------------------------------------------------------


def test_a_paid_call_is_one_row_with_tokens_and_dollars_and_a_cached_one_is_none(ledger, cache):
    with LoopbackServer(reply="under the stairs", prompt_tokens=300, cached_tokens=120, reasoning_tokens=7) as server:
        gateway = Gateway(cache, ledger=ledger)
        spec = spec_for(server)
        first = asyncio.run(gateway.complete(spec, messages(0), seed=1))
        again = asyncio.run(gateway.complete(spec, messages(0), seed=1))
    assert first.ok and again.cached
    (row,) = ledger.rows()
    assert row["status"] == "paid" and row["study"] == "study-a" and row["job"] == "job-1"
    assert row["model"] == "openai/gpt-4o-mini" and row["call_key"] == first.key
    assert (row["input_tokens"], row["cached_input_tokens"], row["output_tokens"], row["reasoning_tokens"]) == (
        300, 120, 3 + 7, 7)
    assert row["dollars"] == pytest.approx(300 * PRICE_IN + 10 * PRICE_OUT) == first.cost_usd
    # the call's maximum was reserved (and kept in the row), even with no cap: a call interrupted
    # in flight is counted at that maximum. With no dollar cap the input is bounded by its bytes, not
    # tokenized: a larger maximum than the count
    bound = max_call_cost(spec, messages(0), exact=False).dollars
    assert row["reserved_dollars"] == pytest.approx(bound)
    assert bound > max_call_cost(spec, messages(0)).dollars
    assert ledger.open_reservations() == 0
    spent = ledger.spending("study")
    assert spent.paid_calls == 1 and spent.dollars == pytest.approx(first.cost_usd)


def test_a_failed_call_is_written_as_failed_and_not_counted(ledger):
    with LoopbackServer(reply="x", faults=[("500",)] * 2) as server:
        result = asyncio.run(Gateway(ledger=ledger).complete(spec_for(server, max_attempts=2), messages(0), seed=1))
    assert not result.ok
    (row,) = ledger.rows()
    assert row["status"] == "failed" and row["dollars"] == 0 and row["attempts"] == 2
    spent = ledger.spending("job")
    assert spent.counted_calls == 0 and spent.dollars == 0 and spent.failed_calls == 1


def test_offline_models_are_not_paid_calls(ledger):
    from lme.models.offline import READER_MODEL

    payload = '{"question": "What colour is my bike?", "memory": "I bought a red bike."}'
    result = asyncio.run(
        Gateway(ledger=ledger).complete(ModelSpec(model=READER_MODEL), [{"role": "user", "content": payload}], 1)
    )
    assert result.ok and ledger.rows() == []


def test_the_ledger_is_append_only(ledger, cache):
    with LoopbackServer(reply="ok") as server:
        asyncio.run(Gateway(cache, ledger=ledger).complete(spec_for(server), messages(0), seed=1))
    conn = sqlite3.connect(ledger.path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE calls SET dollars = 0")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM calls")
    conn.close()
    assert len(ledger.rows()) == 1


# -- caps -------------------------------------------------------------------------------------------


def test_budget_rejects_negative_or_non_numeric_caps():
    with pytest.raises(LmeError, match="budget.job_dollars"):
        Budget(job_dollars=-1)
    with pytest.raises(LmeError, match="budget.study_calls"):
        Budget.from_config({"study_calls": "many"})
    assert Budget.from_config({"job_calls": 3, "other": 1}) == Budget(job_calls=3)


def test_reserve_waits_while_calls_are_in_flight_and_stops_when_none_are(ledger):
    budget = Budget(job_calls=2)
    first = ledger.reserve("m", "k1", 0.0, budget)
    second = ledger.reserve("m", "k2", 0.0, budget)
    assert first and second
    assert ledger.reserve("m", "k3", 0.0, budget) is None  # an in-flight call might still fail and free room
    ledger.release(first, "failed")
    third = ledger.reserve("m", "k3", 0.0, budget)
    assert third is not None
    ledger.settle(second, {"input_tokens": 5}, 0.01, 1)
    ledger.settle(third, {"input_tokens": 5}, 0.01, 1)
    with pytest.raises(BudgetExhausted, match="job 'job-1' call cap of 2"):
        ledger.reserve("m", "k4", 0.0, budget)


def test_study_caps_span_jobs_and_job_caps_do_not(tmp_path):
    one = Ledger(tmp_path / "l.sqlite", study="s", job="a")
    two = Ledger(tmp_path / "l.sqlite", study="s", job="b")
    other_study = Ledger(tmp_path / "l.sqlite", study="t", job="a")
    budget = Budget(job_dollars=1.0, study_dollars=1.5)
    one.settle(one.reserve("m", "k1", 0.9, budget), {}, 0.9, 1)
    with pytest.raises(BudgetExhausted, match="job 'a' dollar cap"):
        one.reserve("m", "k2", 0.2, budget)
    two.settle(two.reserve("m", "k3", 0.5, budget), {}, 0.5, 1)
    with pytest.raises(BudgetExhausted, match="study 's' dollar cap"):
        two.reserve("m", "k4", 0.2, budget)
    assert other_study.reserve("m", "k5", 0.2, budget) is not None  # another study's caps are its own
    for store in (one, two, other_study):
        store.close()


def test_unpriced_model_with_a_dollar_cap_is_refused_in_one_sentence(ledger):
    with LoopbackServer(reply="ok") as server:
        spec = spec_for(server, model="openai/no-such-model-xyz", input_cost_per_token=None, output_cost_per_token=None)
        with pytest.raises(LmeError, match="no price in litellm's cost map"):
            asyncio.run(Gateway(ledger=ledger, budget=Budget(study_dollars=1.0)).complete(spec, messages(0), 1))
        unpriced = asyncio.run(Gateway(ledger=ledger).complete(spec, messages(0), 1))  # no dollar cap: fine
    assert unpriced.ok and unpriced.cost_usd is None
    assert [row["status"] for row in ledger.rows()] == ["paid"]


def test_reservation_bound_covers_the_call(ledger):
    with LoopbackServer(reply="one two three four five six") as server:
        spec = spec_for(server)
        bound = max_call_cost(spec, messages(0))
        result = asyncio.run(Gateway(ledger=ledger).complete(spec, messages(0), 1))
    assert bound.output_tokens == 20
    assert bound.input_tokens > result.input_tokens  # counted tokens + margin >= the server's word count
    assert bound.dollars == pytest.approx(bound.input_tokens * PRICE_IN + 20 * PRICE_OUT)
    assert result.cost_usd < bound.dollars


def test_a_dollar_cap_reserves_the_counted_input_and_no_cap_the_byte_bound(tmp_path):
    """The input is tokenized only where a count is read (a dollar cap): with one, the row reserves the
    counted maximum; without, the larger bound by bytes (no tokenizer on the call's path)."""
    reserved = {}
    for name, budget in (("capped", Budget(study_dollars=10.0)), ("uncapped", None)):
        ledger = Ledger(tmp_path / f"{name}.sqlite", study="s", job="j")
        with LoopbackServer(reply="ok") as server:
            spec = spec_for(server)
            assert asyncio.run(Gateway(ledger=ledger, budget=budget).complete(spec, messages(0), 1)).ok
        (row,) = ledger.rows()
        reserved[name] = row["reserved_dollars"]
        ledger.close()
    assert reserved["capped"] == pytest.approx(max_call_cost(spec, messages(0)).dollars)
    assert reserved["uncapped"] == pytest.approx(max_call_cost(spec, messages(0), exact=False).dollars)
    assert reserved["uncapped"] > reserved["capped"]


@needs(MINI)
def test_the_byte_bound_is_never_below_the_count_on_real_histories():
    """Every session of the mini S file as one prompt (English, code, other scripts, emoji): bytes as JSON
    bound the tokens gpt-4o-mini's tokenizer counts, framing included."""
    from lme.data.load import load_questions
    from lme.models.pricing import byte_bound_tokens, count_input_tokens

    for question in load_questions(MINI)[:4]:
        for session in question.sessions:
            prompt = [{"role": "system", "content": "Answer."},
                      {"role": "user", "content": "\n".join(turn.content for turn in session.turns)}]
            assert byte_bound_tokens(prompt) >= count_input_tokens("openai/gpt-4o-mini", prompt)


def test_the_byte_bound_counts_every_string_of_the_messages_in_utf8_bytes():
    """Content parts (a list of dicts), non-ASCII text and non-string values all count: the bound is at least
    the UTF-8 bytes of every string in the messages, one more character of text adds its bytes, and the
    framing of each string, key and message comes on top."""
    from lme.models.pricing import byte_bound_tokens

    text = "naïve café 東京 🙂 \"quoted\"\n"
    plain = [{"role": "user", "content": text}]
    raw = len("role") + len("user") + len("content") + len(text.encode("utf-8"))
    assert byte_bound_tokens(plain) >= raw + 6 * 2 + 2
    assert byte_bound_tokens([{"role": "user", "content": text + "é"}]) == byte_bound_tokens(plain) + 2
    parts = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "text", "text": text}]}]
    assert byte_bound_tokens(parts) > 2 * len(text.encode("utf-8")) + raw - len(text.encode("utf-8"))
    assert byte_bound_tokens([*plain, *plain]) > 2 * raw
    assert byte_bound_tokens([{"role": "user", "content": text, "name": 12345}]) > byte_bound_tokens(plain) + 5


@pytest.mark.parametrize("concurrency", [64])
def test_high_concurrency_never_overshoots_the_study_dollar_cap(tmp_path, concurrency):
    """Two jobs of one study, 400 distinct calls at 64 in flight each, against one study cap."""
    cap = 2.0
    path = tmp_path / "ledger.sqlite"
    with LoopbackServer(reply="it is under the stairs", latency_s=0.05) as server:
        spec = spec_for(server, concurrency=concurrency)
        bound = max_call_cost(spec, messages(0)).dollars
        jobs = [Ledger(path, study="s", job=name) for name in ("seed-1", "seed-2")]
        gateways = [Gateway(CallCache(tmp_path / f"{job.job}.sqlite"), ledger=job, budget=Budget(study_dollars=cap))
                    for job in jobs]

        async def both():
            calls = [gw.complete(spec, messages(i), seed=n) for i in range(200) for n, gw in enumerate(gateways)]
            return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio.run(both())
        completed = server.counts["completed"]
        peak = server.max_in_flight
    answered = [r for r in results if not isinstance(r, BaseException)]
    stopped = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, BudgetExhausted) for r in stopped) and stopped
    assert all(r.ok for r in answered)
    rows = jobs[0].rows()
    paid = sum(row["dollars"] for row in rows)
    assert paid <= cap  # never over
    assert paid > cap - 2 * bound  # and it stopped near the cap, not early
    assert len(rows) == len(answered) == completed  # each paid call once; nothing paid and unrecorded
    assert {row["job"] for row in rows} == {"seed-1", "seed-2"}
    assert jobs[0].open_reservations() == 0
    assert peak > 4  # the calls really were concurrent
    for job in jobs:
        job.close()


def test_job_call_cap_is_exact_under_concurrency(ledger, cache):
    with LoopbackServer(reply="ok", latency_s=0.01) as server:
        results = gather(Gateway(cache, ledger=ledger, budget=Budget(job_calls=25)), spec_for(server, concurrency=32), 60)
        assert server.counts["completed"] == 25
    assert sum(1 for r in results if not isinstance(r, BaseException)) == 25
    assert sum(1 for r in results if isinstance(r, BudgetExhausted)) == 35
    assert ledger.spending("job").paid_calls == 25


def test_the_same_call_in_flight_in_another_job_is_waited_for_not_paid_twice(tmp_path):
    """Two jobs (their own ledger and cache connections, as two processes have) ask the same judge-like
    call (no seed) at once: one request reaches the server; the other job gets the cached answer."""
    with LoopbackServer(reply="yes", latency_s=0.4) as server:
        spec = spec_for(server)
        jobs = [Ledger(tmp_path / "ledger.sqlite", study="s", job=name) for name in ("a", "b")]
        caches = [CallCache(tmp_path / "calls.sqlite") for _ in jobs]
        gateways = [Gateway(cache, ledger=job) for cache, job in zip(caches, jobs)]

        async def both():
            return await asyncio.gather(*(gw.complete(spec, messages(0), seed=None) for gw in gateways))

        results = asyncio.run(both())
        assert len(server.requests) == 1
    assert sorted(r.cached for r in results) == [False, True] and {r.text for r in results} == {"yes"}
    assert [row["status"] for row in jobs[0].rows()] == ["paid"]
    for store in (*jobs, *caches):
        store.close()


def test_a_call_cancelled_in_flight_is_interrupted_and_counted_at_its_maximum(ledger):
    with LoopbackServer(reply="late", latency_s=2.0) as server:
        spec = spec_for(server)
        bound = max_call_cost(spec, messages(0), exact=False).dollars  # no dollar cap: bounded by its bytes

        async def cancel_mid_call():
            task = asyncio.create_task(Gateway(ledger=ledger).complete(spec, messages(0), seed=1))
            while not server.requests:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_mid_call())
    (row,) = ledger.rows()
    assert row["status"] == "interrupted" and row["dollars"] is None
    assert ledger.spending("job").dollars == pytest.approx(bound) and ledger.open_reservations() == 0


def test_a_call_cancelled_before_it_is_sent_leaves_no_row(ledger):
    with LoopbackServer(reply="ok") as server:
        spec = spec_for(server, requests_per_minute=1)
        gateway = Gateway(ledger=ledger)

        async def second_waits_then_is_cancelled():
            await gateway.complete(spec, messages(0), seed=1)  # takes the minute's one request
            task = asyncio.create_task(gateway.complete(spec, messages(1), seed=1))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(second_waits_then_is_cancelled())
        assert len(server.requests) == 1
    assert [row["status"] for row in ledger.rows()] == ["paid"] and ledger.open_reservations() == 0


def test_a_reservation_waits_for_the_ledger_off_the_event_loop_and_a_cancel_leaves_none(ledger):
    """Another process holds the ledger's write lock: the reservation waits in a worker thread while the
    event loop keeps running, and a task cancelled meanwhile leaves no reservation once the lock is free."""
    with LoopbackServer(reply="ok") as server:
        spec = spec_for(server)
        gateway = Gateway(ledger=ledger)
        other = sqlite3.connect(ledger.path, timeout=0, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # a writer elsewhere: reserve() waits out its busy timeout

        async def cancel_while_waiting() -> float:
            task = asyncio.create_task(gateway.complete(spec, messages(0), seed=1))
            started = time.monotonic()
            for _ in range(50):  # the loop keeps running while the reservation waits
                await asyncio.sleep(0.01)
            ticking = time.monotonic() - started
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            other.execute("ROLLBACK")  # the waiting reserve() now goes through, and is taken back
            return ticking

        try:
            assert asyncio.run(cancel_while_waiting()) < 5.0  # asyncio.run waits for the worker thread
        finally:
            other.close()
        assert server.requests == []
    assert ledger.rows() == [] and ledger.open_reservations() == 0


# -- recovery after a killed process ---------------------------------------------------------------

_DIE_AFTER_RESERVING = textwrap.dedent(
    """
    import os, sys
    from lme.models.ledger import Ledger
    ledger = Ledger(sys.argv[1], study="s", job="killed")
    for key in sys.argv[2:]:
        ledger.reserve("openai/gpt-4o-mini", key, 0.25)
    os.kill(os.getpid(), 9)
    """
)


def test_reservations_of_a_killed_process_are_recovered_once(tmp_path, cache):
    path = tmp_path / "ledger.sqlite"
    cache.put("answered", "openai/gpt-4o-mini", {"text": "ok", "attempts": 1, "input_tokens": 40,
                                                  "output_tokens": 2, "cost_usd": 0.01})
    done = subprocess.run([sys.executable, "-c", _DIE_AFTER_RESERVING, str(path), "answered", "in-flight"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    ledger = Ledger(path, study="s", job="resumed")
    assert ledger.open_reservations() == 2
    live = ledger.reserve("m", "mine", 0.1)  # this process's own reservation is not touched
    gateway = Gateway(cache, ledger=ledger)  # a new gateway recovers on start
    assert (gateway.recovered.paid, gateway.recovered.interrupted) == (1, 1)
    rows = {row["call_key"]: row for row in ledger.rows()}
    assert rows["answered"]["status"] == "paid" and rows["answered"]["dollars"] == 0.01
    assert rows["answered"]["job"] == "killed" and rows["answered"]["input_tokens"] == 40
    assert rows["in-flight"]["status"] == "interrupted" and rows["in-flight"]["dollars"] is None
    # an interrupted call may have been billed: it counts against the caps at its reserved maximum
    assert ledger.spending("study").dollars == pytest.approx(0.01 + 0.25)
    assert ledger.open_reservations() == 1
    assert ledger.recover(cache.get).paid == 0  # nothing twice
    ledger.release(live)
    ledger.close()


def test_process_alive_sees_a_reaped_child_as_dead():
    from lme.models.ledger import process_start, process_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    start = process_start(child.pid)
    assert process_alive(child.pid, start)
    child.kill()
    child.wait()
    assert not process_alive(child.pid, start)
    assert process_alive(os.getpid(), process_start(os.getpid()))
    assert not process_alive(os.getpid(), "not-my-start-time") or not process_start(os.getpid())


def test_read_rows_and_counted_dollars_agree_with_the_ledgers_own_spending(tmp_path):
    """`read_rows` (read-only, for `lme cost`) gives the rows `Ledger.rows` gives, and `counted_dollars`
    summed over them is the study spending the caps see: paid at cost, interrupted at the reserved
    maximum, failed at nothing. A file that is not a ledger is one sentence naming it."""
    from lme.models.ledger import counted_dollars, read_rows

    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path, study="s", job="j")
    ledger.settle(ledger.reserve("m", "paid", 0.5), {"input_tokens": 10}, 0.125, 1)
    ledger.release(ledger.reserve("m", "cut", 0.25), "interrupted", 1)
    ledger.release(ledger.reserve("m", "broken", 0.75), "failed", 2)
    rows = read_rows(path)
    assert rows == ledger.rows() and [row["status"] for row in rows] == ["paid", "interrupted", "failed"]
    assert sum(counted_dollars(row) for row in rows) == pytest.approx(ledger.spending("study").dollars)
    assert sum(counted_dollars(row) for row in rows) == pytest.approx(0.125 + 0.25)
    ledger.close()
    (tmp_path / "notes.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(LmeError, match="notes.sqlite: not an lme ledger|notes.sqlite: cannot open"):
        read_rows(tmp_path / "notes.sqlite")
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(LmeError, match="absent.sqlite: cannot open the ledger"):
        read_rows(tmp_path / "absent.sqlite")
    assert not (tmp_path / "absent.sqlite").exists()  # never created


# -- a reply over its reservation (issue 36, item 4) -----------------------------------------------------


def test_reservations_in_flight_never_exceed_what_remains_of_a_cap(tmp_path):
    """Reservations of varied sizes from two connections (two processes' worth): at every step, what is paid
    plus what is reserved stays within the cap; a reservation that does not fit waits (None) or stops."""
    import random

    rng = random.Random(7)
    jobs = [Ledger(tmp_path / "ledger.sqlite", study="s", job=name) for name in ("a", "b")]
    budget = Budget(study_dollars=1.0)
    held = []
    for step in range(300):
        job = jobs[step % 2]
        if held and rng.random() < 0.4:
            owner, reservation = held.pop(rng.randrange(len(held)))
            owner.settle(reservation, {}, reservation.dollars * rng.random(), 1, budget)
        else:
            try:
                reservation = job.reserve("m", f"key-{step}", rng.uniform(0.01, 0.3), budget)
            except BudgetExhausted:
                continue
            if reservation is not None:
                held.append((job, reservation))
        spent = jobs[0].spending("study")
        assert spent.dollars + spent.reserved_dollars <= 1.0 + 1e-9
    for job in jobs:
        job.close()


def test_a_settle_over_its_reservation_stops_every_job_of_the_study_on_the_ledger(tmp_path):
    """The overrun is written with the paid row, in the settle's transaction; another connection (another
    process) is refused its next reservation and told why; without a dollar cap nothing is written."""
    first, other = (Ledger(tmp_path / "ledger.sqlite", study="s", job=name) for name in ("a", "b"))
    budget = Budget(study_dollars=1.0)
    held = first.reserve("m", "k1", 0.1, budget)
    in_flight = other.reserve("m", "k2", 0.1, budget)  # out when the overrun is seen: settled and kept
    overrun = first.settle(held, {"output_tokens": 500}, 0.35, 1, budget)
    assert overrun is not None and overrun.excess == pytest.approx(0.25) and overrun.study_cap == 1.0
    with pytest.raises(ReservationExceeded, match=r"cost \$0.3500, \$0.2500 more than the \$0.1000 reserved"):
        other.reserve("m", "k3", 0.01, budget)
    assert other.stopped_by_overrun(budget) is not None
    assert other.settle(in_flight, {}, 0.05, 1, budget) is None  # within its reservation: no second overrun
    assert [row["dollars"] for row in other.rows()] == [0.35, 0.05]
    assert other.cap_standing(budget) == "the study 's' has paid $0.4000 against its dollar cap of $1.0000, within it"
    assert other.reserve("m", "k3", 0.01, Budget(study_dollars=2.0)) is not None  # a raised cap goes on
    # no dollar cap: a reply over its reservation is kept and stops nothing
    free = Ledger(tmp_path / "ledger.sqlite", study="t", job="c")
    assert free.settle(free.reserve("m", "k4", 0.1), {}, 0.5, 1, Budget(job_calls=10)) is None
    assert free.stopped_by_overrun(Budget(study_dollars=0.01)) is None
    for job in (first, other, free):
        job.close()
