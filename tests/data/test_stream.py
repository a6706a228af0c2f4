"""Streaming LongMemEval files one question at a time: same questions and same errors as the loader."""

from __future__ import annotations

import copy
import gzip
import importlib.util
import json
import lzma
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lme.data.load import load_questions
from lme.data.records import QUESTION_TYPES
from lme.data.sample import SAMPLE_PATH
from lme.data.stream import IndexEntry, count_questions, iter_questions, scan_index
from lme.util.errors import DataError
from shared_data import MINI, needs

ROOT = Path(__file__).resolve().parents[2]


def _load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generator = _load_script("make_synthetic_m")


def _sample_records() -> list[dict[str, Any]]:
    return json.loads(SAMPLE_PATH.read_text(encoding="utf-8"))


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _message(call) -> str:
    with pytest.raises(DataError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and message.endswith("."), message
    return message


def _stream_error(path: Path, **kwargs: Any) -> tuple[list[str], str]:
    """The ids yielded before the streaming error, and the error's sentence."""
    yielded: list[str] = []

    def consume() -> None:
        for question in iter_questions(path, **kwargs):
            yielded.append(question.question_id)

    message = _message(consume)
    assert str(path) in message
    return yielded, message


# --- same questions as the non-streaming loader ----------------------------------


def test_sample_streams_to_the_same_questions() -> None:
    assert list(iter_questions(SAMPLE_PATH)) == load_questions(SAMPLE_PATH)


@needs(MINI)
def test_real_mini_file_streams_to_the_same_questions() -> None:
    streamed = list(iter_questions(MINI))
    assert len(streamed) == 16
    assert streamed == load_questions(MINI)


@pytest.mark.parametrize("suffix", [".json.gz", ".json.xz"])
def test_compressed_files_stream_like_the_plain_file(tmp_path: Path, suffix: str) -> None:
    data = SAMPLE_PATH.read_bytes()
    path = tmp_path / f"sample{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else lzma.compress(data))
    assert list(iter_questions(path)) == load_questions(SAMPLE_PATH)
    assert [entry.question_id for entry in scan_index(path)] == [q.question_id for q in load_questions(SAMPLE_PATH)]


def test_scan_index_reads_ids_types_and_sizes_without_building_histories() -> None:
    questions = load_questions(SAMPLE_PATH)
    entries = scan_index(SAMPLE_PATH)
    assert entries == [
        IndexEntry(
            index=index,
            question_id=question.question_id,
            question_type=question.question_type,
            sessions=len(question.sessions),
            turns=len(question.turns()),
        )
        for index, question in enumerate(questions)
    ]
    assert count_questions(SAMPLE_PATH) == len(questions) == 42


# --- one question at a time ---------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small file from the M generator: 6 questions x 12 sessions."""
    path = tmp_path_factory.mktemp("synthetic") / "m.json"
    generator.write_synthetic(path, questions=6, sessions=12, seed=3)
    return path


def test_synthetic_file_streams_lazily_with_the_right_count(synthetic: Path) -> None:
    stream = iter_questions(synthetic)
    assert isinstance(stream, Iterator) and not isinstance(stream, list)
    first = next(stream)
    assert first.question_id == scan_index(synthetic)[0].question_id
    rest = list(stream)
    assert len(rest) + 1 == 6 == count_questions(synthetic)
    assert [first, *rest] == load_questions(synthetic)
    assert all(len(question.sessions) == 12 for question in rest)


def test_records_before_a_truncation_are_yielded_before_the_error(synthetic: Path, tmp_path: Path) -> None:
    raw = synthetic.read_bytes()
    ids = [entry.question_id for entry in scan_index(synthetic)]
    cut = raw.index(b'"question_id": "' + ids[4].encode())  # inside record 4, after its id
    path = tmp_path / "truncated.json"
    path.write_bytes(raw[: cut + 200])
    yielded, message = _stream_error(path)
    assert yielded == ids[:4]
    assert f"question {ids[4]}" in message and "not valid JSON" in message and "record 4" in message


def test_wrong_type_in_record_3_names_its_id_after_yielding_the_first_two(tmp_path: Path) -> None:
    records = _sample_records()[:5]
    records[2]["answer"] = 2.5  # ijson would give a Decimal; reported as float, like json.load
    path = _write(tmp_path / "wrong_type.json", records)
    yielded, message = _stream_error(path)
    assert yielded == [records[0]["question_id"], records[1]["question_id"]]
    assert message == _message(lambda: load_questions(path))
    assert f"question {records[2]['question_id']}: field answer: expected a string or an integer, found float" in message


def _break(records: list[dict[str, Any]], how: str) -> list[dict[str, Any]]:
    record = records[2]
    if how == "missing_question":
        del record["question"]
    elif how == "float_in_session_ids":
        record["haystack_session_ids"][0] = 1.5
    elif how == "bad_date":
        record["haystack_dates"][1] = "2023/02/30 (Thu) 10:00"
    elif how == "int_content":
        record["haystack_sessions"][0][0]["content"] = 7
    elif how == "unequal_lists":
        record["haystack_dates"].pop()
    elif how == "not_an_object":
        records[2] = ["not", "a", "record"]
    elif how == "number_id":
        record["question_id"] = 1.0
    return records


@pytest.mark.parametrize(
    "how",
    ["missing_question", "float_in_session_ids", "bad_date", "int_content", "unequal_lists", "not_an_object", "number_id"],
)
def test_bad_records_fail_with_the_loaders_sentence(tmp_path: Path, how: str) -> None:
    records = _break(copy.deepcopy(_sample_records()[:4]), how)
    path = _write(tmp_path / f"{how}.json", records)
    yielded, message = _stream_error(path)
    assert len(yielded) == 2
    assert message == _message(lambda: load_questions(path))


def test_duplicate_id_fails_as_records_are_read(tmp_path: Path) -> None:
    records = _sample_records()[:4]
    records.insert(3, copy.deepcopy(records[1]))
    path = _write(tmp_path / "duplicate.json", records)
    yielded, message = _stream_error(path)
    assert yielded == [record["question_id"] for record in records[:3]]
    assert message == f"{path}: question {records[1]['question_id']}: field question_id: duplicate id."


# --- malformed files ----------------------------------------------------------------


def _sample_text() -> str:
    return json.dumps(_sample_records()[:4])


@pytest.mark.parametrize(
    ("name", "content", "needles"),
    [
        ("empty.json", b"", ("is empty (no JSON in it)",)),
        ("blank.json", b" \n ", ("is empty (no JSON in it)",)),
        ("empty_array.json", b" [ ] ", ("holds no question (an empty JSON array)",)),
        ("object.json", b'{"question_id": "q1"}', ("expected a JSON array of question records, found dict",)),
        ("number.json", b"2.5", ("expected a JSON array of question records, found float",)),
        ("null.json", b"null", ("expected a JSON array of question records, found NoneType",)),
        ("garbage.json", (_sample_text() + " ]").encode(), ("not valid JSON after record 3", "trailing garbage")),
        ("between.json", _sample_text()[: _sample_text().index('}, {"question_id"') + 3].encode(), ("after record 0",)),
        ("nan.json", b"[NaN]", ("not valid JSON", "invalid char")),
    ],
)
def test_malformed_json_is_one_sentence_naming_the_file(
    tmp_path: Path, name: str, content: bytes, needles: tuple[str, ...]
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    message = _message(lambda: list(iter_questions(path)))
    assert message.startswith(f"{path}: ")
    for needle in needles:
        assert needle in message, (needle, message)
    assert _message(lambda: scan_index(path)) == message


def test_invalid_utf8_names_the_record_being_read(tmp_path: Path) -> None:
    text = _sample_text().encode()
    records = _sample_records()[:4]
    at = text.index(b"content", text.index(records[1]["question_id"].encode()))
    path = tmp_path / "latin1.json"
    path.write_bytes(text[:at] + b"\xe9" + text[at:])
    yielded, message = _stream_error(path)
    assert yielded == [records[0]["question_id"]]
    assert f"question {records[1]['question_id']}: cannot be read as UTF-8 JSON in record 1 (byte 0xe9 at offset {at}" in message


def test_not_xz_and_truncated_gz_cannot_be_read(tmp_path: Path) -> None:
    fake = tmp_path / "fake.json.xz"
    fake.write_text(_sample_text(), encoding="utf-8")
    assert "cannot be read as xz-compressed UTF-8 JSON" in _message(lambda: iter_questions(fake))
    short = tmp_path / "short.json.gz"
    short.write_bytes(gzip.compress(_sample_text().encode())[:-40])
    assert "cannot be read as gzip-compressed UTF-8 JSON" in _message(lambda: list(iter_questions(short)))


BAD_INPUTS = Path(__file__).resolve().parent / "bad_inputs"
BAD_MANIFEST = BAD_INPUTS / "expected.json"
# json.load reads NaN as a float (then "found float"); ijson, like the JSON standard, rejects it as invalid JSON.
NOT_LIKE_THE_LOADER = {"answer_nan.json"}


def test_bad_input_corpus_fails_with_the_expected_parts() -> None:
    manifest = json.loads(BAD_MANIFEST.read_text(encoding="utf-8"))
    for name, entry in sorted(manifest.items()):
        path = BAD_INPUTS / name
        message = _message(lambda path=path: list(iter_questions(path)))
        assert message.startswith(f"{path}: "), message
        if name not in NOT_LIKE_THE_LOADER:
            missing = [part for part in entry["expect"] if part not in message]
            assert not missing, (name, missing, message)


def test_missing_file_fails_at_the_call_not_at_first_use(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert _message(lambda: iter_questions(missing)) == f"{missing}: file not found."


# --- selecting questions ------------------------------------------------------------------


def test_selection_yields_in_file_order_and_stops_once_all_are_found(tmp_path: Path) -> None:
    records = _sample_records()[:5]
    text = json.dumps(records)
    path = tmp_path / "broken_tail.json"
    path.write_text(text[: text.index(records[3]["question_id"]) + 100], encoding="utf-8")  # record 3 truncated
    wanted = [records[2]["question_id"], records[0]["question_id"]]
    got = [question.question_id for question in iter_questions(path, wanted)]
    assert got == [records[0]["question_id"], records[2]["question_id"]]


def test_selecting_an_absent_id_fails_like_the_loader() -> None:
    first = load_questions(SAMPLE_PATH)[0].question_id
    message = _message(lambda: list(iter_questions(SAMPLE_PATH, [first, "no_such_id"])))
    assert message == _message(lambda: load_questions(SAMPLE_PATH, [first, "no_such_id"]))


def test_empty_selection_yields_nothing() -> None:
    assert list(iter_questions(SAMPLE_PATH, [])) == []


# --- the synthetic M generator -------------------------------------------------------------


def test_generator_writes_valid_official_format_records(synthetic: Path) -> None:
    records = json.loads(synthetic.read_text(encoding="utf-8"))
    assert len(records) == 6
    assert list(records[0]) == [
        "question_id", "question_type", "question", "question_date", "answer",
        "answer_session_ids", "haystack_dates", "haystack_session_ids", "haystack_sessions",
    ]  # fmt: skip
    for record, question in zip(records, load_questions(synthetic), strict=True):
        assert question.question_type in QUESTION_TYPES
        assert len(record["haystack_sessions"]) == 12
        assert set(record["answer_session_ids"]) <= set(record["haystack_session_ids"])
        assert all(session_id.startswith("answer_") for session_id in record["answer_session_ids"])
        assert any(turn.has_answer for turn in question.turns())
        assert question.question_date > question.sessions[-1].date


def test_generator_is_deterministic_and_sizes_are_prefixes(tmp_path: Path) -> None:
    small = generator.write_synthetic(tmp_path / "a.json", questions=2, sessions=5, seed=9)
    again = generator.write_synthetic(tmp_path / "b.json", questions=2, sessions=5, seed=9)
    assert small == again == (tmp_path / "a.json").stat().st_size
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    generator.write_synthetic(tmp_path / "c.json", questions=3, sessions=5, seed=9)
    three = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))
    assert json.loads((tmp_path / "a.json").read_text(encoding="utf-8")) == three[:2]
    generator.write_synthetic(tmp_path / "d.json", questions=2, sessions=5, seed=10)
    assert (tmp_path / "d.json").read_bytes() != (tmp_path / "a.json").read_bytes()


@pytest.mark.parametrize("suffix", [".json.gz", ".json.xz"])
def test_generator_compresses_by_suffix(tmp_path: Path, suffix: str) -> None:
    plain = tmp_path / "plain.json"
    generator.write_synthetic(plain, questions=2, sessions=4, seed=1)
    packed = tmp_path / f"packed{suffix}"
    assert generator.main(["--questions", "2", "--sessions", "4", "--seed", "1", "--out", str(packed)]) == 0
    opener = gzip.open if suffix.endswith(".gz") else lzma.open
    with opener(packed, "rb") as handle:
        assert handle.read() == plain.read_bytes()
    assert not list(tmp_path.glob("*.part"))
    assert list(iter_questions(packed)) == load_questions(plain)


def test_bench_script_prints_its_table(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench_m.py"), "--questions", "2", "--sessions", "5", "--tmp", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for row in ("imports only", "scan_index", "iter_questions", "iter_questions + BM25 memory", "read_json (json.load)"):
        assert f"| {row} |" in done.stdout
    assert "peak RSS MiB" in done.stdout
    assert not list(tmp_path.iterdir())  # the synthetic file is removed
