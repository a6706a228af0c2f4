"""The rule engine: triggers, exclusions, validation, and the shipped rule configs."""

from __future__ import annotations

import inspect

import pytest
from hydra import compose, initialize_config_dir

import lme
from lme.answer.rules import Rule, fold, parse_rule, parse_rules, select_by_question
from design_helpers import compose_instructions
from lme.util.errors import LmeError
from lme.judge import sha256_text

CONF = lme.CONF_DIR
VIEWS = ["first_pass", "whole_sessions"]


def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@pytest.fixture(scope="module")
def pipeline():
    cfg = _compose(["+design=pipeline"])
    first, steps, texts = compose_instructions(cfg)
    return cfg, first, steps, texts


def _rule(pipeline, name):
    return next(step.rule for step in pipeline[2] if step.rule.name == name)


def test_question_triggers_match_whole_words_case_insensitively(pipeline):
    advice = _rule(pipeline, "advice")
    assert advice.fires("Can you SUGGEST a book for my holiday?", None)
    assert advice.fires("Any tips for keeping basil alive?", None)
    assert advice.fires("Should I  take the early train?", None)  # white space runs are folded
    assert not advice.fires("My shoulder hurts; what stretch helps?", None)  # `should i` is not in `shoulder i...`
    assert not advice.fires("What tip did I leave the waiter?", None)  # `tips` only, as configured
    assert not advice.fires("Which suggestiveness test did I take?", None)


def test_advice_is_excluded_when_the_question_asks_about_the_past(pipeline):
    advice, recall = _rule(pipeline, "advice"), _rule(pipeline, "recall")
    question = "Which board game did you suggest for my family game night?"
    assert not advice.fires(question, None)
    assert recall.fires(question, None)
    assert recall.fires("Can you remind me of the hotel you recommended?", None)
    assert recall.fires("Looking back at our previous chat, what was the recipe?", None)
    assert not recall.fires("What did yourself think?", None)
    assert not recall.fires("Did your sister visit?", None)  # `did you` as whole words only


def test_the_decline_trigger_matches_anywhere_in_the_answer_with_any_apostrophe(pipeline):
    decline = _rule(pipeline, "decline")
    assert decline.fires("q", "The memory does not contain enough information to answer this question.")
    assert decline.fires("q", "I can\u2019t determine which one you mean.")
    assert decline.fires("q", "I CAN'T DETERMINE that")
    assert decline.fires("q", "Sadly, the log does not mention a dog.")
    assert decline.fires("q", "Unmentioned? It is not mentioned anywhere")  # inside other text
    assert not decline.fires("q", "Your dog is a beagle named Biscuit.")
    assert not decline.fires("q", None)  # a missing answer never fires
    assert not decline.fires("The memory does not contain enough information", "Biscuit")  # reads the answer only


def test_rules_see_only_the_question_text_and_the_answer():
    assert list(inspect.signature(Rule.fires).parameters) == ["self", "question", "answer"]
    rule = Rule(name="r", on="question", patterns=("how many",))
    pairs = [("a", "How many books?"), ("b", "How many books?"), ("c", "Which book?")]
    assert select_by_question([rule], pairs) == {"r": ["a", "b"]}


def test_fold_normalises_apostrophes_and_spaces():
    assert fold("can\u2019t \u2018x\u02bc\n\tnow") == "can't 'x' now"


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"on": "answer", "patterns": ["x"], "view": "attic"}, r"rules\.definitions\.r\.view: 'attic'"),
        ({"on": "answer", "patterns": ["x"], "paragraphs": ["nope"]}, r"paragraphs\[0\]: 'nope' is not defined"),
        ({"on": "answer", "patterns": ["(unclosed"]}, r"patterns\[0\]: '\(unclosed' is not a valid regular"),
        ({"on": "question", "patterns": ["x"], "exclude": ["[z"]}, r"exclude\[0\]"),
        ({"on": "reference", "patterns": ["x"]}, r"\.on: 'reference' is not one of question, answer"),
        ({"on": "question", "patterns": []}, r"at least one pattern"),
        ({"on": "question", "patterns": "x"}, r"patterns: expected a list"),
        ({"on": "question", "patterns": ["x"], "type": "multi-session"}, r"unknown key 'type'"),
    ],
)
def test_a_bad_rule_is_one_sentence_naming_the_field(definition, message):
    with pytest.raises(LmeError, match=message):
        parse_rule("r", definition, paragraphs={"calibration": "."}, views=VIEWS)


