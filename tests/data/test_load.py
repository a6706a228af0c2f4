"""Loading LongMemEval files: every kind of bad input fails with one sentence naming file, question and field."""

from __future__ import annotations

import copy
import gzip
import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from lme.data.dates import parse_lme_date
from lme.data.load import REQUIRED_FIELDS, load_questions
from lme.util.errors import DataError
from shared_data import MINI, need


def _turn(role: str, content: str, has_answer: bool | None = None) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": role, "content": content}
    if has_answer is not None:
        turn["has_answer"] = has_answer
    return turn


def _record(question_id: str = "q001", **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": "What colour is my bicycle?",
        "question_date": "2023/06/10 (Sat) 09:30",
        "answer": "Teal",
        "answer_session_ids": ["answer_bike_1"],
        "haystack_dates": ["2023/06/01 (Thu) 18:05", "2023/06/03 (Sat) 11:40"],
        "haystack_session_ids": ["chat_garden", "answer_bike_1"],
        "haystack_sessions": [
            [
                _turn("user", "Which vegetables can I sow in June?"),
                _turn("assistant", "Beans, courgettes and lettuce all do well when sown in June."),
            ],
            [
                _turn("user", "I just bought a teal bicycle for the canal path.", True),
                _turn("assistant", "Lovely colour. Remember to check the tyre pressure before long rides.", False),
            ],
        ],
    }
    record.update(overrides)
    return record


def _write(tmp_path: Path, data: Any, name: str = "questions.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _fails(path: Path, *needles: str, question_ids: list[str] | None = None) -> str:
    with pytest.raises(DataError) as caught:
        load_questions(path, question_ids)
    message = str(caught.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message, (needle, message)
    assert "\n" not in message and message.endswith(".")
    return message


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("field", REQUIRED_FIELDS)
def test_missing_field(tmp_path: Path, field: str) -> None:
    broken = _record("q002")
    del broken[field]
    path = _write(tmp_path, [_record(), broken])
    where = "record 1" if field == "question_id" else "question q002"
    _fails(path, where, f"field {field}", "missing")


@pytest.mark.parametrize(
    ("field", "value", "found"),
    [
        ("question", ["What colour", "is my bicycle?"], "list"),
        ("question_type", 3, "int"),
        ("question_date", None, "null"),
        ("answer", 2.5, "float"),
        ("answer", True, "bool"),
        ("answer", None, "null"),
        ("haystack_dates", "2023/06/01 (Thu) 18:05", "str"),
        ("answer_session_ids", {"id": "answer_bike_1"}, "dict"),
    ],
)
def test_wrong_type(tmp_path: Path, field: str, value: Any, found: str) -> None:
    path = _write(tmp_path, [_record(**{field: value})])
    _fails(path, "question q001", f"field {field}", f"found {found}")


def test_wrong_type_inside_lists(tmp_path: Path) -> None:
    record = _record(haystack_dates=["2023/06/01 (Thu) 18:05", 20230603])
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_dates[1]", "found int")

    record = _record()
    record["haystack_sessions"][1] = "a session as text"
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions[1]", "found str")

    record = _record()
    record["haystack_sessions"][0][1]["content"] = ["not", "text"]
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions[0][1].content", "found list")

    record = _record()
    record["haystack_sessions"][1][0]["has_answer"] = "yes"
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions[1][0].has_answer", "found str")

    record = _record()
    del record["haystack_sessions"][0][0]["content"]
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions[0][0].content", "missing")

    record = _record()
    record["haystack_sessions"][0][0] = "user: hello"
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions[0][0]", "turn object")


def test_question_id_of_wrong_type_names_the_record(tmp_path: Path) -> None:
    _fails(_write(tmp_path, [_record(), _record(question_id=17)]), "record 1", "field question_id", "found int")


def test_record_that_is_not_an_object(tmp_path: Path) -> None:
    _fails(_write(tmp_path, [_record(), ["q002"]]), "record 1", "JSON object")


@pytest.mark.parametrize("shorter", ["haystack_dates", "haystack_session_ids", "haystack_sessions"])
def test_parallel_lists_of_unequal_length(tmp_path: Path, shorter: str) -> None:
    record = _record()
    record[shorter] = record[shorter][:1]
    message = _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions", "unequal length")
    assert f"{shorter} has 1" in message


def test_unparseable_question_date(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record(question_date="2023-06-10 09:30")])
    _fails(path, "question q001", "field question_date", "2023-06-10 09:30")


def test_unparseable_haystack_date(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record(haystack_dates=["2023/06/01 (Thu) 18:05", "the third of June"])])
    _fails(path, "question q001", "field haystack_dates[1]", "the third of June")


