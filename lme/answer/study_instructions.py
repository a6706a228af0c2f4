"""The reference study's own reader instructions, read from a file the user supplies and verified.

The study (hraness/oh, `benchmarks/LONGMEMEVAL_S_500_RESULT_V1.md`, appendix "Instructions and rules")
publishes the SHA-256 of each of its four step instructions. The texts are the study's, not lme's: lme
never ships them. It pins the facts instead, the paragraph list of each step (`STUDY_STEPS`) and the
published digest of each composed step (`STUDY_INSTRUCTION_SHA256`), and reads the texts from a JSON file
(`{"base": TEXT, "paragraphs": {NAME: TEXT, ...}}`; other keys are ignored) that `instructions=study`
names (`instructions.source`, default `$LME_STUDY_INSTRUCTIONS` or `${data_dir}/study_instructions.json`).

`load_study_instructions(path)` composes every step as the study did (the base instruction, then the
step's paragraphs, joined by single spaces) and refuses, in one sentence naming the file and the step,
unless each composed instruction has the published digest. The digest rule (`study_digest`): SHA-256 of
the instruction encoded as a JSON string, UTF-8, non-ASCII kept (`json.dumps(text, ensure_ascii=False)`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from lme.answer.reader import compose_instruction
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text

# Each step's paragraphs after the base instruction, in the study's order (its appendix).
STUDY_STEPS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "first_pass": ("user_log", "calibration", "answer_format"),
    "advice": ("user_log", "answer_format", "advice"),
    "decline": ("whole_sessions", "answer_format"),
    "recall": ("whole_sessions", "answer_format", "recall"),
})
# The SHA-256 the study published for each composed step instruction (`study_digest`).
STUDY_INSTRUCTION_SHA256: Mapping[str, str] = MappingProxyType({
    "first_pass": "551f0c0de5df5642a732ecbee7c5fef9359bb6ce4cfa67526476b20c1719dd84",
    "advice": "4c1404fa181fad5e1ae281aa462a87b9c5e1099ad6349a2d0cda289ed60d9616",
    "decline": "5058ea6c013da4dac2d933a6ba397ac7b6e36ab5c5cf78259d24c47528335bba",
    "recall": "6f055965d7594ef9bd7a4ac345b8b42d23335c371ba76578d0565a237b9c49de",
})
STUDY_PARAGRAPHS: tuple[str, ...] = tuple(dict.fromkeys(name for names in STUDY_STEPS.values() for name in names))


def study_digest(instruction: str) -> str:
    """The study's digest of an instruction: SHA-256 of it encoded as a JSON string (non-ASCII kept)."""
    return sha256_text(json.dumps(instruction, ensure_ascii=False))


@dataclass(frozen=True)
class StudyInstructions:
    """The study's base instruction and paragraphs, read from `path`, every step verified."""

    path: str
    base: str
    paragraphs: Mapping[str, str]

    def compose(self, step: str) -> str:
        return compose_instruction(self.base, self.paragraphs, STUDY_STEPS[step])


def _read(path: Path) -> dict:
    if not os.path.lexists(path):
        from lme.data.folder import missing_in_folder

        if (sentence := missing_in_folder(path)) is not None:  # the data folder's own file: where it looked
            raise LmeError(sentence)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise LmeError(f"{path}: the study's instructions file {what}; point instructions.source (or "
                       "LME_STUDY_INSTRUCTIONS) at the JSON file holding the study's base instruction and paragraphs.")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LmeError(f"{path}: the study's instructions file is not readable JSON ({exc}).") from None
    if not isinstance(raw, dict):
        raise LmeError(f"{path}: the study's instructions file is not a JSON object.")
    return raw


def load_study_instructions(path: str | Path) -> StudyInstructions:
    """The study's texts from `path`; refuses (one sentence naming the file and the step) unless every step
    of `STUDY_STEPS` composes to its published digest."""
    path = Path(str(path)).expanduser()
    raw = _read(path)
    base = raw.get("base")
    if not isinstance(base, str) or not base.strip():
        raise LmeError(f"{path}: the study's instructions file has no base instruction (a non-empty string at 'base').")
    paragraphs = raw.get("paragraphs")
    if not isinstance(paragraphs, dict):
        raise LmeError(f"{path}: the study's instructions file has no 'paragraphs' object.")
    for name in STUDY_PARAGRAPHS:
        if not isinstance(paragraphs.get(name), str):
            step = next(step for step, names in STUDY_STEPS.items() if name in names)
            raise LmeError(f"{path}: step {step}: the study's paragraph {name!r} is missing (a string at "
                           f"'paragraphs.{name}').")
    loaded = StudyInstructions(str(path), base, MappingProxyType({name: paragraphs[name] for name in STUDY_PARAGRAPHS}))
    for step, names in STUDY_STEPS.items():
        digest = study_digest(loaded.compose(step))
        if digest != STUDY_INSTRUCTION_SHA256[step]:
            raise LmeError(f"{path}: step {step} (base + {', '.join(names)}) composes to SHA-256 {digest}, not the "
                           f"study's published {STUDY_INSTRUCTION_SHA256[step]}; refusing to run the study's "
                           "instructions from this file.")
    return loaded


def check_study_steps(path: str, steps: Mapping[str, Sequence[str]], texts: Mapping[str, str]) -> None:
    """Refuse a design whose step named like one of the study's (`first_pass`, `advice`, `decline`, `recall`)
    does not compose to the study's published digest (`texts`: step -> composed instruction; `steps`: step ->
    its paragraph names). A first pass of the base instruction alone is allowed: it is the reader of the
    study's retrieval baselines, and the base is verified inside every composed step."""
    for step, text in texts.items():
        if step == "first_pass" and not steps.get(step):
            continue  # the base instruction alone: the study's baselines' reader (verified inside every step)
        if step in STUDY_STEPS and study_digest(text) != STUDY_INSTRUCTION_SHA256[step]:
            names = ", ".join(steps.get(step, ()))
            raise LmeError(f"{path}: step {step} composes base + [{names}], not the study's {step} instruction "
                           f"(base + {', '.join(STUDY_STEPS[step])}, SHA-256 {STUDY_INSTRUCTION_SHA256[step]}); "
                           "with instructions=study, give the step the study's paragraphs.")
