"""A model-built memory whose call fails (a 500, an empty reply) fails its question the way a failed reader call
does: no reader call on a memory that is not the design's, the outcome names the memory step, its model and the
reason, the journal counts it as incomplete and a rerun asks it again; the other questions are answered. The
memory's calls (status, tokens, dollars) are in the outcome rows. The same for a cross-run stage's memory."""

from __future__ import annotations

import asyncio
import json

import pytest

from lme.answer.reader import Reader
from lme.study.arbiter import arbitrate
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import make_judge
from lme.memory.model_built import ModelBuiltMemoryBuilder, attach_gateway
from lme.memory.user_log import UserLogMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.ledger import Budget, Ledger
from lme.models.offline import JUDGE_MODEL
from lme.study.parent import stage_complete
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import Journal, run_questions
from judging import OFFLINE_TEMPLATES

NOTES_MODEL = "openai/gpt-5-nano"


def priced(server, model: str) -> ModelSpec:
    return ModelSpec(model=model, api_base=server.base_url, api_key_env="LME_TEST_KEY", max_attempts=1,
                     input_cost_per_token=1e-6, output_cost_per_token=2e-6)


def notes_builder(server) -> ModelBuiltMemoryBuilder:
    return ModelBuiltMemoryBuilder(inner=UserLogMemoryBuilder(FTS5Retriever()), model=priced(server, NOTES_MODEL),
                                   instruction="Write notes.", name="notes")


def asked(server) -> list[str]:
    """The questions of the reader requests the server received."""
    return [json.loads(r.body["messages"][-1]["content"])["question"] for r in server.completion_requests]


def run_once(tmp_path, questions, builder, reader, journal):
    ledger = Ledger(tmp_path / "ledger.sqlite", "study", "job")
    gateway = Gateway(CallCache(tmp_path / "calls.sqlite"), ledger=ledger, budget=Budget())
    attach_gateway([builder], gateway)
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
    try:
        return asyncio.run(run_questions(questions, builder, reader, "Answer briefly.", judge, gateway, 1, journal,
                                         concurrency=1))
    finally:
        gateway.close_background()
        ledger.close()


@pytest.mark.parametrize(("fault", "reason"), [("500", "InternalServerError"), ("empty_content", "EmptyAnswer")])
def test_a_failed_memory_call_fails_its_question_with_no_reader_call_and_a_rerun_completes_it(
        tmp_path, warm_litellm, test_key, fault, reason):
    from loopback import LoopbackServer

    questions = load_questions(SAMPLE_PATH)[:3]
    with LoopbackServer(reply="- [s0000:0] a note", faults=[(fault,)]) as memory_server, \
            LoopbackServer(reply="an answer") as reader_server:
        builder = notes_builder(memory_server)
        reader = Reader(name="loopback", model=priced(reader_server, "openai/gpt-4o-mini"))
        journal = Journal(tmp_path / "outcomes.jsonl")
        failed, *answered = run_once(tmp_path, questions, builder, reader, journal)

        assert failed.answer is None and not failed.complete and failed.verdict == "missing"
        assert failed.memory_error == failed.reader_error
        assert failed.memory_error.startswith(f"{reason}: memory step notes (model {NOTES_MODEL}) failed: ")
        (step,) = failed.steps  # the question stops at its failed memory: no reader call, no later step
        assert step.memory_error == failed.memory_error and not step.reread and step.reader.calls == 0
        assert failed.reader.calls == 0 and failed.memory.calls == failed.memory.failed_calls == 1
        assert questions[0].question not in asked(reader_server)  # the reader never saw a memory not the design's
        for outcome in answered:
            assert outcome.complete and outcome.memory_error is None
            assert outcome.memory.calls == 1 and outcome.memory.cached_calls == 0 and outcome.memory.spent_usd > 0
            assert outcome.steps[0].memory == outcome.memory  # counted on the step that built the memory
        assert asked(reader_server) == [q.question for q in questions[1:]]
        rows = {row["question_id"]: row for row in map(json.loads, journal.path.read_text().splitlines())}
        assert rows[failed.question_id]["memory_error"] == failed.memory_error
        assert rows[answered[0].question_id]["memory"]["cost_usd"] > 0

        # a rerun with the server healthy again asks exactly the failed question, and completes it
        again = run_once(tmp_path, questions, builder, reader, journal)
        assert all(o.complete for o in again)
        assert again[0].memory.calls == 1 and again[0].memory.spent_usd > 0 and again[0].answer == "an answer"
        assert asked(reader_server) == [q.question for q in questions[1:]] + [questions[0].question]
        assert len(memory_server.completion_requests) == 4  # the failed call, two paid, the retried one
    statuses = [row["status"] for row in Ledger(tmp_path / "ledger.sqlite", "study", "x").rows("study")
                if row["model"] == NOTES_MODEL]
    assert statuses.count("paid") == (4 if fault == "empty_content" else 3)  # an empty reply is billed all the same
    assert_the_cost_tables_count_the_memory(journal, again)


