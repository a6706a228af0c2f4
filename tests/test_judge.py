"""The LongMemEval judge protocol: template choice, pinned templates, prompt, verdict, and the call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from loopback import LoopbackServer
from omegaconf import OmegaConf

import lme
from lme.data.load import parse_question
from lme.util.errors import LmeError
from lme.judge import (
    LONGMEMEVAL_TEMPLATE_SHA256,
    TEMPLATE_KEYS,
    build_judge_prompt,
    describe_judge,
    load_templates,
    make_judge,
    parse_verdict,
    recorded_judge,
    sha256_text,
    template_key,
)
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import READER_MODEL
from shared_data import TEMPLATES as TEMPLATES_FILE
from shared_data import available, needs

JUDGE_CONF = lme.CONF_DIR / "judge/longmemeval.yaml"
KEY_ENV = "LME_TEST_KEY"

needs_templates = needs(TEMPLATES_FILE)


def make_question(
    question_id="q1", question_type="single-session-user", question="What color is my bike?", answer="red"
):
    record = {
        "question_id": question_id,
        "question_type": question_type,
        "question": question,
        "answer": answer,
        "question_date": "2023/06/30 (Fri) 10:00",
        "haystack_dates": ["2023/05/20 (Sat) 02:21"],
        "haystack_session_ids": ["filler_0"],
        "haystack_sessions": [[{"role": "user", "content": "I bought a red bike."}]],
        "answer_session_ids": [],
    }
    return parse_question(record, Path("test.json"), 0)


PLAIN_TEMPLATES = {key: f"[{key}] Q={{}} A={{}} H={{}}" for key in TEMPLATE_KEYS}


# -- template choice -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question_type", "expected"),
    [
        ("single-session-user", "ssu_ssa_multisession"),
        ("single-session-assistant", "ssu_ssa_multisession"),
        ("multi-session", "ssu_ssa_multisession"),
        ("temporal-reasoning", "temporal_reasoning"),
        ("knowledge-update", "knowledge_update"),
        ("single-session-preference", "single_session_preference"),
    ],
)
def test_template_key_by_type(question_type, expected):
    assert template_key("gpt4_2655b836", question_type) == expected


@pytest.mark.parametrize("question_type", ["temporal-reasoning", "multi-session", "knowledge-update"])
def test_abstention_mark_wins_over_type(question_type):
    assert template_key("gpt4_2655b836_abs", question_type) == "abstention"


def test_unknown_type_is_a_readable_error():
    with pytest.raises(LmeError, match="q9.*open-book"):
        template_key("q9", "open-book")


def test_locomo_categories_take_the_nearest_longmemeval_template():
    from datetime import datetime

    from lme.data.benchmark import judge_template_key
    from lme.data.records import Question

    def question(category: str, abstains: bool = False) -> Question:
        return Question("conv-26-q000", category, "q?", "a", datetime(2023, 5, 8), "2023/05/08 (Mon) 13:56", (), (),
                        abstains=abstains, benchmark="locomo")

    assert [judge_template_key(question(t)) for t in ("single-hop", "multi-hop", "open-domain", "temporal")] == [
        "ssu_ssa_multisession", "ssu_ssa_multisession", "ssu_ssa_multisession", "temporal_reasoning"]
    assert judge_template_key(question("adversarial", abstains=True)) == "abstention"
    with pytest.raises(LmeError, match="q9.*single-hop"):  # LongMemEval's own key function knows only its types
        template_key("q9", "single-hop")


# -- pinned templates ------------------------------------------------------------------------------


@needs_templates
def test_shared_templates_file_verifies():
    templates = load_templates(TEMPLATES_FILE)
    assert tuple(templates) == TEMPLATE_KEYS
    shipped = json.loads(TEMPLATES_FILE.read_text(encoding="utf-8"))["sha256"]
    for key, text in templates.items():
        assert sha256_text(text) == LONGMEMEVAL_TEMPLATE_SHA256[key] == shipped[key]


@needs_templates
@pytest.mark.parametrize("altered", ["temporal_reasoning", "abstention"])
def test_altered_template_is_refused_naming_its_key(tmp_path, altered):
    raw = json.loads(TEMPLATES_FILE.read_text(encoding="utf-8"))
    raw["templates"][altered] = raw["templates"][altered].replace("yes or no", "yes or no ", 1)
    copy = tmp_path / "judge_templates.json"
    copy.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(LmeError) as error:
        load_templates(copy)
    assert repr(altered) in str(error.value)
    assert str(copy) in str(error.value)
    others = [key for key in TEMPLATE_KEYS if key != altered]
    assert not any(repr(key) in str(error.value) for key in others)


@needs_templates
def test_template_missing_from_file_is_refused(tmp_path):
    raw = json.loads(TEMPLATES_FILE.read_text(encoding="utf-8"))
    del raw["templates"]["knowledge_update"]
    copy = tmp_path / "judge_templates.json"
    copy.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(LmeError, match="'knowledge_update'"):
        load_templates(copy)


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "judge_templates.json"
    with pytest.raises(LmeError) as error:
        load_templates(path)
    assert str(path) in str(error.value)


def test_broken_file_is_a_readable_error(tmp_path):
    path = tmp_path / "judge_templates.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(LmeError, match="not valid JSON"):
        load_templates(path)
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(LmeError, match="no 'templates'"):
        load_templates(path)


def test_make_judge_refuses_an_official_judge_without_the_file():
    with pytest.raises(LmeError, match="templates_path"):
        make_judge("longmemeval", official=True, model=ModelSpec(model="gpt-4o-2024-08-06"))


def test_make_judge_refuses_incomplete_inline_templates():
    partial = {key: PLAIN_TEMPLATES[key] for key in TEMPLATE_KEYS[:3]}
    with pytest.raises(LmeError, match="knowledge_update"):
        make_judge("offline", official=False, model=ModelSpec(model="lme-offline/lexical-judge"), templates=partial)


# -- prompt and verdict ----------------------------------------------------------------------------


def test_prompt_fills_question_answer_hypothesis_in_order():
    question = make_question(question_type="temporal-reasoning", question="How many days ago?", answer=3)
    assert question.answer == "3"  # an integer answer becomes text
    prompt = build_judge_prompt(PLAIN_TEMPLATES, question, "three days")
    assert prompt == "[temporal_reasoning] Q=How many days ago? A=3 H=three days"


def test_prompt_uses_abstention_template_for_abs_ids():
    question = make_question(question_id="q1_abs", question_type="multi-session", answer="You never said.")
    assert build_judge_prompt(PLAIN_TEMPLATES, question, "I don't know").startswith("[abstention]")


@needs_templates
def test_prompt_from_real_template():
    templates = load_templates(TEMPLATES_FILE)
    question = make_question(question_type="knowledge-update", question="How many bikes do I own?", answer=3)
    prompt = build_judge_prompt(templates, question, "You own three bikes.")
    assert prompt == templates["knowledge_update"].format("How many bikes do I own?", "3", "You own three bikes.")
    filled = "\n\nQuestion: How many bikes do I own?\n\nCorrect Answer: 3\n\nModel Response: You own three bikes.\n\n"
    assert filled in prompt


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Yes.", True),
        (" yes", True),
        ("YES", True),
        ("no", False),
        ("No.", False),
        ("No, yes is wrong", True),  # the protocol's substring rule, kept as is
        ("", False),
        ("   ", False),
    ],
)
def test_parse_verdict(reply, expected):
    assert parse_verdict(reply) is expected


# -- the judge call --------------------------------------------------------------------------------


def official_judge(server: LoopbackServer):
    """The configured LongMemEval judge's call settings, pointed at the loopback server."""
    conf = OmegaConf.load(JUDGE_CONF).model
    spec = ModelSpec(
        model="openai/" + conf.model,
        params=OmegaConf.to_container(conf.params),
        api_base=server.base_url,
        api_key_env=KEY_ENV,
        timeout_s=5,
        max_attempts=2,
        backoff_base_s=0.01,
    )
    if available(TEMPLATES_FILE):
        return make_judge("longmemeval", official=True, model=spec, templates_path=str(TEMPLATES_FILE))
    return make_judge("loopback", official=False, model=spec, templates=PLAIN_TEMPLATES)


