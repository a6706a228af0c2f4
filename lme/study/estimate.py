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
  reader may give;
- a model-built memory's calls (once for all seeds: they carry no seed), the
  requests it would send, those already cached free;
- a cross-run stage (`arbiter`: designs 7, 13, 15) as an upper bound, since
  which questions' runs disagree is known only after the runs: every question
  its `select` rule picks (all without one) read once, judged once, and its
  stage memory written once; none with fewer than two seeds.

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

from lme.config.design import Design
from lme.util.errors import LmeError


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
    stage: StageEstimate | None = None  # the design's cross-run stage (`arbiter`), an upper bound


@dataclass(frozen=True)
class PlannedCalls:
    """The requests a model-built memory would send (`plan_only`): distinct requests, those already in the
    call cache, input tokens and the most dollars of those still to pay."""

    model: str
    requests: int
    cached: int
    input_tokens: int
    dollars_max: float | None
    prices: tuple[float, float] | None


@dataclass(frozen=True)
class StageEstimate:
    """A cross-run stage (`lme.study.arbiter`) as an upper bound: it reads the questions whose runs disagree (and its
    `select` rule picks), which only the runs tell; so every question it may pick is counted, once for all
    seeds (its calls are keyed by the lowest seed)."""

    name: str
    runs: int  # the seeds planned: the stage runs only with two or more
    questions_max: int  # the questions it may read: those its select rule picks, else every question
    selected_by_rule: bool
    reader_calls_max: int
    input_tokens_max: int  # its requests, the runs' earlier answers (when shown) each as long as the reader may write
    reader_dollars_max: float | None  # input + every call's maximum output
    judge_calls_max: int
    judge_dollars_max: float | None
    memory: PlannedCalls | None = None  # its own model-built memory (a ledger): at most one call per question


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
    judge_base_tokens: Sequence[int | None] | None,  # per question; None: no judge call
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
        if judge_base_tokens is not None and judge_base_tokens[index] is None:
            continue  # judged by a rule, no call
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
    """Which of `keys` the call cache already holds (no cache file: none). Opens nothing for writing; a faulty
    cache file is one sentence naming it (`lme.util.sqlite.StoreError`)."""
    from lme.models.cache import CALL_CACHE, SOUND_ROW
    from lme.util.sqlite import open_store

    path = cache_dir / "calls.sqlite"
    if not path.exists() or not keys:
        return set()
    conn = open_store(path, CALL_CACHE, readonly=True)
    try:
        found: set[str] = set()
        ordered = sorted(keys)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(row[0] for row in conn.execute(f"SELECT key FROM calls WHERE key IN ({marks}) AND {SOUND_ROW}",
                                                         chunk))  # a damaged entry is asked again: not free
        return found
    finally:
        conn.close()


def estimate_design(design: Design, seeds: Sequence[int], progress: bool = False) -> DesignEstimate:
    """Build every memory of `design` and estimate its calls and dollars for `seeds`."""
    from lme.data.dataset import load_dataset

    _, questions = load_dataset(design.dataset)
    plan = _plan(design, seeds)
    notes: list[str] = []
    judge = _judge_or_note(design, notes)
    max_output = _reader_max_output(plan.reader.model, notes)
    counted = _count_questions(design, plan, judge, questions, seeds, max_output, progress)
    notes.extend(model_built_note(writer, design.cache_dir) for writer in plan.writers)
    notes.extend(system_note(system, questions) for system in systems_of(list(plan.views.values())))
    cached = _cached_keys(design.cache_dir, _call_keys(counted.reads))
    prices = _prices_of(plan.reader.model, judge, max_output)
    estimates = tuple(
        seed_estimate(
            seed, counted.reads, cached, prices.reader, prices.max_output or 0,
            counted.judge_base if judge is not None else None, prices.judge, prices.judge_max_output,
        )
        for seed in seeds
    )
    stage_estimate = _stage_estimate(design, plan, counted, seeds, judge, prices, notes)
    return _design_estimate(design, plan, judge, len(questions), counted, prices, estimates, notes, stage_estimate)


@dataclass(frozen=True)
class _Plan:
    """What an estimate reads with: the reader, the memory builders by view, the model-built ones among them (set
    to plan only), the cross-run stage (two seeds at least) and its memory builder."""

    reader: Any
    views: dict[str, Any]
    writers: list[Any]
    stage: Any
    stage_builder: Any


