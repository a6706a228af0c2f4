"""Budgets are bytes of UTF-8, counted here and nowhere else."""

from __future__ import annotations


def utf8_len(text: str) -> int:
    """Number of bytes `text` takes as UTF-8."""
    return len(text.encode("utf-8"))
