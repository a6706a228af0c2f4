"""A small OpenAI-compatible chat-completions and embeddings server on 127.0.0.1, with injected faults.

Point litellm (and so lme) at it as an OpenAI-compatible endpoint to dry-run a
study with no key, no network and no spending, or to see how a run behaves
under rate limits, errors and slow responses:

    python scripts/loopback_server.py --port 8765 --reply offline --fault-rate 0.1
    LME_FAKE_KEY=anything python -m lme reader.model.model=openai/gpt-4o-mini \\
        ++reader.model.api_base=http://127.0.0.1:8765/v1 ++reader.model.api_key_env=LME_FAKE_KEY

Tests and `scripts/stress.py` use the same server in-process (`tests/loopback.py`
re-exports it):

    with LoopbackServer(reply="Paris", faults=[("429", 0.2), ("500",)]) as server:
        spec = ModelSpec(model="openai/gpt-4o-mini", api_base=server.base_url, ...)
        ...
        assert len(server.requests) == 3

`reply` is a string, a callable taking the request's JSON body and returning
the reply text, or one of the named modes: `"echo"` (the last user message),
`"offline"` (lme's offline stand-ins: the extractive rule for a reader request
whose user message is lme's JSON payload, the lexical verdict for a judge
prompt, else echo) or a mapping from question text to answer (`scripted`; a
question not in it gets `default_answer`).

Faults come two ways, and both can be used at once:

- `faults`: a queue consumed one per request, before normal replies resume;
- `fault_rates`: `{kind: probability}` drawn per request from a seeded RNG
  (`fault_seed`), e.g. `{"429": 0.03, "500": 0.02, "slow": 0.01}`.

Each fault is a `Fault` or a tuple:

- `("429", retry_after_s)`: rate limited, with a `Retry-After` header when given;
- `("500",)`, `("503",)`, `("400",)`, `("401", message)`, any HTTP status: an
  OpenAI-style error body; `{api_key}` in `message` is replaced by the bearer
  token the request carried (as some providers echo a bad key);
- `("malformed",)`: status 200 with a body that is not JSON;
- `("empty",)`: status 200 with an empty body;
- `("empty_content",)`: a well-formed completion whose content is `""`;
- `("refusal",)`: a well-formed completion with `content: null` and a `refusal`;
- `("slow", seconds)`: the normal reply, after `seconds` (default `slow_s`),
  i.e. past a client's timeout;
- `("disconnect",)`: the connection is closed without any response;
- `("empty_choices",)`: status 200, a completion whose `choices` list is empty
  (usage still reported: the request was billed);
- `("null_content",)`: a completion whose message content is null, with no
  refusal and no tool call;
- `("oversize", words)`: the normal reply padded to `words` words (default
  `oversize_words`), ignoring the request's `max_tokens`, with usage to match,
  as a provider that ignores the cap would bill it.

`ignore_max_tokens=True` makes every normal reply ignore the request's maximum
(and `pad_to_words` pads every reply to that many words).

Replies report token usage: the words of the messages and of the reply (or the
fixed `prompt_tokens` / `completion_tokens`), optional cached and reasoning
tokens, and a reply is cut to the request's `max_tokens` /
`max_completion_tokens` words (finish reason `length`), as a provider would.

Cached input tokens (`usage.prompt_tokens_details.cached_tokens`) are either a
fixed number (`cached_tokens`) or, with `prefix_cache=True`, simulated as a
provider's prompt cache does it: the prompt is the words of its messages in
order (a message's first word marked with its role), and the cached tokens are
the longest prefix, in whole blocks of `prefix_cache_block` words, that an
earlier completed request's prompt shares with it (at least
`prefix_cache_min` words, else none). OpenAI caches in blocks of 128 tokens
from 1,024 on: `prefix_cache_block=128, prefix_cache_min=1024`. The model, the
seed and other parameters do not key the cache.

Anthropic's and Google's own wire formats are answered too, so a catalogue model of either family can be
pointed at the server (`api_base` = `server.root_url`): `POST /v1/messages` (Anthropic's Messages API, as
litellm's `anthropic/` provider sends it) and `POST /models/MODEL:generateContent` (the Gemini API, as its
`gemini/` provider sends it). The request is read as the equivalent chat completion (system text, then the
turns; `max_tokens` / `generationConfig.max_output_tokens`) and the same reply, usage and faults are sent back
in the provider's shape (a refusal as Anthropic's `stop_reason: refusal` / Gemini's `finishReason: SAFETY`).

`POST /v1/embeddings` answers in OpenAI's shape with deterministic vectors made
from each input's text (`embedding_vector`: hashed word counts, so texts sharing
words have close vectors; `dimensions` from the request, else `embedding_dim`),
as JSON numbers or, when the request asks `encoding_format: base64`, base64 of
float32; `usage.prompt_tokens` is the inputs' words (or the fixed
`prompt_tokens`). Status faults, `malformed`, `empty`, `disconnect` and `slow`
apply to it as to a completion, `empty_choices` returns no embedding, and the
other kinds (which concern chat replies) are ignored there. `server.counts`
counts whole embedding replies as `embedded`.

Every request is recorded (`server.requests`: path, headers, JSON body), the
highest number of requests being handled at once is kept in
`server.max_in_flight` (meaningful when `latency_s` > 0), and `server.counts`
says how many normal completions were sent whole (`completed`), how many faults of
each kind were injected (`fault:<kind>`) and how many normal replies the client
hung up on (`aborted`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | Callable[[dict[str, Any]], str] | Mapping[str, str]

NAMED_KINDS = (
    "malformed", "empty", "empty_content", "refusal", "slow", "disconnect", "empty_choices", "null_content", "oversize",
)
# The mix `--fault-rate R` spreads R over (weights), covering every fault kind the gateway must survive.
DEFAULT_FAULT_MIX: dict[str, float] = {
    "429": 3,
    "500": 2,
    "503": 2,
    "malformed": 1,
    "empty": 1,
    "disconnect": 1,
    "slow": 1,
}
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
# Fault kinds that concern chat replies: an embedding request answers normally instead ("slow" after its
# delay, "empty_choices" with no embedding); the others (statuses, malformed, empty, disconnect) apply as they are.
_EMBEDDING_FAULTS = ("slow", "empty_choices", "empty_content", "refusal", "null_content", "oversize")

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
    """One scripted misbehaviour: an HTTP status ("429", "500", ...) or one of `NAMED_KINDS`."""

    kind: str
    retry_after_s: float | None = None  # for 429: the Retry-After header; for "slow": the delay
    message: str | None = None

    @classmethod
    def of(cls, item: Fault | tuple[Any, ...] | str) -> Fault:
        if isinstance(item, Fault):
            return item
        if isinstance(item, str):
            item = (item,)
        kind, *rest = item
        kind = str(kind)
        if kind not in NAMED_KINDS and not kind.isdigit():
            raise ValueError(f"unknown fault {kind!r} (known: an HTTP status or {', '.join(NAMED_KINDS)})")
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
    body: Any  # the parsed JSON body, or the raw text when it was not JSON (None when not recorded)
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


def _last_user_text(body: Mapping[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _message_text(message)
    return ""


def echo_reply(body: Mapping[str, Any]) -> str:
    return _last_user_text(body)


def offline_reply(body: Mapping[str, Any]) -> str:
    """lme's offline stand-ins over HTTP: extractive reader for lme's JSON payload, lexical judge for a judge prompt."""
    from lme.models.offline import extractive_answer, lexical_verdict

    text = _last_user_text(body)
    try:
        payload = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        payload = None
    if isinstance(payload, dict) and "question" in payload and "memory" in payload:
        return extractive_answer(str(payload["question"]), str(payload["memory"]))
    if "\nModel Response:" in text:
        return lexical_verdict(text)
    return text


def scripted_reply(answers: Mapping[str, str], default: str) -> Callable[[Mapping[str, Any]], str]:
    """A reply looked up by the question in lme's reader payload (or by the whole user message)."""

    def reply(body: Mapping[str, Any]) -> str:
        text = _last_user_text(body)
        try:
            payload = json.loads(text)
            question = str(payload.get("question", text)) if isinstance(payload, dict) else text
        except (json.JSONDecodeError, ValueError):
            question = text
        return answers.get(question, answers.get(text, default))

    return reply


