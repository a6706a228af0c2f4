"""LoCoMo's official question-answering score, exactly: token F1 with LoCoMo's normalisation and Porter stems.

LoCoMo (snap-research/LoCoMo) scores an answer in `task_eval/evaluation.py` (`eval_question_answering`) and
summarises in `task_eval/evaluation_stats.py` (`analyze_aggr_acc`). This module is lme's own implementation of
the same rules, written so that every figure equals the one LoCoMo's code gives, edge cases included:

* The reference is `str(answer)` (six of locomo10's answers are integers), or `adversarial_answer` when the
  question has no `answer` key. Category 3 (open-domain) keeps only the text before the first `;`, stripped.
* Categories 2, 3, 4 score `token_f1(prediction, reference)`.
* Category 1 (multi-hop) splits prediction and reference on `,`, and averages over the reference's parts the best
  `token_f1` against any prediction part (`multi_answer_f1`). An empty reference part (a trailing or doubled
  comma) has no tokens and scores 0 against everything, so it pulls the mean down: "x," scores at most 0.5.
* Category 5 (adversarial) scores 1 when the lower-cased prediction contains "no information available" or
  "not mentioned" (anywhere, as a substring: "not mentioned" inside "is not mentioned." counts), else 0; the
  reference is not looked at.
* Normalisation (`normalize`): commas removed first, then lower case, then ASCII punctuation (`string.punctuation`)
  dropped, then the words a, an, the, and replaced by a space (at word boundaries of the `regex` package, which
  LoCoMo uses and which nltk depends on), then runs of whitespace collapsed to one space.
* Tokens are the normalised text split on whitespace, each stemmed by nltk's `PorterStemmer()` in its default
  (NLTK_EXTENSIONS) mode. F1 is over the token multisets; when no token is shared (an empty prediction or an
  empty reference included) the score is 0 before any division, so nothing divides by zero.

What lme adds: every score is a Python float (LoCoMo's are an int 0 or 1, a float, or a numpy float for
category 1); a missing prediction (None) scores 0.0 (LoCoMo's code would fail on it); an unknown category or a
question with neither answer key is a `DataError` (LoCoMo raises a bare ValueError, or skips the question with a
warning and then fails its own count check).

The summaries. LoCoMo's `evaluate_qa.py` stores each question's F1 rounded to 3 decimals (`round(score, 3)`; for
category 1 that is numpy's rounding of a numpy float, which can differ from Python's: 0.1235 gives 0.124, not
0.123), and `analyze_aggr_acc` prints, in the category order 4, 1, 2, 3, 5, each category's count, the sum of the
rounded scores ("Correct", one decimal) and their mean rounded to 3 decimals ("Accuracy"), then one
"Overall accuracy": the sum over all five categories, adversarial included, divided by the number of questions,
rounded to 3 decimals. `locomo_stats` gives those numbers and `locomo_stats_text` those lines. `f1_summary` is
lme's figure: unrounded means per category, overall, and `overall_without_adversarial` (categories 1-4 only,
the figure many papers report).

nltk's stemmer is imported on first use (importing nltk takes seconds); it needs no nltk data, so nothing here
downloads anything.
"""

from __future__ import annotations

import functools
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import regex

from lme.util.errors import DataError

CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
CATEGORY_NUMBERS: dict[str, int] = {name: number for number, name in CATEGORY_NAMES.items()}
# The names LoCoMo's own code prints (evaluation_stats.CATEGORY_MAPPING), and the order it prints them in.
LOCOMO_LABELS: dict[int, str] = {1: "Multi-hop", 2: "Temporal", 3: "Open-domain", 4: "Single-hop", 5: "Adversarial"}
LOCOMO_ORDER: tuple[int, ...] = (4, 1, 2, 3, 5)
# An adversarial (unanswerable) question is answered right when the prediction contains one of these.
ABSTENTIONS: tuple[str, ...] = ("no information available", "not mentioned")

_PUNCTUATION = frozenset(string.punctuation)
_DROPPED_WORDS = regex.compile(r"\b(a|an|the|and)\b")


