"""Per-step figures of re-read runs, for MLflow: a job's metrics and a multirun parent's `steps.json`.

The measures themselves are `lme.reporting.measures.step_table` (the report's per-step
table); this module only names and shapes them for tracking.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from lme.reporting.measures import step_table

Row = Mapping[str, Any]


def metric_labels(rules: Sequence[str]) -> list[str]:
    """MLflow-safe step names: `first_pass, advice, decline, decline_2, recall`."""
    seen: Counter[str] = Counter()
    labels = []
    for rule in rules:
        seen[rule] += 1
        labels.append(rule if seen[rule] == 1 else f"{rule}_{seen[rule]}")
    return labels


def question_ids(runs: Sequence[Sequence[Row]]) -> list[str]:
    """Every question id of the runs, in first-seen order."""
    return list(dict.fromkeys(str(row["question_id"]) for rows in runs for row in rows))


def steps_table(runs: Sequence[Sequence[Row]]) -> list[dict[str, Any]]:
    """`lme.reporting.measures.step_table` over the runs' questions, as plain dicts."""
    return [asdict(entry) for entry in step_table(runs, question_ids(runs))]


def run_step_metrics(rows: Sequence[Row]) -> dict[str, float]:
    """One job's per-step metrics: `steps.<label>.{chosen,reread,failed,accuracy}` and, after the
    first pass, `.fixed` and `.broken`."""
    table = step_table([rows], question_ids([rows]))
    metrics: dict[str, float] = {}
    for label, entry in zip(metric_labels([entry.rule for entry in table]), table):
        prefix = f"steps.{label}"
        metrics[f"{prefix}.chosen"] = float(entry.chosen)
        metrics[f"{prefix}.reread"] = float(entry.reread)
        metrics[f"{prefix}.failed"] = float(entry.failed)
        metrics[f"{prefix}.accuracy"] = float(entry.mean_accuracy)
        if entry.fixed is not None and entry.broken is not None:
            metrics[f"{prefix}.fixed"] = float(entry.fixed)
            metrics[f"{prefix}.broken"] = float(entry.broken)
    return metrics
