"""Retrieval measures against hand-built histories whose evidence is known; every value worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lme.data.load import parse_question
from lme.data.records import Question
from lme.retrieval.metrics import (
    ndcg_at_k,
    recall_all_at_k,
    recall_any_at_k,
    recall_at_k,
    score_question,
    session_evidence,
    sessions_in_rank_order,
    summarise,
    turn_evidence,
    user_turns_view,
)

L3 = 1 / math.log2(3)  # the discount at rank 2: 0.6309...
KS = (1, 2, 5)


def test_recall_variants_and_ndcg_on_a_plain_list() -> None:
    ranked = ["a", "b", "c", "d", "e"]
    relevant = frozenset({"b", "e", "z"})  # z is never ranked
    assert [recall_at_k(ranked, relevant, k) for k in (1, 2, 5, 100)] == [0.0, 1 / 3, 2 / 3, 2 / 3]
    assert [recall_any_at_k(ranked, relevant, k) for k in (1, 2, 5)] == [0.0, 1.0, 1.0]
    assert [recall_all_at_k(ranked, relevant, k) for k in (1, 2, 5)] == [0.0, 0.0, 0.0]
    # DCG@5 = 1/log2(3) + 1/log2(6); IDCG@5 = 1 + 1/log2(3) + 1/log2(4)
    assert ndcg_at_k(ranked, relevant, 5) == pytest.approx((L3 + 1 / math.log2(6)) / (1 + L3 + 0.5))
    assert ndcg_at_k(ranked, relevant, 5) == pytest.approx(0.477623, abs=1e-6)
    # at k = 2 the ideal holds two evidence items: (1/log2 3) / (1 + 1/log2 3)
    assert ndcg_at_k(ranked, relevant, 2) == pytest.approx(L3 / (1 + L3))
    assert ndcg_at_k(["b", "e", "z"], relevant, 3) == pytest.approx(1.0)
    assert recall_all_at_k(["z", "e", "b"], relevant, 3) == 1.0


def test_an_item_repeated_in_the_ranking_counts_once_at_its_first_position() -> None:
    relevant = frozenset({"a", "b"})
    assert recall_at_k(["a", "a", "b"], relevant, 2) == 1.0
    assert ndcg_at_k(["a", "a", "b"], relevant, 2) == pytest.approx(1.0)


def test_measures_refuse_an_empty_evidence_set() -> None:
    for function in (recall_at_k, recall_any_at_k, recall_all_at_k, ndcg_at_k):
        with pytest.raises(ValueError):
            function(["a"], frozenset(), 1)


def make_question(question_id: str, question_type: str, sessions: list[dict], answer_ids: list[str]) -> Question:
    """Sessions as {"id", "date", "turns": [(role, content, has_answer)]}, in the order given (not date order)."""
    record = {
        "question_id": question_id,
        "question_type": question_type,
        "question": "What colour is my bicycle?",
        "answer": "blue",
        "question_date": "2023/07/01 (Sat) 10:00",
        "haystack_dates": [session["date"] for session in sessions],
        "haystack_session_ids": [session["id"] for session in sessions],
        "haystack_sessions": [
            [
                {"role": role, "content": text, **({"has_answer": True} if flag else {})}
                for role, text, flag in s["turns"]
            ]
            for s in sessions
        ],
        "answer_session_ids": answer_ids,
    }
    return parse_question(record, Path("hand.json"), 0)


# Listed out of date order on purpose: neutral ids follow the dates.
#   s0000 = answer_a (user turn is evidence), s0001 = noise_1,
#   s0002 = answer_b (assistant turn is evidence), s0003 = noise_2
HISTORY = [
    {"id": "answer_b", "date": "2023/06/03 (Sat) 09:00",
     "turns": [("user", "Which bike lock?", False), ("assistant", "Your blue bicycle needs a D-lock.", True)]},
    {"id": "noise_1", "date": "2023/06/02 (Fri) 09:00",
     "turns": [("user", "Recipe for soup?", False), ("assistant", "Try tomato soup.", False)]},
    {"id": "answer_a", "date": "2023/06/01 (Thu) 09:00",
     "turns": [("user", "I bought a blue bicycle.", True), ("assistant", "Nice!", False)]},
    {"id": "noise_2", "date": "2023/06/04 (Sun) 09:00",
     "turns": [("user", "Any film tips?", False), ("assistant", "Watch a classic.", False)]},
]
RANKED = ["s0001:0", "s0002:1", "s0001:1", "s0000:1", "s0000:0", "s0003:0"]


def test_evidence_follows_the_sessions_after_date_sorting() -> None:
    question = make_question("q1", "multi-session", HISTORY, ["answer_a", "answer_b"])
    assert [s.original_id for s in question.sessions] == ["answer_a", "noise_1", "answer_b", "noise_2"]
    assert turn_evidence(question) == {"s0000:0", "s0002:1"}
    assert session_evidence(question) == {"s0000", "s0002"}
    assert sessions_in_rank_order(RANKED) == ("s0001", "s0002", "s0000", "s0003")


def test_turn_and_session_scores_of_a_known_ranking() -> None:
    question = make_question("q1", "multi-session", HISTORY, ["answer_a", "answer_b"])
    scores = score_question(question, RANKED, KS)
    v = scores.values
    # turns: evidence at ranks 2 (s0002:1) and 5 (s0000:0)
    assert [v[f"turn.recall_frac_all_roles@{k}"] for k in KS] == [0.0, 0.5, 1.0]
    assert [v[f"turn.recall_any_all_roles@{k}"] for k in KS] == [0.0, 1.0, 1.0]
    assert [v[f"turn.recall_all_all_roles@{k}"] for k in KS] == [0.0, 0.0, 1.0]
    assert v["turn.ndcg_all_roles@1"] == 0.0
    assert v["turn.ndcg_all_roles@2"] == pytest.approx(L3 / (1 + L3))  # 0.3869
    assert v["turn.ndcg_all_roles@5"] == pytest.approx((L3 + 1 / math.log2(6)) / (1 + L3))  # 0.6241
    assert v["turn.ndcg_all_roles@5"] == pytest.approx(0.624050, abs=1e-6)
    # sessions in order s0001, s0002, s0000 (its best turn is 4th), s0003: evidence at session ranks 2 and 3
    assert [v[f"session.recall_frac_all_turns@{k}"] for k in KS] == [0.0, 0.5, 1.0]
    assert v["session.ndcg_all_turns@5"] == pytest.approx((L3 + 0.5) / (1 + L3))  # 0.6934
    assert (scores.turn_evidence, scores.session_evidence) == (2, 2)
    assert (scores.first_turn_hit, scores.first_session_hit) == (2, 2)


def test_a_user_turn_ranking_keeps_every_definition() -> None:
    """--user-turns-only restricts what is ranked, nothing else: the assistant's evidence turn (s0002:1) stays
    evidence for the _all_roles variants and is never found."""
    question = make_question("q1", "multi-session", HISTORY, ["answer_a", "answer_b"])
    view = user_turns_view(question)
    assert [turn.turn_id for turn in view.turns()] == ["s0000:0", "s0001:0", "s0002:0", "s0003:0"]
    assert question.turns()[1].role == "assistant"  # the original is untouched
    ranked = ["s0002:0", "s0000:0", "s0001:0", "s0003:0"]
    v = score_question(question, ranked, KS).values
    assert [v[f"turn.recall_frac_all_roles@{k}"] for k in KS] == [0.0, 0.5, 0.5]
    assert v["turn.ndcg_all_roles@2"] == pytest.approx(L3 / (1 + L3))  # found at rank 2; the ideal holds two
    # any turn of an evidence session is a hit: s0002 (answer_b) at 1, s0000 (answer_a) at 2
    assert [v[f"session.recall_frac_all_turns@{k}"] for k in KS] == [0.5, 1.0, 1.0]
    assert v["session.recall_any_all_turns@1"] == 1.0
    # official: the one target is answer_a's user turn, 2nd; answer_b's user turn is `noans_b_1`, no hit
    assert [v[f"turn.recall_any@{k}"] for k in KS] == [0.0, 1.0, 1.0]
    assert v["turn.ndcg_any@2"] == 1.0  # the official DCG leaves rank 2 undiscounted
    assert [v[f"session.recall_any@{k}"] for k in KS] == [0.0, 1.0, 1.0]


def test_an_evidence_session_whose_other_turns_rank_first() -> None:
    """Both names pinned by hand on one question: the evidence session's user turn without the answer and its
    assistant turn rank first, its evidence user turn only fourth (third among user turns)."""
    history = [
        {"id": "answer_x", "date": "2023/06/01 (Thu) 09:00",
         "turns": [("user", "I repaint my bicycle.", False), ("assistant", "Which colour?", False),
                   ("user", "Blue, it is blue now.", True)]},
        {"id": "noise_y", "date": "2023/06/02 (Fri) 09:00",
         "turns": [("user", "Soup recipe?", False), ("assistant", "Tomato.", False)]},
        {"id": "noise_z", "date": "2023/06/03 (Sat) 09:00",
         "turns": [("user", "Film tips?", False), ("assistant", "A classic.", False)]},
    ]
    question = make_question("q9", "single-session-user", history, ["answer_x"])
    ranked = ["s0000:0", "s0000:1", "s0001:0", "s0000:2", "s0002:0", "s0001:1", "s0002:1"]
    v = score_question(question, ranked, (1, 3, 5), official_k=(1, 2, 3)).values
    # lme's session variant: s0000 holds the best-ranked turn, so the evidence session is first
    assert v["session.recall_any_all_turns@1"] == 1.0 and v["session.ndcg_all_turns@1"] == 1.0
    # official session level: user turns in order noans_x_1, noise_y_1, answer_x_3, noise_z_1; only the
    # has_answer turn names the session `answer_x`, so @1 and @2 find nothing and @3 (depth 3) finds it
    assert v["session.recall_any@1"] == 0.0 and v["session.ndcg_any@1"] == 0.0
    assert v["session.recall_any@2"] == 0.0 and v["session.recall_all@2"] == 0.0
    assert v["session.recall_any@3"] == 1.0 and v["session.recall_all@3"] == 1.0
    assert v["session.ndcg_any@3"] == pytest.approx(L3)  # one gain at rank 3: 1/log2(3); the ideal 1
    # turn level: the evidence turn is 4th of all turns (lme) and 3rd of the user turns (official)
    assert [v[f"turn.recall_any_all_roles@{k}"] for k in (1, 3, 5)] == [0.0, 0.0, 1.0]
    assert v["turn.ndcg_all_roles@5"] == pytest.approx(1 / math.log2(5))  # textbook discount at rank 4
    assert [v[f"turn.recall_any@{k}"] for k in (1, 2, 3)] == [0.0, 0.0, 1.0]
    assert v["turn.ndcg_any@3"] == pytest.approx(L3)  # official discount at rank 3: 1/log2(3)

    report = summarise([score_question(question, ranked, (1,), official_k=(1,))], (1,), official_k=(1,))
    assert report.overall.values["session.recall_any@1"] == 0.0
    assert report.overall.values["session.recall_any_all_turns@1"] == 1.0
    assert report.overall.n_scored == {"official": 1, "turn_all_roles": 1, "session_all_turns": 1}


def test_abstention_and_evidence_free_questions_are_left_out_and_counted() -> None:
    answerable = make_question("q1", "multi-session", HISTORY, ["answer_a", "answer_b"])
    # evidence sessions listed, but no turn marked has_answer: scored at session level only
    no_turns = [{**s, "turns": [(role, text, False) for role, text, _ in s["turns"]]} for s in HISTORY]
    session_only = make_question("q2", "knowledge-update", no_turns, ["answer_a"])
    abstention = make_question("q3_abs", "multi-session", HISTORY, ["answer_a"])
    rows = [score_question(q, RANKED, KS) for q in (answerable, session_only, abstention)]
    assert rows[2].abstention and rows[2].values == {}
    assert not any(name.startswith("turn.") for name in rows[1].values)
    assert rows[1].values["session.recall_frac_all_turns@5"] == 1.0
    assert rows[1].values["session.ndcg_all_turns@5"] == pytest.approx(0.5)
    assert not rows[1].officially_scored and "session.recall_any@5" not in rows[1].values

    report = summarise(rows, KS)
    assert (report.n_questions, report.n_abstention) == (3, 1)
    # the official average keeps q1 only (q2 has no user turn marked has_answer)
    assert report.n_no_evidence == {"official": 1, "turn_all_roles": 1, "session_all_turns": 0}
    assert report.overall.n_questions == 2
    assert report.overall.n_scored == {"official": 1, "turn_all_roles": 1, "session_all_turns": 2}
    # turn level: only q1; session level: the mean of q1 and q2
    assert report.overall.values["turn.recall_frac_all_roles@2"] == 0.5
    assert report.overall.values["session.recall_frac_all_turns@2"] == pytest.approx((0.5 + 0.0) / 2)
    assert report.overall.values["session.ndcg_all_turns@5"] == pytest.approx(((L3 + 0.5) / (1 + L3) + 0.5) / 2)
    # types in LongMemEval's order; the abstention question's type has no answerable question of its own here
    assert [group.name for group in report.by_type] == ["multi-session", "knowledge-update"]
    knowledge = report.by_type[1]
    assert knowledge.n_scored == {"official": 0, "turn_all_roles": 0, "session_all_turns": 1}
    assert "turn.recall_frac_all_roles@2" not in knowledge.values and "turn.recall_any@5" not in knowledge.values

    metrics = report.as_metrics()
    assert metrics["turn.recall_frac_all_roles_at_2"] == 0.5
    assert metrics["session.recall_frac_all_turns_at_5.knowledge-update"] == 1.0
    assert metrics["turn_all_roles.n_no_evidence"] == 1.0 and metrics["n_abstention"] == 1.0
    assert metrics["session_all_turns.n_scored.multi-session"] == 1.0
    assert metrics["official.n_scored"] == 1.0 and metrics["official.n_no_evidence"] == 1.0
    assert metrics["session.recall_any_at_5"] == report.overall.values["session.recall_any@5"]
    assert not any("@" in name for name in metrics)
    assert "turn.recall_frac_all_roles_at_2.knowledge-update" not in metrics
    as_dict = report.as_dict()
    assert as_dict["ks"] == [1, 2, 5] and as_dict["official_ks"] == [1, 2, 3, 5, 10, 30, 50]
    assert as_dict["by_type"]["multi-session"]["metrics"]["turn.recall_frac_all_roles@5"] == 1.0


def test_a_type_with_only_abstention_questions_gets_no_row() -> None:
    rows = [
        score_question(make_question("q1", "multi-session", HISTORY, ["answer_a"]), RANKED, KS),
        score_question(make_question("q2_abs", "temporal-reasoning", HISTORY, ["answer_a"]), RANKED, KS),
    ]
    report = summarise(rows, KS)
    assert [group.name for group in report.by_type] == ["multi-session"]
    assert report.overall.values == report.by_type[0].values
