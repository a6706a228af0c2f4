"""Memory systems measured like every other design (issue 40, item 4): a job's `system.*` metrics count each
history's ingestion once, where it happened; the report puts memory systems and lme's own designs in one table
(ingestion cost and search p95, "—" for a design that is not a system) and one accuracy-versus-dollars plot.
Rows of known content first, then (slow) real offline jobs of bm25, pipeline and system_local on the bundled
sample, reported from their MLflow store, with a system question's trace read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import IDS, PLAIN, TYPES, calls, rows_from

from lme.reporting.report import DesignRuns, JobOutcomes, build_report, render_markdown, report_json
from lme.reporting.system_measures import answering_cost, quantile, system_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LATENCIES = [12.0, 3.5, 40.0, 7.25, 9.0, 15.5, 2.0, 30.0]  # ms, one per question of IDS


def system_rows(pattern, *, ingested: bool, reported: float | None = None) -> list[dict]:
    """A memory system's rows: each question its own history (namespace), ingested by this run or found there."""
    rows = rows_from(pattern)
    for index, row in enumerate(rows):
        now = 3 if ingested else 0
        row["memory"] = calls(2 if ingested else 1, 300, 0.004 if ingested else 0.001)  # ingestion + search calls
        row["system"] = {
            "system": "local", "namespace": f"lme-{index:032x}", "sessions": 3, "ingested_now": now,
            "ingested_reused": 3 - now, "ingest_s": 0.5 if ingested else 0.0, "ingest_calls": 1 if ingested else 0,
            "ingest_input_tokens": 200 if ingested else 0, "ingest_output_tokens": 20 if ingested else 0,
            "ingest_cost_usd": 0.003 if ingested else 0.0, "reported_cost_usd": reported if ingested else None,
            "search_latency_ms": LATENCIES[index], "search_calls": 1, "search_cost_usd": 0.001,
            "ready_wait_s": 0.0, "results": 10, "included": 4,
        }
    return rows


def test_a_job_counts_each_history_s_ingestion_once_where_it_happened():
    first = system_metrics(system_rows(PLAIN[0], ingested=True, reported=0.02))
    assert first["system.histories_ingested"] == 8 and first["system.histories_reused"] == 0
    assert first["system.ingest_s"] == pytest.approx(4.0) and first["system.ingest_calls"] == 8
    assert first["system.ingest_cost_usd"] == pytest.approx(0.024)
    assert first["system.ingest_reported_cost_usd"] == pytest.approx(0.16)
    assert first["system.search_latency_ms.p50"] == pytest.approx(np.percentile(LATENCIES, 50))
    assert first["system.search_latency_ms.p95"] == pytest.approx(np.percentile(LATENCIES, 95))
    second = system_metrics(system_rows(PLAIN[1], ingested=False))  # a later seed: the journal had them all
    assert second["system.histories_ingested"] == 0 and second["system.histories_reused"] == 8
    assert second["system.ingest_s"] == 0 and second["system.ingest_calls"] == 0
    assert second["system.ingest_cost_usd"] == 0 and "system.ingest_reported_cost_usd" not in second
    # two questions of one history (LoCoMo): one history, ingested by the first question's build
    shared = system_rows(PLAIN[0][:2], ingested=True)
    shared[1]["system"] |= {"namespace": shared[0]["system"]["namespace"], "ingested_now": 0, "ingest_s": 0.0,
                            "ingest_calls": 0, "ingest_cost_usd": 0.0}
    assert system_metrics(shared)["system.histories_ingested"] == 1
    assert system_metrics(shared)["system.histories_reused"] == 0
    assert system_metrics(rows_from(PLAIN[0])) == {}  # not a memory system: no system metric


def test_quantile_is_numpy_s_linear_percentile():
    for values in ([1.0], [4.0, 1.0], LATENCIES, list(range(101))):
        for q in (0.0, 0.5, 0.95, 1.0):
            assert quantile(values, q) == pytest.approx(np.percentile(values, 100 * q))
    assert quantile([], 0.5) != quantile([], 0.5)  # NaN


