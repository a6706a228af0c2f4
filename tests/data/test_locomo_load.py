"""LoCoMo as lme's questions (lme.data.locomo): the real file's counts, the mapping of ids, speakers, photos,
categories, answers, dates and evidence, and one sentence naming file, conversation and field for bad input."""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from lme.config.design import compose_design
from lme.data.benchmark import benchmark_named
from lme.data.dataset import load_dataset, load_file
from lme.data.locomo import NOT_MENTIONED, evidence_ids, parse_locomo, unresolved_evidence
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.retrieval.fts5 import FTS5Retriever
from lme.util.errors import DataError, LmeError
from shared_data import LOCOMO, needs

TINY = [{
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_2_date_time": "9:05 am on 3 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Back from Lisbon!"},
                      {"speaker": "Ann", "dia_id": "D2:2", "text": "Look at this", "img_url": ["http://x/y.jpg"],
                       "blip_caption": "a photo of a red kite"}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I start pottery on Monday."},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Good luck with the pottery."}],
        "session_3_date_time": "8:00 pm on 1 July, 2023",  # a date without a session, as in the real file
    },
    "qa": [
        {"question": "When did Ann start pottery?", "answer": "May 2023", "evidence": ["D1:1"], "category": 2},
        {"question": "What year?", "answer": 2023, "evidence": ["D1:1; D2:01", "D:2:2", "D9:9", "D"], "category": 4},
        {"question": "What did Ann fly?", "evidence": [], "category": 5, "adversarial_answer": "a kite"},
    ],
}]


def parsed(data=TINY, **options):
    return parse_locomo(copy.deepcopy(data), Path("tiny.json"), **options)


def test_ids_speakers_photos_categories_answers_and_dates():
    first, second, third = parsed()
    assert [q.question_id for q in (first, second, third)] == ["conv-x-q000", "conv-x-q001", "conv-x-q002"]
    assert [q.question_type for q in (first, second, third)] == ["temporal", "single-hop", "adversarial"]
    assert [q.is_abstention for q in (first, second, third)] == [False, False, True]
    assert (second.answer, third.answer) == ("2023", NOT_MENTIONED)  # str() of an integer; the unanswerable's text
    assert all(q.benchmark == "locomo" for q in (first, second, third))
    # sessions in date order whatever the keys' order; the last session with turns dates the questions
    assert [s.original_id for s in first.sessions] == ["session_1", "session_2"]
    assert [s.session_id for s in first.sessions] == ["s0000", "s0001"]
    assert first.question_date == datetime(2023, 6, 3, 9, 5) and first.question_date_text == "2023/06/03 (Sat) 09:05"
    turns = first.turns()
    assert [(t.turn_id, t.role, t.speaker) for t in turns] == [
        ("s0000:0", "user", "Ann"), ("s0000:1", "assistant", "Bo"), ("s0001:0", "assistant", "Bo"),
        ("s0001:1", "user", "Ann")]
    assert turns[3].content == "Look at this and shared a photo of a red kite."  # the image address is dropped
    assert first.sessions[0].turns[0].content == "I start pottery on Monday."


def test_evidence_ids_are_read_however_the_file_writes_them():
    assert evidence_ids(["D1:3", "D8:6; D9:17", "D:11:26", "D30:05", "D", 7]) == [
        (1, 3), (8, 6), (9, 17), (11, 26), (30, 5)]
    first, second, third = parsed()
    assert [t.turn_id for t in first.turns() if t.has_answer] == ["s0000:0"]
    assert first.answer_session_ids == ("session_1",)
    # D1:1, D2:01 (a leading zero) and D:2:2 (a stray colon) resolve; D9:9 and a bare D do not
    assert [t.turn_id for t in second.turns() if t.has_answer] == ["s0000:0", "s0001:0", "s0001:1"]
    assert not any(t.has_answer for t in third.turns())
    assert unresolved_evidence(TINY) == 2
    # flags are per question: the shared session objects are never changed
    assert not first.sessions[1].is_evidence and second.sessions[1].is_evidence


def test_the_question_date_can_be_set():
    (question, *_) = parsed(question_date="2024-01-31")
    assert question.question_date == datetime(2024, 1, 31)
    with pytest.raises(DataError, match="question_date 'tomorrow'"):
        parsed(question_date="tomorrow")


def test_a_memory_shows_speakers_by_name():
    (question, *_) = parsed()
    memory = RetrievedMemoryBuilder(FTS5Retriever()).build(question)
    assert "Ann: I start pottery on Monday." in memory.text and "Bo: Good luck" in memory.text
    assert " user: " not in memory.text and " assistant: " not in memory.text


