"""User-facing errors: one clear sentence, no traceback."""

from __future__ import annotations


class LmeError(Exception):
    """An error caused by the user's input or setup, reported as one sentence."""


class DataError(LmeError):
    """A dataset file is missing, unreadable or does not follow the LongMemEval format."""


def first_line(error: BaseException | str, fallback: str | None = None) -> str:
    """The first line of an error's message, stripped: what a one-sentence error quotes of a library's
    multi-line message (a stack trace, an echoed input). An empty message gives `fallback`, which is by
    default the exception's class name (`""` for a string)."""
    text = str(error).strip()
    if text:
        return text.splitlines()[0].strip()
    if fallback is not None:
        return fallback
    return "" if isinstance(error, str) else type(error).__name__


# Exit statuses of `python -m lme` (README, "Exit statuses").
EXIT_OK = 0  # every question of every job has an answer and a verdict
EXIT_FAILED = 1  # an unexpected error (a bug): the traceback is printed
EXIT_BAD_INPUT = 2  # bad input, config, credentials or command, found before any model call
EXIT_BUDGET = 3  # a spending cap stopped the study; what finished is kept
EXIT_SYSTEMIC = 4  # a model call failed in a way no retry can fix (bad key, unknown model, ...); the study stopped
EXIT_INCOMPLETE = 5  # the study finished, but some answers or verdicts are missing (a rerun asks for exactly those)
EXIT_INTERRUPTED = 130  # interrupted (Ctrl-C); what finished is kept
