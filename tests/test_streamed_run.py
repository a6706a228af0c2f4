"""A run over a large file reads its questions one at a time (`dataset.stream=true`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from design_helpers import load_dataset
from lme.data.dataset import StreamedQuestions, question_ids_of
from lme.cli import compose_config
from lme.data.load import load_questions

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def m_like(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("m") / "m_small.json"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_synthetic_m.py"), "--questions", "6",
                    "--sessions", "12", "--out", str(out)], check=True, capture_output=True, cwd=REPO)
    return out


def test_streamed_selection_needs_no_parse_and_yields_the_same_questions(m_like):
    cfg = compose_config([f"dataset.path={m_like}", "dataset.stream=true", "limit=4"])
    _, streamed = load_dataset(cfg)
    assert isinstance(streamed, StreamedQuestions) and len(streamed) == 4
    eager = load_questions(m_like)[:4]
    assert question_ids_of(streamed) == [q.question_id for q in eager]
    assert list(streamed) == eager


def test_a_streamed_run_answers_every_selected_question(m_like, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lme", f"dataset.path={m_like}", "dataset.stream=true", "tracking.enabled=false",
         f"cache_dir={tmp_path}/cache", "question_types=[multi-session,knowledge-update,temporal-reasoning,"
         "single-session-user,single-session-assistant,single-session-preference]"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    journal = next((tmp_path / "outputs").glob("*/*/outcomes.jsonl"))
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted(r["question_id"] for r in rows) == sorted(q.question_id for q in load_questions(m_like))