@functools.cache
def _stemmer() -> Any:
    """nltk's Porter stemmer in its default mode, made once (nltk is imported here, not when lme is)."""
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer()


def category_number(category: int | str) -> int:
    """LoCoMo's number of `category`, given as that number or as lme's name ("multi-hop", ...)."""
    if isinstance(category, str) and category in CATEGORY_NUMBERS:
        return CATEGORY_NUMBERS[category]
    if isinstance(category, int) and not isinstance(category, bool) and category in CATEGORY_NAMES:
        return category
    raise DataError(f"LoCoMo category {category!r} is not one of 1-5 or {', '.join(CATEGORY_NUMBERS)}.")


def category_name(category: int | str) -> str:
    """lme's name of `category` (a LoCoMo number or a name)."""
    return CATEGORY_NAMES[category_number(category)]


def normalize(text: str) -> str:
    """`text` as LoCoMo compares it: no commas, lower case, no ASCII punctuation, no a/an/the/and, single spaces."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _DROPPED_WORDS.sub(" ", text)
    return " ".join(text.split())


def stemmed_tokens(text: str) -> list[str]:
    """The Porter stems of `normalize(text)`'s words, in order: what `token_f1` counts."""
    stem = _stemmer().stem
    return [stem(word) for word in normalize(text).split()]


def token_f1(prediction: str, reference: str) -> float:
    """LoCoMo's F1 of one prediction against one reference over stemmed token multisets; 0.0 when they share no
    token (so an empty side scores 0.0 and nothing divides by zero)."""
    predicted, expected = stemmed_tokens(prediction), stemmed_tokens(reference)
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted)
    recall = shared / len(expected)
    return (2 * precision * recall) / (precision + recall)


def multi_answer_f1(prediction: str, reference: str) -> float:
    """LoCoMo's multi-hop score: split both on ",", take for each reference part its best `token_f1` against any
    prediction part, and average (numpy's mean, as LoCoMo's, so the float is the same bit for bit). An empty
    reference part (from "x," or "x,,y") counts, with 0."""
    predictions = [part.strip() for part in prediction.split(",")]
    references = [part.strip() for part in reference.split(",")]
    best = [max(token_f1(candidate, expected) for candidate in predictions) for expected in references]
    return float(np.mean(best))


def adversarial_score(prediction: str) -> float:
    """1.0 when the lower-cased `prediction` contains one of `ABSTENTIONS`, else 0.0."""
    lowered = prediction.lower()
    return 1.0 if any(phrase in lowered for phrase in ABSTENTIONS) else 0.0


def scored_reference(answer: object, adversarial_answer: object, category: int | str) -> str:
    """The text LoCoMo scores against: `str(answer)`, or `str(adversarial_answer)` when `answer` is None (absent),
    and for category 3 only its part before the first ";", stripped. (LoCoMo tests the key's presence: a JSON
    null answer would be "None" there; `reference_of` reads a question record that way. locomo10 has none.)"""
    number = category_number(category)
    if answer is not None:
        reference = str(answer)
    elif adversarial_answer is not None:
        reference = str(adversarial_answer)
    else:
        raise DataError("A LoCoMo question has neither an answer nor an adversarial_answer.")
    if number == 3:
        reference = reference.split(";")[0].strip()
    return reference


def reference_of(qa: Mapping[str, Any]) -> str:
    """`scored_reference` of one question record of LoCoMo's files (its `answer` or `adversarial_answer` key,
    whichever is present, `answer` first, and its `category`)."""
    if "category" not in qa:
        raise DataError(f"A LoCoMo question has no category field: {str(qa.get('question'))[:80]!r}.")
    number = category_number(qa["category"])
    if "answer" in qa:
        reference = str(qa["answer"])
    elif "adversarial_answer" in qa:
        reference = str(qa["adversarial_answer"])
    else:
        raise DataError(f"LoCoMo question {str(qa.get('question'))[:80]!r} has neither an answer nor an "
                        "adversarial_answer field.")
    return reference.split(";")[0].strip() if number == 3 else reference


