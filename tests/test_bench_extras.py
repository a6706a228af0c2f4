"""scripts/bench.py on an install without lme's optional extras: a row needing one is skipped and says which, the
others run, and the bench exits 0 (issue 37, part 6).

The extra's package is made unimportable (`sys.modules[name] = None`) in a fresh interpreter; the measuring
itself (loading MiniLM, exporting ONNX) is stubbed out, as it is not what is tested here and takes minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"

# the bench's backends stage, openvino unimportable, each runnable backend's measuring replaced by one fake row
WRAPPER = """
import sys
sys.modules["openvino"] = None
sys.path.insert(0, {scripts!r})
import bench, bench_backends
from bench_common import Row
measured = []
def fake(texts, block, backends, *rest):
    measured.extend(backends)
    return [Row("backends", f"MiniLM {{b}}", 1.0, "texts/s") for b in backends]
bench_backends._measured_rows = fake
code = bench.main([{data!r}, "--skip", "load,memory,embedding,fill,orchestration,scale", *{args!r}])
print("MEASURED " + ",".join(measured), file=sys.stderr)
sys.exit(code)
"""


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "longmemeval_s_cleaned.json"
    data.write_text("[]", encoding="utf-8")  # the stage's measuring is stubbed: the file is only checked to exist
    code = WRAPPER.format(scripts=str(SCRIPTS), data=str(data), args=list(args))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False,
                          timeout=120)


def test_openvino_rows_skipped_the_others_run(tmp_path: Path) -> None:
    done = _bench(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["figure"]: row for row in json.loads(done.stdout)}
    assert list(rows) == ["MiniLM torch/fp32", "MiniLM onnx/fp32", "MiniLM onnx/int8", "MiniLM openvino/fp32",
                          "MiniLM openvino/int8"]  # every row, in the stage's order
    for name in ("openvino/fp32", "openvino/int8"):
        assert rows[f"MiniLM {name}"]["note"] == "skipped: needs the fast-cpu extra (openvino)"
    assert rows["MiniLM torch/fp32"]["value"] == 1.0 and not rows["MiniLM torch/fp32"]["note"]
    assert "MEASURED torch/fp32,onnx/fp32,onnx/int8" in done.stderr  # the others were measured, openvino not tried
    assert "bench_backends: MiniLM openvino/int8: skipped: needs the fast-cpu extra (openvino)" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_table_shows_the_skip(tmp_path: Path) -> None:
    done = _bench(tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "openvino/fp32" in line)
    assert "| - |" in line and "skipped: needs the fast-cpu extra (openvino)" in line


def test_a_stage_stopping_on_an_extras_import_is_one_skipped_row(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import bench

    def needs_pyserini() -> list:
        raise ModuleNotFoundError("No module named 'pyserini'", name="pyserini")

    monkeypatch.setitem(sys.modules, "pyserini", None)
    [row] = bench._run_stage("memory", needs_pyserini)
    assert row.stage == "memory" and row.note == "skipped: needs the lucene extra (pyserini)"

    def needs_something_else() -> list:
        raise ModuleNotFoundError("No module named 'numpyy'", name="numpyy")

    try:
        bench._run_stage("memory", needs_something_else)
    except ModuleNotFoundError:
        pass  # a missing package that is no extra's is a broken install: it still stops the bench
    else:
        raise AssertionError("a missing base dependency was skipped")


def test_rank_bm25_rows_skipped_without_the_test_extra(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import bench_memory

    monkeypatch.setitem(sys.modules, "rank_bm25", None)
    result = bench_memory.measure("rank_bm25", tmp_path / "none.json", 1)  # no child is started
    assert result == {"row": "rank_bm25", "skipped": "needs the test extra (rank_bm25)"}
