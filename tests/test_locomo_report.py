"""LoCoMo across seeds and designs: a multirun parent's `mean_locomo.*` metrics and summary line, and `lme report`'s
LoCoMo headline (J without adversarial, F1, per category, paired differences), every figure recomputed here from the
jobs' own outcome rows; a report never mixes LoCoMo and LongMemEval runs, and a LongMemEval report has no LoCoMo part.

The sweeps are real and offline (lme's stand-in reader and judge) on the shared LoCoMo file, two seeds each of bm25
and full_history on ten questions of conv-26, against a SQLite MLflow store in a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import LOCOMO, needs

from lme.reporting.locomo_f1 import CATEGORY_NAMES
from lme.reporting.report import DesignRuns, JobOutcomes, build_report, render_markdown, report_json
from lme.tracking.runs import across_seed_metrics
from lme.util.errors import LmeError

ROOT = Path(__file__).resolve().parents[1]
# Two questions of each category from conversation conv-26 (the offline reader scores above 0 on most of 1-4).
PICKED = {1: ("conv-26-q023", "conv-26-q043"), 2: ("conv-26-q028", "conv-26-q045"),
          3: ("conv-26-q022", "conv-26-q046"), 4: ("conv-26-q088", "conv-26-q090"),
          5: ("conv-26-q152", "conv-26-q153")}
QUESTION_IDS = sorted(qid for ids in PICKED.values() for qid in ids)
DESIGNS = ("bm25", "full_history")


def _lme(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "HYDRA", "OPENAI"))}
    done = subprocess.run([sys.executable, "-m", "lme", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=env | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _by_hand(rows: list[dict]) -> dict[str, float]:
    """One job's LoCoMo figures, straight from its rows: F1 means (all, without adversarial, per category) and J."""
    figures = {"locomo.f1": _mean(row["locomo_f1"] for row in rows),
               "locomo.f1_without_adversarial": _mean(row["locomo_f1"] for row in rows if row["category"] != 5),
               "locomo.j_without_adversarial": _mean(bool(row["correct"]) for row in rows if row["category"] != 5)}
    for number, name in CATEGORY_NAMES.items():
        figures[f"locomo.f1.{name}"] = _mean(row["locomo_f1"] for row in rows if row["category"] == number)
    return figures


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    if not LOCOMO.is_file():
        pytest.skip("the shared LoCoMo file is not there")
    tmp = tmp_path_factory.mktemp("locomo-sweeps")
    store = [f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/artifacts"]
    out = {"tmp": tmp, "store": store}
    for design in DESIGNS:
        done = _lme([f"+design={design}", "dataset=locomo", f"data_dir={LOCOMO.parents[1]}", "progress=false",
                     f"question_ids=[{','.join(QUESTION_IDS)}]", f"cache_dir={tmp}/cache",
                     f"hydra.sweep.dir={tmp}/sweep-{design}", *store, "-m", "seed=1,2"], tmp)
        jobs = [[json.loads(line) for line in (tmp / f"sweep-{design}" / str(n) / "outcomes.jsonl").read_text(
            encoding="utf-8").splitlines()] for n in (0, 1)]
        parent = done.stdout.split("MLflow parent run ")[1].split(";")[0].strip()
        out[design] = {"stdout": done.stdout, "jobs": jobs, "parent": parent}
    return out


@needs(LOCOMO)
def test_the_parent_logs_the_mean_over_seeds_of_locomos_figures(sweeps):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sweeps["store"][0].split("=", 1)[1])
    for design in DESIGNS:
        jobs = sweeps[design]["jobs"]
        assert all(sorted(row["question_id"] for row in rows) == QUESTION_IDS for rows in jobs)
        per_job = [_by_hand(rows) for rows in jobs]
        metrics = client.get_run(sweeps[design]["parent"]).data.metrics
        for key in per_job[0]:
            assert metrics[f"mean_{key}"] == pytest.approx(_mean(job[key] for job in per_job)), key
        assert "mean_accuracy" in metrics and not any(key.startswith("locomo.") for key in metrics)
        f1, j = metrics["mean_locomo.f1"], metrics["mean_locomo.j_without_adversarial"]
        line = next(line for line in sweeps[design]["stdout"].splitlines() if line.startswith("multirun, design"))
        assert line.endswith(f"; LoCoMo F1 {f1:.3f} (mean_locomo.f1), J without adversarial {j:.3f} "
                             "(mean_locomo.j_without_adversarial)")
    assert any(metrics["mean_locomo.f1"] > 0 for metrics in
               (client.get_run(sweeps[d]["parent"]).data.metrics for d in DESIGNS))  # not all zeros


