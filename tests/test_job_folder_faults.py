"""A job's folder and the commands that read it back, under every fault (issue 36).

A job folder holds `outcomes.jsonl` (the journal, `lme.answer.run.Journal`: read by a resume, by the job itself and by
`lme cost`) and Hydra's `.hydra/config.yaml`, `hydra.yaml` and `overrides.yaml` (read by `lme cost`). Each is
damaged in every way a user, a kill or a disk would (empty, truncated, random bytes, not UTF-8, nested too
deeply, wrong shape, wrong types, an alias, a directory in its place, unreadable); each case gives one sentence
naming the file (exit 2 through the CLI) or the documented recovery, never a traceback, and leaves every file
of the folder byte-identical. The journal's line parser is checked with Hypothesis: any line gives a valid
outcome or `LmeError`, and an outcome written then read back is equal.

At the end, a real multirun (in-process, the loopback server replying as the offline models) misses answers in
one job; the advice it prints names `hydra.sweep.dir`, and following it finishes exactly those answers in the
same job folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shlex
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lme.util.errors import LmeError
from lme.answer.run import (CallStats, Journal, Outcome, Step, SystemStats, parse_journal_line, JOURNAL_FORMAT)


# --- a job folder, made as a job leaves it ----------------------------------------------------------


def outcome(index: int, answer: str | None = "an answer") -> Outcome:
    stats = CallStats(calls=1, input_tokens=100 + index, output_tokens=5, cost_usd=0.0001, spent_usd=0.0001)
    step = Step(rule="first_pass", view="first_pass", instruction_sha256="ab" * 32, chosen=True, reread=False,
                failed=answer is None, error=None if answer else "Timeout: slow", step_answer=answer, answer=answer,
                correct=bool(answer), reader=stats, judge=stats if answer else CallStats())
    return Outcome(question_id=f"q{index}", question_type="single-session-user", abstention=False, answer=answer,
                   correct=bool(answer), reader_error=None if answer else "Timeout: slow", judge_reply="yes",
                   judge_note="", memory_bytes=1200, memory_turns=4, reader=stats, judge=step.judge, seconds=0.25,
                   steps=(step,))


def make_job(folder: Path, rows: int = 3) -> Path:
    hydra = folder / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text(
        "design_name: bm25\nseed: 1\ncache_dir: " + json.dumps(str(folder.parent / "cache")) + "\n"
        "budget:\n  ledger_path: ${cache_dir}/ledger.sqlite\n  study: null\n  job: null\n", encoding="utf-8")
    (hydra / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    cwd: " + json.dumps(str(folder.parent)) + "\n    output_dir: "
        + json.dumps(str(folder)) + "\n", encoding="utf-8")
    (hydra / "overrides.yaml").write_text("- seed=1\n- +design=bm25\n", encoding="utf-8")
    (folder / "outcomes.jsonl").write_text("".join(outcome(i).to_json() + "\n" for i in range(rows)),
                                           encoding="utf-8")
    return folder


def checksums(folder: Path) -> dict[str, str]:
    """Every regular file under `folder` (links not followed) and its SHA-256."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def cost(folder: Path, capsys) -> tuple[int, str, str]:
    from lme.cli import run_subcommand

    code = run_subcommand("cost", ["--json", str(folder)])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_sentence(err: str, name: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("lme: error: ") and name in lines[0] and lines[0].endswith("."), lines[0]
    assert "Traceback" not in err
    return lines[0]


# --- the faults: (file, name, how to damage it, expected: "error" | "fine" | "either") ------------------

def _bytes(data: bytes):
    def damage(path: Path) -> None:
        path.unlink()
        path.write_bytes(data)
    return damage


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.txt").write_text("x")


def _link(target: str):
    def damage(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)
    return damage


def _loop(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)  # a link to itself


def _truncated(fraction: float):
    def damage(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * fraction)])
    return damage


def _edit_row(change):
    def damage(path: Path) -> None:
        lines = path.read_text(encoding="utf-8").splitlines()
        row = json.loads(lines[1])
        change(row)
        lines[1] = json.dumps(row)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return damage


_ROW = outcome(1, "caf\u00e9").to_json().encode()
CUT_IN_A_CHARACTER = _ROW[: _ROW.index("\u00e9".encode()) + 1]  # the first of the character's two bytes
RANDOM = random.Random(36).randbytes(2000).replace(b"{", b"(")  # never the start of a row
GARBAGE = b"\xff\xfe\x00 not utf-8 \xc3\x28\n"

