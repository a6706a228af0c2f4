"""Measures: pure functions over per-question correctness.

A run is a mapping question id -> correct (a missing or failed answer is
False). `types` maps question id -> question type; `abstention` is the set of
abstention question ids.

- per run: `run_measures` (accuracy, per type, task-averaged, abstention);
- across runs: `across_runs`, `summarise_design` (mean of runs, correct in a
  majority of runs: 2 of 3);
- design against design: `paired_difference` (both measures, B - A, with a
  stratified bootstrap interval: `stratified_bootstrap`, numpy, seeded) and the
  questions gained and lost;
- from the journal's outcome rows: `step_table` (per re-read step) and
  `cost_summary` (calls, tokens, dollars).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from lme.data.records import KNOWN_TYPES


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def accuracy(correct: Mapping[str, bool], question_ids: Sequence[str] | None = None) -> float:
    """Share correct over `question_ids` (default: all); an id with no result counts as wrong."""
    ids = list(correct) if question_ids is None else list(question_ids)
    return _mean([1.0 if correct.get(qid, False) else 0.0 for qid in ids])


def per_type_accuracy(correct: Mapping[str, bool], types: Mapping[str, str]) -> dict[str, float]:
    """Accuracy per question type present, in the canonical type order (LongMemEval's, then LoCoMo's), any other
    type after them by name."""
    present = sorted(set(types.values()), key=type_order)
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


# --- summaries of one design over its runs ------------------------------------------------------


@dataclass(frozen=True)
class DesignSummary:
    """One design over its runs (seeds), on the questions in `types` (missing answers are wrong).

    `mean_*` are means over runs of the per-run measure; `majority_*` are measures of the
    questions correct in at least `threshold` of the runs (2 of 3). `task_averaged` is the
    unweighted mean over the question types present (what Mastra's benchmark calls its
    "overall" accuracy); `accuracy` is the plain share of questions.
    """

    n_runs: int
    n_questions: int
    threshold: int
    run_correct_counts: tuple[int, ...]
    run_accuracies: tuple[float, ...]
    mean_accuracy: float
    majority_count: int
    majority_accuracy: float
    mean_task_averaged: float
    majority_task_averaged: float
    n_abstention: int
    mean_abstention: float  # nan without abstention questions
    majority_abstention: float
    type_counts: dict[str, int]
    mean_per_type: dict[str, float]
    majority_per_type: dict[str, float]


def summarise_design(
    runs: Sequence[Mapping[str, bool]], types: Mapping[str, str], abstention: Set[str]
) -> DesignSummary:
    """Per-run and across-run measures of one design (pure; `runs` map question id -> correct)."""
    ids = list(types)
    per_run = [run_measures({q: run.get(q, False) for q in ids}, types, abstention) for run in runs]
    across = across_runs(runs, types)
    majority = majority_correct(runs, ids)
    abstention_ids = [q for q in ids if q in abstention]
    type_counts = {t: sum(1 for q in ids if types[q] == t) for t in per_type_accuracy(majority, types)}
    return DesignSummary(
        n_runs=len(runs),
        n_questions=len(ids),
        threshold=across.threshold,
        run_correct_counts=tuple(m.n_correct for m in per_run),
        run_accuracies=across.run_accuracies,
        mean_accuracy=across.mean_accuracy,
        majority_count=across.majority_count,
        majority_accuracy=across.majority_accuracy,
        mean_task_averaged=_mean([m.task_averaged_accuracy for m in per_run]),
        majority_task_averaged=task_averaged_accuracy(majority, types),
        n_abstention=len(abstention_ids),
        mean_abstention=_mean([accuracy(run, abstention_ids) for run in runs]) if abstention_ids else float("nan"),
        majority_abstention=accuracy(majority, abstention_ids) if abstention_ids else float("nan"),
        type_counts=type_counts,
        mean_per_type=across.mean_per_type,
        majority_per_type=across.majority_per_type,
    )


# --- stratified bootstrap -----------------------------------------------------------------------

DEFAULT_RESAMPLES = 10_000
DEFAULT_BOOTSTRAP_SEED = 0
_CHUNK_CELLS = 4_000_000  # resamples x stratum size drawn at once (bounds memory at ~32 MB)


def type_order(name: str) -> tuple[int, str]:
    """Sort key: the canonical question-type order (LongMemEval's, then LoCoMo's), unknown types after it by name."""
    return (KNOWN_TYPES.index(name), name) if name in KNOWN_TYPES else (len(KNOWN_TYPES), name)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class BootstrapIntervals:
    """Percentile intervals of the mean of each measure, overall and per stratum."""

    n_resamples: int
    seed: int
    confidence: float
    overall: tuple[Interval, ...]  # one per measure
    per_stratum: dict[str, tuple[Interval, ...]]


def stratified_bootstrap(
    values: Sequence[Sequence[float]],
    strata: Sequence[str],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    confidence: float = 0.95,
) -> BootstrapIntervals:
    """Intervals for the mean of each row of `values` (measures x questions), resampling
    questions with replacement within each stratum (question type), so every resample keeps
    the strata sizes. All measures share the same resamples (a paired bootstrap when the
    values are differences). Strata are drawn in canonical type order from one seeded
    generator, so the same inputs and seed give the same intervals."""
    import numpy as np

    data = np.asarray(values, dtype=float)
    if data.ndim != 2 or data.shape[1] != len(strata):
        raise ValueError("values must be measures x questions, with one stratum per question")
    if data.shape[1] == 0:
        nan = Interval(float("nan"), float("nan"))
        return BootstrapIntervals(n_resamples, seed, confidence, tuple(nan for _ in data), {})
    labels = np.asarray(list(strata), dtype=object)
    rng = np.random.default_rng(seed)
    total = np.zeros((data.shape[0], n_resamples))
    tail = (1.0 - confidence) / 2.0
    quantiles = (tail, 1.0 - tail)

    def intervals(means) -> tuple[Interval, ...]:
        bounds = np.quantile(means, quantiles, axis=1)  # (2, measures)
        return tuple(Interval(float(lo), float(hi)) for lo, hi in bounds.T)

    per_stratum: dict[str, tuple[Interval, ...]] = {}
    for stratum in sorted(set(labels.tolist()), key=type_order):
        block = data[:, labels == stratum]  # (measures, n)
        n = block.shape[1]
        sums = np.empty((data.shape[0], n_resamples))
        step = max(1, _CHUNK_CELLS // n)
        for start in range(0, n_resamples, step):
            stop = min(n_resamples, start + step)
            picks = rng.integers(0, n, size=(stop - start, n))
            for row in range(data.shape[0]):
                sums[row, start:stop] = block[row][picks].sum(axis=1)
        total += sums
        per_stratum[stratum] = intervals(sums / n)
    return BootstrapIntervals(n_resamples, seed, confidence, intervals(total / data.shape[1]), per_stratum)


# --- paired comparison of two designs -----------------------------------------------------------


def question_means(runs: Sequence[Mapping[str, bool]], question_ids: Sequence[str]) -> dict[str, float]:
    """Per question: the share of runs that got it right (missing counts as wrong)."""
    return {q: _mean([1.0 if run.get(q, False) else 0.0 for run in runs]) for q in question_ids}


@dataclass(frozen=True)
class PairedGroup:
    """B minus A on one group of questions (all, or one type), as shares (x100 for points)."""

    n_questions: int
    mean_difference: float  # mean of runs: B - A
    mean_interval: Interval
    majority_difference: float  # correct in a majority of runs: B - A
    majority_interval: Interval
    gained: tuple[str, ...]  # majority-correct under B, not under A
    lost: tuple[str, ...]  # majority-correct under A, not under B
    # the mean-of-runs measure per question: B right in more of its runs than A / in fewer (a share of the runs,
    # so designs with different numbers of runs compare; with equal numbers, a count of correct runs)
    more_runs: tuple[str, ...] = ()
    fewer_runs: tuple[str, ...] = ()
    # the task-averaged accuracy (the unweighted mean over the types), mean of runs: B - A; within one type it is
    # that type's mean-of-runs difference
    task_averaged_difference: float = float("nan")
    task_averaged_interval: Interval | None = None


@dataclass(frozen=True)
class PairedComparison:
    n_resamples: int
    seed: int
    confidence: float
    overall: PairedGroup
    per_type: dict[str, PairedGroup]


def paired_difference(
    runs_a: Sequence[Mapping[str, bool]],
    runs_b: Sequence[Mapping[str, bool]],
    types: Mapping[str, str],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    confidence: float = 0.95,
) -> PairedComparison:
    """Design B minus design A on the questions in `types` (both designs' runs on the same
    questions), on both measures, with stratified-bootstrap intervals (questions resampled
    within each type; both measures and every type from the same resamples), the questions
    gained and lost on the majority measure, the questions with more and fewer correct runs
    on the mean measure, and the task-averaged difference (mean of runs) with its interval."""
    ids = sorted(types)
    mean_a, mean_b = question_means(runs_a, ids), question_means(runs_b, ids)
    major_a, major_b = majority_correct(runs_a, ids), majority_correct(runs_b, ids)
    d_mean = [mean_b[q] - mean_a[q] for q in ids]
    d_major = [float(major_b[q]) - float(major_a[q]) for q in ids]
    # Task-averaged: every resample keeps the strata sizes, so the mean of these reweighted differences is
    # the unweighted mean over types of each type's mean difference, in the sample and in every resample.
    sizes = {t: sum(1 for q in ids if types[q] == t) for t in set(types[q] for q in ids)}
    d_task = [d_mean[i] * len(ids) / (len(sizes) * sizes[types[q]]) for i, q in enumerate(ids)]
    boot = stratified_bootstrap([d_mean, d_major, d_task], [types[q] for q in ids], n_resamples, seed, confidence)

    def group(members: list[int], intervals: tuple[Interval, ...], overall: bool) -> PairedGroup:
        chosen = [ids[i] for i in members]
        mean_difference = _mean([d_mean[i] for i in members])
        return PairedGroup(
            n_questions=len(chosen),
            mean_difference=mean_difference,
            mean_interval=intervals[0],
            majority_difference=_mean([d_major[i] for i in members]),
            majority_interval=intervals[1],
            gained=tuple(q for q in chosen if major_b[q] and not major_a[q]),
            lost=tuple(q for q in chosen if major_a[q] and not major_b[q]),
            more_runs=tuple(q for q in chosen if mean_b[q] > mean_a[q]),
            fewer_runs=tuple(q for q in chosen if mean_b[q] < mean_a[q]),
            task_averaged_difference=_mean([d_task[i] for i in members]) if overall else mean_difference,
            task_averaged_interval=intervals[2] if overall else intervals[0],
        )

    per_type = {
        t: group([i for i, q in enumerate(ids) if types[q] == t], boot.per_stratum[t], False) for t in boot.per_stratum
    }
    overall = group(list(range(len(ids))), boot.overall, True)
    return PairedComparison(n_resamples, seed, confidence, overall, per_type)


def accuracy_intervals(
    runs: Sequence[Mapping[str, bool]],
    types: Mapping[str, str],
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    confidence: float = 0.95,
) -> BootstrapIntervals:
    """Stratified-bootstrap intervals of one design's mean-of-runs and majority accuracy
    (measure 0 and 1), overall and per type."""
    ids = sorted(types)
    means = question_means(runs, ids)
    majority = majority_correct(runs, ids)
    return stratified_bootstrap(
        [[means[q] for q in ids], [float(majority[q]) for q in ids]], [types[q] for q in ids], n_resamples, seed,
        confidence,
    )


# --- per-step (re-read) table -------------------------------------------------------------------
# Outcome rows are the journal's dicts. A row's `steps` (when present) lists the first pass and then
# one entry per configured rule, in order: {"rule", "view", "chosen", "reread", "failed", "answer",
# "correct", "reader", "judge", ...}; a row without `steps` had one pass and no re-read.

_CALL_FIELDS = ("calls", "cached_calls", "failed_calls", "input_tokens", "output_tokens", "cost_usd", "spent_usd",
                "unpriced_calls", "cached_input_tokens", "cached_input_at_input_price")


def row_steps(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The row's steps; a row without them is one first pass with the row's answer and verdict."""
    steps = row.get("steps")
    if steps:
        return list(steps)
    return [{
        "rule": "first_pass", "view": None, "chosen": True, "reread": False, "failed": False,
        "answer": row.get("answer"), "correct": row.get("correct"),
        "reader": row.get("reader") or {}, "judge": row.get("judge") or {},
    }]