def test_unknown_role(tmp_path: Path) -> None:
    record = _record()
    record["haystack_sessions"][1][1]["role"] = "system"
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions[1][1].role", "'system'")


def test_unknown_question_type(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record(question_type="multi-hop")])
    _fails(path, "question q001", "field question_type", "'multi-hop'")


def test_empty_history(tmp_path: Path) -> None:
    record = _record(haystack_dates=[], haystack_session_ids=[], haystack_sessions=[])
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions", "empty history")


def test_history_whose_sessions_have_no_turns(tmp_path: Path) -> None:
    record = _record(haystack_sessions=[[], []])
    _fails(_write(tmp_path, [record]), "question q001", "field haystack_sessions", "empty history")


def test_not_a_json_array(tmp_path: Path) -> None:
    _fails(_write(tmp_path, {"questions": [_record()]}), "JSON array", "found dict")


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "questions.json"
    path.write_text('[{"question_id": "q001",', encoding="utf-8")
    _fails(path, "not valid JSON")


def test_corrupt_compressed_file(tmp_path: Path) -> None:
    path = tmp_path / "questions.json.xz"
    path.write_bytes(b"this is not xz data")
    _fails(path, "cannot be read")


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
def test_truncated_compressed_file(tmp_path: Path, suffix: str) -> None:
    whole = _write(tmp_path, [_record("q001"), _record("q002")])
    compress = {".gz": gzip.compress, ".xz": lzma.compress}[suffix]
    data = compress(whole.read_bytes())
    path = tmp_path / f"questions.json{suffix}"
    path.write_bytes(data[: len(data) * 2 // 3])
    _fails(path, str(path), "cannot be read as")


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
def test_a_compressed_file_of_several_members_loads_whole(tmp_path: Path, suffix: str) -> None:
    """`gzip` and `xz` may concatenate members/streams (e.g. `cat a.gz b.gz`): the file is all of them."""
    text = json.dumps([_record("q001"), _record("q002")]).encode("utf-8")
    compress = {".gz": gzip.compress, ".xz": lzma.compress}[suffix]
    path = tmp_path / f"questions.json{suffix}"
    path.write_bytes(compress(text[:40]) + compress(text[40:]))
    assert [q.question_id for q in load_questions(path)] == ["q001", "q002"]


def test_file_not_found(tmp_path: Path) -> None:
    _fails(tmp_path / "absent.json", "file not found")


def test_duplicate_question_id(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record("q001"), _record("q002"), _record("q001")])
    _fails(path, "question q001", "field question_id", "duplicate")


def test_selected_id_not_in_file(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record("q001"), _record("q002")])
    _fails(path, "question q404", "not in the file", question_ids=["q002", "q404"])


# --- good input ----------------------------------------------------------------


def test_plain_gzip_and_xz_files_load_identically(tmp_path: Path) -> None:
    records = [_record("q001"), _record("q002_abs", answer=3)]
    text = json.dumps(records)
    plain = tmp_path / "questions.json"
    plain.write_text(text, encoding="utf-8")
    with gzip.open(tmp_path / "questions.json.gz", "wt", encoding="utf-8") as handle:
        handle.write(text)
    with lzma.open(tmp_path / "questions.json.xz", "wt", encoding="utf-8") as handle:
        handle.write(text)
    expected = load_questions(plain)
    assert len(expected) == 2
    assert load_questions(tmp_path / "questions.json.gz") == expected
    assert load_questions(str(tmp_path / "questions.json.xz")) == expected


def test_integer_answer_becomes_text(tmp_path: Path) -> None:
    (question,) = load_questions(_write(tmp_path, [_record(answer=25)]))
    assert question.answer == "25"


def test_abstention_is_marked_by_the_id(tmp_path: Path) -> None:
    plain, abstention = load_questions(_write(tmp_path, [_record("q001"), _record("q001_abs")]))
    assert not plain.is_abstention
    assert abstention.is_abstention
    assert abstention.question_type == "single-session-user"


