"""The offline reader's seed: at a temperature above 0 (the `offline` reader's config) each seed draws among the
memory sentences that match the question, the same way every time; the gateway sends the seed to the offline
stand-ins only."""

from __future__ import annotations

import asyncio
import json

import pytest
from omegaconf import OmegaConf

import lme
import lme.config.resolvers  # noqa: F401  (${lme_text:...}: the templates are text files)
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import DECLINE_ANSWER, JUDGE_MODEL, READER_MODEL, extractive_answer


def _complete(gateway, spec, messages, seed):
    return asyncio.run(gateway.complete(spec, messages, seed=seed))


def _offline_templates() -> dict[str, str]:
    return dict(OmegaConf.to_container(OmegaConf.load(lme.CONF_DIR / "judge/offline.yaml").templates, resolve=True))

# -- the reader's seed: a temperature above 0 draws among the matching sentences -------------------------

CHOICES = "\n\n".join(
    [
        "[s0000:0] user: I bought a red bike last week.",
        "[s0000:2] user: The bike shop near my office sells a blue bike too.",
        "[s0001:0] user: My sister bought a bike in May.",
        "[s0001:2] user: I painted the old bike green before I sold it.",
    ]
)
BIKE = "What color is the bike I bought?"


def test_a_seed_draws_among_the_matching_sentences_the_same_way_every_time():
    best = extractive_answer(BIKE, CHOICES)
    assert best == "I bought a red bike last week."  # the first of the best (bike, bought: 2 words)
    drawn = {seed: extractive_answer(BIKE, CHOICES, temperature=1.0, seed=seed) for seed in range(40)}
    assert set(drawn.values()) > {best}  # seeds differ, as a sampled model's answers do
    assert set(drawn.values()) <= {  # only sentences that share enough words, never the decline
        "I bought a red bike last week.", "The bike shop near my office sells a blue bike too.",
        "My sister bought a bike in May.", "I painted the old bike green before I sold it."}
    assert list(drawn.values()).count(best) > 40 / 4  # the best match is drawn most often
    assert drawn == {seed: extractive_answer(BIKE, CHOICES, temperature=1.0, seed=seed) for seed in range(40)}
    # temperature 0, or no seed: every seed gives the best match
    assert {extractive_answer(BIKE, CHOICES, temperature=0.0, seed=seed) for seed in range(40)} == {best}
    assert extractive_answer(BIKE, CHOICES, temperature=1.0, seed=None) == best
    # nothing shares enough words: a decline whatever the seed
    assert extractive_answer("What is the name of my dog?", CHOICES, temperature=1.0, seed=3) == DECLINE_ANSWER


def test_the_draw_depends_on_the_question_too():
    other = "Which color was the bike I bought?"  # the same content words, another question text
    first = [extractive_answer(BIKE, CHOICES, temperature=1.0, seed=seed) for seed in range(40)]
    second = [extractive_answer(other, CHOICES, temperature=1.0, seed=seed) for seed in range(40)]
    assert first != second


@pytest.mark.usefixtures("warm_litellm")
def test_the_gateway_sends_the_seed_to_the_offline_reader_and_not_to_a_provider(tmp_path, monkeypatch):
    from loopback import LoopbackServer

    spec = ModelSpec(model=READER_MODEL, params={"temperature": 1, "max_tokens": 512})
    payload = {"question": BIKE, "question_date": "2023/06/30 (Fri) 10:00", "memory": CHOICES}
    messages = [{"role": "user", "content": json.dumps(payload)}]
    cache = CallCache(tmp_path / "calls.sqlite")
    answers = {seed: _complete(Gateway(cache), spec, messages, seed).text for seed in range(12)}
    cache.close()
    assert answers == {seed: extractive_answer(BIKE, CHOICES, temperature=1.0, seed=seed) for seed in range(12)}
    assert len(set(answers.values())) > 1
    fresh = {seed: _complete(Gateway(), spec, messages, seed).text for seed in range(12)}  # no cache: drawn again
    assert fresh == answers
    monkeypatch.setenv("LME_TEST_KEY", "sk-test")
    with LoopbackServer(reply="red") as server:
        provider = ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, api_key_env="LME_TEST_KEY")
        assert _complete(Gateway(), provider, messages, 7).text == "red"
        (request,) = server.completion_requests
    assert "seed" not in request.body  # the seed keys a provider's cache entry only


def test_the_configured_offline_reader_answers_differently_per_seed_on_the_sample(tmp_path):
    """Seeds 1, 2 and 3 of the `offline` reader as configured, on the bundled sample: each seed gives the same
    answers again with an empty cache; the seeds differ on some questions, and in which they get right."""
    from lme.answer.reader import Reader
    from lme.cli import compose_config
    from lme.data.load import load_questions
    from lme.data.sample import SAMPLE_PATH
    from lme.judge import make_judge
    from lme.memory.retrieved import RetrievedMemoryBuilder
    from lme.retrieval.fts5 import FTS5Retriever
    from lme.answer.run import Journal, run_questions
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(compose_config([]).reader.model, resolve=True)
    node.pop("_target_")
    reader = Reader(name="offline", model=ModelSpec(**node))
    assert reader.model.params["temperature"] > 0
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=_offline_templates())
    questions = load_questions(SAMPLE_PATH)
    builder = RetrievedMemoryBuilder(FTS5Retriever())

    def run(seed: int, name: str) -> dict[str, tuple[str | None, bool]]:
        cache = CallCache(tmp_path / f"{name}.sqlite")
        outcomes = asyncio.run(run_questions(questions, builder, reader, "Answer.", judge, Gateway(cache), seed,
                                             Journal(tmp_path / f"{name}.jsonl"), concurrency=8))
        cache.close()
        return {o.question_id: (o.answer, o.correct) for o in outcomes}

    runs = {seed: run(seed, f"seed{seed}") for seed in (1, 2, 3)}
    assert run(2, "seed2-again") == runs[2]
    differ = [qid for qid in runs[1] if len({runs[seed][qid][0] for seed in runs}) > 1]
    assert len(differ) >= 3, differ
    correct_differs = [qid for qid in runs[1] if len({runs[seed][qid][1] for seed in runs}) > 1]
    assert correct_differs, "the seeds differ in answers but never in which questions they get right"