def assert_the_cost_tables_count_the_memory(journal, outcomes):
    """The report's cost table and `lme cost`'s per-design sums include the memory model's calls and dollars."""
    from lme.cli.cost import Spend
    from lme.reporting.report import DesignRuns, JobOutcomes, build_report, cost_table

    rows = tuple(map(json.loads, journal.path.read_text().splitlines()))
    memory_usd = sum(o.memory.cost_usd for o in outcomes)
    job = JobOutcomes(run_id="r1", run_name="seed1", seed="1", judge="offline", judge_official=False, rows=rows)
    report = build_report([DesignRuns("notes", "notes", "parent", "parent", (job,))])
    assert report.designs[0].cost.memory_calls == 3 and report.designs[0].cost.memory_cost_usd == pytest.approx(memory_usd)
    header, _, line = cost_table(report).splitlines()
    cells = dict(zip((c.strip() for c in header.strip("|").split("|")), (c.strip() for c in line.strip("|").split("|"))))
    assert cells["memory-model calls"] == "3" and cells["memory-model cost"] == f"${memory_usd:,.4f}"
    spend = Spend("notes")
    spend.add_rows(rows)
    assert spend.memory_calls == 3 and spend.reader_calls == 3
    assert spend.list_usd == pytest.approx(sum(o.memory.cost_usd + o.reader.cost_usd for o in outcomes))


def test_a_cross_run_stage_whose_memory_fails_makes_no_reader_call_and_is_incomplete(
        tmp_path, warm_litellm, test_key, capsys):
    from loopback import LoopbackServer

    questions = load_questions(SAMPLE_PATH)[:2]
    answers = {q.question_id: ["2", "3"] for q in questions}  # both disagree
    with LoopbackServer(reply="- a ledger line", faults=[("500",)]) as memory_server, \
            LoopbackServer(reply="3") as reader_server:
        ledger = ModelBuiltMemoryBuilder(inner=UserLogMemoryBuilder(FTS5Retriever()),
                                         model=priced(memory_server, NOTES_MODEL), instruction="Ledger.",
                                         place="replace", include_question=True, name="ledger")
        reader = Reader(name="loopback", model=priced(reader_server, "openai/gpt-4o-mini"))
        gateway = Gateway(CallCache(tmp_path / "calls.sqlite"))
        attach_gateway([ledger], gateway)
        outcomes = asyncio.run(arbitrate(questions, answers, ledger, reader, "Count.", None, gateway, 1,
                                         concurrency=1))
        gateway.close_background()
        failed, read = outcomes
        assert failed.chosen and failed.failed and not failed.reread and failed.answer is None
        assert failed.memory_call == "failed" and failed.reader.calls == 0
        assert failed.memory_error.startswith(f"InternalServerError: memory step ledger (model {NOTES_MODEL}) failed")
        assert read.answer == "3" and read.memory_call == "paid" and read.memory_cost_usd > 0
        assert asked(reader_server) == [questions[1].question]
    assert not stage_complete("ledger", "study_13", outcomes)
    err = capsys.readouterr().err
    assert "1 chosen question(s) have no ledger answer" in err and "memory step ledger" in err
    assert stage_complete("ledger", "study_13", [read])