@dataclass(frozen=True)
class _Counted:
    """The questions counted: each one's reads, the judge's prompt tokens (empty answer), the rules that fire for
    certain or may, and the cross-run stage's input and judge tokens per question it may read."""

    reads: list[list[ReadCost]]
    judge_base: list[int | None]
    rules_certain: Counter[str]
    rules_possible: Counter[str]
    stage_reads: list[int]
    stage_judge: list[int]


@dataclass(frozen=True)
class _Prices:
    """Dollars per input and output token of the reader and judge (None: unknown) and their maximum outputs."""

    reader: tuple[float, float] | None
    judge: tuple[float, float] | None
    max_output: int | None
    judge_max_output: int


def _plan(design: Design, seeds: Sequence[int]) -> _Plan:
    """Build the retriever, memories, reader and the cross-run stage's memory; model-built memories plan only."""
    from lme.answer.rules import FIRST_PASS_VIEW

    retriever = design.build_retriever()
    builder = design.build_memory(retriever)
    reader = design.reader.build()
    views = {FIRST_PASS_VIEW: builder, **design.build_views(retriever)}
    from lme.memory.model_built import model_built

    writers = model_built(list(views.values()))  # a model-built memory: its requests counted, none sent
    stage = design.arbiter if len(seeds) >= 2 else None  # a cross-run stage needs two runs at least
    stage_builder = stage_memory(design, stage, views, retriever) if stage is not None else None
    for writer in model_built([*views.values(), stage_builder]):
        writer.plan_only()
    for system in systems_of([*views.values(), stage_builder]):
        system.plan_only()  # a memory system: nothing ingested or searched, its memory counted at its largest
    return _Plan(reader, views, writers, stage, stage_builder)


def systems_of(builders: Sequence[Any]) -> list[Any]:
    """The memory-system builders among `builders` (`lme.memory.systems`), or wrapped in one, once each."""
    from lme.memory.systems.base import system_builders

    return system_builders(builders)


def _judge_or_note(design: Design, notes: list[str]) -> Any:
    """The design's judge, or None with a note saying why it is not estimated."""
    try:
        return design.judge.build()
    except LmeError as exc:
        notes.append(f"judge not estimated: {exc}")
        return None


def _reader_max_output(spec: Any, notes: list[str]) -> int | None:
    """The reader's maximum output tokens, or None with a note that output dollars are left out."""
    from lme.models.pricing import max_output_tokens

    max_output = max_output_tokens(spec)
    if max_output is None:
        notes.append(f"reader {spec.model}: no maximum output length known; output dollars are left out")
    return max_output


def _count_questions(design: Design, plan: _Plan, judge: Any, questions: Sequence[Any], seeds: Sequence[int],
                     max_output: int | None, progress: bool) -> _Counted:
    """Every question's memories built and its reads, judge prompt and cross-run stage read counted (a line every
    50 questions with `progress`)."""
    from lme.judge import build_judge_prompt
    from lme.models.pricing import count_input_tokens

    rules = design.instructions.rules
    stage = plan.stage
    counted = _Counted(reads=[], judge_base=[], rules_possible=Counter(), stage_reads=[], stage_judge=[],
                       rules_certain=Counter({step.rule.name: 0 for step in rules if step.rule.on == "question"}))
    for number, question in enumerate(questions, 1):
        question_reads, memories = _question_reads(design, plan, question, seeds, counted.rules_certain)
        counted.reads.append(question_reads)
        judge_tokens: int | None = 0
        if judge is not None:
            judge_tokens = None  # no judge call (LoCoMo's adversarial questions under locomo_j follow a rule)
            if judge.calls_for(question):
                prompt = build_judge_prompt(judge.templates, question, "")
                judge_tokens = count_input_tokens(judge.model.model, [{"role": "user", "content": prompt}])
            counted.judge_base.append(judge_tokens)
        if stage is not None and plan.stage_builder is not None and (stage.select is None
                                                                     or stage.select.fires(question.question, None)):
            counted.stage_reads.append(_stage_tokens(plan, question, memories, seeds, max_output))
            if judge_tokens is not None:
                counted.stage_judge.append(judge_tokens)
        if progress and number % 50 == 0:
            print(f"  {number}/{len(questions)} memories built", file=sys.stderr, flush=True)
    counted.rules_possible.update(step.rule.name for step in rules if step.rule.on != "question")
    return counted


