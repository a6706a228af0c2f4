"""PNG plots of a report (matplotlib, imported here only, Agg backend: no display needed).

- `per_type_accuracy.png`: mean-of-runs accuracy per question type (and overall) for every
  design, with its 95% stratified-bootstrap interval;
- `paired_differences.png`: a forest plot of every paired comparison on both measures (mean of
  runs, correct in a majority of runs), point and 95% interval, with the zero line;
- `accuracy_vs_cost.png`: every design (memory systems and lme's own alike) as a point, mean-of-runs accuracy
  with its 95% stratified-bootstrap interval against dollars per question at list price (answering plus a memory
  system's ingestion once per history, `lme.reporting.system_measures.QuestionCost`).

Each title says what is plotted and on which questions (`Report.data`, when every design ran on
the same ones); an empty forest plot says why it is empty.
"""

from __future__ import annotations

from pathlib import Path

from lme.reporting.report import Report, majority_name

PER_TYPE_PNG = "per_type_accuracy.png"
DIFFERENCES_PNG = "paired_differences.png"
COST_PNG = "accuracy_vs_cost.png"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def data_line(report: Report) -> str:
    """The questions the plotted designs ran on, for a title's second line ("" when unknown)."""
    if report.data:
        return f"on {report.data}"
    digests = {d.questions_digest for d in report.designs}
    if len(digests) > 1:
        return "the designs ran on different questions"
    return ""


def per_type_title(report: Report) -> str:
    runs = sorted({d.summary.n_runs for d in report.designs})
    runs_words = _plural(runs[0], "run") if len(runs) == 1 else "runs"
    title = f"Accuracy by question type: mean of {runs_words} per design, 95% stratified bootstrap intervals"
    line = data_line(report)
    return f"{title}\n{line}" if line else title


def differences_title(report: Report, n_rows: int) -> str:
    if n_rows:
        title = "Paired differences in accuracy (points), 95% stratified bootstrap intervals"
    elif len(report.designs) < 2:
        title = "Paired differences (one design: nothing to compare)"
    elif not report.pairs:
        title = "Paired differences (no pair chosen: nothing to compare)"
    else:
        title = "Paired differences (no pair of designs ran a question in common: nothing to compare)"
    line = data_line(report)
    return f"{title}\n{line}" if line else title


def _tick(group: str, n: int) -> str:
    wrapped = group.replace("single-session-", "single-session-\n")
    return f"{wrapped}\n(n={n})"


def plot_per_type(report: Report, path: Path) -> Path:
    plt = _pyplot()
    from lme.reporting.measures import type_order

    types = sorted({t for d in report.designs for t in d.summary.type_counts}, key=type_order)
    groups = ["all questions", *types]
    n = len(report.designs)
    width = 0.8 / max(1, n)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.4 * len(groups) + 0.3 * n), 4.8), dpi=120)
    for i, d in enumerate(report.designs):
        values, low, high, xs = [], [], [], []
        for g, group in enumerate(groups):
            if group == "all questions":
                value, interval = d.summary.mean_accuracy, d.intervals.overall[0]
            elif group in d.summary.mean_per_type:
                value, interval = d.summary.mean_per_type[group], d.intervals.per_stratum[group][0]
            else:
                continue
            xs.append(g - 0.4 + width * (i + 0.5))
            values.append(100 * value)
            low.append(max(0.0, 100 * (value - interval.low)))
            high.append(max(0.0, 100 * (interval.high - value)))
        label = f"{d.label} ({_plural(d.summary.n_runs, 'run')})"
        ax.bar(xs, values, width=width * 0.95, label=label, yerr=[low, high], capsize=2, alpha=0.85)
    ax.set_xticks(range(len(groups)))
    sizes = {t: max(d.summary.type_counts.get(t, 0) for d in report.designs) for t in types}
    sizes["all questions"] = max(d.summary.n_questions for d in report.designs)
    ax.set_xticklabels([_tick(g, sizes[g]) for g in groups], fontsize=8)
    ax.set_ylabel("accuracy, mean of runs (%)")
    ax.set_ylim(0, 105)
    ax.set_title(per_type_title(report), fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_differences(report: Report, path: Path) -> Path:
    plt = _pyplot()
    majority = majority_name(report)
    rows = []
    for pair in report.pairs:
        if pair.comparison is None:
            continue
        group = pair.comparison.overall
        rows.append((f"{pair.b} - {pair.a}: mean of runs", group.mean_difference, group.mean_interval))
        rows.append((f"{pair.b} - {pair.a}: {majority}", group.majority_difference, group.majority_interval))
    fig, ax = plt.subplots(figsize=(8.0, 1.5 + 0.45 * max(1, len(rows))), dpi=120)
    for y, (_, value, interval) in enumerate(reversed(rows)):
        ax.plot([100 * interval.low, 100 * interval.high], [y, y], color="tab:blue", linewidth=2)
        ax.plot([100 * value], [y], "o", color="tab:blue")
    ax.axvline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([name for name, _, _ in reversed(rows)], fontsize=8)
    ax.set_xlabel("difference (points), 95% stratified bootstrap interval")
    ax.set_title(differences_title(report, len(rows)), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def cost_title(report: Report) -> str:
    title = ("Accuracy (mean of runs, 95% stratified bootstrap interval) against dollars per question\n"
             "(list price: answering, plus a memory system's ingestion once per history)")
    line = data_line(report)
    return f"{title}\n{line}" if line else title


def plot_accuracy_cost(report: Report, path: Path) -> Path:
    """One point per design: x its dollars per question, y its mean-of-runs accuracy with the 95% interval; a
    memory system's point is a square, lme's own designs circles."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.2), dpi=120)
    costs = [0.0]
    for i, d in enumerate(report.designs):
        cost = d.per_question.usd_per_question if d.per_question is not None else float("nan")
        if cost != cost:  # no row to price
            continue
        costs.append(cost)
        value, interval = d.summary.mean_accuracy, d.intervals.overall[0]
        low = max(0.0, 100 * (value - interval.low)) if interval.low == interval.low else 0.0
        high = max(0.0, 100 * (interval.high - value)) if interval.high == interval.high else 0.0
        marker = "s" if d.system is not None else "o"
        label = f"{d.label} ({'memory system, ' if d.system is not None else ''}{_plural(d.summary.n_runs, 'run')})"
        ax.errorbar([cost], [100 * value], yerr=[[low], [high]], fmt=marker, capsize=4, color=f"C{i % 10}",
                    label=label)
        ax.annotate(d.label, (cost, 100 * value), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("dollars per question (list price)")
    ax.set_ylabel("accuracy, mean of runs (%)")
    ax.set_ylim(0, 105)
    right = 1.25 * max(costs) or 1e-4  # room for the labels; offline runs cost $0
    ax.set_xlim(-0.04 * right, right)  # a $0 design's interval clear of the axis
    ax.set_title(cost_title(report), fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_plots(report: Report, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [plot_per_type(report, directory / PER_TYPE_PNG), plot_differences(report, directory / DIFFERENCES_PNG),
            plot_accuracy_cost(report, directory / COST_PNG)]
