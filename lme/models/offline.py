"""Offline stand-ins registered with litellm as the custom provider `lme-offline`.

They let a whole evaluation run with no key and no network. They are NOT the
paper's reader and NOT the LongMemEval judge, and are named so everywhere:

- `lme-offline/extractive-reader` answers with the memory sentence that shares
  the most content words with the question, or declines when none shares enough;
  at a `temperature` above 0 (the `offline` reader's config sets 1) it draws among the
  sentences that share enough, a sentence sharing `d` fewer words than the best weighted
  `exp(-d / temperature)`, with a generator seeded by the request's seed and the question:
  a seed gives the same answers every time, two seeds differ on some questions (as a
  sampled model's would), and at temperature 0 (or with no seed) every seed gives the best;
- `lme-offline/lexical-judge` reads a filled judge prompt (labelled fields
  `Question:`, `Correct Answer:` / `Rubric:` / `Explanation:`, `Model Response:`)
  and says yes when the response holds the reference's content words (or, for
  an abstention prompt, when the response declines);
- `lme-offline/note-taker` stands in for the small model of a model-built memory
  (`lme.memory.model_built`): from the log lines of its input (`[s0001:2] ...`) it keeps, under their
  session headings, the sentences in the first person, or, when the input opens with a
  `Question: ...` line (a counting ledger), the sentences sharing a content word with the question;
- `lme-offline/memory-extractor` stands in for Mem0's LLM (`lme.memory.systems.mem0`): it answers Mem0's
  extraction prompt (mem0ai 2.2.1's additive extraction: `## New Messages` ... `## Observation Date`) in the
  JSON shape Mem0 parses, `{"memory": [{"id": "0", "text": ..., "attributed_to": "user"}, ...]}`: one memory
  per first-person sentence of the user's messages (the note-taker's rule), dated with the observation date
  and naming the speaker where the message opens with one (`Caroline: ...`); a sentence already among the
  prompt's existing memories is not given again. Any other prompt gets `{"memory": []}`.

Token counts are estimates (characters / 4), and the calls cost nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Sequence
from typing import Any

from lme.util.text import content_words

OFFLINE_PROVIDER = "lme-offline"
READER_MODEL = f"{OFFLINE_PROVIDER}/extractive-reader"
JUDGE_MODEL = f"{OFFLINE_PROVIDER}/lexical-judge"
NOTE_MODEL = f"{OFFLINE_PROVIDER}/note-taker"
MEMORY_EXTRACTOR_MODEL = f"{OFFLINE_PROVIDER}/memory-extractor"
OFFLINE_MODELS: tuple[str, ...] = (READER_MODEL, JUDGE_MODEL, NOTE_MODEL, MEMORY_EXTRACTOR_MODEL)

DECLINE_ANSWER = "The memory does not contain enough information to answer this question."

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# `[s0001:2] ` and the dated forms `[s0001:2] <date> user: ` / `[s0001:3] <date>, answering [s0001:2]: `
_LINE_PREFIX = re.compile(r"^\[s\d+:\d+\](?:[^\n]*?(?:\b(?:user|assistant)|, answering \[[^\]]*\]):)?\s*")
_DECLINE_PATTERNS = re.compile(
    r"not (?:contain )?enough information|insufficient information|cannot determine|can[’']t determine|"
    r"not mentioned|no information|does not (?:include|mention|contain|record)|not specified|unanswerable|"
    r"don[’']t know|do not know",
    re.IGNORECASE,
)


def stand_ins_note(models: Sequence[str]) -> str:
    """What a score from offline stand-ins means, said once wherever scores are shown (a job's summary, the
    report): `models`, the stand-ins that answered or judged."""
    return (f"Offline stand-ins ({', '.join(models)}): these scores measure the stand-ins, not the design; "
            "that one design scores below another with them (the offline pipeline below bm25) is a property of "
            "the stand-ins and says nothing about either design")


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def extractive_answer(question: str, memory: str, min_overlap: int = 2, temperature: float = 0.0,
                      seed: int | None = None) -> str:
    """The memory sentence sharing the most content words with the question, or a decline.

    `temperature` > 0 with a `seed`: one of the sentences sharing enough words, drawn with weight
    `exp(-(best - score) / temperature)` by a generator seeded from the seed and the question (`draw`);
    the first of equally good sentences otherwise."""
    wanted = content_words(question)
    if not wanted:
        return DECLINE_ANSWER
    needed = 1 if len(wanted) <= 2 else min_overlap
    candidates: dict[str, int] = {}  # sentence -> shared words, first-seen order (a repeated sentence once)
    for line in memory.splitlines():
        line = _LINE_PREFIX.sub("", line.strip())
        for sentence in _SENTENCE_END.split(line):
            sentence = sentence.strip()
            if not sentence or sentence in candidates:
                continue
            score = len(wanted & content_words(sentence))
            if score >= needed:
                candidates[sentence] = score
    if not candidates:
        return DECLINE_ANSWER
    best_score = max(candidates.values())
    if temperature <= 0 or seed is None or len(candidates) == 1:
        return next(sentence for sentence, score in candidates.items() if score == best_score)
    weights = [math.exp(-(best_score - score) / temperature) for score in candidates.values()]
    return list(candidates)[draw(seed, question, weights)]


def draw(seed: int, question: str, weights: list[float]) -> int:
    """An index into `weights`, drawn in proportion to them by a generator seeded from `seed` and `question`
    (SHA-256 of both: the same on every machine and Python, unlike `hash`)."""
    digest = hashlib.sha256(f"{seed}\x00{question}".encode("utf-8")).digest()
    point = random.Random(int.from_bytes(digest[:8], "big")).random() * sum(weights)
    for index, weight in enumerate(weights):
        point -= weight
        if point < 0:
            return index
    return len(weights) - 1


_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|me|mine|we|our|us)\b", re.IGNORECASE)
_LOG_LINE = re.compile(r"^\[(s\d+:\d+)\](?: user:)?\s*(.*)$")


def extract_notes(text: str) -> str:
    """The note-taker's reply: kept sentences as `- [turn id] sentence` lines under their session headings
    (lines starting with `#`); "No notes." when nothing is kept."""
    lines = text.splitlines()
    wanted: set[str] | None = None
    if lines and lines[0].startswith("Question:"):
        wanted = content_words(lines[0][len("Question:"):])
    out: list[str] = []
    heading: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            heading = stripped
            continue
        match = _LOG_LINE.match(stripped)
        if not match:
            continue
        turn_id, message = match.groups()
        for sentence in _SENTENCE_END.split(message):
            sentence = sentence.strip()
            if not sentence:
                continue
            keep = (bool(wanted & content_words(sentence)) if wanted is not None
                    else bool(_FIRST_PERSON.search(sentence)) and len(content_words(sentence)) >= 3)
            if keep:
                if heading is not None:
                    out.append(heading)
                    heading = None
                out.append(f"- [{turn_id}] {sentence}")
    return "\n".join(out) if out else "No notes."


_PROMPT_SECTION = re.compile(r"^## ([^\n]+)\n(.*?)(?=\n\n## |\n\n# Output:|\Z)", re.S | re.M)
_ROLE_LINE = re.compile(r"^(user|assistant|system): ", re.M)
_SPEAKER = re.compile(r"^([A-Z][\w.' -]{0,40}): (?=\S)")


def _sections(prompt: str) -> dict[str, str]:
    """The `## Title` sections of a Mem0 extraction prompt, title -> body (the first of each title)."""
    found: dict[str, str] = {}
    for match in _PROMPT_SECTION.finditer(prompt):
        found.setdefault(match.group(1).strip(), match.group(2).strip())
    return found


def extract_memories(prompt: str) -> str:
    """The memory extractor's reply to Mem0's additive extraction prompt (see the module's docstring)."""
    sections = _sections(prompt)
    if "New Messages" not in sections:
        return json.dumps({"memory": []})
    date = sections.get("Observation Date", "").strip() or "an unknown date"
    try:
        existing = {str(item.get("text", "")) for item in json.loads(sections.get("Existing Memories") or "[]")
                    if isinstance(item, dict)}
    except json.JSONDecodeError:
        existing = set()
    body = sections["New Messages"]
    starts = list(_ROLE_LINE.finditer(body))
    memories: list[dict[str, str]] = []
    for index, start in enumerate(starts):
        if start.group(1) != "user":
            continue
        end = starts[index + 1].start() if index + 1 < len(starts) else len(body)
        content = body[start.end():end].strip()
        speaker_match = _SPEAKER.match(content)
        speaker = speaker_match.group(1) if speaker_match else "User"
        content = content[speaker_match.end():] if speaker_match else content
        for sentence in _SENTENCE_END.split(content):
            sentence = sentence.strip()
            if not (_FIRST_PERSON.search(sentence) and len(content_words(sentence)) >= 3):
                continue
            text = f"{speaker} said on {date}: {sentence}"
            if text in existing or any(item["text"] == text for item in memories):
                continue
            memories.append({"id": str(len(memories)), "text": text, "attributed_to": "user"})
    return json.dumps({"memory": memories}, ensure_ascii=False)


def _field(prompt: str, labels: tuple[str, ...]) -> tuple[str | None, str | None]:
    for label in labels:
        match = re.search(rf"(?:^|\n){re.escape(label)}:[ \t]*(.*?)\n\n(?:Model Response|[A-Z][\w ]*):", prompt, re.S)
        if match:
            return label, match.group(1).strip()
    return None, None


def lexical_verdict(prompt: str, threshold: float = 0.5) -> str:
    """'yes' or 'no' for a filled judge prompt, by word overlap (an offline stand-in)."""
    response_match = re.search(r"(?:^|\n)Model Response:[ \t]*(.*)\n\n[^\n]*\Z", prompt, re.S)
    response = response_match.group(1).strip() if response_match else ""
    label, reference = _field(prompt, ("Explanation", "Correct Answer", "Rubric"))
    if label == "Explanation":
        return "yes" if _DECLINE_PATTERNS.search(response) else "no"
    if reference is None:
        return "no"
    if reference.lower() in response.lower():
        return "yes"
    wanted = content_words(reference)
    if not wanted:
        return "no"
    found = len(wanted & content_words(response)) / len(wanted)
    return "yes" if found >= threshold and not _DECLINE_PATTERNS.search(response) else "no"


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def respond(model: str, messages: list[dict[str, Any]], params: dict[str, Any] | None = None) -> str:
    """The offline model's reply text; `params`: the request's parameters (the reader reads `temperature` and
    `seed`, which the gateway sends to the offline models only)."""
    name = model.split("/", 1)[-1]
    user_text = _last_user_text(messages)
    if name == READER_MODEL.split("/", 1)[1]:
        params = params or {}
        temperature = float(params.get("temperature") or 0.0)
        seed = params.get("seed")
        seed = int(seed) if seed is not None else None
        try:
            payload = json.loads(user_text)
            return extractive_answer(str(payload.get("question", "")), str(payload.get("memory", "")),
                                     temperature=temperature, seed=seed)
        except (json.JSONDecodeError, AttributeError):
            return extractive_answer(user_text, user_text, temperature=temperature, seed=seed)
    if name == JUDGE_MODEL.split("/", 1)[1]:
        return lexical_verdict(user_text)
    if name == NOTE_MODEL.split("/", 1)[1]:
        return extract_notes(user_text)
    if name == MEMORY_EXTRACTOR_MODEL.split("/", 1)[1]:
        return extract_memories(user_text)
    raise ValueError(f"unknown offline model {model!r} (known: {', '.join(OFFLINE_MODELS)})")


_registered = False


def register_offline_providers() -> None:
    """Register `lme-offline` with litellm (idempotent)."""
    global _registered
    if _registered:
        return
    import litellm
    from litellm import CustomLLM

    class OfflineProvider(CustomLLM):
        def _reply(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any] | None) -> Any:
            text = respond(model, messages, params)
            prompt_tokens = sum(estimate_tokens(str(m.get("content", ""))) for m in messages)
            completion_tokens = estimate_tokens(text)
            return litellm.ModelResponse(
                model=model,
                choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                usage={
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            )

        def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            return self._reply(model, messages, kwargs.get("optional_params"))

        async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            return self._reply(model, messages, kwargs.get("optional_params"))

    handler = OfflineProvider()
    litellm.custom_provider_map = [
        item for item in litellm.custom_provider_map if item.get("provider") != OFFLINE_PROVIDER
    ] + [{"provider": OFFLINE_PROVIDER, "custom_handler": handler}]
    from litellm.utils import custom_llm_setup

    custom_llm_setup()
    _registered = True