def _verdicts_after_steps(steps: Sequence[Mapping[str, Any]], n_steps: int) -> list[bool]:
    """The verdict after each of `n_steps` steps: a step without a verdict (not chosen, not judged)
    keeps the one before; an answer that is missing after a step is wrong."""
    verdicts, current = [], False
    for index in range(n_steps):
        if index < len(steps):
            step = steps[index]
            if step.get("correct") is not None:
                current = bool(step["correct"])
            if "answer" in step and step["answer"] is None:
                current = False
        verdicts.append(current)
    return verdicts


@dataclass(frozen=True)
class StepMeasures:
    """One step of a design over its runs. Counts of answers are question-runs (summed over runs)."""

    index: int
    rule: str
    label: str  # the rule, numbered when it runs more than once ("decline", "decline (2)")
    view: str | None
    questions_chosen: int  # distinct questions the rule chose in at least one run
    chosen: int  # question-runs the rule chose
    reread: int  # question-runs re-read
    failed: int  # re-reads that failed (the earlier answer kept)
    mean_accuracy: float  # mean over runs of the accuracy after this step
    majority_count: int  # questions correct in a majority of runs after this step
    majority_accuracy: float
    fixed: int | None  # question-runs wrong before this step and right after (None for the first pass)
    broken: int | None  # question-runs right before this step and wrong after
    reader_calls: int
    reader_cost_usd: float
    judge_cost_usd: float


