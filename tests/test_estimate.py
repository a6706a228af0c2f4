"""`lme estimate`: checked against the requests a real run then sends to the loopback server.

The estimate builds every memory and counts the reader's input tokens; the
run (the same config, `lme.run.run_questions` through the gateway and litellm's
HTTP path) sends the requests; the server records them. The first pass must
match exactly, re-reads must fall in the printed range, and after the run the
estimate must see the first pass as cached (free).
"""

from __future__ import annotations

import asyncio

import pytest
from loopback import LoopbackServer

from lme.cli import compose_config
from lme.design import design_from_config
from lme.cli.estimate import main
from lme.compose import expand_sweeps
from lme.estimate import estimate_design, format_estimate
from lme.models.pricing import count_input_tokens

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

PRICE_IN, PRICE_OUT = 1e-6, 4e-6


def overrides(tmp_path, base_url: str) -> list[str]:
    return [
        f"cache_dir={tmp_path / 'cache'}", "limit=8", "rules=pipeline", "instructions=pipeline", "memory=user_log",
        "reader.model.model=openai/gpt-4o-mini", f"++reader.model.api_base={base_url}",
        "++reader.model.api_key_env=LME_TEST_KEY", "reader.model.max_attempts=2",
        f"++reader.model.input_cost_per_token={PRICE_IN}", f"++reader.model.output_cost_per_token={PRICE_OUT}",
    ]


def run(cfg, tmp_path):
    from lme.data.dataset import load_dataset
    from lme.models.cache import CallCache
    from lme.models.gateway import Gateway
    from lme.run import Journal, run_questions

    design = design_from_config(cfg)
    _, questions = load_dataset(design.dataset)
    retriever = design.build_retriever()
    instruction, rules = design.instructions.first_pass, design.instructions.rules
    cache = CallCache(tmp_path / "cache" / "calls.sqlite")
    try:
        outcomes = asyncio.run(run_questions(
            questions, design.build_memory(retriever), design.reader.build(), instruction, design.judge.build(),
            Gateway(cache), design.seed, Journal(tmp_path / "outcomes.jsonl"), concurrency=4, rules=rules,
            views=design.build_views(retriever),
        ))
    finally:
        cache.close()
    return instruction, outcomes


def test_first_pass_is_exact_and_rereads_fall_in_the_range(tmp_path):
    with LoopbackServer(reply="offline") as server:
        cfg = compose_config(overrides(tmp_path, server.base_url))
        before = estimate_design(design_from_config(cfg), [0])
        instruction, outcomes = run(cfg, tmp_path)
        requests = [r.body for r in server.completion_requests]
        after = estimate_design(design_from_config(cfg), [0, 5])
    first_pass = [body for body in requests if body["messages"][0]["content"] == instruction]
    rereads = [body for body in requests if body["messages"][0]["content"] != instruction]
    (seed,) = before.seeds
    assert seed.first_pass_calls == len(first_pass) == len(outcomes) == 8
    sent_tokens = [count_input_tokens("openai/gpt-4o-mini", body["messages"]) for body in first_pass]
    assert sorted(before.input_tokens) == sorted(sent_tokens)
    assert seed.first_pass_input_tokens == sum(sent_tokens)
    assert seed.first_pass_input_dollars == pytest.approx(sum(sent_tokens) * PRICE_IN)
    assert seed.first_pass_max_dollars == pytest.approx(sum(sent_tokens) * PRICE_IN + 8 * 512 * PRICE_OUT)
    assert seed.reread_calls_certain <= len(rereads) <= seed.reread_calls_certain + seed.reread_calls_possible
    assert before.rules_possible == {"decline": 2}
    # the requests' input dollars (counted as the estimate counts; the loopback reports words, not tokens)
    sent_dollars = sum(count_input_tokens("openai/gpt-4o-mini", body["messages"]) for body in requests) * PRICE_IN
    assert seed.reader_dollars_low <= sent_dollars <= seed.reader_dollars_high
    # after the run: the first pass of seed 0 is in the cache (free); seed 5 is not
    cached, fresh = after.seeds
    assert (cached.first_pass_cached, cached.first_pass_input_tokens, cached.first_pass_input_dollars) == (8, 0, 0)
    assert fresh.first_pass_cached == 0 and fresh.first_pass_input_tokens == sum(sent_tokens)
    assert cached.reread_cached == cached.reread_calls_certain  # the question-text re-reads were all made


def test_offline_models_cost_nothing_and_the_command_prints_every_seed(tmp_path, capsys):
    assert main([f"cache_dir={tmp_path}", "limit=4", "seed=1,2", "-m"]) == 0
    out = capsys.readouterr().out
    assert "design default: 4 questions (dataset sample)" in out
    assert "lme-offline/extractive-reader (free)" in out
    table = [line.split() for line in out.splitlines() if line.startswith(("  1 ", "  2 "))]
    assert [row[0] for row in table] == ["1", "2"]
    assert all("$0.0000" in " ".join(row) for row in table)
    assert out.rstrip().endswith("no model was called.")


def test_sweeps_expand_like_hydra():
    assert expand_sweeps(["+design=bm25", "seed=1,2"]) == [["+design=bm25", "seed=1"], ["+design=bm25", "seed=2"]]
    assert expand_sweeps([]) == [[]]


def test_unknown_arguments_are_one_sentence():
    from lme.errors import LmeError

    with pytest.raises(LmeError, match="estimate: unknown argument '--fast'"):
        main(["--fast"])


def test_format_marks_unpriced_models():
    from lme.estimate import DesignEstimate, SeedEstimate

    seed = SeedEstimate(1, 2, 0, 10, 0, 0, 0, None, None, None, None, 2, None, None)
    text = format_estimate(DesignEstimate("d", "s", 2, "x/y", "j", None, None, None, (4, 6), {}, {}, (seed,)))
    assert "no known price" in text and "unpriced" in text and "re-reads: none configured" in text
