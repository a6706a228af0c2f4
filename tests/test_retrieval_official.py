"""LongMemEval's own retrieval measures (lme.retrieval.official) pinned to values computed by hand from the
official definitions, on a constructed history where an evidence session's other turn ranks first."""

from __future__ import annotations

import math
from datetime import datetime

import pytest

from lme.data.load import load_questions
from lme.data.records import Question, Session, Turn, session_id_for, turn_id_for
from lme.data.sample import SAMPLE_PATH
from lme.retrieval.metrics import score_question
from lme.retrieval.official import (
    official_corpus,
    official_scores,
    official_summary,
    officially_scored,
    session_depth,
)

DAY = datetime(2023, 5, 1)


def _session(index: int, original: str, turns: list[tuple[str, bool]]) -> Session:
    return Session(
        session_id=session_id_for(index), date=DAY, date_text="2023/05/01 (Mon) 10:00",
        turns=tuple(Turn(turn_id_for(index, i), role, f"{role} {index}.{i}", has_answer=evidence)
                    for i, (role, evidence) in enumerate(turns)),
        original_id=original, is_evidence="answer" in original)


def _question(question_id: str = "q1", sessions: tuple[Session, ...] | None = None) -> Question:
    sessions = sessions or (
        _session(0, "answer_aaa", [("user", False), ("assistant", False), ("user", True), ("assistant", False)]),
        _session(1, "sharegpt_bbb", [("user", False), ("assistant", False), ("user", False)]),
        _session(2, "answer_ccc", [("user", True)]),
    )
    return Question(question_id, "multi-session", "q?", "a", DAY, "2023/05/02 (Tue) 10:00", sessions,
                    tuple(s.original_id for s in sessions if s.is_evidence))


# s0000:0 is the evidence session's turn without the answer; it ranks first
RANKING = ["s0000:0", "s0000:1", "s0001:0", "s0000:2", "s0002:0", "s0001:2"]  # s0000:1 is the assistant's: skipped


def test_the_corpus_is_named_as_the_official_script_names_it():
    corpus = official_corpus(_question())
    assert corpus.turn_ids == ("s0000:0", "s0000:2", "s0001:0", "s0001:2", "s0002:0")
    assert corpus.names == ("noans_aaa_1", "answer_aaa_3", "sharegpt_bbb_1", "sharegpt_bbb_3", "answer_ccc_1")
    assert corpus.targets == {"answer_aaa_3", "answer_ccc_1"}


def test_hand_computed_turn_and_session_values():
    values = official_scores(_question(), RANKING, ks=(1, 2, 3, 5))
    third = 1 / math.log2(3)  # the gain at rank 3
    # turn level: gains in ranked order 0, 0, 1, 1, 0; the ideal 1, 1, 0, ...; DCG = g1 + sum_{i>=2} g_i / log2(i)
    assert values["turn.recall_any@1"] == 0.0 and values["turn.ndcg_any@1"] == 0.0
    assert values["turn.recall_any@3"] == 1.0 and values["turn.recall_all@3"] == 0.0
    assert values["turn.ndcg_any@3"] == pytest.approx(third / 2)
    assert values["turn.recall_all@5"] == 1.0
    assert values["turn.ndcg_any@5"] == pytest.approx((third + 0.5) / 2)
    # session level: the evidence session's first-ranked turn is `noans_aaa`, not a hit (lme's variant says 1)
    assert values["session.recall_any@1"] == 0.0 and values["session.recall_any@2"] == 0.0
    lme = score_question(_question(), RANKING, ks=(1,), official_k=(1,)).values
    assert lme["session.recall_any_all_turns@1"] == 1.0 and lme["session.recall_any@1"] == 0.0
    assert values["session.recall_any@3"] == 1.0 and values["session.recall_all@3"] == 0.0
    assert values["session.ndcg_any@3"] == pytest.approx(third / 2)
    # @5 needs 5 distinct sessions: the 5 turns name only 4, so it reads one past the end, and finds both
    assert values["session.recall_all@5"] == 1.0
    assert values["session.ndcg_any@5"] == pytest.approx((third + 0.5) / 2)


def test_session_depth_reads_on_until_k_distinct_sessions():
    sessions = ["a", "a", "b", "a", "c"]
    assert session_depth([0, 1, 2, 3, 4], sessions, 1) == 1
    assert session_depth([0, 1, 2, 3, 4], sessions, 2) == 3
    assert session_depth([0, 1, 2, 3, 4], sessions, 3) == 5
    assert session_depth([0, 1, 2, 3, 4], sessions, 4) == 6  # one past the end, as the official loop stops


def test_unranked_user_turns_follow_in_history_order():
    partial = official_scores(_question(), ["s0002:0"], ks=(2,))
    full = official_scores(_question(), ["s0002:0", "s0000:0", "s0000:2", "s0001:0", "s0001:2"], ks=(2,))
    assert partial == full
    assert partial["turn.recall_any@2"] == 1.0 and partial["turn.recall_all@2"] == 0.0


def test_the_average_leaves_out_abstention_and_questions_without_an_evidence_user_turn():
    plain = _question("q1")
    abstention = _question("q2_abs")
    no_target = _question("q3", (_session(0, "answer_x", [("user", False), ("assistant", True)]),))
    questions = [plain, abstention, no_target]
    assert [officially_scored(q) for q in questions] == [True, False, False]
    per_question = [official_scores(q, RANKING, ks=(3,)) for q in questions]
    summary = official_summary(questions, per_question)
    assert (summary.n_scored, summary.ignored_abstention, summary.ignored_no_target) == (1, 1, 1)
    assert summary.values == per_question[0]


def test_on_the_sample_an_oracle_ranking_scores_one_at_the_number_of_targets():
    kept = [question for question in load_questions(SAMPLE_PATH) if officially_scored(question)]
    assert len(kept) >= 5
    for question in kept:
        corpus = official_corpus(question)
        evidence = [t for t, name in zip(corpus.turn_ids, corpus.names) if name in corpus.targets]
        values = official_scores(question, evidence, ks=(len(evidence),))
        k = len(evidence)
        assert values[f"turn.recall_all@{k}"] == 1.0
        assert values[f"turn.ndcg_any@{k}"] == pytest.approx(1.0)