@pytest.mark.parametrize("answer", [None, "", "   \n"])
def test_missing_answer_is_wrong_and_costs_no_call(answer):
    with LoopbackServer(reply="yes") as server:
        verdict = asyncio.run(official_judge(server).judge(Gateway(), make_question(), answer))
        assert server.requests == []
    assert verdict.correct is False and verdict.call is None and verdict.reply is None
    assert "missing" in verdict.note


@pytest.mark.usefixtures("warm_litellm", "test_key")
@pytest.mark.parametrize(("reply", "expected"), [("Yes.", True), ("no", False), ("No, yes is wrong", True)])
def test_judge_call_follows_the_protocol(reply, expected):
    question = make_question()
    with LoopbackServer(reply=reply) as server:
        judge = official_judge(server)
        verdict = asyncio.run(judge.judge(Gateway(), question, "Your bike is red."))
        (request,) = server.requests
    body = request.body
    assert body["model"] == "gpt-4o-2024-08-06"
    assert body["messages"] == [
        {"role": "user", "content": build_judge_prompt(judge.templates, question, "Your bike is red.")}
    ]
    assert body["temperature"] == 0
    assert body["max_tokens"] == 10
    assert body.get("n", 1) == 1
    assert verdict.correct is expected and verdict.reply == reply
    assert verdict.call is not None and verdict.call.ok


@pytest.mark.usefixtures("warm_litellm", "test_key")
def test_failed_judge_call_counts_as_wrong():
    with LoopbackServer(reply="yes", faults=[("500",)] * 6) as server:
        verdict = asyncio.run(official_judge(server).judge(Gateway(), make_question(), "red"))
    assert verdict.correct is False and verdict.reply is None
    assert verdict.call is not None and not verdict.call.ok
    assert "judge call failed" in verdict.note and verdict.error and "InternalServerError" in verdict.error


