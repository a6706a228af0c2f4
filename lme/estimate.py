"""`python -m lme estimate [overrides]`: expected calls and dollars of a study, before spending anything.

It composes the config a run would get (the same overrides, `+design=NAME`,
sweeps such as `seed=1,2,3` or `+design=bm25,pipeline`), builds every memory
the reader would see, counts the reader's input tokens with litellm's
`token_counter`, and prints per design and seed:

- the first pass exactly: one reader call per question, its input tokens and
  input dollars, and the most its output can add (`max_tokens` at the model's
  output price); calls already in the call cache are free and counted apart;
- re-reads (the `rules` group) as a range: a rule on the question text fires on
  a known set of questions (exact), a rule on the answer text may fire on any
  question (0 to all);
- the judge as an upper bound: one call per answer it may see (the first
  answer and each re-read's), its prompt counted with the longest answer the
  reader may give.

No model is called. Offline models cost nothing; a model without a price in
litellm's cost map (and none set on the model) is reported as unpriced.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lme.design import Design
from lme.errors import LmeError


@dataclass(frozen=True)
class ReadCost:
    """One reader call the study will (or may) make for a question: its input tokens and cache keys by seed."""

    step: str  # "first_pass" or the rule's name
    certain: bool  # True: the call is made (first pass, question-text rule); False: it may be
    input_tokens: int
    keys: dict[int, str] = field(default_factory=dict)  # seed -> call key


@dataclass(frozen=True)
class SeedEstimate:
    seed: int
    first_pass_calls: int
    first_pass_cached: int
    first_pass_input_tokens: int  # of the calls still to pay
    reread_calls_certain: int
    reread_calls_possible: int
    reread_cached: int
    reader_dollars_low: float | None  # input of the certain calls still to pay
    reader_dollars_high: float | None  # every call that may be made, input + maximum output
    first_pass_input_dollars: float | None
    first_pass_max_dollars: float | None
    judge_calls_max: int
    judge_dollars_low: float | None  # one call per question, its prompt with an empty answer
    judge_dollars_max: float | None  # every answer judged, each as long as the reader may write


@dataclass(frozen=True)
class DesignEstimate:
    design: str
    dataset: str
    n_questions: int
    reader_model: str
    judge_model: str
    reader_prices: tuple[float, float] | None
    judge_prices: tuple[float, float] | None
    max_output_tokens: int | None
    input_tokens: tuple[int, ...]  # first-pass input tokens per question
    rules_certain: dict[str, int]  # question-text rule -> questions it fires on (per occurrence in order)
    rules_possible: dict[str, int]  # answer-text rule -> occurrences in order (each may fire on any question)
    seeds: tuple[SeedEstimate, ...]
    notes: tuple[str, ...] = ()


def _dollars(prices: tuple[float, float] | None, input_tokens: int, output_tokens: int) -> float | None:
    if prices is None:
        return None
    return input_tokens * prices[0] + output_tokens * prices[1]


def seed_estimate(
    seed: int,
    reads: Sequence[Sequence[ReadCost]],
    cached_keys: set[str],
    reader_prices: tuple[float, float] | None,
    max_output: int,
    judge_base_tokens: Sequence[int] | None,
    judge_prices: tuple[float, float] | None,
    judge_max_output: int,
) -> SeedEstimate:
    """The figures of one seed from every question's reads (pure: no I/O)."""
    fp_calls = fp_cached = fp_tokens = 0
    certain = possible = reread_cached = 0
    low_tokens = high_in = high_calls = 0
    judge_calls = 0
    judge_in = judge_low_in = 0
    for index, question_reads in enumerate(reads):
        answers = 0
        for read in question_reads:
            is_cached = read.keys.get(seed) in cached_keys
            if read.step == "first_pass":
                fp_calls += 1
                fp_cached += is_cached
                if not is_cached:
                    fp_tokens += read.input_tokens
            elif read.certain:
                certain += 1
                reread_cached += is_cached
            else:
                possible += 1
            answers += 1
            if is_cached:
                continue
            if read.certain:
                low_tokens += read.input_tokens
            high_in += read.input_tokens
            high_calls += 1
        judge_calls += answers
        if judge_base_tokens is not None:
            judge_in += answers * (judge_base_tokens[index] + max_output)
            judge_low_in += judge_base_tokens[index]
    first_in = _dollars(reader_prices, fp_tokens, 0)
    first_max = _dollars(reader_prices, fp_tokens, (fp_calls - fp_cached) * max_output)
    judge_dollars = judge_low = None
    if judge_base_tokens is not None:
        judge_dollars = _dollars(judge_prices, judge_in, judge_calls * judge_max_output)
        judge_low = _dollars(judge_prices, judge_low_in, 0)
    return SeedEstimate(
        seed=seed,
        first_pass_calls=fp_calls,
        first_pass_cached=fp_cached,
        first_pass_input_tokens=fp_tokens,
        reread_calls_certain=certain,
        reread_calls_possible=possible,
        reread_cached=reread_cached,
        reader_dollars_low=_dollars(reader_prices, low_tokens, 0),
        reader_dollars_high=_dollars(reader_prices, high_in, high_calls * max_output),
        first_pass_input_dollars=first_in,
        first_pass_max_dollars=first_max,
        judge_calls_max=judge_calls,
        judge_dollars_low=judge_low,
        judge_dollars_max=judge_dollars,
    )


