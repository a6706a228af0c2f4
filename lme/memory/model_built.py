"""A memory built by a model: one call through the gateway turns the user's messages into notes or a
ledger, which then replace the memory, replace its user log, or are appended to the user log.

`ModelBuiltMemoryBuilder` wraps an inner builder (`inner`, a builder or a callable taking the retriever:
Hydra's `_partial_: true` node of lme's user-log memory). Per question it builds the inner memory, sends
the model one request, system message = `instruction`, user message = the input text:

- `input: user_log`: the inner memory's header and user log (lme's `UserLogMemoryBuilder`), or
  `input: memory`: the inner memory's whole text;
- with `include_question`, a first line `Question: ...` (a ledger for that question).

The request carries no seed, so its call-cache key covers the model and its parameters, the instruction
and the input text only: every seed, every rerun and every design that sends the same request pays once.
The call goes through the job's gateway (`attach_gateway`): its call cache, its ledger under the job's
name, its spending caps (a cap raises `BudgetExhausted`, which stops the job as any other call would),
its retries and limits. The model's reply (cut at a line to `output_max_bytes`) goes under `title`, and
`place` says where:

- `replace`: the memory is the inner memory's header (question date) and the model's output only;
- `replace_log`: the output takes the user log's place; the retrieved replies stay (the study's
  "notes extracted from the user's messages, with BM25 replies");
- `append`: the output follows the user log, before the replies (design 15's ledger appended to
  the user log); if the memory then exceeds `max_bytes`, the last replies are dropped, whole.

A failed or empty model reply raises `MemoryFailed` (naming this step, its model and the reason): the
question gets no answer and no reader call on a memory that is not the design's, and a rerun asks it
again (`lme.answer.run`). A built memory carries its call in `model_calls` (the question's outcome counts its
tokens and dollars), and its `notes` say what the call did (`model_call`: paid | cached) and its tokens
and dollars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from lme.util.budget import utf8_len
from lme.data.records import Question
from lme.util.errors import LmeError
from lme.memory.base import Memory, MemoryBuilder, MemoryFailed
from lme.models.gateway import CallResult, Gateway
from lme.models.spec import ModelSpec

PLACES = ("replace", "replace_log", "append")
INPUTS = ("user_log", "memory")
SEPARATOR = "\n\n"


def cut_at_line(text: str, max_bytes: int) -> str:
    """`text` whole if it fits in `max_bytes` (UTF-8), else its longest prefix of whole lines that does."""
    if utf8_len(text) <= max_bytes:
        return text
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        cost = utf8_len(line) + (1 if kept else 0)
        if used + cost > max_bytes:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


def memory_parts(memory: Memory) -> tuple[str, str, str] | None:
    """(header, user log, the rest: `\\n\\n` + replies, or "") of a user-log memory, from its byte counts;
    None for a memory that does not say where its parts are."""
    try:
        header_bytes = int(memory.notes["header_bytes"])
        log_bytes = int(memory.notes["user_log_bytes"])
    except (KeyError, ValueError):
        return None
    raw = memory.text.encode("utf-8")
    sep = len(SEPARATOR)
    if raw[header_bytes:header_bytes + sep] != SEPARATOR.encode():
        return None
    header = raw[:header_bytes].decode("utf-8")
    log = raw[header_bytes + sep:header_bytes + sep + log_bytes].decode("utf-8")
    rest = raw[header_bytes + sep + log_bytes:].decode("utf-8")
    return header, log, rest


def drop_last_replies(rest: str, reply_ids: list[str], budget: int) -> tuple[str, list[str]]:
    """The replies part (`rest`) cut to `budget` bytes by dropping its last replies, whole; with no reply
    left, "" (its title goes too). Returns the text and the reply turn ids kept."""
    kept = list(reply_ids)
    while kept and utf8_len(rest) > budget:
        start = rest.rfind(f"{SEPARATOR}[{kept[-1]}]")
        if start < 0:
            break
        rest = rest[:start]
        kept.pop()
    if not kept or utf8_len(rest) > budget:
        return "", []
    return rest, kept


class ModelBuiltMemoryBuilder:
    """A memory written by a model from the user's messages (see the module docstring)."""

    # the paragraphs that may describe it: the user log's (append keeps it) and lme's notes and ledger
    describes: ClassVar[tuple[str, ...]] = ("user_log", "notes", "ledger")

    def __init__(
        self,
        inner: MemoryBuilder | Callable[..., MemoryBuilder],
        model: ModelSpec,
        instruction: str,
        retriever: Any = None,
        place: str = "replace_log",
        input: str = "user_log",  # noqa: A002 - the config key's name
        include_question: bool = False,
        title: str = "## Notes on the user's messages (written by a model)",
        output_max_bytes: int = 60_000,
        max_bytes: int = 180_000,
        name: str = "model_built",
        layout: str | None = None,
    ) -> None:
        if place not in PLACES:
            raise LmeError(f"memory.place {place!r} is unknown (known: {', '.join(PLACES)}).")
        if input not in INPUTS:
            raise LmeError(f"memory.input {input!r} is unknown (known: {', '.join(INPUTS)}).")
        if not isinstance(model, ModelSpec):
            raise LmeError("memory.model: expected a model node (`_target_: lme.models.gateway.ModelSpec`).")
        if not str(instruction).strip():
            raise LmeError("memory.instruction: a model-built memory needs an instruction text.")
        if hasattr(inner, "build"):
            self.inner: MemoryBuilder = inner  # type: ignore[assignment]
        else:  # a factory (Hydra's _partial_ node); `layout` (setup=study sets memory.layout) reaches the inner memory
            self.inner = inner(retriever=retriever, **({"layout": layout} if layout else {}))  # type: ignore[operator]
        self.model = model
        self.instruction = str(instruction)
        self.place = place
        self.input = input
        self.include_question = bool(include_question)
        self.title = title
        self.output_max_bytes = int(output_max_bytes)
        self.max_bytes = int(max_bytes)
        self.name = name
        self.gateway: Gateway | None = None
        self.planned: list[list[dict[str, Any]]] | None = None  # `plan_only`: the requests, none sent

    def plan_only(self) -> None:
        """From now on, `build` sends nothing: it records each request in `planned` and returns the inner
        memory (`lme estimate` counts the requests and prices them)."""
        self.planned = []

    # -- the model call ------------------------------------------------------------------------

    def messages(self, question: Question, memory: Memory) -> list[dict[str, Any]]:
        """The request for `question` over its inner memory: the instruction, then the input text."""
        if self.input == "memory":
            text = memory.text
        else:
            parts = memory_parts(memory)
            if parts is None:
                raise LmeError(f"memory {self.name}: input user_log needs an inner memory with a user log "
                               f"(memory.inner: lme.memory.user_log.UserLogMemoryBuilder), not {memory.notes.get('builder', '?')}.")
            text = parts[0] + SEPARATOR + parts[1]
        if self.include_question:
            text = f"Question: {' '.join(question.question.split())}{SEPARATOR}{text}"
        return [{"role": "system", "content": self.instruction}, {"role": "user", "content": text}]

    def _call(self, messages: list[dict[str, Any]]) -> CallResult:
        gateway = self.gateway
        if gateway is None:
            if not self.model.is_offline:
                raise LmeError(f"memory {self.name}: it calls {self.model.model}, which needs a job's gateway "
                               "(its cache, ledger and caps); run the design instead.")
            own = Gateway()  # an offline stand-in costs nothing: no cache or ledger needed
            try:
                return own.run_blocking(own.complete(self.model, messages, seed=None))
            finally:
                own.close_background()
        # no seed: the key is the model, its parameters and the messages, shared by every seed and rerun
        return gateway.run_blocking(gateway.complete(self.model, messages, seed=None))

    # -- the memory ----------------------------------------------------------------------------

    def build(self, question: Question) -> Memory:
        memory = self.inner.build(question)
        messages = self.messages(question, memory)
        if self.planned is not None:
            self.planned.append(messages)
            return replace(memory, notes={**memory.notes, "model_call": "planned"})
        call = self._call(messages)
        output = (call.text or "").strip()
        if not call.ok or not output:  # never a reader call on a memory that is not the design's
            reason = call.error or "EmptyAnswer: the model's reply holds no text"
            raise MemoryFailed(self.name, self.model.model, reason, (replace(call, text=None, error=reason),))
        notes = {
            **memory.notes,
            "builder": self.name,
            "inner_builder": memory.notes.get("builder", getattr(self.inner, "name", "?")),
            "model": self.model.model,
            "model_call": "cached" if call.cached else "paid",
            "model_input_bytes": str(utf8_len(messages[1]["content"])),
            "model_input_tokens": str(call.input_tokens),
            "model_output_tokens": str(call.output_tokens),
            "model_cost_usd": repr(call.cost_usd or 0.0),
        }
        output = cut_at_line(output, self.output_max_bytes)
        notes["model_output_bytes"] = str(utf8_len(output))
        block = f"{self.title}\n{output}"
        parts = memory_parts(memory)
        if parts is None and self.place != "replace":
            raise LmeError(f"memory {self.name}: place {self.place} needs an inner memory with a user log "
                           "(lme.memory.user_log.UserLogMemoryBuilder); use place replace.")
        header, log, rest = parts if parts is not None else ("", "", "")
        roles = {turn.turn_id: turn.role for turn in question.turns()}
        user_ids = [tid for tid in memory.turn_ids if roles.get(tid) == "user"] if parts else []
        reply_ids = [tid for tid in memory.turn_ids if tid not in set(user_ids)] if parts else []
        if self.place == "replace":
            text = (header + SEPARATOR + block) if header else block
            text = cut_at_line(text, self.max_bytes)
            turn_ids: tuple[str, ...] = ()
        else:
            head = header + SEPARATOR + (block if self.place == "replace_log" else log + SEPARATOR + block)
            rest, reply_ids = drop_last_replies(rest, reply_ids, self.max_bytes - utf8_len(head))
            if utf8_len(head) > self.max_bytes:
                head = cut_at_line(head, self.max_bytes)
            text = head + rest
            turn_ids = tuple((user_ids if self.place == "append" else []) + reply_ids)
            notes["replies"] = str(len(reply_ids))
        notes["model_part_bytes"] = str(utf8_len(block))
        return Memory(text=text, n_bytes=utf8_len(text), turn_ids=turn_ids, skipped_turn_ids=memory.skipped_turn_ids,
                      notes=notes, ranking=memory.ranking, model_calls=(*memory.model_calls, call))


def model_built(builders: list[Any]) -> list[ModelBuiltMemoryBuilder]:
    """The model-built memories among `builders`, or wrapped in one (`.builder`, `.inner`)."""
    found: list[ModelBuiltMemoryBuilder] = []
    for builder in builders:
        seen = 0
        while builder is not None and seen < 8:
            if isinstance(builder, ModelBuiltMemoryBuilder) and builder not in found:
                found.append(builder)
            builder = getattr(builder, "builder", None) or getattr(builder, "inner", None)
            seen += 1
    return found


def attach_gateway(builders: list[Any], gateway: Gateway) -> None:
    """Give every model-built memory among `builders` (or wrapped in one) the job's gateway, so its calls use
    the job's cache, ledger and caps."""
    for builder in model_built(builders):
        builder.gateway = gateway
