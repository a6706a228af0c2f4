"""LoCoMo's measures across a design's runs (seeds) and between two designs, from the jobs' outcome rows.

A job's own figures are `lme.reporting.measures.locomo_metrics` (LoCoMo's F1 per `lme.reporting.locomo_f1`, and J
without the adversarial category). Here, over several runs of one design:

- `filled_runs`: every run's rows over the union of the runs' LoCoMo questions, a question a run lacks added as a
  missing answer (F1 0, wrong), as lme's accuracy counts it;
- `locomo_across_runs`: each run's `locomo_metrics` of its filled rows and their mean over runs (what a multirun's
  parent logs as `mean_locomo.*`, and the report's LoCoMo headline);
- `locomo_paired`: design B minus design A on J without adversarial (per question: the share of runs judged
  correct) and on F1 (per question: the mean of `locomo_f1` over runs), each with a paired bootstrap interval
  from `lme.reporting.measures.stratified_bootstrap` (questions resampled within each category, seeded).

Pure: rows in, numbers out. A row is a LoCoMo question when it has a `category` (1-5; LongMemEval rows have none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lme.reporting.locomo_f1 import CATEGORY_NAMES, category_name
from lme.reporting.measures import (
    DEFAULT_BOOTSTRAP_SEED,
    DEFAULT_RESAMPLES,
    Interval,
    locomo_metrics,
    stratified_bootstrap,
)

ADVERSARIAL = CATEGORY_NAMES[5]


def is_locomo(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any of `rows` is a LoCoMo question (carries a category)."""
    return any(row.get("category") for row in rows)


def locomo_categories(runs: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, int]:
    """Question id -> LoCoMo category number, over every run's LoCoMo rows."""
    categories: dict[str, int] = {}
    for rows in runs:
        for row in rows:
            if row.get("category"):
                categories.setdefault(str(row["question_id"]), int(row["category"]))
    return categories


def filled_runs(runs: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[Mapping[str, Any]]]:
    """Each run's LoCoMo rows, plus a missing answer (no answer, wrong, F1 0) for every LoCoMo question another run
    has and it lacks: so every run is measured on the same questions, a missing one counted as wrong."""
    categories = locomo_categories(runs)
    filled = []
    for rows in runs:
        own = [row for row in rows if row.get("category")]
        held = {str(row["question_id"]) for row in own}
        filled.append(own + [{"question_id": q, "category": c, "answer": None, "correct": False, "locomo_f1": 0.0}
                             for q, c in categories.items() if q not in held])
    return filled


@dataclass(frozen=True)
class LocomoAcross:
    """One design's LoCoMo figures over its runs: `per_run` is each run's `locomo_metrics` (keys `locomo.f1`,
    `locomo.f1_without_adversarial`, `locomo.f1.<category>`, `locomo.j_without_adversarial`); `mean` their mean
    over runs (a key every run has)."""

    n_runs: int
    n_questions: int
    category_counts: dict[str, int]  # category name -> questions, in LoCoMo's number order
    per_run: tuple[dict[str, float], ...]
    mean: dict[str, float]
    j_per_category: dict[str, float]  # the share judged correct per category 1-4, mean over runs

    def as_metrics(self) -> dict[str, float]:
        """The parent's names: `mean_<job metric>` (`mean_locomo.f1`, `mean_locomo.f1.temporal`, ...)."""
        return {f"mean_{key}": value for key, value in self.mean.items()}


def _judged_correct(row: Mapping[str, Any]) -> bool:
    """J's verdict of a row as `locomo_metrics` counts it: judged correct, with an answer and no judge error."""
    return bool(row.get("correct")) and row.get("answer") is not None and not row.get("judge_error")


def locomo_across_runs(runs: Sequence[Sequence[Mapping[str, Any]]]) -> LocomoAcross | None:
    """LoCoMo's figures of one design over its runs; None when no row is a LoCoMo question."""
    filled = filled_runs(runs)
    categories = locomo_categories(runs)
    if not categories:
        return None
    per_run = tuple(locomo_metrics(rows) for rows in filled)
    keys = [key for key in per_run[0] if all(key in run for run in per_run)]
    mean = {key: sum(run[key] for run in per_run) / len(per_run) for key in keys}
    counts = {CATEGORY_NAMES[n]: sum(1 for c in categories.values() if c == n)
              for n in sorted(set(categories.values()))}
    j_per_category = {}
    for name in counts:
        if name == ADVERSARIAL:
            continue
        shares = []
        for rows in filled:
            mine = [row for row in rows if category_name(row["category"]) == name]
            shares.append(sum(_judged_correct(row) for row in mine) / len(mine))
        j_per_category[name] = sum(shares) / len(shares)
    return LocomoAcross(len(per_run), len(categories), counts, per_run, mean, j_per_category)


@dataclass(frozen=True)
class LocomoDifference:
    """B minus A on one measure: overall and per category (shares; x100 for points), with 95% intervals."""

    n_questions: int
    difference: float
    interval: Interval
    per_category: dict[str, tuple[int, float, Interval]]  # name -> (questions, difference, interval)


@dataclass(frozen=True)
class LocomoPaired:
    """Design B minus design A on LoCoMo's measures, on the LoCoMo questions both ran."""

    n_resamples: int
    seed: int
    j_without_adversarial: LocomoDifference | None  # None: no question of categories 1-4 in common
    f1: LocomoDifference


def _per_question(runs: Sequence[Sequence[Mapping[str, Any]]], ids: Sequence[str]) -> tuple[dict, dict]:
    """Per question: the share of runs judged correct (J) and the mean `locomo_f1` over runs (a run lacking the
    question: wrong, 0)."""
    by_run = [{str(row["question_id"]): row for row in rows if row.get("category")} for rows in runs]
    j = {q: sum(_judged_correct(run[q]) for run in by_run if q in run) / len(by_run) for q in ids}
    f1 = {q: sum(float(run[q].get("locomo_f1") or 0.0) for run in by_run if q in run) / len(by_run) for q in ids}
    return j, f1


def _difference(values: Sequence[float], strata: Sequence[str], n_resamples: int, seed: int) -> LocomoDifference:
    boot = stratified_bootstrap([list(values)], list(strata), n_resamples, seed)
    per_category = {}
    for name in boot.per_stratum:
        mine = [v for v, s in zip(values, strata) if s == name]
        per_category[name] = (len(mine), sum(mine) / len(mine), boot.per_stratum[name][0])
    return LocomoDifference(len(values), sum(values) / len(values), boot.overall[0], per_category)


def locomo_paired(
    runs_a: Sequence[Sequence[Mapping[str, Any]]],
    runs_b: Sequence[Sequence[Mapping[str, Any]]],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> LocomoPaired | None:
    """B - A on J without adversarial and on F1 over the LoCoMo questions both designs ran (None: none in common),
    each a paired stratified bootstrap over the per-question differences (strata: the categories)."""
    cat_a, cat_b = locomo_categories(runs_a), locomo_categories(runs_b)
    ids = sorted(q for q in cat_a if q in cat_b)
    if not ids:
        return None
    j_a, f1_a = _per_question(runs_a, ids)
    j_b, f1_b = _per_question(runs_b, ids)
    names = [category_name(cat_a[q]) for q in ids]
    judged = [i for i, name in enumerate(names) if name != ADVERSARIAL]
    j = None
    if judged:
        j = _difference([j_b[ids[i]] - j_a[ids[i]] for i in judged], [names[i] for i in judged], n_resamples, seed)
    f1 = _difference([f1_b[q] - f1_a[q] for q in ids], names, n_resamples, seed)
    return LocomoPaired(n_resamples, seed, j, f1)
