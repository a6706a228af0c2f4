"""Retrieval measures without any model call: LongMemEval's official measures under their own names, and lme's
variants under names that say how they differ.

Official (`lme.retrieval.official`, computed as LongMemEval's `src/retrieval/eval_utils.py` computes them;
averaged over the questions its code keeps: not abstention, with a user turn marked `has_answer`):

- `turn.recall_any@k`, `turn.recall_all@k`, `turn.ndcg_any@k`: over the user turns, targets the evidence
  user turns;
- `session.recall_any@k`, `session.recall_all@k`, `session.ndcg_any@k`: an evidence session is found only
  through one of its evidence (`has_answer`) user turns; read down to k distinct sessions.

lme's variants (E is a question's set of evidence items, R its ranked list, R_k its first k items, each item
counted once at its first position; textbook NDCG: DCG@k = Σ_{i=1..k} rel_i / log2(i + 1) over IDCG@k =
Σ_{i=1..min(k, |E|)} 1 / log2(i + 1)):

- `turn.<m>_all_roles@k`: E = every turn marked `has_answer`, the assistant's too; R = the turn ranking;
  averaged over the non-abstention questions with such a turn;
- `session.<m>_all_turns@k`: E = the sessions in `answer_session_ids`; R = the sessions in the order of
  their best-ranked turn, so ANY turn of an evidence session is a hit; averaged over the non-abstention
  questions with such a session;

with <m> one of `recall_frac` (|E ∩ R_k| / |E|), `recall_any` (1 if E ∩ R_k is not empty), `recall_all`
(1 if E ⊆ R_k), `ndcg` (textbook NDCG@k, binary gains).

LoCoMo questions (`Question.benchmark == "locomo"`) get no official measure: LongMemEval's definitions keep only
the user's evidence turns, while on LoCoMo both speakers' turns are evidence. They get lme's variants as above and
LoCoMo's own retrieval recall (its `task_eval/evaluation.py`, `recall_acc`), E being the turns marked `has_answer`:

- `locomo.turn.recall@k`: |E ∩ R_k| / |E| over the turn ranking;
- `locomo.session.recall@k`: the fraction of E whose session is among the first k sessions (sessions in the
  order of their best-ranked turn; an evidence turn counts for its session, so two in one session count twice);

averaged as LoCoMo's code averages them: over every question, adversarial (abstention) ones included, a question
without evidence scoring 1 (scope `locomo`). A report is of one benchmark's definitions (`definitions`).

Abstention questions and, for each scope (`official`, `turn_all_roles`, `session_all_turns`; on LoCoMo
`turn_all_roles`, `session_all_turns`, `locomo`), the questions that scope leaves out are counted and reported. `user_turns_view` restricts what is ranked (`lme retrieval
--user-turns-only`); it changes no definition. MLflow does not accept `@` in a metric name, so `mlflow_name`
writes `turn.recall_any_at_10`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lme.data.records import LOCOMO_TYPES, QUESTION_TYPES, Question
from lme.retrieval.official import OFFICIAL_KS, official_scores, officially_scored

DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 50, 100)
LEVELS: tuple[str, ...] = ("turn", "session")
MEASURES: tuple[str, ...] = ("recall_frac", "recall_any", "recall_all", "ndcg")  # lme's variants
# What lme's variants at each level add to a measure's name: how they differ from the official definition.
VARIANT_SUFFIX: Mapping[str, str] = {"turn": "all_roles", "session": "all_turns"}
# Who is averaged: the official scope (both levels), and lme's variants at each level.
SCOPES: tuple[str, ...] = ("official", "turn_all_roles", "session_all_turns")
# Which benchmark's definitions a report uses: LongMemEval's (the official measures) unless every question is
# LoCoMo's (no official measure; LoCoMo's own recall, scope `locomo`).
LONGMEMEVAL = "longmemeval"
LOCOMO = "locomo"
LOCOMO_SCOPES: tuple[str, ...] = ("turn_all_roles", "session_all_turns", LOCOMO)


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
    "recall_frac": recall_at_k,
    "recall_any": recall_any_at_k,
    "recall_all": recall_all_at_k,
    "ndcg": ndcg_at_k,
}


def metric_name(level: str, measure: str, k: int) -> str:
    """A measure's name as reported: `turn.recall_any@10` (official), `turn.recall_any_all_roles@10` (lme's)."""
    return f"{level}.{measure}@{k}"


def variant_name(level: str, measure: str, k: int) -> str:
    """The name of lme's variant of `measure` at `level`: `session.recall_any_all_turns@1`."""
    return metric_name(level, f"{measure}_{VARIANT_SUFFIX[level]}", k)


