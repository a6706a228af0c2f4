"""Which instruction paragraphs describe which memory: a step whose instruction lists a paragraph
written for another memory (the user log's, over retrieved turns) tells the reader about a memory
it does not see.

Each memory builder and view declares the paragraphs that describe it in a class attribute,
`describes` (`UserLogMemoryBuilder.describes == ("user_log",)`). `paragraph_mismatch` checks one
step: a paragraph it lists is a mismatch when another known builder declares it and the step's own
builder does not. A paragraph no builder declares (`calibration`, `answer_format`) never is.
Pure: classes are imported by their dotted `_target_` path, without Hydra.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

# lme's own builders and views: the other builders a step's paragraphs are checked against.
LME_BUILDERS: tuple[str, ...] = (
    "lme.memory.retrieved.RetrievedMemoryBuilder",
    "lme.memory.user_log.UserLogMemoryBuilder",
    "lme.memory.sessions.WholeSessionView",
    "lme.memory.full_history.FullHistoryMemoryBuilder",
    "lme.memory.model_built.ModelBuiltMemoryBuilder",
    "lme.memory.systems.base.SystemMemoryBuilder",
)


def describing(target: str) -> tuple[str, ...]:
    """The paragraph names the class at the dotted path `target` declares in `describes`; () when it
    declares none, or when `target` cannot be imported (the run reports that itself)."""
    module_name, _, class_name = str(target).strip().rpartition(".")
    if not module_name or not class_name:
        return ()
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except Exception:  # noqa: BLE001 - any failure to import means: nothing declared here
        return ()
    declared = getattr(cls, "describes", ())
    if isinstance(declared, str):
        return (declared,)
    try:
        return tuple(str(name) for name in declared)
    except TypeError:
        return ()


def paragraph_mismatch(
    step: str, reads: str, target: str, paragraphs: Sequence[str], other_targets: Sequence[str]
) -> str | None:
    """None when every paragraph the step `step` lists fits the memory it reads (`reads`, built by
    the class `target`), else one sentence naming the first paragraph that describes another
    builder (one of `other_targets`) and not the step's own."""
    own = set(describing(target))
    others = [other for other in dict.fromkeys(str(t) for t in other_targets) if other != str(target)]
    declared = {other: describing(other) for other in others}
    for paragraph in paragraphs:
        if paragraph in own:
            continue
        owner = next((other for other in others if paragraph in declared[other]), None)
        if owner is not None:
            return (f'step {step} reads memory "{reads}" but its instruction lists paragraph "{paragraph}", '
                    f"which describes {owner}; drop the paragraph or read that memory.")
    return None
