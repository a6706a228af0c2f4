"""The corruption harness (issue 36, item 2): each case faults one stored file of a copy of a real workspace,
runs one command that reads it, and asserts no traceback, no hang, exit 2 with one sentence naming the file or
the recovery its contract documents, and every other file as it was (see harness.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corruption.harness import (
    COMMAND_ARGV, FAULTS, NOT_FAULTED, OUTCOME_KEY, SIDECARS, SLOW_COMMANDS, TARGETS, case_env, cases, checksums,
    classify, copy_workspace, fill, may_change, registry_case_of, registry_command,
)
from lme.util.stored_state import STORED, stored

CASES = cases()
PARAMS = [pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.command in SLOW_COMMANDS else [])
          for case in CASES]
_WRITE_FAULTS = ("read-only", "full-disk")


def with_bad_byte(name: str) -> str:
    """`name` with a byte that is not UTF-8 (0xff, as Python's surrogateescape spells it) before its suffix."""
    head, dot, suffix = name.rpartition(".")
    if not dot or "/" in suffix:
        return name + "-\udcff"
    return f"{head}-\udcff.{suffix}"


def _relative(path: Path, root: Path) -> str:
    return os.fsdecode(path.relative_to(root))


@pytest.mark.parametrize("case", PARAMS)
def test_stored_file_fault(case, harness_worker, harness_workspace, tmp_path, record_property, request):
    names = dict(harness_workspace if case.target.workspace == "common"
                 else request.getfixturevalue("harness_mem0_workspace"))
    root = tmp_path / "ws"
    copy_workspace(names, root)
    _, _, fault = FAULTS[case.fault]
    registry_case = registry_case_of(case)
    if case.fault in _WRITE_FAULTS and registry_command(case.command) not in stored(case.target.key).writers:
        record_property(OUTCOME_KEY, "skipped")
        pytest.skip(f"{case.command} does not write {case.target.key}")
    if case.fault == "non-utf8-path":
        placeholder = case.target.placeholder
        if placeholder is None:
            record_property(OUTCOME_KEY, "skipped")
            pytest.skip("no setting names this file's path")
        old = names[placeholder]
        new = str(Path(old).parent / with_bad_byte(Path(old).name)) if "/" in old else with_bad_byte(old)
        os.rename(root / old, root / new)
        names[placeholder] = new
    path = root / case.target.path.format(**names)
    fmt = "sqlite" if case.target.fmt == "vectors" else case.target.fmt
    applied = fault(path, fmt)
    try:
        if applied.skip:
            record_property(OUTCOME_KEY, "skipped")
            pytest.skip(applied.skip)
        faulted = _relative(path, root)
        before = checksums(root)
        env = case_env({"LME_MLFLOW_TEMPLATES": str(root / names["templates"]), **applied.env})
        result = harness_worker.run(fill(COMMAND_ARGV[case.command], names), root, env, tmp_path / "output.txt",
                                    fsize=applied.fsize)
    finally:
        for undo in applied.undo:
            undo()
    after = checksums(root)
    changed = sorted(
        relative for relative, digest in before.items()
        if relative != faulted and not relative.startswith(faulted + "/")
        and not relative.endswith(SIDECARS)  # SQLite's own: checkpointed and removed when a store closes
        and after.get(relative) != digest
        and not (relative in after and may_change(relative, case.command, names)))
    verdict = classify(case, result, changed, names, path)
    if verdict.outcome == "accepted-against-contract" and registry_case in ("locked", "read_only", "full_disk"):
        verdict.outcome = "accepted"  # the command did not need to write (or to wait for) the file
    record_property(OUTCOME_KEY, verdict.outcome)
    if os.environ.get("LME_HARNESS_LOG"):  # one line per case, for a list of the failing ones
        with open(os.environ["LME_HARNESS_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"case": case.id, "outcome": verdict.outcome, "detail": verdict.detail}) + "\n")
    assert not verdict.failed, (
        f"{case.target.key} x {case.fault} x {case.command} -> {verdict.outcome}: {verdict.detail}\n"
        f"(contract: {stored(case.target.key).contract.of_fault(registry_case, case.fault)})\n--- output ---\n{result.output[-2500:]}")


def test_every_registry_entry_is_faulted_or_says_why():
    keys = {entry.key for entry in STORED}
    targeted = {target.key for target in TARGETS}
    assert targeted <= keys, sorted(targeted - keys)
    assert set(NOT_FAULTED) <= keys, sorted(set(NOT_FAULTED) - keys)
    assert not targeted & set(NOT_FAULTED), sorted(targeted & set(NOT_FAULTED))
    assert keys == targeted | set(NOT_FAULTED), sorted(keys - targeted - set(NOT_FAULTED))


def test_every_command_of_the_matrix_is_known():
    used = {command for target in TARGETS for command in target.commands}
    assert used <= set(COMMAND_ARGV), sorted(used - set(COMMAND_ARGV))
    assert all(target.fault_names() for target in TARGETS)