def locomo_name(level: str, k: int) -> str:
    """The name of LoCoMo's own recall at `level`: `locomo.turn.recall@10`."""
    return f"{LOCOMO}.{level}.recall@{k}"


def scope_of(name: str) -> str:
    """Which questions a measure is averaged over: `official`, `turn_all_roles`, `session_all_turns` or
    `locomo`."""
    if name.startswith(LOCOMO + "."):
        return LOCOMO
    level, rest = name.split(".", 1)
    measure = rest.split("@", 1)[0]
    return f"{level}_{VARIANT_SUFFIX[level]}" if measure.endswith("_" + VARIANT_SUFFIX[level]) else "official"


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
    """The question with only its user turns (ids unchanged): what the official scripts index, and what
    `lme retrieval --user-turns-only` ranks (every measure keeps its definition)."""
    sessions = tuple(
        replace(session, turns=tuple(turn for turn in session.turns if turn.role == "user"))
        for session in question.sessions
    )
    return replace(question, sessions=sessions)


def turn_evidence(question: Question) -> frozenset[str]:
    """Ids of the turns marked `has_answer`, whoever speaks (lme's turn-level variants)."""
    return frozenset(turn.turn_id for turn in question.turns() if turn.has_answer)


def session_evidence(question: Question) -> frozenset[str]:
    """Ids of the sessions listed in `answer_session_ids` (lme's session-level variants)."""
    return frozenset(session.session_id for session in question.sessions if session.is_evidence)


def level_scores(ranked: Sequence[str], relevant: frozenset[str], level: str, ks: Sequence[int]) -> dict[str, float]:
    """lme's variant of every measure at every k for one level of one question (relevant must not be empty)."""
    return {
        variant_name(level, measure, k): function(ranked, relevant, k)
        for measure, function in _MEASURE_FUNCTIONS.items()
        for k in ks
    }


def locomo_scores(turn_ids: Sequence[str], evidence: frozenset[str], ks: Sequence[int]) -> dict[str, float]:
    """LoCoMo's `recall_acc` at both levels and every k for one question: the fraction of its evidence turns
    among the first k turns, and the fraction whose session is among the first k sessions; 1.0 for both when
    it has no evidence (LoCoMo's code appends 1 then)."""
    if not evidence:
        return {locomo_name(level, k): 1.0 for level in LEVELS for k in ks}
    turns = _unique(turn_ids)
    sessions = sessions_in_rank_order(turns)
    values: dict[str, float] = {}
    for level in LEVELS:
        for k in ks:
            if level == "turn":
                top = set(turns[:k])
                found = sum(1 for turn_id in evidence if turn_id in top)
            else:
                top = set(sessions[:k])
                found = sum(1 for turn_id in evidence if session_of_turn(turn_id) in top)
            values[locomo_name(level, k)] = found / len(evidence)
    return values


def official_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """The k of the official measures: those asked for and those the official script reports."""
    return tuple(sorted(set(ks) | set(OFFICIAL_KS)))


def _first_hit(ranked: Sequence[str], relevant: frozenset[str]) -> int | None:
    return next((rank for rank, item in enumerate(_unique(ranked), 1) if item in relevant), None)


