"""The per-question flow and the journal, with the real offline providers and a temp cache."""

from __future__ import annotations

import asyncio
import json

import pytest

from lme.answer.reader import Reader
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import make_judge
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import JUDGE_MODEL, READER_MODEL
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import Journal, run_questions
from judging import OFFLINE_TEMPLATES



@pytest.fixture()
def parts(tmp_path):
    questions = load_questions(SAMPLE_PATH)[:8]
    builder = RetrievedMemoryBuilder(FTS5Retriever())
    reader = Reader(name="offline", model=ModelSpec(model=READER_MODEL))
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
    cache = CallCache(tmp_path / "calls.sqlite")
    yield questions, builder, reader, judge, cache
    cache.close()


def _run(parts, journal, seed=1):
    questions, builder, reader, judge, cache = parts
    gateway = Gateway(cache)
    outcomes = asyncio.run(
        run_questions(questions, builder, reader, "Answer briefly.", judge, gateway, seed, journal, concurrency=3)
    )
    return outcomes, gateway


def test_every_question_is_journaled_once_in_question_order(parts, tmp_path):
    journal = Journal(tmp_path / "out" / "outcomes.jsonl")
    outcomes, gateway = _run(parts, journal)
    questions = parts[0]
    assert [o.question_id for o in outcomes] == [q.question_id for q in questions]
    lines = journal.path.read_text().splitlines()
    assert sorted(json.loads(line)["question_id"] for line in lines) == sorted(q.question_id for q in questions)
    assert gateway.calls_made == 2 * len(questions)  # one reader and one judge call each
    for outcome in outcomes:
        assert outcome.answer and outcome.reader.calls == 1 and outcome.judge.calls == 1
        assert outcome.memory_bytes > 0 and outcome.memory_turns > 0


def test_a_journal_is_resumed_and_a_cut_last_line_is_asked_again(parts, tmp_path):
    journal = Journal(tmp_path / "outcomes.jsonl")
    first, _ = _run(parts, journal)
    lines = journal.path.read_text().splitlines()
    # keep three complete outcomes and half of a fourth, as a kill mid-write would
    journal.path.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    kept = {json.loads(line)["question_id"] for line in lines[:3]}
    again, gateway = _run(parts, journal)
    assert [o.question_id for o in again] == [o.question_id for o in first]
    assert {o.question_id: o.answer for o in again} == {o.question_id: o.answer for o in first}
    # only the five questions not fully journaled were asked again, all from the cache
    assert gateway.calls_made == 0 and gateway.calls_cached == 2 * (len(first) - len(kept))


def test_seed_keys_the_reader_but_not_the_judge(parts, tmp_path):
    _run(parts, Journal(tmp_path / "a.jsonl"), seed=1)
    outcomes, gateway = _run(parts, Journal(tmp_path / "b.jsonl"), seed=2)
    n = len(outcomes)
    # the new seed asks the reader again; identical answers reuse the judge's verdicts
    assert gateway.calls_made == n
    assert all(o.reader.cached_calls == 0 and o.judge.cached_calls == 1 for o in outcomes)


def test_a_failed_reader_call_is_recorded_as_a_wrong_missing_answer(parts, tmp_path, monkeypatch):
    from loopback import LoopbackServer

    questions, builder, _, judge, cache = parts
    monkeypatch.setenv("LME_TEST_KEY", "sk-test")
    with LoopbackServer(reply="never", faults=[("500",)] * 10) as server:
        reader = Reader(
            name="loopback",
            model=ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY",
                            max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=5),
        )
        gateway = Gateway(cache)
        journal = Journal(tmp_path / "outcomes.jsonl")
        outcomes = asyncio.run(
            run_questions(questions[:3], builder, reader, "Answer.", judge, gateway, 1, journal, concurrency=1)
        )
    assert len(journal.read()) == 3
    for outcome in outcomes:
        assert outcome.answer is None and outcome.correct is False
        assert outcome.reader_error and "InternalServerError" in outcome.reader_error
        assert outcome.reader.failed_calls == 1 and outcome.judge.calls == 0
        assert outcome.judge_note == "missing answer counts as wrong"
    assert len(cache) == 0  # failures are never cached


