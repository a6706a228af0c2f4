"""`python -m lme memory`: as a subprocess on the bundled sample and the real mini file, checked
against the builders' own output built here from the same composed config."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate

from lme.answer.reader import reader_payload
from design_helpers import load_dataset
from lme.cli import compose_config
from lme.util.errors import LmeError
from lme.cli.memory import (
    MEMORY_FIELDS,
    VIEW_FIELDS,
    Field,
    aggregate,
    markdown_summary,
    memory_row,
    view_overrides,
)
from shared_data import MINI, needs

REPO = Path(__file__).resolve().parents[2]
needs_mini = needs(MINI)
USER_LOG_INTS = ("header_bytes", "user_log_bytes", "user_messages", "resolved_date_lines", "replies", "reply_bytes")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lme", "memory", *args],
        capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


def json_lines(stdout: str) -> tuple[list[dict], dict]:
    objects = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert objects and objects[-1]["aggregate"] is True
    assert all("aggregate" not in row for row in objects[:-1])
    return objects[:-1], objects[-1]


def built_here(overrides: list[str], view: bool = False) -> list[tuple]:
    """(question, memory) for every selected question, built in this process as a job builds them."""
    cfg = compose_config(overrides)
    _, questions = load_dataset(cfg)
    retriever = instantiate(cfg.retriever)
    builder = instantiate(cfg.view if view else cfg.memory, retriever=retriever)
    return [(question, builder.build(question)) for question in questions]


def assert_one_sentence_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lme: error: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for needle in needles:
        assert needle in lines[0]


# -- the pure parts ----------------------------------------------------------------------------------


def test_memory_row_types_the_notes_and_leaves_absent_fields_null():
    notes = {"header_bytes": "37", "user_messages": " 242 ", "same_day": "true", "overflow": "false", "builder": "x"}
    row = memory_row("q1", 1234, notes, MEMORY_FIELDS)
    assert row["question_id"] == "q1" and row["memory_bytes"] == 1234
    assert row["header_bytes"] == 37 and row["user_messages"] == 242
    assert row["same_day"] is True and row["overflow"] is False
    assert row["replies"] is None and row["reply_bytes"] is None
    assert "builder" not in row


@pytest.mark.parametrize(("notes", "field"), [({"replies": "many"}, "replies"), ({"overflow": "1"}, "overflow")])
def test_memory_row_rejects_a_malformed_note_in_one_sentence(notes, field):
    with pytest.raises(LmeError, match=rf"^question q7: the memory reported {field}=.*\.$"):
        memory_row("q7", 10, notes, MEMORY_FIELDS)


def test_aggregate_mean_median_max_and_counts():
    fields = (Field("memory_bytes", int), Field("replies", int), Field("overflow", bool), Field("same_day", bool))
    rows = [
        {"question_id": "a", "memory_bytes": 10, "replies": None, "overflow": True, "same_day": None},
        {"question_id": "b", "memory_bytes": 30, "replies": None, "overflow": False, "same_day": None},
        {"question_id": "c", "memory_bytes": 35, "replies": None, "overflow": True, "same_day": None},
    ]
    summary = aggregate(rows, fields)
    assert summary["aggregate"] is True and summary["questions"] == 3
    assert summary["memory_bytes"] == {"mean": 25, "median": 30, "max": 35}
    assert summary["replies"] is None and summary["same_day"] is None
    assert summary["overflow"] == 2
    assert aggregate(rows[:2], fields)["memory_bytes"]["median"] == 20
    table = markdown_summary(summary, fields, "Memory: test")
    assert table.startswith("## Memory: test\n\n| field | mean | median | max |")
    assert "| memory_bytes | 25 | 30 | 35 |" in table and "| replies | - | - | - |" in table
    assert table.endswith("3 questions; overflow: 2, same_day: -.")


def test_an_unknown_view_is_one_sentence():
    with pytest.raises(LmeError, match=r"^--view nosuchview: no such view in .*\(known: .*\)\.$"):
        view_overrides([], "nosuchview")


def test_view_overrides_select_the_view_once():
    chosen = view_overrides(["limit=2"], "whole_sessions")
    assert "limit=2" in chosen and sum(item.lstrip("+").startswith("view=") for item in chosen) == 1
    assert view_overrides(["view=whole_sessions"], "whole_sessions") == ["view=whole_sessions"]
    with pytest.raises(LmeError, match=r"^--view whole_sessions and the override view=other name two different"):
        view_overrides(["view=other"], "whole_sessions")


# -- the command, on the bundled sample ----------------------------------------------------------------


def test_json_on_the_sample_matches_the_builder():
    done = run_cli("--json", "memory=user_log")
    assert done.returncode == 0, done.stderr
    rows, summary = json_lines(done.stdout)
    expected = built_here(["memory=user_log"])
    assert [row["question_id"] for row in rows] == [question.question_id for question, _ in expected]
    for row, (question, memory) in zip(rows, expected):
        assert set(row) == {"question_id"} | {field.name for field in MEMORY_FIELDS}
        assert row["memory_bytes"] == memory.n_bytes == len(memory.text.encode("utf-8"))
        for name in (*USER_LOG_INTS, "sessions", "sessions_kept"):
            assert row[name] == int(memory.notes[name]) and type(row[name]) is int, name
        assert row["same_day"] is (memory.notes["same_day"] == "true")
        assert row["overflow"] is (memory.notes["overflow"] == "true")
        assert row["user_messages"] == sum(turn.role == "user" for turn in question.turns())
    assert summary["questions"] == len(rows)
    for name in ("memory_bytes", *USER_LOG_INTS):
        values = [row[name] for row in rows]
        assert summary[name]["max"] == max(values)
        assert summary[name]["median"] == pytest.approx(statistics.median(values))
        assert summary[name]["mean"] == pytest.approx(statistics.fmean(values), abs=1e-3)
    assert summary["same_day"] == sum(row["same_day"] for row in rows) >= 1  # the sample has a same-day history
    assert summary["overflow"] == 0


def test_markdown_summary_on_the_sample():
    done = run_cli("memory=user_log", "limit=5")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("## Memory: design default, memory user_log, retriever bm25\n")
    assert "| field | mean | median | max |" in out and "| resolved_date_lines |" in out
    assert "5 questions; same_day: " in out
    assert "lme memory: 5 questions" in done.stderr


def test_baseline_memory_reports_only_what_it_has():
    done = run_cli("--json", "+design=bm25")
    assert done.returncode == 0, done.stderr
    rows, summary = json_lines(done.stdout)
    expected = built_here(["+design=bm25"])
    assert [row["memory_bytes"] for row in rows] == [memory.n_bytes for _, memory in expected]
    for row in rows:
        assert all(row[name] is None for name in (*USER_LOG_INTS, "same_day", "overflow"))
    assert summary["memory_bytes"]["max"] == max(memory.n_bytes for _, memory in expected) <= 96_000
    assert summary["header_bytes"] is None and summary["overflow"] is None


def test_bad_arguments_are_one_sentence():
    assert_one_sentence_error(run_cli("--payload"), "--question")
    assert_one_sentence_error(run_cli("--question", "d82c07cd", "--payload", "--json"), "--json")
    assert_one_sentence_error(run_cli("--frobnicate"), "--frobnicate")
    assert_one_sentence_error(run_cli("--view", "nosuchview"), "nosuchview")
    unknown_key = run_cli("nosuchkey=3")  # a composition error: one `lme: error:` line, then Hydra's hint
    assert unknown_key.returncode == 2 and "Traceback" not in unknown_key.stderr
    assert unknown_key.stderr.startswith("lme: error: ") and "nosuchkey" in unknown_key.stderr.splitlines()[0]


# -- the command, on the real mini file --------------------------------------------------------------


@pytest.fixture(scope="module")
def mini_memories() -> dict[str, tuple]:
    overrides = ["memory=user_log", f"dataset.path={MINI}"]
    return {question.question_id: (question, memory) for question, memory in built_here(overrides)}


@needs_mini
def test_json_on_the_mini_file_matches_the_builder(mini_memories):
    done = run_cli("--json", "memory=user_log", f"dataset.path={MINI}")
    assert done.returncode == 0, done.stderr
    rows, summary = json_lines(done.stdout)
    assert [row["question_id"] for row in rows] == list(mini_memories)
    for row in rows:
        question, memory = mini_memories[row["question_id"]]
        assert row["memory_bytes"] == memory.n_bytes <= 180_000
        assert {name: row[name] for name in USER_LOG_INTS} == {name: int(memory.notes[name]) for name in USER_LOG_INTS}
        assert row["user_messages"] == sum(turn.role == "user" for turn in question.turns())
        assert row["resolved_date_lines"] == memory.text.count("\nResolved dates")
        assert row["overflow"] is False
    assert summary["questions"] == 16 and summary["memory_bytes"]["max"] <= 180_000
    assert summary["resolved_date_lines"]["mean"] > 0  # the rules fire on real messages


@needs_mini
@pytest.mark.parametrize("pick", ["same_day", "dated"])
def test_question_prints_the_exact_memory_holding_every_user_message(mini_memories, pick):
    want_same_day = pick == "same_day"
    question, memory = next(
        pair for pair in mini_memories.values() if (pair[1].notes["same_day"] == "true") is want_same_day
    )
    done = run_cli("--question", question.question_id, "memory=user_log", f"dataset.path={MINI}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == memory.text + "\n"
    printed = done.stdout
    user_turns = [turn for turn in question.turns() if turn.role == "user"]
    assert len(user_turns) > 100
    for turn in user_turns:
        assert f"[{turn.turn_id}] {turn.content}" in printed, turn.turn_id
    assert ("carry no information" in printed) is want_same_day


@needs_mini
def test_payload_is_the_readers_user_message(mini_memories):
    question, memory = next(iter(mini_memories.values()))
    done = run_cli("--question", question.question_id, "--payload", "memory=user_log", f"dataset.path={MINI}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == reader_payload(question, memory) + "\n"
    payload = json.loads(done.stdout)
    assert set(payload) == {"question", "question_date", "memory"}
    assert payload["question"] == question.question and payload["memory"] == memory.text


@needs_mini
def test_a_bad_question_id_is_one_sentence_and_exit_2(mini_memories):
    assert_one_sentence_error(
        run_cli("--question", "no_such_q", "memory=user_log", f"dataset.path={MINI}"), "no_such_q", str(MINI)
    )
    second = list(mini_memories)[1]
    assert_one_sentence_error(
        run_cli("--question", second, "limit=1", "memory=user_log", f"dataset.path={MINI}"), second, "limit=1"
    )


@needs_mini
def test_question_with_json_reports_that_question_only(mini_memories):
    question, memory = list(mini_memories.values())[2]
    done = run_cli("--question", question.question_id, "--json", "memory=user_log", f"dataset.path={MINI}")
    assert done.returncode == 0, done.stderr
    rows, summary = json_lines(done.stdout)
    assert [row["question_id"] for row in rows] == [question.question_id]
    assert rows[0]["memory_bytes"] == memory.n_bytes and summary["questions"] == 1


# -- the whole-session view -------------------------------------------------------------------------------


@needs_mini
def test_view_json_and_text_on_the_mini_file():
    overrides = [f"dataset.path={MINI}", "limit=4"]
    done = run_cli("--view", "whole_sessions", "--json", *overrides)
    assert done.returncode == 0, done.stderr
    rows, summary = json_lines(done.stdout)
    expected = built_here(view_overrides(overrides, "whole_sessions"), view=True)
    assert [row["question_id"] for row in rows] == [question.question_id for question, _ in expected]
    for row, (_, memory) in zip(rows, expected):
        assert set(row) == {"question_id"} | {field.name for field in VIEW_FIELDS}
        for field in VIEW_FIELDS:
            assert row[field.name] == int(memory.notes[field.name]), field.name
        assert row["bytes"] == memory.n_bytes <= 100_000
        assert row["from_dates"] + row["from_content"] + row["from_retrieval"] == row["sessions"]
    assert summary["questions"] == 4 and summary["bytes"]["max"] <= 100_000

    question, memory = expected[0]
    shown = run_cli("--view", "whole_sessions", "--question", question.question_id, *overrides)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == memory.text + "\n"
    assert_one_sentence_error(
        run_cli("--view", "whole_sessions", "--question", question.question_id, "--payload", *overrides), "--view"
    )
