"""Mem0's LoCoMo judge ("J") as data: its template file, the template's pinned SHA-256, filling the template,
reading the judge's label, and LoCoMo's own rule for adversarial (category 5) questions.

J is the LLM judge of Mem0's LoCoMo evaluation (`evaluation/metrics/llm_judge.py` in mem0ai/mem0 at commit
b3ede5b7c0ac0e847b03786a603c107ac943b3ee, `ACCURACY_PROMPT`), which many memory systems report. lme never ships its
text: the user supplies a JSON file (`judge.templates_path`, default `$LME_LOCOMO_JUDGE` or
`<data_dir>/locomo/judge_templates.json`) of this shape:

    {"source": {"repository": ..., "path": ..., "commit": ..., ...},
     "request": {"model": "gpt-4o-mini", "temperature": 0.0, "response_format": {"type": "json_object"},
                 "role": "user", "format_fields": ["question", "gold_answer", "generated_answer"],
                 "skips_category": 5, "label_key": "label", "correct_label": "CORRECT"},
     "template": "...", "template_sha256": "..."}

`load_locomo_judge` reads it, checks every field (one sentence naming the file and the field), and refuses a
template whose SHA-256 is not the one pinned here. The request block must describe the protocol lme sends
(`MEM0_REQUEST`): the judge's model and settings themselves come from `conf/judge/locomo_j.yaml`.

The protocol, as Mem0's code runs it: the template filled with `str.format(question=, gold_answer=,
generated_answer=)` is the only (user) message; the reply, stripped, is taken from inside a ``` fence when it has
one (```json too), read as JSON, and its `label` compared with `"CORRECT"`. Mem0 counts every other label as wrong
and crashes on a reply that is not JSON; lme reads only `CORRECT` or `WRONG` (exactly, as Mem0 compares) and makes
anything else no verdict (`read_label` gives the reason): the judge call counts as failed, the answer as wrong,
never silently as WRONG. Category 5 (adversarial) Mem0 leaves out; lme gives it LoCoMo's own rule
(`adversarial_correct`) without a model call.

Below the judge (`lme.judge`, which sends the request) so that reports and data commands can use the rule and
the pin without reaching up to it.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lme.data.parse import check_data_file
from lme.data.validate import MAX_NESTING, nested_past, value_problem
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text

LOCOMO_J_KEY = "locomo_j"  # the judge's one template, as `Judge.templates` and its digests name it
LOCOMO_J_NAME = "locomo-j"  # judge=locomo_j's name (runs' `lme.judge` tag): `lme.judge.describe_judge` knows it by it
LOCOMO_J_TEMPLATE_SHA256 = "62395dd312a631dfd9355026a0b69cc936018274c3198b6365b5c2a5c9bca9e0"
LOCOMO_J_SOURCE = ("mem0ai/mem0", "evaluation/metrics/llm_judge.py", "b3ede5b7c0ac0e847b03786a603c107ac943b3ee")
MEM0_MODEL = "gpt-4o-mini"  # the model id Mem0's evaluation names (an alias; its one snapshot is 2024-07-18)
FORMAT_FIELDS: tuple[str, ...] = ("question", "gold_answer", "generated_answer")
LABEL_KEY = "label"
LABELS: Mapping[str, bool] = MappingProxyType({"CORRECT": True, "WRONG": False})
ADVERSARIAL_TYPE = "adversarial"  # LoCoMo's category 5, as lme's question_type names it
ADVERSARIAL_CATEGORY = 5
ADVERSARIAL_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")
ADVERSARIAL_NOTE = ("adversarial (LoCoMo category 5): not LLM-judged, as Mem0's evaluation leaves category 5 out; "
                    "LoCoMo's own rule: correct iff the answer says 'no information available' or 'not mentioned'")
# What Mem0's evaluation sends and reads, as the file's `request` block must say it.
MEM0_REQUEST: Mapping[str, Any] = MappingProxyType({
    "model": MEM0_MODEL,
    "temperature": 0.0,
    "response_format": {"type": "json_object"},
    "role": "user",
    "format_fields": list(FORMAT_FIELDS),
    "skips_category": ADVERSARIAL_CATEGORY,
    "label_key": LABEL_KEY,
    "correct_label": "CORRECT",
})
MAX_FILE_BYTES = 1 << 20  # the real file is about 3 KB
SETTING = "judge.templates_path (or LME_LOCOMO_JUDGE)"
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


@dataclass(frozen=True)
class LocomoJudgeFile:
    """A verified LoCoMo judge file: its template, the template's digest, and what the file says of its source."""

    path: str
    template: str
    sha256: str
    source: Mapping[str, Any] = field(default_factory=dict)

    @property
    def templates(self) -> dict[str, str]:
        """The template as `lme.judge.Judge.templates` holds it."""
        return {LOCOMO_J_KEY: self.template}


