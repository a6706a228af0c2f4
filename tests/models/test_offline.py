"""The offline stand-ins: the extractive reader and the lexical judge, directly and through the gateway."""

from __future__ import annotations

import asyncio
import json

import pytest
from omegaconf import OmegaConf

import lme
import lme.config.resolvers  # noqa: F401  (${lme_text:...}: the templates are text files)
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import (
    DECLINE_ANSWER,
    JUDGE_MODEL,
    READER_MODEL,
    content_words,
    extractive_answer,
    lexical_verdict,
)
from shared_data import TEMPLATES, need

OFFLINE_CONF = lme.CONF_DIR / "judge/offline.yaml"

MEMORY = "\n\n".join(
    [
        "[s0000:0] 2023-05-20 (Saturday) 02:21 user: I went hiking with my sister near Boulder.",
        "[s0001:2] 2023-05-30 (Tuesday) 14:02 user: I finally bought a red bike last week. It was on sale.",
        "[s0001:3] 2023-05-30 (Tuesday) 14:02 assistant: Congratulations! Cycling is a great way to commute.",
        "[s0002:0] 2023-06-02 (Friday) 09:15 user: My manager moved our weekly meeting to Thursday.",
    ]
)


# -- extractive reader -----------------------------------------------------------------------------


def test_picks_the_sentence_sharing_most_content_words():
    answer = extractive_answer("What color is the bike I bought?", MEMORY)
    assert answer == "I finally bought a red bike last week."


def test_strips_the_block_prefix():
    answer = extractive_answer("When is the weekly meeting with my manager?", MEMORY)
    assert answer == "My manager moved our weekly meeting to Thursday."
    assert not answer.startswith("[") and "user:" not in answer and "2023" not in answer


def test_strips_an_assistant_block_prefix():
    answer = extractive_answer("Is cycling a great way to commute?", MEMORY)
    assert answer == "Cycling is a great way to commute."


def test_declines_when_nothing_overlaps():
    assert extractive_answer("What is the name of my dog?", MEMORY) == DECLINE_ANSWER
    assert extractive_answer("What is it?", MEMORY) == DECLINE_ANSWER  # no content word at all
    assert extractive_answer("What color is the bike I bought?", "") == DECLINE_ANSWER


def test_needs_two_shared_words_for_a_longer_question():
    # three content words (sister, favourite, restaurant); only "sister" is in the memory
    assert extractive_answer("Which restaurant does my sister like as her favourite?", MEMORY) == DECLINE_ANSWER
    # one or two content words: one shared word is enough
    assert extractive_answer("Where did my sister go?", MEMORY) == "I went hiking with my sister near Boulder."


def test_content_words_drop_stopwords_and_stem():
    assert content_words("What are the bikes I was riding?") == {"bik", "rid"}


# -- lexical judge on filled templates -------------------------------------------------------------


def _real_templates() -> dict[str, str]:
    return json.loads(need(TEMPLATES).read_text(encoding="utf-8"))["templates"]


def _offline_templates() -> dict[str, str]:
    return dict(OmegaConf.to_container(OmegaConf.load(OFFLINE_CONF).templates, resolve=True))


@pytest.fixture(params=["longmemeval", "offline"])
def templates(request) -> dict[str, str]:
    return _real_templates() if request.param == "longmemeval" else _offline_templates()


def verdict(templates, key, question, reference, response):
    return lexical_verdict(templates[key].format(question, reference, response))


@pytest.mark.parametrize("key", ["ssu_ssa_multisession", "temporal_reasoning", "knowledge_update"])
def test_factual_templates(templates, key):
    question = "What color is the bike I bought?"
    assert verdict(templates, key, question, "red", "You bought a red bike last week.") == "yes"
    assert verdict(templates, key, question, "red", "Your new bike is blue.") == "no"
    assert verdict(templates, key, question, "red", DECLINE_ANSWER) == "no"
    assert verdict(templates, key, "How many bikes do I own?", "3", "You own 3 bikes.") == "yes"
    assert verdict(templates, key, "How many bikes do I own?", "3", "You own 2 bikes.") == "no"


