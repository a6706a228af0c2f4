"""A LoCoMo run's outcome rows, metrics and export (the file LoCoMo's task_eval code reads), and a LongMemEval run's
rows left as they were.

The whole runs are offline (lme's stand-in reader and judge) on the shared LoCoMo file; each F1 is recomputed here
from `lme.reporting.locomo_f1` on the row's own answer and the file's own question record, never read back from lme.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import LOCOMO, needs

from lme.reporting.interop import locomo_prediction_file, locomo_question_place
from lme.reporting.locomo_f1 import CATEGORY_NAMES, question_f1, reference_of
from lme.reporting.measures import locomo_metrics
from lme.util.errors import DataError

ROOT = Path(__file__).resolve().parents[1]

# Two questions of each category from conversation conv-26 (the offline reader scores above 0 on most of 1-4).
PICKED = {1: ("conv-26-q023", "conv-26-q043"), 2: ("conv-26-q028", "conv-26-q045"),
          3: ("conv-26-q022", "conv-26-q046"), 4: ("conv-26-q088", "conv-26-q090"),
          5: ("conv-26-q152", "conv-26-q153")}
QUESTION_IDS = sorted(qid for ids in PICKED.values() for qid in ids)

# A format-3 outcome row's keys, as lme wrote them before LoCoMo came (a LongMemEval row keeps exactly these).
LONGMEMEVAL_ROW_KEYS = {
    "format", "question_id", "question_type", "abstention", "answer", "correct", "reader_error", "judge_reply",
    "judge_note", "memory_bytes", "memory_turns", "reader", "judge", "seconds", "steps", "judge_error", "memory",
    "memory_error",
}
LOCOMO_KEYS = {"category", "reference_answer", "locomo_f1"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "HYDRA"))}
    return env | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _lme(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "lme", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- pure parts, on made-up records -----------------------------------------------------------------------


def _made_up() -> list[dict]:
    return [
        {"sample_id": "a-1", "conversation": {"speaker_a": "P", "speaker_b": "Q"},
         "qa": [{"question": "q0", "answer": "red car", "category": 4, "evidence": []},
                {"question": "q1", "answer": 2020, "category": 2, "evidence": []},
                {"question": "q2", "adversarial_answer": "blue", "category": 5, "evidence": []}]},
        {"sample_id": "b-2", "qa": [{"question": "q0", "answer": "x; y", "category": 3, "evidence": []}]},
    ]


def test_question_place_and_the_prediction_file():
    assert locomo_question_place("conv-26-q017") == ("conv-26", 17)
    with pytest.raises(DataError, match="question s1: not a LoCoMo question id"):
        locomo_question_place("s1")
    rows = [{"question_id": "a-1-q002", "answer": "Not mentioned."}, {"question_id": "a-1-q000", "answer": None}]
    records = locomo_prediction_file(_made_up(), rows, "mine_prediction")
    assert [r["sample_id"] for r in records] == ["a-1"]  # b-2 has no question of the run
    assert [item["question"] for item in records[0]["qa"]] == ["q0", "q2"]  # file order, only the run's
    assert records[0]["qa"][0]["mine_prediction"] == "" and records[0]["qa"][1]["mine_prediction"] == "Not mentioned."
    assert records[0]["conversation"] == {"speaker_a": "P", "speaker_b": "Q"}
    every = locomo_prediction_file(_made_up(), rows, "mine_prediction", keep_unselected=True)
    assert [len(r["qa"]) for r in every] == [3, 1]
    assert "mine_prediction" not in every[0]["qa"][1] and "mine_prediction" not in every[1]["qa"][0]
    assert "mine_prediction" not in _made_up()[0]["qa"][0]  # the input is not changed
    with pytest.raises(DataError, match="question b-2-q004 of the run is not in the file"):
        locomo_prediction_file(_made_up(), [{"question_id": "b-2-q004", "answer": "x"}], source="f.json")


def test_locomo_metrics_from_rows():
    rows = [
        {"category": 1, "locomo_f1": 0.5, "correct": True, "answer": "a"},
        {"category": 1, "locomo_f1": 0.25, "correct": False, "answer": "b"},
        {"category": 4, "locomo_f1": 1.0, "correct": True, "answer": "c", "judge_error": None},
        {"category": 4, "locomo_f1": 0.0, "correct": False, "answer": None},
        {"category": 5, "locomo_f1": 1.0, "correct": True, "answer": "Not mentioned"},
    ]
    metrics = locomo_metrics(rows)
    assert metrics == pytest.approx({
        "locomo.f1": 2.75 / 5, "locomo.f1_without_adversarial": 1.75 / 4, "locomo.f1.multi-hop": 0.375,
        "locomo.f1.single-hop": 0.5, "locomo.f1.adversarial": 1.0, "locomo.j_without_adversarial": 0.5,
    })
    assert locomo_metrics([{"question_id": "q", "correct": True}]) == {}


# --- whole runs ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locomo_run(tmp_path_factory):
    if not LOCOMO.is_file():
        pytest.skip("the shared LoCoMo file is not there")
    tmp = tmp_path_factory.mktemp("locomo-run")
    store = [f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/artifacts"]
    done = _lme(["+design=bm25", "dataset=locomo", f"data_dir={LOCOMO.parents[1]}", "concurrency=2",
                 f"question_ids=[{','.join(QUESTION_IDS)}]", f"cache_dir={tmp}/cache", f"hydra.run.dir={tmp}/run",
                 *store], ROOT)
    records = {record["sample_id"]: record for record in json.loads(LOCOMO.read_text(encoding="utf-8"))}
    return {"tmp": tmp, "store": store, "stdout": done.stdout, "rows": _rows(tmp / "run" / "outcomes.jsonl"),
            "metrics": json.loads((tmp / "run" / "metrics.json").read_text()), "records": records}


def _qa(records: dict, question_id: str) -> dict:
    sample_id, index = locomo_question_place(question_id)
    return records[sample_id]["qa"][index]


@needs(LOCOMO)
def test_locomo_rows_carry_category_reference_and_f1(locomo_run):
    rows, records = locomo_run["rows"], locomo_run["records"]
    assert sorted(row["question_id"] for row in rows) == QUESTION_IDS
    for row in rows:
        assert set(row) == LONGMEMEVAL_ROW_KEYS | LOCOMO_KEYS
        qa = _qa(records, row["question_id"])
        assert row["category"] == qa["category"] and row["question_type"] == CATEGORY_NAMES[qa["category"]]
        if qa["category"] != 5:  # category 5's reference is lme's abstention text (its rule never reads one)
            assert row["reference_answer"] == reference_of(qa)
        expected = question_f1(row["answer"], reference_of(qa), qa["category"])
        assert row["locomo_f1"] == expected
    assert any(row["locomo_f1"] > 0 for row in rows)  # the check above is not all zeros
    header = (locomo_run["tmp"] / "run" / "outcomes.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert LOCOMO_KEYS <= set(header)


@needs(LOCOMO)
def test_locomo_metrics_in_metrics_json_and_summary(locomo_run):
    rows, metrics = locomo_run["rows"], locomo_run["metrics"]
    scores = {row["question_id"]: (row["category"], row["locomo_f1"]) for row in rows}
    for number, ids in PICKED.items():
        mean = sum(scores[qid][1] for qid in ids) / len(ids)
        assert metrics[f"locomo.f1.{CATEGORY_NAMES[number]}"] == pytest.approx(mean)
    assert metrics["locomo.f1"] == pytest.approx(sum(f1 for _, f1 in scores.values()) / len(scores))
    four = [f1 for category, f1 in scores.values() if category != 5]
    assert metrics["locomo.f1_without_adversarial"] == pytest.approx(sum(four) / len(four))
    judged = [row["correct"] for row in rows if row["category"] != 5]
    assert metrics["locomo.j_without_adversarial"] == pytest.approx(sum(judged) / len(judged))
    line = locomo_run["stdout"]
    assert f"LoCoMo F1 {metrics['locomo.f1']:.3f} (locomo.f1)" in line
    assert f"J without adversarial {metrics['locomo.j_without_adversarial']:.3f} (locomo.j_without_adversarial)" in line


@needs(LOCOMO)
def test_export_writes_locomos_file_and_it_scores_as_the_rows(locomo_run):
    tmp, rows, records = locomo_run["tmp"], locomo_run["rows"], locomo_run["records"]
    run_id = locomo_run["stdout"].split("MLflow run ")[1].split()[0]
    out = tmp / "predictions.json"
    done = _lme(["export", run_id, "--out", str(out), "--prediction-key", "bm25_prediction", *locomo_run["store"]], tmp)
    assert "Overall accuracy:" in done.stdout and "wrote 10 answers under 'bm25_prediction'" in done.stdout
    exported = json.loads(out.read_text(encoding="utf-8"))
    assert [record["sample_id"] for record in exported] == ["conv-26"]
    (record,) = exported
    assert {k: v for k, v in record.items() if k != "qa"} == {k: v for k, v in records["conv-26"].items() if k != "qa"}
    indices = sorted(locomo_question_place(qid)[1] for qid in QUESTION_IDS)
    by_id = {row["question_id"]: row for row in rows}
    assert len(record["qa"]) == len(indices)
    for index, item in zip(indices, record["qa"]):
        row = by_id[f"conv-26-q{index:03d}"]
        assert {k: v for k, v in item.items() if k != "bm25_prediction"} == records["conv-26"]["qa"][index]
        assert item["bm25_prediction"] == row["answer"]
        # LoCoMo's scoring of the exported item, with lme's implementation: the row's F1, question by question
        assert question_f1(item["bm25_prediction"], reference_of(item), item["category"]) == row["locomo_f1"]
    every = tmp / "every.json"
    _lme(["export", run_id, "--out", str(every), "--keep-unselected", *locomo_run["store"]], tmp)
    (whole, *rest) = json.loads(every.read_text(encoding="utf-8"))
    assert len(rest) == len(records) - 1 and len(whole["qa"]) == len(records["conv-26"]["qa"])
    assert sum("lme_prediction" in item for item in whole["qa"]) == len(QUESTION_IDS)


def test_a_longmemeval_run_keeps_its_row_keys(tmp_path):
    """The bundled sample (LongMemEval's shape): no LoCoMo key in outcomes.jsonl, outcomes.csv or metrics.json."""
    _lme(["+design=bm25", "limit=3", "tracking.enabled=false", f"cache_dir={tmp_path}/cache",
          f"hydra.run.dir={tmp_path}/run"], ROOT)
    rows = _rows(tmp_path / "run" / "outcomes.jsonl")
    assert len(rows) == 3 and all(set(row) == LONGMEMEVAL_ROW_KEYS for row in rows)
    header = (tmp_path / "run" / "outcomes.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert not LOCOMO_KEYS & set(header)
    assert not any(key.startswith("locomo.") for key in json.loads((tmp_path / "run" / "metrics.json").read_text()))