@needs(LOCOMO)
def test_each_job_logs_the_locomo_dataset_per_category_measures_and_a_trace_per_question(sweeps):
    """The issue's done-when: a LoCoMo sweep logs per-category measures, a `locomo` MLflow dataset and traces."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = sweeps["store"][0].split("=", 1)[1]
    client = MlflowClient(tracking_uri=uri)
    for design in DESIGNS:
        parent = client.get_run(sweeps[design]["parent"])
        children = client.search_runs([parent.info.experiment_id],
                                      f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert len(children) == 2
        for child in children:
            assert [d.dataset.name for d in child.inputs.dataset_inputs] == ["locomo"]
            assert {f"accuracy.{name}" for name in ("multi-hop", "temporal", "open-domain", "single-hop",
                                                     "adversarial")} <= set(child.data.metrics)
            assert {f"locomo.f1.{name}" for name in ("multi-hop", "single-hop")} <= set(child.data.metrics)
    mlflow.set_tracking_uri(uri)
    traces = mlflow.search_traces(experiment_ids=[parent.info.experiment_id], return_type="list")
    # two designs, two seeds, one trace per question
    assert len(traces) == 2 * 2 * len(QUESTION_IDS)


@needs(LOCOMO)
def test_the_report_opens_with_locomos_headline_and_paired_differences(sweeps):
    tmp, store = sweeps["tmp"], sweeps["store"]
    args = ["report", *DESIGNS, "--resamples", "500", *store]
    data = json.loads(_lme([*args, "--json"], tmp).stdout)
    text = _lme(args, tmp).stdout
    per_question = {}
    for design in DESIGNS:
        jobs = sweeps[design]["jobs"]
        per_job = [_by_hand(rows) for rows in jobs]
        entry = next(d for d in data["designs"] if d["label"] == design)
        for key in per_job[0]:
            assert entry["locomo"]["mean"][key] == pytest.approx(_mean(job[key] for job in per_job)), key
        j = _mean(job["locomo.j_without_adversarial"] for job in per_job)
        f1 = _mean(job["locomo.f1"] for job in per_job)
        row = next(line for line in text.splitlines() if line.startswith(f"| {design} | ") and "(n=8)" in line)
        assert row.startswith(f"| {design} | {100 * j:.1f}% (n=8) | ") and f"| {100 * f1:.1f} (n=10) |" in row
        by_id = [{r["question_id"]: r for r in rows} for rows in jobs]
        per_question[design] = {q: (_mean(bool(run[q]["correct"]) for run in by_id),
                                    _mean(run[q]["locomo_f1"] for run in by_id)) for q in QUESTION_IDS}
    (pair,) = data["pairs"]
    a, b = pair["a"], pair["b"]
    locomo = pair["locomo"]
    judged = [q for q in QUESTION_IDS if q not in PICKED[5]]
    j_difference = _mean(per_question[b][q][0] - per_question[a][q][0] for q in judged)
    f1_difference = _mean(per_question[b][q][1] - per_question[a][q][1] for q in QUESTION_IDS)
    assert locomo["j_without_adversarial"]["difference"] == pytest.approx(j_difference)
    assert locomo["f1"]["difference"] == pytest.approx(f1_difference)
    assert locomo["j_without_adversarial"]["n_questions"] == 8 and locomo["f1"]["n_questions"] == 10
    assert set(locomo["f1"]["per_category"]) == set(CATEGORY_NAMES.values())
    assert "adversarial" not in locomo["j_without_adversarial"]["per_category"]
    for part in (locomo["j_without_adversarial"], locomo["f1"]):
        assert part["interval"]["low"] <= part["difference"] <= part["interval"]["high"]
    assert text.index("## LoCoMo headline") < text.index("## Headline") < text.index("## Per question type")
    assert "NOT Mem0's J" in text and "LoCoMo's own score (its task_eval/evaluation.py" in text
    assert f"| F1 | all | 10 | {100 * f1_difference + 0.0:+.1f} |" in text
    assert "### J without adversarial, per category" in text and "### F1 (x100), per category" in text


# --- pure: the benchmarks kept apart, LongMemEval untouched ------------------------------------------------


def _job(rows: list[dict], seed: str = "1") -> JobOutcomes:
    return JobOutcomes(run_id=f"r{seed}", run_name=f"run-{seed}", seed=seed, judge="offline-lexical-judge",
                       judge_official=False, rows=tuple(rows), judge_model="lme-offline/lexical-judge")


LONGMEMEVAL_ROWS = [{"question_id": "q1", "question_type": "single-session-user", "answer": "a", "correct": True},
                    {"question_id": "q2", "question_type": "multi-session", "answer": "b", "correct": False}]
LOCOMO_ROWS = [{"question_id": "c-q000", "question_type": "temporal", "category": 2, "answer": "x", "correct": True,
                "locomo_f1": 0.5},
               {"question_id": "c-q001", "question_type": "adversarial", "category": 5, "answer": "y",
                "correct": False, "locomo_f1": 0.0}]


def test_a_report_mixing_locomo_and_longmemeval_is_refused():
    designs = [DesignRuns("lo", "bm25", "p1", "lo-multirun", (_job(LOCOMO_ROWS),)),
               DesignRuns("lme", "bm25", "p2", "lme-multirun", (_job(LONGMEMEVAL_ROWS),))]
    with pytest.raises(LmeError, match="a report covers one benchmark, but lo ran LoCoMo and lme ran LongMemEval"):
        build_report(designs, n_resamples=50)


def test_longmemeval_reports_and_parents_get_nothing_of_locomo():
    report = build_report([DesignRuns("a", "a", "p1", "a-multirun", (_job(LONGMEMEVAL_ROWS),)),
                           DesignRuns("b", "b", "p2", "b-multirun", (_job(LONGMEMEVAL_ROWS),))], n_resamples=50)
    assert "LoCoMo" not in render_markdown(report) and "Mem0" not in render_markdown(report)
    data = report_json(report)
    assert "locomo_conventions" not in data and "locomo" not in data["designs"][0] and "locomo" not in data["pairs"][0]
    assert not any("locomo" in key for key in across_seed_metrics({"a": [LONGMEMEVAL_ROWS, LONGMEMEVAL_ROWS]}))


def test_a_question_a_seed_lacks_counts_as_wrong_in_the_parents_means():
    metrics = across_seed_metrics({"a": [LOCOMO_ROWS, LOCOMO_ROWS[:1]]})
    assert metrics["mean_locomo.f1"] == pytest.approx(_mean([0.25, 0.25]))
    assert metrics["mean_locomo.j_without_adversarial"] == pytest.approx(1.0)
    assert metrics["mean_locomo.f1.temporal"] == pytest.approx(0.5) and metrics["mean_locomo.f1.adversarial"] == 0.0
    several = across_seed_metrics({"a": [LOCOMO_ROWS], "b": [LOCOMO_ROWS]})
    assert several["a/mean_locomo.f1"] == pytest.approx(0.25) and "mean_locomo.f1" not in several
