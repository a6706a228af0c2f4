"""Kill `python -m lme` with SIGKILL, or interrupt it with SIGINT, at random points and resume it: nothing lost,
nothing paid twice.

Real subprocesses, the real litellm HTTP path to the loopback server (with
injected faults, malformed completions among them), a real journal, call cache
and ledger in a temp dir. The helpers are `scripts/stress.py`'s, which runs the
same checks at ten points and at volume.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shlex
import signal
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "stress.py"



def _stress():
    if "stress" not in sys.modules:
        spec = importlib.util.spec_from_file_location("stress", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["stress"] = module
        spec.loader.exec_module(module)
    return sys.modules["stress"]


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(reply="offline", latency_s=0.03, fault_rates=_stress().fault_rates(0.1), fault_seed=3,
                        retry_after_s=0.02, slow_s=1.5, record_bodies=False) as running:
        yield running


@pytest.mark.slow
def test_a_run_killed_three_times_resumes_to_the_uninterrupted_outcomes_and_pays_each_call_once(tmp_path, server):
    stress = _stress()
    dataset = tmp_path / "questions.json"
    n = 30
    stress.write_dataset(dataset, n)
    report = stress.kill_and_resume(
        dataset, tmp_path, server.base_url, stress.lme_env("sk-lme-resume-test-0123456789"), kills=3,
        rng=random.Random(11), n_questions=n, chain=True,
    )
    assert report.problems == []
    assert report.killed == 3  # one run, killed at three increasing points, then finished
    assert report.resumed == report.runs == 1
    assert report.identical == 1  # every outcome equals the uninterrupted run's
    assert report.paid == report.unique  # no call paid twice
    assert report.same_calls_as_reference == 1  # and exactly the calls the uninterrupted run paid
    rows = stress.journal_rows(tmp_path / "chain" / "run")
    assert sorted(row["question_id"] for row in rows) == sorted(json.loads(dataset.read_text())[i]["question_id"]
                                                                 for i in range(n))


@pytest.mark.slow
def test_a_run_interrupted_twice_with_sigint_exits_130_with_one_line_and_resumes_to_the_same_outcomes(tmp_path,
                                                                                                      server):
    """Ctrl-C at two points (during start-up, then after 9 journaled questions): each time exit 130 and one
    `lme: interrupted` line, no traceback; the resumed run's outcomes are the uninterrupted run's."""
    stress = _stress()
    dataset = tmp_path / "questions.json"
    n = 16
    stress.write_dataset(dataset, n)
    report = stress.kill_and_resume(
        dataset, tmp_path, server.base_url, stress.lme_env("sk-lme-sigint-test-0123456789"), kills=2,
        rng=random.Random(30), n_questions=n, chain=True, signals=(signal.SIGINT,),
    )
    assert report.problems == []
    assert report.sent == {"SIGINT": 2} and report.killed == 2 and report.sigint_clean == 2
    assert report.resumed == report.runs == 1
    assert report.identical == 1
    assert report.paid == report.unique  # paid answers: none twice (billed-only rows are counted apart)
    assert report.same_calls_as_reference == 1


@pytest.mark.slow
def test_a_cap_stops_the_job_cleanly_and_the_rerun_resumes_it(tmp_path, server):
    """A study dollar cap at 64 calls in flight: exit 3 with the resume command; no overshoot; the printed
    command (the cap cleared) finishes the job with every question, paying no call twice."""
    stress = _stress()
    dataset = tmp_path / "questions.json"
    n = 30
    stress.write_dataset(dataset, n)
    env = stress.lme_env("sk-lme-cap-test-0123456789")
    cap = 0.004
    fast = ["concurrency=64", "reader.model.concurrency=64", "judge.model.concurrency=64"]
    command = stress.lme_command(dataset, tmp_path / "run", tmp_path / "cache", server.base_url, *fast,
                                 f"budget.study_dollars={cap}")
    import subprocess

    stopped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=stress.ROOT)
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    message = [line for line in stopped.stderr.splitlines() if line.startswith("lme:") and "questions/s" not in line]
    assert "stopped at a spending cap" in message[0] and "dollar cap of $0.0040" in message[0]
    journaled = stress.journal_rows(tmp_path / "run")
    assert 0 < len(journaled) < n and f"{len(journaled)} of {n} questions are journaled" in message[0]
    assert "Traceback" not in stopped.stderr
    figures = stress.LedgerFigures.read(tmp_path / "cache" / "ledger.sqlite")
    assert figures.dollars <= cap and figures.interrupted == 0

    resume = message[1].split(" and run: ", 1)[1]
    assert resume.startswith("python -m lme ") and f"hydra.run.dir={tmp_path / 'run'}" in resume
    rerun = [sys.executable, "-m", "lme", *shlex.split(resume)[3:], "budget.study_dollars=null"]
    finished = subprocess.run(rerun, env=env, capture_output=True, text=True, timeout=600, cwd=stress.ROOT)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = stress.journal_rows(tmp_path / "run")
    assert len(rows) == n and len({row["question_id"] for row in rows}) == n
    assert {row["question_id"]: row for row in rows if row["question_id"] in {r["question_id"] for r in journaled}} \
        == {row["question_id"]: row for row in journaled}  # the journaled questions were not asked again
    after = stress.LedgerFigures.read(tmp_path / "cache" / "ledger.sqlite")
    assert after.paid == after.unique


@pytest.mark.slow
def test_a_provider_ignoring_max_tokens_stops_a_capped_job_at_the_first_reply(tmp_path):
    """Every reply padded far past `max_tokens`, a $0.01 study cap, one call in flight: exit 3 naming the reply
    that cost more than reserved; that reply kept and paid; nothing more sent; overshoot at most that reply."""
    stress = _stress()
    dataset = tmp_path / "questions.json"
    stress.write_dataset(dataset, 4)
    report = stress.oversize_under_a_cap(dataset, tmp_path, stress.lme_env("sk-lme-oversize-test-0123456789"),
                                         cap=0.01, n_questions=4)
    assert report.problems == []
    assert report.exit_code == 3 and report.requests == 1 and report.paid == 1 and report.kept
    assert "stopped at a spending cap" in report.message and "more than the $" in report.message
    assert report.largest_reply > report.cap_dollars  # one reply over the cap on its own
    assert report.overshoot_beyond_one_reply == 0


@pytest.mark.usefixtures("warm_litellm")
def test_at_a_cap_the_run_loop_lets_calls_in_flight_finish_and_journals_them(tmp_path, test_key):
    """A job call cap of 6 with 4 questions in flight: the loop stops starting questions, the ones in
    flight finish and are journaled, then `BudgetExhausted` reaches the caller."""
    import asyncio

    from lme.answer.reader import Reader
    from lme.data.load import load_questions
    from lme.data.sample import SAMPLE_PATH
    from lme.judge import make_judge
    from lme.memory.retrieved import RetrievedMemoryBuilder
    from lme.models.cache import CallCache
    from lme.models.gateway import Gateway, ModelSpec
    from lme.models.ledger import Budget, BudgetExhausted, Ledger
    from lme.models.offline import JUDGE_MODEL
    from lme.retrieval.fts5 import FTS5Retriever
    from lme.answer.run import Journal, run_questions

    templates = {key: "Question: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nCorrect?" for key in (
        "abstention", "ssu_ssa_multisession", "temporal_reasoning", "knowledge_update", "single_session_preference")}
    questions = load_questions(SAMPLE_PATH)[:12]
    ledger = Ledger(tmp_path / "ledger.sqlite", study="s", job="j")
    cache = CallCache(tmp_path / "calls.sqlite")
    journal = Journal(tmp_path / "outcomes.jsonl")
    with LoopbackServer(reply="offline", latency_s=0.2) as server:
        reader = Reader("loopback", ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url,
                                              api_key_env="LME_TEST_KEY", params={"max_tokens": 64}))
        judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=templates)
        gateway = Gateway(cache, ledger=ledger, budget=Budget(job_calls=6))
        with pytest.raises(BudgetExhausted, match="call cap of 6"):
            asyncio.run(run_questions(questions, RetrievedMemoryBuilder(FTS5Retriever()), reader, "Answer.", judge,
                                      gateway, 1, journal, concurrency=4))
        sent = len(server.requests)
    rows = journal.read()
    assert sent == 6 and len(rows) == 6  # every paid answer was journaled, none was cancelled
    assert all(row.answer for row in rows)
    assert ledger.spending("job").paid_calls == 6 and ledger.open_reservations() == 0
    ledger.close()
    cache.close()


def test_after_a_multirun_the_resume_advice_is_the_sweeps_command_with_its_sweep_dir(tmp_path):
    """A job of a multirun launched here (issue 36): the advice repeats the sweep's arguments with `-m` and
    `hydra.sweep.dir=` its folder, never `hydra.run.dir=` (a multirun ignores it: following that advice started a
    new sweep); outside a multirun, the job's overrides with its run directory. Keys are never repeated.
    (tests/test_job_folder_faults.py follows the advice end to end.)"""
    from lme.config.design import Launch
    from lme.study.resume import job_resume_command, sweep_resume_command

    sweep = tmp_path / "multi run"
    launch = Launch(overrides=("seed=1",), sweep_dir=sweep,
                    argv=("+design=bm25", "-m", "seed=1,2", "hydra.run.dir=x", "hydra.sweep.dir=old",
                          "reader.model.api_key=sk-abcdefghijklmnopqrstuvwxyz012345"))
    command = job_resume_command(sweep / "0", launch)
    assert command == sweep_resume_command(launch)
    assert shlex.split(command) == ["python", "-m", "lme", "-m", "+design=bm25", "seed=1,2", f"hydra.sweep.dir={sweep}"]
    single = job_resume_command(tmp_path / "run", Launch(overrides=("seed=1", "hydra.run.dir=y"), argv=("seed=1",)))
    assert shlex.split(single) == ["python", "-m", "lme", "seed=1", f"hydra.run.dir={tmp_path / 'run'}"]
    assert sweep_resume_command(Launch(overrides=("seed=1",))) is None


def test_a_multiruns_end_line_names_the_command_that_finishes_its_unfinished_jobs():
    from lme.study.multirun import multirun_summary
    from lme.tracking.runs import TrackingSettings

    resume = "python -m lme -m seed=1,2 hydra.sweep.dir=/s"
    line = multirun_summary({"n_failed_runs": 1.0}, {"designs": {}}, "p", TrackingSettings(), "0", resume=resume)
    assert f"multirun: 1 job(s) failed or are incomplete; they are left out of the measures above; to finish them " \
           f"in their own folders (only what is missing is asked): {resume}" in line
    assert "hydra.sweep.dir" not in multirun_summary({"n_failed_runs": 0.0}, {"designs": {"d": {}}}, "p",
                                                     TrackingSettings(), "0", resume=resume)
