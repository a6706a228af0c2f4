"""LongMemEval's own retrieval measures, computed as its evaluation code computes them (`src/retrieval/
eval_utils.py` and `run_retrieval.py`, turn granularity), so lme's figures can be set beside published ones.

They differ from lme's variants (`lme.retrieval.metrics`) in four ways, each followed here on purpose:

1. **What is ranked**: the user turns only, in history order; each is named `<session's original id>_<position>`
   (position 1-based among all the session's turns), and in an evidence session (original id containing
   `answer`) a user turn not marked `has_answer` is renamed with `noans` in place of `answer`.
2. **What counts**: the targets are the names still containing `answer`, i.e. the evidence user turns. At the
   session level a name is cut at its last `_`, so an evidence session is found only through an evidence
   turn: its other turns (renamed `noans`) do not count.
3. **Session depth**: at the session level `@k` reads the turn ranking down to the first depth holding k
   distinct sessions (or one past its end), and every measure, NDCG included, is taken at that depth.
4. **NDCG**: binary gains over every ranked item (at the session level, each evidence turn is one gain), the
   discount `rel_1 + sum_{i>=2} rel_i / log2(i)` (ranks 1 and 2 both undiscounted), and the ideal ranking puts
   every gain first.

Recall_any@k is 1 when a target is in the top k, recall_all@k when all are. The mean over questions leaves out
abstention questions (`_abs` in the id) and questions whose history has no user turn marked `has_answer`.

The official code ranks every user turn; a retriever that ranks fewer (BM25 returns only turns sharing a word
with the question) is completed here with the unranked user turns in history order, so figures deep in the
ranking depend on that order; turns other than the user's in a ranking are skipped. Metric names: the official
ones, `<level>.<measure>@<k>` with measures `recall_any`, `recall_all`, `ndcg_any` (`session.recall_any@10`);
lme's own variants carry a suffix (`lme.retrieval.metrics`). Older runs stored these as `official.<name>`.

They are LongMemEval's alone: `lme.retrieval.metrics.score_question` does not compute them for a LoCoMo question
(both speakers' turns are evidence there; it gets LoCoMo's own recall instead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lme.data.records import Question

OFFICIAL_KS: tuple[int, ...] = (1, 3, 5, 10, 30, 50)  # the k the official script reports
OFFICIAL_MEASURES: tuple[str, ...] = ("recall_any", "recall_all", "ndcg_any")
OFFICIAL_LEVELS: tuple[str, ...] = ("turn", "session")


def official_name(level: str, measure: str, k: int) -> str:
    """An official measure's name: `session.recall_any@10` (no prefix: the official names are LongMemEval's)."""
    return f"{level}.{measure}@{k}"


@dataclass(frozen=True, slots=True)
class OfficialCorpus:
    """A question's user turns as the official code indexes them: lme's turn ids and the official names."""

    turn_ids: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def targets(self) -> frozenset[str]:
        return frozenset(name for name in self.names if "answer" in name)


def official_corpus(question: Question) -> OfficialCorpus:
    turn_ids, names = [], []
    for session in question.sessions:
        evidence_session = "answer" in session.original_id
        for position, turn in enumerate(session.turns, 1):
            if turn.role != "user":
                continue
            name = f"{session.original_id}_{position}"
            if evidence_session and not turn.has_answer:
                name = name.replace("answer", "noans")
            turn_ids.append(turn.turn_id)
            names.append(name)
    return OfficialCorpus(tuple(turn_ids), tuple(names))


def _strip_turn(name: str) -> str:
    return "_".join(name.split("_")[:-1])


def _dcg(gains: Sequence[float], k: int) -> float:
    top = list(gains[:k])
    if not top:
        return 0.0
    return top[0] + math.fsum(gain / math.log2(rank) for rank, gain in enumerate(top[1:], 2))


def _ndcg(order: Sequence[int], targets: frozenset[str], names: Sequence[str], k: int) -> float:
    gains = [1.0 if name in targets else 0.0 for name in names]
    ideal = _dcg(sorted(gains, reverse=True), k)
    return 0.0 if ideal == 0 else _dcg([gains[i] for i in order[:k]], k) / ideal


def _measures(order: Sequence[int], targets: frozenset[str], names: Sequence[str], k: int) -> tuple[float, float, float]:
    found = {names[i] for i in order[:k]}
    return (float(any(t in found for t in targets)), float(all(t in found for t in targets)),
            _ndcg(order, targets, names, k))


def session_depth(order: Sequence[int], sessions: Sequence[str], k: int) -> int:
    """How deep the official session level reads the turn ranking for `@k`."""
    depth = k
    while depth <= len(sessions) and len({sessions[i] for i in order[:depth]}) < k:
        depth += 1
    return depth


def official_scores(question: Question, ranked_turn_ids: Sequence[str],
                    ks: Sequence[int] = OFFICIAL_KS) -> dict[str, float]:
    """The official measures of one question's ranking (lme turn ids, best first; turns other than the user's,
    and repeats, are skipped; unranked user turns follow in history order)."""
    corpus = official_corpus(question)
    position = {turn_id: index for index, turn_id in enumerate(corpus.turn_ids)}
    order = list(dict.fromkeys(position[t] for t in ranked_turn_ids if t in position))
    ranked = set(order)
    order += [index for index in range(len(corpus.turn_ids)) if index not in ranked]
    targets = corpus.targets
    sessions = [_strip_turn(name) for name in corpus.names]
    session_targets = frozenset(_strip_turn(name) for name in targets)
    values: dict[str, float] = {}
    for k in ks:
        for measure, value in zip(OFFICIAL_MEASURES, _measures(order, targets, corpus.names, k)):
            values[official_name("turn", measure, k)] = value
        depth = session_depth(order, sessions, k)
        for measure, value in zip(OFFICIAL_MEASURES, _measures(order, session_targets, sessions, depth)):
            values[official_name("session", measure, k)] = value
    return values


def officially_scored(question: Question) -> bool:
    """Whether the official average keeps the question: not abstention, and a user turn marked `has_answer`."""
    return not question.is_abstention and any(
        turn.has_answer and turn.role == "user" for turn in question.turns())


@dataclass(frozen=True, slots=True)
class OfficialSummary:
    n_scored: int
    ignored_abstention: int
    ignored_no_target: int
    values: Mapping[str, float]  # name -> mean over the scored questions


def official_summary(questions: Sequence[Question], per_question: Sequence[Mapping[str, float]]) -> OfficialSummary:
    """The official average: over the questions `officially_scored` keeps."""
    kept = [values for question, values in zip(questions, per_question) if officially_scored(question)]
    abstention = sum(1 for question in questions if question.is_abstention)
    names = list(dict.fromkeys(name for values in kept for name in values))
    means = {name: math.fsum(values[name] for values in kept) / len(kept) for name in names} if kept else {}
    return OfficialSummary(len(kept), abstention, len(questions) - abstention - len(kept), means)
