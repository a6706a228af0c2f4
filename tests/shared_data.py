"""The one way tests find the real LongMemEval test data (never committed; a fresh clone has none).

The data folder is `$LME_TEST_DATA` when that is set (then only that folder is looked at), else
`../shared/data` beside the checkout when it is there (a developer's convenience). It is laid out as:

    DIR/longmemeval/longmemeval_s_cleaned_mini.json.xz   the 16-question mini S file
    DIR/longmemeval/longmemeval_s_cleaned.json.xz        S (498 of its 500 questions)
    DIR/longmemeval/longmemeval_oracle.json.xz           oracle
    DIR/longmemeval/judge_templates.json                 the official judge templates
    DIR/oh_study/study_instructions.json                 the study's instruction texts
    DIR/locomo/locomo10.json                             LoCoMo's ten conversations and their questions

A test that reads one of these goes through this module: `needs(PATH, ...)` as a decorator or a module's
`pytestmark`, or `need(PATH)` inside a test or fixture. Without the file the test is skipped with `REASON`,
one sentence for every such test, which `tests/conftest.py` counts in one line at the end of the run.
tests/test_test_data_gate.py checks that no other test file names the data folder itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

ENV = "LME_TEST_DATA"
CHECKOUT = Path(__file__).resolve().parents[1]
BESIDE_THE_CHECKOUT = CHECKOUT.parent / "shared" / "data"
REASON = (f"needs the real LongMemEval test data: set {ENV}=DIR "
          "(a folder like ../shared/data with longmemeval/ and oh_study/)")


def data_root(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder the tests read real data from: `$LME_TEST_DATA` when set (whether or not it is there),
    else `../shared/data` beside the checkout (when that is not there either, no test finds its files)."""
    value = environ.get(ENV, "")
    return Path(value).expanduser().absolute() if value else BESIDE_THE_CHECKOUT


ROOT = data_root()
# Every file a test reads, relative to the data folder: the constants below, and the files the summary names
# when some are missing.
FILES = {
    "MINI": "longmemeval/longmemeval_s_cleaned_mini.json.xz",
    "S_FILE": "longmemeval/longmemeval_s_cleaned.json.xz",
    "ORACLE": "longmemeval/longmemeval_oracle.json.xz",
    "TEMPLATES": "longmemeval/judge_templates.json",
    "STUDY_INSTRUCTIONS": "oh_study/study_instructions.json",
    "LOCOMO": "locomo/locomo10.json",
}
MINI = ROOT / FILES["MINI"]
S_FILE = ROOT / FILES["S_FILE"]
ORACLE = ROOT / FILES["ORACLE"]
TEMPLATES = ROOT / FILES["TEMPLATES"]
STUDY_INSTRUCTIONS = ROOT / FILES["STUDY_INSTRUCTIONS"]
LOCOMO = ROOT / FILES["LOCOMO"]


def available(*paths: Path) -> bool:
    """Whether every one of `paths` (files of the data folder) is there."""
    return all(path.is_file() for path in paths)


def needs(*paths: Path) -> pytest.MarkDecorator:
    """Skip the test (or, as `pytestmark`, the module) with `REASON` unless every one of `paths` is there."""
    return pytest.mark.skipif(not available(*paths), reason=REASON)


def need(path: Path) -> Path:
    """`path` when it is there; else skip the calling test (or fixture) with `REASON`."""
    if not available(path):
        pytest.skip(REASON)
    return path


def missing(root: Path = ROOT) -> list[str]:
    """The files of `FILES` that `root` lacks, relative to it."""
    return [relative for relative in FILES.values() if not (root / relative).is_file()]


def is_data_skip(report: pytest.TestReport) -> bool:
    """Whether `report` is a test skipped by this gate (on the xdist controller too: its skip reason is kept)."""
    longrepr = report.longrepr
    return (report.skipped and isinstance(longrepr, (tuple, list)) and len(longrepr) == 3
            and str(longrepr[2]).removeprefix("Skipped: ") == REASON)


def summary(skipped: int, environ: Mapping[str, str] = os.environ) -> str:
    """The run's one line about the tests this gate skipped."""
    tests = f"{skipped} test{'s' if skipped != 1 else ''} skipped"
    root = data_root(environ)
    absent = missing(root)
    where = f"{ENV}={root}" if environ.get(ENV) else str(root)
    if absent and len(absent) < len(FILES):  # some of the data: name what is not there
        return (f"lme: {tests}: they need the real LongMemEval test data, and {where} lacks {', '.join(absent)}; "
                f"set {ENV}=DIR to a folder that has them to run them.")
    if absent and environ.get(ENV):
        return (f"lme: {tests}: they need the real LongMemEval test data, which {where} does not hold; "
                f"set {ENV}=DIR to a folder like ../shared/data to run them.")
    return f"lme: {tests}: they need the real LongMemEval test data; set {ENV}=DIR to run them."
