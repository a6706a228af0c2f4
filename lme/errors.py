"""User-facing errors: one clear sentence, no traceback."""

from __future__ import annotations


class LmeError(Exception):
    """An error caused by the user's input or setup, reported as one sentence."""


class DataError(LmeError):
    """A dataset file is missing, unreadable or does not follow the LongMemEval format."""
