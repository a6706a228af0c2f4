"""The LongMemEval judge templates as data: their keys, which template judges a question, their pinned
SHA-256 digests, and reading a templates file (`{"templates": {key: text}}`) with every digest verified.

Below the judge (`lme.judge`, which fills and sends them) so that the data commands (`lme data fetch
templates`) can verify what they download without reaching up to the judge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from lme.data.records import ABSTENTION_MARK
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text

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
        from lme.data.folder import missing_in_folder

        if (sentence := missing_in_folder(path)) is not None:  # the data folder's own file: where it looked
            raise LmeError(sentence)
        raise LmeError(
            f"{path}: judge templates file not found; fetch the LongMemEval templates or set judge.templates_path."
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # a directory in its place, an I/O error
        raise LmeError(f"{path}: judge templates file cannot be read ({exc.strerror or exc}); point "
                       "judge.templates_path (or LME_JUDGE_TEMPLATES) at the templates file.") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
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
