"""Prompt caching: stable text first in every message, cached input tokens recorded and priced.

Providers cache a prompt's prefix: a request whose first tokens match an earlier
request's are billed at the cache-read price for those tokens. So every
message lme sends puts the text that is the same across questions (the
instruction, the judge template's head) before the per-question part, and the
cached input tokens the provider reports go to the ledger, the call stats, the
MLflow metrics and the report's cost table, priced at the cache-read price.

The end-to-end tests run against the loopback server's simulated prefix cache
(`prefix_cache=True`) through litellm, and check the figures against an
independent computation: the longest common word prefix with any earlier
request, by brute force, and litellm's cost map read directly.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lme.answer.reader import Reader, build_reader_messages, compose_instruction
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import build_judge_prompt, load_templates, make_judge
from lme.memory.base import Memory
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.ledger import Ledger
from lme.models.offline import JUDGE_MODEL
from lme.models.pricing import CACHE_READ, INPUT, Prices, model_prices
from lme.reporting.report import DesignRuns, JobOutcomes, build_report, cost_table, report_json
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import CallStats, Journal, run_questions
from judging import OFFLINE_TEMPLATES
from shared_data import TEMPLATES as OFFICIAL_TEMPLATES
from shared_data import available

DESIGNS = ("bm25", "bm25_lucene", "first_pass", "hybrid", "pipeline", "pipeline_arbiter", "pipeline_counting",
           "pipeline_current_state", "semantic")
MODEL = "openai/gpt-4o-mini"  # in litellm's cost map, with a cache-read price
KEY_ENV = "LME_TEST_KEY"


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def wire(messages: list[dict]) -> str:
    """The messages as bytes in the order a provider reads them."""
    return json.dumps(messages, ensure_ascii=False)


def memory(text: str) -> Memory:
    return Memory(text=text, n_bytes=len(text.encode()), turn_ids=())


@pytest.fixture(scope="module")
def design_instructions() -> dict[str, tuple[str, list[str], str]]:
    """Per design: (base instruction, every step's instruction, the reader's instruction role)."""
    from design_helpers import compose_instructions
    from lme.cli import compose_config

    out = {}
    for design in DESIGNS:
        cfg = compose_config([f"+design={design}"])
        first, steps, _ = compose_instructions(cfg)
        out[design] = (str(cfg.instructions.base), [first, *(step.instruction for step in steps)],
                       str(cfg.reader.instruction_role))
    return out


# --- the order of every message ----------------------------------------------------------------------


def test_every_reader_message_of_every_design_starts_with_its_whole_instruction(design_instructions):
    questions = load_questions(SAMPLE_PATH)[:2]
    a, b = questions
    for design, (base, instructions, role) in design_instructions.items():
        for instruction in instructions:
            first = build_reader_messages(instruction, a, memory("Session 1: I adopted a cat."), role)
            second = build_reader_messages(instruction, b, memory("Session 9: we moved to Lisbon."), role)
            head = wire([{"role": role, "content": instruction}])[:-2]  # up to the instruction's closing quote
            assert first[0] == second[0] == {"role": role, "content": instruction}, design
            assert common_prefix(wire(first), wire(second)) >= len(head), design
            # first pass and re-reads of a design share its base instruction as a prefix
            assert instruction.startswith(base.strip()), design


def test_rereads_and_the_arbiter_add_their_part_after_the_memory():
    question = load_questions(SAMPLE_PATH)[0]
    mem = memory("Session 1: a long memory that the re-read repeats word for word.")
    plain = wire(build_reader_messages("Answer.", question, mem))
    for extra in ({"attempt": 2}, {"earlier_answers": ["a cat", "a dog"]}):
        again = wire(build_reader_messages("Answer.", question, mem, extra=extra))
        # everything up to the end of the memory is shared; only the added key differs
        assert common_prefix(plain, again) >= plain.index(json.dumps(mem.text)[1:-1]) + len(json.dumps(mem.text)) - 2


def test_reread_instructions_extend_the_base_instruction():
    paragraphs = {"advice": "Give advice.", "decline": "Decline when unsure."}
    base = "Answer from the memory."
    for names in ([], ["advice"], ["decline", "advice"]):
        assert compose_instruction(base, paragraphs, names).startswith(base)


def _judge_templates() -> list[dict[str, str]]:
    from omegaconf import OmegaConf

    from lme.cli import compose_config

    sets = [OmegaConf.to_container(compose_config(["judge=offline"]).judge.templates, resolve=True)]
    if available(OFFICIAL_TEMPLATES):  # the official ones too, when the real test data is there
        sets.append(load_templates(OFFICIAL_TEMPLATES))
    return sets


def test_judge_prompts_of_two_questions_share_the_template_head():
    from dataclasses import replace

    from lme.judge import TEMPLATE_KEYS, template_key

    by_key = {}
    for question in load_questions(SAMPLE_PATH):
        by_key.setdefault(template_key(question.question_id, question.question_type), question)
    assert set(by_key) == set(TEMPLATE_KEYS)
    for templates in _judge_templates():
        for key, question in by_key.items():
            other = replace(question, question="Which city did I move to last spring?", answer="Lisbon")
            a = build_judge_prompt(templates, question, "an answer")
            b = build_judge_prompt(templates, other, "another answer")
            head = templates[key].index("{}")
            assert head > 0 and common_prefix(a, b) >= head, key


# --- the loopback server's simulated prefix cache ----------------------------------------------------


def test_prefix_cache_counts_whole_blocks_from_a_minimum_and_excludes_a_fixed_count():
    from loopback import LoopbackServer
    from loopback_server import PrefixCache

    cache = PrefixCache(block=2, minimum=4)
    assert cache.lookup_and_add("a b c d e".split()) == 0
    assert cache.lookup_and_add("a b c d e".split()) == 4  # the fifth word is not a whole block
    assert cache.lookup_and_add("a b c x".split()) == 0  # two words: under the minimum
    assert cache.lookup_and_add("a b c d f g".split()) == 4
    with pytest.raises(ValueError):
        LoopbackServer(cached_tokens=3, prefix_cache=True)


# --- pricing -------------------------------------------------------------------------------------------


def test_prices_charge_cached_input_at_the_cache_read_price_else_at_the_input_price():
    with_read = Prices(2e-6, 8e-6, 5e-7)
    assert with_read.dollars(1000, 10, 600) == pytest.approx(400 * 2e-6 + 600 * 5e-7 + 10 * 8e-6)
    assert with_read.cached_input_basis == CACHE_READ
    without = Prices(2e-6, 8e-6)
    assert without.dollars(1000, 10, 600) == pytest.approx(1000 * 2e-6 + 10 * 8e-6)
    assert without.cached_input_basis == INPUT
    assert with_read.dollars(10, 0, 50) == pytest.approx(10 * 5e-7)  # never more cached than input


def test_model_prices_take_the_cache_read_price_from_the_cost_map_or_the_config():
    import litellm

    mini = model_prices(ModelSpec(model=MODEL))
    assert mini is not None
    assert mini.cache_read_per_token == litellm.model_cost["gpt-4o-mini"]["cache_read_input_token_cost"]
    assert model_prices(ModelSpec(model="openai/gpt-4-turbo")).cached_input_basis == INPUT  # no cache-read price
    configured = ModelSpec(model="openai/lme-custom", input_cost_per_token=1e-6, output_cost_per_token=2e-6)
    assert model_prices(configured).cached_input_basis == INPUT
    configured = ModelSpec(model="openai/lme-custom", input_cost_per_token=1e-6, output_cost_per_token=2e-6,
                           cache_read_input_cost_per_token=1e-7)
    assert model_prices(configured) == Prices(1e-6, 2e-6, 1e-7)


# --- end to end: loopback -> litellm -> gateway -> ledger, call stats, metrics, cost table ------------



def prompt_words(messages: list[dict]) -> list[str]:
    """The test's own reading of a prompt: each message's words, the first one tagged with the role."""
    words: list[str] = []
    for message in messages:
        mine = str(message.get("content") or "").split()
        words += [f"{message['role']}|{word}" if i == 0 else word for i, word in enumerate(mine)]
    return words


def expected_cached(prompts: list[list[str]]) -> list[int]:
    """Per request, the longest common word prefix with any earlier request (brute force)."""
    out = []
    for i, words in enumerate(prompts):
        best = 0
        for earlier in prompts[:i]:
            n = 0
            while n < min(len(words), len(earlier)) and words[n] == earlier[n]:
                n += 1
            best = max(best, n)
        out.append(best)
    return out


def run_study(tmp: Path, server, instruction: str, spec: dict, seeds=(1, 2), n_questions: int = 4):
    """`n_questions` questions x `seeds`, one question at a time, the reader at the loopback server, the
    offline judge; returns (outcomes per seed, the ledger's rows)."""
    questions = load_questions(SAMPLE_PATH)[:n_questions]
    builder = RetrievedMemoryBuilder(FTS5Retriever())
    reader = Reader(name="loopback", model=ModelSpec(
        api_base=server.base_url, api_key_env=KEY_ENV, max_attempts=1, timeout_s=10, **spec))
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
    cache = CallCache(tmp / "calls.sqlite")
    ledger = Ledger(tmp / "ledger.sqlite", study="caching", job="job")
    gateway = Gateway(cache, ledger=ledger)
    runs = []
    try:
        for seed in seeds:
            journal = Journal(tmp / f"seed{seed}" / "outcomes.jsonl")
            runs.append(asyncio.run(run_questions(
                questions, builder, reader, instruction, judge, gateway, seed, journal, concurrency=1)))
        rows = ledger.rows("caching")
    finally:
        ledger.close()
        cache.close()
    return runs, rows


def report_of(tmp: Path, seeds=(1, 2)):
    def rows(seed: int) -> tuple[dict, ...]:
        lines = (tmp / f"seed{seed}" / "outcomes.jsonl").read_text().splitlines()
        return tuple(json.loads(line) for line in lines)

    jobs = tuple(JobOutcomes(run_id=f"run{seed}", run_name=f"seed{seed}", seed=str(seed), judge="offline",
                             judge_official=False, rows=rows(seed)) for seed in seeds)
    return build_report([DesignRuns("loopback", "loopback", "parent", "parent", jobs)])


def cost_row(table: str) -> list[str]:
    header, _, row = table.splitlines()
    return [cell.strip() for cell in row.strip("|").split("|")]


@pytest.fixture(scope="module")
def instruction(design_instructions) -> str:
    return design_instructions["bm25"][1][0]


def test_a_run_with_a_prompt_cache_records_cached_tokens_everywhere_and_costs_less(
        tmp_path, monkeypatch, warm_litellm, instruction):
    import litellm

    from loopback import LoopbackServer

    from lme.study.job import cost_metrics

    monkeypatch.setenv(KEY_ENV, "sk-test")
    with LoopbackServer(reply="offline", prefix_cache=True) as server:
        runs, rows = run_study(tmp_path / "cached", server, instruction, {"model": MODEL})
        bodies = [r.body for r in server.completion_requests]
    with LoopbackServer(reply="offline") as server:
        _, plain_rows = run_study(tmp_path / "plain", server, instruction, {"model": MODEL})

    # the ledger: one paid row per reader call, in request order (one question at a time)
    assert len(rows) == len(bodies) == 8 and all(row["status"] == "paid" for row in rows)
    prompts = [prompt_words(body["messages"]) for body in bodies]
    cached = expected_cached(prompts)
    assert [row["cached_input_tokens"] for row in rows] == cached
    assert [row["input_tokens"] for row in rows] == [len(words) for words in prompts]
    instruction_words = len(instruction.split())
    assert cached[0] == 0 and all(c >= instruction_words for c in cached[1:4])  # other questions: the instruction
    assert cached[4:] == [len(words) for words in prompts[4:]]  # the second seed repeats every prompt whole

    # dollars: litellm's cost map, read directly
    price = litellm.model_cost["gpt-4o-mini"]
    p_in, p_read, p_out = (price["input_cost_per_token"], price["cache_read_input_token_cost"],
                           price["output_cost_per_token"])
    expected = [(row["input_tokens"] - c) * p_in + c * p_read + row["output_tokens"] * p_out
                for row, c in zip(rows, cached)]
    assert [row["dollars"] for row in rows] == pytest.approx(expected, rel=1e-9)
    assert [row["cached_input_tokens"] for row in plain_rows] == [0] * 8
    assert [(r["input_tokens"], r["output_tokens"]) for r in plain_rows] == [
        (r["input_tokens"], r["output_tokens"]) for r in rows]
    paid = sum(row["dollars"] for row in rows)
    paid_plain = sum(row["dollars"] for row in plain_rows)
    assert paid_plain - paid == pytest.approx(sum(cached) * (p_in - p_read), rel=1e-9)
    assert paid < paid_plain

    # call stats and the job's MLflow metrics
    for seed_outcomes, seed_cached in zip(runs, (cached[:4], cached[4:])):
        stats = CallStats.total(o.reader for o in seed_outcomes)
        assert stats.cached_input_tokens == sum(seed_cached) and stats.cached_input_at_input_price == 0
        metrics = cost_metrics(seed_outcomes)
        assert metrics["reader_cached_input_tokens"] == sum(seed_cached)
        assert metrics["judge_cached_input_tokens"] == 0
        assert metrics["reader_cost_usd"] == pytest.approx(stats.cost_usd)
    assert sum(CallStats.total(o.reader for o in seed).cost_usd for seed in runs) == pytest.approx(paid)

    # the report's cost table and JSON
    report = report_of(tmp_path / "cached")
    judge_in = sum(CallStats.total(o.judge for o in seed).input_tokens for seed in runs)
    total_in = sum(row["input_tokens"] for row in rows) + judge_in  # the share is of reader and judge input
    row = cost_row(cost_table(report))
    assert row[-2:] == [f"{sum(cached):,} ({100 * sum(cached) / total_in:.1f}%)", "cache-read price"]
    assert row[5] == f"${paid:,.4f}"
    cost = report_json(report)["designs"][0]["cost"]
    assert cost["reader_cached_input_tokens"] == sum(cached) and cost["cached_input_at_input_price"] == 0
    assert cost_row(cost_table(report_of(tmp_path / "plain")))[-2:] == ["0", "-"]


def test_configured_prices_charge_cached_input_at_the_configured_cache_read_price_else_at_the_input_price(
        tmp_path, monkeypatch, warm_litellm):
    from loopback import LoopbackServer

    monkeypatch.setenv(KEY_ENV, "sk-test")
    prices = {"model": "openai/lme-loopback", "input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6}
    results = {}
    for name, extra in (("read", {"cache_read_input_cost_per_token": 1e-7}), ("input", {})):
        with LoopbackServer(reply="two words", prompt_tokens=1000, cached_tokens=600) as server:
            runs, rows = run_study(tmp_path / name, server, "Answer.", {**prices, **extra}, seeds=(1,), n_questions=2)
        results[name] = (runs, rows)
        assert [(r["input_tokens"], r["cached_input_tokens"], r["output_tokens"]) for r in rows] == [(1000, 600, 2)] * 2
    read_rows, input_rows = results["read"][1], results["input"][1]
    assert [r["dollars"] for r in read_rows] == pytest.approx([400 * 1e-6 + 600 * 1e-7 + 2 * 4e-6] * 2)
    assert [r["dollars"] for r in input_rows] == pytest.approx([1000 * 1e-6 + 2 * 4e-6] * 2)

    read_stats = CallStats.total(o.reader for o in results["read"][0][0])
    input_stats = CallStats.total(o.reader for o in results["input"][0][0])
    assert (read_stats.cached_input_tokens, read_stats.cached_input_at_input_price) == (1200, 0)
    assert (input_stats.cached_input_tokens, input_stats.cached_input_at_input_price) == (1200, 1200)
    judge_in = CallStats.total(o.judge for o in results["read"][0][0]).input_tokens
    share = f"1,200 ({100 * 1200 / (2000 + judge_in):.1f}%)"  # of the reader's and the judge's input tokens
    assert cost_row(cost_table(report_of(tmp_path / "read", (1,))))[-2:] == [share, "cache-read price"]
    assert cost_row(cost_table(report_of(tmp_path / "input", (1,))))[-2:] == [share, "input price"]


def test_ledger_rows_keep_cached_tokens_and_calls_without_usage_read_zero(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite", study="s", job="j")
    try:
        paid = ledger.reserve("m", "k1", 0.01)
        ledger.settle(paid, {"input_tokens": 900, "cached_input_tokens": 512, "output_tokens": 7}, 0.001, 1)
        failed = ledger.reserve("m", "k2", 0.01)
        ledger.release(failed, "failed", 2)
        rows = ledger.rows("s")
    finally:
        ledger.close()
    assert [(r["status"], r["input_tokens"], r["cached_input_tokens"]) for r in rows] == [
        ("paid", 900, 512), ("failed", 0, 0)]


def test_journal_rows_written_before_cached_tokens_were_recorded_read_as_zero():
    from lme.reporting.measures import cost_summary

    old = {"calls": 1, "cached_calls": 0, "failed_calls": 0, "input_tokens": 10, "output_tokens": 2,
           "cost_usd": 0.5, "spent_usd": 0.5, "unpriced_calls": 0}
    assert CallStats(**old).cached_input_tokens == 0
    summary = cost_summary([[{"question_id": "q", "answer": "a", "reader": old, "judge": {}}]])
    assert (summary.reader_cached_input_tokens, summary.cached_input_at_input_price) == (0, 0)