def has_rereads(runs: Sequence[Sequence[Mapping[str, Any]]]) -> bool:
    """Whether any row of any run records a step after the first pass."""
    return any(len(row_steps(row)) > 1 for rows in runs for row in rows)


def step_table(runs: Sequence[Sequence[Mapping[str, Any]]], question_ids: Sequence[str]) -> list[StepMeasures]:
    """Per step (first pass, then each rule in configured order): questions chosen, answers re-read,
    mean and majority accuracy after the step, answers fixed and broken, reader calls and cost.
    A question a run lacks counts as wrong after every step."""
    from lme.util.errors import LmeError

    ids = list(question_ids)
    by_run = [{row["question_id"]: row_steps(row) for row in rows} for rows in runs]
    n_steps = max((len(steps) for run in by_run for steps in run.values()), default=1)
    names: list[tuple[str, Any]] = []
    for index in range(n_steps):
        owners = [(q, steps[index]) for run in by_run for q, steps in run.items() if index < len(steps)]
        first_q, first = owners[0]
        for q, step in owners:
            if step.get("rule") != first.get("rule"):
                raise LmeError(
                    f"question {q}: step {index} is rule {step.get('rule')!r} but question {first_q} has "
                    f"{first.get('rule')!r} there; the runs of one design must share one rule order."
                )
        names.append((str(first.get("rule")), first.get("view")))

    verdicts = [{q: _verdicts_after_steps(run.get(q, []), n_steps) for q in ids} for run in by_run]
    need = majority_threshold(len(runs))
    table = []
    seen: dict[str, int] = {}
    for index, (rule, view) in enumerate(names):
        seen[rule] = seen.get(rule, 0) + 1
        label = rule if seen[rule] == 1 else f"{rule} ({seen[rule]})"
        present = [(run[q][index], q) for run in by_run for q in ids if q in run and index < len(run[q])]
        after = [{q: verdict[q][index] for q in ids} for verdict in verdicts]
        majority = sum(1 for q in ids if sum(run[q] for run in after) >= need)
        fixed = broken = None
        if index > 0:
            fixed = sum(1 for v in verdicts for q in ids if not v[q][index - 1] and v[q][index])
            broken = sum(1 for v in verdicts for q in ids if v[q][index - 1] and not v[q][index])
        table.append(StepMeasures(
            index=index,
            rule=rule,
            label=label,
            view=None if view is None else str(view),
            questions_chosen=len({q for step, q in present if step.get("chosen", index == 0)}),
            chosen=sum(1 for step, _ in present if step.get("chosen", index == 0)),
            reread=sum(1 for step, _ in present if step.get("reread")),
            failed=sum(1 for step, _ in present if step.get("failed")),
            mean_accuracy=_mean([accuracy(run, ids) for run in after]),
            majority_count=majority,
            majority_accuracy=majority / len(ids) if ids else float("nan"),
            fixed=fixed,
            broken=broken,
            reader_calls=sum(int((step.get("reader") or {}).get("calls", 0)) for step, _ in present),
            reader_cost_usd=sum(float((step.get("reader") or {}).get("cost_usd", 0.0)) for step, _ in present),
            judge_cost_usd=sum(float((step.get("judge") or {}).get("cost_usd", 0.0)) for step, _ in present),
        ))
    return table