def _question_reads(design: Design, plan: _Plan, question: Any, seeds: Sequence[int],
                    rules_certain: Counter[str]) -> tuple[list[ReadCost], dict[str, Any]]:
    """A question's reads, each counted with its call key per seed: the first pass, the rules on the question
    text that fire (counted in `rules_certain`), every rule on the answer; and the memories built for them."""
    from lme.answer.reader import build_reader_messages
    from lme.answer.rules import FIRST_PASS_VIEW
    from lme.answer.run import repeat_marker
    from lme.models.cache import call_key
    from lme.models.pricing import count_input_tokens

    reader, spec = plan.reader, plan.reader.model
    memories: dict[str, Any] = {}
    sent: Counter[tuple[str, str]] = Counter()

    def read_cost(step: str, view: str, text: str, certain: bool) -> ReadCost:
        if view not in memories:
            memories[view] = plan.views[view].build(question)
        sent[(memories[view].text, text)] += 1  # the same request, whatever view gave its memory (as a run counts)
        extra, repeat = repeat_marker(reader.payload, sent[(memories[view].text, text)])
        messages = build_reader_messages(text, question, memories[view], reader.instruction_role, extra=extra,
                                         payload=reader.payload)
        keys = {seed: call_key(spec.model, messages, spec.params, seed, repeat) for seed in seeds}
        return ReadCost(step, certain, count_input_tokens(spec.model, messages), keys)

    first = design.instructions.first_pass_for(question.question)  # a routed first pass: its route's instruction
    question_reads = [read_cost("first_pass", FIRST_PASS_VIEW, first, True)]
    for step in design.instructions.rules:
        rule = step.rule
        if rule.on == "question":
            if rule.fires(question.question, None):
                rules_certain[rule.name] += 1
                question_reads.append(read_cost(rule.name, rule.view, step.instruction, True))
        else:
            question_reads.append(read_cost(rule.name, rule.view, step.instruction, False))
    return question_reads, memories


def _stage_tokens(plan: _Plan, question: Any, memories: dict[str, Any], seeds: Sequence[int],
                  max_output: int | None) -> int:
    """The cross-run stage's input tokens for a question (its own memory, else the view's built for the reads)."""
    from lme.models.pricing import count_input_tokens

    stage = plan.stage
    memory = memories.get(stage.view) if stage.memory is None else None
    messages = stage_messages(stage, question, memory or plan.stage_builder.build(question), plan.reader,
                              len(seeds), max_output or 0)
    return count_input_tokens(plan.reader.model.model, messages)


def _call_keys(reads: list[list[ReadCost]]) -> set[str]:
    """Every read's call key, over the seeds."""
    return {key for question_reads in reads for read in question_reads for key in read.keys.values()}


def _prices_of(reader_spec: Any, judge: Any, max_output: int | None) -> _Prices:
    """The reader's and judge's prices and maximum outputs (no judge: none)."""
    from lme.models.pricing import max_output_tokens

    reader_prices = _prices(reader_spec)
    judge_prices = _prices(judge.model) if judge is not None else None
    judge_max_output = 0
    if judge is not None:
        judge_max_output = max_output_tokens(judge.model) or 0
    return _Prices(reader_prices, judge_prices, max_output, judge_max_output)


def _stage_estimate(design: Design, plan: _Plan, counted: _Counted, seeds: Sequence[int], judge: Any,
                    prices: _Prices, notes: list[str]) -> StageEstimate | None:
    """The cross-run stage's most calls and dollars; None, with a note for a design that has one, under 2 seeds."""
    stage, max_output = plan.stage, prices.max_output
    stage_reads, stage_judge = counted.stage_reads, counted.stage_judge
    if stage is not None:
        from lme.memory.model_built import model_built

        stage_writer = next(iter(model_built([plan.stage_builder])), None) if stage.memory is not None else None
        return StageEstimate(
            name=stage.name, runs=len(seeds), questions_max=len(stage_reads), selected_by_rule=stage.select is not None,
            reader_calls_max=len(stage_reads), input_tokens_max=sum(stage_reads),
            reader_dollars_max=_dollars(prices.reader, sum(stage_reads), len(stage_reads) * (max_output or 0)),
            judge_calls_max=len(stage_reads) if judge is not None else 0,
            judge_dollars_max=_dollars(prices.judge, sum(stage_judge) + len(stage_judge) * (max_output or 0),
                                       len(stage_judge) * prices.judge_max_output) if judge is not None else None,
            memory=planned_calls(stage_writer, design.cache_dir) if stage_writer is not None else None,
        )
    if design.arbiter is not None:
        notes.append(f"cross-run stage {design.arbiter.name}: not counted, it needs at least 2 seeds (seed=1,2,3)")
    return None


