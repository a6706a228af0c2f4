"""A loopback HTTP server that speaks enough of the Hugging Face hub, and of raw GitHub, for fetch tests.

It serves, from a thread on 127.0.0.1 (stdlib `http.server`):

- `HEAD`/`GET /datasets/{repo}/resolve/{revision}/{filename}` as the hub does for
  a plain (non-xet) file: `ETag` (the SHA-256 of the body, as for an LFS file),
  `X-Repo-Commit`, `Content-Length`, `Range` requests (206), and hub-style 404s
  (`X-Error-Code: EntryNotFound` / `RevisionNotFound` / `RepositoryNotFound`);
- `GET` of any extra path given in `raw` (the raw.githubusercontent.com layout).

`faults[filename]` is a queue consumed one per GET of that file:

- `"drop"`: send the headers and half the body, then close the connection;
- `"stall"`: send the headers and half the body, set `stalled`, then hang until
  the server stops (a download a test can interrupt);
- `"500"` (any status): answer that status with no body.

Every request is recorded in `requests` as (method, path, headers).
"""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections import deque
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HubServer:
    def __init__(
        self,
        repo_id: str,
        revision: str,
        files: Mapping[str, bytes],
        raw: Mapping[str, bytes] | None = None,
        faults: Mapping[str, list[str]] | None = None,
        etags: Mapping[str, str] | None = None,
    ) -> None:
        self.repo_id = repo_id
        self.revision = revision
        self.files = dict(files)
        self.raw = dict(raw or {})
        self.faults = {name: deque(queue) for name, queue in (faults or {}).items()}
        self.etags = dict(etags or {})
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.stalled = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def gets(self, filename: str) -> int:
        return sum(1 for method, path, _ in self.requests if method == "GET" and path.endswith("/" + filename))

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self
        resolve = re.compile(r"^/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._serve(send_body=False)

            def do_GET(self) -> None:
                self._serve(send_body=True)

            def _serve(self, send_body: bool) -> None:
                with hub._lock:
                    hub.requests.append((self.command, self.path, dict(self.headers)))
                if self.path in hub.raw:
                    self._send(200, hub.raw[self.path], {"Content-Type": "text/plain; charset=utf-8"}, send_body)
                    return
                match = resolve.match(self.path)
                if match is None:
                    self._error(404, "RepositoryNotFound")
                    return
                if match["repo"] != hub.repo_id:
                    self._error(404, "RepositoryNotFound")
                    return
                if match["rev"] != hub.revision:
                    self._error(404, "RevisionNotFound")
                    return
                name = match["file"]
                if name not in hub.files:
                    self._error(404, "EntryNotFound")
                    return
                body = hub.files[name]
                headers = {
                    "ETag": f'"{hub.etags.get(name, hashlib.sha256(body).hexdigest())}"',
                    "X-Repo-Commit": hub.revision,
                    "Accept-Ranges": "bytes",
                    "Content-Type": "application/json",
                }
                fault = None
                if send_body:
                    with hub._lock:
                        queue = hub.faults.get(name)
                        fault = queue.popleft() if queue else None
                if fault is not None and fault.isdigit():
                    self._send(int(fault), b"", {"Connection": "close"}, send_body)
                    return
                status, start = 200, 0
                ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if ranged and send_body:
                    start = int(ranged.group(1))
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
                payload = body[start:]
                if fault in ("drop", "stall"):
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    if fault == "stall":
                        hub.stalled.set()
                        hub._release.wait(timeout=60)
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                self._send(status, payload, headers, send_body)

            def _error(self, status: int, code: str) -> None:
                body = b'{"error": "not found"}'
                self._send(status, body, {"X-Error-Code": code, "Content-Type": "application/json"},
                           self.command != "HEAD")

            def _send(self, status: int, body: bytes, headers: Mapping[str, str], send_body: bool) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body and body:
                    self.wfile.write(body)

        return Handler
