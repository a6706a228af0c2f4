"""The reference study's protocol switches (issue 19, item 3): judge=longmemeval_study (gpt-4o alias,
temperature 0, 16 tokens, exact yes/no), the reader's first attempt only, the study's compact JSON payload,
memory.layout=study, setup=study composing them, and the study's seed-17 split. Model calls go to the
loopback OpenAI server; nothing of lme's own is mocked."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from loopback import LoopbackServer

from lme.answer.reader import build_reader_messages, reader_payload
from lme.data.load import load_questions
from lme.data.records import Question, Session, Turn
from lme.data.sample import SAMPLE_PATH
from lme.data.splits import committed_split, make_study_split, split_ids, study_group
from lme.config.design import compose_design
from lme.util.errors import LmeError
from lme.judge import build_judge_prompt, make_judge, parse_verdict
from lme.memory.base import Memory
from lme.memory.dates import resolve_relative_dates
from lme.memory.retrieved import RetrievedMemoryBuilder, format_turn_block
from lme.memory.user_log import UserLogMemoryBuilder, format_study_resolved_line
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import Journal, run_questions
from judging import OFFLINE_TEMPLATES
from shared_data import ORACLE, TEMPLATES, needs

ROOT = Path(__file__).resolve().parents[1]
KEY_ENV = "LME_TEST_KEY"
needs_templates = needs(TEMPLATES)


def study_design(*overrides: str):
    """setup=study on the bundled sample, BM25 replies (no gated embedding model), the models at `api_base`."""
    return compose_design(["+design=first_pass", "setup=study", "dataset=sample", "retriever=fts5",
                           f"judge.templates_path={TEMPLATES}", *overrides])


# -- the judge -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("yes", True), ("Yes.", True), (" YES! \n", True), ("no", False), ("No.", False), ("no!", False),
     ("Yes, the response is correct.", None), ("yes yes", None), ("No, yes is wrong", None), ("", None),
     ("The answer is correct", None), ("yes..", None), ("noo", None)],
)
def test_exact_yes_no_reads_only_yes_or_no(reply, verdict):
    assert parse_verdict(reply, "exact_yes_no") is verdict
    assert parse_verdict(reply) is ("yes" in reply.strip().lower())  # LongMemEval's rule is still the default


def test_an_unknown_verdict_rule_is_refused():
    with pytest.raises(LmeError, match="judge.verdict 'fuzzy' is unknown"):
        make_judge("x", False, ModelSpec(model="m"), templates=OFFLINE_TEMPLATES, verdict="fuzzy")
    with pytest.raises(LmeError, match=r"judge.verdict: expected one of contains_yes, exact_yes_no, locomo_label, got 'fuzzy'"):
        compose_design(["judge.verdict=fuzzy"], check=True)


def test_the_study_judge_config_and_the_official_default():
    study = compose_design(["judge=longmemeval_study"])
    model = study.judge.model.node
    assert model["model"] == "gpt-4o" and model["max_attempts"] == 1
    assert dict(model["params"]) == {"temperature": 0, "max_tokens": 16, "n": 1}
    assert study.judge.verdict == "exact_yes_no" and study.judge.official
    assert study.judge.system_message == "You are a fair and precise evaluator."
    paper = compose_design(["setup=paper"])
    assert paper.judge.name == "longmemeval" and paper.judge.verdict == "contains_yes"
    assert paper.judge.system_message is None  # LongMemEval's judge sends the template alone
    assert paper.judge.model.node["model"] == "gpt-4o-2024-08-06" and paper.judge.model.node["params"]["max_tokens"] == 10


@needs_templates
@pytest.mark.usefixtures("test_key")
@pytest.mark.parametrize(("reply", "correct", "error"),
                         [("Yes.", True, None), ("no", False, None), ("Yes, it matches.", False, "UnparseableVerdict")])
def test_the_study_judge_call(reply, correct, error, tmp_path):
    question = load_questions(SAMPLE_PATH)[0]
    with LoopbackServer(reply=reply) as server:
        design = study_design(f"judge.model.api_base={server.base_url}", f"judge.model.api_key_env={KEY_ENV}")
        judge = design.judge.build()
        cache = CallCache(tmp_path / "c.sqlite")
        try:
            verdict = asyncio.run(judge.judge(Gateway(cache), question, "A beagle."))
        finally:
            cache.close()
        (request,) = server.requests
    body = request.body
    assert body["model"] == "gpt-4o" and body["temperature"] == 0 and body["max_tokens"] == 16
    system, user = body["messages"]
    assert system == {"role": "system", "content": "You are a fair and precise evaluator."}
    assert user["role"] == "user" and user["content"] == build_judge_prompt(judge.templates, question, "A beagle.")
    assert verdict.correct is correct
    if error:
        assert verdict.error and verdict.error.startswith(error) and "'Yes, it matches.'" in verdict.error
        assert verdict.reply is None
    else:
        assert verdict.error is None and verdict.reply == reply


# -- the reader: first attempt only, the study's payload ------------------------------------------------


def _sample_question() -> Question:
    return load_questions(SAMPLE_PATH)[0]


def test_the_study_payload_is_compact_json_with_the_studys_keys():
    question = _sample_question()
    memory = Memory(text="Memory — naïve\ttab", n_bytes=0, turn_ids=())
    text = reader_payload(question, memory, payload="study")
    # JSON.stringify({question, questionDate, memory}) writes exactly these bytes
    expected = ('{"question":' + json.dumps(question.question, ensure_ascii=False)
                + ',"questionDate":' + json.dumps(question.question_date_text)
                + ',"memory":"Memory — naïve\\ttab"}')
    assert text == expected and ", " not in text.replace(question.question, "")
    assert list(json.loads(text)) == ["question", "questionDate", "memory"]
    assert json.loads(text)["questionDate"] == question.question_date_text  # the file's own text, e.g. 2023/09/02 (Sat) 04:19
    # lme's own form is unchanged
    assert list(json.loads(reader_payload(question, memory))) == ["question", "question_date", "memory"]
    # a repeated request keeps its attempt number, after the study's keys
    again = reader_payload(question, memory, {"attempt": 2}, payload="study")
    assert again.endswith(',"attempt":2}') and list(json.loads(again))[:3] == ["question", "questionDate", "memory"]
    with pytest.raises(LmeError, match="reader.payload 'js' is unknown"):
        reader_payload(question, memory, payload="js")


@needs_templates
@pytest.mark.usefixtures("test_key")
def test_setup_study_sends_the_study_payload_and_layout_and_judges_with_the_study_judge(tmp_path):
    with LoopbackServer(reply="yes") as server:
        design = study_design(f"reader.model.api_base={server.base_url}", f"reader.model.api_key_env={KEY_ENV}",
                              f"judge.model.api_base={server.base_url}", f"judge.model.api_key_env={KEY_ENV}")
        reader, judge = design.reader.build(), design.judge.build()
        builder = design.build_memory(design.build_retriever())
        questions = load_questions(SAMPLE_PATH)[:1]
        cache = CallCache(tmp_path / "calls.sqlite")
        try:
            outcomes = asyncio.run(run_questions(questions, builder, reader, design.instructions.first_pass, judge,
                                                 Gateway(cache), 1, Journal(tmp_path / "o.jsonl"), concurrency=1))
        finally:
            cache.close()
        read, judged = server.requests
    assert outcomes[0].answer == "yes" and outcomes[0].correct is True
    assert reader.payload == "study" and reader.model.max_attempts == 1
    assert read.body["model"] == "gpt-5-mini"
    system, user = read.body["messages"]
    assert system == {"role": "system", "content": design.instructions.first_pass}
    payload = json.loads(user["content"])
    assert list(payload) == ["question", "questionDate", "memory"]
    assert user["content"] == json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    assert payload["questionDate"] == questions[0].question_date_text
    assert payload["memory"].splitlines()[2].startswith("# Complete log of the user's messages: every message")
    assert "\n# Retrieved assistant replies: the assistant messages that best match" in payload["memory"]
    assert judged.body["model"] == "gpt-4o" and judged.body["max_tokens"] == 16
    assert [message["role"] for message in judged.body["messages"]] == ["system", "user"]


@pytest.mark.usefixtures("test_key")
@pytest.mark.parametrize(("max_attempts", "requests"), [(1, 1), (2, 2)])
def test_max_attempts_1_sends_a_500_once_and_never_retries(max_attempts, requests, tmp_path):
    """setup=study's reader (reader.model.max_attempts=1): a 500 fails the answer at once; with 2 it is retried."""
    with LoopbackServer(reply="fine", faults=[("500",)]) as server:
        design = study_design(f"reader.model.api_base={server.base_url}", f"reader.model.api_key_env={KEY_ENV}",
                              f"reader.model.max_attempts={max_attempts}", "+reader.model.backoff_base_s=0.01")
        reader = design.reader.build()
        question = _sample_question()
        memory = Memory(text="m", n_bytes=1, turn_ids=())
        messages = build_reader_messages("Answer.", question, memory, payload=reader.payload)
        cache = CallCache(tmp_path / "calls.sqlite")
        try:
            result = asyncio.run(Gateway(cache).complete(reader.model, messages, seed=1))
        finally:
            cache.close()
        assert len(server.requests) == requests
    assert result.attempts == requests
    assert (result.ok, result.text) == ((False, None) if max_attempts == 1 else (True, "fine"))
    if max_attempts == 1:
        assert "InternalServerError" in (result.error or "")


