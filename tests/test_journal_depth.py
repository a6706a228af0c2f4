"""A journal line nested deeper than the C JSON parser can follow is one sentence, whatever the interpreter's
recursion limit: the parser's own depth check follows that limit, and a limit raised high (by a library or a
test in the same process) let a line of 100,000 brackets overflow the C stack (a segmentation fault)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
sys.setrecursionlimit(200_000)
from lme.answer.run import parse_journal_line
from lme.util.errors import LmeError
for line in ["[" * 100_000, "{" + '"a":{' * 100_000]:
    try:
        parse_journal_line(line, "outcomes.jsonl, line 2")
    except LmeError as exc:
        print(exc)
"""


def test_a_deep_line_is_one_sentence_whatever_the_recursion_limit():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("outcomes.jsonl, line 2: JSON nested too deeply") for line in lines)


def test_brackets_inside_strings_are_text_not_nesting():
    from lme.answer.run import JOURNAL_NESTING
    from lme.data.validate import nested_past as _nested_past

    assert _nested_past("[" * (JOURNAL_NESTING + 1), JOURNAL_NESTING)
    assert not _nested_past("[" * JOURNAL_NESTING + "]" * JOURNAL_NESTING, JOURNAL_NESTING)
    assert not _nested_past('{"answer": "' + "[" * 500 + '"}', JOURNAL_NESTING)
    assert _nested_past('{"answer": "\\\\"' + "[" * 500, JOURNAL_NESTING)  # an escaped backslash ends no string
