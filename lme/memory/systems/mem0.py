"""Mem0, open source (mem0ai 2.2.1), run locally as a memory system (`MemorySystem`).

**Storage.** Each namespace (one history under one set of settings) is its own folder under `index_dir`:
Qdrant in local mode (`qdrant/`, on disk), Mem0's history database (`history.db`) and lme's record of what was
added (`lme_sessions.sqlite`). Qdrant's local mode locks its folder for as long as a client has it open, so the
adapter opens a namespace's Memory only under an exclusive lock on the folder (`flock`, released when the
process dies) and closes it after each ingestion and each search: two threads or processes never open one
folder at once, and a namespace never sees another's memories (its own folder, and every call scoped to
`user_id` = the namespace).

**Ingestion.** One `Memory.add` per session, in date order, with the session's messages (role kept; a turn
with a speaker's name, as LoCoMo's, reads `Name: text`, Mem0's own LoCoMo harness's form, and carries `name`)
and metadata `lme_session`, `lme_date`. In mem0ai 2.2.1 an `add` with `infer` on makes exactly one LLM call
(its additive extraction, JSON reply `{"memory": [...]}`) and only ever adds memories; with `infer` off it
stores each message as it is, with no call. Mem0's open-source `add` refuses a timestamp, so its prompt would
carry today's date: its LLM is lme's (`mem0_bridge.GatewayLlm`), which sets the prompt's `Observation Date` and
`Current Date` to the session's day and sends the call through the job's gateway (`attach_gateway`: the call
cache, the ledger, caps, retries, the trace), or, for an offline stand-in with no job, a private `Gateway()`.
The calls made are handed to the builder by `take_calls` (per thread: each question's own).

**Paying nothing twice.** Mem0's prompt for a session also holds the namespace's last messages (its `messages`
table, wall-clock ordered) and the existing memories closest to the session. The adapter makes both a function
of the history: before each `add` it sets the namespace's last messages to the last ten of the previous session
added (kept in `lme_sessions.sqlite`), and a session that was added but whose acknowledgement was lost (a
process killed between Mem0's write and the ingestion journal's) has its memories deleted (by `lme_session`)
before it is added again. So a killed ingestion's rerun sends the same prompts, which the call cache answers,
and ends with the same memories (Mem0's memory ids are random; results carry `<session id>#<n>` instead).

**Search.** `Memory.search` (no LLM call) with the question's text, `top_k` and `threshold`; each result is
`Result(text, score, id)` in Mem0's order, its text opened with the session's date when `result_dates` is on
(Mem0's platform keeps a memory's timestamp; the reader needs the date to reason about time).

`settings()` (the namespace's key): mem0ai's version, `infer`, `custom_instructions`, the LLM's model and
parameters, the embedder, and the adapter's own ingestion form; the search's `threshold` and `result_dates`
change only what is found, so they key the design's digest (they are config values) but not the namespace.

mem0 takes seconds to import: it is imported at the first namespace opened, after `MEM0_TELEMETRY=False` and
`MEM0_DIR` (Mem0's own folder, else `~/.mem0`: `<index_dir>/home` unless set) are in the environment.
"""

from __future__ import annotations

import errno
import fcntl
import importlib.metadata
import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lme.data.dates import format_moment
from lme.memory.base import MemoryFailed
from lme.memory.systems.base import Result, SystemSession, SystemTurn, require_package
from lme.models.gateway import CallResult, Gateway
from lme.models.spec import ModelSpec
from lme.util.errors import LmeError
from lme.util.sqlite import StoreConnection, StoreError, StoreKind, immediate, open_store, store_error

INGESTION_FORM = "one add per session; last 10 messages of the previous session; Name: text"
CONTEXT_MESSAGES = 10  # Mem0 keeps and shows this many last messages of a scope
SIDECAR_FILE = "lme_sessions.sqlite"
LOCK_FILE = "lme.lock"  # flock'ed while the namespace's Memory is open (an empty file)
HISTORY_FILE = "history.db"  # Mem0's history database (mem0_bridge.open_memory puts it here)
QDRANT_FOLDER = "qdrant"  # Qdrant's local storage (mem0_bridge.open_memory)
QDRANT_COLLECTION = "memories"  # its one collection (mem0_bridge.COLLECTION; named here without importing Mem0)
_MOVE_AWAY = ("move the namespace's folder {folder} away together with the ingestion journal (memory_systems.sqlite "
              "beside it in the cache folder): the histories are then ingested again")