def _design_estimate(design: Design, plan: _Plan, judge: Any, n_questions: int, counted: _Counted, prices: _Prices,
                     estimates: tuple[SeedEstimate, ...], notes: list[str],
                     stage_estimate: StageEstimate | None) -> DesignEstimate:
    """The design's estimate from its parts."""
    return DesignEstimate(
        design=design.name,
        dataset=design.dataset.name,
        n_questions=n_questions,
        reader_model=plan.reader.model.model,
        judge_model=judge.model.model if judge is not None else "?",
        reader_prices=prices.reader,
        judge_prices=prices.judge,
        max_output_tokens=prices.max_output,
        input_tokens=tuple(read.input_tokens for question_reads in counted.reads for read in question_reads[:1]),
        rules_certain=dict(counted.rules_certain),
        rules_possible=dict(counted.rules_possible),
        seeds=estimates,
        notes=tuple(notes),
        stage=stage_estimate,
    )


def stage_memory(design: Design, stage: Any, views: dict[str, Any], retriever: Any) -> Any:
    """The memory a cross-run stage reads: its own (`arbiter.memory`, built as the parent builds it), else its view."""
    if stage.memory is not None:
        return stage.memory.build(retriever=retriever)
    return views.get(stage.view) or design.build_view(retriever)


def stage_messages(stage: Any, question: Any, memory: Any, reader: Any, runs: int, max_output: int) -> list[dict[str, Any]]:
    """A cross-run stage's request for `question`, as large as it may be: the runs' earlier answers (when the
    stage shows them) each as long as the reader may write (`max_output` words of one token)."""
    from lme.answer.reader import arbiter_messages

    longest = " ".join(["x"] * max_output)
    return arbiter_messages(stage.instruction, question, memory, reader,
                            [longest] * runs if stage.earlier_answers else None)


@dataclass(frozen=True)
class IngestionPlan:
    """A memory system's ingestion calls still to make (`planned_requests`: Mem0's extraction, one a session): the
    histories (namespaces) of the questions, those the journal says are ingested, the sessions and calls still to
    send, their input tokens and the most dollars they may cost."""

    model: str
    histories: int
    histories_ingested: int
    calls: int
    input_tokens: int
    input_dollars: float | None
    dollars_max: float | None
    prices: tuple[float, float] | None


def ingestion_plan(builder: Any, questions: Sequence[Any]) -> IngestionPlan | None:
    """What ingesting the questions' histories into `builder`'s system would send, none sent: for each history
    not finished in the ingestion journal, one request per session not yet acknowledged (a system without
    `planned_requests` makes no model calls it can plan: None). Input tokens are litellm's count of each message,
    remembered by content (Mem0's fixed instructions are counted once per date, not once per session)."""
    system = builder.system
    planned, spec = getattr(system, "planned_requests", None), getattr(system, "extraction_spec", None)
    if not callable(planned) or spec is None:
        return None
    from lme.memory.systems.base import system_sessions
    from lme.memory.systems.journal import acknowledged_sessions
    from lme.models.pricing import count_input_tokens, max_output_tokens

    done, acknowledged = acknowledged_sessions(builder.journal_path)
    seen: set[str] = set()
    calls = tokens = ingested = 0
    for question in questions:
        sessions = system_sessions(question)
        namespace = builder.namespace(question)
        if namespace in seen:
            continue
        seen.add(namespace)
        if namespace in done:
            ingested += 1
            continue
        have = acknowledged.get(namespace, frozenset())
        for session, messages in zip(sessions, planned(sessions)):
            if session.session_id not in have:
                calls += 1
                tokens += sum(count_input_tokens(spec.model, [message]) for message in messages)
    prices = _prices(spec)
    return IngestionPlan(spec.model, len(seen), ingested, calls, tokens, _dollars(prices, tokens, 0),
                         _dollars(prices, tokens, calls * (max_output_tokens(spec) or 0)), prices)