# -- building what the reader would see -------------------------------------------------------------


def _prices(spec: Any) -> tuple[float, float] | None:
    from lme.models.pricing import model_prices

    prices = model_prices(spec)
    return None if prices is None else (prices.input_per_token, prices.output_per_token)


def _cached_keys(cache_dir: Path, keys: set[str]) -> set[str]:
    """Which of `keys` the call cache already holds (no cache file: none). Opens nothing for writing."""
    import sqlite3

    path = cache_dir / "calls.sqlite"
    if not path.exists() or not keys:
        return set()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        found: set[str] = set()
        ordered = sorted(keys)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(row[0] for row in conn.execute(f"SELECT key FROM calls WHERE key IN ({marks})", chunk))
        return found
    except sqlite3.Error:
        return set()
    finally:
        conn.close()


def estimate_design(design: Design, seeds: Sequence[int], progress: bool = False) -> DesignEstimate:
    """Build every memory of `design` and estimate its calls and dollars for `seeds`."""
    from lme.answer.reader import build_reader_messages
    from lme.answer.rules import FIRST_PASS_VIEW
    from lme.data.dataset import load_dataset
    from lme.judge import build_judge_prompt
    from lme.models.cache import call_key
    from lme.models.pricing import count_input_tokens, max_output_tokens

    _, questions = load_dataset(design.dataset)
    retriever = design.build_retriever()
    builder = design.build_memory(retriever)
    reader = design.reader.build()
    rules = design.instructions.rules
    views = {FIRST_PASS_VIEW: builder, **design.build_views(retriever)}
    notes: list[str] = []
    from lme.memory.model_built import model_built

    writers = model_built(list(views.values()))  # a model-built memory: its requests counted, none sent
    for writer in writers:
        writer.plan_only()
    try:
        judge = design.judge.build()
    except LmeError as exc:
        judge = None
        notes.append(f"judge not estimated: {exc}")
    spec = reader.model
    max_output = max_output_tokens(spec)
    if max_output is None:
        notes.append(f"reader {spec.model}: no maximum output length known; output dollars are left out")

    reads: list[list[ReadCost]] = []
    judge_base: list[int] = []
    rules_certain: Counter[str] = Counter({step.rule.name: 0 for step in rules if step.rule.on == "question"})
    rules_possible: Counter[str] = Counter()
    for number, question in enumerate(questions, 1):
        memories: dict[str, Any] = {}
        sent: Counter[tuple[str, str]] = Counter()

        def read_cost(step: str, view: str, text: str, certain: bool) -> ReadCost:
            if view not in memories:
                memories[view] = views[view].build(question)
            sent[(view, text)] += 1
            attempt = sent[(view, text)]
            extra = {"attempt": attempt} if attempt > 1 else None
            messages = build_reader_messages(text, question, memories[view], reader.instruction_role, extra=extra,
                                             payload=reader.payload)
            keys = {seed: call_key(spec.model, messages, spec.params, seed) for seed in seeds}
            return ReadCost(step, certain, count_input_tokens(spec.model, messages), keys)

        first = design.instructions.first_pass_for(question.question)  # a routed first pass: its route's instruction
        question_reads = [read_cost("first_pass", FIRST_PASS_VIEW, first, True)]
        for step in rules:
            rule = step.rule
            if rule.on == "question":
                if rule.fires(question.question, None):
                    rules_certain[rule.name] += 1
                    question_reads.append(read_cost(rule.name, rule.view, step.instruction, True))
            else:
                question_reads.append(read_cost(rule.name, rule.view, step.instruction, False))
        reads.append(question_reads)
        if judge is not None:
            prompt = build_judge_prompt(judge.templates, question, "")
            judge_base.append(count_input_tokens(judge.model.model, [{"role": "user", "content": prompt}]))
        if progress and number % 50 == 0:
            print(f"  {number}/{len(questions)} memories built", file=sys.stderr, flush=True)
    rules_possible.update(step.rule.name for step in rules if step.rule.on != "question")

    for writer in writers:
        notes.append(model_built_note(writer, design.cache_dir))
    all_keys = {key for question_reads in reads for read in question_reads for key in read.keys.values()}
    cached = _cached_keys(design.cache_dir, all_keys)
    reader_prices = _prices(spec)
    judge_prices = _prices(judge.model) if judge is not None else None
    judge_max_output = 0
    if judge is not None:
        judge_max_output = max_output_tokens(judge.model) or 0
    estimates = tuple(
        seed_estimate(
            seed, reads, cached, reader_prices, max_output or 0,
            judge_base if judge is not None else None, judge_prices, judge_max_output,
        )
        for seed in seeds
    )
    return DesignEstimate(
        design=design.name,
        dataset=design.dataset.name,
        n_questions=len(questions),
        reader_model=spec.model,
        judge_model=judge.model.model if judge is not None else "?",
        reader_prices=reader_prices,
        judge_prices=judge_prices,
        max_output_tokens=max_output,
        input_tokens=tuple(read.input_tokens for question_reads in reads for read in question_reads[:1]),
        rules_certain=dict(rules_certain),
        rules_possible=dict(rules_possible),
        seeds=estimates,
        notes=tuple(notes),
    )


