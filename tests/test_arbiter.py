"""The arbiter: disagreement from answer texts, one call per disagreeing question, its per-step row."""

from __future__ import annotations

import asyncio
import json

import pytest

from lme.study.arbiter import ArbiterOutcome, arbiter_step, arbitrate, disagree, earlier_answers, final_answers
from lme.answer.reader import Reader
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import make_judge
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import JUDGE_MODEL
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import CallStats

from judging import OFFLINE_TEMPLATES


def test_disagreement_is_decided_on_normalised_answer_text():
    assert not disagree(["A beagle.", "a  beagle", "A BEAGLE!"])
    assert not disagree([None, "", "  "])
    assert disagree(["beagle", "poodle", "beagle"])
    assert disagree(["beagle", None, "beagle"])  # a missing answer differs from an answer
    assert earlier_answers(["beagle", None, " ", "poodle"]) == ["beagle", "poodle"]


def test_final_answers_are_listed_per_question_in_run_order():
    runs = [[{"question_id": "a", "answer": "x"}],
            [{"question_id": "a", "answer": "y"}, {"question_id": "b", "answer": "z"}]]
    assert final_answers(runs) == {"a": ["x", "y"], "b": [None, "z"]}


def test_the_arbiter_reads_only_disagreeing_questions_with_the_earlier_answers(tmp_path, warm_litellm, test_key):
    from loopback import LoopbackServer

    questions = {q.question_id: q for q in load_questions(SAMPLE_PATH)}
    agree, split = questions["d82c07cd"], questions["ba26d851"]
    answers = {agree.question_id: ["A beagle.", "a beagle", "A BEAGLE"],
               split.question_id: ["Ridgeline Outfitters", "I don't know.", None]}
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
    cache = CallCache(tmp_path / "calls.sqlite")
    with LoopbackServer(reply="You bought them at Ridgeline Outfitters.") as server:
        reader = Reader(name="loopback", model=ModelSpec(
            model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY", max_attempts=1))
        outcomes = asyncio.run(arbitrate(
            [agree, split, questions["3d792fa1"]], answers, RetrievedMemoryBuilder(FTS5Retriever()), reader,
            "Pick the right one.", judge, Gateway(cache), 1,
        ))
        requests = server.completion_requests
    cache.close()
    assert [o.question_id for o in outcomes] == [agree.question_id, split.question_id]  # only questions with answers
    calm, arbitrated = outcomes
    assert (calm.chosen, calm.reread, calm.answer, calm.correct) == (False, False, None, None)
    assert calm.reader == CallStats() and calm.earlier_answers == tuple(answers[agree.question_id])
    assert arbitrated.chosen and arbitrated.reread and not arbitrated.failed
    assert arbitrated.answer == "You bought them at Ridgeline Outfitters." and arbitrated.correct is True
    assert arbitrated.reader.calls == 1 and arbitrated.judge.calls == 1
    assert len(requests) == 1
    messages = requests[0].body["messages"]
    assert messages[0]["content"] == "Pick the right one."
    payload = json.loads(messages[1]["content"])
    assert set(payload) == {"question", "question_date", "memory", "earlier_answers"}
    assert payload["earlier_answers"] == ["Ridgeline Outfitters", "I don't know."]
    assert json.loads(arbitrated.to_json())["earlier_answers"] == answers[split.question_id]


def _row(qid, answer, correct):
    return {"question_id": qid, "question_type": "multi-session", "answer": answer, "correct": correct}


def _arb(qid, chosen, answer=None, correct=None, failed=False):
    return ArbiterOutcome(qid, "multi-session", False, chosen, chosen, failed, "boom" if failed else None,
                          (), answer, correct, CallStats(calls=int(chosen), cost_usd=0.5 * chosen), CallStats())


def test_the_arbiter_row_counts_question_runs_like_the_other_steps():
    runs = [
        [_row("a", "x", True), _row("b", "p", False), _row("c", "u", True), _row("d", "k", True)],
        [_row("a", "y", False), _row("b", "q", True), _row("c", "v", False), _row("d", "k", True)],
        [_row("a", "y", False), _row("b", "q", True), _row("c", "w", False), _row("d", "k", True)],
    ]
    outcomes = [_arb("a", True, "x", True), _arb("b", True, "p", False), _arb("c", True, failed=True), _arb("d", False)]
    row = arbiter_step(runs, outcomes, index=5, view="first_pass")
    # before: a right in 1 run, b in 2, c in 1, d in 3; after: a in 3, b in 0, c unchanged (failed), d unchanged
    assert row["rule"] == row["label"] == "arbiter" and row["index"] == 5 and row["view"] == "first_pass"
    assert (row["questions_chosen"], row["chosen"], row["reread"], row["failed"]) == (3, 9, 9, 3)
    assert row["fixed"] == 2 and row["broken"] == 2
    assert row["mean_accuracy"] == pytest.approx((3 + 0 + 1 + 3) / 12)
    assert row["majority_count"] == 2 and row["majority_accuracy"] == pytest.approx(0.5)  # a and d
    assert row["reader_calls"] == 3 and row["reader_cost_usd"] == pytest.approx(1.5)