@pytest.mark.slow
def test_a_job_whose_memory_call_fails_exits_incomplete_and_its_rerun_completes_with_the_memory_cost_counted(
        tmp_path):
    """`python -m lme +design=study/dev_notes_bm25` with GPT-5 nano's notes on a loopback server whose first reply
    is a 500: exit 5, that question's row names the memory step; the rerun asks it alone and exits 0; the rows,
    outcomes.csv and `lme cost` carry the memory model's calls and dollars (GPT-5 nano's list price)."""
    import csv
    import os
    import subprocess
    import sys

    from loopback import LoopbackServer

    from lme.util.errors import EXIT_INCOMPLETE

    job = tmp_path / "job"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))} | {"LOOPBACK_KEY": "sk-x"}

    def lme(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lme", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    with LoopbackServer(reply="- [s0000:0] The user keeps notes.", faults=[("500",)]) as server:
        run = ("+design=study/dev_notes_bm25", "limit=3", "concurrency=1", "tracking.enabled=false",
               "memory/writer@memory.model=gpt5_nano", f"memory.model.api_base={server.base_url}",
               "memory.model.api_key_env=LOOPBACK_KEY", "memory.model.max_attempts=1", f"cache_dir={tmp_path}/cache",
               f"hydra.run.dir={job}")
        first = lme(*run)
        assert first.returncode == EXIT_INCOMPLETE, first.stderr[-3000:]
        assert "1 memory-model call failed (InternalServerError); 1 answer missing" in first.stdout
        rows = [json.loads(line) for line in (job / "outcomes.jsonl").read_text().splitlines()]
        failed = [row for row in rows if row["memory_error"]]
        assert len(rows) == 3 and len(failed) == 1 and failed[0]["answer"] is None
        assert f"memory step notes (model {NOTES_MODEL}) failed" in failed[0]["memory_error"]
        assert failed[0]["reader"]["calls"] == 0 and failed[0]["memory"]["failed_calls"] == 1
        assert all(row["answer"] and row["memory"]["spent_usd"] > 0 for row in rows if row not in failed)

        second = lme(*run)
        assert second.returncode == 0, second.stderr[-3000:]
        assert len(server.completion_requests) == 4  # the failed call, two paid, then the failed question's again
    rows = [json.loads(line) for line in (job / "outcomes.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(row["answer"] and row["memory"]["cost_usd"] > 0 for row in rows)
    with (job / "outcomes.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert all(float(row["memory_cost_usd"]) > 0 and row["memory_calls"] == "1" for row in table)
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["memory_model_calls"] == 3 and metrics["memory_model_spent_usd"] > 0

    cost = lme("cost", str(job), "--json")
    assert cost.returncode == 0, cost.stderr[-3000:]
    spend = json.loads(cost.stdout)
    (design,) = spend["designs"]
    assert design["memory_calls"] == 3
    assert design["journal_spent_usd"] == pytest.approx(design["paid_usd"])  # the memory's dollars are in the rows
    assert not [note for note in spend["notes"] if "more than its journals record" in note]
    assert "memory-model calls" in lme("cost", str(job)).stdout


def test_a_reread_whose_view_memory_fails_ends_its_question_without_an_answer(tmp_path, warm_litellm, test_key):
    """A re-read on a model-built view: the first pass is answered and judged, the re-read's memory fails, so the
    question has no final answer (its design did not run whole), its steps stop there, and a rerun asks it again."""
    from loopback import LoopbackServer

    from lme.answer.rules import Rule, RuleStep

    question = load_questions(SAMPLE_PATH)[0]
    every = Rule(name="recount", on="question", patterns=(question.question.split()[0],), view="ledger")
    with LoopbackServer(reply="- a line", faults=[("500",)]) as memory_server, \
            LoopbackServer(reply="an answer") as reader_server:
        gateway = Gateway(CallCache(tmp_path / "calls.sqlite"))
        ledger = notes_builder(memory_server)
        attach_gateway([ledger], gateway)
        reader = Reader(name="loopback", model=priced(reader_server, "openai/gpt-4o-mini"))
        judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
        journal = Journal(tmp_path / "outcomes.jsonl")

        def run():
            return asyncio.run(run_questions(
                [question], UserLogMemoryBuilder(FTS5Retriever()), reader, "Answer.", judge, gateway, 1, journal,
                rules=[RuleStep(every, "Count.")], views={"ledger": ledger}))

        (outcome,) = run()
        first, recount = outcome.steps
        assert first.answer == "an answer" and first.memory == first.memory.__class__()  # no model built it
        assert recount.memory_error and recount.chosen and not recount.reread and recount.answer is None
        assert outcome.answer is None and outcome.memory_error == recount.memory_error == outcome.reader_error
        assert outcome.reader.calls == 1 and outcome.memory.failed_calls == 1 and not outcome.complete
        (again,) = run()
        gateway.close_background()
        assert again.complete and again.answer == "an answer" and again.memory.calls == 1
        assert [s.reread for s in again.steps] == [False, True]
        assert len(reader_server.completion_requests) == 2  # the first pass once (the rerun's from the cache), the re-read
