"""Who "the user" is in a conversation between two people (LoCoMo), for a memory built around the user's messages.

The user log (`lme.memory.user_log`) holds every message of the user and retrieves the other side's replies. A
LoCoMo conversation has two people and no user, so `memory.speakers` chooses (it must: unset, the log is refused
before the run, `lme.data.benchmark.require_one_user`):

- `both`: every message of both speakers is in the log (the whole conversation, with resolved dates; nothing
  is left to retrieve);
- `asked_about`: the speaker the question names, when it names exactly one of the two (by whole word, any case:
  "What did Caroline ...") holds the log and the other speaker's messages are retrieved; a question that names
  neither or both gets both. Only the question's text is read, never its answer or evidence.

`speaker_view` gives the question as the log builder reads it: the chosen speakers' turns take the role `user`,
the others `assistant`; ids, texts, dates and speakers' names are unchanged.
"""

from __future__ import annotations

import re
from dataclasses import replace

from lme.data.records import Question

SPEAKER_CHOICES: tuple[str, ...] = ("both", "asked_about")


def speakers_of(question: Question) -> tuple[str, ...]:
    """The speakers' names, in order of first appearance (empty for a user-and-assistant history)."""
    return tuple(dict.fromkeys(turn.speaker for turn in question.turns() if turn.speaker))


def asked_about(question: Question, names: tuple[str, ...]) -> str | None:
    """The one speaker the question's text names (whole word, any case), or None when it names neither or both."""
    named = [name for name in names if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", question.question, re.IGNORECASE)]
    return named[0] if len(named) == 1 else None


def speaker_view(question: Question, choice: str) -> tuple[Question, tuple[str, ...]]:
    """The question with the chosen speakers as the user (see the module docstring), and their names."""
    from lme.util.errors import LmeError

    if choice not in SPEAKER_CHOICES:
        raise LmeError(f"memory.speakers {choice!r} is unknown (known: {', '.join(SPEAKER_CHOICES)}).")
    names = speakers_of(question)
    one = asked_about(question, names) if choice == "asked_about" else None
    logged = (one,) if one else names
    sessions = tuple(
        replace(session, turns=tuple(replace(turn, role="user" if turn.speaker in logged else "assistant")
                                     for turn in session.turns))
        for session in question.sessions)
    return replace(question, sessions=sessions), logged
