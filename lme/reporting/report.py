"""The design-vs-design report: assemble every measure from the jobs' outcome rows, render it.

Pure: the inputs are `DesignRuns` (one design's jobs with their `outcomes.jsonl` rows, read from
MLflow by `lme.tracking.report_source`); the output is a `Report`, rendered as Markdown
(`render_markdown`) or as one JSON object (`report_json`). Plots are `lme.reporting.plots`; the command
is `lme.cli.report`.

Conventions, stated in every report:
- a missing or failed answer counts as wrong (LongMemEval's own scripts silently drop a
  question without a hypothesis, so their accuracy is over the answered questions only);
- "mean of runs" is the mean over runs (seeds) of each run's accuracy; "correct in >=2 of 3"
  counts the questions correct in at least a majority of the runs;
- a paired comparison "B - A" uses the questions both designs ran; its 95% interval comes from a
  stratified bootstrap (questions resampled within each question type, seeded); gained / lost
  are questions B gets right in a majority of its runs and A does not / the reverse; on the
  mean of runs, "more runs" / "fewer runs" are questions B gets right in more / fewer of its
  runs than A;
- when the runs carry a preregistration record (their `lme.prereg_sha256` tag), the report opens
  with the record's primary measure for its design, and the planned comparisons' differences,
  whatever they scored (`Preregistration`, given by the command, which reads the records);
- plain accuracy is correct answers over questions (LongMemEval's "Overall Accuracy"); the
  task-averaged accuracy is the unweighted mean of the per-type accuracies, abstention
  questions counted in their base type (LongMemEval's "Task-averaged Accuracy"). Mastra's
  LongMemEval runner prints the task-averaged number as its "Overall Accuracy" ("average of
  N question types"), so a published Mastra score compares with the task-averaged column;
- memory systems (`lme.memory.systems`) and lme's own designs share one table (`systems_table`): accuracy,
  dollars per question (answering at list price, reader and memory calls, plus a memory system's ingestion
  counted once per history and spread over the questions: `lme.reporting.system_measures`), and for a memory
  system its ingestion (time, calls, dollars, what the system reported) and search latency p50/p95 ("—" for a
  design that is not a memory system); the plot `accuracy_vs_cost.png` draws the same;
- a report over LoCoMo runs opens with LoCoMo's own figures (J without the adversarial category, F1 as LoCoMo's
  evaluation.py scores it, each per category, and their paired differences between designs: `locomo_section`),
  before lme's accuracy tables; a report never mixes LoCoMo and LongMemEval runs (`build_report` refuses).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lme.util.errors import LmeError
from lme.judge import JudgeLabel, recorded_judge
from lme.reporting.measures import (
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
from lme.models.offline import stand_ins_note
from lme.reporting.locomo_f1 import CATEGORY_NAMES
from lme.reporting.system_measures import QuestionCost, SystemSummary, question_cost, system_summary
from lme.reporting.locomo_measures import (
    ADVERSARIAL,
    LocomoAcross,
    LocomoPaired,
    is_locomo,
    locomo_across_runs,
    locomo_paired,
)

LOCOMO_CATEGORY_ORDER = tuple(CATEGORY_NAMES[n] for n in sorted(CATEGORY_NAMES))  # LoCoMo's numbers, 1-5
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
    "design and not the first / the reverse. More runs / fewer runs (the mean of runs): questions the second design "
    "gets right in more / fewer of its runs than the first (compared as shares of runs when the designs have "
    "different numbers of runs)."
)
PRIMARY_NOTE = (
    "Stated first because the runs carry a preregistration record (their lme.prereg_sha256 tag): its primary "
    "measure and planned comparisons, whatever they scored."
)
STEPS_NOTE = (
    "Per step (the first pass, then each rule in its configured order): questions the rule chose in any run; "
    "answers re-read, failed re-reads (the earlier answer kept), fixed (wrong before the step, right after) and "
    "broken (the reverse) are counted over question-runs; accuracy after each step."
)
COST_NOTE = (
    "Totals over each design's runs at list price (cached calls included); reader cost per answer is the reader "
    "cost over question-runs; mean input tokens per reader call. The reader's calls and input tokens are split "
    "into the first pass and the re-reads (every step after it; the two sum to the totals). Cached input tokens (reader and judge, share of "
    "their input tokens) are those the provider reported serving from its prompt cache; they are priced at the "
    "model's cache-read price where litellm's cost map (or the model's config) has one, else at the input price, "
    "as the last column says. A design whose memory is written by a model (a model-built memory) has a "
    "memory-model column: those calls at list price, served from the cache or not."
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
    prereg_sha256: str | None = None  # the job's `lme.prereg_sha256` tag: the record it was checked against
    stand_ins: tuple[str, ...] = ()  # the offline stand-ins that answered or judged (its `reader.model`, `judge.model`)
    judge_model: str | None = None  # its param `judge.model` (None: not logged)

    @property
    def judge_label(self) -> JudgeLabel:
        """Its judge in words: the LongMemEval judge only with LongMemEval's templates on the protocol's model."""
        return recorded_judge(self.judge, self.judge_official, self.judge_model)


@dataclass(frozen=True)
class Preregistration:
    """A preregistration record as the report needs it (plain values; `lme.cli.report` reads the record
    with `lme.provenance.prereg.load_record` and `prereg_facts`). `found` is False when runs carry the digest but
    no record file with it was found: then only the digest is known."""

    record_sha256: str
    found: bool = True
    path: str | None = None
    design_name: str | None = None
    primary: str | None = None
    comparisons: tuple[tuple[str, str], ...] = ()  # (design, baseline): the difference is design - baseline
    seeds: tuple[int, ...] = ()
    frozen_at: str | None = None  # ISO time, UTC
    written_after_first_run: bool = False  # the record is later than the first run of its design
    first_run_at: str | None = None


@dataclass(frozen=True)
class DesignRuns:
    """One design's jobs as selected for the report (usually the children of one parent run)."""

    label: str  # unique within the report
    design: str  # the jobs' `lme.config.design` tag
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
    judges: tuple[JudgeLabel, ...]  # the distinct judges of its jobs
    summary: DesignSummary
    intervals: BootstrapIntervals  # measure 0: mean of runs, 1: majority; overall and per type
    missing_answers: tuple[int, ...]  # per run
    runs_cover_different_questions: bool
    steps: tuple[StepMeasures, ...] | None  # None without re-reads
    cost: CostSummary
    notes: tuple[str, ...]
    data: str | None = None
    questions_digest: str | None = None
    locomo: LocomoAcross | None = None  # LoCoMo runs: their J and F1 over the runs (None: LongMemEval)
    system: SystemSummary | None = None  # a memory system's ingestion and search over the runs (None: not one)
    per_question: QuestionCost | None = None  # dollars per question (answering, plus a system's ingestion)

    @property
    def official(self) -> bool:
        return bool(self.judges) and all(judge.official for judge in self.judges)


