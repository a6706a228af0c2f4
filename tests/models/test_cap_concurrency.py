"""A dollar cap under concurrency against a provider that ignores `max_tokens` (issue 36, item 4).

The bound the README states: once a reply costs more than it reserved, nothing more is sent (by this gateway,
marked before the reply's place is given up; by any other on the ledger, which reads the `overruns` row before
each request), the requests already out finish and are kept, so

    paid <= cap + sum over the requests out at the first overrun of (their cost - their reservation)
         <= cap + C x (M - r)

with C the requests that may be out at once (the model's `concurrency`, summed over the gateways sharing the
ledger), M the cost of the largest reply the server sends, r the smallest reservation.

Everything is real: litellm's HTTP path to the loopback server (which reports 5x the output tokens asked
for), temp SQLite ledgers and call caches.
"""

from __future__ import annotations

import asyncio

import pytest
from loopback import LoopbackServer

from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.ledger import Budget, BudgetExhausted, Ledger, ReservationExceeded
from lme.models.pricing import max_call_cost

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

IN_FLIGHT = 32  # the model's `concurrency`: the requests one gateway may have out at once
MAX_TOKENS = 16
REPLY_TOKENS = 5 * MAX_TOKENS  # what the server sends and bills, whatever the request asked for
PROMPT_TOKENS = 20
PRICE_IN, PRICE_OUT = 1e-6, 1e-4
CALLS_PER_SLOT = 4  # calls asked for: IN_FLIGHT x this


def spec_for(server: LoopbackServer) -> ModelSpec:
    return ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY",
                     concurrency=IN_FLIGHT, timeout_s=10.0, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                     params={"max_tokens": MAX_TOKENS}, input_cost_per_token=PRICE_IN, output_cost_per_token=PRICE_OUT)


def messages(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Question number {i}: where did I leave the blue umbrella?"}]


def ignoring_server() -> LoopbackServer:
    """Every reply is REPLY_TOKENS output tokens (billed so), 5x the request's max_tokens, after 0.3 s: the
    first wave of requests is all out before any reply comes back."""
    return LoopbackServer(reply="it is under the stairs", ignore_max_tokens=True, prompt_tokens=PROMPT_TOKENS,
                          completion_tokens=REPLY_TOKENS, latency_s=0.3)


def bound_of(spec: ModelSpec, calls: int, in_flight: int) -> tuple[float, float, float]:
    """(smallest reservation r, the largest reply's cost M, the stated bound in_flight x (M - r))."""
    reserved = min(max_call_cost(spec, messages(i)).dollars for i in range(calls))
    largest = PROMPT_TOKENS * PRICE_IN + REPLY_TOKENS * PRICE_OUT
    assert largest > reserved  # the server really overruns every reservation
    return reserved, largest, in_flight * (largest - reserved)


def test_32_requests_in_flight_overshoot_a_study_cap_by_at_most_the_stated_bound(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite", study="s", job="seed-1")
    cache = CallCache(tmp_path / "calls.sqlite")
    calls = IN_FLIGHT * CALLS_PER_SLOT
    with ignoring_server() as server:
        spec = spec_for(server)
        reserved, largest, bound = bound_of(spec, calls, IN_FLIGHT)
        cap = 40 * max_call_cost(spec, messages(0)).dollars  # room for every request of the first wave
        budget = Budget(study_dollars=cap)
        gateway = Gateway(cache, ledger=ledger, budget=budget)

        async def all_of():
            return await asyncio.gather(*(gateway.complete(spec, messages(i), seed=1) for i in range(calls)),
                                        return_exceptions=True)

        results = asyncio.run(all_of())
        sent, peak = len(server.requests), server.max_in_flight
    paid = ledger.spending("study").dollars
    assert peak == IN_FLIGHT  # 32 really were out at once
    assert sent <= IN_FLIGHT < calls  # nothing sent after the first overrun: not 32 x 10
    assert paid > cap  # the cap was overshot (so the bound is what is being tested) ...
    assert paid <= cap + bound + 1e-9  # ... by no more than the bound stated in the README
    rows = ledger.rows()
    assert len(rows) == sent and all(row["status"] == "paid" for row in rows)  # every request out kept and settled
    assert ledger.open_reservations() == 0
    answered = [r for r in results if not isinstance(r, BaseException)]
    stopped = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, ReservationExceeded) for r in stopped) and len(answered) + len(stopped) == calls
    # one sentence for every stopped call: by how much the reply exceeded its reservation, and the overshoot
    message = str(stopped[0])
    assert {str(r) for r in stopped} == {message}
    first = next(row for row in rows if row["dollars"] > row["reserved_dollars"])
    assert f"cost ${first['dollars']:.4f}, ${first['dollars'] - first['reserved_dollars']:.4f} more than the " \
           f"${first['reserved_dollars']:.4f} reserved for it" in message
    assert f"{REPLY_TOKENS} output tokens: the provider ignored the request's maximum" in message
    assert f"the {sent - 1} other requests already out finished and are kept" in message
    assert (f"the study 's' has paid ${paid:.4f} against its dollar cap of ${cap:.4f}, ${paid - cap:.4f} over it"
            in message)
    # the overshoot is what the requests out cost beyond their reservations
    assert paid - cap <= sum(row["dollars"] - row["reserved_dollars"] for row in rows) + 1e-9
    ledger.close()
    cache.close()


