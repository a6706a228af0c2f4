"""Leakage audit: answer phrases, whole-word matching, common words, planted answers, shipped designs."""

from __future__ import annotations

from datetime import datetime

import pytest

from lme.provenance.audit import (
    STOP_WORDS,
    Text,
    answer_phrases,
    common_reason,
    config_texts,
    find_hits,
    number_to_words,
    shipped_designs,
)
from lme.cli.audit import main
from lme.data.load import load_questions
from lme.data.records import Question
from lme.data.sample import SAMPLE_PATH
from shared_data import MINI, S_FILE, needs


def question(answer: str, question_id: str = "q1") -> Question:
    when = datetime(2023, 5, 30, 10, 0)
    return Question(question_id, "multi-session", "How many?", answer, when, "2023/05/30 (Tue) 10:00", (), ())


def test_number_words():
    assert [number_to_words(n) for n in (0, 3, 13, 25, 40, 100, 1300, 2024)] == [
        "zero", "three", "thirteen", "twenty-five", "forty", "one hundred", "one thousand three hundred",
        "two thousand twenty-four"]


@pytest.mark.parametrize(("answer", "expected"), [
    ("3", {"3", "three"}),
    ("Three times a week.", {"Three times a week", "3 times a week"}),
    ("'Some Title'", {"Some Title"}),
    ("12 days. 13 days (including the last day) is also acceptable.", {"12 days", "twelve days", "13 days"}),
    ("Central Library of the City (CLC)", {"Central Library of the City", "CLC"}),
    ("7 minutes and 5 seconds (or 7:05)", {"7 minutes and 5 seconds", "7:05"}),
    ("25 km", {"twenty-five km", "twenty five km"}),
])
def test_answer_phrases(answer, expected):
    phrases = set(answer_phrases(answer))
    assert expected <= phrases, phrases
    assert "including the last day" not in {p.lower() for p in phrases}


def test_whole_words_only_case_insensitive_numbers_both_ways():
    texts = [Text("a", "The Beagles played."), Text("b", "Count 2,000 or 2.5 items."), Text("c", "a BEAGLE."),
             Text("d", "about twenty-five km away"), Text("e", "say 1300 or so")]
    assert [h.path for h in find_hits(texts, [question("beagle")])] == ["c"]
    assert find_hits(texts, [question("2")]) == []  # not inside 2,000 nor 2.5
    assert [h.path for h in find_hits(texts, [question("25 km")])] == ["d"]
    hit = find_hits(texts, [question("one thousand three hundred")])
    assert [(h.path, h.excerpt) for h in hit] == [("e", "1300")]


def test_common_words_are_marked_not_hidden():
    texts = [Text("instructions.base", "The memory has two parts; answer yes or no. Luna.")]
    hits = {h.answer: h for h in find_hits(texts, [question("2"), question("Yes", "q2"), question("Luna", "q3")])}
    assert hits["2"].common == "stop word" and hits["2"].excerpt == "two"
    assert hits["Yes"].common == "stop word"
    assert hits["Luna"].common is None
    assert common_reason("UK") == "shorter than 3 characters" and "ninety-nine" in STOP_WORDS


def test_abstention_questions_are_skipped():
    texts = [Text("instructions.base", "You did not mention this information.")]
    assert find_hits(texts, [question("You did not mention this information.", "q_abs")]) == []


def test_config_texts_cover_instructions_rules_patterns_and_examples():
    container = {
        "instructions": {"base": "b", "paragraphs": {"x": "p"}, "first_pass": ["x"]},
        "rules": {"definitions": {"r": {"patterns": ["did you", "remind me"]}}},
        "memory": {"name": "not scanned", "examples": ["e1"]},
        "retriever": {"query_prompt": "q: "},
        "reader": {"instruction_role": "system"},
    }
    paths = {t.path for t in config_texts(container)}
    assert {"instructions.base", "instructions.paragraphs.x", "rules.definitions.r.patterns[1]",
            "memory.examples[0]", "retriever.query_prompt"} <= paths
    assert "memory.name" not in paths and "reader.instruction_role" not in paths


def test_audit_finds_a_planted_answer_in_a_test_instruction(capsys):
    sample = {q.question_id: q for q in load_questions(SAMPLE_PATH)}
    target = next(q for q in sample.values() if not q.is_abstention and common_reason(q.answer) is None
                  and len(q.answer.split()) <= 3 and "'" not in q.answer)
    numbered = next(q for q in sample.values() if q.answer.split()[0].isdigit() and int(q.answer.split()[0]) > 20
                    and len(q.answer.split()) <= 4)
    as_words = number_to_words(int(numbered.answer.split()[0])) + " " + " ".join(numbered.answer.split()[1:])
    planted = f"For example, a good answer is {target.answer.upper()}, or {as_words}."
    assert main([f"+instructions.paragraphs.x='{planted}'"]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("NOT COMMON")]
    assert any(f"question {target.question_id}," in line and "instructions.paragraphs.x" in line for line in lines), out
    assert any(f"question {numbered.question_id}," in line and as_words.split()[0] in line for line in lines), out
    assert main([]) == 0  # the embedded default has no hit


def test_audit_all_designs_covers_every_shipped_design(capsys):
    assert main(["--all-designs", "limit=5"]) == 0
    out = capsys.readouterr().out
    for name in ["(no design)", *shipped_designs()]:
        assert f"\n{name}: " in "\n" + out, name


@needs(MINI)
def test_shipped_designs_hold_no_answer_of_the_real_mini_file(capsys):
    assert main(["--all-designs", f"dataset.path={MINI}"]) == 0, capsys.readouterr().out


@pytest.mark.slow
@needs(S_FILE)
def test_shipped_designs_hold_no_uncommon_answer_of_s(capsys):
    assert main(["--all-designs", f"dataset.path={S_FILE}"]) == 0, capsys.readouterr().out
