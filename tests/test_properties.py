"""Property-based tests (Hypothesis) of the parsers of lme's own formats (issue 36): whatever the bytes, each
parser returns its data or raises lme's one-sentence error (`LmeError`, `DataError`), never another exception.

Covered: id-list files (lme.data.splits.read_ids), the user pin file (lme.data.fetch.read_user_pins), the study's
instructions file (lme.answer.study_instructions.load_study_instructions), the judge templates file
(lme.data.judge_templates.load_templates), lme.util.yamlfile.parse_yaml and the question record parser
(lme.data.parse.parse_question). Small `max_examples` keep each test about a second.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lme.answer.study_instructions import load_study_instructions
from lme.data.fetch import read_user_pins
from lme.data.judge_templates import TEMPLATE_KEYS, load_templates
from lme.data.parse import parse_question
from lme.data.splits import read_ids
from lme.util.errors import LmeError
from lme.util.yamlfile import parse_yaml

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
# file contents: arbitrary bytes, JSON text of arbitrary values, and JSON near each format's own shape
raw_bytes = st.binary(max_size=300)


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def _json_bytes(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8")


@SETTINGS
@given(st.one_of(raw_bytes, st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_id_list_files_parse_or_refuse(data):
    with tempfile.TemporaryDirectory() as folder:
        try:
            ids = read_ids(_write(Path(folder), "ids.txt", data))
        except LmeError as exc:
            assert "ids.txt" in str(exc)
            return
    assert all(isinstance(qid, str) and qid and qid == qid.strip() and "#" not in qid for qid in ids)
    assert len(set(ids)) == len(ids)


pin_shaped = st.fixed_dictionaries({"files": st.dictionaries(
    st.text(max_size=10), st.one_of(json_values, st.fixed_dictionaries({"sha256": json_values})), max_size=3)})


@SETTINGS
@given(st.one_of(raw_bytes, json_values.map(_json_bytes), pin_shaped.map(_json_bytes)))
def test_pin_files_parse_or_refuse(data):
    with tempfile.TemporaryDirectory() as folder:
        _write(Path(folder), "pins.json", data)
        try:
            pins = read_user_pins(Path(folder))
        except LmeError as exc:
            assert "pins.json" in str(exc)
            return
    assert isinstance(pins, dict) and all(isinstance(v.get("sha256"), str) for v in pins.values())


study_shaped = st.fixed_dictionaries({"base": json_values, "paragraphs": st.one_of(
    json_values, st.dictionaries(st.sampled_from(["advice", "decline", "recall", "x"]), json_values, max_size=4))})


@SETTINGS
@given(st.one_of(raw_bytes, json_values.map(_json_bytes), study_shaped.map(_json_bytes)))
def test_study_instruction_files_parse_or_refuse(data):
    with tempfile.TemporaryDirectory() as folder:
        try:
            load_study_instructions(_write(Path(folder), "study_instructions.json", data))
        except LmeError as exc:
            assert "study_instructions.json" in str(exc)


templates_shaped = st.fixed_dictionaries({"templates": st.one_of(
    json_values, st.dictionaries(st.sampled_from(list(TEMPLATE_KEYS)), json_values, max_size=len(TEMPLATE_KEYS)))})


@SETTINGS
@given(st.one_of(raw_bytes, json_values.map(_json_bytes), templates_shaped.map(_json_bytes)))
def test_judge_template_files_parse_or_refuse(data):
    with tempfile.TemporaryDirectory() as folder:
        try:
            load_templates(_write(Path(folder), "judge_templates.json", data), pinned={})
        except LmeError as exc:
            assert "judge_templates.json" in str(exc)


def test_files_that_are_directories_are_refused(tmp_path):
    for name, read in (("ids.txt", read_ids), ("judge_templates.json", lambda p: load_templates(p, pinned={})),
                       ("study_instructions.json", load_study_instructions)):
        (tmp_path / name).mkdir()
        try:
            read(tmp_path / name)
        except LmeError as exc:
            assert name in str(exc)
        else:
            raise AssertionError(f"{name} as a directory was read")
    (tmp_path / "pins.json").mkdir()
    try:
        read_user_pins(tmp_path)
    except LmeError as exc:
        assert "pins.json" in str(exc)


yaml_like = st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#\n ,?%@`\t0123456789.")), max_size=200)


@SETTINGS
@given(st.one_of(st.text(max_size=200), yaml_like))
def test_yaml_text_parses_or_refuses(text):
    try:
        parse_yaml(text, "a test file")
    except LmeError as exc:
        assert "a test file" in str(exc)


def _record(overrides: dict) -> dict:
    record = {
        "question_id": "q1", "question_type": "single-session-user", "question": "What?", "answer": "this",
        "question_date": "2023/05/20 (Sat) 02:21", "haystack_dates": ["2023/05/19 (Fri) 10:00"],
        "haystack_session_ids": ["s1"], "haystack_sessions": [[{"role": "user", "content": "hello"}]],
        "answer_session_ids": ["s1"],
    }
    record.update(overrides)
    return record


fields = st.sampled_from(["question_id", "question_type", "question", "answer", "question_date", "haystack_dates",
                          "haystack_session_ids", "haystack_sessions", "answer_session_ids", "extra"])


@SETTINGS
@given(st.one_of(json_values, st.dictionaries(fields, json_values, max_size=4).map(_record)))
def test_question_records_parse_or_raise_data_errors(record):
    try:
        parse_question(record, Path("data.json"), 0)
    except LmeError as exc:  # DataError is an LmeError
        assert "data.json" in str(exc)
