"""The arbiter: a post-multirun re-read for the questions whose runs disagree.

After the jobs of a multirun (one per seed) have finished, every question whose
runs' final answers differ is read once more, with the runs' answers listed in
the request, and asked for the right one (`lme.answer.reader.arbiter_messages`): under lme's payload as the JSON key
`earlier_answers`; under the study's (`reader.payload=study`), whose user message carries exactly the
study's three keys on every step, as a section that opens the memory text (`lme.answer.reader.EARLIER_HEADING`, one answer
per line). The write-up says only that the arbiter saw the earlier answers; where they were put is not
published, so this form is lme's.

Disagreement is decided from the answer texts alone (`normalize_answer`:
lower-cased, punctuation and spacing ignored; a missing answer is the empty
text), never from verdicts, which would need the reference answer; like every
rule, the arbiter never sees the question type or the reference answer.

The same stage, configured (`lme.config.design.ArbiterSpec`), is any cross-run re-read on chosen questions:
`select` (a question-text rule) narrows the disagreeing questions (designs 13 and 15: counting
questions), `show_earlier=False` leaves the runs' answers out of the request, and the memory read may
be a model-built one (a counting ledger, `lme.memory.model_built`), whose calls carry no seed.

The arbitrated answer replaces every run's answer to that question; a failed
arbiter call keeps each run's own answer. A stage memory that cannot be built (a model-built ledger whose
call failed or gave no text: `MemoryFailed`) makes no reader call for that question: its outcome names the
memory step, model and reason (`memory_error`), and the multirun counts the stage as incomplete (its parent
run fails, exit status 5; rerunning the sweep runs the stage again, its answered calls from the cache). `arbiter_step` turns the outcomes
into a row of the per-step table (`lme.reporting.measures.StepMeasures` fields), counted
in question-runs like the other rows: a question chosen counts once per run.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lme.answer.reader import Reader, arbiter_messages
from lme.data.records import Question
from lme.judge import Judge
from lme.reporting.measures import majority_threshold
from lme.memory.base import Memory, MemoryBuilder, MemoryFailed
from lme.models.gateway import Gateway
from lme.answer.run import CallStats, answer_of

ARBITER = "arbiter"
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalize_answer(text: str | None) -> str:
    """The text two answers are compared on: lower-cased words joined by single spaces."""
    return _NOT_WORD.sub(" ", (text or "").lower()).strip()


def disagree(answers: Sequence[str | None]) -> bool:
    """Whether the runs' answers differ (as normalized text)."""
    return len({normalize_answer(answer) for answer in answers}) > 1


def earlier_answers(answers: Sequence[str | None]) -> list[str]:
    """The answers shown to the arbiter: the runs' answers in run order, missing ones left out."""
    return [answer for answer in answers if answer and answer.strip()]


@dataclass(frozen=True)
class ArbiterOutcome:
    question_id: str
    question_type: str
    abstention: bool
    chosen: bool  # the runs disagree
    reread: bool  # an arbiter call was made
    failed: bool
    error: str | None
    earlier_answers: tuple[str | None, ...]  # each run's final answer, in run order
    answer: str | None  # the arbitrated answer (None: not chosen, or the call failed)
    correct: bool | None  # the verdict on `answer`; None when there is none
    reader: CallStats = field(default_factory=CallStats)
    judge: CallStats = field(default_factory=CallStats)
    memory_call: str | None = None  # a model-built memory's call: paid | cached | failed (None: no model call)
    memory_cost_usd: float = 0.0  # that call's dollars at list price
    memory_error: str | None = None  # the stage's memory could not be built: why (no reader call was made)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)


