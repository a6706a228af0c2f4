"""Retrieval measures without any model call: recall@k and NDCG@k of evidence turns and sessions.

Definitions (E is a question's set of evidence items, R its ranked list, R_k
the first k items of R, each item counted once at its first position):

- recall@k     = |E ∩ R_k| / |E|   (the fraction of the evidence in the top k)
- recall_any@k = 1 if |E ∩ R_k| >= 1 else 0
- recall_all@k = 1 if E ⊆ R_k else 0
- NDCG@k       = DCG@k / IDCG@k with binary gains, DCG@k = Σ_{i=1..k} rel_i / log2(i + 1)
                 (rel_i = 1 when the i-th item is evidence) and IDCG@k the DCG of a ranking
                 with all the evidence first: Σ_{i=1..min(k, |E|)} 1 / log2(i + 1).

Each is computed per question and averaged (unweighted) over questions.

Levels:
- turn: E = the turns marked `has_answer`; R = the retriever's turn ranking.
- session: E = the sessions whose original id is in `answer_session_ids`
  (`Session.is_evidence`); R = the sessions in the order of their best-ranked
  turn (a session's rank is the rank of its best turn; sessions without a
  turn in the turn ranking are not ranked).

Abstention questions are left out, and at each level so are questions with no
evidence at that level (both are counted and reported). With
`user_turns_only` the official LongMemEval convention is followed instead:
only user turns are ranked (see `user_turns_view`), turn evidence is the
user turns marked `has_answer`, session evidence the evidence sessions that
hold such a turn.

Metric names are `<level>.<measure>@<k>` (`turn.recall@10`); MLflow does not
accept `@` in a metric name, so `mlflow_name` writes `turn.recall_at_10`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lme.data.records import QUESTION_TYPES, Question

DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 50, 100)
LEVELS: tuple[str, ...] = ("turn", "session")
MEASURES: tuple[str, ...] = ("recall", "recall_any", "recall_all", "ndcg")


def _unique(items: Iterable[str]) -> list[str]:
    """Items in order, each at its first position only."""
    return list(dict.fromkeys(items))


def _hits(ranked: Sequence[str], relevant: frozenset[str] | set[str], k: int) -> int:
    return sum(1 for item in _unique(ranked)[:k] if item in relevant)


def recall_at_k(ranked: Sequence[str], relevant: frozenset[str] | set[str], k: int) -> float:
    """|relevant ∩ top k| / |relevant|; raises ValueError when nothing is relevant."""
    if not relevant:
        raise ValueError("recall is undefined without relevant items.")
    return _hits(ranked, relevant, k) / len(relevant)


def recall_any_at_k(ranked: Sequence[str], relevant: frozenset[str] | set[str], k: int) -> float:
    """1.0 when at least one relevant item is in the top k, else 0.0."""
    if not relevant:
        raise ValueError("recall_any is undefined without relevant items.")
    return 1.0 if _hits(ranked, relevant, k) else 0.0


def recall_all_at_k(ranked: Sequence[str], relevant: frozenset[str] | set[str], k: int) -> float:
    """1.0 when every relevant item is in the top k, else 0.0."""
    if not relevant:
        raise ValueError("recall_all is undefined without relevant items.")
    return 1.0 if _hits(ranked, relevant, k) == len(relevant) else 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: frozenset[str] | set[str], k: int) -> float:
    """NDCG@k with binary gains and discounts 1 / log2(rank + 1)."""
    if not relevant:
        raise ValueError("NDCG is undefined without relevant items.")
    dcg = math.fsum(1.0 / math.log2(rank + 1) for rank, item in enumerate(_unique(ranked)[:k], 1) if item in relevant)
    ideal = math.fsum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, len(relevant)) + 1))
    return dcg / ideal


_MEASURE_FUNCTIONS = {
    "recall": recall_at_k,
    "recall_any": recall_any_at_k,
    "recall_all": recall_all_at_k,
    "ndcg": ndcg_at_k,
}


def metric_name(level: str, measure: str, k: int) -> str:
    return f"{level}.{measure}@{k}"


def mlflow_name(name: str) -> str:
    """MLflow metric names may not hold `@`: `turn.recall@10` -> `turn.recall_at_10`."""
    return name.replace("@", "_at_")


def session_of_turn(turn_id: str) -> str:
    """The neutral session id of a neutral turn id (`s0009:3` -> `s0009`)."""
    return turn_id.split(":", 1)[0]


def sessions_in_rank_order(turn_ids: Sequence[str]) -> tuple[str, ...]:
    """Sessions in the order of their best-ranked turn."""
    return tuple(_unique(session_of_turn(turn_id) for turn_id in turn_ids))


def user_turns_view(question: Question) -> Question:
    """The question with only its user turns (ids unchanged): what the official scripts index."""
    sessions = tuple(
        replace(session, turns=tuple(turn for turn in session.turns if turn.role == "user"))
        for session in question.sessions
    )
    return replace(question, sessions=sessions)


def turn_evidence(question: Question, user_turns_only: bool = False) -> frozenset[str]:
    """Ids of the turns marked `has_answer` (user turns only when asked)."""
    return frozenset(
        turn.turn_id
        for turn in question.turns()
        if turn.has_answer and (turn.role == "user" or not user_turns_only)
    )


def session_evidence(question: Question, user_turns_only: bool = False) -> frozenset[str]:
    """Ids of the sessions listed in `answer_session_ids` (holding a `has_answer` user turn, when asked)."""
    return frozenset(
        session.session_id
        for session in question.sessions
        if session.is_evidence
        and (not user_turns_only or any(turn.has_answer and turn.role == "user" for turn in session.turns))
    )


def level_scores(ranked: Sequence[str], relevant: frozenset[str], level: str, ks: Sequence[int]) -> dict[str, float]:
    """Every measure at every k for one level of one question (relevant must not be empty)."""
    return {
        metric_name(level, measure, k): function(ranked, relevant, k)
        for measure, function in _MEASURE_FUNCTIONS.items()
        for k in ks
    }


def _first_hit(ranked: Sequence[str], relevant: frozenset[str]) -> int | None:
    return next((rank for rank, item in enumerate(_unique(ranked), 1) if item in relevant), None)


@dataclass(frozen=True, slots=True)
class QuestionScores:
    """One question's retrieval measures (empty `values` at a level without evidence)."""

    question_id: str
    question_type: str
    abstention: bool
    turn_evidence: int
    session_evidence: int
    first_turn_hit: int | None  # rank of the best-ranked evidence turn (None: none ranked)
    first_session_hit: int | None
    values: Mapping[str, float] = field(default_factory=dict)

    def scored(self, level: str) -> bool:
        if self.abstention:
            return False
        return (self.turn_evidence if level == "turn" else self.session_evidence) > 0


