"""Each question of a job as one MLflow trace (MLflow 3 tracing), linked to the job's run, with its verdict as
an assessment (feedback), so MLflow's Traces and evaluation views show what the reader saw and what was judged.

A trace is built after its question is journaled, from the job's `QuestionRecord` (`lme.answer.run`), with the
recorded wall-clock times:

    question <id>                 inputs: question, question date; outputs: final answer, verdict
      memory <view>               bytes, turns, content SHA-256, the first turn ids; `full`: the memory text
        retrieve <retriever>      the top turn ids with their scores (memories built from a ranking)
        search <system>           a memory system's raw results, as it returned them before packing: ids,
                                  scores and (`full`) texts, beside the memory text the reader got
      reader <step>               the exact messages sent (`full`), the answer, tokens, dollars, latency,
                                  from the cache or paid, the payload's attempt and the gateway's attempts
      judge <step>                the judge prompt (`full`), its reply and the verdict

Tags: lme.config.design, lme.seed, lme.question_id, lme.question_type, lme.dataset_sha256, lme.verdict. The trace's
token and dollar totals are the reader's and judge's calls. `tracking.traces`: `full` (the default),
`metadata` (no texts: digests and sizes instead), `off`.

**Cost.** Traces are written by a helper process (started with the job's first writer) straight to the
tracking store (`start_trace` with the verdict as its assessment, then one `log_spans` for a batch of traces),
not through MLflow's span exporter, which costs ~55 ms of CPU per trace on a SQLite store against 10-12 ms
for these store calls (a synthetic micro-benchmark). The job's loop only hands each question's record over a queue, so the store's work runs on another core
and never holds the job's interpreter lock; `close` waits for the backlog. Ctrl-C leaves the helper to finish
the queue; a helper whose job's process is gone stops at the end of its input.

**Each text once.** A memory, and the reader messages that carry it, do not depend on the seed: a text
already held by a trace of the same store and experiment (found by its SHA-256 in `traces.sqlite` in the
cache folder) is not stored again; the span names the text's digest and the trace that holds it. Within a
trace, a memory text that a stored reader message contains verbatim is shown there, not twice.

Tracing never stops a job: a store that refuses a trace ends tracing for the job, which says so once on
stderr when it closes its writer.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.data.dates import format_moment
from lme.data.records import Question
from lme.util.errors import LmeError, first_line
from lme.util.hashing import sha256_json, sha256_text
from lme.tracking.helper import HelperError, answer, helper, read_frame, yield_cpu
from lme.judge import Judge, build_judge_prompt
from lme.answer.run import Outcome, QuestionRecord
from lme.util.sqlite import StoreError, StoreKind, immediate, open_store
from lme.util.code_version import code_tags
from lme.util.secrets import clean, cleaned_stream
from lme.tracking.runs import TrackingSettings, client_for, experiment_id, import_store_modules, serve_run

TOP_TURNS = 20  # turn ids (and scores) named on a memory or retrieval span
SPAN_NOTES = ("system_results",)  # memory notes shown as a span of their own (`search <system>`), not as attributes
BATCH = 64  # traces written in one store session at most
BACKLOG_NOTE = 200  # a job that ends with more traces than this still queued says that it is writing them


def messages_sha256(messages: list[dict[str, Any]]) -> str:
    """The digest naming a reader call's messages (their canonical JSON)."""
    return sha256_json(messages)


TEXT_REGISTRY = StoreKind(
    "trace text registry",
    "CREATE TABLE IF NOT EXISTS texts (store TEXT NOT NULL, sha256 TEXT NOT NULL, trace_id TEXT NOT NULL, "
    "PRIMARY KEY (store, sha256)) WITHOUT ROWID",
    {"texts": ("store", "sha256", "trace_id")},
    "texts already in traces may be stored once more; nothing else is lost",
)


