"""A loopback server on 127.0.0.1 that speaks the HTTP calls the Supermemory (5.x) and Zep (zep-cloud 4.x) SDKs make.

One server answers both vendors (point Supermemory's `base_url` at `server.url`, Zep's at `server.zep_url`, which
is `<url>/api/v4` as Zep's own base URL is); the calls answered are the ones lme's adapters make, as their
modules' docstrings list them:

- Supermemory: `POST /ns/{ns}/document` (a document is stored, and acknowledged `queued`), `POST /ns/{ns}/list/
  documents` (each document `extracting` then `done`, its `dreamingStatus` `dreaming` then `done`, `processing_s`
  after it was added), `POST /ns/{ns}/search` (the namespace's stored lines that share a word with the query,
  most shared words first; each a chunk result with the document's metadata);
- Zep: `POST /api/v4/users/lookup` (404 until created), `POST /api/v4/users`, `POST /api/v4/threads`,
  `POST /api/v4/threads/{uuid}/messages` (one episode per message, `processed` `processing_s` after it was
  added, and a task), `GET /api/v4/tasks/{uuid}` (`processing`, then `succeeded`), `POST /api/v4/graphs/{user}/
  episodes/list` (paged by `page_size` and `cursor`), `POST /api/v4/graphs/{user}/search/{edges,nodes,episodes}`
  (each message as a fact `<name> said: <content>`, ranked as Supermemory's lines are).

An `Idempotency-Key` already seen gets the first reply again, nothing stored twice (as Zep promises).

Every request is recorded (`requests`: method, path, query, headers, JSON body, time), and `early_searches`
counts searches that arrived while something in their namespace was still processing (a test asserts none).
`faults` is a queue consumed one per request whose path contains the fault's `path` (any request when empty):
`Fault(429, retry_after="1")`, `Fault(401)` (its body quotes the key the request carried, as some providers
echo a bad key), `Fault(500)`.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ZEP_PREFIX = "/api/v4"
WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Fault:
    """One injected reply: an HTTP status (a 429 may name its Retry-After) for the next request matching `path`."""

    status: int
    retry_after: str | None = None
    path: str = ""


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float


@dataclass
class _Document:
    id: str
    namespace: str
    content: str
    date: str | None
    metadata: dict[str, Any]
    added: float


@dataclass
class _Episode:
    uuid: str
    graph: str
    thread: str
    role: str | None
    name: str | None
    content: str
    reference_time: str | None
    added: float


@dataclass
class _State:
    documents: dict[tuple[str, str], _Document] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)  # user_id -> user
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)
    episodes: list[_Episode] = field(default_factory=list)
    tasks: dict[str, float] = field(default_factory=dict)  # uuid -> when it succeeds
    idempotent: dict[str, tuple[int, Any]] = field(default_factory=dict)


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def ranked(query: str, items: Iterable[tuple[str, Any]], limit: int) -> list[tuple[float, Any]]:
    """Items (text, item) sharing a word with the query, most shared words first (stable), scored in (0, 1]."""
    asked = words(query)
    scored = [(len(asked & words(text)) / max(1, len(asked)), position, item)
              for position, (text, item) in enumerate(items)]
    kept = sorted((entry for entry in scored if entry[0] > 0), key=lambda entry: (-entry[0], entry[1]))
    return [(score, item) for score, _, item in kept[:limit]]


class LoopbackSystems:
    """The server (see the module's docstring); a context manager."""

    def __init__(self, processing_s: float = 0.0, faults: Iterable[Fault] = ()) -> None:
        self.processing_s = processing_s
        self.faults: deque[Fault] = deque(faults)
        self.requests: list[Recorded] = []
        self.early_searches = 0
        self.state = _State()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def zep_url(self) -> str:
        return self.url + ZEP_PREFIX

    def __enter__(self) -> LoopbackSystems:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                parts = urlsplit(self.path)
                status, reply, headers = owner.answer(self.command, parts.path, parse_qs(parts.query),
                                                      {k.lower(): v for k, v in self.headers.items()}, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------------------------------ dispatch

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    def answer(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
               body: Any) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            self.requests.append(Recorded(method, path, query, headers, body, time.time()))
            fault = next((f for f in self.faults if f.path in path), None)
            if fault is not None:
                self.faults.remove(fault)
                return self._fault(fault, headers)
            key = headers.get("idempotency-key")
            if key and key in self.state.idempotent:
                status, reply = self.state.idempotent[key]
                return status, reply, {}
            if path.startswith(ZEP_PREFIX + "/"):
                status, reply = self._zep(method, path[len(ZEP_PREFIX):], query, body or {})
            else:
                status, reply = self._supermemory(method, path, query, body or {})
            if key and status < 300:
                self.state.idempotent[key] = (status, reply)
            return status, reply, {}

    def _fault(self, fault: Fault, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        extra = {"retry-after": fault.retry_after} if fault.retry_after is not None else {}
        if fault.status == 401:
            presented = headers.get("authorization", "").split(" ", 1)[-1]
            return 401, {"message": f"invalid API key {presented}"}, {}
        return fault.status, {"message": f"loopback fault {fault.status}"}, extra

    def _done(self, added: float) -> bool:
        return time.time() - added >= self.processing_s

    # --------------------------------------------------------------------------------------- Supermemory

    def _supermemory(self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]) -> tuple[int, Any]:
        match = re.fullmatch(r"/ns/([^/]+)/(document|search|list/documents)", path)
        if method != "POST" or match is None:
            return 404, {"message": f"no route {method} {path}"}
        namespace, action = match.groups()
        docs = [doc for (ns, _), doc in self.state.documents.items() if ns == namespace]
        if action == "document":
            doc_id = body.get("id") or uuid.uuid4().hex
            known = self.state.documents.get((namespace, doc_id))
            if known is not None and known.content == body.get("content"):
                return 200, {"id": doc_id, "status": "done" if self._done(known.added) else "queued"}
            self.state.documents[(namespace, doc_id)] = _Document(
                doc_id, namespace, str(body.get("content", "")), body.get("date"), dict(body.get("metadata") or {}),
                time.time())
            return 200, {"id": doc_id, "status": "queued"}
        if action == "list/documents":
            page, limit = int(query.get("page", ["1"])[0]), int(query.get("limit", ["10"])[0])
            chosen = docs[(page - 1) * limit: page * limit]
            stamp = "2026-01-01T00:00:00Z"
            return 200, {
                "documents": [{"id": doc.id, "type": "text", "metadata": doc.metadata, "system": {
                    "status": "done" if self._done(doc.added) else "extracting",
                    "dreamingStatus": "done" if self._done(doc.added) else "dreaming",
                    "createdAt": stamp, "updatedAt": stamp}} for doc in chosen],
                "chunks": [], "memories": [],
                "pagination": {"currentPage": page, "limit": limit, "totalItems": len(docs),
                               "totalPages": max(1, -(-len(docs) // limit))}}
        if any(not self._done(doc.added) for doc in docs):
            self.early_searches += 1
        lines = [(line, (doc, index)) for doc in docs for index, line in enumerate(doc.content.splitlines()[1:])]
        found = ranked(str(body.get("query", "")), lines, int(body.get("limit") or 10))
        return 200, {"searchTime": 1.0, "results": [
            {"id": f"{doc.id}:{index}", "chunk": doc.content.splitlines()[index + 1], "metadata": doc.metadata,
             "similarity": score, "isLatest": True, "isInference": False,
             "system": {"updatedAt": "2026-01-01T00:00:00Z"}} for score, (doc, index) in found]}

    # ----------------------------------------------------------------------------------------------- Zep

    def _zep(self, method: str, path: str, query: dict[str, list[str]], body: dict[str, Any]) -> tuple[int, Any]:
        state = self.state
        if (method, path) == ("POST", "/users/lookup"):
            user = state.users.get(str(body.get("user_id")))
            return (200, user) if user else (404, {"message": "user not found"})
        if (method, path) == ("POST", "/users"):
            user_id = str(body.get("user_id"))
            if user_id in state.users:
                return 409, {"message": "user exists"}
            made = uuid.uuid4().hex
            state.users[user_id] = {"uuid": made, "user_id": user_id, "graph_uuid": made,
                                    "metadata": body.get("metadata")}
            return 201, state.users[user_id]
        if (method, path) == ("POST", "/threads"):
            owner = str(body.get("user_uuid"))
            if owner not in {user["uuid"] for user in state.users.values()}:
                return 404, {"message": "user not found"}
            made = uuid.uuid4().hex
            state.threads[made] = {"uuid": made, "user_uuid": owner, "graph_uuid": owner}
            return 201, state.threads[made]
        match = re.fullmatch(r"/threads/([^/]+)/messages", path)
        if method == "POST" and match:
            thread = state.threads.get(match.group(1))
            if thread is None:
                return 404, {"message": "thread not found"}
            now = time.time()
            added = []
            for message in body.get("messages") or []:
                episode = _Episode(uuid.uuid4().hex, thread["user_uuid"], thread["uuid"], message.get("role"),
                                   message.get("name"), str(message.get("content", "")),
                                   message.get("reference_time"), now)
                state.episodes.append(episode)
                added.append({"uuid": episode.uuid, "role": episode.role, "name": episode.name,
                              "content": episode.content})
            task = uuid.uuid4().hex
            state.tasks[task] = now + self.processing_s
            return 202, {"messages": added, "task": {"uuid": task, "status": "pending"}}
        match = re.fullmatch(r"/tasks/([^/]+)", path)
        if method == "GET" and match:
            due = state.tasks.get(match.group(1))
            if due is None:
                return 404, {"message": "task not found"}
            return 200, {"uuid": match.group(1), "status": "succeeded" if time.time() >= due else "processing"}
        match = re.fullmatch(r"/graphs/([^/]+)/episodes/list", path)
        if method == "POST" and match:
            mine = [episode for episode in state.episodes if episode.graph == match.group(1)]
            size = int(query.get("page_size", ["50"])[0])
            start = int(query.get("cursor", ["0"])[0])
            chosen = mine[start:start + size]
            more = start + size < len(mine)
            return 200, {"items": [self._episode(episode) for episode in chosen],
                         "next_cursor": str(start + size) if more else None}
        match = re.fullmatch(r"/graphs/([^/]+)/search/(edges|nodes|episodes)", path)
        if method == "POST" and match:
            graph, scope = match.groups()
            mine = [episode for episode in state.episodes if episode.graph == graph]
            if any(not self._done(episode.added) for episode in mine):
                self.early_searches += 1
            size = int(query.get("page_size", ["10"])[0])
            found = ranked(str(body.get("query", "")), [(e.content, e) for e in mine], size)
            items = []
            for score, episode in found:
                if scope == "edges":
                    items.append({"uuid": "edge-" + episode.uuid, "fact": f"{episode.name} said: {episode.content}",
                                  "name": "SAID", "valid_at": episode.reference_time, "score": score,
                                  "episode_uuids": [episode.uuid]})
                elif scope == "nodes":
                    items.append({"uuid": "node-" + episode.uuid, "name": episode.name, "summary": episode.content,
                                  "score": score, "episode_uuids": [episode.uuid], "episode_uuids_truncated": False})
                else:
                    items.append({**self._episode(episode), "score": score})
            return 200, {"items": items}
        return 404, {"message": f"no route {method} {path}"}

    def _episode(self, episode: _Episode) -> dict[str, Any]:
        return {"uuid": episode.uuid, "graph_uuid": episode.graph, "thread_uuid": episode.thread,
                "content": episode.content, "role": episode.role, "role_name": episode.name, "source": "message",
                "reference_time": episode.reference_time, "processed": self._done(episode.added)}


__all__ = ["Fault", "LoopbackSystems", "Recorded", "ranked", "words"]