def model_built_note(writer: Any, cache_dir: Path) -> str:
    """One line on a model-built memory's calls (`lme.memory.model_built`): one per distinct request, for every
    seed together (they carry no seed), those already in the call cache free; the reader's input above is
    counted over its inner memory, without the model's output."""
    from lme.models.cache import call_key
    from lme.models.pricing import count_input_tokens, max_output_tokens

    spec = writer.model
    requests = {call_key(spec.model, messages, spec.params, None): messages for messages in writer.planned or []}
    cached = _cached_keys(cache_dir, set(requests))
    to_pay = [messages for key, messages in requests.items() if key not in cached]
    tokens = sum(count_input_tokens(spec.model, messages) for messages in to_pay)
    prices = _prices(spec)
    dollars = _dollars(prices, tokens, len(to_pay) * (max_output_tokens(spec) or 0))
    return (f"memory {writer.name} ({spec.model}): {len(requests)} model calls for all seeds together, "
            f"{len(cached)} already cached; {tokens} input tokens to pay, at most {_money(dollars)} ({_price_note(prices).strip(' ()')}); "
            "the reader's input is counted over its inner memory, without the model's output")


# -- printing ---------------------------------------------------------------------------------------


def _money(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:,.4f}"


def _price_note(prices: tuple[float, float] | None) -> str:
    if prices is None:
        return "no known price"
    if prices == (0.0, 0.0):
        return "free"
    return f"${prices[0] * 1e6:g} / ${prices[1] * 1e6:g} per million input / output tokens"


def format_estimate(estimate: DesignEstimate) -> str:
    """The printed block of one design (pure)."""
    tokens = estimate.input_tokens
    mean = sum(tokens) / max(1, len(tokens))
    lines = [
        f"design {estimate.design}: {estimate.n_questions} questions (dataset {estimate.dataset})",
        f"  reader {estimate.reader_model} ({_price_note(estimate.reader_prices)}); "
        f"judge {estimate.judge_model} ({_price_note(estimate.judge_prices)})",
        f"  first pass: {len(tokens)} calls a seed, input tokens {sum(tokens):,} (mean {mean:,.0f}, "
        f"max {max(tokens, default=0):,}; litellm token_counter), at most "
        + (f"{estimate.max_output_tokens:,} output tokens a call" if estimate.max_output_tokens else "unknown output"),
    ]
    if estimate.rules_certain or estimate.rules_possible:
        parts = [f"{name} on {count} questions (question text)" for name, count in estimate.rules_certain.items()]
        parts += [
            f"{name} x{times} on 0 to {estimate.n_questions} questions (answer text)"
            for name, times in estimate.rules_possible.items()
        ]
        lines.append("  re-reads: " + "; ".join(parts))
    else:
        lines.append("  re-reads: none configured")
    lines.append(
        "  (calls in the cache are free and not priced; $ input = input tokens only, .. = up to every "
        "call's maximum output)"
    )
    header = ("seed", "first pass calls (cached)", "first pass $", "re-read calls (cached)", "reader $",
              "judge calls", "judge $")
    rows = [header]
    for seed in estimate.seeds:
        reread_high = seed.reread_calls_certain + seed.reread_calls_possible
        rows.append((
            str(seed.seed),
            f"{seed.first_pass_calls} ({seed.first_pass_cached})",
            f"{_money(seed.first_pass_input_dollars)} .. {_money(seed.first_pass_max_dollars)}",
            f"{seed.reread_calls_certain}..{reread_high} ({seed.reread_cached})",
            f"{_money(seed.reader_dollars_low)} .. {_money(seed.reader_dollars_high)}",
            f"<= {seed.judge_calls_max}",
            f"{_money(seed.judge_dollars_low)} .. {_money(seed.judge_dollars_max)}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines.extend("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
    if len(estimate.seeds) > 1:
        low = [s.reader_dollars_low for s in estimate.seeds]
        high = [s.reader_dollars_high for s in estimate.seeds]
        total_low = None if None in low else sum(low)  # type: ignore[arg-type]
        total_high = None if None in high else sum(high)  # type: ignore[arg-type]
        lines.append(f"  all {len(estimate.seeds)} seeds: reader {_money(total_low)} .. {_money(total_high)}")
    lines.extend(f"  note: {note}" for note in estimate.notes)
    return "\n".join(lines)