@dataclass(frozen=True)
class PairReport:
    a: str
    b: str  # the difference is b - a
    n_common: int
    only_a: int
    only_b: int
    comparison: PairedComparison | None  # None when the two designs share no question
    locomo: LocomoPaired | None = None  # LoCoMo runs: b - a on J without adversarial and on F1


@dataclass(frozen=True)
class PrimaryComparison:
    """A planned comparison on the primary measure: design - baseline, in shares (x100 for points)."""

    design: str  # report labels
    baseline: str
    n_questions: int = 0
    difference: float = float("nan")
    interval: Interval | None = None  # None when this measure has no paired interval (abstention)
    missing: str | None = None  # why it could not be computed (a design not in the report, no common question)


@dataclass(frozen=True)
class PrimaryStatement:
    """What the report states first for one preregistration record: its primary measure, whatever it scored."""

    record_sha256: str
    found: bool
    path: str | None
    primary: str | None
    measure_words: str | None  # the measure in words ("correct in >=2 of 3 runs")
    design: str | None  # the report label of the record's design (None: not in the report)
    record_design: str | None
    value: float = float("nan")
    detail: str | None = None  # e.g. "5/8 questions" or the per-run values
    seeds_ran: tuple[str, ...] = ()
    seeds_planned: tuple[int, ...] = ()
    tagged_jobs: int = 0  # jobs of the report carrying the record's digest
    untagged_jobs: int = 0  # jobs of the same design that do not
    comparisons: tuple[PrimaryComparison, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    designs: tuple[DesignReport, ...]
    pairs: tuple[PairReport, ...]
    n_resamples: int
    bootstrap_seed: int
    notes: tuple[str, ...] = field(default=())
    data: str | None = None  # the questions every design ran on, in words; None when they differ or are unknown
    primary: tuple[PrimaryStatement, ...] = ()  # one per preregistration record the runs carry, stated first

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
    judges = tuple(sorted({job.judge_label for job in design.jobs}, key=lambda j: (j.name, j.model or "", j.kind)))
    system = system_summary(runs_rows)
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
        locomo=locomo_across_runs(runs_rows),
        system=system,
        per_question=question_cost(runs_rows, len(types), system),
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
    locomo = locomo_paired([job.rows for job in a.jobs], [job.rows for job in b.jobs], n_resamples, seed)
    return PairReport(a.label, b.label, len(common), len(types_a) - len(common), len(types_b) - len(common), comparison,
                      locomo)


# --- the preregistered primary measure ------------------------------------------------------------

_MEASURE_WORDS = {
    "accuracy": "accuracy, mean over the runs",
    "mean_accuracy": "mean of runs",
    "majority_correct_accuracy": "correct in a majority of runs",
    "task_averaged_accuracy": "task-averaged accuracy, mean over the runs",
    "abstention_accuracy": "abstention accuracy, mean over the runs",
}


def measure_words(primary: str, summary: DesignSummary | None = None) -> str:
    """The measure in words: `majority_correct_accuracy.multi-session` -> "correct in >=2 of 3 runs, multi-session"."""
    base, _, question_type = primary.partition(".")
    words = _MEASURE_WORDS.get(base, base)
    if base == "majority_correct_accuracy" and summary is not None:
        words = f"correct in >={summary.threshold} of {summary.n_runs} runs"
    return f"{words}, {question_type} questions" if question_type else words


def primary_value(summary: DesignSummary, primary: str) -> tuple[float, str | None]:
    """The design's value of a preregistered measure (`lme.provenance.prereg.check_measure` names), and a detail in words."""
    base, _, question_type = primary.partition(".")
    if question_type:
        if question_type not in summary.type_counts:
            return float("nan"), f"no {question_type} question in these runs"
        n = summary.type_counts[question_type]
        if base == "majority_correct_accuracy":
            value = summary.majority_per_type[question_type]
            return value, f"{round(value * n)}/{n} questions"
        return summary.mean_per_type[question_type], f"{n} questions"
    if base == "majority_correct_accuracy":
        return summary.majority_accuracy, f"{summary.majority_count}/{summary.n_questions} questions"
    if base == "task_averaged_accuracy":
        return summary.mean_task_averaged, f"{len(summary.type_counts)} question types"
    if base == "abstention_accuracy":
        if not summary.n_abstention:
            return float("nan"), "no abstention question in these runs"
        return summary.mean_abstention, f"{summary.n_abstention} abstention questions"
    runs = ", ".join(_pct(v) for v in summary.run_accuracies)
    return summary.mean_accuracy, f"{summary.n_questions} questions; runs {runs}"


def primary_difference(a: DesignRuns, b: DesignRuns, primary: str, n_resamples: int, seed: int) -> PrimaryComparison:
    """`b - a` on the preregistered measure, on the questions both ran, with its 95% bootstrap interval."""
    base, _, question_type = primary.partition(".")
    pair = pair_report(a, b, n_resamples, seed)
    if pair.comparison is None:
        return PrimaryComparison(b.label, a.label, missing="the two designs share no question")
    c = pair.comparison
    if base == "abstention_accuracy":
        types_a, abstention = design_questions(a)
        ids = [q for q in types_a if q in abstention and q in design_questions(b)[0]]
        if not ids:
            return PrimaryComparison(b.label, a.label, missing="no abstention question in common")
        from lme.reporting.measures import question_means

        mean_a = question_means([correct_map(job.rows) for job in a.jobs], ids)
        mean_b = question_means([correct_map(job.rows) for job in b.jobs], ids)
        return PrimaryComparison(b.label, a.label, len(ids), sum(mean_b[q] - mean_a[q] for q in ids) / len(ids))
    group = c.overall
    if question_type:
        if question_type not in c.per_type:
            return PrimaryComparison(b.label, a.label, missing=f"no {question_type} question in common")
        group = c.per_type[question_type]
    if base == "majority_correct_accuracy":
        return PrimaryComparison(b.label, a.label, group.n_questions, group.majority_difference, group.majority_interval)
    if base == "task_averaged_accuracy":
        return PrimaryComparison(b.label, a.label, group.n_questions, group.task_averaged_difference,
                                 group.task_averaged_interval)
    return PrimaryComparison(b.label, a.label, group.n_questions, group.mean_difference, group.mean_interval)


def primary_statement(
    prereg: Preregistration, designs: Sequence[DesignRuns], reports: Mapping[str, DesignReport], n_resamples: int,
    seed: int,
) -> PrimaryStatement:
    """What the report states first for `prereg`: its primary measure for the design whose jobs carry its
    digest (else, for a record given by hand, the design of its name), and its planned comparisons."""
    tagged = [d for d in designs if any(job.prereg_sha256 == prereg.record_sha256 for job in d.jobs)]
    notes: list[str] = []
    if not prereg.found:
        notes.append("no record file with this digest was found (pass --prereg RECORD): its primary measure "
                     "cannot be stated")
    chosen = tagged[0] if tagged else None
    if len(tagged) > 1:
        notes.append(f"jobs of {len(tagged)} reported designs carry this record ({', '.join(d.label for d in tagged)}); "
                     f"the primary measure is stated for {tagged[0].label}")
    if chosen is None and prereg.design_name:
        chosen = next((d for d in designs if d.design == prereg.design_name), None)
        if chosen is not None:
            notes.append(f"no job in this report carries the record's digest: {chosen.label}'s runs were not checked "
                         "against it and are not its confirmation runs")
    if chosen is None:
        notes.append(f"the record's design {prereg.design_name or '?'} is not in this report")
    if chosen is not None and prereg.design_name and chosen.design != prereg.design_name:
        notes.append(f"the record names design {prereg.design_name}, its runs are tagged {chosen.design}")
    if prereg.written_after_first_run:
        notes.append(f"the record was frozen ({prereg.frozen_at}) after the first run of its design "
                     f"({prereg.first_run_at}): runs before it were not preregistered")
    value, detail, words = float("nan"), None, None
    seeds_ran: tuple[str, ...] = ()
    n_tagged = n_untagged = 0
    if chosen is not None:
        mine = [job for job in chosen.jobs if job.prereg_sha256 == prereg.record_sha256]
        n_tagged, n_untagged = len(mine), len(chosen.jobs) - len(mine)
        seeds_ran = tuple(job.seed for job in (mine or chosen.jobs))
        if mine and n_untagged:
            notes.append(f"{n_untagged} job(s) of {chosen.label} do not carry the record's digest and are counted too")
        if prereg.seeds and sorted(seeds_ran) != sorted(str(s) for s in prereg.seeds):
            notes.append(f"the record planned seeds {', '.join(str(s) for s in prereg.seeds)}; these runs have "
                         f"{', '.join(seeds_ran)}")
        if prereg.primary is not None:
            summary = reports[chosen.label].summary
            value, detail = primary_value(summary, prereg.primary)
            words = measure_words(prereg.primary, summary)
    comparisons = []
    for design_name, baseline_name in prereg.comparisons if prereg.primary is not None else ():
        def find(name: str) -> DesignRuns | None:
            if chosen is not None and chosen.design == name:
                return chosen
            return next((d for d in designs if d.design == name), None)

        target, baseline = find(design_name), find(baseline_name)
        if target is None or baseline is None:
            absent = " and ".join(n for n, d in ((design_name, target), (baseline_name, baseline)) if d is None)
            comparisons.append(PrimaryComparison(design_name, baseline_name, missing=f"{absent} not in this report"))
            continue
        comparisons.append(primary_difference(baseline, target, prereg.primary, n_resamples, seed))
    return PrimaryStatement(
        record_sha256=prereg.record_sha256, found=prereg.found, path=prereg.path, primary=prereg.primary,
        measure_words=words, design=chosen.label if chosen is not None else None, record_design=prereg.design_name,
        value=value, detail=detail, seeds_ran=seeds_ran, seeds_planned=prereg.seeds, tagged_jobs=n_tagged,
        untagged_jobs=n_untagged, comparisons=tuple(comparisons), notes=tuple(notes),
    )


def design_is_locomo(design: DesignRuns) -> bool:
    """Whether the design's jobs answered LoCoMo questions (rows with a category)."""
    return any(is_locomo(job.rows) for job in design.jobs)


def refuse_mixed_benchmarks(designs: Sequence[DesignRuns]) -> None:
    """One sentence when some designs ran LoCoMo and others LongMemEval: their measures do not compare (different
    questions, judges and scores), so a report covers one benchmark."""
    locomo = [d.label for d in designs if design_is_locomo(d)]
    other = [d.label for d in designs if not design_is_locomo(d)]
    if locomo and other:
        raise LmeError(f"a report covers one benchmark, but {', '.join(locomo)} ran LoCoMo and {', '.join(other)} "
                       "ran LongMemEval; report each benchmark's runs separately.")


def build_report(
    designs: Sequence[DesignRuns],
    pairs: Sequence[tuple[str, str]] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    notes: Sequence[str] = (),
    preregistrations: Sequence[Preregistration] = (),
) -> Report:
    """Every measure for `designs`; `pairs` (default: every pair) are (a, b) labels, difference b - a;
    `notes` (e.g. the runs the selection left out, and why) are stated first; each of `preregistrations`
    (the records the runs carry, read by the command) gives a statement of its primary measure, stated
    before anything else."""
    labels = [d.label for d in designs]
    if len(set(labels)) != len(labels):
        raise LmeError(f"two designs in the report share a label ({', '.join(labels)}).")
    refuse_mixed_benchmarks(designs)
    by_label = {d.label: d for d in designs}
    chosen = all_pairs(labels) if pairs is None else list(pairs)
    notes = list(notes)
    digests = {d.questions_digest for d in designs}
    same = len(digests) == 1 and None not in digests
    data = designs[0].data if same and designs else None
    if same and designs:
        notes.insert(0, f"Every design ran on the same questions: {data}.")
    stand_ins = list(dict.fromkeys(model for d in designs for job in d.jobs for model in job.stand_ins))
    if stand_ins:  # said once, first: nothing below is about the designs
        with_them = [d.label for d in designs if any(job.stand_ins for job in d.jobs)]
        which = "" if len(with_them) == len(designs) else f" (the runs of {', '.join(with_them)})"
        notes.insert(0, f"{stand_ins_note(stand_ins)}{which}.")
    judges = {job.judge_label for d in designs for job in d.jobs}
    if len(judges) > 1:
        notes.append(
            "The designs were not all judged by the same judge: comparisons across judges are not like-for-like."
        )
    reports = {d.label: design_report(d, n_resamples, seed) for d in designs}
    return Report(
        designs=tuple(reports.values()),
        pairs=tuple(pair_report(by_label[a], by_label[b], n_resamples, seed) for a, b in chosen),
        n_resamples=n_resamples,
        bootstrap_seed=seed,
        notes=tuple(notes),
        data=data,
        primary=tuple(primary_statement(p, designs, reports, n_resamples, seed) for p in preregistrations),
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
    """One line per kind of judge: LongMemEval's (or the reference study's) on its protocol's model, LongMemEval's
    templates on another model, other templates, the offline stand-in (`lme.judge.describe_judge`)."""
    official = [d.label for d in report.designs if any(judge.official for judge in d.judges)]
    lines = []
    if official:
        models = {"longmemeval": "gpt-4o-2024-08-06, the official protocol",
                  "study": "the gpt-4o alias, 16 tokens, exact yes/no: the reference study's protocol"}
        described = sorted({f"{judge.name}: {models[judge.kind]}" for d in report.designs for judge in d.judges
                            if judge.official})
        lines.append(
            f"- Judge: LongMemEval's official templates ({'; '.join(described)}) for {', '.join(official)}."
        )
    others: dict[JudgeLabel, list[str]] = {}
    for d in report.designs:
        for judge in d.judges:
            if not judge.official:
                others.setdefault(judge, []).append(d.label)
    for judge, labels in others.items():
        if judge.kind == "stand-in":
            lines.append(
                f"- Judge: the offline stand-in {judge.name} for {', '.join(labels)}, NOT the LongMemEval judge; "
                "its verdicts test the plumbing and are not LongMemEval results."
            )
        else:  # a model judge other than LongMemEval's: its verdicts are its model's, not LongMemEval's results
            lines.append(f"- Judge: {judge.name}, {judge.text}, for {', '.join(labels)}; "
                         "its verdicts are not comparable with results from the LongMemEval judge.")
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
            str(len(group.more_runs)), str(len(group.fewer_runs)), _pts(group.majority_difference),
            _interval(group.majority_interval), str(len(group.gained)), str(len(group.lost))]


def pair_section(report: Report, pair: PairReport) -> str:
    majority = majority_name(report)
    title = f"### {pair.b} vs {pair.a} (difference = {pair.b} - {pair.a}, in points)"
    if pair.comparison is None:
        return f"{title}\n\nNo question in common: nothing to compare."
    c = pair.comparison
    header = ["group", "questions", "mean of runs", "95% interval", "more runs", "fewer runs", majority,
              "95% interval", "gained", "lost"]
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


def _mean_tokens(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


def cost_table(report: Report) -> str:
    header = ["design", "runs", "answers", "reader calls", "mean input tokens / call", "reader cost", "judge cost",
              "reader cost / answer", "first pass: calls", "first pass: input tokens (mean / call)",
              "re-reads: calls", "re-reads: input tokens (mean / call)", "cached input tokens",
              "cached input priced at"]
    memory = any(d.cost.memory_calls for d in report.designs)  # a model-built memory's calls: a column of their own
    if memory:
        header[7:7] = ["memory-model calls", "memory-model cost"]
    rows = []
    for d in report.designs:
        c = d.cost
        rows.append([
            d.label, str(c.n_runs), str(c.n_answers), str(c.reader_calls), _mean_tokens(c.mean_input_tokens_per_call),
            _usd(c.reader_cost_usd), _usd(c.judge_cost_usd),
            *([str(c.memory_calls), _usd(c.memory_cost_usd)] if memory else []), _usd(c.reader_cost_per_answer_usd),
            str(c.first_pass_reader_calls),
            f"{c.first_pass_input_tokens:,} ({_mean_tokens(c.first_pass_mean_input_tokens)})",
            str(c.reread_reader_calls), f"{c.reread_input_tokens:,} ({_mean_tokens(c.reread_mean_input_tokens)})",
            *cached_input_cells(c),
        ])
    return _table(header, rows, "l" + "r" * (len(header) - 2) + "l")


NOT_A_SYSTEM = "—"  # a cell of the systems table for a design that is not a memory system
SYSTEMS_NOTE = (
    "Memory systems and lme's own designs, one row each. Dollars per question at list price (cached calls "
    "included): answering (the reader's calls and the memory's model calls, a memory system's search calls among "
    "them; mean over question-runs; the judge's calls are not the design's) plus a memory system's ingestion (its "
    "model calls through lme, and what a hosted system reported charging), counted once per history and spread "
    "over the design's questions. Ingestion happens once per history, system and settings: a history found "
    "already ingested (by an earlier run, seed or design) counts as reused and costs nothing in these runs. "
    "Ingestion time is the seconds spent in the system's ingest, summed over the histories (several may ingest at "
    "once). Search latency: the system's search call per question-run, p50 and p95. " + NOT_A_SYSTEM + ": not a "
    "memory system."
)


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.1f} ms"


def systems_table(report: Report) -> str:
    """Every design in one table: accuracy, dollars per question, and a memory system's ingestion and search."""
    header = ["design", "memory system", "mean of runs (95% interval)", "$ / question", "answering $ / question",
              "histories ingested / reused", "ingestion time", "ingestion calls (tokens in / out)",
              "ingestion cost", "ingestion cost reported by the system", "search p50", "search p95"]
    rows = []
    for d in report.designs:
        low, high = d.intervals.overall[0].low, d.intervals.overall[0].high
        accuracy = f"{_pct(d.summary.mean_accuracy)} [{_pct(low)}, {_pct(high)}]"
        cost = d.per_question
        money = [_usd(cost.usd_per_question), _usd(cost.answering_usd)] if cost is not None else ["-", "-"]
        s = d.system
        if s is None:
            rows.append([d.label, NOT_A_SYSTEM, accuracy, *money, *[NOT_A_SYSTEM] * 7])
            continue
        rows.append([
            d.label, ", ".join(s.systems), accuracy, *money, f"{s.histories_ingested} / {s.histories_reused}",
            f"{s.ingest_s:,.1f} s", f"{s.ingest_calls:,} ({s.ingest_input_tokens:,} / {s.ingest_output_tokens:,})",
            _usd(s.ingest_cost_usd), "not reported" if s.reported_cost_usd is None else _usd(s.reported_cost_usd),
            _ms(s.search_latency_ms_p50), _ms(s.search_latency_ms_p95),
        ])
    return _table(header, rows, "ll" + "r" * (len(header) - 2))


def primary_lines(report: Report) -> list[str]:
    """The report's first lines: each preregistration record's primary measure and planned comparisons."""
    lines = []
    for p in report.primary:
        where = f" ({p.path})" if p.path else ""
        if p.primary is None:
            lines.append(f"**Preregistered primary measure: unknown.** Runs carry preregistration record "
                         f"{p.record_sha256}{where}.")
        else:
            design = p.design if p.design is not None else (p.record_design or "?")
            value = "not available" if math.isnan(p.value) else f"**{_pct(p.value)}**"
            detail = f" ({p.detail})" if p.detail else ""
            seeds = f", seeds {', '.join(p.seeds_ran)}" if p.seeds_ran else ""
            lines.append(f"**Preregistered primary measure:** {p.primary} ({p.measure_words or measure_words(p.primary)}) "
                         f"of design {design}: {value}{detail}{seeds}; record {p.record_sha256}{where}.")
        for c in p.comparisons:
            if c.missing is not None:
                lines.append(f"- {c.design} - {c.baseline} (planned comparison): not computed, {c.missing}.")
                continue
            interval = "no paired interval for this measure" if c.interval is None else (
                f"95% interval {_interval(c.interval)}")
            lines.append(f"- {c.design} - {c.baseline} (planned comparison): **{_pts(c.difference)} points**, "
                         f"{interval}, on {c.n_questions} questions in common.")
        lines += [f"- Note: {note}." for note in p.notes]
    return lines


LOCOMO_F1_NOTE = (
    "F1 is LoCoMo's own score (its task_eval/evaluation.py, as lme.reporting.locomo_f1 implements it), shown x100: "
    "token F1 over normalised, Porter-stemmed words; multi-hop (category 1) averages, over the reference's "
    "comma-separated parts, each part's best F1; open-domain (3) is scored against the reference's text before its "
    "first ';'; adversarial (5) scores 1 when the answer says \"not mentioned\" or \"no information available\", "
    "else 0. F1 (all) is the mean over every question, adversarial included (LoCoMo's \"Overall accuracy\"), "
    "unrounded (LoCoMo rounds each question's score to 3 places first); a missing answer scores 0. Mean of runs: "
    "each run's figure averaged over the runs (seeds)."
)
LOCOMO_PAIRS_NOTE = (
    "Differences in points (B - A) on the LoCoMo questions both designs ran, with 95% intervals from {resamples:,} "
    "paired bootstrap resamples of the questions within each category (seed {seed}): J without adversarial from "
    "each question's share of runs judged correct (categories 1-4), F1 from each question's mean F1 over the runs "
    "(every category)."
)


def locomo_judge_line(report: Report) -> str:
    """Which definition of J the figures use: Mem0's J when every LoCoMo run was judged by `locomo_j`, else the
    judge each design's runs had, named (`JudgeLabel`)."""
    judges: dict[JudgeLabel, list[str]] = {}
    for d in report.designs:
        if d.locomo is not None:
            for judge in d.judges:
                judges.setdefault(judge, []).append(d.label)
    parts = []
    for judge, labels in judges.items():
        if judge.kind == "locomo-j":
            parts.append(f"{', '.join(labels)}: Mem0's J, the share its LLM judge ({judge.name}, {judge.text}) "
                         "labelled CORRECT")
        elif judge.kind == "stand-in":
            parts.append(f"{', '.join(labels)}: the offline stand-in judge {judge.name}, NOT Mem0's J (its verdicts "
                         "test the plumbing and are not LoCoMo results)")
        else:
            parts.append(f"{', '.join(labels)}: {judge.name} ({judge.text}), NOT Mem0's J (judge=locomo_j), so not "
                         "comparable with published J scores")
    return ("J without adversarial is the share of questions of categories 1-4 judged correct (a missing answer or "
            "verdict is wrong), mean of runs. Its judge: " + "; ".join(parts) + ".")


def _f1(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def locomo_headline_table(report: Report) -> str:
    rows = []
    for d in report.designs:
        if d.locomo is None:
            continue
        m, runs = d.locomo.mean, d.locomo.per_run
        n_judged = d.locomo.n_questions - d.locomo.category_counts.get(ADVERSARIAL, 0)
        rows.append([
            d.label, f"{_pct(m.get('locomo.j_without_adversarial', float('nan')))} (n={n_judged})",
            ", ".join(_pct(r.get("locomo.j_without_adversarial", float("nan"))) for r in runs),
            f"{_f1(m.get('locomo.f1', float('nan')))} (n={d.locomo.n_questions})",
            ", ".join(_f1(r.get("locomo.f1", float("nan"))) for r in runs),
            _f1(m.get("locomo.f1_without_adversarial", float("nan"))),
        ])
    return _table(["design", "J without adversarial, mean of runs", "per-run J", "F1 (all), mean of runs",
                   "per-run F1", "F1 without adversarial, mean of runs"], rows)


def locomo_category_table(report: Report, measure: str) -> str:
    """Per LoCoMo category (in its number order), each design's n and mean of runs of J (`measure` "j", categories
    1-4) or F1 ("f1", every category)."""
    designs = [d for d in report.designs if d.locomo is not None]
    names = [name for name in LOCOMO_CATEGORY_ORDER
             if any(name in d.locomo.category_counts for d in designs) and (measure == "f1" or name != ADVERSARIAL)]
    header = ["category"]
    for d in designs:
        header += [f"{d.label}: n", f"{d.label}: {'J' if measure == 'j' else 'F1'}, mean of runs"]
    rows = []
    for name in names:
        row = [name]
        for d in designs:
            assert d.locomo is not None
            n = d.locomo.category_counts.get(name, 0)
            if measure == "j":
                value = _pct(d.locomo.j_per_category[name]) if name in d.locomo.j_per_category else "-"
            else:
                value = _f1(d.locomo.mean.get(f"locomo.f1.{name}", float("nan")))
            row += [str(n), value]
        rows.append(row)
    return _table(header, rows)


def locomo_pair_section(pair: PairReport) -> str:
    title = f"### {pair.b} vs {pair.a}: LoCoMo's measures (difference = {pair.b} - {pair.a}, in points)"
    if pair.locomo is None:
        return f"{title}\n\nNo LoCoMo question in common: nothing to compare."
    rows = []
    for measure, part in (("J without adversarial", pair.locomo.j_without_adversarial), ("F1", pair.locomo.f1)):
        if part is None:
            rows.append([measure, "all", "0", "-", "-"])
            continue
        rows.append([measure, "all", str(part.n_questions), _pts(part.difference), _interval(part.interval)])
        rows += [[measure, name, str(n), _pts(diff), _interval(interval)]
                 for name, (n, diff, interval) in part.per_category.items()]
    return f"{title}\n\n" + _table(["measure", "category", "questions", "difference", "95% interval"], rows, "llrrr")


def locomo_section(report: Report) -> list[str]:
    """LoCoMo's headline, stated before lme's accuracy tables: J without adversarial and F1, per category, and the
    paired differences between designs; the definitions they use."""
    out = ["## LoCoMo headline", "", locomo_headline_table(report), "", locomo_judge_line(report), "",
           LOCOMO_F1_NOTE, "", "### J without adversarial, per category", "", locomo_category_table(report, "j"), "",
           "### F1 (x100), per category", "", locomo_category_table(report, "f1"), ""]
    if report.pairs:
        out += [LOCOMO_PAIRS_NOTE.format(resamples=report.n_resamples, seed=report.bootstrap_seed), ""]
        out += [part for pair in report.pairs for part in (locomo_pair_section(pair), "")]
    out += ["lme's own accuracy tables follow (the same verdicts, adversarial questions included, per category as "
            "question type).", ""]
    return out


def render_markdown(report: Report) -> str:
    majority = majority_name(report)
    missing = [
        f"{d.label} seed {seed}: {n}" for d in report.designs for seed, n in zip(d.seeds, d.missing_answers) if n
    ]
    out = ["# lme report", ""]
    if report.primary:
        out += primary_lines(report) + ["", PRIMARY_NOTE, ""]
    out += [_sources(report), ""]
    out += judge_lines(report)
    out.append(f"- {MISSING_NOTE} Missing answers here: {'; '.join(missing) if missing else 'none'}.")
    for d in report.designs:
        if d.runs_cover_different_questions:
            out.append(
                f"- {d.label}: its runs did not all answer the same questions; a question a run lacks counts as wrong."
            )
        out += [f"- {d.label}: {note}" for note in d.notes]
    out += [f"- {note}" for note in report.notes]
    if any(d.locomo is not None for d in report.designs):
        out += [""] + locomo_section(report)[:-1]
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
    out += ["## Memory systems and dollars per question", "", systems_table(report), "", SYSTEMS_NOTE, ""]
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
        if entry["locomo"] is None:  # a LongMemEval run: its JSON as before LoCoMo came
            del entry["locomo"]
        if entry["system"] is None:  # not a memory system
            del entry["system"]
        else:
            entry["system"]["ingestion_usd"] = d.system.ingestion_usd
        if d.per_question is not None:
            entry["per_question"] |= {"usd_per_question": d.per_question.usd_per_question,
                                      "ingestion_per_question_usd": d.per_question.ingestion_per_question_usd}
        entry["official_judge"] = d.official
        entry["judges"] = [{"name": j.name, "model": j.model, "official": j.official, "description": j.text}
                           for j in d.judges]
        designs.append(entry)
    pairs = [asdict(p) for p in report.pairs]
    for pair in pairs:
        if pair["locomo"] is None:
            del pair["locomo"]
    locomo = {}
    if any(d.locomo is not None for d in report.designs):
        locomo = {"locomo_conventions": {"j": locomo_judge_line(report), "f1": LOCOMO_F1_NOTE,
                                         "pairs": LOCOMO_PAIRS_NOTE.format(resamples=report.n_resamples,
                                                                           seed=report.bootstrap_seed)}}
    return _json_safe({
        "n_resamples": report.n_resamples,
        "bootstrap_seed": report.bootstrap_seed,
        "conventions": {"missing_answers": MISSING_NOTE, "averages": MASTRA_NOTE, "systems": SYSTEMS_NOTE},
        "notes": list(report.notes),
        "data": report.data,
        "designs": designs,
        "pairs": pairs,
        "primary": [asdict(p) for p in report.primary],
        **locomo,
    })