def test_a_lazy_stream_holds_at_most_concurrency_questions(parts, tmp_path):
    questions, builder, reader, judge, cache = parts
    pulled: list[str] = []
    in_flight_when_pulled: list[int] = []
    finished: list[str] = []

    def stream():
        for question in questions:
            in_flight_when_pulled.append(len(pulled) - len(finished))
            pulled.append(question.question_id)
            yield question

    journal = Journal(tmp_path / "outcomes.jsonl")
    outcomes = asyncio.run(
        run_questions(stream(), builder, reader, "Answer.", judge, Gateway(cache), 1, journal, concurrency=2,
                      on_outcome=lambda outcome, done: finished.append(outcome.question_id))
    )
    assert [o.question_id for o in outcomes] == [q.question_id for q in questions]
    assert max(in_flight_when_pulled) <= 2


def test_an_unexpected_error_in_one_question_stops_the_job_and_keeps_what_finished(parts, tmp_path):
    questions, builder, reader, judge, cache = parts

    class Exploding:
        name = "exploding"

        def build(self, question):
            if question.question_id == questions[3].question_id:
                raise RuntimeError("boom")
            return builder.build(question)

    journal = Journal(tmp_path / "outcomes.jsonl")
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(run_questions(questions, Exploding(), reader, "A.", judge, Gateway(cache), 1, journal, concurrency=1))
    assert [o.question_id for o in journal.read()] == [q.question_id for q in questions[:3]]


def test_without_rules_each_outcome_records_its_first_pass_as_the_only_step(parts, tmp_path):
    from lme.judge import sha256_text

    outcomes, _ = _run(parts, Journal(tmp_path / "outcomes.jsonl"))
    for outcome in outcomes:
        (step,) = outcome.steps
        assert (step.rule, step.view, step.chosen, step.reread, step.failed) == ("first_pass", "first_pass", True, False, False)
        assert step.instruction_sha256 == sha256_text("Answer briefly.")
        assert step.step_answer == step.answer == outcome.answer and step.correct == outcome.correct
        assert step.reader == outcome.reader and step.judge == outcome.judge
    rows = [json.loads(line) for line in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    assert all(row["steps"][0]["rule"] == "first_pass" and row["steps"][0]["error"] is None for row in rows)


def test_resume_drops_cut_lines_and_incomplete_outcomes_and_never_appends_to_a_cut_line(parts, tmp_path):
    journal = Journal(tmp_path / "outcomes.jsonl")
    first, _ = _run(parts, journal)
    lines = journal.path.read_text().splitlines()
    unjudged = json.loads(lines[1]) | {"judge_error": "InternalServerError: judge down"}
    unanswered = json.loads(lines[2]) | {"answer": None, "reader_error": "Timeout: slow"}
    journal.path.write_text("\n".join([lines[0], json.dumps(unjudged), json.dumps(unanswered), lines[3][:40]]))
    kept, dropped = journal.resume()
    assert list(kept) == [json.loads(lines[0])["question_id"]]
    assert dropped == {"broken": 1, "incomplete": 2}
    assert journal.path.read_text() == lines[0] + "\n"  # rewritten: the cut line is gone, the file ends whole
    again, gateway = _run(parts, journal)
    assert [o.question_id for o in again] == [o.question_id for o in first]
    assert all(o.complete for o in again)
    text = journal.path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == len(first)
    assert all(json.loads(line) for line in text.splitlines())  # every line whole
    assert gateway.calls_cached == 2 * (len(first) - 1)  # the seven others asked again (from the cache)


def test_a_whole_last_line_without_its_newline_is_not_joined_by_the_next_append(parts, tmp_path):
    journal = Journal(tmp_path / "outcomes.jsonl")
    _run(parts, journal)
    lines = journal.path.read_text().splitlines()
    journal.path.write_text("\n".join(lines[:4]))  # the newline of the last whole line is missing
    kept, dropped = journal.resume()
    assert len(kept) == 4 and dropped == {"broken": 0, "incomplete": 0}
    assert journal.path.read_text() == "\n".join(lines[:4]) + "\n"


def test_the_failures_line_counts_calls_by_class_and_missing_answers():
    from lme.study.job import failures_line, incomplete_note

    metrics = {"reader_failed_calls": 3, "judge_failed_calls": 1, "missing_answers": 2, "missing_verdicts": 0,
               "reader_failed_calls.TimeoutError": 3, "judge_failed_calls.TimeoutError": 1}
    assert failures_line(metrics) == "3 reader calls and 1 judge call failed (TimeoutError); 2 answers missing"
    metrics |= {"judge_failed_calls.EmptyVerdict": 1, "missing_verdicts": 1, "judge_failed_calls": 2}
    assert failures_line(metrics) == ("3 reader calls and 2 judge calls failed (EmptyVerdict, TimeoutError); "
                                      "2 answers missing, 1 verdict missing")
    assert failures_line({"reader_failed_calls": 0, "judge_failed_calls": 0, "missing_answers": 0}) == ""
    assert incomplete_note({"missing_answers": 0, "missing_verdicts": 0}) is None


# --- the journal's row format --------------------------------------------------------


def test_journal_rows_carry_the_format_and_rows_of_earlier_formats_read(parts, tmp_path):
    from lme.answer.run import JOURNAL_FORMAT, Outcome

    journal = Journal(tmp_path / "outcomes.jsonl")
    outcomes, _ = _run(parts, journal)
    rows = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert JOURNAL_FORMAT == 3 and all(row["format"] == 3 for row in rows)
    assert all(Outcome.from_dict(row) in outcomes for row in rows)
    # format 1: today's rows less the key, as lme wrote them before it existed
    journal.path.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "format"}) + "\n" for row in rows))
    kept, dropped = journal.resume()
    assert sorted(kept) == sorted(o.question_id for o in outcomes) and dropped == {"broken": 0, "incomplete": 0}
    assert {o.question_id: o for o in journal.read()} == {o.question_id: o for o in outcomes}
    # format 2: today's rows less the memory step's fields (format 3 added them), which then read as none
    older = [{k: v for k, v in row.items() if k not in ("memory", "memory_error")} | {"format": 2} for row in rows]
    for row in older:
        row["steps"] = [{k: v for k, v in step.items() if k not in ("memory", "memory_error")} for step in row["steps"]]
    journal.path.write_text("".join(json.dumps(row) + "\n" for row in older))
    assert {o.question_id: o for o in journal.read()} == {o.question_id: o for o in outcomes}
    # a journal holding both formats reads whole too
    mixed = [json.dumps(row) for row in rows[:4]] + [json.dumps({k: v for k, v in row.items() if k != "format"})
                                                    for row in rows[4:]]
    journal.path.write_text("\n".join(mixed) + "\n")
    assert len(journal.read()) == len(outcomes)


