"""The orchestration benchmark (scripts/bench_orchestration.py): its arithmetic, and a small real study
against the loopback server (4 questions of the mini S file x 2 seeds)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from shared_data import MINI, needs

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_orchestration.py"


def _bench():
    if "bench_orchestration" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_orchestration", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_orchestration"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_orchestration"]


KEYS = {"stage", "figure", "value", "unit", "compared_to", "ratio", "target", "met", "note"}


def _run(bench, **changes):
    base = dict(latency=0.5, concurrency=32, seeds=3, questions=498, wall_s=60.0, first_request_s=12.0,
                call_span_s=50.0, calls=2988, reader_calls=1494, judge_calls=1494, max_in_flight=32,
                journaled=1494, ledger_paid=2988, exit_code=0, tracking=True)
    return bench.StudyRun(**{**base, **changes})


def test_ideal_is_calls_times_latency_over_concurrency() -> None:
    bench = _bench()
    assert bench.ideal_seconds(2988, 0.5, 32) == pytest.approx(46.6875)
    assert bench.ideal_seconds(10, 1.0, 0) == 10.0  # concurrency below 1 counts as 1
    assert bench.ratio(56.0, 46.0) == pytest.approx(56 / 46)
    assert bench.ratio(5.0, 0.0) is None


def test_latency_rows_state_the_ratio_against_the_ideal() -> None:
    bench = _bench()
    run = _run(bench)
    rows = bench.latency_rows(run)
    assert all(set(r) == KEYS and r["stage"] == "orchestration" for r in rows)
    wall = rows[0]
    assert wall["value"] == 60.0 and wall["unit"] == "s"
    assert wall["ratio"] == pytest.approx(60.0 / 46.6875, abs=1e-3)
    assert wall["met"] is False  # 1.285 > 1.25
    assert "2988 x 0.5 / 32" in wall["compared_to"]
    assert _run(bench, wall_s=50.0).ideal_s == pytest.approx(46.6875)
    assert bench.latency_rows(_run(bench, wall_s=50.0))[0]["met"] is True
    assert rows[1]["ratio"] == pytest.approx(50.0 / 46.6875, abs=1e-3) and rows[1]["met"] is None


def test_overhead_rows_divide_by_questions_times_seeds() -> None:
    bench = _bench()
    run = _run(bench, latency=0.0, wall_s=37.35)
    rows = bench.overhead_rows(run)
    assert rows[0]["value"] == pytest.approx(25.0) and rows[0]["unit"] == "ms"
    assert rows[0]["met"] is False  # the target is strictly under 25 ms
    assert bench.overhead_rows(_run(bench, latency=0.0, wall_s=29.88))[0]["met"] is True
    assert len(rows) == 2 and "profile" not in " ".join(r["figure"] for r in rows)
    assert all(r["met"] is None for r in rows[1:])


def test_the_overhead_figure_comes_from_the_run_without_the_profiler() -> None:
    """The profiled run's wall time (py-spy's sampling takes CPU) is shown apart; the figure and its target
    are the unprofiled run's; the breakdown is the profiled run's samples over its questions."""
    bench = _bench()
    plain = _run(bench, latency=0.0, wall_s=29.88)
    profiled = _run(bench, latency=0.0, wall_s=37.35, profile={"memory building": 6.0, "imports (start-up)": 4.0})
    rows = bench.overhead_rows(plain, profiled)
    assert rows[0]["value"] == pytest.approx(20.0) and rows[0]["met"] is True
    spy = next(r for r in rows if "under py-spy" in r["figure"])
    assert spy["value"] == pytest.approx(25.0) and spy["met"] is None and "37.4 s" in spy["compared_to"]
    profile = {r["figure"].strip(): r for r in rows if "profile:" in r["figure"]}
    assert set(profile) == {"profile: memory building", "profile: imports (start-up)"}
    assert profile["profile: memory building"]["value"] == pytest.approx(6000 / 1494, abs=0.01)
    assert profile["profile: memory building"]["ratio"] == pytest.approx(0.6)
    assert all(r["met"] is None for r in rows[1:])


def test_profile_samples_are_sorted_into_categories(tmp_path: Path) -> None:
    bench = _bench()
    raw = tmp_path / "profile.txt"
    raw.write_text(
        "<module> (lme/__main__.py:8);_find_and_load (<frozen importlib._bootstrap>:1176);<module> (litellm/__init__.py:1) 50\n"
        "run (asyncio/runners.py:1);build (lme/memory/retrieved.py:70);rank (lme/retrieval/fts5.py:40) 30\n"
        "_call (lme/models/gateway.py:300);max_call_cost (lme/models/pricing.py:120);encode (tiktoken/core.py:82) 20\n"
        "_call (lme/models/gateway.py:300);acompletion (litellm/main.py:400) 10\n"
        "select (selectors.py:468) 5\n",
        encoding="utf-8",
    )
    seconds = bench.profile_categories(raw, rate_hz=100)
    assert seconds == {
        "imports (start-up)": 0.5,
        "memory building": 0.3,
        "token counting (ledger reservation)": 0.2,
        "litellm call path": 0.1,
        "other (interpreter, event loop, Hydra)": 0.05,
    }


@pytest.mark.slow
@needs(MINI)
def test_a_small_study_pays_every_call_once(tmp_path: Path) -> None:
    """4 questions x 2 seeds through `python -m lme` against the loopback server: 2 calls per question and seed."""
    bench = _bench()
    run = bench.run_study(MINI, 4, 2, 0.05, 4, tmp_path / "study", tracking=False)
    assert run.exit_code == 0
    assert (run.questions, run.seeds, run.journaled) == (4, 2, 8)
    assert run.calls == 4 * 2 * 2 and run.reader_calls == 8 and run.judge_calls == 8
    assert run.ledger_paid == run.calls  # a fresh cache: every call paid, each once
    assert 1 <= run.max_in_flight <= 4  # concurrency 4 holds
    assert run.ideal_s == pytest.approx(16 * 0.05 / 4)
    assert 0 < run.first_request_s < run.wall_s and run.call_span_s >= 0.05
    wall = bench.latency_rows(run)[0]
    assert wall["ratio"] == pytest.approx(run.wall_s / run.ideal_s, rel=1e-2)


@pytest.mark.slow
@needs(MINI)
def test_startup_rows_time_the_first_request_from_json_and_xz(tmp_path: Path) -> None:
    """The start-up rows run the study on the file decompressed (as `lme data fetch` writes it) and as
    given (.json.xz), as a multirun and as a single run: each row is the time to the server's first
    request, under the study's wall time."""
    bench = _bench()
    rows = bench.startup_rows(MINI, tmp_path, 4, tracking=False)
    assert [r["figure"] for r in rows] == ["start-up to the first request, from .json",
                                           "start-up to the first request, from .json.xz",
                                           "start-up to the first request, single run, from .json",
                                           "start-up to the first request, single run, from .json.xz"]
    plain = tmp_path / "longmemeval_s_cleaned_mini.json"
    assert plain.read_bytes()[:1] == b"["  # decompressed, read by the first study
    for r in rows:
        assert set(r) == KEYS and r["unit"] == "s" and r["value"] > 0
        wall = float(r["note"].split("wall ")[1].split(" s")[0])
        assert r["value"] < wall
    for r in rows[::2]:
        assert "longmemeval_s_cleaned_mini.json:" in r["note"]
    for r in rows[1::2]:
        assert "longmemeval_s_cleaned_mini.json.xz:" in r["note"]
    # the single runs wrote one job's journal where the sweep's first job's would be, without `-m`
    for label in (".json", ".json.xz"):
        assert (tmp_path / f"startup-single{label}" / "sweep" / "0" / "outcomes.jsonl").is_file()
        assert not (tmp_path / f"startup-single{label}" / "sweep" / "multirun.yaml").exists()
