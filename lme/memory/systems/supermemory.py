"""Supermemory as a memory system, through its official Python SDK (`supermemory` 5.x, the namespace-first v5 API).

**Ingestion**: one document per session, in date order, into the history's own Supermemory namespace (the
builder's namespace, `lme-<digest>`; nothing else shares it). A document's content is the session as a
transcript, a first line naming its date (`Conversation on 2023-05-30 (Tuesday) 14:02`) and then one line per
turn, `<speaker>: <text>` (the speaker's name where the benchmark has one, else the role); the document also
carries `date` (the session's date, ISO 8601: what Supermemory reads as when the content is from), a
caller-defined id (`<namespace>-<session id>`, so a document sent again after a killed ingestion is the same
document, not a second one) and metadata `lme_session` and `lme_date`. A session is acknowledged once
Supermemory accepted its document (`DocumentRef`).

**Ready**: Supermemory processes documents in the background (extraction, chunking, embedding, indexing, then
memory generation, "dreaming"). `ready` lists the namespace's documents and says yes only when every one has
`status` `done` and, for `task_type: memory`, `dreamingStatus` `done` too (under dynamic dreaming the first can
come minutes before the second); a document that `failed`, or a namespace the journal says was ingested that
holds no document, fails the question.

**Search**: Supermemory's own search of the namespace with the question's text (`search_mode`, default hybrid:
learned memories and source chunks), `limit` = the builder's `top_k`; each result as returned, in its order:
its text (the memory, else the chunk; prefixed with the session's date when the result carries `lme_date`), its
`similarity` as the score and its id.

**HTTP calls the SDK makes** (base URL `https://api.supermemory.ai`, `Authorization: Bearer <key>`):

- `POST /ns/{namespace}/document` `{"content", "id", "date", "metadata", "taskType", "dreaming"}` -> `{"id", "status"}`
  (ingestion, one per session);
- `POST /ns/{namespace}/list/documents?page=&limit=` `{}` -> `{"documents": [{"id", "system": {"status",
  "dreamingStatus", ...}, ...}], "pagination": {"currentPage", "totalPages", "totalItems"}}` (ready);
- `POST /ns/{namespace}/search` `{"query", "limit", "searchMode", "threshold", "rerank", "rewriteQuery"}` ->
  `{"results": [{"id", "memory" | "chunk", "similarity", "metadata", ...}], "searchTime"}` (search).

The SDK's own retries are off (`max_retries=0`): lme retries (`lme.memory.systems.hosted`). Cost: Supermemory's
API reports none per request, so `reported_cost_usd` is None ("not reported").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from lme.data.dates import format_moment
from lme.memory.systems.base import Result, SystemSession, require_package
from lme.memory.systems.hosted import HostedCalls, HostedError, RetryPolicy, api_key
from lme.util.errors import LmeError

DEFAULT_BASE_URL = "https://api.supermemory.ai"
CONTENT_FORMAT = 1  # the transcript's layout: part of settings(), so a changed layout ingests again
PAGE_SIZE = 100
TASK_TYPES = ("memory", "superrag")
DREAMING = (None, "dynamic", "instant")
SEARCH_MODES = ("hybrid", "memories", "chunks")


def session_document(session: SystemSession) -> str:
    """A session as one document's content: its date, then `<speaker>: <text>` per turn."""
    lines = [f"Conversation on {format_moment(session.date)}"]
    lines += [f"{turn.speaker or turn.role}: {turn.text}" for turn in session.turns]
    return "\n".join(lines)