def test_a_row_of_an_unknown_format_is_refused_naming_the_file_and_never_dropped(parts, tmp_path):
    from lme.util.errors import LmeError
    from lme.answer.run import Outcome

    journal = Journal(tmp_path / "outcomes.jsonl")
    _run(parts, journal)
    lines = journal.path.read_text().splitlines()
    future = {**json.loads(lines[0]), "format": 99}
    text = "\n".join([json.dumps(future), *lines[1:]]) + "\n"
    journal.path.write_text(text)
    for read in (journal.read, journal.resume):
        with pytest.raises(LmeError) as refused:
            read()
        message = str(refused.value)
        assert str(journal.path) in message and "format 99" in message
        assert "\n" not in message and message.endswith(".") and message.count(". ") == 0
    assert journal.path.read_text() == text  # nothing dropped, nothing rewritten
    with pytest.raises(LmeError, match="format 99"):
        Outcome.from_dict(future)
    for odd in ("2", None, True, 1.0, 4):
        with pytest.raises(LmeError):
            Outcome.from_dict({**future, "format": odd}, tmp_path / "x.jsonl")


def test_a_question_is_answered_while_other_memories_are_still_building(parts, tmp_path):
    """Memories build in threads of their own: the first question's cache write and journal append (hops to
    worker threads) do not queue behind memories that are still building, as they did when both shared the
    event loop's default threads (at a job's start, no answer until every question in flight had its memory)."""
    import dataclasses
    import os
    import threading

    questions, inner, reader, judge, cache = parts
    slow = min(32, (os.cpu_count() or 1) + 4) + 2  # more than the default pool's threads
    batch = [questions[0]] + [dataclasses.replace(questions[1 + i % 7], question_id=f"slow-{i}") for i in range(slow)]
    answered = threading.Event()
    waited_out: list[str] = []

    class SlowUntilTheFirstAnswer:
        name = inner.name

        def build(self, question):
            if question.question_id != questions[0].question_id and not answered.wait(timeout=10):
                waited_out.append(question.question_id)
            return inner.build(question)

    def on_outcome(outcome, done):
        if outcome.question_id == questions[0].question_id:
            answered.set()

    outcomes = asyncio.run(run_questions(batch, SlowUntilTheFirstAnswer(), reader, "Answer briefly.", judge,
                                         Gateway(cache), 1, Journal(tmp_path / "outcomes.jsonl"),
                                         concurrency=len(batch), on_outcome=on_outcome))
    assert waited_out == []  # the first answer came while every other memory was still building
    assert len(outcomes) == len(batch) and all(o.answer for o in outcomes)
