"""Leakage audit: look for each reference answer in every instruction, paragraph, rule and example text.

    python -m lme audit [--all-designs] [--json] [overrides]

The overrides are a run's (`+design=pipeline dataset.path=FILE split=test ...`);
the questions are the ones that run would select (`lme.data.dataset.load_dataset`). No
model is called. Exit status: 1 when any hit is not a common word, else 0.

What is scanned (`config_texts`): every string under `instructions` and `rules`
(rule patterns as their source text, so a pattern naming an answer is found),
and any string under a key named `example`, `examples`, `prompt` or ending in
`_prompt` anywhere in the composed config.

What is looked for (`answer_phrases`), per question, case-insensitively, as a
whole word or phrase (not inside a longer word or number; white space runs and
curly quotes are folded):
- the answer as written, without surrounding quotes and final punctuation;
- for a multi-sentence answer, each sentence of at most 6 words ("30 days" of
  "30 days. 31 days (including the last day) is also acceptable."), and the
  alternative an "X (...) is also acceptable" sentence names ("31 days");
- the answer without its parenthetical parts; "(or X, ...)" gives X; in an
  answer of at most 8 words, a parenthetical of at most 4 words on its own
  ("UCLA"), unless it is a qualifier ("(including the last day)", "(if ...)",
  "(e.g. ...)", `_QUALIFIER`);
- each of these with its numbers the other way round: digits as words (3 ->
  three, 25 -> twenty-five or twenty five, 1300 -> one thousand three hundred)
  and number words as digits (Three times a week -> 3 times a week).
List answers are looked for as a whole ("Ruby, Python, or PHP"), not item by
item. Abstention questions (`_abs`) are skipped: their reference answer
explains why the question cannot be answered; it is not a fact a reader could
be handed. Preference questions' rubrics are long sentences, found only if
copied whole.

A hit is marked common (and does not fail the audit) when the matched phrase
is shorter than `MIN_CHARS` (3) characters, or every word of it is in
`STOP_WORDS`: English function words, yes/no, the number words zero to
ninety-nine, ordinals first to tenth, once/twice/half. Numbers of one or two
digits are therefore always common (they fall under the length threshold).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lme.config.design import Design

MIN_CHARS = 3
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_FUNCTION_WORDS = """
a an the and or but nor so yet if then than that this these those there here of in on at to for from by with
without about as into onto over under up down out off again once twice half is are was were be been being am
do does did done have has had having will would shall should can could may might must not no yes i me my mine
we us our ours you your yours he him his she her hers it its they them their theirs who whom whose which what
when where why how all any both each every few more most other some such only own same very just also too
first second third fourth fifth sixth seventh eighth ninth tenth
"""


def number_to_words(n: int) -> str:
    """English words for 0 <= n < 1,000,000,000 (`25` -> `twenty-five`, `1300` -> `one thousand three hundred`)."""
    if n < 20:
        return _UNITS[n]
    if n < 100:
        tens, unit = divmod(n, 10)
        return _TENS[tens - 2] + (f"-{_UNITS[unit]}" if unit else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_UNITS[hundreds]} hundred" + (f" {number_to_words(rest)}" if rest else "")
    for size, name in ((1_000_000, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            return f"{number_to_words(high)} {name}" + (f" {number_to_words(rest)}" if rest else "")
    raise ValueError(n)


_NUMBER_WORDS: dict[str, int] = {number_to_words(n): n for n in range(100)}
STOP_WORDS: frozenset[str] = frozenset(_FUNCTION_WORDS.split()) | frozenset(_NUMBER_WORDS) | frozenset(
    word.replace("-", " ") for word in _NUMBER_WORDS
)
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'", "\u201c": '"', "\u201d": '"'})
_SPACE = re.compile(r"\s+")
_TEXT_KEYS = ("example", "examples", "prompt", "instruction", "select")  # instruction: a model-built memory's


def fold(text: str) -> str:
    """Curly quotes straightened, white space runs folded to one space, ends stripped."""
    return _SPACE.sub(" ", str(text).translate(_QUOTES)).strip()


# ---------------------------------------------------------------- what is scanned


@dataclass(frozen=True)
class Text:
    path: str  # config path, e.g. instructions.paragraphs.calibration or rules.definitions.advice.patterns[3]
    text: str


def config_texts(container: Mapping[str, Any]) -> list[Text]:
    """Every string under `instructions` and `rules`, and under example/prompt keys anywhere."""
    found: list[Text] = []

    def walk(node: Any, path: str, scanned: bool) -> None:
        if isinstance(node, str):
            if scanned:
                found.append(Text(path, node))
        elif isinstance(node, Mapping):
            for key, value in node.items():
                name = str(key)
                text_key = name in _TEXT_KEYS or name.endswith("_prompt")
                walk(value, f"{path}.{name}" if path else name, scanned or text_key)
        elif isinstance(node, (list, tuple)):
            for index, item in enumerate(node):
                walk(item, f"{path}[{index}]", scanned)

    for key, value in container.items():
        walk(value, str(key), str(key) in ("instructions", "rules"))
    return found


# ---------------------------------------------------------------- what is looked for


def _strip_ends(text: str) -> str:
    text = fold(text)
    previous = None
    while text != previous:
        previous = text
        text = text.strip(" .,;:!?")
        if len(text) >= 2 and (text[0], text[-1]) in (("'", "'"), ('"', '"'), ("(", ")")):
            text = text[1:-1]
    return text


def _words_to_digits(phrase: str) -> str:
    """Number words in a phrase -> digits ("Three times a week" -> "3 times a week")."""
    tokens = phrase.split(" ")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        value, j = _read_number(tokens, i)
        if j > i:
            out.append(str(value))
            i = j
        else:
            out.append(tokens[i])
            i += 1
    return " ".join(out)


def _read_number(tokens: Sequence[str], start: int) -> tuple[int, int]:
    total = current = 0
    i = start
    seen = False
    while i < len(tokens):
        word = tokens[i].lower().strip(",.")
        parts = word.split("-")
        if word in _NUMBER_WORDS:
            current += _NUMBER_WORDS[word]
        elif len(parts) == 2 and all(part in _NUMBER_WORDS for part in parts):
            current += _NUMBER_WORDS[parts[0]] + _NUMBER_WORDS[parts[1]]
        elif word in _SCALES and seen:
            if word == "hundred":
                current *= 100
            else:
                total += current * _SCALES[word]
                current = 0
        elif word == "and" and seen and i + 1 < len(tokens) and tokens[i + 1].lower() in _NUMBER_WORDS:
            pass
        else:
            break
        seen = True
        i += 1
        if tokens[i - 1].endswith((",", ".")):
            break
    return total + current, i if seen else start


_QUALIFIER = re.compile(r"(?:including|excluding|if|e\.g\.|i\.e\.|from|as|for|not|about|approx)\b", re.IGNORECASE)
_DIGITS = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\w]|[.,]\d)|(?<![\w.,])\d+(?![\w]|[.,]\d)")


def _digits_to_words(phrase: str, hyphen: bool = True) -> str:
    def words(match: re.Match[str]) -> str:
        n = int(match.group(0).replace(",", ""))
        if n >= 1_000_000_000:
            return match.group(0)
        text = number_to_words(n)
        return text if hyphen else text.replace("-", " ")

    return _DIGITS.sub(words, phrase)


def answer_phrases(answer: str) -> tuple[str, ...]:
    """The phrases an answer is looked for as (see the module docstring), first the answer as written."""
    text = fold(answer)
    candidates = [_strip_ends(text)]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9(])", text) if s.strip()]
    if len(sentences) > 1:
        for sentence in sentences:
            sentence = _strip_ends(sentence)
            acceptable = re.match(r"(.+?)\s*(?:\([^)]*\))?\s+(?:is|are) also acceptable$", sentence, re.IGNORECASE)
            if acceptable:
                candidates.append(_strip_ends(acceptable.group(1)))
            elif len(sentence.split()) <= 6:
                candidates.append(sentence)
    for candidate in list(candidates):
        if "(" in candidate:
            candidates.append(_strip_ends(re.sub(r"\s*\([^)]*\)", "", candidate)))
            for inner in re.findall(r"\(([^)]*)\)", candidate):
                inner = inner.strip()
                alternative = re.match(r"or\s+(.+)", inner, re.IGNORECASE)
                if alternative:  # "(or X)": X is an answer too
                    inner = alternative.group(1).split(",")[0]
                elif _QUALIFIER.match(inner) or len(candidate.split()) > 8:
                    continue  # "(including the last day)", or an aside inside a long answer
                inner = _strip_ends(inner)
                if inner and len(inner.split()) <= 4:
                    candidates.append(inner)
    phrases: list[str] = []
    for candidate in candidates:
        for form in (candidate, _digits_to_words(candidate), _digits_to_words(candidate, hyphen=False),
                     _words_to_digits(candidate)):
            if form and form.lower() not in {p.lower() for p in phrases}:
                phrases.append(form)
    return tuple(phrases)


def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """Whole word or phrase, case-insensitive: not inside a longer word, nor a longer number."""
    body = r"\s+".join(re.escape(token) for token in phrase.split(" "))
    return re.compile(rf"(?<![\w])(?<!\d[.,])(?:{body})(?![\w])(?![.,]\d)", re.IGNORECASE)


def common_reason(phrase: str) -> str | None:
    """Why a matched phrase counts as a common word, or None."""
    core = phrase.strip()
    if len(core) < MIN_CHARS:
        return f"shorter than {MIN_CHARS} characters"
    words = [word.strip(".,;:!?'\"").lower() for word in core.split()]
    if all(word in STOP_WORDS for word in words):
        return "stop word" if len(words) == 1 else "stop words only"
    return None


# ---------------------------------------------------------------- hits


@dataclass(frozen=True)
class Hit:
    question_id: str
    answer: str  # the reference answer as in the data
    phrase: str  # the form that matched
    path: str  # where: a config path
    excerpt: str  # the matched text as it stands in the config text
    common: str | None  # why it is common, or None: a real hit
    designs: tuple[str, ...] = ()


def find_hits(texts: Sequence[Text], questions: Iterable[Any]) -> list[Hit]:
    """Every (question, text) pair where one of the question's answer phrases occurs. Abstention
    questions are skipped. One hit per question and text (the longest phrase that matched)."""
    folded = [(text.path, fold(text.text)) for text in texts]
    hits = []
    for question in questions:
        if question.is_abstention:
            continue
        phrases = sorted(answer_phrases(str(question.answer)), key=len, reverse=True)
        patterns = [(phrase, phrase_pattern(phrase)) for phrase in phrases]
        for path, text in folded:
            for phrase, pattern in patterns:
                match = pattern.search(text)
                if match:
                    hits.append(Hit(question.question_id, str(question.answer), phrase, path, match.group(0),
                                    common_reason(match.group(0))))
                    break
    return hits


# ---------------------------------------------------------------- command line


def shipped_designs() -> list[str]:
    from lme import CONF_DIR

    root = CONF_DIR / "design"  # with its subfolders' (the reference study's, study/01_user_log_bm25, ...)
    return sorted(path.relative_to(root).with_suffix("").as_posix() for path in root.rglob("*.yaml"))


@dataclass(frozen=True)
class DesignScan:
    design: str  # the design's name (design_name), or the +design override's value
    texts: tuple[Text, ...]
    questions: int
    abstention: int


def audit_runs(overrides: Sequence[str], all_designs: bool) -> list[tuple[str | None, list[str]]]:
    """(label, overrides) of each design to scan: the overrides' own (label None: the design's name), or
    every shipped design plus the default with --all-designs."""
    if not all_designs:
        return [(None, list(overrides))]
    rest = [o for o in overrides if not o.lstrip("+").startswith("design=")]
    return [("(no design)", rest)] + [(name, [f"+design={name}", *rest]) for name in shipped_designs()]


def scan(designs: Sequence[tuple[str | None, Design]]) -> tuple[list[DesignScan], list[Hit]]:
    """Load the questions each design's run selects, and find every hit in its texts; hits in a text several
    designs share are merged. A label None names the design by its `design_name`."""
    from lme.data.dataset import load_dataset
    from lme.config.design import plain

    loaded: dict[str, list[Any]] = {}
    scans: list[DesignScan] = []
    merged: dict[tuple[str, str, str], Hit] = {}
    for label, design in designs:
        name = label if label is not None else design.name
        selection_key = json.dumps([str(design.dataset.path), asdict(design.dataset.selection)], default=str)
        if selection_key not in loaded:
            loaded[selection_key] = list(load_dataset(design.dataset)[1])
        questions = loaded[selection_key]
        texts = config_texts(plain(design.config))
        scans.append(DesignScan(name, tuple(texts), len(questions), sum(1 for q in questions if q.is_abstention)))
        for hit in find_hits(texts, questions):
            text = next(t.text for t in texts if t.path == hit.path)
            key = (hit.question_id, hit.path, text)
            if key in merged:
                merged[key] = Hit(**{**asdict(merged[key]), "designs": (*merged[key].designs, name)})
            else:
                merged[key] = Hit(**{**asdict(hit), "designs": (name,)})
    hits = sorted(merged.values(), key=lambda h: (h.common is not None, h.path, h.phrase.lower(), h.question_id))
    return scans, hits


def _short(text: str, limit: int = 60) -> str:
    text = fold(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_hit(hit: Hit) -> str:
    mark = f"common ({hit.common})" if hit.common else "NOT COMMON"
    return (f"{mark}: question {hit.question_id}, answer {json.dumps(_short(hit.answer), ensure_ascii=False)}, "
            f"found as {json.dumps(hit.excerpt, ensure_ascii=False)} in {hit.path} "
            f"[{', '.join(hit.designs)}]")


def summary_lines(scans: Sequence[DesignScan], hits: Sequence[Hit]) -> list[str]:
    lines = []
    for item in scans:
        lines.append(f"{item.design}: {len(item.texts)} texts scanned against {item.questions - item.abstention} "
                     f"answers ({item.abstention} abstention questions skipped)")
    groups: dict[tuple[str, str, str | None], list[Hit]] = {}
    for hit in hits:
        groups.setdefault((hit.path, hit.excerpt.lower(), hit.common), []).append(hit)
    if groups:
        lines.append("hits by place and phrase:")
    for (path, excerpt, common), group in sorted(groups.items(), key=lambda item: (item[0][2] is not None, item[0])):
        designs = sorted({d for hit in group for d in hit.designs})
        mark = f"common ({common})" if common else "NOT COMMON"
        lines.append(f"  {mark}: {json.dumps(excerpt)} in {path}: {len(group)} question"
                     f"{'s' if len(group) != 1 else ''} [{', '.join(designs)}]")
    real = sum(1 for hit in hits if not hit.common)
    lines.append(f"{len(hits)} hits: {real} not common, {len(hits) - real} common.")
    return lines
