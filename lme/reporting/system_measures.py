"""Measures of external memory systems, and dollars per question for every design, from the jobs' outcome rows.

A memory system's row carries `system` (`lme.answer.run.SystemStats`): the history's namespace, the sessions
this question's build ingested (`ingested_now`) and that build's ingestion time, model calls, tokens and
dollars (zero on every other question of the history, and on a later seed or rerun that found it ingested),
the search's latency, calls and dollars. So a history's ingestion is counted once, where it happened, and
apart from answering:

- per job: `system_metrics` (the job's `system.*` metrics: MLflow, `metrics.json`, the summary line);
- per design over its runs: `system_summary` (the report's memory-system columns);
- every design: `question_cost` (dollars per question: answering, at list price, plus ingestion spread over
  the questions; the report's table and its accuracy-versus-dollars plot).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0-1) of `values` by linear interpolation between order statistics (numpy's default,
    `percentile(..., method="linear")`); NaN for no value."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def row_system(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A row's memory-system figures (None: its memory was not a memory system's, or it failed)."""
    system = row.get("system")
    return system if isinstance(system, Mapping) and system.get("namespace") else None


def _number(system: Mapping[str, Any], key: str) -> float:
    value = system.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


INGEST_FIELDS = ("ingest_s", "ingest_calls", "ingest_input_tokens", "ingest_output_tokens", "ingest_cost_usd")


@dataclass(frozen=True)
class SystemSummary:
    """A memory system's figures over a design's runs. Ingestion is counted where it happened (a history ingested
    by an earlier run, of this design or another, is `histories_reused` in every run here and costs nothing
    here); `reported_cost_usd` is what a hosted system said its ingestion cost (None: not reported)."""

    systems: tuple[str, ...]
    histories: int  # distinct namespaces searched
    histories_ingested: int  # of those, ingested (wholly or in part) by these runs
    histories_reused: int  # the others: ingested before these runs
    sessions_ingested: int
    ingest_s: float
    ingest_calls: int
    ingest_input_tokens: int
    ingest_output_tokens: int
    ingest_cost_usd: float
    reported_cost_usd: float | None
    searches: int  # question-runs searched
    search_latency_ms_p50: float
    search_latency_ms_p95: float
    search_calls: int
    search_cost_usd: float

    @property
    def ingestion_usd(self) -> float:
        """Ingestion's dollars: lme's calls at list price plus what the system reported charging."""
        return self.ingest_cost_usd + (self.reported_cost_usd or 0.0)


def system_summary(runs: Sequence[Sequence[Mapping[str, Any]]]) -> SystemSummary | None:
    """The memory-system figures of a design's runs (None: no row of it is a memory system's)."""
    systems = [system for run in runs for row in run if (system := row_system(row)) is not None]
    if not systems:
        return None
    namespaces = {str(s["namespace"]) for s in systems}
    ingested = {str(s["namespace"]) for s in systems if _number(s, "ingested_now") > 0}
    reported = [float(s["reported_cost_usd"]) for s in systems
                if _number(s, "ingested_now") > 0 and isinstance(s.get("reported_cost_usd"), (int, float))]
    latencies = [_number(s, "search_latency_ms") for s in systems]
    total = {key: sum(_number(s, key) for s in systems) for key in (*INGEST_FIELDS, "search_calls",
                                                                      "search_cost_usd", "ingested_now")}
    return SystemSummary(
        systems=tuple(sorted({str(s.get("system", "")) for s in systems})), histories=len(namespaces),
        histories_ingested=len(ingested), histories_reused=len(namespaces - ingested),
        sessions_ingested=int(total["ingested_now"]), ingest_s=total["ingest_s"],
        ingest_calls=int(total["ingest_calls"]), ingest_input_tokens=int(total["ingest_input_tokens"]),
        ingest_output_tokens=int(total["ingest_output_tokens"]), ingest_cost_usd=total["ingest_cost_usd"],
        reported_cost_usd=sum(reported) if reported else None, searches=len(systems),
        search_latency_ms_p50=quantile(latencies, 0.5), search_latency_ms_p95=quantile(latencies, 0.95),
        search_calls=int(total["search_calls"]), search_cost_usd=total["search_cost_usd"],
    )