def test_setup_study_composes_every_switch():
    design = compose_design(["+design=pipeline", "setup=study"])
    assert design.dataset.name == "s" and design.reader.name == "gpt-5-mini"
    assert design.reader.payload == "study" and design.reader.model.node["max_attempts"] == 1
    assert design.reader.model.node["params"]["reasoning_effort"] == "medium"
    assert design.judge.name == "longmemeval-study" and design.judge.verdict == "exact_yes_no"
    assert design.memory.node["layout"] == "study" and design.memory.target.endswith("UserLogMemoryBuilder")
    # the baseline memory takes the layout too (setup=study with no design)
    assert compose_design(["setup=study"]).memory.node["layout"] == "study"
    # and setup=paper is untouched
    paper = compose_design(["+design=pipeline", "setup=paper"])
    assert paper.reader.payload == "lme" and paper.reader.model.node["max_attempts"] == 6
    assert paper.memory.node["layout"] == "lme"


def test_bad_switch_values_are_one_sentence():
    with pytest.raises(LmeError, match=r"reader.payload: expected one of lme, study, got 'js'"):
        compose_design(["reader.payload=js"], check=True)
    with pytest.raises(LmeError, match=r"memory.layout: expected one of lme, study, got 'fancy'"):
        compose_design(["memory.layout=fancy"], check=True)


