"""The LongMemEval judge protocol, and the offline stand-in that follows its shape.

Protocol (SPEC, "The judge"): the template is chosen by `'_abs' in question_id`
first, else by question type; it is filled with `str.format(question, answer,
hypothesis)` and sent as the only (user) message, temperature 0, max_tokens 10;
the verdict is `'yes' in reply.strip().lower()`. A missing or failed answer is
wrong and costs no judge call. Judge calls are keyed without a seed, so
identical prompts share one verdict across seeds and designs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from lme.data.records import ABSTENTION_MARK, Question
from lme.errors import LmeError
from lme.hashing import sha256_text  # also imported from here by callers and tests
from lme.models.gateway import CallResult, Gateway, ModelSpec

TEMPLATE_KEYS: tuple[str, ...] = (
    "abstention",
    "ssu_ssa_multisession",
    "temporal_reasoning",
    "knowledge_update",
    "single_session_preference",
)
_KEY_BY_TYPE = {
    "single-session-user": "ssu_ssa_multisession",
    "single-session-assistant": "ssu_ssa_multisession",
    "multi-session": "ssu_ssa_multisession",
    "temporal-reasoning": "temporal_reasoning",
    "knowledge-update": "knowledge_update",
    "single-session-preference": "single_session_preference",
}
# SHA-256 of each template's text in LongMemEval's src/evaluation/evaluate_qa.py
# at commit 9e0b455f4ef0e2ab8f2e582289761153549043fc.
LONGMEMEVAL_TEMPLATE_SHA256: dict[str, str] = {
    "abstention": "5c0b365a1e1d06db36377c735432b56e122ca3c428f89faf61d43a0d5a7e050b",
    "ssu_ssa_multisession": "fba020ba3d57982efdc9a937c1c01f897b789a608c7f88e60244121f6505e5bc",
    "temporal_reasoning": "8d33a5fdd83afeeb4592454a965eab43d1fcb2dedc042d1d3892f4254be6c273",
    "knowledge_update": "183a9b3a6197ec620940f610cdc1207201ec98c1113dd633ea685cfc322fafac",
    "single_session_preference": "741ee3bcbea7ff5e8ed359acef61d2f8ded3de021bbcff6ee13de455f2e2aa9b",
}


def template_key(question_id: str, question_type: str) -> str:
    """Which template judges this question: abstention first, then by type."""
    if ABSTENTION_MARK in question_id:
        return "abstention"
    try:
        return _KEY_BY_TYPE[question_type]
    except KeyError:
        raise LmeError(f"question {question_id}: field question_type: no judge template for {question_type!r}.") from None


def load_templates(path: str | Path, pinned: Mapping[str, str] = LONGMEMEVAL_TEMPLATE_SHA256) -> dict[str, str]:
    """Read a templates file (`{"templates": {key: text}}`) and verify every template's SHA-256."""
    path = Path(path)
    if not path.exists():
        raise LmeError(
            f"{path}: judge templates file not found; fetch the LongMemEval templates or set judge.templates_path."
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LmeError(f"{path}: judge templates file is not valid JSON ({exc}).") from None
    templates = raw.get("templates") if isinstance(raw, dict) else None
    if not isinstance(templates, dict):
        raise LmeError(f"{path}: judge templates file has no 'templates' object.")
    for key in TEMPLATE_KEYS:
        text = templates.get(key)
        if not isinstance(text, str):
            raise LmeError(f"{path}: judge template {key!r} is missing.")
        digest = sha256_text(text)
        if key in pinned and digest != pinned[key]:
            raise LmeError(f"{path}: judge template {key!r} has SHA-256 {digest}, expected {pinned[key]}.")
    return {key: templates[key] for key in TEMPLATE_KEYS}


def build_judge_prompt(templates: Mapping[str, str], question: Question, hypothesis: str) -> str:
    """The filled template for one answer."""
    template = templates[template_key(question.question_id, question.question_type)]
    return template.format(question.question, question.answer, hypothesis)


def parse_verdict(reply: str) -> bool:
    """LongMemEval's rule: `'yes' in reply.strip().lower()`."""
    return "yes" in reply.strip().lower()


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reply: str | None  # None when no judge call was made or it failed
    call: CallResult | None
    note: str = ""

    @property
    def error(self) -> str | None:
        """Why the verdict is missing: its judge call failed (None when there is a verdict or no call was due)."""
        return self.call.error if self.call is not None and not self.call.ok else None


@dataclass(frozen=True)
class Judge:
    """A judge: a model, a template set, and whether it is the LongMemEval judge."""

    name: str
    official: bool
    model: ModelSpec
    templates: Mapping[str, str]

    @property
    def digests(self) -> dict[str, str]:
        return {key: sha256_text(text) for key, text in self.templates.items()}

    async def judge(self, gateway: Gateway, question: Question, answer: str | None) -> Verdict:
        if answer is None or not answer.strip():
            return Verdict(correct=False, reply=None, call=None, note="missing answer counts as wrong")
        prompt = build_judge_prompt(self.templates, question, answer)
        call = await gateway.complete(self.model, [{"role": "user", "content": prompt}], seed=None)
        if call.ok and not (call.text or "").strip():  # no verdict in it: a failed call, never a silent "no"
            call = replace(call, text=None, error="EmptyVerdict: the judge's reply is empty")
        if not call.ok:
            return Verdict(correct=False, reply=None, call=call, note=f"judge call failed: {call.error}")
        return Verdict(correct=parse_verdict(call.text or ""), reply=call.text, call=call)


def make_judge(
    name: str,
    official: bool,
    model: ModelSpec,
    templates_path: str | None = None,
    templates: Mapping[str, str] | None = None,
) -> Judge:
    """Build a judge from config: the official one needs the pinned LongMemEval templates file."""
    if templates_path:
        loaded = load_templates(templates_path)
    elif official:
        raise LmeError(f"judge {name}: judge.templates_path must point to the LongMemEval templates file.")
    elif templates:
        loaded = {key: str(value) for key, value in templates.items()}
        missing = [key for key in TEMPLATE_KEYS if key not in loaded]
        if missing:
            raise LmeError(f"judge {name}: field judge.templates lacks {', '.join(missing)}.")
    else:
        raise LmeError(f"judge {name}: set judge.templates_path or judge.templates.")
    return Judge(name=name, official=official, model=model, templates=loaded)