COMMON = [
    ("random bytes", _bytes(RANDOM), "error"),
    ("not UTF-8", _bytes(GARBAGE), "error"),
    ("a directory", _directory, "error"),
    ("unreadable (EIO)", _link("/proc/self/mem"), "error"),
    ("a link loop", _loop, "error"),
    ("a dangling link", _link("nowhere/at/all"), "error"),
    ("empty", _bytes(b""), "fine"),
]

JOURNAL_FAULTS = COMMON + [
    ("deeply nested", _bytes(b"[" * 200_000 + b"\n"), "error"),
    ("a list", _bytes(b"[1, 2]\n"), "error"),
    ("question_id a list", _edit_row(lambda row: row.update(question_id=["q1"])), "error"),
    ("question_id missing", _edit_row(lambda row: row.pop("question_id")), "error"),
    ("calls a string", _edit_row(lambda row: row["reader"].update(calls="7")), "error"),
    ("NaN dollars", _edit_row(lambda row: row["judge"].update(cost_usd=float("nan"))), "error"),
    ("a step not an object", _edit_row(lambda row: row.update(steps=["first_pass"])), "error"),
    ("steps an object", _edit_row(lambda row: row.update(steps={"a": 1})), "error"),
    ("an unknown field", _edit_row(lambda row: row.update(extra=1)), "error"),
    ("a future format", _edit_row(lambda row: row.update(format=JOURNAL_FORMAT + 1)), "error"),
    ("a huge number", _bytes(b'{"format": ' + b"9" * 5000 + b"}\n"), "error"),
    ("a bad middle line", _bytes(outcome(0).to_json().encode() + b"\n{cut\n" + outcome(1).to_json().encode() + b"\n"),
     "error"),
    ("zeroed", lambda path: path.write_bytes(b"\0" * path.stat().st_size), "error"),
    ("truncated at 1/2", _truncated(0.5), "cut"),
    ("truncated at 9/10", _truncated(0.9), "cut"),
    ("truncated inside a character", _bytes(outcome(0).to_json().encode() + b"\n" + CUT_IN_A_CHARACTER), "cut"),
]

YAML_FAULTS = [fault for fault in COMMON if fault[0] != "empty"] + [
    ("empty", _bytes(b""), "error"),  # Hydra writes `[]` for no overrides: an empty file is a write that failed
    ("only a comment", _bytes(b"# nothing\n"), "error"),
    ("cut mid-line", lambda path: path.write_bytes(path.read_bytes()[:-3]), "error"),  # a value cut short
    ("deeply nested", _bytes(b"a: " + b"[" * 500 + b"\n"), "error"),
    ("an alias bomb", _bytes(b'a: &a ["x","x"]\nb: &b [*a,*a]\nc: [*b,*b]\n'), "error"),
    ("not YAML", _bytes(b"a: [unclosed\n  - b: }\n"), "error"),
    ("truncated at 1/2", _truncated(0.5), "either"),
]

SHAPES = {  # a shape Hydra never writes, per file
    ".hydra/config.yaml": [("a list", b"- 1\n- 2\n"), ("budget a list", b"budget: [1]\nseed: 1\n"),
                           ("ledger_path a mapping", b"budget:\n  ledger_path: {a: 1}\n"),
                           ("a number", b"42\n")],
    ".hydra/hydra.yaml": [("hydra a list", b"hydra: [1, 2]\n"), ("runtime a string", b"hydra:\n  runtime: x\n"),
                          ("cwd a list", b"hydra:\n  runtime:\n    cwd: [1]\n")],
    ".hydra/overrides.yaml": [("a mapping", b"a: 1\n"), ("an override a mapping", b"- {a: 1}\n"),
                              ("not an override", b"- a list\n- where a mapping was\n")],
}
# Cut at the end of a line: still YAML, but without what Hydra writes for every lme job.
SHAPES[".hydra/config.yaml"] += [("cut before seed", b"design_name: bm25\ncache_dir: cache\n"),
                                 ("cut before budget.ledger_path", b"design_name: bm25\nseed: 1\ncache_dir: c\n"
                                                                   b"budget:\n  study: null\n")]
SHAPES[".hydra/hydra.yaml"] += [("cut before output_dir", b"hydra:\n  runtime:\n    cwd: /x\n")]

CASES = [("outcomes.jsonl", name, damage, expected) for name, damage, expected in JOURNAL_FAULTS]
CASES += [(file, name, damage, expected) for file in SHAPES for name, damage, expected in YAML_FAULTS]
CASES += [(file, name, _bytes(data), "error") for file, shapes in SHAPES.items() for name, data in shapes]


