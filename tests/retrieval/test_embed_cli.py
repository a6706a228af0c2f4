"""`python -m lme embed`: the embedding cache filled ahead of a study, de-duplicated, resumable after a kill.

The real packaged MiniLM encodes small written histories; the kill test runs `lme embed` as a process,
kills it (SIGKILL) once its first chunk is committed, and reruns it.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from embedding_data import record, write_dataset
from omegaconf import OmegaConf

from lme.cli import run_subcommand
from lme.data.load import load_questions
from lme.retrieval.dense import DenseRetriever

CONF = Path(__file__).resolve().parents[2] / "conf"
SUMMARY = re.compile(r"(\d[\d,]*) texts requested, (\d[\d,]*) distinct; (\d[\d,]*) already cached, "
                     r"(\d[\d,]*) encoded in ([\d.,]+) s")


def numbers(out: str) -> tuple[int, int, int, int]:
    """(requested, distinct, already cached, encoded) from `lme embed`'s summary line."""
    found = SUMMARY.search(out)
    assert found is not None, out
    return tuple(int(value.replace(",", "")) for value in found.groups()[:4])  # type: ignore[return-value]


def overlapping(path: Path, texts: list[str], questions: int, per_question: int, step: int) -> Path:
    """`questions` histories of `per_question` sessions (user: a text, assistant: "Noted."), history n holding
    texts[n * step : n * step + per_question]: consecutive histories share per_question - step texts."""
    return write_dataset(path, [
        record(f"q{n}", f"What did I note about item {n}?",
               [[("user", text), ("assistant", "Noted.")] for text in texts[n * step : n * step + per_question]])
        for n in range(questions)
    ])


def test_a_retriever_without_a_semantic_part_embeds_nothing(tmp_path: Path, capsys) -> None:
    data = overlapping(tmp_path / "d.json", ["a b c"] * 3, 1, 3, 0)
    assert run_subcommand("embed", [f"dataset.path={data}", f"cache_dir={tmp_path}", "tracking.enabled=false"]) == 2
    assert "the retriever bm25 embeds nothing (no semantic part); choose retriever=semantic" in capsys.readouterr().err


def test_embed_fills_exactly_what_ranking_asks_for_once_across_histories(tmp_path: Path, capsys) -> None:
    texts = [f"On day {i} I repotted the fern number {i} by the window." for i in range(12)]
    data = overlapping(tmp_path / "d.json", texts, questions=3, per_question=6, step=3)
    args = ["retriever=hybrid", "retriever.retrievers.semantic.device=cpu", f"dataset.path={data}",
            f"cache_dir={tmp_path / 'cache'}", "tracking.enabled=false"]
    assert run_subcommand("embed", args) == 0
    # 3 histories x 12 turns + 3 questions; distinct: 12 texts + "Noted." + 3 questions
    assert numbers(capsys.readouterr().out) == (39, 16, 0, 16)

    assert run_subcommand("embed", args) == 0  # a second run encodes nothing
    assert numbers(capsys.readouterr().out) == (39, 16, 16, 0)

    default = OmegaConf.load(CONF / "embedding" / "minilm.yaml")  # the backend and precision `lme embed` used
    dense = DenseRetriever(model="minilm-packaged", device="cpu", cache_path=tmp_path / "cache" / "embeddings.sqlite",
                           runtime=default.backend, precision=default.precision)
    for question in load_questions(data):
        dense.rank(question, 5)
    assert dense.counters().encoded == 0 and not dense.encoder.loaded  # ranking found every vector it needed
    dense.close()


@pytest.mark.slow
def test_a_killed_embed_resumes_without_encoding_what_it_stored(tmp_path: Path) -> None:
    texts = [f"Entry {i}: the {('red', 'blue', 'green')[i % 3]} kite {i} flew over hill {i * 7}." for i in range(900)]
    data = overlapping(tmp_path / "d.json", texts, questions=2, per_question=600, step=300)
    cache = tmp_path / "cache" / "embeddings.sqlite"
    command = [sys.executable, "-m", "lme", "embed", "retriever=semantic", "retriever.device=cpu",
               "retriever.batch_size=8", f"dataset.path={data}", f"cache_dir={tmp_path / 'cache'}",
               "tracking.enabled=false"]
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    distinct = 900 + 1 + 2  # the texts, "Noted.", the two questions
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if stored(cache) >= 8 * 16:  # the first chunk (16 batches of 8) is committed
                break
            time.sleep(0.05)
        assert process.poll() is None, "lme embed finished before it could be killed: " + process.stderr.read()
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()
    kept = stored(cache)
    assert 8 * 16 <= kept < distinct

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert rerun.returncode == 0, rerun.stderr
    requested, found, cached, encoded = numbers(rerun.stdout)
    assert (requested, found) == (2 * 1200 + 2, distinct)
    assert cached == kept and encoded == distinct - kept  # nothing stored before the kill is encoded again
    assert stored(cache) == distinct


def stored(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0
