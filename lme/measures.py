"""Measures: pure functions over per-question correctness.

A run is a mapping question id -> correct (a missing or failed answer is
False). `types` maps question id -> question type; `abstention` is the set of
abstention question ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from lme.data.records import QUESTION_TYPES


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def accuracy(correct: Mapping[str, bool], question_ids: Sequence[str] | None = None) -> float:
    """Share correct over `question_ids` (default: all); an id with no result counts as wrong."""
    ids = list(correct) if question_ids is None else list(question_ids)
    return _mean([1.0 if correct.get(qid, False) else 0.0 for qid in ids])


def per_type_accuracy(correct: Mapping[str, bool], types: Mapping[str, str]) -> dict[str, float]:
    """Accuracy per question type present, in the canonical type order."""
    present = [t for t in QUESTION_TYPES if t in set(types.values())]
    return {t: accuracy(correct, [q for q, qt in types.items() if qt == t]) for t in present}


def task_averaged_accuracy(correct: Mapping[str, bool], types: Mapping[str, str]) -> float:
    """Unweighted mean of the per-type accuracies."""
    return _mean(list(per_type_accuracy(correct, types).values()))


@dataclass(frozen=True)
class RunMeasures:
    n_questions: int
    n_correct: int
    accuracy: float
    task_averaged_accuracy: float
    abstention_accuracy: float  # nan when the run has no abstention question
    per_type: dict[str, float]

    def as_metrics(self) -> dict[str, float]:
        metrics = {
            "n_questions": float(self.n_questions),
            "n_correct": float(self.n_correct),
            "accuracy": self.accuracy,
            "task_averaged_accuracy": self.task_averaged_accuracy,
        }
        if self.abstention_accuracy == self.abstention_accuracy:  # not nan
            metrics["abstention_accuracy"] = self.abstention_accuracy
        metrics.update({f"accuracy.{t}": value for t, value in self.per_type.items()})
        return metrics


def run_measures(correct: Mapping[str, bool], types: Mapping[str, str], abstention: Set[str]) -> RunMeasures:
    ids = list(types)
    return RunMeasures(
        n_questions=len(ids),
        n_correct=sum(1 for qid in ids if correct.get(qid, False)),
        accuracy=accuracy(correct, ids),
        task_averaged_accuracy=task_averaged_accuracy(correct, types),
        abstention_accuracy=accuracy(correct, [q for q in ids if q in abstention]) if abstention else float("nan"),
        per_type=per_type_accuracy(correct, types),
    )


def majority_threshold(n_runs: int) -> int:
    """Runs a question must be correct in to count: a strict majority (2 of 3, 3 of 4, 3 of 5)."""
    return n_runs // 2 + 1


def majority_correct(runs: Sequence[Mapping[str, bool]], question_ids: Sequence[str]) -> dict[str, bool]:
    """Per question: correct in at least a majority of the runs (missing counts as wrong)."""
    need = majority_threshold(len(runs))
    return {qid: sum(1 for run in runs if run.get(qid, False)) >= need for qid in question_ids}


@dataclass(frozen=True)
class AcrossRuns:
    n_runs: int
    threshold: int
    run_accuracies: tuple[float, ...]
    mean_accuracy: float
    majority_count: int
    majority_accuracy: float
    mean_per_type: dict[str, float]
    majority_per_type: dict[str, float]

    def as_metrics(self) -> dict[str, float]:
        metrics = {
            "n_runs": float(self.n_runs),
            "mean_accuracy": self.mean_accuracy,
            "majority_correct_count": float(self.majority_count),
            "majority_correct_accuracy": self.majority_accuracy,
        }
        metrics.update({f"mean_accuracy.{t}": v for t, v in self.mean_per_type.items()})
        metrics.update({f"majority_correct_accuracy.{t}": v for t, v in self.majority_per_type.items()})
        return metrics


def across_runs(runs: Sequence[Mapping[str, bool]], types: Mapping[str, str]) -> AcrossRuns:
    """Mean of run accuracies and questions correct in a majority of runs, over the questions in `types`."""
    ids = list(types)
    run_accuracies = tuple(accuracy(run, ids) for run in runs)
    majority = majority_correct(runs, ids)
    per_type_runs = [per_type_accuracy(run, types) for run in runs]
    type_names = list(per_type_accuracy(majority, types))
    return AcrossRuns(
        n_runs=len(runs),
        threshold=majority_threshold(len(runs)),
        run_accuracies=run_accuracies,
        mean_accuracy=_mean(list(run_accuracies)),
        majority_count=sum(majority.values()),
        majority_accuracy=accuracy(majority, ids),
        mean_per_type={t: _mean([r[t] for r in per_type_runs]) for t in type_names},
        majority_per_type=per_type_accuracy(majority, types),
    )