@dataclass(frozen=True, slots=True)
class QuestionScores:
    """One question's retrieval measures: the official ones when the official average keeps the question, lme's
    variants at each level where it has evidence (nothing for an abstention question)."""

    question_id: str
    question_type: str
    abstention: bool
    turn_evidence: int  # turns marked has_answer, any role
    session_evidence: int  # sessions in answer_session_ids
    first_turn_hit: int | None  # rank of the best-ranked has_answer turn, any role (None: none ranked)
    first_session_hit: int | None  # session rank (by best turn) of the best-ranked evidence session
    values: Mapping[str, float] = field(default_factory=dict)
    officially_scored: bool = False  # kept by the official average
    benchmark: str = LONGMEMEVAL  # the question's benchmark (`Question.benchmark`)

    def scored(self, scope: str) -> bool:
        """Whether the question counts in `scope`'s average (`official`, `turn_all_roles`, `session_all_turns`,
        `locomo`: every LoCoMo question, as LoCoMo's code averages; the bare levels `turn` and `session` name
        lme's variants)."""
        if scope == LOCOMO:
            return self.benchmark == LOCOMO
        if self.abstention:
            return False
        if scope == "official":
            return self.officially_scored
        level = scope.split("_", 1)[0]
        return (self.turn_evidence if level == "turn" else self.session_evidence) > 0


def score_question(
    question: Question, turn_ids: Sequence[str], ks: Sequence[int] = DEFAULT_KS,
    official_k: Sequence[int] | None = None,
) -> QuestionScores:
    """The measures of one question's turn ranking: lme's variants at `ks`, the official ones at `official_k`
    (default: `ks` and the official script's k). The official ones read the ranking's user turns only. A LoCoMo
    question gets LoCoMo's own recall at `ks` in place of the official measures."""
    turns = turn_evidence(question)
    sessions = session_evidence(question)
    ranked_sessions = sessions_in_rank_order(turn_ids)
    locomo = question.benchmark == LOCOMO
    kept = not locomo and officially_scored(question)
    values: dict[str, float] = {}
    if kept:
        values.update(official_scores(question, turn_ids, official_ks(ks) if official_k is None else official_k))
    if locomo:
        values.update(locomo_scores(turn_ids, turns, ks))
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
        officially_scored=kept,
        benchmark=question.benchmark,
    )


@dataclass(frozen=True, slots=True)
class GroupScores:
    """Mean measures over a group of questions (all of them, or one type)."""

    name: str
    n_questions: int  # non-abstention questions in the group
    n_scored: Mapping[str, int]  # scope -> questions averaged in that scope (`locomo`: abstention included)
    values: Mapping[str, float]  # metric name -> mean (absent for a scope nobody was scored in)


@dataclass(frozen=True, slots=True)
class RetrievalReport:
    ks: tuple[int, ...]  # of lme's variants
    n_questions: int  # every question ranked, abstention included
    n_abstention: int
    n_no_evidence: Mapping[str, int]  # scope -> non-abstention questions that scope leaves out
    overall: GroupScores
    by_type: tuple[GroupScores, ...]
    official_ks: tuple[int, ...] = ()  # of the official measures (none under LoCoMo's definitions)
    definitions: str = LONGMEMEVAL  # whose definitions: `longmemeval` (official + lme's) or `locomo` (lme's + LoCoMo's)
    scopes: tuple[str, ...] = SCOPES  # the scopes averaged (`LOCOMO_SCOPES` under LoCoMo's definitions)
    n_without_evidence: int = 0  # questions, abstention included, without a has_answer turn (LoCoMo: scored 1)

    def groups(self) -> tuple[GroupScores, ...]:
        return (self.overall, *self.by_type)

    def as_metrics(self) -> dict[str, float]:
        """MLflow metrics: overall `turn.recall_any_at_10`, per type `turn.recall_any_at_10.<type>`, and the counts
        (`<scope>.n_scored`, `<scope>.n_no_evidence`)."""
        metrics: dict[str, float] = {
            "n_questions": float(self.n_questions),
            "n_abstention": float(self.n_abstention),
        }
        if self.definitions == LOCOMO:
            metrics["n_without_evidence"] = float(self.n_without_evidence)
        for scope in self.scopes:
            metrics[f"{scope}.n_no_evidence"] = float(self.n_no_evidence[scope])
        for group in self.groups():
            suffix = "" if group is self.overall else f".{group.name}"
            for scope in self.scopes:
                metrics[f"{scope}.n_scored{suffix}"] = float(group.n_scored[scope])
            for name, value in group.values.items():
                metrics[mlflow_name(name) + suffix] = value
        return metrics

    def as_dict(self) -> dict[str, object]:
        def group_dict(group: GroupScores) -> dict[str, object]:
            return {"n_questions": group.n_questions, "n_scored": dict(group.n_scored), "metrics": dict(group.values)}

        if self.definitions == LOCOMO:
            return {
                "definitions": LOCOMO,
                "ks": list(self.ks),
                "n_questions": self.n_questions,
                "n_abstention": self.n_abstention,
                "n_without_evidence": self.n_without_evidence,
                "n_no_evidence": dict(self.n_no_evidence),
                "overall": group_dict(self.overall),
                "by_type": {group.name: group_dict(group) for group in self.by_type},
            }
        return {
            "ks": list(self.ks),
            "official_ks": list(self.official_ks),
            "n_questions": self.n_questions,
            "n_abstention": self.n_abstention,
            "n_no_evidence": dict(self.n_no_evidence),
            "overall": group_dict(self.overall),
            "by_type": {group.name: group_dict(group) for group in self.by_type},
        }


