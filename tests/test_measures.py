"""Measures against hand-computed examples."""

from __future__ import annotations

import math

import pytest

from lme.measures import across_runs, accuracy, majority_correct, majority_threshold, run_measures, task_averaged_accuracy

TYPES = {
    "a1": "single-session-user",
    "a2": "single-session-user",
    "b1": "temporal-reasoning",
    "b2_abs": "temporal-reasoning",
    "c1": "knowledge-update",
}


def test_missing_answer_counts_as_wrong():
    assert accuracy({"a1": True}, ["a1", "a2"]) == 0.5


def test_run_measures_by_hand():
    correct = {"a1": True, "a2": False, "b1": True, "b2_abs": True, "c1": False}
    m = run_measures(correct, TYPES, {"b2_abs"})
    assert m.n_correct == 3 and m.accuracy == pytest.approx(3 / 5)
    assert m.per_type == {"single-session-user": 0.5, "temporal-reasoning": 1.0, "knowledge-update": 0.0}
    assert m.task_averaged_accuracy == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert m.abstention_accuracy == 1.0
    metrics = m.as_metrics()
    assert metrics["accuracy.temporal-reasoning"] == 1.0


def test_no_abstention_question_gives_no_abstention_metric():
    m = run_measures({"a1": True}, {"a1": "single-session-user"}, set())
    assert math.isnan(m.abstention_accuracy)
    assert "abstention_accuracy" not in m.as_metrics()


def test_task_average_is_unweighted():
    types = {"x1": "multi-session", "x2": "multi-session", "x3": "multi-session", "y": "knowledge-update"}
    assert task_averaged_accuracy({"x1": True, "x2": True, "x3": True, "y": False}, types) == 0.5


@pytest.mark.parametrize(("runs", "need"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_majority_threshold(runs, need):
    assert majority_threshold(runs) == need


def test_across_runs_by_hand():
    runs = [
        {"a1": True, "a2": True, "b1": False, "b2_abs": True, "c1": False},
        {"a1": True, "a2": False, "b1": False, "b2_abs": True, "c1": True},
        {"a1": False, "a2": False, "b1": True, "b2_abs": True},  # c1 missing: wrong
    ]
    assert majority_correct(runs, list(TYPES)) == {"a1": True, "a2": False, "b1": False, "b2_abs": True, "c1": False}
    result = across_runs(runs, TYPES)
    assert result.run_accuracies == (0.6, 0.6, 0.4)
    assert result.mean_accuracy == pytest.approx(1.6 / 3)
    assert result.majority_count == 2 and result.majority_accuracy == pytest.approx(0.4)
    assert result.mean_per_type["single-session-user"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert result.majority_per_type == {"single-session-user": 0.5, "temporal-reasoning": 0.5, "knowledge-update": 0.0}