def test_two_jobs_sharing_the_ledger_both_stop_at_the_first_overrun(tmp_path):
    """Two gateways on their own connections to one ledger (as two processes of a study), 32 requests out each:
    the second learns of the first's overrun from the ledger alone, and the bound counts both gateways'."""
    path = tmp_path / "ledger.sqlite"
    jobs = [Ledger(path, study="s", job=name) for name in ("seed-1", "seed-2")]
    caches = [CallCache(tmp_path / f"{job.job}.sqlite") for job in jobs]
    calls = IN_FLIGHT * CALLS_PER_SLOT
    with ignoring_server() as server:
        spec = spec_for(server)
        _, _, bound = bound_of(spec, calls, 2 * IN_FLIGHT)
        cap = 80 * max_call_cost(spec, messages(0)).dollars
        gateways = [Gateway(cache, ledger=job, budget=Budget(study_dollars=cap)) for cache, job in zip(caches, jobs)]

        async def both():
            return await asyncio.gather(*(gw.complete(spec, messages(i), seed=n) for i in range(calls)
                                          for n, gw in enumerate(gateways)), return_exceptions=True)

        results = asyncio.run(both())
        sent = len(server.requests)
    paid = jobs[0].spending("study").dollars
    assert sent <= 2 * IN_FLIGHT
    assert cap < paid <= cap + bound + 1e-9
    assert all(isinstance(r, ReservationExceeded) for r in results if isinstance(r, BaseException))
    assert all(gw.overrun is not None for gw in gateways)  # each gateway was stopped
    assert jobs[0].open_reservations() == 0
    for store in (*jobs, *caches):
        store.close()


def test_after_an_overrun_the_study_sends_nothing_until_a_dollar_cap_is_raised(tmp_path):
    """The `overruns` row outlives the job: a later job (a resume) under the same caps sends nothing and says
    why; one whose cap is raised (or cleared) goes on; a job with no dollar cap is not stopped by it."""
    path = tmp_path / "ledger.sqlite"
    with ignoring_server() as server:
        spec = spec_for(server)
        cap = 2 * max_call_cost(spec, messages(0)).dollars
        first = Ledger(path, study="s", job="seed-1")
        with pytest.raises(ReservationExceeded, match=r"more than the \$[0-9.]+ reserved for it"):
            asyncio.run(Gateway(ledger=first, budget=Budget(study_dollars=cap)).complete(spec, messages(0), seed=1))
        assert len(server.requests) == 1

        again = Ledger(path, study="s", job="seed-2")
        with pytest.raises(ReservationExceeded) as stopped:
            asyncio.run(Gateway(ledger=again, budget=Budget(study_dollars=cap)).complete(spec, messages(1), seed=1))
        assert len(server.requests) == 1  # nothing sent
        sentence = str(stopped.value)
        assert "a reply of openai/gpt-4o-mini in job 'seed-1' cost $" in sentence
        assert f"dollar caps then in force (budget.study_dollars ${cap:.4f})" in sentence and "over it" in sentence
        assert isinstance(stopped.value, BudgetExhausted)  # exit 3, as a cap

        other_study = Ledger(path, study="t", job="seed-1")  # the stop is the study's
        assert other_study.stopped_by_overrun(Budget(study_dollars=cap)) is None
        assert again.stopped_by_overrun(Budget(study_dollars=cap, job_dollars=1.0)) is not None  # added, not raised
        assert again.stopped_by_overrun(Budget(job_calls=5)) is None  # no dollar cap: nothing to overshoot
        raised = Ledger(path, study="s", job="seed-3")
        with pytest.raises(ReservationExceeded):  # sent (the cap was raised), and stopped again at its overrun
            asyncio.run(Gateway(ledger=raised, budget=Budget(study_dollars=1.0)).complete(spec, messages(2), seed=1))
        assert len(server.requests) == 2
        assert asyncio.run(Gateway(ledger=raised).complete(spec, messages(3), seed=1)).ok  # no cap at all
        assert len(server.requests) == 3
        raised.close()
    for store in (first, again, other_study):
        store.close()
