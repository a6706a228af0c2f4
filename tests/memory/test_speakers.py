"""Who "the user" is on a benchmark of two people (lme.memory.speakers, memory.speakers): both speakers, or the one
the question names; unset, the user log is refused in one sentence. LongMemEval's memories are unchanged (the
figures guard, tests/test_longmemeval_figures.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from lme.data.locomo import parse_locomo
from lme.memory.speakers import asked_about, speaker_view, speakers_of
from lme.memory.user_log import UserLogMemoryBuilder
from lme.retrieval.fts5 import FTS5Retriever
from lme.util.errors import LmeError

CONVERSATION = [{
    "sample_id": "c1",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I started pottery yesterday."},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "I ran a marathon last week."}],
    },
    "qa": [{"question": "When did Ann start pottery?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
           {"question": "When did bo run a marathon?", "answer": "May 2023", "evidence": ["D1:2"], "category": 2},
           {"question": "Who ran, Ann or Bo?", "answer": "Bo", "evidence": ["D1:2"], "category": 4},
           {"question": "What did Annie bake?", "answer": "bread", "evidence": [], "category": 4},
           {"question": "What did Ann hear about the marathon?", "answer": "Bo ran it", "evidence": ["D1:2"],
            "category": 4}],
}]


@pytest.fixture()
def questions():
    return parse_locomo(copy.deepcopy(CONVERSATION), Path("c.json"))


def test_the_speaker_asked_about_is_the_one_the_question_names(questions):
    names = speakers_of(questions[0])
    assert names == ("Ann", "Bo")
    assert [asked_about(q, names) for q in questions] == ["Ann", "Bo", None, None, "Ann"]  # any case; not "Annie"


def test_the_view_makes_the_chosen_speakers_the_user(questions):
    view, logged = speaker_view(questions[1], "asked_about")
    assert logged == ("Bo",) and [t.role for t in view.turns()] == ["assistant", "user"]
    assert [(t.turn_id, t.content, t.speaker) for t in view.turns()] == [
        (t.turn_id, t.content, t.speaker) for t in questions[1].turns()]
    both, logged = speaker_view(questions[1], "both")
    assert logged == ("Ann", "Bo") and [t.role for t in both.turns()] == ["user", "user"]
    neither, logged = speaker_view(questions[2], "asked_about")  # names both: both
    assert logged == ("Ann", "Bo")
    with pytest.raises(LmeError, match="memory.speakers 'me'"):
        speaker_view(questions[0], "me")


def test_the_user_log_of_the_asked_about_speaker_retrieves_the_other(questions):
    memory = UserLogMemoryBuilder(FTS5Retriever(), speakers="asked_about").build(questions[4])
    log, _, replies = memory.text.partition("## Messages of Bo (retrieved")
    assert "## Messages of Ann (every session" in log and "[s0000:0] Ann: I started pottery yesterday." in log
    assert 'Resolved dates: "yesterday" = 2023-05-07' in log and memory.turn_ids == ("s0000:0", "s0000:1")
    assert "Bo" not in log.split("## Messages of Ann")[1] and "Bo answering [s0000:0]: I ran a marathon" in replies
    whole = UserLogMemoryBuilder(FTS5Retriever(), speakers="both").build(questions[0])
    assert "## Messages of Ann and Bo (every session" in whole.text and "[s0000:1] Bo: I ran" in whole.text
    assert "(retrieved" not in whole.text  # nothing left to retrieve


def test_unset_the_user_log_is_refused_on_two_people(questions):
    with pytest.raises(LmeError, match="set memory.speakers=both or memory.speakers=asked_about"):
        UserLogMemoryBuilder(FTS5Retriever()).build(questions[0])
    with pytest.raises(LmeError, match="memory.speakers 'x'"):
        UserLogMemoryBuilder(FTS5Retriever(), speakers="x")