def test_sessions_sorted_by_date_stable_with_neutral_ids(tmp_path: Path) -> None:
    def session(word: str) -> list[dict[str, Any]]:
        return [
            _turn("user", f"Tell me about {word}."),
            _turn("assistant", f"Here is something about {word}."),
            _turn("user", "Thanks."),
            _turn("assistant", "You are welcome."),
        ]

    record = _record(
        haystack_dates=[
            "2023/05/20 (Sat) 10:00",
            "2023/05/18 (Thu) 09:00",
            "2023/05/20 (Sat) 08:00",
            "2023/05/18 (Thu) 09:00",
        ],
        haystack_session_ids=["late", "early_first", "middle", "early_second"],
        haystack_sessions=[session("kites"), session("maps"), session("tea"), session("owls")],
        answer_session_ids=["middle"],
    )
    (question,) = load_questions(_write(tmp_path, [record]))
    assert [s.original_id for s in question.sessions] == ["early_first", "early_second", "middle", "late"]
    assert [s.session_id for s in question.sessions] == ["s0000", "s0001", "s0002", "s0003"]
    assert [s.date for s in question.sessions] == sorted(s.date for s in question.sessions)
    assert question.sessions[2].date_text == "2023/05/20 (Sat) 08:00"
    assert [t.turn_id for t in question.sessions[1].turns] == ["s0001:0", "s0001:1", "s0001:2", "s0001:3"]
    assert question.sessions[1].turns[3].role == "assistant"
    assert question.sessions[1].turns[0].content == "Tell me about owls."
    assert [s.is_evidence for s in question.sessions] == [False, False, True, False]
    assert question.session_of("s0003:2").original_id == "late"
    assert [t.turn_id for t in question.turns()][:5] == ["s0000:0", "s0000:1", "s0000:2", "s0000:3", "s0001:0"]


def test_labels_are_kept_for_metrics(tmp_path: Path) -> None:
    (question,) = load_questions(_write(tmp_path, [_record()]))
    garden, bike = question.sessions
    assert (garden.original_id, garden.is_evidence) == ("chat_garden", False)
    assert (bike.original_id, bike.is_evidence) == ("answer_bike_1", True)
    assert [t.has_answer for t in garden.turns] == [False, False]  # absent flags default to false
    assert [t.has_answer for t in bike.turns] == [True, False]
    assert question.answer_session_ids == ("answer_bike_1",)
    assert question.question_date == parse_lme_date("2023/06/10 (Sat) 09:30")
    assert question.question_date_text == "2023/06/10 (Sat) 09:30"


def test_integer_session_ids_become_text(tmp_path: Path) -> None:
    (question,) = load_questions(_write(tmp_path, [_record(haystack_session_ids=[7, 8], answer_session_ids=[8])]))
    assert [s.original_id for s in question.sessions] == ["7", "8"]
    assert [s.is_evidence for s in question.sessions] == [False, True]
    assert question.answer_session_ids == ("8",)


def test_selection_follows_the_given_order(tmp_path: Path) -> None:
    path = _write(tmp_path, [_record("q001"), _record("q002"), _record("q003")])
    assert [q.question_id for q in load_questions(path, ["q003", "q001"])] == ["q003", "q001"]
    assert [q.question_id for q in load_questions(path)] == ["q001", "q002", "q003"]


# --- the real mini file ----------------------------------------------------------


@pytest.fixture(scope="module")
def mini_path() -> Path:
    return need(MINI)


def test_real_mini_file_loads_sorted(mini_path: Path) -> None:
    questions = load_questions(mini_path)
    assert len(questions) == 16
    assert sum(question.is_abstention for question in questions) == 4
    with lzma.open(mini_path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    for record, question in zip(raw, questions):
        assert question.question_id == record["question_id"]
        dates = [session.date for session in question.sessions]
        assert dates == sorted(dates)
        assert [s.session_id for s in question.sessions] == [f"s{i:04d}" for i in range(len(dates))]
        order = sorted(range(len(dates)), key=lambda i: (parse_lme_date(record["haystack_dates"][i]), i))
        assert [s.original_id for s in question.sessions] == [str(record["haystack_session_ids"][i]) for i in order]
        assert any(session.is_evidence for session in question.sessions)


def test_real_mini_file_with_a_broken_field_names_it(mini_path: Path, tmp_path: Path) -> None:
    with lzma.open(mini_path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    broken = copy.deepcopy(raw[3])
    del broken["question_date"]
    raw[3] = broken
    path = _write(tmp_path, raw, "broken_mini.json")
    _fails(path, f"question {broken['question_id']}", "field question_date", "missing")
