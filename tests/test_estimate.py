"""`lme estimate`: checked against the requests a real run then sends to the loopback server.

The estimate builds every memory and counts the reader's input tokens; the
run (the same config, `lme.answer.run.run_questions` through the gateway and litellm's
HTTP path) sends the requests; the server records them. The first pass must
match exactly, re-reads must fall in the printed range, and after the run the
estimate must see the first pass as cached (free).
"""

from __future__ import annotations

import asyncio

import pytest
from loopback import LoopbackServer

from lme.cli import compose_config
from lme.config.design import design_from_config
from lme.cli.estimate import main
from lme.config.compose import expand_sweeps
from lme.study.estimate import estimate_design, format_estimate, stage_lines
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
    from lme.answer.run import Journal, run_questions

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


def test_a_damaged_call_cache_is_one_sentence_naming_it_and_is_left_as_it_was(tmp_path):
    from lme.util.errors import LmeError

    cache = tmp_path / "calls.sqlite"
    cache.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    before = cache.read_bytes()
    with pytest.raises(LmeError, match=str(cache)):
        main([f"cache_dir={tmp_path}", "limit=2"])
    assert cache.read_bytes() == before


def test_sweeps_expand_like_hydra():
    assert expand_sweeps(["+design=bm25", "seed=1,2"]) == [["+design=bm25", "seed=1"], ["+design=bm25", "seed=2"]]
    assert expand_sweeps([]) == [[]]


def test_unknown_arguments_are_one_sentence():
    from lme.util.errors import LmeError

    with pytest.raises(LmeError, match="estimate: unknown argument '--fast'"):
        main(["--fast"])


def test_format_marks_unpriced_models():
    from lme.study.estimate import DesignEstimate, SeedEstimate

    seed = SeedEstimate(1, 2, 0, 10, 0, 0, 0, None, None, None, None, 2, None, None)
    text = format_estimate(DesignEstimate("d", "s", 2, "x/y", "j", None, None, None, (4, 6), {}, {}, (seed,)))
    assert "no known price" in text and "unpriced" in text and "re-reads: none configured" in text


def test_a_cross_run_stage_is_counted_as_an_upper_bound_with_its_model_built_ledger(tmp_path):
    """Design 13: the counting ledger stage after the runs. Which questions disagree is unknown before the runs,
    so every question its select rule picks is counted: one reader call, one judge call and one ledger call each,
    once for all seeds; with one seed the stage does not run and is not counted."""
    from lme.answer.reader import build_reader_messages
    from lme.data.dataset import load_dataset
    from lme.config.design import compose_design

    ids = ["ba26d851", "95e38180", "900f72f7", "fe656bef", "8dff06d2", "d82c07cd"]  # four counting questions
    base = ["+design=study/13_ledger_replace", "retriever=fts5", "question_ids=[" + ",".join(f"'{i}'" for i in ids) + "]",
            f"cache_dir={tmp_path}",
            "memory/writer@arbiter.memory.model=gpt5_nano", "reader.model.model=openai/gpt-4o-mini",
            f"++reader.model.input_cost_per_token={PRICE_IN}", f"++reader.model.output_cost_per_token={PRICE_OUT}",
            "++reader.model.params.max_tokens=100"]
    design = compose_design(base)
    _, questions = load_dataset(design.dataset)
    counting = [q for q in questions if design.arbiter.select.fires(q.question, None)]
    assert 0 < len(counting) < len(questions)

    estimate = estimate_design(design, [1, 2, 3])
    stage = estimate.stage
    assert stage is not None and stage.name == "ledger" and stage.runs == 3 and stage.selected_by_rule
    assert stage.questions_max == stage.reader_calls_max == stage.judge_calls_max == len(counting)
    assert stage.memory is not None and stage.memory.model == "openai/gpt-5-nano"
    assert stage.memory.requests == len(counting) and stage.memory.cached == 0 and stage.memory.dollars_max > 0
    # its requests over the ledger's inner memory (no earlier answers: design 13 shows none), as tokens counted
    inner = design.arbiter.memory.build(retriever=design.build_retriever()).inner
    reader = design.reader.build()
    tokens = sum(count_input_tokens("openai/gpt-4o-mini", build_reader_messages(
        design.arbiter.instruction, q, inner.build(q), reader.instruction_role, payload=reader.payload))
        for q in counting)
    assert stage.input_tokens_max == tokens
    assert stage.reader_dollars_max == pytest.approx(tokens * PRICE_IN + len(counting) * 100 * PRICE_OUT)
    text = format_estimate(estimate)
    assert "cross-run stage ledger" in text and "UPPER BOUND" in text
    assert f"the {len(counting)} of {len(questions)} questions its select rule picks" in text
    assert "its memory (openai/gpt-5-nano, a model-built memory)" in text
    assert not (tmp_path / "calls.sqlite").exists()  # nothing sent

    one = estimate_design(design, [1])
    assert one.stage is None and any("cross-run stage ledger: not counted" in n for n in one.notes)


def test_an_arbiter_showing_the_runs_answers_counts_them_at_their_longest(tmp_path):
    from lme.config.design import compose_design

    design = compose_design(["+design=study/07_arbiter", "retriever=fts5", "limit=4", f"cache_dir={tmp_path}",
                             "reader.model.model=openai/gpt-4o-mini", "++reader.model.params.max_tokens=50"])
    two, three = (estimate_design(design, seeds).stage for seeds in ([1, 2], [1, 2, 3]))
    assert two.questions_max == three.questions_max == 4 and not two.selected_by_rule and two.memory is None
    assert three.input_tokens_max - two.input_tokens_max >= 4 * 50  # one more earlier answer of 50 tokens each
    assert "all 4 questions" in "\n".join(stage_lines(two, 4))