def _broken(path: list, value) -> list:
    data = copy.deepcopy(TINY)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize(("path", "value", "field"), [
    ([0, "qa", 0, "category"], 6, "qa[0].category"),
    ([0, "qa", 0, "category"], True, "qa[0].category"),
    ([0, "qa", 0, "answer"], KeyError, "qa[0].answer"),
    ([0, "qa", 0, "answer"], [1], "qa[0].answer"),
    ([0, "qa", 1, "question"], None, "qa[1].question"),
    ([0, "qa", 0, "evidence"], "D1:1", "qa[0].evidence"),
    ([0, "qa"], {}, "qa"),
    ([0, "conversation", "session_1_date_time"], "yesterday", "conversation.session_1_date_time"),
    ([0, "conversation", "session_1_date_time"], KeyError, "conversation.session_1_date_time"),
    ([0, "conversation", "session_1"], "text", "conversation.session_1"),
    ([0, "conversation", "session_1", 0, "speaker"], "Cy", "conversation.session_1[0].speaker"),
    ([0, "conversation", "session_1", 0, "text"], KeyError, "conversation.session_1[0].text"),
    ([0, "conversation", "session_1", 0, "text"], "\ud800", "conversation.session_1[0].text"),
    ([0, "conversation", "session_1", 0, "speaker"], KeyError, "conversation.session_1[0].speaker"),
    ([0, "conversation", "speaker_b"], "Ann", "conversation.speaker_b"),
    ([0, "conversation", "speaker_a"], KeyError, "conversation.speaker_a"),
    ([0, "sample_id"], 3, "sample_id"),
])
def test_bad_input_is_one_sentence_naming_file_conversation_and_field(path, value, field):
    with pytest.raises(DataError) as caught:
        parsed(_broken(path, value))
    message = str(caught.value)
    assert message.startswith("tiny.json: conversation ") and field in message and "\n" not in message


def test_a_file_that_is_not_locomo_is_refused(tmp_path):
    path = tmp_path / "x.json"
    for content, words in ((b"{}", "JSON array of conversations"), (b"[1]", "not an object"),
                           (b"\xff", "not UTF-8"), (b"[", "not valid JSON"),
                           (b"[" * 200_000, "nested deeper than 64 levels"),
                           (json.dumps(TINY + TINY).encode(), "appears twice")):
        path.write_bytes(content)
        with pytest.raises(DataError, match=words):
            load_file(path, "locomo")


def test_unknown_options_and_benchmarks_are_one_sentence(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(TINY))
    with pytest.raises(LmeError, match="dataset.options: colour is not an option of benchmark locomo"):
        load_file(path, "locomo", {"colour": "red"})
    with pytest.raises(LmeError, match="dataset.benchmark 'nope'"):
        benchmark_named("nope")


@needs(LOCOMO)
def test_the_real_file_gives_the_published_counts():
    questions = load_file(LOCOMO, "locomo")
    assert len(questions) == 1986
    assert Counter(q.question_type for q in questions) == {
        "multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841, "adversarial": 446}
    conversations = {q.question_id.rsplit("-q", 1)[0]: q for q in questions}
    assert len(conversations) == 10
    assert sum(len(q.sessions) for q in conversations.values()) == 272
    assert sum(len(q.turns()) for q in conversations.values()) == 5882
    assert sum(q.answer == NOT_MENTIONED for q in questions) == 444
    assert unresolved_evidence(json.loads(LOCOMO.read_text(encoding="utf-8"))) == 3
    # the questions of one conversation share its session objects (one history in memory, not 200)
    same = [q for q in questions if q.question_id.startswith("conv-26-")]
    assert all(a is b for q in same for a, b in zip(q.sessions, same[0].sessions)
               if not a.is_evidence and not b.is_evidence)


@needs(LOCOMO)
def test_dataset_locomo_selects_by_category(tmp_path):
    spec = compose_design([f"dataset.path={LOCOMO}", "dataset=locomo", "question_types=[adversarial]",
                           "limit=5"]).dataset
    assert spec.benchmark == "locomo" and spec.name == "locomo"
    _, questions = load_dataset(spec)
    assert len(questions) == 5 and all(q.question_type == "adversarial" for q in questions)
    streamed = compose_design([f"dataset.path={LOCOMO}", "dataset=locomo", "dataset.stream=true"]).dataset
    with pytest.raises(LmeError, match="benchmark locomo is read whole"):
        load_dataset(streamed)