class SupermemorySystem:
    """Supermemory through its SDK (see the module's docstring)."""

    def __init__(self, base_url: str | None = DEFAULT_BASE_URL, api_key_env: str = "SUPERMEMORY_API_KEY",
                 task_type: str = "memory", dreaming: str | None = None, search_mode: str = "hybrid",
                 threshold: float | None = None, rerank: str | None = None, rewrite_query: bool | None = None,
                 timeout_s: float = 60.0, max_attempts: int = 6, backoff_base_s: float = 1.0,
                 backoff_max_s: float = 60.0, retry_after_max_s: float = 120.0, name: str = "supermemory") -> None:
        require_package(name, "supermemory", "supermemory==5.0.1")
        for key, value, allowed in (("task_type", task_type, TASK_TYPES), ("dreaming", dreaming, DREAMING),
                                    ("search_mode", search_mode, SEARCH_MODES)):
            if value not in allowed:
                raise LmeError(f"memory.system.{key}: expected one of {', '.join(map(str, allowed))}, got {value!r}.")
        self.name = name
        self.base_url = str(base_url or DEFAULT_BASE_URL).rstrip("/")
        self.api_key_env = api_key_env
        self.task_type, self.dreaming = task_type, dreaming
        self.search_mode, self.threshold, self.rerank, self.rewrite_query = search_mode, threshold, rerank, rewrite_query
        self.timeout_s = float(timeout_s)
        self._key: str | None = None
        self._client: Any = None
        self.calls = HostedCalls(name, RetryPolicy(max_attempts, backoff_base_s, backoff_max_s, retry_after_max_s),
                                 lambda: self._key)

    def settings(self) -> dict[str, Any]:
        """What changes what is stored: where (the base URL), how Supermemory processes it, and the layout."""
        return {"base_url": self.base_url, "task_type": self.task_type, "dreaming": self.dreaming,
                "content_format": CONTENT_FORMAT}

    def attach_gateway(self, gateway: Any) -> None:
        """Called by the job before its first question: the key is checked now (a missing one stops the run in one
        sentence naming the variable). Supermemory makes no model call through lme, so the gateway is not kept."""
        self.client()

    def client(self) -> Any:
        """The SDK's client, made at first use with the key from the environment and its own retries off."""
        if self._client is None:
            self._key = api_key(self.api_key_env, self.name)
            from supermemory import Supermemory

            self._client = Supermemory(api_key=self._key, base_url=self.base_url, max_retries=0,
                                       timeout=self.timeout_s)
        return self._client

    def ingest(self, namespace: str, sessions: Sequence[SystemSession]) -> Iterator[str]:
        client = self.client()
        for session in sessions:
            options: dict[str, Any] = {"task_type": self.task_type}
            if self.dreaming is not None:
                options["dreaming"] = self.dreaming
            self.calls.call(f"adding session {session.session_id} as a document", lambda: client.add(
                namespace, content=session_document(session), id=f"{namespace}-{session.session_id}",
                date=session.date.isoformat(),
                metadata={"lme_session": session.session_id, "lme_date": session.date.isoformat()}, **options))
            yield session.session_id

    def documents(self, namespace: str) -> list[Any]:
        """Every document of the namespace (all pages)."""
        client = self.client()
        found: list[Any] = []
        page = 1
        while True:
            listed = self.calls.call("listing documents", lambda: client.list(
                namespace, "documents", page=page, limit=PAGE_SIZE))
            found += list(listed.documents or [])
            pages = int(getattr(listed.pagination, "total_pages", 1) or 1)
            if page >= pages or not listed.documents:
                return found
            page += 1

    def ready(self, namespace: str) -> bool:
        documents = self.documents(namespace)
        if not documents:
            raise HostedError(f"namespace {namespace} holds no document although lme's ingestion journal says it was "
                              "ingested (deleted, or another account or base_url): move memory_systems.sqlite away "
                              "to ingest it again")
        failed = [doc.id for doc in documents if doc.system.status == "failed"]
        if failed:
            raise HostedError(f"Supermemory failed to process {len(failed)} document(s) of namespace {namespace} "
                              f"(first: {failed[0]})")
        return all(doc.system.status == "done" and (self.task_type != "memory" or doc.system.dreaming_status == "done")
                   for doc in documents)

    def search(self, namespace: str, question_text: str, top_k: int) -> list[Result]:
        if top_k <= 0:
            return []
        client = self.client()
        options: dict[str, Any] = {"search_mode": self.search_mode, "limit": top_k}
        for key in ("threshold", "rerank", "rewrite_query"):
            if getattr(self, key) is not None:
                options[key] = getattr(self, key)
        found = self.calls.call("searching", lambda: client.search(namespace, query=question_text, **options))
        return [result_of(item) for item in found.results or []]

    def request_counts(self) -> dict[str, int]:
        """HTTP requests sent (attempts), retries, 429s received and calls failed for good, since this adapter was
        made (`HostedCalls.counts`)."""
        return self.calls.counts()

    def reported_cost_usd(self, namespace: str) -> float | None:
        """Supermemory reports no cost per request: None (the report says "not reported")."""
        return None


def result_of(item: Any) -> Result:
    """A search result as lme hands it to the reader: the memory (else the chunk), dated when it carries its date."""
    text = item.memory if item.memory is not None else (item.chunk or "")
    date = (item.metadata or {}).get("lme_date")
    if isinstance(date, str) and date:
        text = f"[{date}] {text}"
    score = item.similarity if isinstance(item.similarity, (int, float)) else None
    return Result(text=text, score=None if score is None else float(score), id=str(item.id))