_QDRANT_HELD = re.compile(r"Storage folder (.+) is already accessed by another instance of Qdrant client")
_DATED_SECTION = re.compile(r"(## (?:Observation Date|Current Date)\n)[^\n]*")
_TODAY_IS = re.compile(r"(Today's date is )\d{4}-\d{2}-\d{2}")

SIDECAR = StoreKind(
    "Mem0 namespace's record of added sessions", """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, date TEXT NOT NULL, context TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    memory_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, position INTEGER NOT NULL);
""",
    {"sessions": ("session_id", "seq", "date", "context"), "memories": ("memory_id", "session_id", "position")},
    "the namespace's Mem0 folder must be moved away with it, and the ingestion journal (memory_systems.sqlite) "
    "too: the history is then ingested again",
    numbers={"sessions": ("seq",), "memories": ("position",)},
)

# Mem0's own stores, for their one sentence (`lme.util.sqlite.store_error` sorts the fault; `_mem0_store_error` says it)
HISTORY = StoreKind("Mem0 history database", "", {},
                    "move the file away: Mem0 starts a new one (it holds Mem0's log of changes and the last messages, "
                    "which lme sets before each add: nothing a search uses)")
QDRANT = StoreKind("Mem0 vector store (Qdrant local folder)", "", {}, _MOVE_AWAY)

_IMPORTED = threading.Lock()


def prompt_dated(text: str, day: str) -> str:
    """Mem0's prompt with its observation and current dates (and any "Today's date is") set to `day`."""
    return _TODAY_IS.sub(lambda m: m.group(1) + day, _DATED_SECTION.sub(lambda m: m.group(1) + day, text))


def session_messages(session: SystemSession) -> list[dict[str, str]]:
    """A session's turns as Mem0 messages: role and text; a named speaker's as `Name: text` with `name`."""
    return [message(turn) for turn in session.turns]


