"""The whole-session view: the three selection steps, the budget, verbatim messages."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from lme.data.records import Question, Session, Turn
from lme.memory.sessions import CUT_MARK, WholeSessionView, content_scores, sessions_near_dates
from lme.retrieval.base import Ranking
from shared_data import MINI, needs


class FixedOrder:
    name = "fixed"

    def __init__(self, order):
        self.order = order

    def rank(self, question, top_k):
        return Ranking("fixed", tuple(self.order[:top_k]), tuple(0.0 for _ in self.order[:top_k]))


def history(texts_and_dates, question_text, question_date=datetime(2023, 6, 14, 20, 0)):
    sessions = tuple(
        Session(f"s{i:04d}", moment, "", tuple(Turn(f"s{i:04d}:{j}", role, text) for j, (role, text) in enumerate(turns)),
                f"orig{i}", False)
        for i, (turns, moment) in enumerate(texts_and_dates)
    )
    return Question("q", "temporal-reasoning", question_text, "x", question_date, "", sessions, ())


def chat(text):
    return [("user", text), ("assistant", "Noted: " + text)]


def test_step_one_takes_sessions_near_the_date_the_question_names_then_content_then_retrieval():
    base = datetime(2023, 5, 1, 9, 0)
    days = [0, 5, 8, 9, 10, 11, 12, 20, 37, 38]
    sessions = [(chat(f"session {d} about gardening"), base + timedelta(days=d)) for d in days]
    sessions[7] = (chat("I bought a bicycle helmet and a bicycle lock for my bicycle"), sessions[7][1])
    # the question date is 2023-06-14 (Wednesday); "last Saturday" = 2023-06-10 (previous week's Saturday)
    q = history(sessions, "What did I buy last Saturday for my bicycle?")
    view = WholeSessionView(FixedOrder(["s0001:0", "s0000:1"]), date_sessions=2, content_sessions=1)
    proposed = view.candidates(q)
    steps = [(c.index, c.step) for c in proposed]
    assert steps[:2] == [(9, "dates"), (8, "dates")]  # 2023-06-08 (2 days off), then 2023-06-07 (3 days off)
    assert steps[2] == (7, "content")
    assert steps[3:] == [(1, "retrieval"), (0, "retrieval")]
    memory = view.build(q)
    headings = re.findall(r"^### Session (s\d{4})", memory.text, re.M)
    assert headings == ["s0000", "s0001", "s0007", "s0008", "s0009"]  # date order
    assert memory.notes["from_dates"] == "2" and memory.notes["from_content"] == "1"
    assert memory.notes["from_retrieval"] == "2"


def test_dates_step_is_skipped_when_all_sessions_share_one_day():
    day = datetime(2023, 6, 3, 8, 0)
    q = history([(chat("a"), day), (chat("b"), day + timedelta(hours=3))], "What did I do last Saturday?")
    assert all(c.step != "dates" for c in WholeSessionView(FixedOrder([])).candidates(q))


def test_budget_is_kept_messages_are_verbatim_and_long_ones_cut():
    big = "word " * 5000  # 25,000 characters
    sessions = [(chat(f"short session {i}"), datetime(2023, 1, 1 + i)) for i in range(5)]
    sessions.append(([("user", big), ("assistant", "ok")], datetime(2023, 2, 1)))
    q = history(sessions, "What about session words?")
    order = [f"s{i:04d}:0" for i in (5, 0, 1, 2, 3, 4)]
    memory = WholeSessionView(FixedOrder(order), max_bytes=13_000, message_max_chars=12_000).build(q)
    assert memory.n_bytes <= 13_000
    assert "[s0005:0] user: " + big[:12_000] + CUT_MARK in memory.text
    assert "[s0000:1] assistant: Noted: short session 0" in memory.text
    tiny = WholeSessionView(FixedOrder(order), max_bytes=1_000).build(q)
    assert tiny.n_bytes <= 1_000 and "s0005" not in tiny.text and "s0000" in tiny.text


def test_content_scores_are_scaled_for_session_length():
    q = history([(chat("tomato " + "filler " * 400), datetime(2023, 1, 1)),
                 (chat("tomato plants"), datetime(2023, 1, 2))], "tomato")
    long_score, short_score = content_scores(q.sessions, "How are my tomato plants?")
    assert short_score > long_score > 0


def test_sessions_near_dates_orders_by_distance_and_limits():
    q = history([(chat("x"), datetime(2023, 3, d)) for d in (1, 9, 10, 12, 20)], "q")
    from datetime import date

    assert sessions_near_dates(q.sessions, [(date(2023, 3, 10), date(2023, 3, 10))], 3, 4) == [2, 1, 3]
    assert sessions_near_dates(q.sessions, [(date(2023, 3, 10), date(2023, 3, 10))], 3, 1) == [2]


@needs(MINI)
def test_on_the_real_mini_set_views_fit_and_hold_whole_sessions():
    from lme.data.load import load_questions
    from lme.retrieval.fts5 import FTS5Retriever

    view = WholeSessionView(FTS5Retriever())
    for question in load_questions(MINI):
        memory = view.build(question)
        assert 0 < memory.n_bytes <= 100_000
        shown = set(memory.notes["session_ids"].split())
        for session in question.sessions:
            if session.session_id in shown:
                for turn in session.turns:
                    assert f"[{turn.turn_id}] {turn.role}: {turn.content[:12_000]}" in memory.text
            assert session.original_id not in memory.text
