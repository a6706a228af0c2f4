"""`lme cost`: a study's spend over real job folders and their real ledger.

Real `python -m lme` jobs answer through the loopback server with priced reader and judge models, so every
call is paid and written to the ledger; a rerun is served from the call cache; one job folder is moved
away (a discarded design's folder). The command's totals are checked against the ledger's rows read with
plain SQL, and each design's paid dollars against what its journals record as paid.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer

KEY = "sk-lme-cost-0123456789abcdefXYZ"


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "HYDRA"))}
    return base | {"LME_FAKE_KEY": KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LME_PROGRESS_INTERVAL_S": "5"}


def lme_run(tmp: Path, url: str, *extra: str) -> None:
    models = []
    for part, model in (("reader", "openai/gpt-4o-mini"), ("judge", "openai/gpt-4o-2024-08-06")):
        models += [f"{part}.model.model={model}", f"++{part}.model.api_base={url}",
                   f"++{part}.model.api_key_env=LME_FAKE_KEY", f"{part}.model.max_attempts=2",
                   f"++{part}.model.input_cost_per_token=1e-6", f"++{part}.model.output_cost_per_token=2e-6"]
    result = subprocess.run(
        [sys.executable, "-m", "lme", "limit=3", "concurrency=3", "tracking.enabled=false", "progress=false",
         f"cache_dir={tmp / 'cache'}", *models, *extra],
        cwd=tmp, capture_output=True, text=True, timeout=600, env=env())
    assert result.returncode == 0, result.stderr[-3000:]


def journal(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "outcomes.jsonl").read_text().splitlines() if line.strip()]


def journal_sum(folder: Path, name: str) -> float:
    """Over every row and step of a journal, reader and judge: the field `name`."""
    return sum(float(step[part][name]) for row in journal(folder) for step in row["steps"] for part in ("reader", "judge"))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cost-study")
    with LoopbackServer(reply="offline") as server:
        lme_run(tmp, server.base_url, "-m", "+design=first_pass,bm25", "seed=1,2")  # 4 jobs under multirun/
        lme_run(tmp, server.base_url, "+design=first_pass", "seed=1", "hydra.run.dir=outputs/rerun")  # all cached
    folders = sorted(p.parent for p in (tmp / "multirun").rglob("outcomes.jsonl"))
    assert len(folders) == 4
    designs = {}
    for folder in folders:
        config = (folder / ".hydra" / "config.yaml").read_text()
        designs[folder] = "bm25" if "design_name: bm25" in config else "first_pass"
    assert sorted(designs.values()) == ["bm25", "bm25", "first_pass", "first_pass"]
    # a discarded job: its folder moved out of multirun/ (its ledger rows keep the old folder's name)
    moved_from = next(f for f, d in designs.items() if d == "bm25")
    moved = tmp / "attic" / "bm25-job"
    moved.parent.mkdir()
    shutil.move(str(moved_from), str(moved))
    with sqlite3.connect(tmp / "cache" / "ledger.sqlite") as conn:
        rows = [dict(zip(("job", "status", "dollars", "input", "output"), r)) for r in conn.execute(
            "SELECT job, status, dollars, input_tokens, output_tokens FROM calls")]
    return {"tmp": tmp, "designs": designs, "moved_from": moved_from, "moved": moved, "rows": rows}


def cost(argv: list[str], capsys, cwd: Path, monkeypatch) -> tuple[int, str, str]:
    from lme.cli import run_subcommand

    monkeypatch.chdir(cwd)
    code = run_subcommand("cost", argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_totals_are_the_ledgers_rows_and_each_design_what_its_journals_paid(study, capsys, monkeypatch):
    tmp, rows = study["tmp"], study["rows"]
    assert rows and all(r["status"] == "paid" for r in rows)
    code, out, err = cost(["--json"], capsys, tmp, monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    total = data["total"]
    assert total["paid_calls"] == len(rows)
    assert total["paid_usd"] == pytest.approx(sum(r["dollars"] for r in rows), rel=1e-12)
    assert (total["input_tokens"], total["output_tokens"]) == (sum(r["input"] for r in rows), sum(r["output"] for r in rows))
    by_name = {d["name"]: d for d in data["designs"]}
    assert {name: d["jobs"] for name, d in by_name.items()} == {"bm25": 1, "first_pass": 3}  # 2 seeds + the rerun
    # the moved folder's job: its rows under "jobs not under these folders", counted in the total
    moved_rows = [r for r in rows if r["job"] == str(study["moved_from"].resolve())]
    assert moved_rows and data["other"]["paid_calls"] == len(moved_rows) and data["other"]["jobs"] == 1
    assert data["other"]["paid_usd"] == pytest.approx(sum(r["dollars"] for r in moved_rows))
    # each design's paid dollars and calls are what its journals record as paid (every call was paid or cached)
    for name, spend in by_name.items():
        folders = [f for f, d in study["designs"].items() if d == name and f != study["moved_from"]]
        if name == "first_pass":
            folders.append(tmp / "outputs" / "rerun")
        assert spend["paid_usd"] == pytest.approx(sum(journal_sum(f, "spent_usd") for f in folders), rel=1e-9)
        assert spend["paid_calls"] == sum(journal_sum(f, "calls") - journal_sum(f, "cached_calls") for f in folders)
        assert spend["reader_calls"] + spend["judge_calls"] == sum(journal_sum(f, "calls") for f in folders)
    assert sum(d["paid_usd"] for d in data["designs"]) + data["other"]["paid_usd"] == pytest.approx(total["paid_usd"])
    assert data["notes"] == []


@pytest.mark.slow
def test_cache_hits_cost_nothing_now_and_show_what_they_first_cost(study, capsys, monkeypatch):
    tmp = study["tmp"]
    rerun = tmp / "outputs" / "rerun"
    code, out, err = cost(["--json", str(rerun)], capsys, tmp, monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    spend = data["designs"][0]
    calls = journal_sum(rerun, "calls")
    assert spend["name"] == "first_pass" and spend["jobs"] == 1 and calls == 6  # 3 questions, reader and judge
    assert spend["cached_calls"] == calls and spend["paid_calls"] == 0 and spend["paid_usd"] == 0
    seed1 = next(f for f, d in study["designs"].items() if d == "first_pass" and "seed: 1\n" in
                 (f / ".hydra" / "config.yaml").read_text())
    assert spend["cached_original_usd"] == pytest.approx(journal_sum(seed1, "cost_usd")) and spend["cached_original_usd"] > 0
    # the ledger's other jobs are named, not hidden: every row of the ledger is in the total
    assert data["total"]["paid_usd"] == pytest.approx(sum(r["dollars"] for r in study["rows"]))


@pytest.mark.slow
def test_markdown_and_folders_named_explicitly(study, capsys, monkeypatch):
    tmp = study["tmp"]
    code, out, err = cost([], capsys, tmp, monkeypatch)
    assert code == 0, err
    total = sum(r["dollars"] for r in study["rows"])
    assert f"Total spent: ${total:,.4f} over {len(study['rows'])} paid call(s)" in out
    assert "| (jobs not under these folders) | 1 | - | - | - | - |" in out
    line = next(line for line in out.splitlines() if line.startswith("| total |"))
    assert line.endswith(f"| ${total:,.4f} |")
    # the moved folder named too: its rows are its own again (its ledger name comes from its .hydra/hydra.yaml)
    code, out, err = cost(["--json", "multirun", "outputs", str(study["moved"])], capsys, tmp, monkeypatch)
    data = json.loads(out)
    assert code == 0 and data["other"] is None
    assert {d["name"]: d["jobs"] for d in data["designs"]} == {"bm25": 2, "first_pass": 3}
    assert data["total"]["paid_usd"] == pytest.approx(total)


# --- fast: job folders as a job leaves them, rows written through the ledger's own API -------------------


def job_folder(root: Path, design: str, seed: int, cache_dir: Path, questions: int = 2, cached: bool = False) -> Path:
    """A job folder as `lme.study.job.run_job` and Hydra leave it: `.hydra/` (config, runtime) and the journal,
    written by `lme.answer.run.Journal`."""
    from lme.answer.run import CallStats, Journal, Outcome, Step

    folder = root / "multirun" / design / "2026-01-01_00-00-00" / str(seed)
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(
        f"design_name: {design}\nseed: {seed}\ncache_dir: {cache_dir}\n"
        "budget:\n  ledger_path: ${cache_dir}/ledger.sqlite\n  study: default\n  job: null\n")
    (folder / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    cwd: {root}\n    output_dir: {folder}\n")
    (folder / ".hydra" / "overrides.yaml").write_text(f"- +design={design}\n- seed={seed}\n")
    journal = Journal(folder / "outcomes.jsonl")
    for i in range(questions):
        stats = CallStats(calls=1, cached_calls=int(cached), input_tokens=100, output_tokens=5, cost_usd=0.01,
                          spent_usd=0.0 if cached else 0.01)
        step = Step(rule="first_pass", view="first_pass", instruction_sha256="0" * 64, chosen=True, reread=False,
                    failed=False, error=None, step_answer="a", answer="a", correct=True, reader=stats, judge=stats)
        journal.append(Outcome(f"q{i}", "multi-session", False, "a", True, None, "yes", "", 10, 1, stats, stats,
                               steps=(step,)))
    return folder


def test_ledger_rows_count_as_the_caps_count_them(tmp_path, capsys, monkeypatch):
    from lme.models.ledger import Ledger

    cache = tmp_path / "cache"
    first = job_folder(tmp_path, "first_pass", 1, cache)
    rerun = job_folder(tmp_path, "first_pass", 2, cache, cached=True)
    ledger = Ledger(cache / "ledger.sqlite", job=str(first))
    usage = {"input_tokens": 100, "output_tokens": 5}
    for _ in range(4):  # the job's 2 reader and 2 judge calls
        ledger.settle(ledger.reserve("m", os.urandom(8).hex(), 0.05), usage, 0.01, 1)
    ledger.release(ledger.reserve("m", "lost", 0.07), "interrupted")  # counted at its reserved maximum
    ledger.release(ledger.reserve("m", "failed", 0.09), "failed")  # nothing returned: nothing counted
    ledger.close()
    arbiter = Ledger(cache / "ledger.sqlite", job="arbiter:first_pass")
    arbiter.settle(arbiter.reserve("m", "arb", 0.05), usage, 0.02, 1)
    arbiter.close()
    other_study = Ledger(cache / "ledger.sqlite", study="another", job="/elsewhere/job")
    other_study.settle(other_study.reserve("m", "x", 0.5), usage, 0.3, 1)
    other_study.close()

    code, out, err = cost(["--json"], capsys, tmp_path, monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    spend = data["designs"][0]
    assert (spend["name"], spend["jobs"], spend["reader_calls"], spend["judge_calls"]) == ("first_pass", 2, 4, 4)
    assert (spend["paid_calls"], spend["interrupted_calls"], spend["failed_calls"], spend["arbiter_calls"]) == (5, 1, 1, 1)
    assert spend["paid_usd"] == pytest.approx(4 * 0.01 + 0.07 + 0.02)
    assert spend["cached_calls"] == 4 and spend["cached_original_usd"] == pytest.approx(0.04)
    assert data["other"]["paid_usd"] == pytest.approx(0.3) and data["other"]["ledger_jobs"] == ["/elsewhere/job"]
    assert data["total"]["paid_usd"] == pytest.approx(0.13 + 0.3)
    # the ledger counts $0.09 more than the journals record as paid (the interrupted and the arbiter's calls)
    assert data["notes"] == [
        "design first_pass: its ledger rows count $0.0900 more than its journals record as paid (questions re-asked on "
        "resume, billed failed or interrupted calls, arbiter calls, calls of unfinished questions)"]
    code, out, _ = cost(["--json", "--study", "default"], capsys, tmp_path, monkeypatch)
    assert json.loads(out)["other"] is None and json.loads(out)["total"]["paid_usd"] == pytest.approx(0.13)
    code, out, _ = cost([], capsys, tmp_path, monkeypatch)
    assert "| first_pass | 2 | 4 | 4 | 4 | $0.0400 | 5 (+1 interrupted) | 500 | 25 | $0.1300 |" in out
    assert "Total spent: $0.4300 over 7 paid call(s) (1 interrupted); 4 call(s) from the cache, first paid $0.0400." in out
    assert rerun.is_dir()


def test_bad_input_is_one_sentence(capsys, monkeypatch, tmp_path):
    code, _, err = cost(["nowhere"], capsys, tmp_path, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "nowhere: no such folder" in err
    code, _, err = cost([], capsys, tmp_path, monkeypatch)
    assert code == 2 and "no multirun or outputs folder here" in err
    job_folder(tmp_path, "bm25", 1, tmp_path / "cache")
    (tmp_path / "not-a-ledger.sqlite").write_text("hello")
    code, _, err = cost(["--ledger", str(tmp_path / "not-a-ledger.sqlite")], capsys, tmp_path, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "not-a-ledger.sqlite" in err
    code, _, err = cost(["--ledger", str(tmp_path / "none.sqlite")], capsys, tmp_path, monkeypatch)
    assert code == 2 and "none.sqlite: no ledger file there (--ledger)" in err
    code, out, err = cost([], capsys, tmp_path, monkeypatch)  # the job's ledger was never created: said, not made
    assert code == 0 and "does not exist (no paid call was made" in out and not (tmp_path / "cache").exists()
