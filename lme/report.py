"""The design-vs-design report: assemble every measure from the jobs' outcome rows, render it.

Pure: the inputs are `DesignRuns` (one design's jobs with their `outcomes.jsonl` rows, read from
MLflow by `lme.report_source`); the output is a `Report`, rendered as Markdown
(`render_markdown`) or as one JSON object (`report_json`). Plots are `lme.plots`; the command
is `lme.cli.report`.

Conventions, stated in every report:
- a missing or failed answer counts as wrong (LongMemEval's own scripts silently drop a
  question without a hypothesis, so their accuracy is over the answered questions only);
- "mean of runs" is the mean over runs (seeds) of each run's accuracy; "correct in >=2 of 3"
  counts the questions correct in at least a majority of the runs;
- a paired comparison "B - A" uses the questions both designs ran; its 95% interval comes from a
  stratified bootstrap (questions resampled within each question type, seeded); gained / lost
  are questions B gets right in a majority of its runs and A does not / the reverse;
- plain accuracy is correct answers over questions (LongMemEval's "Overall Accuracy"); the
  task-averaged accuracy is the unweighted mean of the per-type accuracies, abstention
  questions counted in their base type (LongMemEval's "Task-averaged Accuracy"). Mastra's
  LongMemEval runner prints the task-averaged number as its "Overall Accuracy" ("average of
  N question types"), so a published Mastra score compares with the task-averaged column.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lme.errors import LmeError
from lme.measures import (
    DEFAULT_BOOTSTRAP_SEED,
    DEFAULT_RESAMPLES,
    BootstrapIntervals,
    CostSummary,
    DesignSummary,
    Interval,
    PairedComparison,
    PairedGroup,
    StepMeasures,
    accuracy_intervals,
    cost_summary,
    has_rereads,
    paired_difference,
    step_table,
    summarise_design,
    type_order,
)

MASTRA_NOTE = (
    "Plain accuracy is correct answers over all questions (LongMemEval's \"Overall Accuracy\"). "
    "Task-averaged accuracy is the unweighted mean of the per-type accuracies over the question types "
    "present, abstention questions counted in their base type (LongMemEval's \"Task-averaged Accuracy\"). "
    "Mastra's LongMemEval runner (mastra repository, explorations/longmemeval, `calculateMetrics`) reports "
    "this task-averaged mean as its \"Overall Accuracy\" (\"average of N question types\"), over the "
    "questions it evaluated: compare a published Mastra score with the task-averaged column, not the plain one."
)
HEADLINE_NOTE = (
    "Mean of runs: the mean over runs (seeds) of each run's accuracy. Correct in {majority}: questions correct in "
    "at least a majority of the runs."
)
PAIRS_NOTE = (
    "Differences in points with 95% intervals from {resamples:,} stratified bootstrap resamples of the questions "
    "within each question type (seed {seed}). Gained / lost: questions correct in {majority} under the second "
    "design and not the first / the reverse."
)
STEPS_NOTE = (
    "Per step (the first pass, then each rule in its configured order): questions the rule chose in any run; "
    "answers re-read, failed re-reads (the earlier answer kept), fixed (wrong before the step, right after) and "
    "broken (the reverse) are counted over question-runs; accuracy after each step."
)
COST_NOTE = (
    "Totals over each design's runs at list price (cached calls included); reader cost per answer is the reader "
    "cost over question-runs; mean input tokens per reader call. Cached input tokens (reader and judge, share of "
    "their input tokens) are those the provider reported serving from its prompt cache; they are priced at the "
    "model's cache-read price where litellm's cost map (or the model's config) has one, else at the input price, "
    "as the last column says."
)
MISSING_NOTE = (
    "A missing or failed answer counts as wrong. LongMemEval's own scripts silently drop a question "
    "without a hypothesis, so their accuracy is over the answered questions only."
)


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobOutcomes:
    """One job (seed) of a design: its MLflow run and its per-question outcome rows."""

    run_id: str
    run_name: str
    seed: str
    judge: str
    judge_official: bool
    rows: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class DesignRuns:
    """One design's jobs as selected for the report (usually the children of one parent run)."""

    label: str  # unique within the report
    design: str  # the jobs' `lme.design` tag
    source_id: str  # the parent run's id (or the job's, for a lone run)
    source_name: str
    jobs: tuple[JobOutcomes, ...]
    notes: tuple[str, ...] = ()  # e.g. jobs left out because they did not finish
    data: str | None = None  # what the jobs ran on, in words ("8 questions of dataset s (data sha256 ...)")
    questions_digest: str | None = None  # one digest of the data file's SHA-256 and the question ids