# -- memory.layout=study ---------------------------------------------------------------------------------


def _question(sessions, question_date=datetime(2023, 5, 30, 10, 0)) -> Question:
    return Question(question_id="q_layout", question_type="multi-session", question="Which trail runners did you suggest?",
                    answer="x", question_date=question_date, question_date_text="2023/05/30 (Tue) 10:00",
                    sessions=tuple(sessions), answer_session_ids=())


def _session(index, when, turns):
    sid = f"s{index:04d}"
    return Session(session_id=sid, date=when, date_text=f"{when:%Y/%m/%d} (x) {when:%H:%M}",
                   turns=tuple(Turn(turn_id=f"{sid}:{i}", role=role, content=text) for i, (role, text) in enumerate(turns)),
                   original_id=f"orig_{index}", is_evidence=False)


def test_the_study_layout_as_the_write_up_shows_it():
    sessions = [
        _session(0, datetime(2023, 5, 22, 9, 0), [("user", "We went hiking last weekend."), ("assistant", "Nice!")]),
        _session(1, datetime(2023, 5, 28, 14, 2), [("user", "Which boots should I buy?"),
                                                  ("assistant", "Try trail runners.")]),
    ]
    question = _question(sessions)
    text = UserLogMemoryBuilder(FTS5Retriever(), layout="study").build(question).text
    lines = text.split("\n")
    assert lines[0] == "Question date: 2023-05-30 (Tuesday)."
    assert lines[2] == ("# Complete log of the user's messages: every message the user sent, verbatim, from all 2 "
                        "sessions of the history, in chronological order and grouped by session")
    assert lines[4] == "## 2023-05-22 (Monday) — session s0000 — 8 days (1 week 1 day) before the question date"
    assert lines[5] == "[s0000:0] user: We went hiking last weekend."
    assert lines[6] == ('Resolved dates (from this message\'s date 2023-05-22): "last weekend" = 2023-05-20 … '
                        "2023-05-21 [ends 9 days (1 week 2 days) before the question date]")
    assert ("# Retrieved assistant replies: the assistant messages that best match the question, verbatim, in "
            "retrieval order (only a subset of the history; each names the user message it replied to)") in lines
    assert "[s0001:1] [2023/05/28 (Sun) 14:02] assistant (reply to [s0001:0]): Try trail runners." in lines
    # lme's own layout is unchanged by default
    default = UserLogMemoryBuilder(FTS5Retriever()).build(question).text
    assert "## User messages (every session, oldest first)" in default and "# Complete log" not in default


