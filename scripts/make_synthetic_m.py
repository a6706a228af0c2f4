"""Write a synthetic LongMemEval-M-sized file in the official record format.

    python scripts/make_synthetic_m.py --out /tmp/synthetic_m.json            # 500 x 500 sessions, about 2.6 GB
    python scripts/make_synthetic_m.py --questions 3 --sessions 20 --out small.json.xz

Every word is made here: the frequent words come from the sentences of lme's
own bundled sample (`lme.data.sample.FILLER_TOPICS`), the rare ones are
invented from syllables. Words are drawn with Zipf-like frequencies, so BM25
has common words with low weight and rare words with high weight, as in real
chat. Nothing comes from LongMemEval.

Shape follows LongMemEval-M: each history has `--sessions` sessions of about
ten turns (about 10 KB of JSON a session, the user writing about 11% of
the text), one to four evidence sessions with `answer_` ids whose turns carry
`has_answer`, each with one planted user sentence holding the question's words
and the answer, filler sessions with `sharegpt_`/`ultrachat_`/hex ids, dates in
chronological order with the question dated after the last session. Question
types follow M's mix; about 6% are abstention questions (`_abs`), about 6%
have an integer answer.

Output is deterministic: the same `--seed` gives the same bytes, and question
i does not depend on `--questions` (a smaller file is a prefix of a larger
one, record by record). Records are built and written one at a time, so the
generator stays small in memory whatever the size. `.gz` and `.xz` outputs are
compressed as written (`--xz` adds `.xz`; xz uses preset 1 for speed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import random
import re
import sys
import time
from contextlib import ExitStack
from functools import lru_cache
from bisect import bisect
from collections import Counter
from datetime import datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from lme.data.sample import FILLER_TOPICS, format_lme_date

# M's question mix (the same 500 questions as S): type -> count.
TYPE_MIX: tuple[tuple[str, int], ...] = (
    ("single-session-user", 70),
    ("single-session-assistant", 56),
    ("single-session-preference", 30),
    ("multi-session", 133),
    ("temporal-reasoning", 133),
    ("knowledge-update", 78),
)
_SYLLABLES = tuple(
    onset + vowel + coda
    for onset in ("b", "br", "c", "d", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "pl", "r", "s", "st", "t", "tr", "v", "z")
    for vowel in ("a", "e", "i", "o", "u", "ai", "ou")
    for coda in ("", "n", "r", "l", "s")
)
_USER_OPENERS = ("I", "My", "We", "Yesterday I", "Can you explain why", "Last week my", "I wonder if", "Honestly my")
_ASSISTANT_OPENERS = ("The", "A good", "Usually the", "In practice a", "One option is the", "Remember that the", "Most")
VOCABULARY_SIZE = 12_000
SENTENCE_POOL = 20_000


class Text:
    """Zipf-weighted words and pools of sentences built from them, all from one seed."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"lme-synthetic-m:{seed}:vocabulary")
        sample_words = [word.lower() for word in re.findall(r"[A-Za-z]+", _sample_text())]
        common = [word for word, _ in Counter(sample_words).most_common()]  # by frequency, ties in order of appearance
        invented: dict[str, None] = {}
        while len(common) + len(invented) < VOCABULARY_SIZE:
            word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
            if word not in common:
                invented[word] = None
        self.words: list[str] = common + list(invented)
        self.cum_weights = list(accumulate(1.0 / (rank + 1) for rank in range(len(self.words))))
        self.rare: list[str] = self.words[len(self.words) // 4 :]  # words for questions and answers
        self.user = [self._sentence(rng, _USER_OPENERS, 6, 16) for _ in range(SENTENCE_POOL // 4)]
        self.assistant = [self._sentence(rng, _ASSISTANT_OPENERS, 10, 24) for _ in range(SENTENCE_POOL)]

    def draw(self, rng: random.Random, count: int) -> list[str]:
        total = self.cum_weights[-1]
        return [self.words[bisect(self.cum_weights, rng.random() * total)] for _ in range(count)]

    def _sentence(self, rng: random.Random, openers: tuple[str, ...], shortest: int, longest: int) -> str:
        words = self.draw(rng, rng.randint(shortest, longest))
        ending = "?" if openers is _USER_OPENERS and rng.random() < 0.3 else "."
        return f"{rng.choice(openers)} {' '.join(words)}{ending}"

    def turn(self, rng: random.Random, role: str) -> str:
        if role == "user":
            return " ".join(rng.choices(self.user, k=rng.randint(1, 5)))
        return " ".join(rng.choices(self.assistant, k=rng.randint(8, 23)))


@lru_cache(maxsize=4)
def text_for(seed: int) -> Text:
    """The `Text` of a seed, built once per process."""
    return Text(seed)


def _sample_text() -> str:
    return " ".join(text for topic in FILLER_TOPICS for pair in topic for text in pair)


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(32):08x}"


def _filler_id(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(7))
        return f"sharegpt_{letters}_{rng.randint(0, 400)}"
    if kind < 0.75:
        return f"ultrachat_{rng.randint(0, 999_999)}"
    return f"{_hex(rng)}_{rng.randint(1, 3)}" if rng.random() < 0.3 else _hex(rng)


def make_record(text: Text, seed: int, index: int, sessions: int) -> dict[str, Any]:
    """Question `index` of the file, with a history of `sessions` sessions."""
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}.")
    rng = random.Random(f"lme-synthetic-m:{seed}:question:{index}")
    question_type = rng.choices([name for name, _ in TYPE_MIX], weights=[count for _, count in TYPE_MIX])[0]
    question_id = _hex(rng) + f"{index:04x}" + ("_abs" if rng.random() < 0.06 else "")
    evidence_count = min(sessions, rng.randint(2, 4) if question_type == "multi-session" else rng.randint(1, 2))
    evidence = set(rng.sample(range(sessions), evidence_count))

    subject = rng.sample(text.rare, 3)
    answer: str | int = rng.randint(2, 40) if rng.random() < 0.06 else " ".join(rng.sample(text.rare, 2))
    question = f"What did I tell you about my {subject[0]} {subject[1]} and the {subject[2]}?"

    moment = datetime(2022, 1, 3) + timedelta(minutes=rng.randint(0, 60 * 24 * 300))
    dates, ids, history, answer_ids = [], [], [], []
    used: set[str] = set()
    for position in range(sessions):
        moment += timedelta(minutes=rng.randint(20, 60 * 20))
        is_evidence = position in evidence
        session_id = f"answer_{_hex(rng)}" if is_evidence else _filler_id(rng)
        while session_id in used:
            session_id += "x"
        used.add(session_id)
        turns: list[dict[str, Any]] = []
        planted = rng.randrange(rng.randint(4, 6)) if is_evidence else -1
        for pair in range(rng.randint(4, 6)):
            user = text.turn(rng, "user")
            reply = text.turn(rng, "assistant")
            if pair == planted:
                user = f"{user} By the way, my {subject[0]} {subject[1]} near the {subject[2]} is {answer}."
            turns.append({"role": "user", "content": user})
            turns.append({"role": "assistant", "content": reply})
            if is_evidence:
                turns[-2]["has_answer"] = pair == planted
                turns[-1]["has_answer"] = pair == planted and question_type == "single-session-assistant"
        dates.append(format_lme_date(moment))
        ids.append(session_id)
        history.append(turns)
        if is_evidence:
            answer_ids.append(session_id)
    question_date = moment + timedelta(minutes=rng.randint(60, 60 * 24 * 10))
    return {
        "question_id": question_id,
        "question_type": question_type,
        "question": question,
        "question_date": format_lme_date(question_date),
        "answer": answer,
        "answer_session_ids": answer_ids,
        "haystack_dates": dates,
        "haystack_session_ids": ids,
        "haystack_sessions": history,
    }


def _open_output(stack: ExitStack, path: Path, name: str) -> IO[bytes]:
    """`path` opened for writing, compressed as `name`'s suffix says (gzip without a timestamp)."""
    if name.endswith(".xz"):
        return stack.enter_context(lzma.open(path, "wb", preset=1))
    raw = stack.enter_context(open(path, "wb"))
    if name.endswith(".gz"):
        return stack.enter_context(gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0))
    return raw