# --- cost -----------------------------------------------------------------------------------------


def row_call_totals(row: Mapping[str, Any], part: str) -> dict[str, float]:
    """A row's reader, judge or memory (a model-built memory's) calls, tokens and dollars: summed over its steps
    when it has steps."""
    totals = dict.fromkeys(_CALL_FIELDS, 0.0)
    for step in row_steps(row):
        stats = step.get(part) or {}
        for name in _CALL_FIELDS:
            totals[name] += float(stats.get(name, 0) or 0)
    return totals


@dataclass(frozen=True)
class CostSummary:
    """Calls, tokens and dollars of a design over its runs (list prices: `*_cost_usd`; paid in
    these jobs, cache hits free: `*_spent_usd`)."""

    n_runs: int
    n_answers: int  # question-runs
    missing_answers: int
    reader_calls: int
    reader_cached_calls: int
    reader_failed_calls: int
    reader_input_tokens: int
    reader_output_tokens: int
    mean_input_tokens_per_call: float
    reader_cost_usd: float
    reader_spent_usd: float
    reader_cost_per_answer_usd: float
    judge_calls: int
    judge_input_tokens: int
    judge_cost_usd: float
    judge_spent_usd: float
    unpriced_calls: int  # calls without a price: the dollar figures are then lower bounds
    reader_cached_input_tokens: int = 0  # input tokens the provider served from its prompt cache
    judge_cached_input_tokens: int = 0
    cached_input_at_input_price: int = 0  # cached tokens (reader and judge) priced as input: no cache-read price
    # the reader's calls split by step: the first pass (a row's first step, or a row without steps) and the
    # re-reads (every later step); each pair sums to reader_calls / reader_input_tokens
    first_pass_reader_calls: int = 0
    first_pass_input_tokens: int = 0
    reread_reader_calls: int = 0
    reread_input_tokens: int = 0
    # a model-built memory's calls (rows of journal format 3; none before): calls, list price, paid by the jobs
    memory_calls: int = 0
    memory_cost_usd: float = 0.0
    memory_spent_usd: float = 0.0

    @property
    def first_pass_mean_input_tokens(self) -> float:
        return self.first_pass_input_tokens / self.first_pass_reader_calls if self.first_pass_reader_calls else float("nan")

    @property
    def reread_mean_input_tokens(self) -> float:
        return self.reread_input_tokens / self.reread_reader_calls if self.reread_reader_calls else float("nan")