def test_answering_cost_leaves_ingestion_out_and_the_judge_too():
    row = system_rows(PLAIN[0], ingested=True)[0]
    assert answering_cost(row) == pytest.approx(0.01 + 0.001)  # reader + the search's calls, not the ingestion
    assert answering_cost(rows_from(PLAIN[0])[0]) == pytest.approx(0.01)


def _design(label: str, runs: list[list[dict]]) -> DesignRuns:
    jobs = tuple(JobOutcomes(f"{label}-run{i}", f"{label}-seed{i + 1}", str(i + 1), "offline-lexical-judge", False,
                             tuple(rows)) for i, rows in enumerate(runs))
    return DesignRuns(label, label, f"{label}-parent", f"{label}-multirun", jobs)


@pytest.fixture(scope="module")
def report():
    designs = [_design("bm25", [rows_from(p) for p in PLAIN[:2]]),
               _design("system_local", [system_rows(PLAIN[0], ingested=True),
                                        system_rows(PLAIN[1], ingested=False)])]
    return build_report(designs, n_resamples=500, seed=1)


def _row(markdown: str, label: str, heading: str) -> list[str]:
    section = markdown.split(heading, 1)[1]
    line = next(line for line in section.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_one_table_holds_systems_and_lme_s_designs(report):
    md = render_markdown(report)
    heading = "## Memory systems and dollars per question"
    assert heading in md
    bm25, system = _row(md, "bm25", heading), _row(md, "system_local", heading)
    assert bm25[1] == "—" and bm25[5:] == ["—"] * 7
    d = report.design("system_local")
    low, high = d.intervals.overall[0].low, d.intervals.overall[0].high
    assert system[2] == f"{100 * d.summary.mean_accuracy:.1f}% [{100 * low:.1f}%, {100 * high:.1f}%]"
    # answering: reader 0.01 + search 0.001 per question-run; ingestion 8 x 0.003 once, over 8 questions
    assert system[3:5] == ["$0.0140", "$0.0110"] and bm25[3:5] == ["$0.0100", "$0.0100"]
    assert system[5:10] == ["8 / 0", "4.0 s", "8 (1,600 / 160)", "$0.0240", "not reported"]
    latencies = LATENCIES + LATENCIES  # both runs searched every question
    assert system[10:] == [f"{np.percentile(latencies, 50):,.1f} ms", f"{np.percentile(latencies, 95):,.1f} ms"]
    data = report_json(report)
    entries = {entry["label"]: entry for entry in data["designs"]}
    assert "system" not in entries["bm25"] and entries["system_local"]["system"]["histories_ingested"] == 8
    assert entries["system_local"]["per_question"]["usd_per_question"] == pytest.approx(0.014)
    assert entries["bm25"]["per_question"]["ingestion_usd"] == 0


def test_the_accuracy_versus_dollars_plot_is_written_with_the_others(report, tmp_path):
    from lme.reporting.plots import COST_PNG, cost_title, write_plots

    paths = write_plots(report, tmp_path)
    assert tmp_path / COST_PNG in paths and (tmp_path / COST_PNG).read_bytes()[:8] == PNG_MAGIC
    assert "dollars per question" in cost_title(report) and "95%" in cost_title(report)


# --- real jobs: bm25, pipeline and system_local on the bundled sample, two seeds each --------------------------


def run_lme(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "lme", *args, f"tracking.uri=sqlite:///{tmp}/mlflow.db",
            f"tracking.artifact_location={tmp}/mlruns"]
    if args[0] != "report":
        argv += [f"cache_dir={tmp}/cache", "progress=false"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    return subprocess.run(argv, check=False, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)


LIMIT = "limit=6"


@pytest.mark.slow
def test_report_shows_a_memory_system_beside_bm25_and_pipeline(tmp_path):
    from mlflow.tracking import MlflowClient

    for design in ("bm25", "pipeline"):
        done = run_lme(tmp_path, f"+design={design}", LIMIT, "-m", "seed=1,2")
        assert done.returncode == 0, (design, done.stderr[-3000:])
    slow = ["memory.system.ingest_latency_s=0.01", "memory.system.index_delay_s=0.05"]
    done = run_lme(tmp_path, "+design=system_local", LIMIT, *slow, "-m", "seed=1,2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "memory system: 6 histories ingested" in done.stdout and "0 already ingested" in done.stdout
    assert "memory system: 0 histories ingested (0.0 s, 0 model calls" in done.stdout  # seed 2: all reused
    tables = sorted((tmp_path / "multirun" / "system_local").glob("*/*/outcomes.csv"))
    assert len(tables) == 2
    for table in tables:  # the outcomes' CSV: the system's figures as columns
        header = table.read_text().splitlines()[0].split(",")
        assert {"system_ingested_now", "system_ingest_s", "system_search_latency_ms"} <= set(header)

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("lme").experiment_id
    jobs = {run.data.tags["lme.seed"]: run for run in client.search_runs(
        [experiment], filter_string="tags.`lme.design` = 'system_local' and tags.`lme.role` = 'job'")}
    first, second = jobs["1"].data.metrics, jobs["2"].data.metrics
    assert first["system.histories_ingested"] == 6 and first["system.ingest_s"] >= 0.01
    assert second["system.histories_ingested"] == 0 and second["system.histories_reused"] == 6
    assert second["system.ingest_s"] == 0 and second["system.ingest_calls"] == 0
    assert 0 < first["system.search_latency_ms.p50"] <= first["system.search_latency_ms.p95"]
    bm25_job = client.search_runs([experiment], filter_string="tags.`lme.design` = 'bm25'")[0]
    assert not any(key.startswith("system.") for key in bm25_job.data.metrics)

    # the trace of a system question: the system's raw results beside the memory the reader got
    traces = client.search_traces(locations=[experiment], run_id=jobs["1"].info.run_id, max_results=10)
    assert len(traces) == 6
    for trace in traces:
        spans = {span.name: span for span in trace.data.spans}
        search, memory = spans["search local"], spans["memory first_pass"]
        results = search.outputs["results"]
        assert len(results) == int(search.attributes["results"]) > 0
        assert all(set(result) == {"id", "score", "text"} for result in results)
        shown = memory.outputs.get("text") or next(s for s in trace.data.spans if s.name == "reader first_pass"
                                                   ).inputs["messages"][-1]["content"]
        given = [r["id"] for r in results if f"[{r['id']}] (score {r['score']:.4f}) {r['text']}" in shown]
        assert len(given) == int(search.attributes["included"]) > 0  # the reader got those, as returned
        assert given[:20] == search.attributes["included_ids"][:20]
        assert "note.system_results" not in memory.attributes and int(memory.attributes["note.ingested_now"]) > 0

    out = tmp_path / "report"
    done = run_lme(tmp_path, "report", "bm25", "pipeline", "system_local", "--out", str(out), "--resamples", "500")
    assert done.returncode == 0, done.stderr[-3000:]
    md = done.stdout
    heading = "## Memory systems and dollars per question"
    system = _row(md, "system_local", heading)
    assert system[1] == "local" and system[5] == "6 / 0"  # ingested by seed 1, counted once over both runs
    assert system[6].endswith(" s") and float(system[6][:-2]) >= 0.01 and system[9] == "not reported"
    assert system[11].endswith(" ms") and float(system[11][:-3].replace(",", "")) > 0  # search p95
    for design in ("bm25", "pipeline"):
        assert _row(md, design, heading)[5:] == ["—"] * 7
    assert (out / "accuracy_vs_cost.png").read_bytes()[:8] == PNG_MAGIC
    data = json.loads((out / "report.json").read_text())
    assert [d["label"] for d in data["designs"]] == ["bm25", "pipeline", "system_local"]
    assert data["designs"][2]["system"]["search_latency_ms_p95"] > 0
