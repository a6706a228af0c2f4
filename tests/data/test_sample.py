"""The bundled synthetic sample: deterministic, valid and covering what the project needs."""

from __future__ import annotations

import json
import lzma
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lme.data.dates import parse_lme_date
from lme.data.load import load_questions
from lme.data.records import QUESTION_TYPES
from lme.data.sample import (
    SAMPLE_PATH,
    WEEKDAY_ABBREVIATIONS,
    WEEKDAY_NAMES,
    format_lme_date,
    generate_sample,
    render_sample,
    write_sample,
)
from shared_data import MINI, need

KEY_ORDER = [
    "question_id",
    "question_type",
    "question",
    "question_date",
    "answer",
    "answer_session_ids",
    "haystack_dates",
    "haystack_session_ids",
    "haystack_sessions",
]
RELATIVE_EXPRESSIONS = ("yesterday", "two days ago", "two weeks ago", "this past Friday", "last weekend", "last month")


@pytest.fixture(scope="module")
def raw() -> list[dict]:
    return json.loads(SAMPLE_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def questions():
    return load_questions(SAMPLE_PATH)


def _dates(record: dict) -> list[datetime]:
    return [parse_lme_date(text) for text in record["haystack_dates"]]


def test_committed_file_is_the_regenerated_sample(tmp_path: Path) -> None:
    committed = SAMPLE_PATH.read_bytes()
    assert render_sample().encode("utf-8") == committed
    written = write_sample(tmp_path / "nested" / "sample.json")
    assert written.read_bytes() == committed
    assert generate_sample(0) == generate_sample(0)
    assert generate_sample(1) != generate_sample(0)


def test_sample_is_small_and_packaged_next_to_the_module() -> None:
    assert SAMPLE_PATH.name == "longmemeval_sample.json"
    assert SAMPLE_PATH.parent.name == "sample_data"
    assert SAMPLE_PATH.stat().st_size < 300_000


def test_sample_loads(raw: list[dict], questions) -> None:
    assert len(questions) == len(raw) >= 36
    assert all(list(record) == KEY_ORDER for record in raw)


def test_every_type_has_at_least_five_questions(questions) -> None:
    counts = Counter(question.question_type for question in questions)
    assert set(counts) == set(QUESTION_TYPES)
    assert min(counts.values()) >= 5


def test_abstention_questions_keep_their_base_type(questions) -> None:
    abstentions = [question for question in questions if question.is_abstention]
    assert len(abstentions) >= 4
    assert len({question.question_type for question in abstentions}) >= 4
    ids = {question.question_id for question in questions}
    for question in abstentions:
        assert question.question_id.endswith("_abs")
        assert question.question_id.removesuffix("_abs") in ids
        assert question.answer.startswith("The information provided is not enough.")


def test_one_integer_answer(raw: list[dict], questions) -> None:
    integers = [record for record in raw if isinstance(record["answer"], int)]
    assert len(integers) == 1
    loaded = {question.question_id: question for question in questions}
    assert loaded[integers[0]["question_id"]].answer == str(integers[0]["answer"])


def test_exactly_one_same_day_history(raw: list[dict]) -> None:
    same_day = [record for record in raw if len({moment.date() for moment in _dates(record)}) == 1]
    assert len(same_day) == 1
    assert len(same_day[0]["haystack_dates"]) >= 6


def test_file_orders_are_varied(raw: list[dict]) -> None:
    unsorted = [record for record in raw if _dates(record) != sorted(_dates(record))]
    assert len(unsorted) >= 10
    # Sorted by day only, with two sessions of one day listed latest first.
    times_out_of_order = []
    for record in raw:
        dates = _dates(record)
        days = [moment.date() for moment in dates]
        pairs = zip(dates, dates[1:])
        if days == sorted(days) and any(a.date() == b.date() and a > b for a, b in pairs):
            times_out_of_order.append(record)
    assert times_out_of_order


def test_question_dates_follow_the_sessions(raw: list[dict]) -> None:
    earlier_same_day = 0
    for record in raw:
        asked = parse_lme_date(record["question_date"])
        last = max(_dates(record))
        if asked < last:
            assert asked.date() == last.date()
            earlier_same_day += 1
    assert earlier_same_day == 1


def test_dates_use_english_weekdays(raw: list[dict]) -> None:
    assert format_lme_date(datetime(2023, 5, 20, 2, 21)) == "2023/05/20 (Sat) 02:21"
    for record in raw:
        for text in [record["question_date"], *record["haystack_dates"]]:
            moment = parse_lme_date(text)
            assert text == format_lme_date(moment)
            assert f"({WEEKDAY_ABBREVIATIONS[moment.weekday()]})" in text


def test_histories_have_the_expected_shape(raw: list[dict]) -> None:
    for record in raw:
        assert 6 <= len(record["haystack_sessions"]) <= 12
        assert len(set(record["haystack_session_ids"])) == len(record["haystack_session_ids"])
        for session in record["haystack_sessions"]:
            assert 4 <= len(session) <= 10
            assert [turn["role"] for turn in session] == ["user", "assistant"] * (len(session) // 2)
            assert all(set(turn) == {"role", "content", "has_answer"} for turn in session)


def test_evidence_sessions_are_in_the_haystack(raw: list[dict]) -> None:
    for record in raw:
        evidence = record["answer_session_ids"]
        assert evidence
        assert set(evidence) <= set(record["haystack_session_ids"])
        for session_id in record["haystack_session_ids"]:
            assert session_id.startswith("answer_") == (session_id in evidence)


def test_planted_turns_have_has_answer(raw: list[dict]) -> None:
    for record in raw:
        abstention = record["question_id"].endswith("_abs")
        for session_id, session in zip(record["haystack_session_ids"], record["haystack_sessions"]):
            flagged = [turn for turn in session if turn["has_answer"]]
            if abstention or session_id not in record["answer_session_ids"]:
                assert not flagged
                continue
            assert flagged
            expected_role = "assistant" if record["question_type"] == "single-session-assistant" else "user"
            assert {turn["role"] for turn in flagged} == {expected_role}


def test_relative_time_expressions_are_planted(raw: list[dict]) -> None:
    planted = " ".join(
        turn["content"]
        for record in raw
        if record["question_type"] == "temporal-reasoning"
        for session in record["haystack_sessions"]
        for turn in session
        if turn["has_answer"]
    )
    for expression in RELATIVE_EXPRESSIONS:
        assert expression in planted


def test_knowledge_updates_answer_with_the_newer_value(questions) -> None:
    updates = [q for q in questions if q.question_type == "knowledge-update" and not q.is_abstention]
    for question in updates:
        evidence = [session for session in question.sessions if session.is_evidence]
        assert len(evidence) == 2 and evidence[0].date < evidence[1].date
        newest = " ".join(turn.content for turn in evidence[1].turns if turn.has_answer)
        assert question.answer.lower() in newest.lower()


def test_yesterday_answers_are_computed_from_the_session_date(questions) -> None:
    checked = 0
    for question in questions:
        if question.question_type != "temporal-reasoning" or "day of the week" not in question.question:
            continue
        (session,) = [session for session in question.sessions if session.is_evidence]
        day = session.date.date() - timedelta(days=1)
        assert question.answer.startswith(WEEKDAY_NAMES[day.weekday()])
        checked += 1
    assert checked


def test_sample_text_is_not_taken_from_longmemeval(raw: list[dict]) -> None:
    with lzma.open(need(MINI), "rt", encoding="utf-8") as handle:
        real = json.load(handle)
    real_texts = {turn["content"] for record in real for session in record["haystack_sessions"] for turn in session}
    real_texts |= {record["question"] for record in real}
    ours = {turn["content"] for record in raw for session in record["haystack_sessions"] for turn in session}
    ours |= {record["question"] for record in raw}
    assert not ours & real_texts