def _reply_function(reply: Reply, default_answer: str) -> Callable[[Mapping[str, Any]], str]:
    if callable(reply):
        return reply  # type: ignore[return-value]
    if isinstance(reply, Mapping):
        return scripted_reply(reply, default_answer)
    if reply == "echo":
        return echo_reply
    if reply == "offline":
        return offline_reply
    return lambda body: reply  # type: ignore[return-value]


def prompt_words(messages: Iterable[Any]) -> list[str]:
    """The prompt as the prefix cache sees it: every message's words in order, its first word marked with its role."""
    words: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        mine = _message_text(message).split()
        if mine:
            mine[0] = f"{message.get('role', '')}\x00{mine[0]}"
        words += mine
    return words


class PrefixCache:
    """A provider's prompt cache, simulated: chained hashes of whole blocks of words, as seen so far."""

    def __init__(self, block: int = 1, minimum: int = 0) -> None:
        self.block = block
        self.minimum = minimum
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    def lookup_and_add(self, words: list[str]) -> int:
        """Words of the longest cached prefix of `words` (whole blocks, at least `minimum`); then cache `words`."""
        digest, hit, missed = b"", 0, False
        with self._lock:
            for end in range(self.block, len(words) + 1, self.block):
                block = "\x01".join(words[end - self.block : end]).encode()
                digest = hashlib.blake2b(digest + block, digest_size=16).digest()
                if not missed and digest in self._seen:
                    hit = end
                else:
                    missed = True
                    self._seen.add(digest)
        return hit if hit >= self.minimum else 0


