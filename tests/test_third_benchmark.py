"""A third benchmark is a file (docs/architecture.md, "Add a benchmark"): a module with a `BENCHMARK` and a dataset
YAML under a search path of one's own, run end to end by `python -m lme` with no change to lme. The benchmark
below is made up (two questions about one short conversation between two people, one of them unanswerable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = '''
"""A made-up benchmark: {"histories": {...}, "items": [...]} in one JSON file."""
from datetime import datetime

from lme.data.benchmark import Benchmark, json_document
from lme.data.records import Question, Session, Turn
from lme.util.errors import DataError


def parse(data, path, options):
    raw = json_document(data, path)
    if not isinstance(raw, dict) or not isinstance(raw.get("items"), list):
        raise DataError(f"{path}: a tiny benchmark file is an object with an items list.")
    questions = []
    for n, item in enumerate(raw["items"]):
        history = raw["histories"][item["history"]]
        sessions = []
        for i, session in enumerate(history):
            turns = tuple(Turn(f"s{i:04d}:{k}", "user" if who == "A" else "assistant", text,
                               has_answer=f"{i}:{k}" in item["evidence"], speaker=who)
                          for k, (who, text) in enumerate(session["turns"]))
            sessions.append(Session(f"s{i:04d}", datetime.fromisoformat(session["date"]), session["date"], turns,
                                    f"day{i}", any(t.has_answer for t in turns)))
        questions.append(Question(
            question_id=f"tiny-{n}", question_type=item["kind"], question=item["q"], answer=item["a"],
            question_date=sessions[-1].date, question_date_text=sessions[-1].date_text, sessions=tuple(sessions),
            answer_session_ids=tuple(s.original_id for s in sessions if s.is_evidence),
            abstains=item["kind"] == "unanswerable", benchmark=options["name"]))
    return questions


BENCHMARK = Benchmark(name="tinybench", title="Tiny", parse=parse, categories=("fact", "unanswerable"),
                      abstaining=("unanswerable",), speakers="two-people", default_judge="offline",
                      options={"name": "tinybench"})
'''

DATA = {
    "histories": {"h1": [
        {"date": "2024-03-01T10:00:00", "turns": [["A", "I adopted a grey cat called Pepper last week."],
                                                   ["B", "Pepper is a lovely name for a cat."]]},
        {"date": "2024-03-09T18:30:00", "turns": [["A", "Pepper knocked my lamp over tonight."],
                                                   ["B", "Cats do that; a heavier base might help."]]},
    ]},
    "items": [
        {"history": "h1", "kind": "fact", "q": "What is the name of the cat?", "a": "Pepper",
         "evidence": ["0:0"]},
        {"history": "h1", "kind": "unanswerable", "q": "What is the name of the dog?",
         "a": "The conversation does not say", "evidence": []},
    ],
}

DATASET_YAML = """name: tiny
benchmark: tinybench
path: {path}
stream: false
fetch: null
"""


@pytest.fixture()
def tiny(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "tinybench.py").write_text(MODULE, encoding="utf-8")
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(DATA), encoding="utf-8")
    conf = tmp_path / "myconf" / "dataset"
    conf.mkdir(parents=True)
    (conf / "tiny.yaml").write_text(DATASET_YAML.format(path=data), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "pkg"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"env": env, "searchpath": f"hydra.searchpath=[file://{tmp_path / 'myconf'}]", "root": tmp_path}


def lme(tiny: dict, *args: str) -> subprocess.CompletedProcess[str]:
    root = tiny["root"]
    return subprocess.run([sys.executable, "-m", "lme", *args, tiny["searchpath"], "dataset=tiny",
                           f"cache_dir={root}/cache", "tracking.enabled=false"],
                          cwd=root, env=tiny["env"], capture_output=True, text=True, timeout=600)


def test_a_made_up_benchmark_runs_end_to_end_from_a_module_and_a_yaml(tiny):
    done = lme(tiny, "+design=bm25", "retriever=fts5")
    assert done.returncode == 0, done.stderr[-3000:]
    (journal,) = Path(tiny["root"]).glob("outputs/bm25/*/outcomes.jsonl")
    rows = {row["question_id"]: row for row in map(json.loads, journal.read_text().splitlines())}
    assert set(rows) == {"tiny-0", "tiny-1"}
    assert rows["tiny-0"]["question_type"] == "fact" and rows["tiny-1"]["abstention"] is True
    assert all(row["answer"] and row["correct"] is not None for row in rows.values())
    stats = lme(tiny, "data", "stats", "--json")
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert json.loads(stats.stdout)["questions"] == 2


def test_its_retrieval_measures_come_from_its_evidence_flags(tiny):
    done = lme(tiny, "retrieval", "+design=bm25", "retriever=fts5", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["n_questions"] == 2 and report["n_abstention"] == 1  # the unanswerable one is left out
    metrics = report["overall"]["metrics"]
    # four turns in all, so the evidence turn (speaker A's first) is within the top 5 whatever BM25 ranks first
    assert metrics["turn.recall_any_all_roles@5"] == 1.0 and metrics["session.recall_any_all_turns@5"] == 1.0


def test_a_benchmark_module_that_is_not_there_is_one_sentence(tiny, tmp_path):
    conf = Path(tiny["root"]) / "myconf" / "dataset" / "tiny.yaml"
    conf.write_text(conf.read_text().replace("tinybench", "no_such_bench"), encoding="utf-8")
    done = lme(tiny, "+design=bm25", "retriever=fts5")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("lme:")]
    assert any("dataset.benchmark 'no_such_bench'" in line for line in lines), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
