"""Zep as a memory system, through its official Python SDK (`zep-cloud` 4.x, Zep's v4 API).

**Ingestion** follows Zep's recommended path for chat histories: one Zep user per history (its `user_id` the
builder's namespace, `lme-<digest>`; Zep gives it a UUID and its own graph, so nothing leaks between histories),
one thread per session, in date order, and the session's messages added to its thread in order, up to
`messages_per_call` a request, each with its `role` (user or assistant), its `name` (the speaker's name where the
benchmark has one, else the role) and `reference_time` = the session's date (ISO 8601; Zep reasons about time
from it rather than from when it received the message). Every create and add carries an `Idempotency-Key` made
of the namespace, the session id and the batch, so what a killed ingestion sent is not stored twice when it is
sent again. A session is acknowledged once all its messages were accepted. The user is looked up by its
`user_id` first and created only when Zep has none.

**Ready**: Zep extracts its graph in the background. `ready` asks (1) every task this process's additions
returned (`AddMessagesResult.task`): all `succeeded` (a `failed` or `partial` one fails the question), and (2)
every episode of the user's graph (listed page by page): all `processed`. A namespace the journal says was
ingested that has no Zep user or no episode fails the question.

**Search**: Zep's own graph search of the user's graph with the question's text, `page_size` = the builder's
`top_k`, one page (Zep ranks a limited set): `scope` `edges` (facts, the default: the fact, with when it held),
`nodes` (entities: name and summary) or `episodes` (the messages); `reranker` as configured (Zep's default,
rrf, when unset). Each result as returned, in its order: its text, its `score` (else its cross-encoder
`relevance`) and its UUID.

**HTTP calls the SDK makes** (base URL `https://api.getzep.com/api/v4`, header `Authorization: Api-Key <key>`):

- `POST /users/lookup` `{"user_id"}` -> a user `{"uuid", "user_id", "graph_uuid"}`, 404 when none;
- `POST /users` `{"user_id", "metadata"}` (header `Idempotency-Key`) -> the user;
- `POST /threads` `{"user_uuid"}` (`Idempotency-Key`) -> a thread `{"uuid", "user_uuid"}`, one per session;
- `POST /threads/{thread_uuid}/messages` `{"messages": [{"role", "name", "content", "reference_time"}]}`
  (`Idempotency-Key`) -> `{"messages", "task": {"uuid", "status"}}`;
- `GET /tasks/{task_uuid}` -> `{"uuid", "status": pending|processing|succeeded|partial|failed, "error"}` (ready);
- `POST /graphs/{user_uuid}/episodes/list?page_size=&cursor=` `{}` -> `{"items": [{"uuid", "processed", ...}],
  "next_cursor"}` (ready);
- `POST /graphs/{user_uuid}/search/{edges|nodes|episodes}?page_size=` `{"query", "reranker"}` ->
  `{"items": [{"uuid", "fact" | "summary" | "content", "score", ...}]}` (search).

The SDK's own retries are off (`max_retries=0`): lme retries (`lme.memory.systems.hosted`). Cost: Zep's API
reports none per request, so `reported_cost_usd` is None ("not reported").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from lme.memory.systems.base import Result, SystemSession, require_package
from lme.memory.systems.hosted import HostedCalls, HostedError, RetryPolicy, api_key
from lme.util.errors import LmeError

DEFAULT_BASE_URL = "https://api.getzep.com/api/v4"
CONTENT_FORMAT = 1  # how a session becomes messages: part of settings(), so a change ingests again
PAGE_SIZE = 100
SCOPES = ("edges", "nodes", "episodes")
ROLES = {"user": "user", "assistant": "assistant"}


class ZepSystem:
    """Zep through its SDK (see the module's docstring)."""

    def __init__(self, base_url: str | None = DEFAULT_BASE_URL, api_key_env: str = "ZEP_API_KEY",
                 messages_per_call: int = 30, scope: str = "edges", reranker: str | None = None,
                 timeout_s: float = 60.0, max_attempts: int = 6, backoff_base_s: float = 1.0,
                 backoff_max_s: float = 60.0, retry_after_max_s: float = 120.0, name: str = "zep") -> None:
        require_package(name, "zep_cloud", "zep-cloud==4.0.1")
        if scope not in SCOPES:
            raise LmeError(f"memory.system.scope: expected one of {', '.join(SCOPES)}, got {scope!r}.")
        if not isinstance(messages_per_call, int) or messages_per_call < 1:
            raise LmeError(f"memory.system.messages_per_call: expected a whole number >= 1, got {messages_per_call!r}.")
        self.name = name
        self.base_url = str(base_url or DEFAULT_BASE_URL).rstrip("/")
        self.api_key_env = api_key_env
        self.messages_per_call, self.scope, self.reranker = messages_per_call, scope, reranker
        self.timeout_s = float(timeout_s)
        self._key: str | None = None
        self._client: Any = None
        self._lock = threading.Lock()
        self._users: dict[str, str] = {}  # namespace -> the Zep user's UUID
        self._tasks: dict[str, set[str]] = {}  # namespace -> tasks of this process's additions not yet succeeded
        self.calls = HostedCalls(name, RetryPolicy(max_attempts, backoff_base_s, backoff_max_s, retry_after_max_s),
                                 lambda: self._key)

    def settings(self) -> dict[str, Any]:
        """What changes what is stored: where (the base URL), how messages are sent, and the layout."""
        return {"base_url": self.base_url, "messages_per_call": self.messages_per_call,
                "content_format": CONTENT_FORMAT}

    def attach_gateway(self, gateway: Any) -> None:
        """Called by the job before its first question: the key is checked now (a missing one stops the run in one
        sentence naming the variable). Zep makes no model call through lme, so the gateway is not kept."""
        self.client()

    def client(self) -> Any:
        """The SDK's client, made at first use with the key from the environment and its own retries off."""
        if self._client is None:
            self._key = api_key(self.api_key_env, self.name)
            from zep_cloud import Zep

            self._client = Zep(api_key=self._key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s)
        return self._client

    def user_uuid(self, namespace: str, create: bool) -> str | None:
        """The UUID of the namespace's Zep user (looked up by `user_id`; created when absent and `create`)."""
        with self._lock:
            known = self._users.get(namespace)
        if known is not None:
            return known
        client = self.client()
        user = self.calls.lookup("looking up the user", lambda: client.user.lookup(user_id=namespace))
        if user is None and create:
            user = self.calls.call("creating the user", lambda: client.user.create(
                user_id=namespace, metadata={"lme_namespace": namespace}, idempotency_key=f"{namespace}-user"))
        if user is None:
            return None
        uuid = str(user.uuid_)
        with self._lock:
            self._users[namespace] = uuid
        return uuid

    def ingest(self, namespace: str, sessions: Sequence[SystemSession]) -> Iterator[str]:
        from zep_cloud import AddMessage

        client = self.client()
        user = self.user_uuid(namespace, create=True)
        for session in sessions:
            key = f"{namespace}-{session.session_id}"
            thread = self.calls.call(f"creating the thread of session {session.session_id}", lambda: client.thread.create(
                user_uuid=user, idempotency_key=f"{key}-thread"))
            date = session.date.isoformat()
            messages = [AddMessage(role=ROLES.get(turn.role, turn.role), name=turn.speaker or turn.role,
                                   content=turn.text, reference_time=date) for turn in session.turns]
            for start in range(0, len(messages), self.messages_per_call):
                batch = messages[start:start + self.messages_per_call]
                added = self.calls.call(
                    f"adding messages {start + 1}-{start + len(batch)} of session {session.session_id}",
                    lambda: client.thread.add_messages(str(thread.uuid_), messages=batch,
                                                       idempotency_key=f"{key}-messages-{start}"))
                task = getattr(getattr(added, "task", None), "uuid_", None)
                if task:
                    with self._lock:
                        self._tasks.setdefault(namespace, set()).add(str(task))
            yield session.session_id

    def ready(self, namespace: str) -> bool:
        if not self._tasks_done(namespace):
            return False
        user = self.user_uuid(namespace, create=False)
        if user is None:
            raise HostedError(f"Zep has no user {namespace} although lme's ingestion journal says it was ingested "
                              "(deleted, or another project or base_url): move memory_systems.sqlite away to ingest "
                              "it again")
        episodes = self.episodes(user)
        if not episodes:
            raise HostedError(f"Zep user {namespace} holds no episode although lme's ingestion journal says it was "
                              "ingested: move memory_systems.sqlite away to ingest it again")
        return all(episode.processed for episode in episodes)

    def _tasks_done(self, namespace: str) -> bool:
        """Whether every task of this process's additions to the namespace succeeded (a failed one: `HostedError`)."""
        client = self.client()
        with self._lock:
            pending = sorted(self._tasks.get(namespace, ()))
        for uuid in pending:
            task = self.calls.call(f"asking about task {uuid}", lambda: client.task.get(uuid))
            status = getattr(task, "status", None)
            if status in ("failed", "partial"):
                error = getattr(task, "error", None)
                raise HostedError(f"Zep's task {uuid} for namespace {namespace} ended {status}"
                                  + (f": {error}" if error else ""))
            if status != "succeeded":
                return False
            with self._lock:
                self._tasks.get(namespace, set()).discard(uuid)
        return True

    def episodes(self, user: str) -> list[Any]:
        """Every episode of the user's graph (all pages)."""
        client = self.client()
        found: list[Any] = []
        cursor: str | None = None
        while True:
            page = self.calls.call("listing episodes", lambda: client.graph.episode.list(
                user, page_size=PAGE_SIZE, cursor=cursor))
            found += list(page.items or [])
            cursor = getattr(page.response, "next_cursor", None)
            if not cursor or not page.items:
                return found

    def search(self, namespace: str, question_text: str, top_k: int) -> list[Result]:
        if top_k <= 0:
            return []
        client = self.client()
        user = self.user_uuid(namespace, create=False)
        if user is None:
            raise HostedError(f"Zep has no user {namespace} to search")
        search = {"edges": client.graph.search_edges, "nodes": client.graph.search_nodes,
                  "episodes": client.graph.search_episodes}[self.scope]
        options: dict[str, Any] = {"query": question_text, "page_size": top_k}
        if self.reranker is not None:
            options["reranker"] = self.reranker
        page = self.calls.call(f"searching {self.scope}", lambda: search(user, **options))
        return [result_of(item, self.scope) for item in (page.items or [])[:top_k]]

    def request_counts(self) -> dict[str, int]:
        """HTTP requests sent (attempts), retries, 429s received and calls failed for good, since this adapter was
        made (`HostedCalls.counts`)."""
        return self.calls.counts()

    def reported_cost_usd(self, namespace: str) -> float | None:
        """Zep reports no cost per request: None (the report says "not reported")."""
        return None


def result_of(item: Any, scope: str) -> Result:
    """A search result as lme hands it to the reader (see the module's docstring)."""
    if scope == "edges":
        text = item.fact or item.name or ""
        if item.valid_at:
            text += f" (valid from {item.valid_at}" + (f" until {item.invalid_at})" if item.invalid_at else ")")
    elif scope == "nodes":
        text = f"{item.name or ''}: {item.summary or ''}".strip(": ")
    else:
        who = item.role_name or item.role or ""
        when = f"[{item.reference_time}] " if item.reference_time else ""
        text = f"{when}{who + ': ' if who else ''}{item.content or ''}"
    score = item.score if item.score is not None else getattr(item, "relevance", None)
    return Result(text=text, score=None if score is None else float(score), id=str(item.uuid_))