def _group(name: str, scores: Sequence[QuestionScores], scopes: Sequence[str]) -> GroupScores:
    n_scored = {scope: sum(1 for score in scores if score.scored(scope)) for scope in scopes}
    names = _unique(name for score in scores for name in score.values)
    values = {}
    for metric in names:
        scope = scope_of(metric)
        values[metric] = math.fsum(s.values[metric] for s in scores if s.scored(scope)) / n_scored[scope]
    return GroupScores(name=name, n_questions=sum(1 for s in scores if not s.abstention), n_scored=n_scored,
                       values=values)


def definitions_of(scores: Sequence[QuestionScores]) -> str:
    """`locomo` when every question is LoCoMo's, else `longmemeval`; one report never mixes the two."""
    benchmarks = {score.benchmark == LOCOMO for score in scores}
    if len(benchmarks) > 1:
        raise ValueError("a retrieval report is of one benchmark's definitions: LoCoMo's questions cannot be "
                         "averaged with others.")
    return LOCOMO if benchmarks == {True} else LONGMEMEVAL


def summarise(scores: Sequence[QuestionScores], ks: Sequence[int] = DEFAULT_KS,
              official_k: Sequence[int] | None = None) -> RetrievalReport:
    """Means overall and per type (types in the benchmark's order: LongMemEval's, those with an answerable
    question; LoCoMo's categories, those with any question)."""
    definitions = definitions_of(scores)
    scopes = LOCOMO_SCOPES if definitions == LOCOMO else SCOPES
    answerable = [score for score in scores if not score.abstention]
    shown = [score for score in scores if not score.abstention or any(score.scored(scope) for scope in scopes)]
    order = LOCOMO_TYPES if definitions == LOCOMO else QUESTION_TYPES
    known = [name for name in order if any(s.question_type == name for s in shown)]
    others = sorted({s.question_type for s in shown} - set(known))
    return RetrievalReport(
        ks=tuple(ks),
        n_questions=len(scores),
        n_abstention=len(scores) - len(answerable),
        n_no_evidence={scope: sum(1 for s in answerable if not s.scored(scope)) for scope in scopes},
        overall=_group("overall", scores, scopes),
        by_type=tuple(_group(name, [s for s in scores if s.question_type == name], scopes)
                      for name in known + others),
        official_ks=() if definitions == LOCOMO else (official_ks(ks) if official_k is None else tuple(official_k)),
        definitions=definitions,
        scopes=scopes,
        n_without_evidence=sum(1 for s in scores if s.turn_evidence == 0) if definitions == LOCOMO else 0,
    )
