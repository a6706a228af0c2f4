"""An API key checked as a value, before any call: what an HTTP header can carry, and nothing a shell left.

A key goes out in a header (`Authorization: Bearer KEY`, `x-api-key: KEY`, ...). httpx refuses a header value
with a newline or a character outside Latin-1, and litellm reports that as a connection or server error, so
before this check a key read from a file with its trailing newline failed every call as a retryable
"InternalServerError" and the run advised a rerun that could not help. Provider keys are visible ASCII
(letters, digits, `-_.+/=:`), so a key is refused when it holds anything else: whitespace at either end or
inside (a newline from `$(cat key.txt)` or a copied line), a control character, a non-ASCII character (a
typographic dash or quote from a document, a no-break space, a byte-order mark).

The refusal is one sentence naming the variable, the character's position (1-based) and its code point; never
the key, nor any part of it.
"""

from __future__ import annotations

import os
import unicodedata

from lme.util.errors import LmeError

_NAMES = {
    "\n": "a newline",
    "\r": "a carriage return",
    "\t": "a tab",
    " ": "a space",
    "\u00a0": "a no-break space",
    "\u200b": "a zero-width space",
    "\ufeff": "a byte-order mark",
}


def _visible_ascii(char: str) -> bool:
    return "\x21" <= char <= "\x7e"


def _describe(char: str) -> str:
    if char in _NAMES:
        return _NAMES[char]
    if char.isspace():
        return "a whitespace character"
    if unicodedata.category(char) in ("Cc", "Cf"):
        return "a control character"
    if ord(char) < 0x80:  # only DEL is left here; kept for completeness
        return "a control character"
    return "a non-ASCII character"


def _invisible(char: str) -> bool:
    """Whitespace, or a control or format character (a byte-order mark, a zero-width space)."""
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf")


def key_problem(value: str) -> str | None:
    """What makes `value` unusable as an API key, as a clause naming the first bad character's position and
    code point ("ends with a newline (character 52, U+000A); remove it"), or None when it is visible ASCII."""
    if all(_visible_ascii(char) for char in value):
        return None
    if all(_invisible(char) for char in value):
        return f"holds only whitespace ({len(value)} characters); export the key itself"
    last = len(value)
    for index, char in enumerate(value, start=1):
        if _visible_ascii(char):
            continue
        what = _describe(char)
        code = f"character {index}, U+{ord(char):04X}"
        if index == 1 and _invisible(char):
            return f"starts with {what} ({code}); remove it"
        if all(_invisible(rest) for rest in value[index - 1:]):  # nothing visible from here to the end
            where = "ends with" if index == last else f"ends with {last - index + 1} invisible characters, the first"
            return f"{where} {what} ({code}); remove {'it' if index == last else 'them'}"
        if what == "a non-ASCII character":
            return (f"holds {what} ({code}), which an HTTP header cannot carry (a key is plain ASCII); "
                    "retype or copy the key again")
        return f"holds {what} inside it ({code}); remove it"
    return None  # not reached: some character was not visible ASCII


def check_key(variable: str, value: str | None, owner: str | None = None) -> None:
    """Raise `LmeError` (one sentence naming `variable` and the character, never the key) when the key in
    `variable` cannot be sent as it is. `owner` names who reads it ("model openai/gpt-4o-mini"). An unset or
    empty variable is not this check's to refuse (the callers say it is not set)."""
    if not value:
        return
    problem = key_problem(value)
    if problem is not None:
        prefix = f"{owner}: the environment variable {variable} (its api_key_env)" if owner else variable
        raise KeyRefused(f"{prefix} {problem}.")


def check_key_variable(variable: str, owner: str | None = None) -> None:
    """`check_key` on the environment variable's current value."""
    check_key(variable, os.environ.get(variable), owner)


class KeyRefused(LmeError):
    """An API key's value cannot be sent in an HTTP header (or holds whitespace a shell left): refused before
    any call, exit status 2."""


__all__ = ["KeyRefused", "check_key", "check_key_variable", "key_problem"]
