"""Study design 15 end to end, offline, with a real MLflow store: `python -m lme +design=study/15_ledger_append -m
seed=1,2,3` against the loopback reader; after the sweep, a model-built counting ledger (the offline note-taker)
is appended to the user log and read once more for exactly the counting questions whose runs disagree."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import sha256_text
from lme.models.offline import extractive_answer

from answer.test_pipeline_runs import artifact, journals, mlflow_runs, run_lme

pytestmark = pytest.mark.slow

COUNTING = {"95e38180", "900f72f7", "fe656bef", "8dff06d2"}  # "how many" / "how much ... in total"
WOBBLY = {"ba26d851", "95e38180", "900f72f7"}  # their answer changes from one job to the next


def wobbly_reader(questions: dict, wobbly: set[str], stage_payloads: list[dict]):
    """A loopback reader: the stage's read over the ledger (kept in `stage_payloads`) gets the reference
    answer; a first-pass request of a `wobbly` question gets a refusal every second time it is asked (each
    job asks the same request again: its seed misses the cache), any other the extractive answer."""
    asked: Counter[str] = Counter()

    def reply(body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        payload = json.loads(user)
        question = questions[payload["question"]]
        if "## Counting ledger" in payload["memory"]:
            stage_payloads.append(payload)
            return str(question.answer)
        asked[system + user] += 1
        if question.question_id in wobbly and asked[system + user] % 2 == 0:
            return "I am not sure."
        return extractive_answer(payload["question"], payload["memory"])

    return reply


def test_the_ledger_stage_rereads_only_disagreeing_counting_questions_over_the_ledger(tmp_path):
    from loopback import LoopbackServer

    ids = ["ba26d851", "95e38180", "900f72f7", "fe656bef", "8dff06d2"]
    questions = {q.question: q for q in load_questions(SAMPLE_PATH) if q.question_id in ids}
    stage_payloads: list[dict] = []

    with LoopbackServer(reply=wobbly_reader(questions, WOBBLY, stage_payloads)) as server:
        result = run_lme(
            tmp_path, "+design=study/15_ledger_append", "retriever=fts5", "question_ids=[" + ",".join(f"'{i}'" for i in ids) + "]",
            "reader=gpt5_mini", "reader.model.model=openai/gpt-4o-mini", "~reader.model.params.reasoning_effort",
            f"reader.model.api_base={server.base_url}",
            "reader.model.api_key_env=LOOPBACK_KEY", "-m", "seed=1,2,3",
            env={"LOOPBACK_KEY": "sk-loopback"},
        )
    assert result.returncode == 0, result.stderr[-3000:]
    client, parent, children = mlflow_runs(tmp_path)
    assert parent.info.status == "FINISHED" and len(children) == 3
    runs = journals(tmp_path, "study_15_ledger_append")
    answers = {q: [run[q]["answer"] for run in runs] for q in ids}
    disagreeing = {q for q, a in answers.items() if len(set(a)) > 1}
    assert disagreeing == WOBBLY
    chosen = disagreeing & COUNTING
    assert chosen == {"95e38180", "900f72f7"}  # ba26d851 disagrees but is no counting question

    # one re-read per chosen question, over the user log with the ledger appended, no earlier answers shown
    assert sorted(questions[p["question"]].question_id for p in stage_payloads) == sorted(chosen)
    for payload in stage_payloads:
        assert "earlier_answers" not in payload
        log, ledger = payload["memory"].split("## Counting ledger", 1)
        assert "[s0000:0]" in log and "- [s" in ledger  # the note-taker's ledger lines cite message ids
    outcomes = [json.loads(line) for line in artifact(tmp_path, parent.info.run_id,
                                                      "ledger/outcomes.jsonl").splitlines()]
    assert {o["question_id"] for o in outcomes if o["chosen"]} == chosen
    assert all(o["correct"] and o["memory_call"] == "paid" for o in outcomes if o["chosen"])

    rows = json.loads(artifact(tmp_path, parent.info.run_id, "steps.json"))["designs"]["study_15_ledger_append"]
    stage = rows["steps"][-1]
    assert stage["rule"] == "ledger" and stage["questions_chosen"] == 2 and stage["reread"] == 6
    assert stage["broken"] == 0
    metrics = parent.data.metrics
    assert metrics["ledger.questions_chosen"] == 2 and metrics["ledger.memory_model_calls_paid"] == 2
    text = artifact(tmp_path, parent.info.run_id, "instructions/ledger.txt").rstrip("\n")
    assert parent.data.params["instruction.ledger.sha256"] == sha256_text(text) and "counting ledger" in text


def test_a_ledger_whose_model_call_fails_reads_nothing_for_that_question_and_fails_the_sweep_until_rerun(tmp_path):
    """The stage's ledger written by GPT-5 nano on a loopback server whose first reply is a 500: no stage read for
    that question, the parent run fails and the sweep exits 5; the same sweep run again (its jobs resumed, calls
    from the cache) writes the ledger and exits 0."""
    from loopback import LoopbackServer

    from lme.util.errors import EXIT_INCOMPLETE

    ids = ["95e38180", "900f72f7"]  # counting questions whose answers wobble between jobs
    questions = {q.question: q for q in load_questions(SAMPLE_PATH) if q.question_id in ids}
    stage_reads: list[dict] = []

    def read_ids(payloads: list[dict]) -> list[str]:
        return [questions[payload["question"]].question_id for payload in payloads]

    with LoopbackServer(reply=wobbly_reader(questions, set(ids), stage_reads)) as server, \
            LoopbackServer(reply="- [s0000:0] one", faults=[("500",)]) as writer:
        def sweep():
            return run_lme(
                tmp_path, "+design=study/15_ledger_append", "retriever=fts5",
                "question_ids=[" + ",".join(f"'{i}'" for i in ids) + "]", "concurrency=1",
                "reader=gpt5_mini", "reader.model.model=openai/gpt-4o-mini", "~reader.model.params.reasoning_effort",
                f"reader.model.api_base={server.base_url}", "reader.model.api_key_env=LOOPBACK_KEY",
                "memory/writer@arbiter.memory.model=gpt5_nano", f"arbiter.memory.model.api_base={writer.base_url}",
                "arbiter.memory.model.api_key_env=LOOPBACK_KEY", "arbiter.memory.model.max_attempts=1",
                f"hydra.sweep.dir={tmp_path}/sweep", "-m", "seed=1,2",
                env={"LOOPBACK_KEY": "sk-loopback"},
            )

        first = sweep()
        assert first.returncode == EXIT_INCOMPLETE, first.stderr[-3000:]
        assert "1 chosen question(s) have no ledger answer" in first.stderr
        assert "memory step ledger (model openai/gpt-5-nano) failed" in first.stderr
        assert len(stage_reads) == 1  # the other chosen question was read; the failed one was not
        _, parent, _ = mlflow_runs(tmp_path)
        assert parent.info.status == "FAILED"
        outcomes = [json.loads(line) for line in artifact(tmp_path, parent.info.run_id,
                                                          "ledger/outcomes.jsonl").splitlines()]
        (failed,) = [o for o in outcomes if o["memory_error"]]
        assert failed["memory_call"] == "failed" and not failed["reread"] and failed["answer"] is None
        assert failed["question_id"] not in read_ids(stage_reads)

        second = sweep()
        assert second.returncode == 0, second.stderr[-3000:]
        assert read_ids(stage_reads)[1:] == [failed["question_id"]]  # the stage ran again; the other read came from the cache
        assert len(writer.completion_requests) == 3  # the failed call, the paid one, the failed question's again