def question_f1(prediction: str | None, reference: str, category: int | str) -> float:
    """One question's score under LoCoMo's rule for its category; `reference` is `scored_reference`'s text (for
    category 3 the first ";" part) and a missing prediction (None) scores 0.0."""
    number = category_number(category)
    if prediction is None:
        return 0.0
    if number == 5:
        return adversarial_score(prediction)
    if number == 1:
        return multi_answer_f1(prediction, reference)
    return token_f1(prediction, reference)


def f1_summary(rows: Iterable[tuple[int | str, float]]) -> dict[str, Any]:
    """lme's summary of (category, F1) rows: per category name (present ones, in LoCoMo's number order) its
    `count` and unrounded `mean`; `overall` over every row; `overall_without_adversarial` over categories 1-4.
    A mean over no rows is None. Sums run in row order within a category and then over categories in the order
    4, 1, 2, 3, 5, the order `analyze_aggr_acc` adds them in (it adds rounded scores: see `locomo_stats`)."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for category, score in rows:
        number = category_number(category)
        sums[number] = sums.get(number, 0.0) + score
        counts[number] = counts.get(number, 0) + 1

    def pooled(numbers: Iterable[int]) -> dict[str, Any]:
        total, count = 0.0, 0
        for number in numbers:
            if number in counts:
                total += sums[number]
                count += counts[number]
        return {"count": count, "mean": total / count if count else None}

    return {
        "per_category": {CATEGORY_NAMES[number]: {"count": counts[number], "mean": sums[number] / counts[number]}
                         for number in sorted(counts)},
        "overall": pooled(LOCOMO_ORDER),
        "overall_without_adversarial": pooled(number for number in LOCOMO_ORDER if number != 5),
    }


def stored_score(score: float, category: int | str) -> float:
    """A question's F1 as LoCoMo's `evaluate_qa.py` stores it: rounded to 3 decimals, by numpy for category 1
    (whose score is a numpy float there), by Python otherwise."""
    if category_number(category) == 1:
        return float(round(np.float64(score), 3))
    return float(round(score, 3))


def locomo_stats(rows: Iterable[tuple[int | str, float]]) -> dict[str, Any]:
    """The numbers LoCoMo's `analyze_aggr_acc` prints for (category, unrounded F1) rows: `categories`, in order
    4, 1, 2, 3, 5, each {number, label, count, correct (sum of `stored_score`s), accuracy (mean rounded to 3, None
    for a category with no questions)}, and `overall` (all categories' sum over all questions, rounded to 3)."""
    correct: dict[int, float] = {number: 0.0 for number in LOCOMO_ORDER}
    counts: dict[int, int] = {number: 0 for number in LOCOMO_ORDER}
    for category, score in rows:
        number = category_number(category)
        correct[number] += stored_score(score, number)
        counts[number] += 1
    if not sum(counts.values()):
        raise DataError("No LoCoMo questions to summarise.")
    categories = [{"number": number, "label": LOCOMO_LABELS[number], "count": counts[number],
                   "correct": correct[number],
                   "accuracy": round(correct[number] / counts[number], 3) if counts[number] else None}
                  for number in LOCOMO_ORDER]
    total, questions = 0.0, 0
    for number in LOCOMO_ORDER:
        total += correct[number]
        questions += counts[number]
    return {"categories": categories, "overall": round(total / questions, 3)}


def locomo_stats_text(rows: Iterable[tuple[int | str, float]]) -> str:
    """`locomo_stats` laid out as the lines LoCoMo's `analyze_aggr_acc` prints (without its progress bars)."""
    stats = locomo_stats(rows)
    lines = ["Total number of questions and corresponding accuracy in each category: ",
             "Category | Name        | Count | Correct | Accuracy", "-" * 55]
    for row in stats["categories"]:
        if row["count"] == 0:
            lines.append(f"No questions found in category {row['number']} ({row['label']})")
        else:
            lines.append(f"{row['number']:8} | {row['label']:11} | {row['count']:5} | {row['correct']:7.1f} | "
                         f"{row['accuracy']:8.3f}")
    lines += ["-" * 55, f"Overall accuracy: {stats['overall']:.3f}"]
    return "\n".join(lines)