def write_synthetic(out: str | Path, questions: int = 500, sessions: int = 500, seed: int = 0) -> int:
    """Write the file (compressed by its suffix) record by record; return the JSON bytes written.

    Writes to `<out>.part` and renames at the end, so no partial file is left under `out`.
    """
    if questions < 0:
        raise ValueError(f"questions must be >= 0, got {questions}.")
    out = Path(out)
    part = out.with_name(out.name + ".part")
    text = text_for(seed)
    written = 0
    try:
        with ExitStack() as stack:
            handle = _open_output(stack, part, out.name)
            handle.write(b"[")
            written += 1
            for index in range(questions):
                chunk = ("" if index == 0 else ", ") + json.dumps(make_record(text, seed, index, sessions))
                data = chunk.encode("utf-8")
                handle.write(data)
                written += len(data)
            handle.write(b"]")
            written += 1
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=500, help="records to write (default 500)")
    parser.add_argument("--sessions", type=int, default=500, help="sessions per history (default 500)")
    parser.add_argument("--out", type=Path, required=True, help="output path (.json, .json.gz or .json.xz)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--xz", action="store_true", help="compress with xz (adds .xz to --out when missing)")
    args = parser.parse_args(argv)
    if args.questions < 0 or args.sessions < 1:
        parser.error("--questions must be >= 0 and --sessions >= 1")
    out: Path = args.out
    if args.xz and not out.name.endswith(".xz"):
        out = out.with_name(out.name + ".xz")
    started = time.perf_counter()
    written = write_synthetic(out, args.questions, args.sessions, args.seed)
    seconds = time.perf_counter() - started
    print(
        f"{out}: {args.questions} questions x {args.sessions} sessions, {written / 1e9:.3f} GB of JSON "
        f"({out.stat().st_size / 1e9:.3f} GB on disk), {seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