class TextRegistry:
    """Which texts a tracking store's experiment already holds, by SHA-256, and in which trace.

    One SQLite file shared by every job of a cache folder (seeds may run in parallel processes); a text is
    recorded after the trace holding it is stored, so a failed write never leaves a dangling reference. Two
    jobs storing the same new text at once both keep it: a duplicate, never a loss."""

    def __init__(self, path: Path, store: str) -> None:
        self.store = store
        # opened by lme.util.sqlite.open_store: created whole; a damaged, locked, full, ... file is one sentence
        # (StoreError), after which the job's traces go on without it (each text stored in full), said on stderr
        self.db = open_store(path, TEXT_REGISTRY, synchronous="NORMAL")  # a lost row only means a text stored twice

    def holder(self, sha: str) -> str | None:
        row = self.db.execute("SELECT trace_id FROM texts WHERE store = ? AND sha256 = ?", (self.store, sha)).fetchone()
        return row[0] if row else None

    def record(self, held: Mapping[str, str]) -> None:
        with immediate(self.db):  # one transaction for the batch (the connection autocommits)
            self.db.executemany("INSERT OR IGNORE INTO texts (store, sha256, trace_id) VALUES (?, ?, ?)",
                                [(self.store, sha, trace_id) for sha, trace_id in held.items()])

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class TraceInput:
    """What one question's trace is built from, as handed to the helper process (plain, picklable data)."""

    question_id: str
    question_type: str
    question: str
    question_date: str
    outcome: Outcome
    record: QuestionRecord
    judge_prompts: tuple[str | None, ...]  # one per record.verdicts: the filled judge template, when an answer was judged


def trace_input(question: Question, outcome: Outcome, record: QuestionRecord, judge: Judge | None) -> TraceInput:
    prompts = tuple(build_judge_prompt(judge.templates, question, judged.answer)
                    if judge is not None and judged.answer and judge.calls_for(question) else None
                    for judged in record.verdicts)
    return TraceInput(question.question_id, question.question_type, question.question,
                      format_moment(question.question_date), outcome, record, prompts)


@dataclass(frozen=True)
class WriterSetup:
    """What the helper process needs to write a job's traces."""

    settings: TrackingSettings
    experiment: str
    run_id: str
    tags: dict[str, str]
    source: tuple[str, str]  # the verdicts' assessment source: (type, id)
    registry: Path | None  # `traces.sqlite` in the cache folder (full traces only)


def _cost(dollars: float | None) -> dict[str, float]:
    """A span's `mlflow.llm.cost`: the call's dollars at lme's price (empty when the price is unknown)."""
    return {} if dollars is None else {"total_cost": dollars}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


class _Trace:
    """One trace's spans as MLflow's span dictionaries (attributes JSON-encoded, ids base64), built in order."""

    def __init__(self) -> None:
        raw = uuid.uuid4().bytes
        self.trace_id = "tr-" + raw.hex()
        self.otel_id = _b64(raw)
        self.spans: list[dict[str, Any]] = []

    def span(self, name: str, kind: str, parent: str | None, inputs: Any, outputs: Any, attributes: Mapping[str, Any],
             start_ns: int, end_ns: int, error: str | None = None) -> str:
        span_id = _b64(os.urandom(8))
        name, inputs, outputs, attributes, error = clean((name, inputs, outputs, dict(attributes), error))  # lme.util.secrets
        encoded = {"mlflow.traceRequestId": json.dumps(self.trace_id), "mlflow.spanType": json.dumps(kind),
                   "mlflow.spanInputs": json.dumps(inputs, ensure_ascii=False),
                   "mlflow.spanOutputs": json.dumps(outputs, ensure_ascii=False)}
        encoded |= {key: json.dumps(value, ensure_ascii=False) for key, value in attributes.items()}
        self.spans.append({
            "trace_id": self.otel_id, "span_id": span_id, "parent_span_id": parent, "name": name,
            "start_time_unix_nano": start_ns, "end_time_unix_nano": max(end_ns, start_ns), "events": [],
            "status": {"code": "STATUS_CODE_ERROR" if error else "STATUS_CODE_OK", "message": error or ""},
            "attributes": encoded, "links": [],
        })
        return span_id