async def arbitrate_question(
    question: Question,
    answers: Sequence[str | None],
    builder: MemoryBuilder,
    reader: Reader,
    instruction: str,
    judge: Judge | None,
    gateway: Gateway,
    seed: int,
    select: Callable[[str], bool] | None = None,
    show_earlier: bool = True,
) -> ArbiterOutcome:
    """`select` (given the question text) narrows the disagreeing questions; `show_earlier` lists the runs'
    answers in the request."""
    base = {
        "question_id": question.question_id,
        "question_type": question.question_type,
        "abstention": question.is_abstention,
        "earlier_answers": tuple(answers),
    }
    if not disagree(answers) or (select is not None and not select(question.question)):
        return ArbiterOutcome(**base, chosen=False, reread=False, failed=False, error=None, answer=None, correct=None)
    try:
        memory = await asyncio.to_thread(builder.build, question)
    except MemoryFailed as failed:  # no reader call on a memory that is not the stage's
        return ArbiterOutcome(**base, chosen=True, reread=False, failed=True, error=str(failed), answer=None,
                              correct=None, memory_call="failed",
                              memory_cost_usd=CallStats.of_calls(failed.calls).cost_usd, memory_error=str(failed))
    messages = arbiter_messages(instruction, question, memory, reader,
                                earlier_answers(answers) if show_earlier else None)
    call = await gateway.complete(reader.model, messages, seed=seed)
    answer, error = answer_of(call)
    verdict = await judge.judge(gateway, question, answer) if judge is not None and answer is not None else None
    return ArbiterOutcome(
        **base, chosen=True, reread=True, failed=error is not None, error=error, answer=answer,
        correct=verdict.correct if verdict else None,
        reader=CallStats.of(call), judge=CallStats.of(verdict.call if verdict else None),
        memory_call=memory_call(memory), memory_cost_usd=CallStats.of_calls(memory.model_calls).cost_usd,
    )


def memory_call(memory: Memory) -> str | None:
    """What a model-built memory's calls did: `cached` (every one served from the cache), `paid`, or None
    (a memory built without a model)."""
    if not memory.model_calls:
        return None
    return "cached" if all(call.cached for call in memory.model_calls) else "paid"


async def arbitrate(
    questions: Iterable[Question],
    answers: Mapping[str, Sequence[str | None]],
    builder: MemoryBuilder,
    reader: Reader,
    instruction: str,
    judge: Judge | None,
    gateway: Gateway,
    seed: int,
    concurrency: int = 8,
    select: Callable[[str], bool] | None = None,
    show_earlier: bool = True,
) -> list[ArbiterOutcome]:
    """`arbitrate_question` for every question in `answers` (question id -> each run's final answer)."""
    slots = asyncio.Semaphore(max(1, concurrency))

    async def one(question: Question) -> ArbiterOutcome:
        async with slots:
            return await arbitrate_question(
                question, answers[question.question_id], builder, reader, instruction, judge, gateway, seed,
                select=select, show_earlier=show_earlier,
            )

    return list(await asyncio.gather(*(one(q) for q in questions if q.question_id in answers)))


def final_answers(runs: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, list[str | None]]:
    """Question id -> each run's final answer, in run order (None where a run lacks the question)."""
    by_run = [{str(row["question_id"]): row for row in rows} for rows in runs]
    ids = dict.fromkeys(qid for rows in by_run for qid in rows)
    return {qid: [rows[qid].get("answer") if qid in rows else None for rows in by_run] for qid in ids}


def arbiter_step(
    runs: Sequence[Sequence[Mapping[str, Any]]], outcomes: Sequence[ArbiterOutcome], index: int, view: str,
    name: str = ARBITER,
) -> dict[str, Any]:
    """The arbiter's (or another cross-run stage's, `name`) row of the per-step table (the fields of
    `lme.reporting.measures.StepMeasures`)."""
    by_run = [{str(row["question_id"]): bool(row.get("correct")) for row in rows} for rows in runs]
    ids = list(dict.fromkeys(qid for rows in by_run for qid in rows))
    replaced = {o.question_id: bool(o.correct) for o in outcomes if o.answer is not None}
    before = [{qid: rows.get(qid, False) for qid in ids} for rows in by_run]
    after = [{qid: replaced.get(qid, run[qid]) for qid in ids} for run in before]
    k = len(runs)
    need = majority_threshold(k) if k else 1
    majority = sum(1 for qid in ids if sum(run[qid] for run in after) >= need)
    chosen = [o for o in outcomes if o.chosen]
    return {
        "index": index,
        "rule": name,
        "label": name,
        "view": view,
        "questions_chosen": len(chosen),
        "chosen": k * len(chosen),
        "reread": k * sum(1 for o in chosen if o.reread),
        "failed": k * sum(1 for o in chosen if o.failed),
        "mean_accuracy": sum(sum(run.values()) / len(ids) for run in after) / k if ids and k else float("nan"),
        "majority_count": majority,
        "majority_accuracy": majority / len(ids) if ids else float("nan"),
        "fixed": sum(1 for b, a in zip(before, after) for qid in ids if not b[qid] and a[qid]),
        "broken": sum(1 for b, a in zip(before, after) for qid in ids if b[qid] and not a[qid]),
        "reader_calls": sum(o.reader.calls for o in outcomes),
        "reader_cost_usd": sum(o.reader.cost_usd for o in outcomes),
        "judge_cost_usd": sum(o.judge.cost_usd for o in outcomes),
    }
