"""One job: every selected question through memory, reader and judge.

Questions run concurrently (bounded); each `Outcome` is appended to the job's
JSONL journal as soon as it completes, so a killed job keeps everything that
finished. A journal that already holds outcomes is resumed: those questions are
not asked again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lme.answer.reader import Reader, build_reader_messages
from lme.data.records import Question
from lme.judge import Judge
from lme.memory.base import MemoryBuilder
from lme.models.gateway import CallResult, Gateway


@dataclass(frozen=True)
class CallStats:
    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # what the answer costs at list price, cached or not
    spent_usd: float = 0.0  # what this job paid (calls not served from the cache)
    unpriced_calls: int = 0

    @classmethod
    def of(cls, call: CallResult | None) -> CallStats:
        if call is None:
            return cls()
        cost = call.cost_usd or 0.0
        return cls(
            calls=1,
            cached_calls=int(call.cached),
            failed_calls=int(not call.ok),
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cost_usd=cost,
            spent_usd=0.0 if call.cached else cost,
            unpriced_calls=int(call.ok and call.cost_usd is None),
        )


@dataclass(frozen=True)
class Outcome:
    question_id: str
    question_type: str
    abstention: bool
    answer: str | None  # None when the reader failed
    correct: bool
    reader_error: str | None
    judge_reply: str | None
    judge_note: str
    memory_bytes: int
    memory_turns: int
    reader: CallStats = field(default_factory=CallStats)
    judge: CallStats = field(default_factory=CallStats)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Outcome:
        return cls(**{**raw, "reader": CallStats(**raw["reader"]), "judge": CallStats(**raw["judge"])})


class Journal:
    """Append-only JSONL of outcomes; one line per completed question."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def read(self) -> list[Outcome]:
        if not self.path.exists():
            return []
        outcomes = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    outcomes.append(Outcome.from_dict(json.loads(line)))
                except (json.JSONDecodeError, TypeError, KeyError):
                    continue  # a line cut by a crash: that question runs again
        return outcomes

    def append(self, outcome: Outcome) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(outcome.to_json() + "\n")
            handle.flush()


async def answer_question(
    question: Question,
    builder: MemoryBuilder,
    reader: Reader,
    instruction: str,
    judge: Judge | None,
    gateway: Gateway,
    seed: int,
) -> Outcome:
    started = time.perf_counter()
    memory = await asyncio.to_thread(builder.build, question)
    messages = build_reader_messages(instruction, question, memory, reader.instruction_role)
    call = await gateway.complete(reader.model, messages, seed=seed)
    answer = call.text if call.ok else None
    if answer is not None and not answer.strip():
        answer = None
    verdict = await judge.judge(gateway, question, answer) if judge is not None else None
    return Outcome(
        question_id=question.question_id,
        question_type=question.question_type,
        abstention=question.is_abstention,
        answer=answer,
        correct=bool(verdict and verdict.correct),
        reader_error=call.error if not call.ok else (None if answer is not None else "empty answer"),
        judge_reply=verdict.reply if verdict else None,
        judge_note=verdict.note if verdict else "not judged",
        memory_bytes=memory.n_bytes,
        memory_turns=len(memory.turn_ids),
        reader=CallStats.of(call),
        judge=CallStats.of(verdict.call if verdict else None),
        seconds=round(time.perf_counter() - started, 4),
    )


async def run_questions(
    questions: Iterable[Question],
    builder: MemoryBuilder,
    reader: Reader,
    instruction: str,
    judge: Judge | None,
    gateway: Gateway,
    seed: int,
    journal: Journal,
    concurrency: int = 8,
    on_outcome: Callable[[Outcome, int], None] | None = None,
) -> list[Outcome]:
    """Answer every question not yet in the journal; return all outcomes in question order.

    `questions` may be a lazy stream (LongMemEval-M): at most `concurrency`
    questions are held at once, so memory grows with that, not with the file.
    """
    done = {outcome.question_id: outcome for outcome in journal.read()}
    order: list[str] = []
    slots = asyncio.Semaphore(max(1, concurrency))
    running: set[asyncio.Task[None]] = set()
    errors: list[BaseException] = []
    finished = 0

    def settle(task: asyncio.Task[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            errors.append(task.exception())  # type: ignore[arg-type]
        slots.release()  # after recording the error, so the loop sees it before starting another question

    async def one(question: Question) -> None:
        nonlocal finished
        outcome = await answer_question(question, builder, reader, instruction, judge, gateway, seed)
        journal.append(outcome)
        done[outcome.question_id] = outcome
        finished += 1
        if on_outcome is not None:
            on_outcome(outcome, finished)

    try:
        for question in questions:
            order.append(question.question_id)
            if question.question_id in done:
                finished += 1
                continue
            await slots.acquire()
            if errors:
                slots.release()
                raise errors[0]
            task = asyncio.create_task(one(question))
            running.add(task)
            task.add_done_callback(settle)
        await asyncio.gather(*running)
        if errors:
            raise errors[0]
    except BaseException:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    return [done[question_id] for question_id in order]