class TraceWriter:
    """Writes one trace per question into the job's experiment, linked to run `run_id` (see the module doc).

    The helper process outlives the writer: the later jobs of the same process (Hydra's basic launcher runs
    a sweep's jobs one after another) hand their traces to the same helper (`lme.tracking.helper`), which starts once.
    `experiment`: the run's experiment id, when the caller has it (else it is looked up here, in MLflow)."""

    def __init__(self, settings: TrackingSettings, run_id: str, tags: Mapping[str, str], judge: Judge | None,
                 cache_dir: Path, experiment: str | None = None) -> None:
        self.judge = judge
        setup = WriterSetup(
            settings=settings, experiment=experiment or experiment_id(settings), run_id=run_id, tags=dict(tags),
            source=(("CODE" if judge.model.is_offline else "LLM_JUDGE", judge.name) if judge is not None else ("CODE", "lme")),
            registry=cache_dir / "traces.sqlite" if settings.traces == "full" else None)
        self._helper = helper()
        self._helper.send(("job", setup))
        self.failed: str | None = None
        self.written = 0
        self.queued = 0
        self.cpu_s = 0.0  # the helper's CPU time on this job's traces (off the job's loop, on another core)

    def write(self, question: Question, outcome: Outcome, record: QuestionRecord) -> None:
        """Hand the question's record to the helper (the job's loop never waits for the store)."""
        self._helper.send(("trace", trace_input(question, outcome, record, self.judge)))
        self.queued += 1

    def close(self) -> None:
        """Wait for the helper to write what this job queued, then collect how it went."""
        try:
            self.written, self.failed, self.cpu_s = self._helper.call("close", None)
        except HelperError as exc:
            self.failed = str(exc)
            print(f"lme: warning: {self.failed}; {self.queued} traces may be missing; the run goes on.",
                  file=sys.stderr, flush=True)
            return
        if self.failed is not None:  # said by the job, on its own stderr (the helper may outlive it)
            print(f"lme: warning: traces stopped after {self.written} of {self.queued} for this job "
                  f"({self.failed}); the run went on.", file=sys.stderr, flush=True)


def start_helper(settings: TrackingSettings) -> None:
    """Start this process's helper now, for the runs and traces of the jobs it will run with `settings`, and
    have it import MLflow's client and store modules at once (about 2 s of CPU in its own process): called as
    a study starts up, so that the helper's start-up runs beside this process's (its imports, its data file)
    instead of coming after them. Nothing when tracking is off."""
    if settings.enabled:
        helper().send(("warm", settings))


