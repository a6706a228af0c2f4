"""Measures against hand-computed examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from report_fixtures import IDS, PATCHY, PLAIN, pipeline_runs, rows_from
from report_fixtures import TYPES as FIX_TYPES

from lme.util.errors import LmeError
from lme.reporting.measures import (
    Interval,
    accuracy,
    accuracy_intervals,
    across_runs,
    cost_summary,
    has_rereads,
    majority_correct,
    majority_threshold,
    paired_difference,
    run_measures,
    step_table,
    stratified_bootstrap,
    summarise_design,
    task_averaged_accuracy,
)

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


# --- design summaries, paired bootstrap, per-step and cost tables ---------------------------------

def _maps(pattern):
    return [{row["question_id"]: bool(row["correct"]) and row["answer"] is not None for row in rows_from(run)}
            for run in pattern]


def test_summarise_design_by_hand():
    s = summarise_design(_maps(PLAIN), FIX_TYPES, {"u3_abs"})
    assert s.n_runs == 3 and s.n_questions == 8 and s.threshold == 2
    assert s.run_correct_counts == (4, 4, 4)
    assert s.mean_accuracy == pytest.approx(0.5)
    assert s.majority_count == 4 and s.majority_accuracy == pytest.approx(0.5)
    assert s.mean_per_type == pytest.approx({"single-session-user": 5 / 9, "multi-session": 5 / 9, "knowledge-update": 1 / 3})
    assert s.majority_per_type == pytest.approx({"single-session-user": 2 / 3, "multi-session": 1 / 3, "knowledge-update": 0.5})
    # task-averaged per run: 0.5, 4/9, 0.5
    assert s.mean_task_averaged == pytest.approx((0.5 + 4 / 9 + 0.5) / 3)
    assert s.majority_task_averaged == pytest.approx((2 / 3 + 1 / 3 + 0.5) / 3)
    assert s.n_abstention == 1 and s.mean_abstention == pytest.approx(2 / 3) and s.majority_abstention == 1.0
    assert s.type_counts == {"single-session-user": 3, "multi-session": 3, "knowledge-update": 2}


def test_summarise_design_counts_missing_and_absent_answers_as_wrong():
    s = summarise_design(_maps(PATCHY), FIX_TYPES, {"u3_abs"})
    assert s.run_correct_counts == (6, 5, 4)
    assert s.mean_accuracy == pytest.approx(15 / 24)
    assert s.majority_count == 6


def test_paired_difference_by_hand():
    result = paired_difference(_maps(PLAIN), _maps(PATCHY), FIX_TYPES, n_resamples=2000, seed=7)
    overall = result.overall
    assert overall.n_questions == 8
    assert overall.mean_difference == pytest.approx(15 / 24 - 0.5)
    assert overall.majority_difference == pytest.approx(0.75 - 0.5)
    assert overall.gained == ("m2", "m3", "u2") and overall.lost == ("m1",)
    ssu = result.per_type["single-session-user"]
    assert ssu.n_questions == 3
    assert ssu.mean_difference == pytest.approx(2 / 9) and ssu.majority_difference == pytest.approx(1 / 3)
    assert ssu.gained == ("u2",) and ssu.lost == ()
    assert list(result.per_type) == ["single-session-user", "multi-session", "knowledge-update"]
    for group in (overall, *result.per_type.values()):
        assert group.mean_interval.low <= group.mean_difference <= group.mean_interval.high
        assert group.majority_interval.low <= group.majority_difference <= group.majority_interval.high


def test_bootstrap_is_reproducible_and_ignores_input_order():
    a, b = _maps(PLAIN), _maps(PATCHY)
    first = paired_difference(a, b, FIX_TYPES, seed=3)
    assert paired_difference(a, b, FIX_TYPES, seed=3) == first
    reversed_types = dict(reversed(list(FIX_TYPES.items())))
    reversed_runs = [dict(reversed(list(run.items()))) for run in a]
    assert paired_difference(reversed_runs, b, reversed_types, seed=3) == first
    assert first.n_resamples == 10_000 and first.seed == 3 and first.confidence == 0.95
    values = np.random.default_rng(1).normal(size=(1, 300))
    strata = ["multi-session"] * 100 + ["knowledge-update"] * 200
    assert stratified_bootstrap(values, strata, seed=1) == stratified_bootstrap(values, strata, seed=1)
    assert stratified_bootstrap(values, strata, seed=1) != stratified_bootstrap(values, strata, seed=2)


def test_bootstrap_of_a_constant_difference_is_that_constant():
    types = {f"q{i}": ("multi-session" if i % 2 else "knowledge-update") for i in range(20)}
    a = [{q: False for q in types}] * 3
    b = [{q: True for q in types}] * 3
    result = paired_difference(a, b, types, n_resamples=500)
    assert result.overall.mean_interval == Interval(1.0, 1.0)
    assert result.overall.majority_interval == Interval(1.0, 1.0)
    assert len(result.overall.gained) == 20


def test_bootstrap_width_matches_the_stratified_standard_error():
    rng = np.random.default_rng(11)
    sizes = {"single-session-user": 70, "multi-session": 133, "temporal-reasoning": 133, "knowledge-update": 78}
    strata = [t for t, n in sizes.items() for _ in range(n)]
    values = rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0], size=len(strata))
    boot = stratified_bootstrap([values], strata, n_resamples=10_000, seed=5)
    n_total = len(strata)
    variance = sum(
        len(v) * np.var(v) for v in (values[[i for i, s in enumerate(strata) if s == t]] for t in sizes)
    ) / n_total**2
    expected_width = 2 * 1.959964 * np.sqrt(variance)
    low, high = boot.overall[0].low, boot.overall[0].high
    assert high - low == pytest.approx(expected_width, rel=0.06)
    assert low < values.mean() < high
    # per stratum: the interval of the stratum's own mean
    ms = values[[i for i, s in enumerate(strata) if s == "multi-session"]]
    ms_width = 2 * 1.959964 * np.sqrt(np.var(ms) / len(ms))
    interval = boot.per_stratum["multi-session"][0]
    assert interval.high - interval.low == pytest.approx(ms_width, rel=0.08)


def test_bootstrap_takes_well_under_a_second_on_a_full_study():
    import time

    sizes = {"single-session-user": 70, "single-session-assistant": 56, "single-session-preference": 30,
             "multi-session": 133, "temporal-reasoning": 133, "knowledge-update": 78}
    types = {f"{t}-{i}": t for t, n in sizes.items() for i in range(n)}
    rng = np.random.default_rng(0)
    a = [{q: bool(rng.random() < 0.6) for q in types} for _ in range(3)]
    b = [{q: bool(rng.random() < 0.7) for q in types} for _ in range(3)]
    paired_difference(a, b, types, n_resamples=200)  # numpy imported and warm
    started = time.perf_counter()
    paired_difference(a, b, types)
    assert time.perf_counter() - started < 1.0


def _majority_of_three(p: float) -> float:
    return p**3 + 3 * p**2 * (1 - p)


def test_bootstrap_interval_covers_the_true_difference_at_about_the_nominal_rate():
    """200 simulated studies from a known population: the 95% intervals of both measures should
    cover the true differences in roughly 95% of them. Questions are drawn within three types;
    each question has success probabilities (pA, pB) from a per-type mix; each design runs 3 times."""
    rng = np.random.default_rng(20250101)
    population = {  # type: (size, [(pA, pB, weight), ...])
        "single-session-user": (40, [(0.9, 0.95, 0.5), (0.3, 0.6, 0.3), (0.1, 0.1, 0.2)]),
        "multi-session": (60, [(0.5, 0.7, 0.4), (0.2, 0.2, 0.4), (0.8, 0.6, 0.2)]),
        "temporal-reasoning": (50, [(0.4, 0.5, 0.5), (0.7, 0.9, 0.5)]),
    }
    n_total = sum(size for size, _ in population.values())
    true_mean = sum(size / n_total * sum(w * (pb - pa) for pa, pb, w in mix) for size, mix in population.values())
    true_majority = sum(
        size / n_total * sum(w * (_majority_of_three(pb) - _majority_of_three(pa)) for pa, pb, w in mix)
        for size, mix in population.values()
    )
    covered = np.zeros(2)
    studies = 200
    for study in range(studies):
        types, runs_a, runs_b = {}, [{}, {}, {}], [{}, {}, {}]
        for name, (size, mix) in population.items():
            kinds = rng.choice(len(mix), size=size, p=[w for _, _, w in mix])
            for i, kind in enumerate(kinds):
                qid = f"{name}-{i}"
                types[qid] = name
                pa, pb, _ = mix[kind]
                for r in range(3):
                    runs_a[r][qid] = bool(rng.random() < pa)
                    runs_b[r][qid] = bool(rng.random() < pb)
        result = paired_difference(runs_a, runs_b, types, n_resamples=2000, seed=study)
        covered += [result.overall.mean_interval.covers(true_mean), result.overall.majority_interval.covers(true_majority)]
    rates = covered / studies
    assert 0.90 <= rates[0] <= 0.99, rates
    assert 0.90 <= rates[1] <= 0.99, rates


def test_accuracy_intervals_bracket_the_design_accuracy():
    boot = accuracy_intervals(_maps(PLAIN), FIX_TYPES, n_resamples=1000)
    assert boot.overall[0].low <= 0.5 <= boot.overall[0].high
    assert set(boot.per_stratum) == {"single-session-user", "multi-session", "knowledge-update"}


def test_step_table_by_hand():
    runs = pipeline_runs()
    assert has_rereads(runs)
    table = step_table(runs, ["u1", "m1", "k1"])
    assert [s.label for s in table] == ["first_pass", "advice", "decline", "decline (2)", "recall"]
    assert [s.view for s in table] == ["first_pass", "first_pass", "whole_sessions", "whole_sessions", "whole_sessions"]
    assert [s.questions_chosen for s in table] == [3, 1, 1, 1, 1]
    assert [s.chosen for s in table] == [9, 3, 1, 1, 2]
    assert [s.reread for s in table] == [0, 3, 1, 1, 2]
    assert [s.failed for s in table] == [0, 1, 0, 0, 0]
    assert [s.mean_accuracy for s in table] == pytest.approx([3 / 9, 5 / 9, 4 / 9, 5 / 9, 6 / 9])
    assert [s.majority_count for s in table] == [1, 2, 2, 2, 2]
    assert [s.fixed for s in table] == [None, 2, 0, 1, 1]
    assert [s.broken for s in table] == [None, 0, 1, 0, 0]
    assert [s.reader_calls for s in table] == [9, 3, 1, 1, 2]
    assert [s.reader_cost_usd for s in table] == pytest.approx([0.18, 0.03, 0.01, 0.01, 0.02])


def test_rows_without_steps_have_no_rereads_and_one_first_pass_step():
    runs = [rows_from(run) for run in PLAIN]
    assert not has_rereads(runs)
    (first,) = step_table(runs, IDS)
    assert first.rule == "first_pass" and first.mean_accuracy == pytest.approx(0.5) and first.majority_count == 4


def test_step_table_refuses_runs_with_different_rule_orders():
    runs = pipeline_runs()
    runs[1][0]["steps"][1]["rule"] = "recall"
    with pytest.raises(LmeError, match="step 1 is rule 'recall'"):
        step_table(runs, ["u1", "m1", "k1"])


def test_cost_summary_by_hand():
    plain = cost_summary([rows_from(run) for run in PLAIN])
    assert plain.n_runs == 3 and plain.n_answers == 24 and plain.missing_answers == 0
    assert plain.reader_calls == 24 and plain.mean_input_tokens_per_call == 100
    assert plain.reader_cost_usd == pytest.approx(0.24) and plain.judge_cost_usd == pytest.approx(0.024)
    assert plain.reader_cost_per_answer_usd == pytest.approx(0.01)
    patchy = cost_summary([rows_from(run, reader_tokens=300, reader_cost=0.02) for run in PATCHY])
    assert patchy.n_answers == 23 and patchy.missing_answers == 1
    assert patchy.reader_cost_usd == pytest.approx(0.46) and patchy.judge_cost_usd == pytest.approx(0.022)
    assert patchy.mean_input_tokens_per_call == 300 and patchy.reader_cost_per_answer_usd == pytest.approx(0.02)
    # with steps, calls and dollars are the steps' (first pass + re-reads)
    steps = cost_summary(pipeline_runs())
    assert steps.reader_calls == 16 and steps.reader_input_tokens == 16 * 200
    assert steps.reader_cost_usd == pytest.approx(0.25) and steps.reader_cost_per_answer_usd == pytest.approx(0.25 / 9)
