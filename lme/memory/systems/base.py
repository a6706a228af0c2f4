"""The adapter protocol of an external memory system, and the memory builder that runs one.

A system (`MemorySystem`) has four calls:

- `ingest(namespace, sessions)`: store a history's sessions (in date order, each with its date and its turns'
  role, speaker and text) in the namespace, in the system's own unit (one call per session, or several sessions
  a call); it yields each session's id as the system acknowledges it;
- `ready(namespace)`: whether everything ingested is searchable (a system that indexes or extracts in the
  background says no until it has);
- `search(namespace, question_text, top_k)`: the system's results (`Result`: text, score, id), in its order;
- `settings()`: every setting that changes what the system stores (plain JSON values); their digest keys the
  ingestion.

`SystemMemoryBuilder` makes a system one more memory builder. Each history gets its own namespace, named by the
digest of the history's content (every session's date and turns' role, speaker and text), the system's name and
its settings: the same history under the same system and settings is ingested once, shared by seeds, designs
and reruns; a changed setting ingests again into a new namespace; two histories never share one. The ingestion
journal (`lme.memory.systems.journal`) records each session as it is acknowledged, so a killed ingestion resumes
at the next session, and marks a finished namespace done; one job at a time ingests a namespace (a claim in the
journal), the others wait for it. Then the builder polls `ready` every `poll_interval_s` until it says yes (past
`ready_timeout_s` the question fails, `MemoryFailed`, and is never searched), searches with the question's text,
and hands the reader the system's results as returned, `[<id>] (score <score>) <text>` blocks in the system's
order, packed whole within `max_bytes` (`lme.memory.retrieved.pack_blocks`). Its notes say how many sessions were
ingested now and how many were already there, how long the wait for readiness and the search took, and how many
results the system returned.

Measured like every other memory: a system that makes model calls through lme's gateway (`attach_gateway`) hands
them over with `take_calls()`; the builder takes them after ingesting and after searching. The notes say what this
build's ingestion cost (`ingest_s`: seconds spent in the system's `ingest`, "0.000" when every session was already
there; `ingest_calls`, `ingest_input_tokens`, `ingest_output_tokens`, `ingest_cost_usd`: the calls taken after
ingesting; `ingest_reported_cost_usd`: what a hosted system says its ingestion cost, when it says,
`reported_cost_usd(namespace)`), what the search cost (`search_calls`, `search_cost_usd`) and every result the
system returned before packing (`system_results`: a JSON list of `{"id", "score", "text"}` in its order; the trace
shows it beside the memory the reader got). `Memory.model_calls` carries the calls taken (ingestion and search), so
the question's outcome counts them as it counts a model-built memory's; a build that fails after some calls were
made raises `MemoryFailed` with them. The job counts a history's ingestion once, on the question whose build
ingested it (`ingested_now` > 0): `lme.reporting.measures.system_metrics`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lme.data.records import Question
from lme.memory.base import Memory, MemoryFailed
from lme.memory.retrieved import pack_blocks
from lme.memory.systems.journal import IngestionJournal
from lme.util.budget import utf8_len
from lme.util.errors import LmeError
from lme.util.hashing import canonical_json, sha256_json

NAMESPACE_PREFIX = "lme-"


@dataclass(frozen=True)
class SystemTurn:
    """One message as a system gets it: who spoke (role, and the speaker's name where the benchmark has one)."""

    role: str
    speaker: str | None
    text: str


@dataclass(frozen=True)
class SystemSession:
    """One session of a history: its neutral id, date and turns, in order."""

    session_id: str
    date: datetime
    turns: tuple[SystemTurn, ...]


@dataclass(frozen=True)
class Result:
    """One search result as the system returns it."""

    text: str
    score: float | None
    id: str


class MemorySystem(Protocol):
    name: str

    def settings(self) -> Mapping[str, Any]:
        ...

    def ingest(self, namespace: str, sessions: Sequence[SystemSession]) -> Iterable[str]:
        ...

    def ready(self, namespace: str) -> bool:
        ...

    def search(self, namespace: str, question_text: str, top_k: int) -> list[Result]:
        ...


def system_sessions(question: Question) -> tuple[SystemSession, ...]:
    """The question's history as a system gets it: sessions in date order, neutral ids, no evidence flags."""
    return tuple(
        SystemSession(session.session_id, session.date,
                      tuple(SystemTurn(turn.role, turn.speaker, turn.content) for turn in session.turns))
        for session in question.sessions)


def history_content(sessions: Sequence[SystemSession]) -> list[Any]:
    """What a namespace's digest reads of a history: each session's date and its turns' role, speaker and text."""
    return [{"date": session.date.isoformat(), "turns": [[turn.role, turn.speaker, turn.text] for turn in session.turns]}
            for session in sessions]


def namespace_for(sessions: Sequence[SystemSession], system: str, settings: Mapping[str, Any]) -> str:
    """The history's namespace under the system and its settings: `lme-` and 32 hex digits of their digest."""
    digest = sha256_json({"history": history_content(sessions), "system": system, "settings": dict(settings)})
    return NAMESPACE_PREFIX + digest[:32]


def format_result(result: Result) -> str:
    """`[<id>] (score 12.3457) <text>` (no score: `[<id>] <text>`)."""
    score = f" (score {result.score:.4f})" if result.score is not None else ""
    return f"[{result.id}]{score} {result.text}"


@dataclass(frozen=True)
class Ingestion:
    """What ingesting a namespace did: sessions sent and acknowledged now, those already there, and the seconds
    spent in the system's `ingest` (waiting for another job's claim is not ingesting)."""

    now: int
    reused: int
    seconds: float = 0.0


def take_calls(system: Any) -> tuple[Any, ...]:
    """The model calls `system` made through lme's gateway since the last take (`take_calls()`, optional: a
    system without it makes no calls lme pays for)."""
    take = getattr(system, "take_calls", None)
    return tuple(take()) if callable(take) else ()


def calls_notes(prefix: str, calls: Sequence[Any]) -> dict[str, str]:
    """`<prefix>_calls`, `_input_tokens`, `_output_tokens` and `_cost_usd` (list price; an unpriced call adds 0)
    of `calls`, as notes."""
    return {
        f"{prefix}_calls": str(len(calls)),
        f"{prefix}_input_tokens": str(sum(int(call.input_tokens) for call in calls)),
        f"{prefix}_output_tokens": str(sum(int(call.output_tokens) for call in calls)),
        f"{prefix}_cost_usd": f"{sum(float(call.cost_usd or 0.0) for call in calls):.8f}",
    }


def results_json(results: Sequence[Result]) -> str:
    """Every result as the system returned it, in its order: `[{"id", "score", "text"}, ...]` (for the trace)."""
    return json.dumps([{"id": result.id, "score": result.score, "text": result.text} for result in results],
                      ensure_ascii=False)


class SystemMemoryBuilder:
    """A memory built by an external memory system's search (see the module's docstring). `cache_path` is the
    ingestion journal's file (`<cache_dir>/memory_systems.sqlite` in the config: a run-only key, like the other
    stores' paths). `retriever` is accepted (every memory builder is given one) and never read."""

    describes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, system: MemorySystem, cache_path: str | Path, retriever: Any = None, top_k: int = 100,
                 max_bytes: int = 96_000, ready_timeout_s: float = 600.0, poll_interval_s: float = 0.5,
                 name: str = "system") -> None:
        for key, value in (("top_k", top_k), ("max_bytes", max_bytes)):
            if not isinstance(value, int) or value < 0:
                raise LmeError(f"memory.{key}: expected a whole number >= 0, got {value!r}.")
        for key, value in (("ready_timeout_s", ready_timeout_s), ("poll_interval_s", poll_interval_s)):
            if not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
                raise LmeError(f"memory.{key}: expected a number of seconds >= 0, got {value!r}.")
        self.system = system
        self.name = name
        self.top_k, self.max_bytes = top_k, max_bytes
        self.ready_timeout_s, self.poll_interval_s = float(ready_timeout_s), float(poll_interval_s)
        self.journal_path = Path(cache_path)
        settings = dict(system.settings())
        self._settings_json = canonical_json(settings)  # fails now on a setting that is not plain JSON
        self._settings = settings
        self._journal: IngestionJournal | None = None
        self._opening = threading.Lock()

    def journal(self) -> IngestionJournal:
        """The ingestion journal, opened at the first question (a builder that only composes creates no file)."""
        with self._opening:
            if self._journal is None:
                self._journal = IngestionJournal(self.journal_path)
            return self._journal

    def namespace(self, question: Question) -> str:
        return namespace_for(system_sessions(question), self.system.name, self._settings)

    def plan_only(self) -> None:
        """For `lme estimate`: from now on `build` ingests and searches nothing (an ingestion may cost model calls)
        and gives the largest memory the reader could get, `max_bytes` of words, so the reader's input is
        counted at its most."""
        self._planning = True

    def build(self, question: Question) -> Memory:
        if getattr(self, "_planning", False):
            text = ("word " * (self.max_bytes // 5)).rstrip()
            return Memory(text=text, n_bytes=utf8_len(text), turn_ids=(),
                          notes={"system": self.system.name, "planned": "not ingested or searched (an estimate)"})
        sessions = system_sessions(question)
        namespace = namespace_for(sessions, self.system.name, self._settings)
        ingest_calls: tuple[Any, ...] = ()
        try:
            try:
                ingestion = self._ingest(namespace, sessions)
            finally:
                ingest_calls = take_calls(self.system)
            reported = self._reported_cost(namespace) if ingestion.now else None
            waited = self._wait_ready(namespace)
            begun = time.perf_counter()
            results = self._call("search", lambda: list(self.system.search(namespace, question.question, self.top_k)))
            latency = time.perf_counter() - begun
        except MemoryFailed as failed:  # the calls made before it failed count (their tokens and dollars)
            raise MemoryFailed(failed.step, failed.model, failed.reason,
                               (*failed.calls, *ingest_calls, *take_calls(self.system))) from failed
        search_calls = take_calls(self.system)
        blocks = [(result.id, format_result(result)) for result in results[: self.top_k]]
        text, included, skipped = pack_blocks(blocks, self.max_bytes)
        search_notes = calls_notes("search", search_calls)
        return Memory(
            text=text, n_bytes=utf8_len(text), turn_ids=tuple(included), skipped_turn_ids=tuple(skipped),
            notes={
                "builder": self.name, "system": self.system.name, "namespace": namespace,
                "sessions": str(len(sessions)), "ingested_now": str(ingestion.now),
                "ingested_reused": str(ingestion.reused), "ready_wait_s": f"{waited:.3f}",
                "search_latency_ms": f"{latency * 1000:.1f}", "results": str(len(results)),
                "included": str(len(included)), "top_k": str(self.top_k), "max_bytes": str(self.max_bytes),
                "ingest_s": f"{ingestion.seconds:.3f}", **calls_notes("ingest", ingest_calls),
                **({"ingest_reported_cost_usd": f"{reported:.8f}"} if reported is not None else {}),
                "search_calls": search_notes["search_calls"], "search_cost_usd": search_notes["search_cost_usd"],
                "system_results": results_json(results),
            },
            model_calls=(*ingest_calls, *search_calls),
        )

    def _reported_cost(self, namespace: str) -> float | None:
        """What the system says ingesting the namespace cost (`reported_cost_usd(namespace)`, optional: a hosted
        system that reports its own cost); None when it does not say."""
        report = getattr(self.system, "reported_cost_usd", None)
        if not callable(report):
            return None
        value = self._call("reported_cost_usd", lambda: report(namespace))
        return None if value is None else float(value)

    def _ingest(self, namespace: str, sessions: Sequence[SystemSession]) -> Ingestion:
        """Ingest what the journal does not hold yet, under the namespace's claim; wait while another job does."""
        journal = self.journal()
        journal.register(namespace, self.system.name, self._settings_json, len(sessions))
        now, seconds = 0, 0.0
        while True:
            state = journal.state(namespace)
            if state.done:
                return Ingestion(now=now, reused=len(sessions) - now, seconds=seconds)
            token = journal.claim(namespace)
            if token is None:  # another job ingests it: wait for it to finish (or die, which frees its claim)
                time.sleep(max(self.poll_interval_s, 0.01))
                continue
            try:
                state = journal.state(namespace)  # what the claim's last holder left
                missing = [session for session in sessions if session.session_id not in state.acknowledged]
                begun = time.perf_counter()
                try:
                    now += len(self._call("ingest", lambda: list(_drain(self.system.ingest(namespace, missing),
                                                                             journal, namespace))))
                finally:
                    seconds += time.perf_counter() - begun
                left = [s.session_id for s in sessions if s.session_id not in journal.state(namespace).acknowledged]
                if left:
                    raise MemoryFailed(self.name, self.system.name,
                                       f"SystemIngestIncomplete: memory system {self.system.name} did not acknowledge "
                                       f"{len(left)} session(s) of namespace {namespace} (first: {left[0]})")
                journal.finish(namespace)
            finally:
                journal.release(namespace, token)

    def _wait_ready(self, namespace: str) -> float:
        """Poll `ready` until it says yes; past `ready_timeout_s`, `MemoryFailed` (the question is never searched)."""
        begun = time.monotonic()
        deadline = begun + self.ready_timeout_s
        while not self._call("ready", lambda: bool(self.system.ready(namespace))):
            if time.monotonic() >= deadline:
                raise MemoryFailed(
                    self.name, self.system.name,
                    f"SystemNotReady: memory system {self.system.name} did not report namespace {namespace} "
                    f"searchable within {self.ready_timeout_s:g} s (ready_timeout_s), so the question was not "
                    "searched")
            time.sleep(max(0.0, min(self.poll_interval_s, deadline - time.monotonic())))
        return time.monotonic() - begun

    def _call(self, what: str, call: Any) -> Any:
        """A system call; a failure that is not lme's own sentence (`LmeError`) fails the question (`MemoryFailed`)."""
        try:
            return call()
        except LmeError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the system's own code fails this question
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise MemoryFailed(self.name, self.system.name,
                               f"{type(exc).__name__}: memory system {self.system.name} failed in {what}: {detail}"
                               ) from exc


def _drain(acknowledged: Iterable[str], journal: IngestionJournal, namespace: str) -> Iterator[str]:
    """Each session id the system acknowledges, recorded in the journal before the next one is sent."""
    for session_id in acknowledged:
        journal.acknowledge(namespace, str(session_id))
        yield str(session_id)


def require_package(system: str, module: str, distribution: str) -> None:
    """Refuse, at composition and before anything runs, a system whose Python package is not installed: one
    sentence naming it and the install command (`find_spec` imports nothing: Mem0's import takes seconds)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
        found = False
    if not found:
        raise LmeError(f"memory system {system} needs the Python package {distribution}, which is not installed: "
                       f"pip install -e \".[systems]\" (or pip install {distribution}).")


def system_builders(builders: Iterable[Any]) -> list[SystemMemoryBuilder]:
    """The memory-system builders among `builders`, or wrapped in one (`.builder`: the job's reused memory;
    `.inner`: a model-built memory over one), once each."""
    found: dict[int, SystemMemoryBuilder] = {}
    for builder in builders:
        for _ in range(8):
            if builder is None:
                break
            if isinstance(builder, SystemMemoryBuilder):
                found[id(builder)] = builder
            builder = getattr(builder, "builder", None) or getattr(builder, "inner", None)
    return list(found.values())


def attach_gateway(builders: Iterable[Any], gateway: Any) -> None:
    """Give every system among `builders` (or wrapped in one) that makes model calls or checks its key before the
    first question (it has `attach_gateway`: Mem0's adapter, the hosted ones) the job's gateway, so its calls use
    the job's call cache, ledger, caps, retries and trace."""
    for builder in system_builders(builders):
        attach = getattr(builder.system, "attach_gateway", None)
        if callable(attach):
            attach(gateway)