def helper_main() -> None:
    """The helper process (`lme.tracking.helper`): MLflow runs for the study's process (`lme.tracking.runs.serve_run`), and
    for each job its traces, built and stored in batches until the job closes them; stop at the end of its
    input (the study's process is gone)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the job, which then makes its last calls
    sys.stderr = cleaned_stream(sys.stderr)  # its warnings (MLflow's errors) through lme.util.secrets.clean
    yield_cpu()  # background work: the study's own threads come first on a busy machine (lme.tracking.helper)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr; stdout carries only our answers
    inbox: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        stream = sys.stdin.buffer
        while (message := read_frame(stream)) is not None:
            inbox.put(message)
        inbox.put(("end", None))

    threading.Thread(target=read, name="lme-helper-reader", daemon=True).start()
    store: _Store | None = None
    pending: list[TraceInput] = []
    runs: dict[str, Any] = {}  # the study's open runs, by id (`lme.tracking.runs.serve_run`)
    while True:
        try:
            kind, value = inbox.get(timeout=0.5) if pending else inbox.get()
        except queue.Empty:
            if store is not None:
                store.write(pending)
            pending = []
            continue
        if kind == "trace":
            pending.append(value)
            if len(pending) >= BATCH or inbox.empty():
                if store is not None:
                    store.write(pending)
                pending = []
        elif kind == "job":
            store = _Store(value)
        elif kind == "warm":  # the study is starting up: import what its runs and first traces need
            try:
                import_store_modules(value)
                code_tags()  # git and package versions, once: every run's tags
            except Exception:  # noqa: BLE001 - the first call that needs the store says what is wrong
                pass
        elif kind == "later":  # a run request the study does not wait for (lme.tracking.runs.RemoteRun.later)
            try:
                serve_run(runs, value)
            except Exception as exc:  # noqa: BLE001 - a record of the run, never a reason to stop it
                print(f"lme: warning: MLflow: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr, flush=True)
        elif kind == "call":
            number, asked, payload = value
            if asked == "close":  # the job's traces: those still pending written first
                if store is not None:
                    store.write(pending)
                    store.close()
                answer(answers, number, True, (store.written, store.failed, store.cpu_s) if store is not None
                       else (0, "no job was started", 0.0))
                store, pending = None, []
            else:
                try:
                    result = serve_run(runs, payload)
                except LmeError as exc:  # lme's own sentence (lme.tracking.runs.check_store, store_failure), as it is
                    answer(answers, number, False, first_line(exc))
                except Exception as exc:  # noqa: BLE001 - the study's process raises it, in one sentence
                    answer(answers, number, False, f"MLflow: {type(exc).__name__}: {first_line(exc)}")
                else:
                    answer(answers, number, True, result)
        elif kind == "end":
            if store is not None:
                store.write(pending)
                store.close()
            return


class _Store:
    """The helper's side: one MLflow tracking store, the text registry, what was written, why it stopped."""

    def __init__(self, setup: WriterSetup) -> None:
        self.setup = setup
        self.full = setup.settings.traces == "full"
        self.written = 0
        self.cpu_s = 0.0  # the helper's CPU time building and storing this job's traces
        self.failed: str | None = None
        self.registry: TextRegistry | None = None
        try:
            client = client_for(setup.settings)
            self.store = client._tracking_client.store  # the store's own start_trace/log_spans (MLflow 3)
            if setup.registry is not None:
                created = client.get_experiment(setup.experiment).creation_time
                try:
                    self.registry = TextRegistry(setup.registry,
                                                 f"{setup.settings.uri}#{setup.experiment}@{created}")
                except StoreError as exc:
                    self._without_registry(exc)
        except Exception as exc:  # noqa: BLE001 - a trace is a record of the run, never a reason to stop it
            self._give_up(exc)

    def _without_registry(self, exc: StoreError) -> None:
        """A faulty `traces.sqlite` (damaged, a directory, locked, a full disk): the traces go on without it,
        each text stored in full (the registry only saves room), and the file is left as it is."""
        self.registry = None
        print(f"lme: warning: {exc} Until then traces are written without it: each memory text is stored in "
              "full in its trace, nothing is lost.", file=sys.stderr, flush=True)

    def _give_up(self, exc: Exception) -> None:
        self.failed = f"{type(exc).__name__}: {first_line(exc)}"  # the job says so when it closes its writer

    def write(self, batch: list[TraceInput]) -> None:
        if self.failed is not None or not batch:
            return
        started = time.process_time()
        try:
            self._write(batch)
        finally:
            self.cpu_s += time.process_time() - started

    def _write(self, batch: list[TraceInput]) -> None:
        from mlflow.entities import Span

        try:
            held: dict[str, str] = {}  # texts this batch stores, by digest
            built = [self._build(item, held) for item in batch]
            for info, _ in built:
                self.store.start_trace(info)
            self.store.log_spans(self.setup.experiment,
                                 [Span.from_dict(span) for _, trace in built for span in trace.spans])
            if self.registry is not None and held:
                try:
                    self.registry.record(held)
                except StoreError as exc:  # the batch's traces are stored whole: only the sharing is lost
                    registry, self.registry = self.registry, None
                    registry.close()
                    self._without_registry(exc)
            self.written += len(batch)
        except Exception as exc:  # noqa: BLE001
            self._give_up(exc)

    def close(self) -> None:
        if self.registry is not None:
            self.registry.close()

    def _holder(self, sha: str, held: Mapping[str, str]) -> str | None:
        if sha in held:
            return held[sha]
        if self.registry is None:
            return None
        try:
            return self.registry.holder(sha)
        except StoreError as exc:
            registry, self.registry = self.registry, None
            registry.close()
            self._without_registry(exc)
            return None

    def _build(self, item: TraceInput, held: dict[str, str]):
        """A question's trace info and spans: the root, then its memories (with their retrieval), reader calls and
        judge calls below it; `held` gains the texts this trace stores."""
        trace = _Trace()
        verdict = item.outcome.verdict
        inputs = clean({"question": item.question, "question_date": item.question_date})  # the previews' texts too
        outputs = clean({"answer": item.outcome.answer, "verdict": verdict})
        root = trace.span(f"question {item.question_id}", "CHAIN", None, inputs, outputs,
                          {"lme.question_id": item.question_id, "lme.question_type": item.question_type},
                          item.record.start_ns, item.record.end_ns)
        tokens = {"input_tokens": 0, "output_tokens": 0}
        # reader spans first decide which messages this trace stores; the memory spans are added before them
        reads, dollars = self._planned_reads(item, trace, held, tokens)
        self._memory_spans(item, trace, root, reads, held)
        for read, span_inputs, span_outputs, attributes, _ in reads:
            trace.span(f"reader {read.step}", "CHAT_MODEL", root, span_inputs, span_outputs, attributes,
                       read.start_ns, read.end_ns, error=read.call.error)
        dollars = self._judge_spans(item, trace, root, tokens, dollars)
        return self._info(item, trace, inputs, outputs, verdict, tokens, dollars), trace

    def _planned_reads(self, item: TraceInput, trace: _Trace, held: dict[str, str],
                       tokens: dict[str, int]) -> tuple[list[tuple[Any, dict[str, Any], dict[str, Any],
                                                                   dict[str, Any], bool]], float]:
        """Each reader call's span inputs (its messages, or their digest and the trace holding them), outputs and
        attributes, and whether this trace stores its messages; its tokens added to `tokens`, its dollars summed."""
        reads = []
        dollars = 0.0
        for read in item.record.reads:
            call = read.call
            sha = messages_sha256(read.messages)
            attributes = _read_attributes(read, sha)
            stored = False
            if not self.full:
                span_inputs: dict[str, Any] = {"messages_sha256": sha}
            elif (holder := self._holder(sha, held)) is not None and holder != trace.trace_id:
                span_inputs = {"messages_sha256": sha, "messages_in_trace": holder}
            else:
                span_inputs, stored = {"messages": read.messages}, True
                held[sha] = trace.trace_id
            span_outputs = {"answer": call.text, "error": call.error, **({"refusal": call.refusal} if call.refusal else {})}
            reads.append((read, span_inputs, span_outputs, attributes, stored))
            tokens["input_tokens"] += call.input_tokens
            tokens["output_tokens"] += call.output_tokens
            dollars += call.cost_usd or 0.0
        return reads, dollars

    def _memory_spans(self, item: TraceInput, trace: _Trace, root: str, reads: list[tuple[Any, ...]],
                      held: dict[str, str]) -> None:
        """A span per memory built (its text, or where it is: a reader span or another trace), each with its
        retrieval's top turns below it."""
        for event in item.record.memories:
            memory = event.memory
            sha = sha256_text(memory.text)
            attributes = {"view": event.view, "bytes": memory.n_bytes, "turns": len(memory.turn_ids),
                          "skipped_turns": len(memory.skipped_turn_ids), "sha256": sha,
                          "top_turn_ids": list(memory.turn_ids[:TOP_TURNS]),
                          **{f"note.{k}": v for k, v in memory.notes.items() if k not in SPAN_NOTES}}
            memory_outputs: dict[str, Any] = {"sha256": sha, "bytes": memory.n_bytes}
            if self.full:
                memory_outputs = self._memory_text(memory.text, sha, memory_outputs, trace, reads, held)
            memory_span = trace.span(f"memory {event.view}", "MEMORY", root, {"question_id": item.question_id},
                                     memory_outputs, attributes, event.start_ns, event.end_ns)
            if memory.ranking is not None:
                ranking = memory.ranking
                top = [{"id": turn_id, "score": round(float(score), 6)}
                       for turn_id, score in zip(ranking.turn_ids[:TOP_TURNS], ranking.scores[:TOP_TURNS])]
                trace.span(f"retrieve {ranking.retriever}", "RETRIEVER", memory_span, {"query": item.question},
                           top, {"retriever": ranking.retriever, "ranked": len(ranking.turn_ids)},
                           event.start_ns, event.end_ns)
            if "system_results" in memory.notes:
                self._system_span(item, trace, memory_span, memory, event)

    def _system_span(self, item: TraceInput, trace: _Trace, parent: str, memory: Any, event: Any) -> None:
        """A memory system's search: every result it returned, in its order, before packing (`full`: with their
        texts; `metadata`: ids, scores and each text's SHA-256), and how many the reader got."""
        notes = memory.notes
        try:
            results = json.loads(notes["system_results"])
        except ValueError:
            results = []
        if not self.full:
            results = [{"id": r.get("id"), "score": r.get("score"), "text_sha256": sha256_text(str(r.get("text")))}
                       for r in results if isinstance(r, dict)]
        attributes = {key: notes[key] for key in ("system", "namespace", "top_k", "results", "included",
                                                  "search_latency_ms", "search_calls") if key in notes}
        trace.span(f"search {notes.get('system', 'system')}", "RETRIEVER", parent,
                   {"query": item.question, "top_k": notes.get("top_k")}, {"results": results},
                   {**attributes, "included_ids": list(memory.turn_ids[:TOP_TURNS])}, event.start_ns, event.end_ns)

    def _memory_text(self, text: str, sha: str, memory_outputs: dict[str, Any], trace: _Trace,
                     reads: list[tuple[Any, ...]], held: dict[str, str]) -> dict[str, Any]:
        """A full trace's memory outputs: where its text is (a reader span of this trace that stores it, another
        trace), else the text itself, held by this trace."""
        in_reader = next((read.step for read, _, _, _, stored in reads if stored and any(
            text in str(m.get("content", "")) for m in read.messages)), None) if text else None
        if in_reader is not None:
            memory_outputs["text_in_span"] = f"reader {in_reader}"
            held.setdefault(sha, trace.trace_id)
        elif (holder := self._holder(sha, held)) is not None and holder != trace.trace_id:
            memory_outputs["text_in_trace"] = holder
        else:
            memory_outputs = {"text": text}
            held[sha] = trace.trace_id
        return memory_outputs

    def _judge_spans(self, item: TraceInput, trace: _Trace, root: str, tokens: dict[str, int],
                     dollars: float) -> float:
        """A span per judge call (its prompt, or its digest), its tokens added to `tokens`; `dollars` plus theirs."""
        for judged, prompt in zip(item.record.verdicts, item.judge_prompts):
            call = judged.verdict.call
            attributes: dict[str, Any] = {"step": judged.step,
                                          "latency_s": round((judged.end_ns - judged.start_ns) / 1e9, 4)}
            if call is not None:
                attributes |= {"model": call.model, "from_cache": call.cached, "input_tokens": call.input_tokens,
                               "output_tokens": call.output_tokens, "cost_usd": call.cost_usd,
                               "mlflow.llm.cost": _cost(call.cost_usd)}
                tokens["input_tokens"] += call.input_tokens
                tokens["output_tokens"] += call.output_tokens
                dollars += call.cost_usd or 0.0
            span_inputs = {"prompt": prompt} if self.full else {"prompt_sha256": sha256_text(prompt or "")}
            span_outputs = {"reply": judged.verdict.reply, "correct": judged.verdict.correct,
                            "note": judged.verdict.note}
            trace.span(f"judge {judged.step}", "LLM", root, span_inputs, span_outputs, attributes,
                       judged.start_ns, judged.end_ns, error=judged.verdict.error)
        return dollars

    def _info(self, item: TraceInput, trace: _Trace, inputs: Any, outputs: Any, verdict: str,
              tokens: dict[str, int], dollars: float) -> Any:
        """The trace's `TraceInfo`: times, state, previews, token usage and cost, tags, the verdict as feedback."""
        from mlflow.entities import AssessmentSource, Feedback, TraceInfo, TraceLocation, TraceState

        setup, outcome, record = self.setup, item.outcome, item.record
        assessments = []
        if outcome.answer is not None and not outcome.judge_error:  # no verdict: the lme.verdict tag says missing
            source = AssessmentSource(source_type=setup.source[0], source_id=setup.source[1])
            assessments.append(Feedback(name="correct", value=bool(outcome.correct), source=source,
                                        rationale=clean(outcome.judge_reply or outcome.judge_note or None),
                                        trace_id=trace.trace_id))
        request_preview = json.dumps(inputs, ensure_ascii=False)[:1000]
        response_preview = json.dumps(outputs, ensure_ascii=False)[:1000]
        start_ms = record.start_ns // 1_000_000
        tokens["total_tokens"] = tokens["input_tokens"] + tokens["output_tokens"]
        return TraceInfo(
            trace_id=trace.trace_id,
            trace_location=TraceLocation.from_experiment_id(setup.experiment),
            request_time=start_ms or int(time.time() * 1000),
            execution_duration=max(record.end_ns - record.start_ns, 0) // 1_000_000,
            state=TraceState.ERROR if verdict == "missing" else TraceState.OK,
            request_preview=request_preview,
            response_preview=response_preview,
            trace_metadata={"mlflow.sourceRun": setup.run_id, "mlflow.trace_schema.version": "3",
                            "mlflow.traceInputs": request_preview, "mlflow.traceOutputs": response_preview,
                            "mlflow.trace.tokenUsage": json.dumps(tokens),
                            "mlflow.trace.cost": json.dumps({"total_cost": round(dollars, 10)})},
            tags={**clean(setup.tags), "mlflow.traceName": f"question {item.question_id}",
                  "mlflow.trace.spansLocation": "TRACKING_STORE", "lme.question_id": item.question_id,
                  "lme.question_type": item.question_type, "lme.verdict": verdict},
            assessments=assessments,
        )


def _read_attributes(read: Any, sha: str) -> dict[str, Any]:
    """A reader span's attributes: step, view, model, attempts, cache, tokens, cost, latency, messages digest."""
    call = read.call
    return {"step": read.step, "view": read.view, "model": call.model, "attempt": read.attempt,
            "gateway_attempts": call.attempts, "from_cache": call.cached,
            "input_tokens": call.input_tokens, "output_tokens": call.output_tokens,
            "cached_input_tokens": call.cached_input_tokens, "reasoning_tokens": call.reasoning_tokens,
            "cost_usd": call.cost_usd, "latency_s": round((read.end_ns - read.start_ns) / 1e9, 4),
            "messages_sha256": sha, "mlflow.llm.model": call.model,
            "mlflow.chat.tokenUsage": {"input_tokens": call.input_tokens,
                                       "output_tokens": call.output_tokens,
                                       "total_tokens": call.input_tokens + call.output_tokens},
            # lme's own price (set, MLflow would price the call itself, importing litellm per helper)
            "mlflow.llm.cost": _cost(call.cost_usd)}