def message(turn: SystemTurn) -> dict[str, str]:
    if turn.speaker:
        return {"role": turn.role, "content": f"{turn.speaker}: {turn.text}", "name": turn.speaker}
    return {"role": turn.role, "content": turn.text}


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _lme_error_in(exc: BaseException) -> LmeError | None:
    """The first LmeError in `exc`'s chain (Mem0 wraps its LLM's failures in its own `LLMError`)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, LmeError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class Mem0System:
    """Mem0 open source on local disk (see the module's docstring)."""

    def __init__(self, index_dir: str | Path, model: ModelSpec, infer: bool = True, threshold: float = 0.1,
                 custom_instructions: str | None = None, embedder: str = "minilm-packaged",
                 result_dates: bool = True, name: str = "mem0") -> None:
        require_package(name, "mem0", "mem0ai==2.2.1")
        if not isinstance(model, ModelSpec):
            raise LmeError("memory.system.model: expected a model node (`_target_: lme.models.gateway.ModelSpec`).")
        if not isinstance(infer, bool):
            raise LmeError(f"memory.system.infer: expected true or false, got {infer!r}.")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise LmeError(f"memory.system.threshold: expected a number from 0 to 1, got {threshold!r}.")
        if custom_instructions is not None and not isinstance(custom_instructions, str):
            raise LmeError(f"memory.system.custom_instructions: expected a text or null, got {custom_instructions!r}.")
        from lme.retrieval.dense import resolve_model

        self.location = resolve_model(str(embedder))  # an unknown packaged model: one sentence now
        self.index_dir = Path(index_dir)
        self.model, self.infer, self.threshold = model, infer, float(threshold)
        self.custom_instructions = custom_instructions or None
        self.embedder, self.result_dates, self.name = str(embedder), bool(result_dates), name
        self.gateway: Gateway | None = None
        self._own: Gateway | None = None
        self._own_lock = threading.Lock()
        self._local = threading.local()
        self._dims: int | None = None

    # -- the protocol -----------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {
            "mem0ai": importlib.metadata.version("mem0ai"),
            "infer": self.infer,
            "custom_instructions": self.custom_instructions,
            "llm": {"model": self.model.model, "params": dict(self.model.params)} if self.infer else None,
            "embedder": self.location.model_id,
            "ingestion": INGESTION_FORM,
            # what Mem0 does with them when installed: spaCy lemmas and entities, fastembed's BM25 in search
            "optional": {package: _version(package) for package in ("spacy", "fastembed")},
        }

    def attach_gateway(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def take_calls(self) -> list[CallResult]:
        """The model calls this thread made since its last take (a question's ingestion, or its search: none)."""
        calls = getattr(self._local, "calls", [])
        self._local.calls = []
        return list(calls)

    def ready(self, namespace: str) -> bool:
        return True  # Mem0's open-source add is synchronous: what it acknowledged is searchable

    def ingest(self, namespace: str, sessions: Sequence[SystemSession]) -> Iterator[str]:
        """Add each session (one `Memory.add`), yielding its id once Mem0 and lme's record hold it. With no session
        (a history without one, or every one acknowledged) only lme's record is made: a namespace ingested has its
        folder, so one that vanished later is told apart (`search`)."""
        if not sessions:
            with self._locked(namespace) as folder:
                open_store(folder / SIDECAR_FILE, SIDECAR).close()
            return
        with self._opened(namespace) as (memory, sidecar):
            for session in sessions:
                self._add(namespace, memory, sidecar, session)
                yield session.session_id

    def search(self, namespace: str, question_text: str, top_k: int) -> list[Result]:
        if top_k <= 0:
            return []
        folder = self.index_dir / namespace
        if not (folder / SIDECAR_FILE).exists() and not (folder / SIDECAR_FILE).is_symlink():
            raise StoreError(
                f"{folder / SIDECAR_FILE}: lme's record of the Mem0 namespace is missing, though the ingestion "
                f"journal counts the history ingested; {_MOVE_AWAY.format(folder=folder)}.", folder / SIDECAR_FILE,
                "unreadable")
        with self._opened(namespace) as (memory, sidecar):
            with self._mem0_files(folder, "search"):
                found = memory.search(question_text, top_k=top_k, filters={"user_id": namespace},
                                      threshold=self.threshold)["results"]
            names = {row[0]: f"{row[1]}#{row[2]}" for row in sidecar.execute(
                "SELECT memory_id, session_id, position FROM memories")}
        results = []
        for item in found:
            metadata = item.get("metadata") or {}
            text = str(item.get("memory", ""))
            if self.result_dates and metadata.get("lme_date"):
                text = f"({format_moment(datetime.fromisoformat(str(metadata['lme_date'])))}) {text}"
            score = item.get("score")
            results.append(Result(text=text, score=float(score) if score is not None else None,
                                  id=names.get(str(item["id"]), str(item["id"]))))
        return results

    @property
    def extraction_spec(self) -> ModelSpec:
        """The model spec of Mem0's extraction calls as sent (its `response_format` is JSON): their call-cache keys
        are `call_key(spec.model, messages, spec.params, None)`, for an estimate to find them in the cache."""
        return replace(self.model, params={**self.model.params, "response_format": {"type": "json_object"}})

    def planned_requests(self, sessions: Sequence[SystemSession]) -> list[list[dict[str, str]]]:
        """For `lme estimate`: each session's extraction request as Mem0 would send it (dated, with the previous
        session's last messages), none sent. Mem0 also puts in it the existing memories closest to the session
        (up to ten), which exist only once earlier sessions are extracted: they are left out, so the requests
        are shorter than the real ones by those (a few hundred tokens each at most). No request with `infer` off."""
        if not self.infer:
            return []
        _set_mem0_environment(self.index_dir)
        try:
            from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, generate_additive_extraction_prompt
            from mem0.memory.utils import parse_messages
        except OSError as exc:  # Mem0 makes its folder (MEM0_DIR) when imported
            raise _mem0_dir_error(exc) from None

        requests: list[list[dict[str, str]]] = []
        context: list[dict[str, str]] = []
        for session in sessions:
            messages = session_messages(session)
            day = session.date.date().isoformat()
            user = generate_additive_extraction_prompt(existing_memories=[], new_messages=parse_messages(messages),
                                                       last_k_messages=context,
                                                       custom_instructions=self.custom_instructions)
            requests.append([{"role": "system", "content": prompt_dated(ADDITIVE_EXTRACTION_PROMPT, day)},
                             {"role": "user", "content": prompt_dated(user, day)}])
            context = [{"role": m["role"], "content": m["content"]} for m in messages][-CONTEXT_MESSAGES:]
        return requests

    # -- Mem0's LLM (mem0_bridge.GatewayLlm calls this) -------------------------------------------

    def complete(self, messages: list[dict[str, Any]], response_format: Any = None) -> str:
        """One Mem0 LLM request, dated to the session being added, through lme's gateway."""
        day = getattr(self._local, "day", None)
        if day is None:
            raise LmeError(f"memory system {self.name}: Mem0 asked its LLM outside an ingestion.")
        dated = [{**item, "content": prompt_dated(item["content"], day)} if isinstance(item.get("content"), str)
                 else dict(item) for item in messages]
        spec = self.model
        if response_format is not None:
            spec = replace(spec, params={**spec.params, "response_format": response_format})
        call = self._send(spec, dated)
        self._local.calls = [*getattr(self._local, "calls", []), call]
        if not call.ok or not (call.text or "").strip():
            reason = call.error or "EmptyAnswer: the model's reply holds no text"
            raise MemoryFailed(self.name, self.model.model, reason, (replace(call, text=None, error=reason),))
        return str(call.text)

    def _send(self, spec: ModelSpec, messages: list[dict[str, Any]]) -> CallResult:
        gateway = self.gateway
        if gateway is None:
            if not spec.is_offline:
                raise LmeError(f"memory system {self.name}: it calls {spec.model}, which needs a job's gateway "
                               "(its cache, ledger and caps); run the design instead.")
            with self._own_lock:  # an offline stand-in costs nothing: no cache or ledger needed
                if self._own is None:
                    self._own = Gateway()  # one for the system's life: its loop is not remade per call
            gateway = self._own
        return gateway.run_blocking(gateway.complete(spec, messages, seed=None))

    # -- one session ------------------------------------------------------------------------------

    def _add(self, namespace: str, memory: Any, sidecar: StoreConnection, session: SystemSession) -> None:
        with self._mem0_files(self.index_dir / namespace, "add"):
            self._forget(namespace, memory, sidecar, session.session_id)
        row = sidecar.execute("SELECT context, COALESCE((SELECT MAX(seq) FROM sessions), 0) FROM sessions "
                              "ORDER BY seq DESC LIMIT 1").fetchone()
        context = json.loads(row[0]) if row else []
        seq = (row[1] if row else 0) + 1
        with self._mem0_files(self.index_dir / namespace, "add"):
            _set_last_messages(memory, namespace, context)
        messages = session_messages(session)
        self._local.day = session.date.date().isoformat()
        try:
            added = memory.add(messages, user_id=namespace, infer=self.infer,
                               metadata={"lme_session": session.session_id, "lme_date": session.date.isoformat()})
        except Exception as exc:  # noqa: BLE001 - lme's own failure (a cap, a systemic one) is raised as itself
            found = _lme_error_in(exc)
            if found is not None:
                raise found from exc
            fault = _file_fault(exc, self.index_dir / namespace, opening=False)
            if fault is not None:
                raise fault from None
            raise
        finally:
            self._local.day = None
        kept = [{"role": item["role"], "content": item["content"]} for item in messages][-CONTEXT_MESSAGES:]
        with immediate(sidecar):
            sidecar.execute("INSERT INTO sessions (session_id, seq, date, context) VALUES (?, ?, ?, ?)",
                            (session.session_id, seq, session.date.isoformat(), json.dumps(kept)))
            sidecar.executemany("INSERT OR REPLACE INTO memories (memory_id, session_id, position) VALUES (?, ?, ?)",
                                [(str(item["id"]), session.session_id, position)
                                 for position, item in enumerate(added.get("results", []))])

    def _forget(self, namespace: str, memory: Any, sidecar: StoreConnection, session_id: str) -> None:
        """Delete what an earlier, unacknowledged add of the session left (its memories and lme's record)."""
        listed = memory.get_all(filters={"user_id": namespace, "lme_session": session_id}, top_k=100_000)["results"]
        for item in listed:
            memory.delete(item["id"])
        with immediate(sidecar):
            sidecar.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            sidecar.execute("DELETE FROM memories WHERE session_id = ?", (session_id,))

    # -- one namespace's Memory -------------------------------------------------------------------

    @contextmanager
    def _locked(self, namespace: str) -> Iterator[Path]:
        """The namespace's folder, made if absent, under an exclusive lock (`lme.lock`, released by close or by
        the process's death)."""
        folder = self.index_dir / namespace
        lock = folder / LOCK_FILE
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            where = lock if exc.errno in (errno.EISDIR, errno.ELOOP, errno.EIO) or folder.is_dir() else folder
            raise StoreError(f"{where}: the Mem0 namespace's lock file cannot be opened ({exc.strerror or exc}); "
                             "move it away (lme makes a new one) or make its folder writable.", where,
                             "unreadable") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield folder
        finally:
            os.close(handle)

    @contextmanager
    def _opened(self, namespace: str) -> Iterator[tuple[Any, StoreConnection]]:
        """The namespace's Memory and lme's record, under an exclusive lock on its folder; closed after. A fault
        of Mem0's own files (its history database, the Qdrant folder) is `StoreError` naming the file."""
        bridge = self._bridge()
        with self._locked(namespace) as folder:
            sidecar = open_store(folder / SIDECAR_FILE, SIDECAR)
            try:
                added = sidecar.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
                if added:
                    _check_vector_store(folder, added)
                with self._mem0_files(folder, "open", opening=True):
                    memory = bridge.open_memory(folder, self.embedder, self._dims or 384, self.custom_instructions,
                                                self)
                try:
                    yield memory, sidecar
                finally:
                    with self._mem0_files(folder, "close"):
                        bridge.close_memory(memory)
            finally:
                sidecar.close()

    @staticmethod
    @contextmanager
    def _mem0_files(folder: Path, doing: str, opening: bool = False) -> Iterator[None]:
        """Mem0's work on the namespace's files: a fault of one of them (corrupt, unreadable, locked, a full disk)
        is `StoreError`, one sentence naming the file; any other failure is raised as it is."""
        try:
            yield
        except LmeError:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted by `_file_fault`; the rest is raised as it was
            fault = _file_fault(exc, folder, opening=opening, doing=doing)
            if fault is None:
                raise
            raise fault from None

    def _bridge(self) -> Any:
        """`mem0_bridge`, imported once Mem0's environment is set, with this embedder registered."""
        with _IMPORTED:
            _set_mem0_environment(self.index_dir)
            try:
                from lme.memory.systems import mem0_bridge
            except OSError as exc:  # Mem0 makes its folder (MEM0_DIR) when imported
                raise _mem0_dir_error(exc) from None
            from lme.retrieval.dense import load_sentence_transformer

            model, lock = load_sentence_transformer(self.location, "cpu", None)
            mem0_bridge.register(self.embedder, model, lock)
            self._dims = int((getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)())
            return mem0_bridge


def _file_fault(exc: BaseException, folder: Path, opening: bool, doing: str = "use") -> StoreError | None:
    """The one sentence for a failure of Mem0's files in the namespace's `folder`, or None when `exc` is not one.
    Which file is told by where it was raised (Qdrant's code: its folder; Mem0's SQLiteManager: the history
    database) or by the path an `OSError` names. While the Memory is opened, anything Qdrant raises is its
    folder's fault (a file it cannot parse); later, only SQLite's and the system's I/O errors are."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error in chain:
        files = _raised_in(error)
        named = os.fsdecode(getattr(error, "filename", None) or "") if isinstance(error, OSError) else ""
        held = _QDRANT_HELD.search(str(error))
        if held:
            path = Path(held.group(1))
            return StoreError(f"{path}: another program (or another Qdrant client in this one) holds Qdrant's lock on "
                              "this folder (its .lock); stop it, then run again.", path, "locked")
        if (QDRANT_FOLDER in Path(named).parts) or any("qdrant_client" in name for name in files):
            if opening or isinstance(error, (sqlite3.Error, OSError)):
                return _mem0_store_error(folder / QDRANT_FOLDER, QDRANT, error, "open" if opening else doing, folder)
        elif named.endswith(HISTORY_FILE) or any(name.endswith(os.path.join("mem0", "memory", "storage.py"))
                                                  for name in files):
            if isinstance(error, (sqlite3.Error, OSError)):
                return _mem0_store_error(folder / HISTORY_FILE, HISTORY, error, doing, folder)
        elif isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return _mem0_store_error(Path(named) if named else folder, QDRANT, error, doing, folder)
    return None


def _mem0_store_error(path: Path, kind: StoreKind, error: BaseException, doing: str, folder: Path) -> StoreError:
    """The sentence for a fault of one of Mem0's stores: a lock, a full disk or a permission as lme's stores say
    it; a damaged or unreadable one with what moving it away costs (`kind.loss`)."""
    found = store_error(path, kind, error, doing)
    if found.fault not in ("damaged", "unreadable", "not-a-file", "wrong-schema"):
        return found
    detail = " ".join(str(error).split()) or type(error).__name__
    return StoreError(f"{path}: the {kind.what} is damaged or cannot be read ({detail}); "
                      f"{kind.loss.format(folder=folder)}.", path, found.fault)


def _check_vector_store(folder: Path, added: int) -> None:
    """`StoreError` when the Qdrant folder of a namespace with `added` sessions, or a file Qdrant needs in it, is
    missing: Qdrant would make an empty one, and the search would find nothing without a word."""
    qdrant = folder / QDRANT_FOLDER
    for path in (qdrant, qdrant / "meta.json", qdrant / "collection" / QDRANT_COLLECTION / "storage.sqlite"):
        if not path.exists() and not path.is_symlink():
            raise StoreError(
                f"{path}: missing from the Mem0 namespace's vector store, though lme's record lists {added} "
                f"session(s) added; {_MOVE_AWAY.format(folder=folder)}.", path, "unreadable")


def _raised_in(error: BaseException) -> list[str]:
    """The source files of the frames `error` passed through (innermost last)."""
    names = []
    trace = error.__traceback__
    while trace is not None:
        names.append(trace.tb_frame.f_code.co_filename)
        trace = trace.tb_next
    return names


def _mem0_dir_error(exc: OSError) -> StoreError:
    """The sentence for Mem0's own folder (MEM0_DIR), which it makes when imported, when that fails."""
    where = os.fsdecode(exc.filename or os.environ.get("MEM0_DIR", "MEM0_DIR"))
    return StoreError(f"{where}: Mem0's own folder (MEM0_DIR) cannot be made or used ({exc.strerror or exc}); move "
                      "what is there away, or set MEM0_DIR to a writable folder.", Path(where), "unreadable")


def _set_mem0_environment(index_dir: Path) -> None:
    """Telemetry off and Mem0's own folder (`MEM0_DIR`, unless set) under `index_dir`: before mem0 is imported."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(index_dir / "home"))


def _set_last_messages(memory: Any, namespace: str, context: list[dict[str, str]]) -> None:
    """Mem0's last messages of the namespace's scope set to `context` (the previous session's last ten), in order,
    so that the prompt does not depend on what an interrupted add left or on the wall clock."""
    scope = f"user_id={namespace}"
    db = memory.db
    with db._lock:  # mem0ai 2.2.1's SQLiteManager: its connection and lock
        db.connection.execute("BEGIN")
        try:
            db.connection.execute("DELETE FROM messages WHERE session_scope = ?", (scope,))
            base = datetime(2000, 1, 1)
            db.connection.executemany(
                "INSERT INTO messages (id, session_scope, role, content, name, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [(f"lme-{index}", scope, item["role"], item["content"], None,
                  (base + timedelta(microseconds=index)).isoformat()) for index, item in enumerate(context)])
            db.connection.execute("COMMIT")
        except BaseException:
            db.connection.execute("ROLLBACK")
            raise
