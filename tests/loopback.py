"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

It serves `POST /v1/chat/completions` from a background thread, so the real
litellm HTTP path can be exercised with no network and no key:

    with LoopbackServer(reply="Paris", faults=[("429", 0.2), ("500",)]) as server:
        spec = ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, ...)
        ...
        assert len(server.requests) == 3

`reply` is a string or a callable taking the request's JSON body and returning
the reply text. `faults` is a queue consumed one per request, before normal
replies resume; each item is a `Fault` or a tuple:

- `("429", retry_after_s)`: rate limited, with a `Retry-After` header when given;
- `("500",)`, `("503",)`, `("400",)`, `("401", message)`, any HTTP status: an
  OpenAI-style error body; `{api_key}` in `message` is replaced by the bearer
  token the request carried (as some providers echo a bad key);
- `("malformed",)`: status 200 with a body that is not JSON;
- `("empty",)`: status 200 with an empty body;
- `("disconnect",)`: the connection is closed without any response.

Every request is recorded (`server.requests`: path, headers, JSON body), and
the highest number of requests being handled at once is kept in
`server.max_in_flight` (meaningful when `latency_s` > 0).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | Callable[[dict[str, Any]], str]

_REASONS = {
    400: ("invalid_request_error", "Bad request."),
    401: ("invalid_request_error", "Incorrect API key provided."),
    403: ("permission_error", "Forbidden."),
    404: ("invalid_request_error", "Not found."),
    429: ("rate_limit_error", "Rate limit reached. Please try again later."),
    500: ("server_error", "The server had an error while processing your request."),
    502: ("server_error", "Bad gateway."),
    503: ("server_error", "The engine is currently overloaded, please try again later."),
}


@dataclass(frozen=True)
class Fault:
    """One scripted response: an HTTP status ("429", "500", ...) or "malformed" / "empty" / "disconnect"."""

    kind: str
    retry_after_s: float | None = None
    message: str | None = None

    @classmethod
    def of(cls, item: Fault | tuple[Any, ...] | str) -> Fault:
        if isinstance(item, Fault):
            return item
        if isinstance(item, str):
            item = (item,)
        kind, *rest = item
        kind = str(kind)
        if kind not in ("malformed", "empty", "disconnect") and not kind.isdigit():
            raise ValueError(f"unknown fault {kind!r}")
        retry_after = message = None
        for extra in rest:
            if isinstance(extra, str):
                message = extra
            elif extra is not None:
                retry_after = float(extra)
        return cls(kind=kind, retry_after_s=retry_after, message=message)


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # the parsed JSON body, or the raw text when it was not JSON
    received_at: float


def count_words(text: str) -> int:
    return len(text.split())


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


class LoopbackServer:
    """An OpenAI-compatible chat-completions endpoint at `base_url`; use it as a context manager."""

    def __init__(
        self,
        reply: Reply = "ok",
        faults: Iterable[Fault | tuple[Any, ...] | str] = (),
        latency_s: float = 0.0,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        finish_reason: str = "stop",
    ) -> None:
        self.reply = reply
        self.latency_s = latency_s
        self.prompt_tokens = prompt_tokens  # None: count the words of the messages
        self.completion_tokens = completion_tokens  # None: count the words of the reply
        self.finish_reason = finish_reason
        self._faults: deque[Fault] = deque(Fault.of(item) for item in faults)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self.max_in_flight = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LoopbackServer:
        handler = type("LoopbackHandler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="loopback-server", daemon=True
        )  # a short poll interval keeps stop() quick
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the loopback server is not running")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting and inspection ----------------------------------------------------------------

    def add_faults(self, *faults: Fault | tuple[Any, ...] | str) -> None:
        with self._lock:
            self._faults.extend(Fault.of(item) for item in faults)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def completion_requests(self) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path.endswith("/chat/completions")]

    # -- what the handler calls ------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> Fault | None:
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            return self._faults.popleft() if self._faults else None

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        text = self.reply(body) if callable(self.reply) else self.reply
        messages = body.get("messages") or []
        prompt = self.prompt_tokens
        if prompt is None:
            prompt = sum(count_words(_message_text(m)) for m in messages if isinstance(m, Mapping))
        completion = self.completion_tokens if self.completion_tokens is not None else count_words(text)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "loopback")),
            "system_fingerprint": "fp_loopback",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    owner: LoopbackServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # keep test output clean

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._send_json(404, _error_body(404, f"No route for GET {self.path}."))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", errors="replace") if length else ""
        try:
            body: Any = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = raw
        headers = {name.lower(): value for name, value in self.headers.items()}
        owner = self.owner
        fault = owner._record(RecordedRequest(self.path, headers, body, time.time()))
        try:
            if owner.latency_s > 0:
                time.sleep(owner.latency_s)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send_json(404, _error_body(404, f"No route for POST {self.path}."))
            elif fault is not None:
                self._send_fault(fault, headers)
            elif not isinstance(body, dict):
                self._send_json(400, _error_body(400, "The request body is not a JSON object."))
            else:
                self._send_json(200, owner._completion(body))
        finally:
            owner._done()

    def _send_fault(self, fault: Fault, headers: Mapping[str, str]) -> None:
        if fault.kind == "disconnect":
            self.close_connection = True
            self.connection.close()
            return
        if fault.kind == "malformed":
            self._send_raw(200, b'{"id": "chatcmpl-broken", "choices": [', "application/json")
            return
        if fault.kind == "empty":
            self._send_raw(200, b"", "application/json")
            return
        status = int(fault.kind)
        message = fault.message
        if message is not None:
            token = headers.get("authorization", "").removeprefix("Bearer ").strip()
            message = message.replace("{api_key}", token)
        extra = {}
        if fault.retry_after_s is not None:
            extra["Retry-After"] = f"{fault.retry_after_s:g}"
        self._send_json(status, _error_body(status, message), extra)

    def _send_json(self, status: int, payload: Any, extra_headers: Mapping[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode("utf-8"), "application/json", extra_headers)

    def _send_raw(
        self, status: int, data: bytes, content_type: str, extra_headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def _error_body(status: int, message: str | None = None) -> dict[str, Any]:
    kind, default = _REASONS.get(status, ("server_error" if status >= 500 else "invalid_request_error", "Error."))
    return {"error": {"message": message or default, "type": kind, "param": None, "code": str(status)}}