# -- the rule for category 5 ----------------------------------------------------------------------------------


def adversarial_correct(answer: str) -> bool:
    """LoCoMo's own rule for an adversarial (category 5) question: the answer is correct iff, lower-cased, it
    contains 'no information available' or 'not mentioned'."""
    text = answer.lower()
    return any(phrase in text for phrase in ADVERSARIAL_PHRASES)


def is_adversarial(question_type: str) -> bool:
    """Whether a question is LoCoMo's category 5, which Mem0's judge never sees."""
    return question_type == ADVERSARIAL_TYPE


# -- the request and the reply ----------------------------------------------------------------------------------


def fill_template(template: str, question: str, gold_answer: str, generated_answer: str) -> str:
    """The judge's one user message: the template filled by name, as Mem0's `ACCURACY_PROMPT.format(...)`."""
    return template.format(question=question, gold_answer=gold_answer, generated_answer=generated_answer)


def _shown(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


def read_label(reply: str) -> tuple[bool | None, str]:
    """The verdict in J's reply and, when there is none, why: (True, "") for label CORRECT, (False, "") for
    WRONG, (None, reason) for anything else. The reply is read as Mem0 reads it: stripped, the inside of a
    ``` (or ```json) fence when there is one, then JSON; its `label` must be exactly CORRECT or WRONG."""
    text = reply.strip()
    if not text:
        return None, "the judge's reply is empty"
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    if nested_past(body):
        return None, f"the judge replied JSON nested more than {MAX_NESTING} deep"
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return None, f"the judge replied {_shown(text)}, not JSON"
    if not isinstance(value, dict) or LABEL_KEY not in value:
        return None, f"the judge replied {_shown(text)}, JSON without a {LABEL_KEY!r} key"
    label = value[LABEL_KEY]
    if isinstance(label, str) and label in LABELS:
        return LABELS[label], ""
    return None, f"the judge's label is {_shown(json.dumps(label, ensure_ascii=False))}, neither CORRECT nor WRONG"


# -- the file ----------------------------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _read_json(path: Path) -> Any:
    check_data_file(path, f"Mem0's LoCoMo judge template file; set {SETTING}")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise LmeError(f"{path}: the LoCoMo judge template file cannot be read ({exc.strerror or exc}).") from None
    if len(data) > MAX_FILE_BYTES:
        raise LmeError(f"{path}: the LoCoMo judge template file is larger than {MAX_FILE_BYTES} bytes; "
                       "it is not the file of Mem0's template.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LmeError(f"{path}: the LoCoMo judge template file is not UTF-8 (byte {exc.start}).") from None
    if nested_past(text):
        raise LmeError(f"{path}: the LoCoMo judge template file nests arrays and objects more than {MAX_NESTING} "
                       "deep; it is not the file of Mem0's template.")
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        reason = f"{exc.msg}; line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) \
            else str(exc)
        raise LmeError(f"{path}: the LoCoMo judge template file is not valid JSON ({reason}).") from None
    if (problem := value_problem(raw, 0)) is not None:
        where, what = problem
        raise LmeError(f"{path}: field {where.lstrip('.') or '(the top)'} of the LoCoMo judge template file {what}.")
    if not isinstance(raw, dict):
        raise LmeError(f"{path}: the LoCoMo judge template file holds {_kind(raw)}, not a JSON object.")
    return raw


def _field(path: Path, raw: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    name = f"{where}{key}"
    if key not in raw:
        raise LmeError(f"{path}: field {name!r} of the LoCoMo judge template file is missing.")
    value = raw[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(_kind(k()) for k in kinds)
        raise LmeError(f"{path}: field {name!r} of the LoCoMo judge template file is {_kind(value)}, "
                       f"expected {wanted}.")
    return value


def _check_request(path: Path, raw: Mapping[str, Any]) -> None:
    """The file's `request` block must describe what lme sends and reads (`MEM0_REQUEST`)."""
    request = _field(path, raw, "request", dict)
    kinds: dict[str, type | tuple[type, ...]] = {
        "model": str, "temperature": (int, float), "response_format": dict, "role": str, "format_fields": list,
        "skips_category": int, "label_key": str, "correct_label": str}
    for key, expected in MEM0_REQUEST.items():
        value = _field(path, request, key, kinds[key], "request.")
        if value != expected:
            raise LmeError(f"{path}: field 'request.{key}' of the LoCoMo judge template file is "
                           f"{json.dumps(value, ensure_ascii=False)}, but lme's LoCoMo judge sends and reads "
                           f"Mem0's {json.dumps(expected)}.")


def template_fields(template: str) -> set[str]:
    """The names `str.format` fills in `template` (a malformed brace is a `ValueError`)."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def load_locomo_judge(path: str | Path, expected_sha256: str = LOCOMO_J_TEMPLATE_SHA256) -> LocomoJudgeFile:
    """Read and verify the LoCoMo judge file at `path`: its shape, its request block, and its template's SHA-256
    against `expected_sha256` (lme's pin; a test passes its own for a made-up template). One sentence naming the
    file and the field on anything wrong; a changed template is refused naming both digests."""
    path = Path(str(path)).expanduser()
    raw = _read_json(path)
    source = _field(path, raw, "source", dict)
    _check_request(path, raw)
    template = _field(path, raw, "template", str)
    stated = _field(path, raw, "template_sha256", str)
    digest = sha256_text(template)
    if stated != digest:
        raise LmeError(f"{path}: field 'template_sha256' of the LoCoMo judge template file is {stated}, but its "
                       f"template's SHA-256 is {digest}; the file is inconsistent.")
    if digest != expected_sha256:
        raise LmeError(f"{path}: the LoCoMo judge template has SHA-256 {digest}, expected {expected_sha256} "
                       "(Mem0's ACCURACY_PROMPT), so it is refused.")
    try:
        names = template_fields(template)
    except ValueError as exc:
        raise LmeError(f"{path}: field 'template' of the LoCoMo judge template file is not a str.format "
                       f"template ({exc}).") from None
    if names != set(FORMAT_FIELDS):
        raise LmeError(f"{path}: field 'template' of the LoCoMo judge template file fills {sorted(names)}, "
                       f"not {list(FORMAT_FIELDS)}.")
    return LocomoJudgeFile(path=str(path), template=template, sha256=digest, source=MappingProxyType(dict(source)))


__all__ = [
    "ADVERSARIAL_NOTE", "ADVERSARIAL_PHRASES", "ADVERSARIAL_TYPE", "FORMAT_FIELDS", "LABELS", "LOCOMO_J_KEY",
    "LOCOMO_J_NAME", "LOCOMO_J_SOURCE", "LOCOMO_J_TEMPLATE_SHA256", "MEM0_MODEL", "MEM0_REQUEST", "LocomoJudgeFile",
    "adversarial_correct", "fill_template", "is_adversarial", "load_locomo_judge", "read_label",
    "template_fields",
]