def system_note(builder: Any, questions: Sequence[Any]) -> str:
    """One line on a memory system: its searches are not made (the reader's input is counted at its largest), and
    its ingestion's model calls, when it plans them (`ingestion_plan`)."""
    line = (f"memory system {builder.system.name}: nothing ingested or searched; the reader's input is counted at its "
            f"largest, memory.max_bytes ({builder.max_bytes:,} bytes)")
    plan = ingestion_plan(builder, questions)
    if plan is None:
        return line + "; its ingestion makes no model call lme can count (a hosted system's own cost is its bill)"
    return (line + f"; ingestion ({plan.model}, once for all seeds and designs): {plan.histories} histories, "
            f"{plan.histories_ingested} already ingested, {plan.calls} calls to send, {plan.input_tokens:,} input "
            f"tokens, {_money(plan.input_dollars)} input .. {_money(plan.dollars_max)} with every call's maximum output "
            f"({_price_note(plan.prices).strip(' ()')}); each request also holds up to ten of the memories already "
            "extracted, not counted")


def model_built_note(writer: Any, cache_dir: Path) -> str:
    """One line on a model-built memory's calls (`lme.memory.model_built`): one per distinct request, for every
    seed together (they carry no seed), those already in the call cache free; the reader's input above is
    counted over its inner memory, without the model's output."""
    planned = planned_calls(writer, cache_dir)
    return (f"memory {writer.name} ({planned.model}): {planned.requests} model calls for all seeds together, "
            f"{planned.cached} already cached; {planned.input_tokens} input tokens to pay, at most "
            f"{_money(planned.dollars_max)} ({_price_note(planned.prices).strip(' ()')}); "
            "the reader's input is counted over its inner memory, without the model's output")


def planned_calls(writer: Any, cache_dir: Path) -> PlannedCalls:
    """What a model-built memory in `plan_only` mode would send: one call per distinct request (no seed)."""
    from lme.models.cache import call_key
    from lme.models.pricing import count_input_tokens, max_output_tokens

    spec = writer.model
    requests = {call_key(spec.model, messages, spec.params, None): messages for messages in writer.planned or []}
    cached = _cached_keys(cache_dir, set(requests))
    to_pay = [messages for key, messages in requests.items() if key not in cached]
    tokens = sum(count_input_tokens(spec.model, messages) for messages in to_pay)
    prices = _prices(spec)
    dollars = _dollars(prices, tokens, len(to_pay) * (max_output_tokens(spec) or 0))
    return PlannedCalls(spec.model, len(requests), len(cached), tokens, dollars, prices)


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
    if estimate.stage is not None:
        lines.extend(stage_lines(estimate.stage, estimate.n_questions))
    lines.extend(f"  note: {note}" for note in estimate.notes)
    return "\n".join(lines)


def stage_lines(stage: StageEstimate, n_questions: int) -> list[str]:
    """The printed lines of a cross-run stage: an upper bound, and why."""
    which = (f"the {stage.questions_max} of {n_questions} questions its select rule picks" if stage.selected_by_rule
             else f"all {stage.questions_max} questions")
    lines = [
        f"  cross-run stage {stage.name} (after the {stage.runs} runs, once for all of them): an UPPER BOUND, as if "
        f"the runs disagreed on {which}; which questions disagree is known only after the runs",
        f"    reader <= {stage.reader_calls_max} calls, <= {stage.input_tokens_max:,} input tokens, at most "
        f"{_money(stage.reader_dollars_max)}; judge <= {stage.judge_calls_max} calls, at most "
        f"{_money(stage.judge_dollars_max)}",
    ]
    if stage.memory is not None:
        m = stage.memory
        lines.append(f"    its memory ({m.model}, a model-built memory): <= {m.requests} calls, {m.cached} already "
                     f"cached; <= {m.input_tokens:,} input tokens to pay, at most {_money(m.dollars_max)} "
                     f"({_price_note(m.prices).strip(' ()')}); the reader's input above is counted over its inner memory")
    return lines
