"""Paragraphs that describe a memory, checked against the memory a step reads (real classes)."""

from __future__ import annotations

from omegaconf import OmegaConf

import lme
from lme.memory.paragraphs import LME_BUILDERS, describing, paragraph_mismatch
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.memory.sessions import WholeSessionView
from lme.memory.user_log import UserLogMemoryBuilder

RETRIEVED = "lme.memory.retrieved.RetrievedMemoryBuilder"
USER_LOG = "lme.memory.user_log.UserLogMemoryBuilder"
SESSIONS = "lme.memory.sessions.WholeSessionView"


def test_builders_declare_their_paragraphs():
    assert RetrievedMemoryBuilder.describes == ()
    assert UserLogMemoryBuilder.describes == ("user_log",)
    assert WholeSessionView.describes == ("whole_sessions",)
    assert describing(RETRIEVED) == () and describing(USER_LOG) == ("user_log",)
    assert describing(SESSIONS) == ("whole_sessions",)


def test_lme_builders_are_the_shipped_memory_and_view_targets():
    shipped = {OmegaConf.load(path)["_target_"] for group in ("memory", "view")
               for path in (lme.CONF_DIR / group).glob("*.yaml")}
    assert set(LME_BUILDERS) == shipped == {RETRIEVED, USER_LOG, SESSIONS, "lme.memory.full_history.FullHistoryMemoryBuilder",
                                            "lme.memory.model_built.ModelBuiltMemoryBuilder",
                                            "lme.memory.systems.base.SystemMemoryBuilder"}


def test_an_unimportable_or_undeclaring_target_declares_nothing():
    assert describing("lme.memory.no_such_module.Builder") == ()
    assert describing("lme.memory.user_log.NoSuchBuilder") == ()
    assert describing("NotDotted") == () and describing("") == ()
    assert describing("lme.memory.base.Memory") == ()  # a class without `describes`


def test_user_log_paragraph_over_retrieved_memory_is_a_mismatch():
    sentence = paragraph_mismatch("first_pass", "retrieved", RETRIEVED,
                                  ["user_log", "calibration", "answer_format"], LME_BUILDERS)
    assert sentence == ('step first_pass reads memory "retrieved" but its instruction lists paragraph "user_log", '
                        f"which describes {USER_LOG}; drop the paragraph or read that memory.")


def test_whole_sessions_paragraph_over_user_log_memory_is_a_mismatch():
    sentence = paragraph_mismatch("decline", "first_pass", USER_LOG,
                                  ["calibration", "answer_format", "whole_sessions"], LME_BUILDERS)
    assert sentence is not None and sentence.count(";") == 1 and sentence.endswith(".")
    assert sentence.startswith('step decline reads memory "first_pass"')
    assert '"whole_sessions"' in sentence and SESSIONS in sentence


def test_shipped_pipeline_combination_fits():
    assert paragraph_mismatch("first_pass", "user_log", USER_LOG,
                              ["user_log", "calibration", "answer_format"], LME_BUILDERS) is None
    for rule, paragraphs in [("decline", ["calibration", "answer_format", "whole_sessions"]),
                             ("recall", ["calibration", "answer_format", "whole_sessions", "recall"])]:
        assert paragraph_mismatch(rule, "whole_sessions", SESSIONS, paragraphs, LME_BUILDERS) is None
    assert paragraph_mismatch("advice", "first_pass", USER_LOG,
                              ["user_log", "calibration", "answer_format", "advice"], LME_BUILDERS) is None


def test_paragraphs_no_builder_declares_never_mismatch():
    for target in LME_BUILDERS:
        assert paragraph_mismatch("arbiter", "any", target, ["calibration", "answer_format", "counting"],
                                  LME_BUILDERS) is None
    # nor when no other builder is known
    assert paragraph_mismatch("first_pass", "retrieved", RETRIEVED, ["user_log"], []) is None


def test_the_steps_own_builder_in_the_other_targets_is_not_an_other():
    assert paragraph_mismatch("first_pass", "user_log", USER_LOG, ["user_log"], [USER_LOG, USER_LOG]) is None
