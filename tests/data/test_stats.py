"""Dataset statistics: checked against counts computed here, independently, from the raw JSON."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from lme.cli import run_subcommand
from lme.data.load import load_questions
from lme.data.records import QUESTION_TYPES
from lme.data.sample import SAMPLE_PATH
from lme.data.stats import DatasetStats, dataset_stats, format_table, stats_json
from shared_data import MINI, need
from shared_data import S_FILE as FULL_S

REPO = Path(__file__).resolve().parents[2]


def read_raw(path: Path) -> list[dict[str, Any]]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _when(text: str) -> datetime:
    return datetime.strptime(text, "%Y/%m/%d (%a) %H:%M")


def reference_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The statistics, the plain way: straight over the raw records, no lme code."""
    n = len(records)
    history_bytes, user_bytes, user_messages = [], [], []
    texts: set[str] = set()
    turns = sessions = 0
    evidence = Counter()
    same_day = duplicates = before_last = 0
    for record in records:
        all_b = user_b = messages = 0
        marked = []
        for session in record["haystack_sessions"]:
            sessions += 1
            for turn in session:
                turns += 1
                size = len(turn["content"].encode("utf-8"))
                all_b += size
                texts.add(turn["content"])
                if turn["role"] == "user":
                    user_b += size
                    messages += 1
                if turn.get("has_answer") is True:
                    marked.append(turn["role"])
        history_bytes.append(all_b)
        user_bytes.append(user_b)
        user_messages.append(messages)
        if not marked:
            evidence["unmarked"] += 1
        elif all(role == "user" for role in marked):
            evidence["user"] += 1
        elif all(role == "assistant" for role in marked):
            evidence["assistant"] += 1
        else:
            evidence["mixed"] += 1
        same_day += len({_when(d).date() for d in record["haystack_dates"]}) == 1
        ids = [str(value) for value in record["haystack_session_ids"]]
        duplicates += len(ids) != len(set(ids))
        before_last += _when(record["question_date"]) < max(_when(d) for d in record["haystack_dates"])
    types = Counter(record["question_type"] for record in records)
    return {
        "questions": n,
        "question_types": {name: types.get(name, 0) for name in QUESTION_TYPES},
        "abstention": sum("_abs" in record["question_id"] for record in records),
        "turns": turns,
        "mean_sessions": sessions / n,
        "mean_turns": turns / n,
        "mean_history_bytes": sum(history_bytes) / n,
        "user_share": sum(user_bytes) / sum(history_bytes),
        "mean_user_messages": sum(user_messages) / n,
        "mean_user_bytes": sum(user_bytes) / n,
        "max_user_bytes": max(user_bytes),
        "evidence_all_user": evidence["user"],
        "evidence_all_assistant": evidence["assistant"],
        "evidence_mixed": evidence["mixed"],
        "evidence_unmarked": evidence["unmarked"],
        "same_day_histories": same_day,
        "distinct_turn_texts": len(texts),
        "duplicate_session_ids": duplicates,
        "question_date_before_last_session": before_last,
    }