def test_multi_word_answer_by_overlap(templates):
    key = "ssu_ssa_multisession"
    question = "Where did I go hiking?"
    reference = "Boulder, with my sister"
    assert verdict(templates, key, question, reference, "You went hiking near Boulder with your sister.") == "yes"
    assert verdict(templates, key, question, reference, "You went hiking in Aspen alone.") == "no"


def test_abstention_template(templates):
    question = "What is the name of my dog?"
    explanation = "The user never mentioned having a dog."
    assert verdict(templates, "abstention", question, explanation, DECLINE_ANSWER) == "yes"
    assert verdict(templates, "abstention", question, explanation, "I can't determine that from our chats.") == "yes"
    assert verdict(templates, "abstention", question, explanation, "Your dog is called Rex.") == "no"


def test_preference_rubric(templates):
    question = "Can you suggest some weekend activities?"
    rubric = (
        "The user would prefer suggestions of beginner hiking trails near Boulder, "
        "which they enjoyed with their sister."
    )
    good = "Since you enjoyed hiking near Boulder with your sister, try these beginner trails: Mesa and Chautauqua."
    bad = "Here are some popular cooking classes and museum exhibits this weekend."
    assert verdict(templates, "single_session_preference", question, rubric, good) == "yes"
    assert verdict(templates, "single_session_preference", question, rubric, bad) == "no"


def test_offline_templates_cover_every_key_and_fill_in_order():
    from lme.judge import TEMPLATE_KEYS

    offline = _offline_templates()
    assert set(offline) == set(TEMPLATE_KEYS)
    for text in offline.values():
        filled = text.format("QQ", "AA", "RR")
        assert filled.index("QQ") < filled.index("AA") < filled.index("RR")


def test_prompt_without_fields_is_no():
    assert lexical_verdict("Is this right? yes") == "no"


# -- through the gateway ---------------------------------------------------------------------------


def _complete(gateway, spec, messages, seed):
    return asyncio.run(gateway.complete(spec, messages, seed=seed))


@pytest.mark.usefixtures("warm_litellm")
def test_offline_reader_through_gateway(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite")
    gateway = Gateway(cache)
    spec = ModelSpec(model=READER_MODEL)
    question = "What color is the bike I bought?"
    payload = {"question": question, "question_date": "2023/06/30 (Fri) 10:00", "memory": MEMORY}
    messages = [{"role": "system", "content": "Answer from memory."}, {"role": "user", "content": json.dumps(payload)}]
    result = _complete(gateway, spec, messages, seed=1)
    assert result.ok and result.text == "I finally bought a red bike last week."
    assert result.cost_usd == 0.0
    assert result.input_tokens > 0 and result.output_tokens > 0
    again = _complete(gateway, spec, messages, seed=1)
    assert again.cached and again.text == result.text
    other_seed = _complete(gateway, spec, messages, seed=2)
    assert not other_seed.cached and other_seed.key != result.key
    cache.close()


@pytest.mark.usefixtures("warm_litellm")
def test_offline_reader_declines_through_gateway():
    payload = {"question": "What is the name of my dog?", "memory": MEMORY}
    result = _complete(Gateway(), ModelSpec(model=READER_MODEL), [{"role": "user", "content": json.dumps(payload)}], 1)
    assert result.text == DECLINE_ANSWER and result.cost_usd == 0.0


@pytest.mark.usefixtures("warm_litellm")
def test_offline_judge_through_gateway():
    prompt = _offline_templates()["ssu_ssa_multisession"].format("What color is my bike?", "red", "It is red.")
    spec = ModelSpec(model=JUDGE_MODEL, params={"temperature": 0, "max_tokens": 10})
    result = _complete(Gateway(), spec, [{"role": "user", "content": prompt}], None)
    assert result.ok and result.text == "yes"
    assert result.cost_usd == 0.0 and result.input_tokens > 0 and result.output_tokens > 0
