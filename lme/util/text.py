"""Word-level text helpers shared by text builders and the offline stand-ins."""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be because been before being below between both but by
    can could did do does doing down during each few for from further had has have having he her here hers him his
    how i if in into is it its itself just me more most my myself no nor not now of off on once only or other our
    ours out over own same she should so some such than that the their theirs them then there these they this those
    through to too under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves tell know remember much many""".split()
)
WORD = re.compile(r"[^\W_]+", re.UNICODE)


def stem(word: str) -> str:
    """A crude suffix stripper: enough to match `plants`/`plant`, `visited`/`visit`."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def words(text: str) -> list[str]:
    """Lower-cased, stemmed words, in order, stopwords included."""
    return [stem(word.lower()) for word in WORD.findall(text)]


def content_words(text: str) -> set[str]:
    """Lower-cased, stemmed words that carry content (stopwords dropped)."""
    return {stem(word) for word in (w.lower() for w in WORD.findall(text)) if word not in STOPWORDS}