COMPOSER = None  # one composer for every case (memoised compositions: a job folder with no ledger path composes)


def spend_of(folder: Path):
    global COMPOSER
    from lme.cli.cost import _Composer, study_spend

    COMPOSER = COMPOSER or _Composer()
    return study_spend([folder], compose=COMPOSER)


@pytest.mark.parametrize(("file", "name", "damage", "expected"), CASES,
                         ids=[f"{file}: {name}" for file, name, _, _ in CASES])
def test_a_damaged_job_folder_is_one_sentence_naming_the_file_or_is_read(file, name, damage, expected, tmp_path):
    """What `lme cost` reads of each job folder (`study_spend`), every file damaged in every way."""
    folder = make_job(tmp_path / "multirun" / "bm25" / "0")
    damage(folder / file)
    before = checksums(tmp_path)
    try:
        spend = spend_of(tmp_path / "multirun")
    except LmeError as exc:
        assert expected in ("error", "either"), exc
        message = str(exc)
        assert str(folder / file) in message and "\n" not in message and message.endswith("."), message
        if file == "outcomes.jsonl" and name not in COMMON_NAMES:
            assert "line " in message  # the line a row's fault is on
    else:
        assert expected not in ("error",), name
        reader_calls = spend.total.reader_calls
        if file != "outcomes.jsonl":
            assert reader_calls == 3  # the journal's rows, whatever the YAML file held
        elif expected == "fine":
            assert reader_calls == 0  # an empty journal: a job that answered nothing yet
        else:  # a cut last line: the whole rows before it
            assert 1 <= reader_calls < 3
    assert checksums(tmp_path) == before  # nothing rewritten, nothing made


COMMON_NAMES = {name for name, _, _ in COMMON} | {"zeroed"}


CLI_CASES = [("outcomes.jsonl", _edit_row(lambda row: row.update(question_id=["q1"])), "field question_id is a list"),
             ("outcomes.jsonl", _directory, "a directory"),
             (".hydra/hydra.yaml", _bytes(b"hydra: [1, 2]\n"), "hydra is list"),
             (".hydra/config.yaml", _bytes(b""), "empty"),
             (".hydra/overrides.yaml", _bytes(b"- seed=1\n"), "differ from the 2 that hydra.yaml records")]