def step_reader_split(row: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
    """A row's reader (calls, input tokens) on its first pass and on its re-reads (every later step)."""
    steps = row_steps(row)

    def of(step: Mapping[str, Any]) -> tuple[int, int]:
        stats = step.get("reader") or {}
        return int(stats.get("calls", 0) or 0), int(stats.get("input_tokens", 0) or 0)

    first = of(steps[0])
    later = [of(step) for step in steps[1:]]
    return first, (sum(c for c, _ in later), sum(t for _, t in later))


def cost_summary(runs: Sequence[Sequence[Mapping[str, Any]]]) -> CostSummary:
    rows = [row for run in runs for row in run]
    reader = [row_call_totals(row, "reader") for row in rows]
    judge = [row_call_totals(row, "judge") for row in rows]
    memory = [row_call_totals(row, "memory") for row in rows]
    split = [step_reader_split(row) for row in rows]

    def total(parts: list[dict[str, float]], name: str) -> float:
        return sum(part[name] for part in parts)

    calls = int(total(reader, "calls"))
    input_tokens = int(total(reader, "input_tokens"))
    reader_cost = total(reader, "cost_usd")
    return CostSummary(
        n_runs=len(runs),
        n_answers=len(rows),
        missing_answers=sum(1 for row in rows if row.get("answer") is None),
        reader_calls=calls,
        reader_cached_calls=int(total(reader, "cached_calls")),
        reader_failed_calls=int(total(reader, "failed_calls")),
        reader_input_tokens=input_tokens,
        reader_output_tokens=int(total(reader, "output_tokens")),
        mean_input_tokens_per_call=input_tokens / calls if calls else float("nan"),
        reader_cost_usd=reader_cost,
        reader_spent_usd=total(reader, "spent_usd"),
        reader_cost_per_answer_usd=reader_cost / len(rows) if rows else float("nan"),
        judge_calls=int(total(judge, "calls")),
        judge_input_tokens=int(total(judge, "input_tokens")),
        judge_cost_usd=total(judge, "cost_usd"),
        judge_spent_usd=total(judge, "spent_usd"),
        unpriced_calls=int(total(reader, "unpriced_calls") + total(judge, "unpriced_calls")
                           + total(memory, "unpriced_calls")),
        reader_cached_input_tokens=int(total(reader, "cached_input_tokens")),
        judge_cached_input_tokens=int(total(judge, "cached_input_tokens")),
        cached_input_at_input_price=int(total(reader, "cached_input_at_input_price")
                                        + total(judge, "cached_input_at_input_price")),
        first_pass_reader_calls=sum(first[0] for first, _ in split),
        first_pass_input_tokens=sum(first[1] for first, _ in split),
        reread_reader_calls=sum(later[0] for _, later in split),
        reread_input_tokens=sum(later[1] for _, later in split),
        memory_calls=int(total(memory, "calls")),
        memory_cost_usd=total(memory, "cost_usd"),
        memory_spent_usd=total(memory, "spent_usd"),
    )


def locomo_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """LoCoMo's measures of a job from its outcome rows (those with a `category`, i.e. LoCoMo questions; none:
    `{}`): `locomo.f1` (the mean F1 over every question, adversarial included, as LoCoMo's own stats line
    "Overall accuracy" pools them, but unrounded: LoCoMo rounds each score to 3 places first, see
    `lme.reporting.locomo_f1.locomo_stats`), `locomo.f1_without_adversarial` (categories 1-4),
    `locomo.f1.<category name>` per category present, and the judge's accuracy over categories 1-4 as
    `locomo.j_without_adversarial` (J, the figure Mem0-style papers report; a missing answer or verdict is
    wrong). A mean over no question is left out."""
    from lme.reporting.locomo_f1 import category_name, f1_summary

    scored = [row for row in rows if row.get("category")]  # 0 or absent: not a LoCoMo question
    if not scored:
        return {}
    summary = f1_summary((row["category"], float(row.get("locomo_f1") or 0.0)) for row in scored)
    metrics: dict[str, float] = {}
    if summary["overall"]["mean"] is not None:
        metrics["locomo.f1"] = summary["overall"]["mean"]
    if summary["overall_without_adversarial"]["mean"] is not None:
        metrics["locomo.f1_without_adversarial"] = summary["overall_without_adversarial"]["mean"]
    metrics |= {f"locomo.f1.{name}": part["mean"] for name, part in summary["per_category"].items()}
    judged = [bool(row.get("correct")) and row.get("answer") is not None and not row.get("judge_error")
              for row in scored if category_name(row["category"]) != "adversarial"]
    if judged:
        metrics["locomo.j_without_adversarial"] = sum(judged) / len(judged)
    return metrics