def test_order_names_must_be_defined_and_names_are_checked():
    with pytest.raises(LmeError, match=r"rules\.order\[1\]: rule 'recal' is not defined"):
        parse_rules({"order": ["r", "recal"], "definitions": {"r": {"on": "answer", "patterns": ["x"]}}}, {}, VIEWS)
    with pytest.raises(LmeError, match="first_pass"):
        parse_rule("first_pass", {"on": "answer", "patterns": ["x"]}, {}, VIEWS)
    assert parse_rules(None, {}, VIEWS) == ()
    assert parse_rules({"order": [], "definitions": {}}, {}, VIEWS) == ()


def test_an_unquoted_on_key_read_by_yaml_as_true_still_works():
    rule = parse_rule("r", {True: "answer", "patterns": ["nope"]}, {}, VIEWS)
    assert rule.on == "answer" and rule.fires("", "nope, sorry")


def test_the_pipeline_design_runs_advice_decline_decline_recall(pipeline):
    cfg, first, steps, texts = pipeline
    assert [step.rule.name for step in steps] == ["advice", "decline", "decline", "recall"]
    assert [step.rule.view for step in steps] == ["first_pass", "whole_sessions", "whole_sessions", "whole_sessions"]
    assert [step.rule.on for step in steps] == ["question", "answer", "answer", "question"]
    base = cfg.instructions.base
    paragraphs = cfg.instructions.paragraphs
    assert first == " ".join([base, paragraphs.user_log, paragraphs.calibration, paragraphs.answer_format])
    for step in steps:
        assert step.instruction == " ".join([base, *(paragraphs[name] for name in step.rule.paragraphs)])
    assert set(texts) == {"first_pass", "advice", "decline", "recall"}
    assert len({sha256_text(text) for text in texts.values()}) == 4
    assert "whole_sessions" in _rule(pipeline, "decline").paragraphs
    assert "advice" in _rule(pipeline, "advice").paragraphs and "recall" in _rule(pipeline, "recall").paragraphs


def test_the_base_instruction_declines_in_words_the_decline_trigger_catches(pipeline):
    decline = _rule(pipeline, "decline")
    cfg = pipeline[0]
    assert decline.fires("", cfg.instructions.base)
    assert decline.fires("", cfg.instructions.paragraphs.whole_sessions)


def test_first_pass_design_has_no_rules_and_the_real_paragraphs():
    cfg = _compose(["+design=first_pass"])
    first, steps, texts = compose_instructions(cfg)
    assert steps == () and set(texts) == {"first_pass"}
    assert list(cfg.instructions.first_pass) == ["user_log", "calibration", "answer_format"]
    assert cfg.rules.order == [] and cfg.retriever.name == "hybrid" and cfg.memory.name == "user_log"


@pytest.mark.parametrize(
    ("design", "order", "new_rule", "question"),
    [
        ("pipeline_counting", ["advice", "counting", "decline", "decline", "recall"], "counting",
         "How many plants did I buy in total?"),
        ("pipeline_current_state", ["advice", "current_state", "decline", "decline", "recall"], "current_state",
         "Where do I currently work?"),
    ],
)
def test_variant_designs_are_config_alone(design, order, new_rule, question):
    cfg = _compose([f"+design={design}"])
    _, steps, texts = compose_instructions(cfg)
    assert [step.rule.name for step in steps] == order
    rule = next(step.rule for step in steps if step.rule.name == new_rule)
    assert rule.fires(question, None) and not rule.fires("What colour is my car?", None)
    assert new_rule in rule.paragraphs and new_rule in texts
    assert cfg.design_name == design
    if new_rule == "counting":
        assert not rule.fires("How many days ago did I buy the lamp?", None)  # date arithmetic is excluded


def test_the_arbiter_design_adds_an_arbiter_stage_to_the_pipeline():
    cfg = _compose(["+design=pipeline_arbiter"])
    _, steps, _ = compose_instructions(cfg)
    assert [step.rule.name for step in steps] == ["advice", "decline", "decline", "recall"]
    assert cfg.arbiter.view == "first_pass" and "arbiter" in cfg.arbiter.paragraphs
    assert all(name in cfg.instructions.paragraphs for name in cfg.arbiter.paragraphs)


def test_every_design_composes_its_rules():
    for path in sorted((CONF / "design").glob("*.yaml")):
        compose_instructions(_compose([f"+design={path.stem}"]))