@pytest.mark.parametrize(("file", "damage", "says"), CLI_CASES, ids=[c[2] for c in CLI_CASES])
def test_lme_cost_on_a_damaged_job_folder_exits_2_with_one_sentence(file, damage, says, tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = make_job(tmp_path / "multirun" / "bm25" / "0")
    with open(folder / ".hydra" / "hydra.yaml", "a", encoding="utf-8") as handle:  # as Hydra records them too
        handle.write("  overrides:\n    task:\n    - seed=1\n    - +design=bm25\n")
    damage(folder / file)
    before = checksums(tmp_path)
    code, out, err = cost(tmp_path / "multirun", capsys)
    assert code == 2 and out == ""
    sentence = one_sentence(err, str(folder / file))
    assert says in sentence
    assert checksums(tmp_path) == before


def test_lme_cost_reads_a_whole_job_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_job(tmp_path / "multirun" / "bm25" / "0")
    code, out, err = cost(tmp_path / "multirun", capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [d["name"] for d in data["designs"]] == ["bm25"] and data["total"]["reader_calls"] == 3


# --- the journal itself: read, resume, the one recovery ---------------------------------------------


@pytest.mark.parametrize(("name", "damage", "expected"), JOURNAL_FAULTS, ids=[name for name, _, _ in JOURNAL_FAULTS])
def test_reading_and_resuming_a_damaged_journal(name, damage, expected, tmp_path):
    path = make_job(tmp_path / "job") / "outcomes.jsonl"
    good = [outcome(i) for i in range(3)]
    damage(path)
    before = checksums(tmp_path)
    journal = Journal(path)
    if expected == "error":
        for read in (journal.read, journal.resume):
            with pytest.raises(LmeError) as refused:
                read()
            message = str(refused.value)
            assert str(path) in message and "\n" not in message and message.endswith("."), message
        assert checksums(tmp_path) == before  # never rewritten to "repair" it
    elif expected == "fine":
        assert journal.read() == [] and journal.resume() == ({}, {"broken": 0, "incomplete": 0})
    else:  # "cut": the documented recovery: the partial last line is dropped, every whole row kept
        kept_before = journal.read()
        assert kept_before and all(o in good or o.question_id == "q0" for o in kept_before)
        kept, dropped = journal.resume()
        assert dropped == {"broken": 1, "incomplete": 0}
        assert list(kept.values()) == kept_before
        text = path.read_text(encoding="utf-8")
        assert text == "".join(o.to_json() + "\n" for o in kept_before)  # whole rows only, each once


# --- the line parser, property-based --------------------------------------------------------------


# any text a model can send, a lone surrogate included (JSON can carry one; UTF-8 cannot)
texts = st.text(max_size=30) | st.text(st.characters(categories=["Cs", "Ll", "Zl", "Cc"]), max_size=10)
maybe_text = st.none() | texts
counts = st.integers(min_value=0, max_value=10**12)
dollars = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
call_stats = st.builds(CallStats, calls=counts, cached_calls=counts, failed_calls=counts, input_tokens=counts,
                       output_tokens=counts, cost_usd=dollars, spent_usd=dollars, unpriced_calls=counts,
                       cached_input_tokens=counts, cached_input_at_input_price=counts)
steps = st.builds(Step, rule=texts, view=texts, instruction_sha256=texts, chosen=st.booleans(), reread=st.booleans(),
                  failed=st.booleans(), error=maybe_text, step_answer=maybe_text, answer=maybe_text,
                  correct=st.none() | st.booleans(), reader=call_stats, judge=call_stats, judge_error=maybe_text,
                  memory=call_stats, memory_error=maybe_text)
outcomes = st.builds(Outcome, question_id=st.text(min_size=1, max_size=20), question_type=texts,
                     abstention=st.booleans(), answer=maybe_text, correct=st.booleans(), reader_error=maybe_text,
                     judge_reply=maybe_text, judge_note=texts, memory_bytes=counts, memory_turns=counts,
                     reader=call_stats, judge=call_stats, seconds=dollars, steps=st.lists(steps, max_size=3).map(tuple),
                     judge_error=maybe_text, memory=call_stats, memory_error=maybe_text)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=20)

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(outcomes)
def test_an_outcome_written_then_read_back_is_equal(item):
    line = item.to_json()
    assert "\n" not in line
    line.encode("utf-8")  # the journal is UTF-8: every line encodes (lone surrogates are escaped)
    parsed = parse_journal_line(line, "outcomes.jsonl, line 1")
    # a high then a low lone surrogate, escaped one after the other, read back as the one character JSON makes of
    # them (the text an HTTP reply's JSON gives lme already); anything else reads back equal
    if not re.search(r"\\ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}", line, re.IGNORECASE):
        assert parsed == item
    assert parse_journal_line(parsed.to_json(), "outcomes.jsonl, line 1") == parsed


@FAST
@given(st.text(max_size=200) | st.text(st.characters(categories=["Cs", "Cc", "Ps", "Nd"]), max_size=50))
def test_any_text_line_is_an_outcome_or_one_sentence(line):
    try:
        parsed = parse_journal_line(line, "outcomes.jsonl, line 1")
    except LmeError as exc:
        assert "outcomes.jsonl, line 1" in str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(parsed, Outcome) and isinstance(parsed.question_id, str)


@FAST
@given(outcomes, st.sampled_from(["question_id", "reader", "steps", "correct", "seconds", "format", "memory_bytes"]),
       json_values)
def test_a_row_with_any_value_in_a_field_is_an_outcome_or_one_sentence(item, key, value):
    row = json.loads(item.to_json())
    row[key] = value
    try:
        parsed = parse_journal_line(json.dumps(row), "outcomes.jsonl, line 2")
    except LmeError as exc:
        assert "outcomes.jsonl, line 2" in str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(parsed, Outcome)
        assert all(isinstance(getattr(parsed.reader, name), int) for name in ("calls", "input_tokens"))


def test_every_field_of_an_outcome_has_a_type_the_parser_checks():
    """A field added to `Outcome`, `Step` or `CallStats` with a type the row parser does not know would read as
    anything: the parser refuses to guess."""
    from dataclasses import fields

    known = {"str", "int", "float", "bool", "str | None", "bool | None", "float | None", "CallStats", "tuple[Step, ...]",
             "SystemStats | None"}
    for cls in (Outcome, Step, CallStats, SystemStats):
        assert {str(f.type) for f in fields(cls)} <= known, cls


# --- a multirun's advice, followed ---------------------------------------------------------------


@pytest.mark.slow
def test_a_multirun_missing_answers_advises_its_sweep_dir_and_following_it_finishes_exactly_those(
        tmp_path, monkeypatch, capsys):
    """`-m seed=1,2` with two of job 0's reader calls failing: exit 5 and, per incomplete job, the sweep's own
    command with `hydra.sweep.dir`; that command, run as printed, asks for exactly the two missing answers (their
    reader calls) in the same job folders, makes no other folder, and exits 0. A job folder whose journal is
    then damaged stops the same command with one sentence, the file untouched. In-process, three runs: 30 s on a
    busy machine, most of it litellm's import and the first run's set-up (hence slow)."""
    import lme.study.job
    import lme.tracking.runs
    from loopback import LoopbackServer

    from lme.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LME_FAKE_KEY", "sk-lme-sweep-0123456789abcdefXYZ")
    monkeypatch.setattr(lme.study.job, "INCOMPLETE_JOBS", [])
    monkeypatch.setattr(lme.tracking.runs, "FAILED_STUDIES", [])
    sweep = tmp_path / "sweep"

    def run_lme(args: list[str]) -> int:
        monkeypatch.setattr(sys, "argv", ["lme", *args])
        lme.study.job.INCOMPLETE_JOBS.clear()
        try:
            main(args)
        except SystemExit as stop:
            return int(stop.code or 0)
        return 0

    with LoopbackServer(reply="offline") as server:
        models = []
        for part, model in (("reader", "openai/gpt-4o-mini"), ("judge", "openai/gpt-4o-2024-08-06")):
            models += [f"{part}.model.model={model}", f"++{part}.model.api_base={server.base_url}",
                       f"++{part}.model.api_key_env=LME_FAKE_KEY", f"{part}.model.max_attempts=2",
                       f"++{part}.model.backoff_base_s=0.01", f"++{part}.model.input_cost_per_token=1e-6",
                       f"++{part}.model.output_cost_per_token=2e-6"]
        args = ["-m", "seed=1,2", "limit=3", "concurrency=1", "tracking.enabled=false", "progress=false",
                f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}", *models]
        server.add_faults(("500",), ("500",), ("500",), ("500",))  # job 0's first two reader calls fail
        assert run_lme(args) == 5
        err = capsys.readouterr().err
        advice = [line for line in err.splitlines() if "answers missing" in line and line.startswith("lme:")]
        assert len(advice) == 1, err
        command = advice[0].split("in the same folder: ", 1)[1]
        printed = shlex.split(command)
        assert printed[:4] == ["python", "-m", "lme", "-m"] and f"hydra.sweep.dir={sweep}" in printed
        assert not any(item.startswith("hydra.run.dir=") for item in printed)
        journal0 = sweep / "0" / "outcomes.jsonl"
        lines = journal0.read_text().splitlines()
        missing = {json.loads(line)["question_id"] for line in lines if json.loads(line)["answer"] is None}
        whole = [line for line in lines if json.loads(line)["answer"] is not None]
        assert len(missing) == 2 and len(whole) == 1
        folders_before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("outcomes.jsonl"))
        job1 = (sweep / "1" / "outcomes.jsonl").read_bytes()
        sent = len(server.requests)
        assert run_lme(printed[3:]) == 0, capsys.readouterr().err
        resent = server.requests[sent:]
    # the two missing answers' reader calls, nothing else (their verdicts may come from the call cache: the
    # other seed's job judged the same answers)
    readers = [r for r in resent if r.body.get("model") == "gpt-4o-mini"]
    assert len(readers) == 2 and len(resent) - len(readers) in (0, 2), [r.body.get("model") for r in resent]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("outcomes.jsonl")) == folders_before  # no new sweep
    after = journal0.read_text().splitlines()
    assert after[0] == whole[0]  # the answered question is kept as it was
    rows = [json.loads(line) for line in after]
    assert len(rows) == 3 and all(row["answer"] is not None for row in rows)
    assert {row["question_id"] for row in rows[1:]} == missing
    assert (sweep / "1" / "outcomes.jsonl").read_bytes() == job1  # the finished job is left as it was
    capsys.readouterr()

    damaged = journal0.read_text().replace('"question_id": "', '"question_id": ["', 1)
    damaged = damaged.replace('", "question_type"', '"], "question_type"', 1)
    journal0.write_text(damaged)
    assert run_lme(printed[3:]) == 2
    err = capsys.readouterr().err
    assert f"{journal0}, line 1: field question_id is a list" in err and "Traceback" not in err
    assert journal0.read_text() == damaged