def assert_matches(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(got) == list(expected)
    for key, value in expected.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert got[key] == value, key


def check_file(path: Path) -> dict[str, Any]:
    got = stats_json(dataset_stats(load_questions(path)))
    expected = reference_stats(read_raw(path))
    assert_matches(got, expected)
    return got


# --- hand-made records with known answers --------------------------------------------


def _turn(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
    return {"role": role, "content": content, "has_answer": has_answer}


def _record(
    qid: str,
    sessions: list[list[dict[str, Any]]],
    dates: list[str],
    ids: list[str],
    question_date: str = "2024/01/20 (Sat) 12:00",
    question_type: str = "multi-session",
) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": question_type,
        "question": "What did I say?",
        "answer": "Something",
        "question_date": question_date,
        "haystack_dates": dates,
        "haystack_session_ids": ids,
        "haystack_sessions": sessions,
        "answer_session_ids": [],
    }


def test_small_file_with_known_answers(tmp_path: Path) -> None:
    records = [
        # user evidence; two days; question after the last session
        _record(
            "a1",
            [[_turn("user", "café", True), _turn("assistant", "ok")], [_turn("user", "hi")]],
            ["2024/01/01 (Mon) 10:00", "2024/01/02 (Tue) 10:00"],
            ["x", "y"],
        ),
        # assistant evidence; one day; asked before the last session; repeats a session id
        _record(
            "a2_abs",
            [[_turn("user", "hi"), _turn("assistant", "sure", True)], [_turn("assistant", "ok")]],
            ["2024/01/05 (Fri) 09:00", "2024/01/05 (Fri) 18:00"],
            ["z", "z"],
            question_date="2024/01/05 (Fri) 12:00",
            question_type="temporal-reasoning",
        ),
        # mixed evidence
        _record(
            "a3", [[_turn("user", "one", True), _turn("assistant", "two", True)]], ["2024/01/07 (Sun) 10:00"], ["w"]
        ),
        # nothing marked
        _record("a4", [[_turn("user", "hi"), _turn("assistant", "ok")]], ["2024/01/08 (Mon) 10:00"], ["v"]),
    ]
    path = tmp_path / "small.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    stats = dataset_stats(load_questions(path))
    assert stats.questions == 4
    assert stats.question_types["multi-session"] == 3
    assert stats.question_types["temporal-reasoning"] == 1
    assert stats.question_types["single-session-user"] == 0
    assert stats.abstention == 1
    assert stats.turns == 10
    assert stats.mean_sessions == 6 / 4
    # bytes: café is 5; a1 = 5+2+2, a2 = 2+4+2, a3 = 3+3, a4 = 2+2
    assert stats.mean_history_bytes == (9 + 8 + 6 + 4) / 4
    assert stats.user_share == (5 + 2 + 2 + 3 + 2) / 27
    assert stats.mean_user_messages == (2 + 1 + 1 + 1) / 4
    assert stats.max_user_bytes == 7
    assert (stats.evidence_all_user, stats.evidence_all_assistant) == (1, 1)
    assert (stats.evidence_mixed, stats.evidence_unmarked) == (1, 1)
    assert stats.same_day_histories == 3  # a2 (two sessions, one day), a3 and a4 (one session each)
    assert stats.duplicate_session_ids == 1
    assert stats.question_date_before_last_session == 1
    assert stats.distinct_turn_texts == len({"café", "ok", "hi", "sure", "one", "two"})
    assert_matches(stats_json(stats), reference_stats(records))


def test_no_questions_gives_zeros() -> None:
    stats = dataset_stats([])
    assert stats.questions == 0 and stats.mean_sessions == 0.0 and stats.user_share == 0.0
    assert set(stats.question_types) == set(QUESTION_TYPES)


def test_table_has_one_row_per_value_and_json_is_one_object() -> None:
    stats = dataset_stats(load_questions(SAMPLE_PATH))
    table = format_table(stats).splitlines()
    assert table[0] == "| key | value | meaning |"
    keys = [line.split("|")[1].strip() for line in table[2:]]
    flat = [k for k in stats_json(stats) if k != "question_types"]
    assert set(flat) <= set(keys)
    assert {f"question_types.{name}" for name in QUESTION_TYPES} <= set(keys)
    assert len(keys) == len(flat) + len(QUESTION_TYPES)
    assert any(line.startswith("| user_share |") and "%" in line for line in table)
    assert json.loads(json.dumps(stats_json(stats))) == stats_json(stats)
    assert isinstance(stats, DatasetStats)


# --- real files ------------------------------------------------------------------------


def test_bundled_sample_matches_reference() -> None:
    got = check_file(SAMPLE_PATH)
    assert got["same_day_histories"] == 1  # the sample plants exactly one
    assert got["question_date_before_last_session"] >= 1


def test_mini_file_matches_reference() -> None:
    got = check_file(need(MINI))
    assert got["questions"] == 16


@pytest.mark.slow
def test_full_s_file_matches_reference_and_known_facts() -> None:
    got = check_file(need(FULL_S))
    assert got["questions"] == 498  # the shared copy lacks 2 of the 500
    assert got["abstention"] == 30
    assert got["same_day_histories"] == 94
    assert got["duplicate_session_ids"] == 13
    assert round(got["user_share"], 3) == 0.126
    assert 188_000 < got["distinct_turn_texts"] < 190_000 and 245_000 < got["turns"] < 246_000
    assert 47 < got["mean_sessions"] < 49


# --- the command -----------------------------------------------------------------------


def test_command_prints_the_table_for_the_selected_questions(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_subcommand("data", ["stats", "question_types=[knowledge-update]", "limit=3"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == str(SAMPLE_PATH)
    assert "| questions | 3 |" in out
    assert "| question_types.knowledge-update | 3 |" in out
    assert "| question_types.multi-session | 0 |" in out


def test_command_json_equals_the_reference_on_the_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_subcommand("data", ["stats", "--json", f"dataset.path={SAMPLE_PATH}"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    assert_matches(json.loads(out), reference_stats(read_raw(SAMPLE_PATH)))


def test_command_rejects_an_unknown_option_in_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_subcommand("data", ["stats", "--jsn"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lme: error: ") and "--jsn" in err and err.count("\n") == 1


def test_command_as_a_process_on_the_mini_file(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lme", "data", "stats", "--json", f"dataset.path={need(MINI)}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert_matches(json.loads(result.stdout), reference_stats(read_raw(MINI)))