def test_study_resolved_dates_mark_approximate_and_ambiguous_readings():
    anchor = datetime(2023, 5, 22, 9, 0)
    line = format_study_resolved_line(resolve_relative_dates("That was a few weeks ago.", anchor), anchor.date(),
                                      datetime(2023, 5, 30).date())
    assert line.startswith('Resolved dates (from this message\'s date 2023-05-22): "a few weeks ago" ≈ 2023-05-01 [')
    friday = datetime(2023, 5, 27, 9, 0)  # a Saturday: "last Friday" may be yesterday or eight days ago
    line = format_study_resolved_line(resolve_relative_dates("I saw it last Friday.", friday), friday.date(),
                                      datetime(2023, 5, 30).date())
    assert '"last Friday" = 2023-05-19 [11 days (1 week 4 days) before the question date] or 2023-05-26 [' in line
    assert format_study_resolved_line([], anchor.date(), anchor.date()) == ""


def test_the_retrieved_memory_takes_the_study_layout_too():
    session = _session(3, datetime(2023, 5, 20, 2, 21), [("user", "Hello"), ("assistant", "Hi")])
    assert format_turn_block(session.turns[1], session, "study") == "[s0003:1] [2023/05/20 (Sat) 02:21] assistant: Hi"
    assert format_turn_block(session.turns[1], session) == "[s0003:1] 2023-05-20 (Saturday) 02:21 assistant: Hi"
    with pytest.raises(LmeError, match="memory.layout 'x' is unknown"):
        RetrievedMemoryBuilder(FTS5Retriever(), layout="x")


# -- the study's split (seed 17) ----------------------------------------------------------------------------


def test_the_study_split_groups_abstention_twins_and_takes_a_fifth_of_the_groups():
    ids = [f"q{i}" for i in range(10)] + ["q3_abs", "q7_abs"]
    split = make_study_split(ids, seed=17)
    assert len({study_group(qid) for qid in split.dev}) == 2  # floor(0.2 * 10 groups)
    for qid in ids:
        assert (qid in split.dev) == (study_group(qid) in {study_group(d) for d in split.dev})
    assert sorted(split.dev + split.test) == sorted(ids)
    assert make_study_split(list(reversed(ids)), seed=17) == split  # independent of file order


def test_the_committed_study_lists():
    dev, test = split_ids("study_dev")[0], split_ids("study_test")[0]
    assert (len(dev), len(test)) == (100, 400) and not set(dev) & set(test)
    assert len({study_group(qid) for qid in dev}) == 94 and len({study_group(qid) for qid in dev + test}) == 471
    assert set(dev + test) == set(split_ids("dev")[0] + split_ids("test")[0])  # the same 500 questions
    assert compose_design(["split=study_dev"]).dataset.selection.split == "study_dev"


@needs(ORACLE)
def test_the_study_split_is_reproduced_from_the_file(tmp_path):
    ids = [q.question_id for q in load_questions(ORACLE)]
    assert make_study_split(ids) == committed_split("study")
    result = subprocess.run([sys.executable, "-m", "lme", "data", "split", "--rule", "study", f"dataset.path={ORACLE}",
                             "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "| all | 100 | 400 |" in result.stdout and "equal to the committed lists" in result.stdout