def score_question(
    question: Question, turn_ids: Sequence[str], ks: Sequence[int] = DEFAULT_KS, user_turns_only: bool = False
) -> QuestionScores:
    """The measures of one question's turn ranking (nothing is scored for an abstention question)."""
    turns = turn_evidence(question, user_turns_only)
    sessions = session_evidence(question, user_turns_only)
    ranked_sessions = sessions_in_rank_order(turn_ids)
    values: dict[str, float] = {}
    if not question.is_abstention:
        if turns:
            values.update(level_scores(turn_ids, turns, "turn", ks))
        if sessions:
            values.update(level_scores(ranked_sessions, sessions, "session", ks))
    return QuestionScores(
        question_id=question.question_id,
        question_type=question.question_type,
        abstention=question.is_abstention,
        turn_evidence=len(turns),
        session_evidence=len(sessions),
        first_turn_hit=_first_hit(turn_ids, turns),
        first_session_hit=_first_hit(ranked_sessions, sessions),
        values=values,
    )


@dataclass(frozen=True, slots=True)
class GroupScores:
    """Mean measures over a group of questions (all of them, or one type)."""

    name: str
    n_questions: int  # non-abstention questions in the group
    n_scored: Mapping[str, int]  # level -> questions with evidence at that level
    values: Mapping[str, float]  # metric name -> mean (absent for a level nobody was scored at)


@dataclass(frozen=True, slots=True)
class RetrievalReport:
    ks: tuple[int, ...]
    n_questions: int  # every question ranked, abstention included
    n_abstention: int
    n_no_evidence: Mapping[str, int]  # level -> non-abstention questions without evidence there (left out)
    overall: GroupScores
    by_type: tuple[GroupScores, ...]

    def groups(self) -> tuple[GroupScores, ...]:
        return (self.overall, *self.by_type)

    def as_metrics(self) -> dict[str, float]:
        """MLflow metrics: overall `turn.recall_at_10`, per type `turn.recall_at_10.<type>`, and the counts."""
        metrics: dict[str, float] = {
            "n_questions": float(self.n_questions),
            "n_abstention": float(self.n_abstention),
        }
        for level in LEVELS:
            metrics[f"{level}.n_no_evidence"] = float(self.n_no_evidence[level])
        for group in self.groups():
            suffix = "" if group is self.overall else f".{group.name}"
            for level in LEVELS:
                metrics[f"{level}.n_scored{suffix}"] = float(group.n_scored[level])
            for name, value in group.values.items():
                metrics[mlflow_name(name) + suffix] = value
        return metrics

    def as_dict(self) -> dict[str, object]:
        def group_dict(group: GroupScores) -> dict[str, object]:
            return {"n_questions": group.n_questions, "n_scored": dict(group.n_scored), "metrics": dict(group.values)}

        return {
            "ks": list(self.ks),
            "n_questions": self.n_questions,
            "n_abstention": self.n_abstention,
            "n_no_evidence": dict(self.n_no_evidence),
            "overall": group_dict(self.overall),
            "by_type": {group.name: group_dict(group) for group in self.by_type},
        }


def _group(name: str, scores: Sequence[QuestionScores]) -> GroupScores:
    answerable = [score for score in scores if not score.abstention]
    n_scored = {level: sum(1 for score in answerable if score.scored(level)) for level in LEVELS}
    names = _unique(name for score in answerable for name in score.values)
    values = {}
    for metric in names:
        level = metric.split(".", 1)[0]
        values[metric] = math.fsum(s.values[metric] for s in answerable if s.scored(level)) / n_scored[level]
    return GroupScores(name=name, n_questions=len(answerable), n_scored=n_scored, values=values)


def summarise(scores: Sequence[QuestionScores], ks: Sequence[int] = DEFAULT_KS) -> RetrievalReport:
    """Means overall and per type (types in LongMemEval's order, those with an answerable question)."""
    answerable = [score for score in scores if not score.abstention]
    known = [name for name in QUESTION_TYPES if any(s.question_type == name for s in answerable)]
    others = sorted({s.question_type for s in answerable} - set(known))
    return RetrievalReport(
        ks=tuple(ks),
        n_questions=len(scores),
        n_abstention=len(scores) - len(answerable),
        n_no_evidence={level: sum(1 for s in answerable if not s.scored(level)) for level in LEVELS},
        overall=_group("overall", scores),
        by_type=tuple(_group(name, [s for s in scores if s.question_type == name]) for name in known + others),
    )