def embedding_vector(text: str, dim: int = 64) -> list[float]:
    """A deterministic, not normalised embedding of `text`: its lower-cased words counted into `dim` buckets
    by hash, plus 0.5 in the bucket of the whole text (so no text, not even an empty one, gets a zero vector
    and distinct texts rarely get equal ones)."""
    vector = [0.0] * dim
    for word in text.lower().split():
        vector[int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") % dim] += 1.0
    vector[int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % dim] += 0.5
    return vector


def _parts_text(parts: Any) -> str:
    """The text of Anthropic content blocks or Gemini parts (a plain string as it is)."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, Mapping):
        parts = parts.get("parts") or []
    if isinstance(parts, list):
        return " ".join(str(part.get("text", "")) for part in parts if isinstance(part, Mapping))
    return ""


def anthropic_as_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request as the equivalent chat-completions body (system first, then the turns)."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _parts_text(body["system"])})
    for message in body.get("messages") or []:
        if isinstance(message, Mapping):
            messages.append({"role": str(message.get("role", "user")), "content": _parts_text(message.get("content"))})
    chat: dict[str, Any] = {"model": body.get("model", "loopback"), "messages": messages}
    if isinstance(body.get("max_tokens"), int):
        chat["max_tokens"] = body["max_tokens"]
    return chat


def gemini_as_chat(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """A Gemini generateContent request as the equivalent chat-completions body (role `model` is the assistant)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system_instruction") or body.get("systemInstruction")
    if system:
        messages.append({"role": "system", "content": _parts_text(system)})
    for content in body.get("contents") or []:
        if isinstance(content, Mapping):
            role = "assistant" if content.get("role") == "model" else str(content.get("role", "user"))
            messages.append({"role": role, "content": _parts_text(content)})
    chat: dict[str, Any] = {"model": model, "messages": messages}
    config = body.get("generationConfig") or body.get("generation_config") or {}
    limit = config.get("max_output_tokens", config.get("maxOutputTokens")) if isinstance(config, Mapping) else None
    if isinstance(limit, int):
        chat["max_tokens"] = limit
    return chat


def _choice(completion: Mapping[str, Any]) -> tuple[str | None, str | None, str]:
    """(content, refusal, finish reason) of an OpenAI-shaped completion; (None, None, "stop") with no choice."""
    choices = completion.get("choices") or []
    if not choices:
        return None, None, "stop"
    message = choices[0].get("message") or {}
    return message.get("content"), message.get("refusal"), str(choices[0].get("finish_reason") or "stop")


def as_anthropic(completion: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped completion as Anthropic's Messages reply."""
    content, refusal, finish = _choice(completion)
    usage = completion.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    stop = "refusal" if refusal else {"length": "max_tokens"}.get(finish, "end_turn")
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": completion.get("model", "loopback"),
        "content": [] if content is None else [{"type": "text", "text": content}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": int(usage.get("prompt_tokens", 0)) - cached, "cache_read_input_tokens": cached,
                  "cache_creation_input_tokens": 0, "output_tokens": int(usage.get("completion_tokens", 0))},
    }


def as_gemini(completion: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped completion as the Gemini API's generateContent reply."""
    content, refusal, finish = _choice(completion)
    usage = completion.get("usage") or {}
    prompt, output = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    candidates = []
    if completion.get("choices"):
        candidate: dict[str, Any] = {"index": 0, "finishReason": "SAFETY" if refusal else
                                     {"length": "MAX_TOKENS"}.get(finish, "STOP")}
        if content is not None:
            candidate["content"] = {"role": "model", "parts": [{"text": content}]}
        candidates.append(candidate)
    metadata: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": output - reasoning,
                                "totalTokenCount": prompt + output}
    if cached:
        metadata["cachedContentTokenCount"] = cached
    if reasoning:
        metadata["thoughtsTokenCount"] = reasoning
    return {"candidates": candidates, "usageMetadata": metadata, "modelVersion": completion.get("model", "loopback"),
            "responseId": uuid.uuid4().hex[:24]}


_GEMINI_ROUTE = re.compile(r"/models/([^/:?]+):generateContent$")


def _route(path: str) -> tuple[str, str | None]:
    """The API a POST path belongs to: ("chat" | "embeddings" | "anthropic" | "gemini" | "", Gemini's model)."""
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat", None
    if path.endswith("/embeddings"):
        return "embeddings", None
    if path.endswith("/v1/messages"):
        return "anthropic", None
    match = _GEMINI_ROUTE.search(path)
    if match:
        return "gemini", match.group(1)
    return "", None


def _max_output(body: Mapping[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return None


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
        *,
        fault_rates: Mapping[str, float] | None = None,
        fault_seed: int = 0,
        retry_after_s: float | None = 0.05,  # the Retry-After a rate-drawn 429 carries
        slow_s: float = 2.0,
        cached_tokens: int | None = None,
        prefix_cache: bool = False,
        prefix_cache_block: int = 1,
        prefix_cache_min: int = 0,
        reasoning_tokens: int | None = None,
        default_answer: str = "I don't know.",
        oversize_words: int = 100_000,
        ignore_max_tokens: bool = False,
        pad_to_words: int | None = None,
        record_bodies: bool = True,
        embedding_dim: int = 64,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.reply = reply
        self._reply = _reply_function(reply, default_answer)
        self.latency_s = latency_s
        self.prompt_tokens = prompt_tokens  # None: count the words of the messages
        self.completion_tokens = completion_tokens  # None: count the words of the reply
        self.finish_reason = finish_reason
        self.cached_tokens = cached_tokens
        if prefix_cache and cached_tokens is not None:
            raise ValueError("cached_tokens (a fixed number) and prefix_cache (simulated) exclude each other")
        if prefix_cache_block < 1 or prefix_cache_min < 0:
            raise ValueError("prefix_cache_block must be >= 1 and prefix_cache_min >= 0")
        self.prefix_cache = PrefixCache(prefix_cache_block, prefix_cache_min) if prefix_cache else None
        self.reasoning_tokens = reasoning_tokens
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.record_bodies = record_bodies
        if embedding_dim < 1:
            raise ValueError("embedding_dim must be >= 1")
        self.embedding_dim = embedding_dim
        self.oversize_words = oversize_words
        self.ignore_max_tokens = ignore_max_tokens
        self.pad_to_words = pad_to_words
        self.host = host
        self._port = port
        rates = dict(fault_rates or {})
        for kind, rate in rates.items():
            Fault.of(kind)  # validates the kind
            if not 0 <= rate <= 1:
                raise ValueError(f"fault rate for {kind!r} must be within [0, 1], got {rate}")
        if sum(rates.values()) > 1:
            raise ValueError(f"fault rates add up to {sum(rates.values()):g} > 1")
        self.fault_rates = rates
        self._rng = random.Random(fault_seed)
        self._faults: deque[Fault] = deque(Fault.of(item) for item in faults)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self.max_in_flight = 0
        self.counts: Counter[str] = Counter()  # "completed" (sent whole), "fault:<kind>", "aborted"
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LoopbackServer:
        handler = type("LoopbackHandler", (_Handler,), {"owner": self})
        server_class = type(
            "LoopbackHTTPServer", (ThreadingHTTPServer,), {"request_queue_size": 256, "handle_error": _handle_error}
        )
        self._httpd = server_class((self.host, self._port), handler)
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
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The server's root, e.g. `http://127.0.0.1:PORT`: the `api_base` of litellm's `anthropic/` and `gemini/`
        providers (they add `/v1/messages` and `/models/MODEL:generateContent` themselves)."""
        return f"http://{self.host}:{self.port}"

    # -- scripting and inspection ----------------------------------------------------------------

    def add_faults(self, *faults: Fault | tuple[Any, ...] | str) -> None:
        with self._lock:
            self._faults.extend(Fault.of(item) for item in faults)

    def set_fault_rates(self, rates: Mapping[str, float]) -> None:
        with self._lock:
            self.fault_rates = dict(rates)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def completion_requests(self) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path.endswith("/chat/completions")]

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path.rstrip("/").endswith("/embeddings")]

    # -- what the handler calls ------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> Fault | None:
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            if self._faults:
                return self._faults.popleft()
            if self.fault_rates:
                draw = self._rng.random()
                for kind, rate in sorted(self.fault_rates.items()):
                    if draw < rate:
                        retry_after = self.retry_after_s if kind == "429" else None
                        return Fault(kind=kind, retry_after_s=retry_after)
                    draw -= rate
            return None

    def _done(self, outcome: str) -> None:
        with self._lock:
            self._in_flight -= 1
            self.counts[outcome] += 1

    def _embeddings(self, body: dict[str, Any], empty: bool = False) -> dict[str, Any]:
        """An OpenAI embeddings reply: one deterministic vector per input (see `embedding_vector`)."""
        raw = body.get("input")
        inputs = [str(item) for item in raw] if isinstance(raw, list) else [str(raw or "")]
        dim = body.get("dimensions") if isinstance(body.get("dimensions"), int) and body["dimensions"] > 0 \
            else self.embedding_dim
        data = []
        for index, text in enumerate([] if empty else inputs):
            vector = embedding_vector(text, dim)
            if body.get("encoding_format") == "base64":
                import struct

                embedding: Any = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode("ascii")
            else:
                embedding = vector
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        prompt = self.prompt_tokens if self.prompt_tokens is not None else sum(count_words(text) for text in inputs)
        return {"object": "list", "data": data, "model": str(body.get("model", "loopback")),
                "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}

    def _completion(self, body: dict[str, Any], content: str | None = None, refusal: str | None = None,
                    pad_to: int | None = None) -> dict[str, Any]:
        finish = self.finish_reason
        if content is None and refusal is None:
            content = self._reply(body)
            pad_to = pad_to if pad_to is not None else self.pad_to_words
            if pad_to is not None and count_words(content) < pad_to:
                content = content + " word" * (pad_to - count_words(content))
            limit = _max_output(body)
            if limit is not None and count_words(content) > limit and not self.ignore_max_tokens and pad_to is None:
                content, finish = " ".join(content.split()[:limit]), "length"
        messages = body.get("messages") or []
        prompt = self.prompt_tokens
        if prompt is None:
            prompt = sum(count_words(_message_text(m)) for m in messages if isinstance(m, Mapping))
        completion = self.completion_tokens
        if completion is None:
            completion = count_words(content or refusal or "") + (self.reasoning_tokens or 0)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": min(self.cached_tokens, prompt)}
        elif self.prefix_cache is not None:
            hit = self.prefix_cache.lookup_and_add(prompt_words(messages))
            usage["prompt_tokens_details"] = {"cached_tokens": min(hit, prompt)}
        if self.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "loopback")),
            "system_fingerprint": "fp_loopback",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": refusal},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": usage,
        }


class _Handler(BaseHTTPRequestHandler):
    owner: LoopbackServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # keep test output clean

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": "loopback", "object": "model", "owned_by": "lme"}]})
            return
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
        recorded = body if owner.record_bodies else None
        fault = owner._record(RecordedRequest(self.path, headers, recorded, time.time()))
        outcome = "aborted"
        try:
            if owner.latency_s > 0:
                time.sleep(owner.latency_s)
            route, gemini_model = _route(self.path)
            embeddings = route == "embeddings"
            shape: Callable[[dict[str, Any]], dict[str, Any]] = _as_is
            if route == "anthropic" and isinstance(body, dict):
                body, shape = anthropic_as_chat(body), as_anthropic
            elif route == "gemini" and isinstance(body, dict):
                body, shape = gemini_as_chat(body, gemini_model or "loopback"), as_gemini
            if not route:
                self._send_json(404, _error_body(404, f"No route for POST {self.path}."))
                outcome = "not_found"
            elif embeddings and (fault is None or fault.kind in _EMBEDDING_FAULTS) and isinstance(body, dict):
                if fault is not None:
                    outcome = f"fault:{fault.kind}"
                    if fault.kind == "slow":
                        time.sleep(fault.retry_after_s if fault.retry_after_s is not None else owner.slow_s)
                self._send_json(200, owner._embeddings(body, empty=fault is not None and fault.kind == "empty_choices"))
                if fault is None or fault.kind == "slow":
                    outcome = "embedded"
            elif fault is not None:
                outcome = f"fault:{fault.kind}"  # counted as injected, whether or not the client still listens
                self._send_fault(fault, headers, body if isinstance(body, dict) else {}, shape)
            elif not isinstance(body, dict):
                self._send_json(400, _error_body(400, "The request body is not a JSON object."))
                outcome = "bad_request"
            else:
                self._send_json(200, shape(owner._completion(body)))
                outcome = "completed"
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout) or was killed
            self.close_connection = True
        finally:
            owner._done(outcome)

    def _send_fault(self, fault: Fault, headers: Mapping[str, str], body: dict[str, Any],
                    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """Send `fault`; a reply it still makes (an empty or refused completion...) goes out in `shape`'s form."""
        owner = self.owner
        shape = shape or _as_is
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
        if fault.kind == "empty_content":
            self._send_json(200, shape(owner._completion(body, content="")))
            return
        if fault.kind == "empty_choices":
            reply = owner._completion(body)
            reply["choices"] = []
            self._send_json(200, shape(reply))
            return
        if fault.kind == "null_content":
            reply = owner._completion(body)
            reply["choices"][0]["message"]["content"] = None
            self._send_json(200, shape(reply))
            return
        if fault.kind == "oversize":
            words = int(fault.retry_after_s) if fault.retry_after_s is not None else owner.oversize_words
            self._send_json(200, shape(owner._completion(body, pad_to=words)))
            return
        if fault.kind == "refusal":
            self._send_json(200, shape(owner._completion(body, refusal=fault.message or REFUSAL_TEXT)))
            return
        if fault.kind == "slow":
            time.sleep(fault.retry_after_s if fault.retry_after_s is not None else owner.slow_s)
            self._send_json(200, shape(owner._completion(body)))
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


def _as_is(completion: dict[str, Any]) -> dict[str, Any]:
    return completion


def _handle_error(server: Any, request: Any, client_address: Any) -> None:
    """A client that hung up (its timeout, or a killed run) is normal here; anything else is reported."""
    if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
        return
    ThreadingHTTPServer.handle_error(server, request, client_address)


def _error_body(status: int, message: str | None = None) -> dict[str, Any]:
    kind, default = _REASONS.get(status, ("server_error" if status >= 500 else "invalid_request_error", "Error."))
    return {"error": {"message": message or default, "type": kind, "param": None, "code": str(status)}}


def mixed_fault_rates(total: float, mix: Mapping[str, float] = DEFAULT_FAULT_MIX) -> dict[str, float]:
    """`total` spread over the fault kinds in proportion to `mix`'s weights."""
    weight = sum(mix.values())
    return {kind: total * share / weight for kind, share in mix.items()} if total > 0 else {}


# -- the command line ------------------------------------------------------------------------------


def _parse_rate(text: str) -> tuple[str | None, float]:
    if "=" in text:
        kind, value = text.split("=", 1)
        return kind.strip(), float(value)
    return None, float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="An OpenAI-compatible chat-completions server on 127.0.0.1 for dry runs, with injected faults.",
        epilog="Point lme at it: reader.model.model=openai/gpt-4o-mini ++reader.model.api_base=URL "
        "++reader.model.api_key_env=SOME_VAR (set to any value; the server ignores it).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port (default 8765)")
    parser.add_argument(
        "--reply", default="offline",
        help="'offline' (lme's extractive reader / lexical judge rules), 'echo', or a literal reply (default offline)",
    )
    parser.add_argument("--script", help="a JSON file {question: answer}; other questions get --default-answer")
    parser.add_argument("--default-answer", default="I don't know.")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply (default 0)")
    parser.add_argument(
        "--fault-rate", action="append", default=[], metavar="[KIND=]RATE",
        help="inject faults: RATE alone spreads it over every kind (429, 500, 503, malformed, empty, disconnect, "
        "slow); KIND=RATE sets one kind (also 'refusal', 'empty_content', any HTTP status); repeatable",
    )
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds on a 429 (default 1)")
    parser.add_argument("--slow", type=float, default=30.0, help="delay of a 'slow' fault in seconds (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws (default 0)")
    parser.add_argument(
        "--prefix-cache", action="store_true",
        help="report cached input tokens as a provider's prompt cache would: the longest prefix (in words) an "
        "earlier prompt shares",
    )
    parser.add_argument("--prefix-cache-block", type=int, default=1, help="cache granularity in words (default 1)")
    parser.add_argument("--prefix-cache-min", type=int, default=0, help="smallest cached prefix in words (default 0)")
    args = parser.parse_args(argv)

    rates: dict[str, float] = {}
    for item in args.fault_rate:
        kind, rate = _parse_rate(item)
        if kind is None:
            for name, value in mixed_fault_rates(rate).items():
                rates[name] = rates.get(name, 0.0) + value
        else:
            rates[kind] = rates.get(kind, 0.0) + rate
    reply: Reply = args.reply
    if args.script:
        with open(args.script, encoding="utf-8") as handle:
            reply = {str(k): str(v) for k, v in json.load(handle).items()}
    try:
        server = LoopbackServer(
            reply=reply, latency_s=args.latency, fault_rates=rates, fault_seed=args.seed,
            retry_after_s=args.retry_after, slow_s=args.slow, default_answer=args.default_answer,
            prefix_cache=args.prefix_cache, prefix_cache_block=args.prefix_cache_block,
            prefix_cache_min=args.prefix_cache_min, record_bodies=False, host=args.host, port=args.port,
        ).start()
    except (OSError, ValueError) as exc:
        print(f"loopback_server: error: {exc}", file=sys.stderr)
        return 2
    faults = ", ".join(f"{kind} {rate:.1%}" for kind, rate in sorted(rates.items())) or "none"
    cache = ""
    if args.prefix_cache:
        cache = f"; prefix cache: blocks of {args.prefix_cache_block} words, from {args.prefix_cache_min}"
    shown = args.script or args.reply
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # before the banner: a caller may stop us as soon as it reads it
    print(f"serving OpenAI chat completions at {server.base_url} (reply: {shown}; faults: {faults}{cache}; /embeddings too)")
    print(
        f"  LME_FAKE_KEY=anything python -m lme reader.model.model=openai/gpt-4o-mini "
        f"++reader.model.api_base={server.base_url} ++reader.model.api_key_env=LME_FAKE_KEY",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        counts = ", ".join(f"{name} {count}" for name, count in sorted(server.counts.items())) or "no request"
        print(f"stopped: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
