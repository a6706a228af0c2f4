"""The pipeline's first-pass memory, on hand-built histories and on the real mini set."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from lme.util.budget import utf8_len
from lme.data.records import Question, Session, Turn
from lme.util.errors import LmeError
from lme.memory.user_log import UserLogMemoryBuilder, answered_user_turn, is_same_day
from lme.retrieval.base import Ranking
from lme.retrieval.fts5 import FTS5Retriever
from shared_data import MINI, needs


class FixedOrder:
    """A real retriever that ranks turns in a given order (or history order reversed)."""

    name = "fixed"

    def __init__(self, order=None):
        self.order = order

    def rank(self, question, top_k):
        ids = self.order if self.order is not None else [t.turn_id for t in reversed(question.turns())]
        ids = ids[:top_k]
        return Ranking("fixed", tuple(ids), tuple(float(-i) for i in range(len(ids))))


def make_question(sessions_turns, dates, question_date=datetime(2023, 5, 30, 12, 0)):
    sessions = []
    for index, (turns, moment) in enumerate(zip(sessions_turns, dates)):
        sid = f"s{index:04d}"
        sessions.append(Session(
            session_id=sid, date=moment, date_text="", original_id=f"answer_orig_{index}", is_evidence=False,
            turns=tuple(Turn(f"{sid}:{j}", role, text) for j, (role, text) in enumerate(turns)),
        ))
    return Question("q1", "multi-session", "How many plants did I buy?", "3", question_date, "", tuple(sessions), ())


def test_log_holds_every_user_message_with_headings_distances_and_resolved_dates():
    q = make_question(
        [
            [("user", "I bought a fern yesterday."), ("assistant", "Ferns like shade.")],
            [("user", "Two more plants today!"), ("assistant", "Nice."), ("user", "Thanks.")],
        ],
        [datetime(2023, 5, 22, 9, 0), datetime(2023, 5, 29, 18, 30)],
    )
    memory = UserLogMemoryBuilder(FixedOrder()).build(q)
    text = memory.text
    assert text.startswith("Question date: 2023-05-30 (Tuesday).")
    assert "carry no information" not in text
    assert "### Session s0000, 2023-05-22 (Monday) 09:00, 8 days (1 week 1 day) before the question date" in text
    assert "[s0000:0] I bought a fern yesterday." in text
    resolved = text.split("[s0000:0] I bought a fern yesterday.\n", 1)[1].splitlines()[0]
    assert resolved.startswith("Resolved dates:") and "2023-05-21 (Sunday)" in resolved
    assert text.index("[s0000:0]") < text.index("[s0001:0]") < text.index("[s0001:2]")
    # replies: assistant turns only, in the retriever's order, each naming the message it answered
    replies = text.split("## Assistant replies", 1)[1]
    assert re.findall(r"^\[(s\d{4}:\d+)\]", replies, re.M) == ["s0001:1", "s0000:1"]
    assert "[s0001:1] 2023-05-29 (Monday) 18:30, answering [s0001:0]: Nice." in replies
    assert "answer_orig" not in text
    assert memory.n_bytes == utf8_len(text)
    assert memory.notes["user_messages"] == "3" and memory.notes["replies"] == "2"


def test_same_day_history_says_session_dates_carry_no_information():
    day = datetime(2023, 3, 4, 10, 0)
    q = make_question([[("user", "a")], [("user", "b")]], [day, day + timedelta(hours=5)])
    assert is_same_day(q)
    text = UserLogMemoryBuilder(FixedOrder()).build(q).text
    assert "Every session of this history is dated 2023-03-04 (Saturday)" in text
    assert "carry no information" in text


def test_replies_stop_at_their_budget_and_an_oversize_reply_is_skipped_not_cut():
    long_reply = "x" * 500
    q = make_question(
        [[("user", "u0"), ("assistant", long_reply), ("user", "u1"), ("assistant", "short reply one"),
          ("assistant", "short reply two")]],
        [datetime(2023, 5, 1)],
    )
    builder = UserLogMemoryBuilder(FixedOrder(["s0000:1", "s0000:3", "s0000:4"]), reply_max_bytes=200)
    memory = builder.build(q)
    assert long_reply not in memory.text and "s0000:1" in memory.skipped_turn_ids
    assert "short reply one" in memory.text and "short reply two" in memory.text
    assert "[s0000:4] 2023-05-01 (Monday) 00:00, answering [s0000:2]: short reply two" in memory.text


def test_the_whole_memory_never_exceeds_max_bytes():
    sessions = [[("user", f"message {i} " + "é" * 50), ("assistant", "reply " + "ü" * 300)] for i in range(20)]
    q = make_question(sessions, [datetime(2023, 1, 1) + timedelta(days=i) for i in range(20)])
    for max_bytes in (3_000, 5_000, 9_000, 40_000):
        memory = UserLogMemoryBuilder(FixedOrder(), max_bytes=max_bytes, overflow_reply_reserve_bytes=500).build(q)
        assert memory.n_bytes <= max_bytes


@pytest.mark.parametrize("policy", ["retrieved_and_newest", "newest"])
def test_an_m_sized_history_overflows_by_the_declared_policy_within_budget(policy):
    n = 500
    sessions = [[("user", f"Session {i} note: " + "filler words " * 40), ("assistant", "ok " * 50)] for i in range(n)]
    sessions[7][0] = ("user", "I planted three tomato seedlings in the garden bed.")
    q = make_question(sessions, [datetime(2021, 1, 1) + timedelta(days=i) for i in range(n)],
                      question_date=datetime(2022, 6, 1))
    q = Question(q.question_id, q.question_type, "How many tomato seedlings did I plant?", q.answer,
                 q.question_date, "", q.sessions, ())
    builder = UserLogMemoryBuilder(FTS5Retriever(), overflow_policy=policy)
    memory = builder.build(q)
    assert memory.notes["overflow"] == "true"
    assert memory.n_bytes <= 180_000
    kept = int(memory.notes["sessions_kept"])
    assert 0 < kept < n
    assert f"{kept} of {n} sessions are shown whole" in memory.text
    headings = re.findall(r"^### Session (s\d{4})", memory.text, re.M)
    assert headings == sorted(headings) and len(headings) == kept
    assert f"s{n - 1:04d}" in headings  # the newest session is always kept
    tomato_kept = "s0007" in headings
    assert tomato_kept == (policy == "retrieved_and_newest")


def test_unknown_overflow_policy_is_refused():
    with pytest.raises(LmeError, match="overflow_policy"):
        UserLogMemoryBuilder(FixedOrder(), overflow_policy="oldest")


def test_answered_user_turn_is_the_closest_earlier_user_message():
    q = make_question([[("assistant", "hi"), ("user", "a"), ("assistant", "b"), ("assistant", "c")]], [datetime(2023, 1, 1)])
    session = q.sessions[0]
    assert answered_user_turn(session, 0) is None
    assert answered_user_turn(session, 3) == "s0000:1"


@needs(MINI)
def test_on_the_real_mini_set_every_user_message_appears_verbatim_within_budget():
    from lme.data.load import load_questions

    builder = UserLogMemoryBuilder(FTS5Retriever())
    for question in load_questions(MINI):
        memory = builder.build(question)
        assert memory.n_bytes <= 180_000
        assert memory.notes["overflow"] == "false"
        for session in question.sessions:
            for turn in session.turns:
                if turn.role == "user":
                    assert f"[{turn.turn_id}] {turn.content}" in memory.text
            assert session.original_id not in memory.text
        assert int(memory.notes["replies"]) > 0
        assert int(memory.notes["reply_bytes"]) <= 96_000


def test_replies_come_from_the_whole_merge_of_two_top_100_lists_user_turns_dropped_after():
    """As the study: both retrievers' top-100 lists merged by RRF (up to 200 turns), no cut at 100 before
    user turns are dropped; here the merge's first 100 turns hold only 50 replies, and the rest come after."""
    from lme.retrieval.fusion import FusedRetriever

    turns = [("user" if j % 2 == 0 else "assistant", f"message {j} " + "x" * 40) for j in range(300)]
    q = make_question([turns], [datetime(2023, 5, 1, 9, 0)])
    ids = [t.turn_id for t in q.turns()]
    first, second = FixedOrder(ids[:100]), FixedOrder(ids[100:200])  # disjoint top-100 lists: 200 turns merged
    fused = FusedRetriever({"a": first, "b": second})
    memory = UserLogMemoryBuilder(fused).build(q)  # the default top_k: 200
    replies = [turn_id for turn_id in memory.turn_ids if int(turn_id.split(":")[1]) % 2 == 1]
    assert len(replies) == 100 and memory.notes["replies_ran_out"] == "true"
    cut = UserLogMemoryBuilder(fused, top_k=100).build(q)  # the old cut: half the replies
    assert len([t for t in cut.turn_ids if int(t.split(":")[1]) % 2 == 1]) == 50
