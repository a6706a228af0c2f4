"""Re-reads in the per-question flow: the real offline reader and judge, a temp call cache, the
shipped pipeline rules, and the loopback server for scripted failures."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace

import pytest
from hydra import compose, initialize_config_dir

import lme
from lme.answer.reader import Reader
from design_helpers import compose_instructions
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import make_judge, sha256_text
from lme.memory.sessions import WholeSessionView
from lme.memory.user_log import UserLogMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import DECLINE_ANSWER, JUDGE_MODEL, READER_MODEL
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import CallStats, Outcome, answer_question
from judging import OFFLINE_TEMPLATES

CONF = lme.CONF_DIR
STEP_FIELDS = ["rule", "view", "instruction_sha256", "chosen", "reread", "failed", "error", "step_answer", "answer",
               "correct", "reader", "judge", "judge_error", "memory", "memory_error"]


@pytest.fixture(scope="module")
def pipeline():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+design=pipeline"])
    first, steps, _ = compose_instructions(cfg)
    return first, steps


@pytest.fixture(scope="module")
def questions():
    return {q.question_id: q for q in load_questions(SAMPLE_PATH)}


@pytest.fixture()
def parts(tmp_path):
    retriever = FTS5Retriever()
    # a first-pass memory starved to 400 bytes: the offline reader declines, the whole sessions hold the fact
    starved = UserLogMemoryBuilder(retriever, max_bytes=400, overflow_reply_reserve_bytes=100)
    views = {"whole_sessions": WholeSessionView(retriever)}
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
    cache = CallCache(tmp_path / "calls.sqlite")
    yield starved, views, judge, cache
    cache.close()


def _answer(question, parts, pipeline, reader=None, judge="default", gateway=None):
    starved, views, default_judge, cache = parts
    first, steps = pipeline
    reader = reader or Reader(name="offline", model=ModelSpec(model=READER_MODEL))
    gateway = gateway or Gateway(cache)
    judge = default_judge if judge == "default" else judge
    outcome = asyncio.run(answer_question(question, starved, reader, first, judge, gateway, 7, steps, views))
    return outcome, gateway


def test_decline_fires_on_the_offline_decline_and_its_answer_replaces_it(questions, parts, pipeline):
    outcome, gateway = _answer(questions["d82c07cd"], parts, pipeline)
    first, steps = pipeline
    assert [s.rule for s in outcome.steps] == ["first_pass", "advice", "decline", "decline", "recall"]
    assert all(list(asdict(s)) == STEP_FIELDS for s in outcome.steps)
    first_pass, advice, decline, decline2, recall = outcome.steps
    assert first_pass.chosen and not first_pass.reread and first_pass.view == "first_pass"
    assert first_pass.step_answer == first_pass.answer == DECLINE_ANSWER and first_pass.correct is False
    assert first_pass.instruction_sha256 == sha256_text(first)
    assert not advice.chosen and not advice.reread and advice.answer == DECLINE_ANSWER and advice.correct is False
    assert advice.reader == CallStats() and advice.judge == CallStats()
    assert decline.chosen and decline.reread and not decline.failed and decline.view == "whole_sessions"
    assert "beagle" in decline.step_answer and decline.answer == decline.step_answer and decline.correct is True
    assert decline.instruction_sha256 == sha256_text(steps[1].instruction)
    assert not decline2.chosen and decline2.answer == decline.answer and decline2.correct is True
    assert not recall.chosen
    # the final answer is the last step's; the top-level stats are the sums over the steps
    assert outcome.answer == decline.answer and outcome.correct is True and outcome.reader_error is None
    assert outcome.reader == first_pass.reader + decline.reader and outcome.reader.calls == 2
    assert outcome.judge.calls == 2 and outcome.judge == CallStats.total(s.judge for s in outcome.steps)
    assert gateway.calls_made == 4


def test_a_second_decline_is_a_new_call_and_an_unchanged_answer_is_not_judged_again(questions, parts, pipeline):
    outcome, gateway = _answer(questions["18f7e499"], parts, pipeline)
    _, _, decline, decline2, _ = outcome.steps
    assert decline.chosen and decline2.chosen and decline.step_answer == decline2.step_answer == DECLINE_ANSWER
    assert decline.reader.calls == decline2.reader.calls == 1
    assert decline.reader.cached_calls == decline2.reader.cached_calls == 0  # "attempt": 2 keys a new call
    assert outcome.judge.calls == 1  # the three identical declines share the first pass's verdict
    # the same question again, same seed: every call comes from the cache, with the same steps
    again, gateway = _answer(questions["18f7e499"], parts, pipeline)
    assert gateway.calls_made == 0 and again.reader.cached_calls == again.reader.calls == 3
    strip = lambda o: [(s.rule, s.chosen, s.reread, s.answer, s.correct) for s in o.steps]
    assert strip(again) == strip(outcome)


def test_without_a_judge_every_step_has_no_verdict(questions, parts, pipeline):
    outcome, _ = _answer(questions["d82c07cd"], parts, pipeline, judge=None)
    assert [s.correct for s in outcome.steps] == [None] * 5
    assert outcome.correct is False and outcome.judge == CallStats()


@pytest.mark.parametrize(("fault", "error"), [("500", "InternalServerError"), ("empty_content", "empty answer")])
def test_a_failed_reread_keeps_the_earlier_answer_and_is_recorded(
    questions, parts, pipeline, warm_litellm, test_key, fault, error
):
    from loopback import LoopbackServer

    first, _ = pipeline
    question = questions["d82c07cd"]
    server: LoopbackServer

    def reply(body):
        payload = json.loads(body["messages"][1]["content"])
        if body["messages"][0]["content"] == first:
            server.add_faults((fault,))  # the next request, the first decline re-read, fails
            return "I can\u2019t determine which dog you mean."
        return f"A beagle (attempt {payload.get('attempt', 1)})."

    with LoopbackServer(reply=reply) as server:
        reader = Reader(
            name="loopback",
            model=ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY",
                            max_attempts=1, timeout_s=10),
        )
        outcome, _ = _answer(question, parts, pipeline, reader=reader)
        bodies = [json.loads(r.body["messages"][1]["content"]) for r in server.completion_requests]
    first_pass, advice, decline, decline2, recall = outcome.steps
    assert first_pass.answer == "I can\u2019t determine which dog you mean." and first_pass.correct is False
    assert decline.chosen and decline.reread and decline.failed and error in decline.error
    assert decline.step_answer is None and decline.answer == first_pass.answer and decline.correct is False
    assert decline.reader.calls == 1 and decline.judge == CallStats()
    if fault == "500":
        assert decline.reader.failed_calls == 1
    # the earlier answer still declines, so the second decline re-reads, as attempt 2 of that request
    assert decline2.chosen and decline2.reread and not decline2.failed
    assert decline2.answer == "A beagle (attempt 2)." and decline2.correct is True
    assert [b.get("attempt") for b in bodies] == [None, None, 2]
    assert all(set(b) <= {"question", "question_date", "memory", "attempt"} for b in bodies)
    assert outcome.answer == decline2.answer and outcome.correct is True and outcome.reader.calls == 3


def test_outcomes_with_steps_round_trip_and_old_rows_without_steps_still_load(questions, parts, pipeline):
    outcome, _ = _answer(questions["d82c07cd"], parts, pipeline)
    assert Outcome.from_dict(json.loads(outcome.to_json())) == outcome
    old = json.loads(outcome.to_json())
    del old["steps"]
    assert Outcome.from_dict(old) == replace(outcome, steps=())
