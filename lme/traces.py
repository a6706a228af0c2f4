"""Each question of a job as one MLflow trace (MLflow 3 tracing), linked to the job's run, with its verdict as
an assessment (feedback), so MLflow's Traces and evaluation views show what the reader saw and what was judged.

A trace is written after its question is journaled, from the job's `QuestionRecord` (`lme.run`), with the
recorded wall-clock times:

    question <id>                 inputs: question, question date; outputs: final answer, verdict
      memory <view>               bytes, turns, content SHA-256, the first turn ids; `full`: the memory text
      reader <step>               the exact messages sent (`full`), the answer, tokens, dollars, latency,
                                  from the cache or paid, the payload's attempt and the gateway's attempts
      judge <step>                the judge prompt (`full`), its reply and the verdict

Tags: lme.design, lme.seed, lme.question_id, lme.question_type, lme.dataset_sha256, lme.verdict.
`tracking.traces`: `full`, `metadata` (no texts: digests and sizes instead), `off` (the default for now: MLflow's
export costs ~55 ms per trace on a SQLite store, `scripts/bench_orchestration.py --compare-traces`).

Tracing never stops a job: a store that refuses a trace is reported once on stderr and tracing ends for the
job. MLflow exports spans through its own (global) tracking URI, which is set to the job's store.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from lme.data.dates import format_moment
from lme.data.records import Question
from lme.errors import first_line
from lme.hashing import sha256_text
from lme.judge import Judge, build_judge_prompt
from lme.run import Outcome, QuestionRecord
from lme.tracking import TrackingSettings, client_for, experiment_id

TOP_TURNS = 20  # turn ids named on a memory span


class TraceWriter:
    """Writes one trace per question into the job's experiment, linked to run `run_id`."""

    def __init__(self, settings: TrackingSettings, run_id: str, tags: Mapping[str, str], judge: Judge | None) -> None:
        import mlflow

        mlflow.set_tracking_uri(settings.uri)  # MLflow's span exporter writes to the global tracking URI
        self.full = settings.traces == "full"
        self.client = client_for(settings)
        self.experiment = experiment_id(settings)
        self.run_id = run_id
        self.tags = dict(tags)
        self.judge = judge
        self.written: list[tuple[str, Outcome]] = []
        self.failed: str | None = None

    def write(self, question: Question, outcome: Outcome, record: QuestionRecord) -> None:
        """The question's trace (its feedback follows in `close`, once the spans are stored)."""
        if self.failed is not None:
            return
        try:
            self.written.append((self._trace(question, outcome, record), outcome))
        except Exception as exc:  # noqa: BLE001 - a trace is a record of the run, never a reason to stop it
            self._give_up(exc)

    def close(self) -> None:
        """Wait for the spans to be stored, then log each verdict as feedback on its trace."""
        if not self.written:
            return
        try:
            import mlflow
            from mlflow.entities import AssessmentSource

            mlflow.flush_trace_async_logging()
            judge = self.judge
            source = AssessmentSource(source_type="LLM_JUDGE" if judge is not None and judge.official else "CODE",
                                      source_id=judge.name if judge is not None else "lme")
            for trace_id, outcome in self.written:
                if outcome.answer is None or outcome.judge_error:
                    continue  # no verdict: the trace's lme.verdict tag says missing
                mlflow.log_feedback(trace_id=trace_id, name="correct", value=bool(outcome.correct), source=source,
                                    rationale=outcome.judge_reply or outcome.judge_note or None)
        except Exception as exc:  # noqa: BLE001
            self._give_up(exc)
        self.written = []

    def _give_up(self, exc: Exception) -> None:
        self.failed = f"{type(exc).__name__}: {first_line(exc)}"
        print(f"lme: warning: traces are no longer written for this job ({self.failed}); the run goes on.",
              file=sys.stderr, flush=True)

    def _trace(self, question: Question, outcome: Outcome, record: QuestionRecord) -> str:
        client = self.client
        verdict = outcome.verdict
        tags = {**self.tags, "lme.question_id": question.question_id, "lme.question_type": question.question_type,
                "lme.verdict": verdict}
        root = client.start_trace(
            f"question {question.question_id}", span_type="CHAIN",
            inputs={"question": question.question, "question_date": format_moment(question.question_date)},
            attributes={"lme.question_id": question.question_id, "lme.question_type": question.question_type},
            tags=tags, experiment_id=self.experiment, run_id=self.run_id, start_time_ns=record.start_ns,
        )
        trace_id, parent = root.trace_id, root.span_id

        def span(name: str, kind: str, inputs: Any, outputs: Any, attributes: dict[str, Any], start: int, end: int,
                 error: str | None = None) -> None:
            child = client.start_span(name, trace_id=trace_id, parent_id=parent, span_type=kind, inputs=inputs,
                                      attributes=attributes, start_time_ns=start)
            client.end_span(trace_id, child.span_id, outputs=outputs, status="ERROR" if error else "OK",
                            end_time_ns=end)

        for event in record.memories:
            memory = event.memory
            attributes = {"view": event.view, "bytes": memory.n_bytes, "turns": len(memory.turn_ids),
                          "skipped_turns": len(memory.skipped_turn_ids), "sha256": sha256_text(memory.text),
                          "top_turn_ids": list(memory.turn_ids[:TOP_TURNS]), **{f"note.{k}": v for k, v in memory.notes.items()}}
            outputs = {"text": memory.text} if self.full else {"sha256": attributes["sha256"], "bytes": memory.n_bytes}
            span(f"memory {event.view}", "RETRIEVER", {"question_id": question.question_id}, outputs, attributes,
                 event.start_ns, event.end_ns)
        for read in record.reads:
            call = read.call
            attributes = {"step": read.step, "view": read.view, "model": call.model, "attempt": read.attempt,
                          "gateway_attempts": call.attempts, "from_cache": call.cached,
                          "input_tokens": call.input_tokens, "output_tokens": call.output_tokens,
                          "cached_input_tokens": call.cached_input_tokens, "reasoning_tokens": call.reasoning_tokens,
                          "cost_usd": call.cost_usd, "latency_s": round((read.end_ns - read.start_ns) / 1e9, 4)}
            inputs = {"messages": read.messages} if self.full else {
                "messages_sha256": sha256_text("\n".join(str(m.get("content", "")) for m in read.messages))}
            outputs = {"answer": call.text, "error": call.error, **({"refusal": call.refusal} if call.refusal else {})}
            span(f"reader {read.step}", "CHAT_MODEL", inputs, outputs, attributes, read.start_ns, read.end_ns,
                 error=call.error)
        for judged in record.verdicts:
            call = judged.verdict.call
            prompt = (build_judge_prompt(self.judge.templates, question, judged.answer)
                      if self.judge is not None and judged.answer else None)
            attributes = {"step": judged.step, "latency_s": round((judged.end_ns - judged.start_ns) / 1e9, 4)}
            if call is not None:
                attributes |= {"model": call.model, "from_cache": call.cached, "input_tokens": call.input_tokens,
                               "output_tokens": call.output_tokens, "cost_usd": call.cost_usd}
            inputs = {"prompt": prompt} if self.full else {"prompt_sha256": sha256_text(prompt or "")}
            outputs = {"reply": judged.verdict.reply, "correct": judged.verdict.correct, "note": judged.verdict.note}
            span(f"judge {judged.step}", "LLM", inputs, outputs, attributes, judged.start_ns, judged.end_ns,
                 error=judged.verdict.error)
        client.end_trace(trace_id, outputs={"answer": outcome.answer, "verdict": verdict},
                         end_time_ns=max(record.end_ns, record.start_ns))
        return trace_id