@pytest.mark.usefixtures("warm_litellm", "test_key")
@pytest.mark.parametrize("fault", ["empty_content", "null_content"])
def test_an_empty_judge_reply_is_a_missing_verdict_not_a_no(fault):
    with LoopbackServer(reply="", faults=[(fault,)] * 6) as server:
        verdict = asyncio.run(official_judge(server).judge(Gateway(), make_question(), "red"))
    assert verdict.correct is False and verdict.reply is None
    assert verdict.error is not None and ("EmptyVerdict" in verdict.error or "MalformedReply" in verdict.error)


@pytest.mark.usefixtures("warm_litellm", "test_key")
def test_same_prompt_under_different_reader_seeds_is_judged_once(tmp_path):
    """Reader answers are keyed by seed; the judge is keyed by prompt only, so equal answers share a verdict."""
    cache = CallCache(tmp_path / "calls.sqlite")
    gateway = Gateway(cache)
    question = make_question(question="What color is the bike I bought?")
    reader = ModelSpec(model=READER_MODEL)
    memory = "[s0000:0] 2023-05-20 (Saturday) 02:21 user: I bought a red bike."
    reader_messages = [{"role": "user", "content": json.dumps({"question": question.question, "memory": memory})}]

    async def run_seed(judge, seed):
        answer = await gateway.complete(reader, reader_messages, seed=seed)
        return answer, await judge.judge(gateway, question, answer.text)

    with LoopbackServer(reply="yes") as server:
        judge = official_judge(server)
        (answer1, verdict1), (answer2, verdict2) = (asyncio.run(run_seed(judge, seed)) for seed in (1, 2))
        assert len(server.requests) == 1
    assert answer1.key != answer2.key and not answer2.cached  # two seeds never share a reader answer
    assert answer1.text == answer2.text == "I bought a red bike."
    assert verdict1.correct and verdict2.correct
    assert not verdict1.call.cached and verdict2.call.cached
    assert verdict1.call.key == verdict2.call.key
    cache.close()


# -- which judge, in words -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "official", "model", "offline", "kind", "text"), [
    ("longmemeval", True, "gpt-4o-2024-08-06", False, "longmemeval", "the LongMemEval judge"),
    ("longmemeval", True, "openai/gpt-4o-2024-08-06", False, "longmemeval", "the LongMemEval judge"),
    ("longmemeval-study", True, "gpt-4o", False, "study",
     "LongMemEval's templates on the gpt-4o alias: the reference study's protocol"),
    # LongMemEval's templates on any other model, the official file's name kept or not
    ("longmemeval", True, "gpt-4o-mini", False, "templates",
     "LongMemEval's templates judged by gpt-4o-mini, not the official judge model (gpt-4o-2024-08-06)"),
    ("longmemeval-study", True, "anthropic/claude-haiku-4-5-20251001", False, "templates",
     "LongMemEval's templates judged by anthropic/claude-haiku-4-5-20251001, not the official judge model "
     "(gpt-4o-2024-08-06)"),
    ("longmemeval-templates hosted_vllm/gpt-4o-2024-08-06", True, "hosted_vllm/gpt-4o-2024-08-06", False, "templates",
     "LongMemEval's templates judged by hosted_vllm/gpt-4o-2024-08-06, not the official judge model "
     "(gpt-4o-2024-08-06)"),  # a local server's model of that name is not OpenAI's
    ("offline-lexical-judge", False, "lme-offline/lexical-judge", True, "stand-in",
     "an offline stand-in, NOT the LongMemEval judge"),
    ("mine", False, "openai/gpt-4o-mini", False, "own", "its own templates judged by openai/gpt-4o-mini, NOT the "
     "LongMemEval judge"),
])
def test_describe_judge(name, official, model, offline, kind, text):
    label = describe_judge(name, official, model, offline)
    assert (label.name, label.model, label.kind, label.text) == (name, model, kind, text)
    assert label.official == (kind in ("longmemeval", "study"))


def test_a_recorded_judge_is_described_from_its_tags_and_model_param():
    assert recorded_judge("offline-lexical-judge", False, "lme-offline/lexical-judge").kind == "stand-in"
    assert recorded_judge("longmemeval", True, "gpt-4o-mini").kind == "templates"
    # a run that logged no judge.model: its templates flag alone, as before models were told apart
    assert recorded_judge("longmemeval", True, None).kind == "longmemeval"
    assert recorded_judge("offline-lexical-judge", False, None).kind == "stand-in"


def test_a_built_judge_is_labelled_by_its_model():
    spec = ModelSpec(model="openai/gpt-4o-mini-2024-07-18", params={"temperature": 0, "max_tokens": 10})
    judge = make_judge("longmemeval-templates", official=False, model=spec, templates=PLAIN_TEMPLATES)
    assert judge.label.kind == "own"
    offline = make_judge("offline", official=False, model=ModelSpec(model="lme-offline/lexical-judge"),
                         templates=PLAIN_TEMPLATES)
    assert offline.label.text == "an offline stand-in, NOT the LongMemEval judge"