def correct_map(rows: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """Question id -> correct; a missing answer is wrong whatever the verdict says."""
    return {row["question_id"]: bool(row.get("correct")) and row.get("answer") is not None for row in rows}


def design_questions(design: DesignRuns) -> tuple[dict[str, str], set[str]]:
    """The design's questions (the union over its jobs) with their types, and the abstention ids."""
    types: dict[str, str] = {}
    abstention: set[str] = set()
    for job in design.jobs:
        for row in job.rows:
            types.setdefault(row["question_id"], row["question_type"])
            if row.get("abstention") or "_abs" in row["question_id"]:
                abstention.add(row["question_id"])
    return types, abstention


# --- the assembled report -----------------------------------------------------------------------


@dataclass(frozen=True)
class DesignReport:
    label: str
    design: str
    source_id: str
    source_name: str
    seeds: tuple[str, ...]
    run_ids: tuple[str, ...]
    judges: tuple[tuple[str, bool], ...]  # distinct (judge name, official) over the jobs
    summary: DesignSummary
    intervals: BootstrapIntervals  # measure 0: mean of runs, 1: majority; overall and per type
    missing_answers: tuple[int, ...]  # per run
    runs_cover_different_questions: bool
    steps: tuple[StepMeasures, ...] | None  # None without re-reads
    cost: CostSummary
    notes: tuple[str, ...]
    data: str | None = None
    questions_digest: str | None = None

    @property
    def official(self) -> bool:
        return bool(self.judges) and all(official for _, official in self.judges)


@dataclass(frozen=True)
class PairReport:
    a: str
    b: str  # the difference is b - a
    n_common: int
    only_a: int
    only_b: int
    comparison: PairedComparison | None  # None when the two designs share no question


@dataclass(frozen=True)
class Report:
    designs: tuple[DesignReport, ...]
    pairs: tuple[PairReport, ...]
    n_resamples: int
    bootstrap_seed: int
    notes: tuple[str, ...] = field(default=())
    data: str | None = None  # the questions every design ran on, in words; None when they differ or are unknown

    def design(self, label: str) -> DesignReport:
        return next(d for d in self.designs if d.label == label)


def parse_pairs(text: str, labels: Sequence[str]) -> list[tuple[str, str]]:
    """`"a:b,c:d"` -> [(a, b), (c, d)]; each pair reads "from a to b" (difference b - a)."""
    pairs = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        a, sep, b = part.partition(":")
        if not sep or not a or not b:
            raise LmeError(f"--pairs expects A:B[,A:B...] (difference B - A), got {part!r}.")
        for name in (a, b):
            if name not in labels:
                raise LmeError(
                    f"--pairs names design {name!r}, which is not in this report (designs: {', '.join(labels)})."
                )
        pairs.append((a, b))
    return pairs


def all_pairs(labels: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair in report order: (earlier, later), difference later - earlier."""
    return [(labels[i], labels[j]) for i in range(len(labels)) for j in range(i + 1, len(labels))]


def design_report(design: DesignRuns, n_resamples: int, seed: int) -> DesignReport:
    if not design.jobs:
        raise LmeError(f"design {design.label}: no finished job with outcomes to report on.")
    types, abstention = design_questions(design)
    runs_rows = [list(job.rows) for job in design.jobs]
    runs = [correct_map(rows) for rows in runs_rows]
    question_sets = {frozenset(row["question_id"] for row in rows) for rows in runs_rows}
    judges = tuple(sorted({(job.judge, job.judge_official) for job in design.jobs}))
    return DesignReport(
        label=design.label,
        design=design.design,
        source_id=design.source_id,
        source_name=design.source_name,
        seeds=tuple(job.seed for job in design.jobs),
        run_ids=tuple(job.run_id for job in design.jobs),
        judges=judges,
        summary=summarise_design(runs, types, abstention),
        intervals=accuracy_intervals(runs, types, n_resamples, seed),
        missing_answers=tuple(
            sum(1 for row in rows if row.get("answer") is None) + len(types) - len(rows) for rows in runs_rows
        ),
        runs_cover_different_questions=len(question_sets) > 1,
        steps=tuple(step_table(runs_rows, list(types))) if has_rereads(runs_rows) else None,
        cost=cost_summary(runs_rows),
        notes=design.notes,
        data=design.data,
        questions_digest=design.questions_digest,
    )


def pair_report(a: DesignRuns, b: DesignRuns, n_resamples: int, seed: int) -> PairReport:
    types_a, _ = design_questions(a)
    types_b, _ = design_questions(b)
    common = {q: t for q, t in types_a.items() if q in types_b}
    comparison = None
    if common:
        runs_a = [correct_map(job.rows) for job in a.jobs]
        runs_b = [correct_map(job.rows) for job in b.jobs]
        comparison = paired_difference(runs_a, runs_b, common, n_resamples, seed)
    return PairReport(a.label, b.label, len(common), len(types_a) - len(common), len(types_b) - len(common), comparison)


def build_report(
    designs: Sequence[DesignRuns],
    pairs: Sequence[tuple[str, str]] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    notes: Sequence[str] = (),
) -> Report:
    """Every measure for `designs`; `pairs` (default: every pair) are (a, b) labels, difference b - a;
    `notes` (e.g. the runs the selection left out, and why) are stated first."""
    labels = [d.label for d in designs]
    if len(set(labels)) != len(labels):
        raise LmeError(f"two designs in the report share a label ({', '.join(labels)}).")
    by_label = {d.label: d for d in designs}
    chosen = all_pairs(labels) if pairs is None else list(pairs)
    notes = list(notes)
    digests = {d.questions_digest for d in designs}
    same = len(digests) == 1 and None not in digests
    data = designs[0].data if same and designs else None
    if same and designs:
        notes.insert(0, f"Every design ran on the same questions: {data}.")
    judges = {(job.judge, job.judge_official) for d in designs for job in d.jobs}
    if len(judges) > 1:
        notes.append(
            "The designs were not all judged by the same judge: comparisons across judges are not like-for-like."
        )
    return Report(
        designs=tuple(design_report(d, n_resamples, seed) for d in designs),
        pairs=tuple(pair_report(by_label[a], by_label[b], n_resamples, seed) for a, b in chosen),
        n_resamples=n_resamples,
        bootstrap_seed=seed,
        notes=tuple(notes),
        data=data,
    )


# --- Markdown -----------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def _pts(value: float) -> str:
    """A difference in points, signed, one decimal; never "-0.0"."""
    if math.isnan(value):
        return "-"
    points = round(100 * value, 1)
    return f"{points + 0.0:+.1f}" if points != 0 else "+0.0"


def _interval(interval: Interval) -> str:
    if math.isnan(interval.low):
        return "-"
    return f"[{_pts(interval.low)}, {_pts(interval.high)}]"


def _usd(value: float) -> str:
    return f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---" if a == "l" else "--:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def majority_name(report: Report) -> str:
    """">=2 of 3" when every design has the same number of runs, else "majority of runs"."""
    shapes = {(d.summary.threshold, d.summary.n_runs) for d in report.designs}
    if len(shapes) == 1:
        need, runs = shapes.pop()
        return f">={need} of {runs}"
    return "majority of runs"


def judge_lines(report: Report) -> list[str]:
    official = [d.label for d in report.designs if d.official]
    lines = []
    if official:
        names = sorted({name for d in report.designs if d.official for name, _ in d.judges})
        lines.append(
            f"- Judge: the LongMemEval judge ({', '.join(names)}: gpt-4o-2024-08-06 with the official templates) "
            f"for {', '.join(official)}."
        )
    stand_ins: dict[str, list[str]] = {}
    for d in report.designs:
        for name, is_official in d.judges:
            if not is_official:
                stand_ins.setdefault(name, []).append(d.label)
    for name, labels in stand_ins.items():
        lines.append(
            f"- Judge: the offline stand-in {name} for {', '.join(labels)}, NOT the LongMemEval judge; "
            "its verdicts test the plumbing and are not LongMemEval results."
        )
    return lines


def _sources(report: Report) -> str:
    rows = []
    for d in report.designs:
        seeds = ", ".join(d.seeds)
        rows.append([d.label, d.design, f"{d.source_name} ({d.source_id})", str(d.summary.n_runs), seeds,
                     str(d.summary.n_questions), d.data or "-"])
    return _table(["design", "lme.design", "MLflow run", "runs", "seeds", "questions", "ran on"], rows, "lllrlrl")


def headline_table(report: Report) -> str:
    majority = majority_name(report)
    rows = []
    for d in report.designs:
        s = d.summary
        counts = ", ".join(str(c) for c in s.run_correct_counts)
        rows.append([
            d.label, _pct(s.mean_accuracy), f"{_pct(s.majority_accuracy)} ({s.majority_count}/{s.n_questions})",
            f"{counts} of {s.n_questions}",
        ])
    return _table(["design", "mean of runs", f"correct in {majority}", "per-run correct"], rows)


def averages_table(report: Report) -> str:
    majority = majority_name(report)
    rows = []
    for d in report.designs:
        s = d.summary
        abstention = "-" if not s.n_abstention else f"{_pct(s.mean_abstention)} (n={s.n_abstention})"
        rows.append([d.label, _pct(s.mean_accuracy), _pct(s.mean_task_averaged), _pct(s.majority_accuracy),
                     _pct(s.majority_task_averaged), abstention])
    header = ["design", "plain accuracy, mean of runs", "task-averaged (Mastra-style average), mean of runs",
              f"plain, {majority}", f"task-averaged, {majority}", "abstention, mean of runs"]
    return _table(header, rows)


def _types_in(report: Report) -> list[str]:
    names = {t for d in report.designs for t in d.summary.type_counts}
    return sorted(names, key=type_order)


def per_type_table(report: Report) -> str:
    majority = majority_name(report)
    header = ["question type"]
    for d in report.designs:
        header += [f"{d.label}: n", f"{d.label}: mean of runs", f"{d.label}: {majority}"]
    rows = []
    for t in _types_in(report):
        row = [t]
        for d in report.designs:
            s = d.summary
            if t in s.type_counts:
                row += [str(s.type_counts[t]), _pct(s.mean_per_type[t]), _pct(s.majority_per_type[t])]
            else:
                row += ["0", "-", "-"]
        rows.append(row)
    return _table(header, rows)


def _pair_row(name: str, group: PairedGroup) -> list[str]:
    return [name, str(group.n_questions), _pts(group.mean_difference), _interval(group.mean_interval),
            _pts(group.majority_difference), _interval(group.majority_interval), str(len(group.gained)),
            str(len(group.lost))]


def pair_section(report: Report, pair: PairReport) -> str:
    majority = majority_name(report)
    title = f"### {pair.b} vs {pair.a} (difference = {pair.b} - {pair.a}, in points)"
    if pair.comparison is None:
        return f"{title}\n\nNo question in common: nothing to compare."
    c = pair.comparison
    header = ["group", "questions", "mean of runs", "95% interval", majority, "95% interval", "gained", "lost"]
    rows = [_pair_row("all", c.overall)] + [_pair_row(t, g) for t, g in c.per_type.items()]
    lines = [title, "", _table(header, rows)]
    if pair.only_a or pair.only_b:
        lines.append(
            f"\nCompared on the {pair.n_common} questions both designs ran ({pair.only_a} only in {pair.a}, "
            f"{pair.only_b} only in {pair.b})."
        )
    return "\n".join(lines)


def steps_section(design: DesignReport, majority: str) -> str:
    assert design.steps is not None
    header = ["step", "rule", "view", "questions chosen", "answers re-read", "failed", "mean after",
              f"{majority} after", "fixed", "broken", "reader calls", "reader cost"]
    rows = []
    for s in design.steps:
        rows.append([
            str(s.index), s.label, s.view or "-", str(s.questions_chosen), str(s.reread), str(s.failed),
            _pct(s.mean_accuracy), f"{_pct(s.majority_accuracy)} ({s.majority_count})",
            "-" if s.fixed is None else str(s.fixed), "-" if s.broken is None else str(s.broken),
            str(s.reader_calls), _usd(s.reader_cost_usd),
        ])
    return f"### {design.label}\n\n" + _table(header, rows, "rllrrrrrrrrr")


def cached_input_cells(c: CostSummary) -> tuple[str, str]:
    """The cost table's "cached input tokens" (count and share of input) and "cached input priced at" cells."""
    cached = c.reader_cached_input_tokens + c.judge_cached_input_tokens
    if not cached:
        return "0", "-"
    total = c.reader_input_tokens + c.judge_input_tokens
    share = f" ({100 * cached / total:.1f}%)" if total else ""
    at_input = c.cached_input_at_input_price
    basis = "cache-read price" if not at_input else "input price" if at_input >= cached else (
        f"cache-read price, input price for {at_input:,}"
    )
    return f"{cached:,}{share}", basis


def cost_table(report: Report) -> str:
    header = ["design", "runs", "answers", "reader calls", "mean input tokens / call", "reader cost", "judge cost",
              "reader cost / answer", "cached input tokens", "cached input priced at"]
    rows = []
    for d in report.designs:
        c = d.cost
        tokens = "-" if math.isnan(c.mean_input_tokens_per_call) else f"{c.mean_input_tokens_per_call:,.0f}"
        rows.append([d.label, str(c.n_runs), str(c.n_answers), str(c.reader_calls), tokens, _usd(c.reader_cost_usd),
                     _usd(c.judge_cost_usd), _usd(c.reader_cost_per_answer_usd), *cached_input_cells(c)])
    return _table(header, rows, "l" + "r" * 8 + "l")


def render_markdown(report: Report) -> str:
    majority = majority_name(report)
    missing = [
        f"{d.label} seed {seed}: {n}" for d in report.designs for seed, n in zip(d.seeds, d.missing_answers) if n
    ]
    out = ["# lme report", "", _sources(report), ""]
    out += judge_lines(report)
    out.append(f"- {MISSING_NOTE} Missing answers here: {'; '.join(missing) if missing else 'none'}.")
    for d in report.designs:
        if d.runs_cover_different_questions:
            out.append(
                f"- {d.label}: its runs did not all answer the same questions; a question a run lacks counts as wrong."
            )
        out += [f"- {d.label}: {note}" for note in d.notes]
    out += [f"- {note}" for note in report.notes]
    out += ["", "## Headline", "", headline_table(report), "", HEADLINE_NOTE.format(majority=majority),
            "", "## Plain accuracy and the Mastra-style average", "", averages_table(report), "", MASTRA_NOTE,
            "", "## Per question type", "", per_type_table(report), ""]
    pairs_note = PAIRS_NOTE.format(resamples=report.n_resamples, seed=report.bootstrap_seed, majority=majority)
    out += ["## Paired comparisons", "", pairs_note, ""]
    if not report.pairs:
        out += ["One design only: nothing to compare.", ""]
    for pair in report.pairs:
        out += [pair_section(report, pair), ""]
    with_steps = [d for d in report.designs if d.steps]
    if with_steps:
        out += ["## Re-read steps", "", STEPS_NOTE, ""]
        for d in with_steps:
            out += [steps_section(d, majority), ""]
    out += ["## Cost", "", cost_table(report), "", COST_NOTE]
    unpriced = [f"{d.label}: {d.cost.unpriced_calls}" for d in report.designs if d.cost.unpriced_calls]
    if unpriced:
        out.append(f"Calls without a price (costs are lower bounds): {'; '.join(unpriced)}.")
    return "\n".join(out).rstrip() + "\n"


# --- JSON ---------------------------------------------------------------------------------------


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def report_json(report: Report) -> dict[str, Any]:
    """The whole report as plain JSON values (shares, not percentages; NaN as null)."""
    designs = []
    for d in report.designs:
        entry = asdict(d)
        entry["official_judge"] = d.official
        entry["judges"] = [{"name": name, "official": official} for name, official in d.judges]
        designs.append(entry)
    return _json_safe({
        "n_resamples": report.n_resamples,
        "bootstrap_seed": report.bootstrap_seed,
        "conventions": {"missing_answers": MISSING_NOTE, "averages": MASTRA_NOTE},
        "notes": list(report.notes),
        "data": report.data,
        "designs": designs,
        "pairs": [asdict(p) for p in report.pairs],
    })
