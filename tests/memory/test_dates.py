"""Relative-date rules: the case table, distances, formatting, and a check on real LongMemEval text."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime

import pytest

from lme.data.load import load_questions
from lme.memory import dates as rules
from lme.memory.dates import (
    ResolvedDate,
    describe_distance,
    describe_range_distance,
    format_resolution,
    format_resolved_line,
    resolve_relative_dates,
)
from shared_data import MINI, need

from .date_cases import CASES, Case

QUESTION_DAY = date(2023, 5, 30)


def _day(text: str) -> date:
    return date.fromisoformat(text)


def _reading(value: str | tuple[str, str]) -> tuple[date, date]:
    return (_day(value), _day(value)) if isinstance(value, str) else (_day(value[0]), _day(value[1]))


def test_the_table_is_large_enough():
    assert len(CASES) >= 80
    assert sum(len(case.expected) for case in CASES) >= 80


@pytest.mark.parametrize("case", CASES, ids=[f"{case.anchor}:{case.text[:45]}" for case in CASES])
def test_case_table(case: Case):
    resolved = resolve_relative_dates(case.text, _day(case.anchor))
    got = [(item.expression, item.start, item.end, item.approximate, item.alternatives) for item in resolved]
    want = [
        (
            expected.expression,
            _day(expected.start),
            _day(expected.end or expected.start),
            expected.approximate,
            tuple(_reading(value) for value in expected.alternatives),
        )
        for expected in case.expected
    ]
    assert got == want
    for item in resolved:  # spans point at the expression as written, in text order
        assert case.text[item.span[0] : item.span[1]] == item.expression
        assert bool(item.alternatives) == item.note.startswith("ambiguous: ")
    assert [item.span for item in resolved] == sorted(item.span for item in resolved)


def test_datetime_anchor_uses_its_day():
    [item] = resolve_relative_dates("I left yesterday.", datetime(2023, 5, 20, 23, 59))
    assert item.start == item.end == date(2023, 5, 19)


def test_notes_explain_vague_numbers_and_ambiguity():
    [few] = resolve_relative_dates("a few weeks ago", date(2023, 5, 20))
    assert few.note == '"a few" read as 3'
    [friday] = resolve_relative_dates("last Friday", date(2023, 5, 20))
    assert friday.note == "ambiguous: the Friday of the previous week or the most recent Friday"


def test_resolved_date_is_frozen():
    [item] = resolve_relative_dates("today", date(2023, 5, 20))
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.start = date(2000, 1, 1)  # type: ignore[misc]


def test_dates_outside_the_calendar_are_skipped_not_raised():
    assert resolve_relative_dates("3 days ago and next year", date(1, 1, 2)) == [
        ResolvedDate("next year", date(2, 1, 1), date(2, 12, 31), span=(15, 24))
    ]
    assert resolve_relative_dates("next Christmas", date(9999, 12, 30)) == []


def test_bad_anchor_type_is_a_type_error():
    with pytest.raises(TypeError):
        resolve_relative_dates("today", "2023-05-20")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- distances

@pytest.mark.parametrize(
    ("day", "expected"),
    [
        (date(2023, 5, 30), "the same day as the question date"),
        (date(2023, 5, 29), "1 day before the question date"),
        (date(2023, 6, 2), "3 days after the question date"),
        (date(2023, 5, 23), "7 days (1 week) before the question date"),
        (date(2023, 5, 22), "8 days (1 week 1 day) before the question date"),
        (date(2023, 5, 16), "14 days (2 weeks) before the question date"),
        (date(2023, 4, 1), "59 days (8 weeks 3 days) before the question date"),
        (date(2023, 3, 16), "75 days (10 weeks 5 days, about 2 months) before the question date"),
        (date(2023, 3, 10), "81 days (11 weeks 4 days, about 3 months) before the question date"),
        (date(2023, 3, 30), "61 days (8 weeks 5 days, 2 months) before the question date"),
        (date(2023, 2, 28), "91 days (13 weeks, about 3 months) before the question date"),
        (date(2023, 9, 7), "100 days (14 weeks 2 days, about 3 months) after the question date"),
        (date(2022, 5, 30), "365 days (1 year) before the question date"),
        (date(2022, 4, 25), "400 days (about 1 year 1 month) before the question date"),
        (date(2021, 5, 30), "730 days (2 years) before the question date"),
        (date(2025, 12, 1), "916 days (about 2 years 6 months) after the question date"),
    ],
)
def test_describe_distance(day: date, expected: str):
    assert describe_distance(day, QUESTION_DAY) == expected


def test_describe_distance_accepts_datetimes_and_a_reference_name():
    assert describe_distance(datetime(2023, 5, 20, 8), datetime(2023, 5, 30, 23), "the session date") == (
        "10 days (1 week 3 days) before the session date"
    )


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (date(2023, 5, 13), date(2023, 5, 14), "16 to 17 days (2 weeks 2 days to 2 weeks 3 days) before the question date"),
        (date(2023, 5, 27), date(2023, 5, 28), "2 to 3 days before the question date"),
        (date(2023, 5, 24), date(2023, 5, 30), "0 to 6 days before the question date"),
        (date(2023, 6, 1), date(2023, 6, 30), "2 to 31 days (2 days to 4 weeks 3 days) after the question date"),
        (date(2023, 5, 1), date(2023, 6, 2), "from 29 days (4 weeks 1 day) before to 3 days after the question date"),
        (date(2022, 1, 1), date(2022, 12, 31), "150 to 514 days (about 5 months to about 1 year 5 months) before the question date"),
        (date(2023, 5, 20), date(2023, 5, 20), "10 days (1 week 3 days) before the question date"),
    ],
)
def test_describe_range_distance(start: date, end: date, expected: str):
    assert describe_range_distance(start, end, QUESTION_DAY) == expected


# --------------------------------------------------------------------------- formatting

def test_format_resolution_range():
    [item] = resolve_relative_dates("I went to IKEA last weekend.", date(2023, 5, 20))
    assert format_resolution(item, QUESTION_DAY) == (
        '"last weekend" = 2023-05-13 (Saturday) to 2023-05-14 (Sunday), '
        "16 to 17 days (2 weeks 2 days to 2 weeks 3 days) before the question date"
    )


def test_format_resolution_approximate_and_note():
    [item] = resolve_relative_dates("a few days ago", date(2023, 5, 20))
    assert format_resolution(item, datetime(2023, 5, 30, 10, 0)) == (
        '"a few days ago" = about 2023-05-17 (Wednesday), 13 days (1 week 6 days) before the question date '
        '("a few" read as 3)'
    )


def test_format_resolution_lists_both_readings_when_ambiguous():
    [item] = resolve_relative_dates("last Friday", date(2023, 5, 20))
    assert format_resolution(item, QUESTION_DAY) == (
        '"last Friday" = 2023-05-12 (Friday), 18 days (2 weeks 4 days) before the question date, '
        "or 2023-05-19 (Friday), 11 days (1 week 4 days) before the question date "
        "(ambiguous: the Friday of the previous week or the most recent Friday)"
    )


def test_format_resolution_range_around_the_question_date_and_collapsed_whitespace():
    [item] = resolve_relative_dates("this\n   month", date(2023, 5, 20))
    assert format_resolution(item, date(2023, 5, 20)) == (
        '"this month" = 2023-05-01 (Monday) to 2023-05-31 (Wednesday), '
        "from 19 days (2 weeks 5 days) before to 11 days (1 week 4 days) after the question date"
    )


def test_format_resolved_line():
    assert format_resolved_line([], QUESTION_DAY) == ""
    resolved = resolve_relative_dates("yesterday and today", date(2023, 5, 30))
    assert format_resolved_line(resolved, QUESTION_DAY) == (
        'Resolved dates: "yesterday" = 2023-05-29 (Monday), 1 day before the question date; '
        '"today" = 2023-05-30 (Tuesday), the same day as the question date'
    )


# --------------------------------------------------------------------------- real text

@pytest.fixture(scope="module")
def mini_questions():
    return load_questions(need(MINI))


def test_rules_fire_on_real_messages_and_the_fast_scan_equals_the_full_scan(mini_questions):
    messages = fired = 0
    for question in mini_questions:
        for session in question.sessions:
            for turn in session.turns:
                if turn.role != "user":
                    continue
                messages += 1
                resolved = resolve_relative_dates(turn.content, session.date)
                fired += bool(resolved)
                for item in resolved:
                    assert turn.content[item.span[0] : item.span[1]] == item.expression
                    assert item.start <= item.end
                    format_resolution(item, question.question_date)
                fast = [(rule.name, match.span()) for rule, match in rules._matches(turn.content)]
                full = [(rule.name, match.span()) for rule, match in rules._scan_all(rules._normalise(turn.content))]
                assert fast == full
    assert messages > 1000
    assert fired > messages // 20  # about one user message in nine holds an expression in S