def system_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A job's memory-system metrics from its outcome rows (none of them a memory system's: `{}`):
    `system.histories_ingested` / `system.histories_reused` (namespaces this job ingested / found already
    ingested, by an earlier question's job, seed or rerun), `system.sessions_ingested`, `system.ingest_s`,
    `system.ingest_calls`, `system.ingest_input_tokens`, `system.ingest_output_tokens`, `system.ingest_cost_usd`
    (each history's ingestion once, where it happened), `system.ingest_reported_cost_usd` (when the system
    reports its cost), `system.search_latency_ms.p50` / `.p95` / `.max`, `system.search_calls`,
    `system.search_cost_usd`."""
    summary = system_summary([rows])
    if summary is None:
        return {}
    systems = [system for row in rows if (system := row_system(row)) is not None]
    metrics = {
        "system.histories_ingested": summary.histories_ingested,
        "system.histories_reused": summary.histories_reused,
        "system.sessions_ingested": summary.sessions_ingested,
        "system.ingest_s": summary.ingest_s,
        "system.ingest_calls": summary.ingest_calls,
        "system.ingest_input_tokens": summary.ingest_input_tokens,
        "system.ingest_output_tokens": summary.ingest_output_tokens,
        "system.ingest_cost_usd": summary.ingest_cost_usd,
        "system.search_latency_ms.p50": summary.search_latency_ms_p50,
        "system.search_latency_ms.p95": summary.search_latency_ms_p95,
        "system.search_latency_ms.max": max(_number(s, "search_latency_ms") for s in systems),
        "system.search_calls": summary.search_calls,
        "system.search_cost_usd": summary.search_cost_usd,
    }
    if summary.reported_cost_usd is not None:
        metrics["system.ingest_reported_cost_usd"] = summary.reported_cost_usd
    return {key: float(value) for key, value in metrics.items()}


def _call_cost(stats: Any) -> float:
    return float(stats.get("cost_usd", 0) or 0) if isinstance(stats, Mapping) else 0.0


def answering_cost(row: Mapping[str, Any]) -> float:
    """A question-run's answering dollars at list price: the reader's calls and its memories' model calls (a
    memory system's first-pass memory: its search calls only, its ingestion being counted apart), summed over
    the steps; the judge's calls are the evaluation's, not the design's."""
    steps = row.get("steps") or [row]
    reader = sum(_call_cost(step.get("reader")) for step in steps)
    memory = [_call_cost(step.get("memory")) for step in steps]
    system = row_system(row)
    if system is not None and memory:
        memory[0] = _number(system, "search_cost_usd")  # the first step built the system's memory
    return reader + sum(memory)


@dataclass(frozen=True)
class QuestionCost:
    """A design's dollars per question at list price (cached calls included): answering (reader and memory calls,
    mean over question-runs) plus ingestion (a memory system's, counted once per history over the runs, spread
    over the design's questions)."""

    answering_usd: float
    ingestion_usd: float  # total over the runs
    n_questions: int

    @property
    def ingestion_per_question_usd(self) -> float:
        return self.ingestion_usd / self.n_questions if self.n_questions else 0.0

    @property
    def usd_per_question(self) -> float:
        return self.answering_usd + self.ingestion_per_question_usd


def question_cost(runs: Sequence[Sequence[Mapping[str, Any]]], n_questions: int,
                  system: SystemSummary | None) -> QuestionCost:
    rows = [row for run in runs for row in run]
    answering = sum(answering_cost(row) for row in rows) / len(rows) if rows else float("nan")
    return QuestionCost(answering, system.ingestion_usd if system is not None else 0.0, n_questions)
