"""Interoperation with LongMemEval's own evaluation scripts (pure functions).

- LoCoMo export: a LoCoMo job's answers as the file LoCoMo's `task_eval` code reads (`locomo_prediction_file`,
  below).
- Export: a job's answers as the hypothesis file LongMemEval's `src/evaluation/evaluate_qa.py`
  grades, one JSON object per line: `{"question_id": ..., "hypothesis": ...}`. A missing or
  failed answer is written as an empty hypothesis (`""`), so the official grader sees every
  question (and judges the empty answer, normally "no"): its counts then match lme's, where a
  missing answer is wrong. Leaving the line out instead would let the official scripts drop the
  question silently.
- Import: an official `.eval-results-<model>` file (`evaluate_qa.py`'s output: each hypothesis
  line plus `"autoeval_label": {"model": ..., "label": true|false}`) as verdicts.
- Summary: the lines LongMemEval's `print_qa_metrics.py` prints (per type in its fixed order,
  task-averaged, overall, abstention), computed from any verdicts, in the same format, so an
  official run and lme's can be compared line by line. Like the official script, these lines are
  over the questions that have a verdict; lme's verdicts include its missing answers as wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.util.errors import DataError

OFFICIAL_JUDGE_MODEL = "gpt-4o-2024-08-06"
# The order in which print_qa_metrics.py lists the question types.
OFFICIAL_TYPE_ORDER: tuple[str, ...] = (
    "single-session-user",
    "single-session-preference",
    "single-session-assistant",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)


# --- export ---------------------------------------------------------------------------------------


def hypothesis_records(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One `{"question_id", "hypothesis"}` per outcome row, in question-id order; a missing answer is ""."""
    records = [
        {"question_id": str(row["question_id"]), "hypothesis": "" if row.get("answer") is None else str(row["answer"])}
        for row in rows
    ]
    return sorted(records, key=lambda record: record["question_id"])


def hypotheses_jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in hypothesis_records(rows))


# --- LoCoMo export ----------------------------------------------------------------------------------

LOCOMO_PREDICTION_KEY = "lme_prediction"  # LoCoMo's own runs name it "<model>_prediction"


def locomo_question_place(question_id: str) -> tuple[str, int]:
    """(sample_id, index in that conversation's `qa` list) of a LoCoMo question id (`conv-26-q017` -> ("conv-26",
    17)), as `lme.data.locomo` makes them; `DataError` for an id of another shape."""
    sample_id, sep, number = question_id.rpartition("-q")
    if not sep or not sample_id or not number.isdigit():
        raise DataError(f"question {question_id}: not a LoCoMo question id (<sample_id>-q<index>, e.g. conv-26-q017).")
    return sample_id, int(number)


def locomo_prediction_file(data: Any, rows: Iterable[Mapping[str, Any]], prediction_key: str = LOCOMO_PREDICTION_KEY,
                           keep_unselected: bool = False, source: str | Path = "the LoCoMo file") -> list[dict[str, Any]]:
    """The LoCoMo file `data` (its parsed records) with each answered question's final answer under
    `prediction_key` in its `qa` item: the file LoCoMo's `task_eval` code scores (`eval_question_answering(qa,
    prediction_key)`, then `analyze_aggr_acc` with the data file as its annotations). A missing answer is written
    as "" (LoCoMo's code cannot read a null; "" scores 0 there as lme's missing answer does).

    LoCoMo's scorer reads `item[prediction_key]` for every `qa` item it is given (an item without the key stops
    it with a KeyError), and its stats count every item in a category's total, scored or not. So by default only
    the run's questions are written: each conversation keeps its other fields and, in its `qa`, the items the run
    answered, in file order; a conversation with none of them is left out. `keep_unselected` writes every
    conversation and item, those the run did not select without the key (for reading, not for LoCoMo's scorer).
    A row whose question is not in `data` is a `DataError`."""
    answers: dict[tuple[str, int], str] = {}
    for row in rows:
        answer = row.get("answer")
        answers[locomo_question_place(str(row["question_id"]))] = "" if answer is None else str(answer)
    if not isinstance(data, list):
        raise DataError(f"{source}: a LoCoMo file holds a JSON array of conversations, not {type(data).__name__}.")
    found: set[tuple[str, int]] = set()
    records: list[dict[str, Any]] = []
    for record in data:
        sample_id = str(record.get("sample_id")) if isinstance(record, dict) else "?"
        if not isinstance(record, dict) or not isinstance(record.get("qa"), list):
            raise DataError(f"{source}: conversation {sample_id[:40]}: field qa is missing or not a list.")
        items: list[dict[str, Any]] = []
        for index, item in enumerate(record["qa"]):
            place = (sample_id, index)
            if place in answers:
                found.add(place)
                items.append({**item, prediction_key: answers[place]})
            elif keep_unselected:
                items.append(dict(item))
        if items or keep_unselected:
            records.append({**record, "qa": items})
    lost = sorted(set(answers) - found)
    if lost:
        sample_id, index = lost[0]
        raise DataError(f"{source}: question {sample_id}-q{index:03d} of the run is not in the file (no qa item {index} "
                        f"in conversation {sample_id}; {len(lost)} such questions): is this the file the run read?")
    return records


def locomo_prediction_json(records: Sequence[Mapping[str, Any]]) -> str:
    """The records as LoCoMo's own output files are written (a JSON array, indent 2), UTF-8 kept."""
    return json.dumps(list(records), indent=2, ensure_ascii=False) + "\n"


# --- import ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalLabel:
    """One graded line of an official `.eval-results-*` file."""

    question_id: str
    hypothesis: str
    model: str
    label: bool


def parse_eval_results(text: str, source: str | Path) -> list[EvalLabel]:
    """The graded lines of an `.eval-results-*` file; a bad line is one sentence naming the file,
    the line, the question id and the field."""
    labels: list[EvalLabel] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}: line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not a JSON object ({exc.msg}).") from None
        if not isinstance(entry, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(entry).__name__}.")
        qid = entry.get("question_id")
        if not isinstance(qid, str) or not qid:
            raise DataError(f"{where}: field question_id is missing or not a string.")
        where = f"{where}, question {qid}"
        if qid in seen:
            raise DataError(f"{where}: question_id appears twice.")
        seen.add(qid)
        hypothesis = entry.get("hypothesis")
        if not isinstance(hypothesis, str):
            raise DataError(f"{where}: field hypothesis is missing or not a string.")
        verdict = entry.get("autoeval_label")
        if not isinstance(verdict, dict):
            raise DataError(
                f"{where}: field autoeval_label is missing or not an object (is this an .eval-results file?)."
            )
        if not isinstance(verdict.get("label"), bool):
            raise DataError(f"{where}: field autoeval_label.label is missing or not true/false.")
        model = verdict.get("model")
        if not isinstance(model, str):
            raise DataError(f"{where}: field autoeval_label.model is missing or not a string.")
        labels.append(EvalLabel(qid, hypothesis, model, verdict["label"]))
    if not labels:
        raise DataError(f"{source}: no graded line (an .eval-results file has one JSON object per line).")
    return labels


def read_eval_results(path: str | Path) -> list[EvalLabel]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read it as UTF-8 text ({exc}).") from None
    return parse_eval_results(text, path)


# --- the official summary lines ---------------------------------------------------------------------


def _official_number(values: Sequence[int]) -> str:
    """A mean as print_qa_metrics.py prints it: numpy's mean rounded to 4 places (numpy's
    rounding), shown as the shortest text that reads back as that float ("0.9", "0.8571", "nan")."""
    import numpy as np

    if not values:
        return "nan"
    return str(float(np.round(np.mean(np.asarray(values, dtype=float)), 4)))


def _official_mean(values: Sequence[float]) -> str:
    import numpy as np

    if not values or any(math.isnan(v) for v in values):
        return "nan"
    return str(float(np.round(np.mean(np.asarray(values, dtype=float)), 4)))


def official_summary_lines(verdicts: Mapping[str, bool], types: Mapping[str, str]) -> list[str]:
    """What print_qa_metrics.py prints for these verdicts (the questions that have one):

        <blank>
        Evaluation results by task:
        <TAB>single-session-user: 0.9 (70)
        ... (the six types in its fixed order; an empty type prints "nan (0)")
        <blank>
        Task-averaged Accuracy: ...
        Overall Accuracy: ...
        Abstention Accuracy: ... (30)

    A type outside the six (the official script would stop) is listed after them."""
    missing = [q for q in verdicts if q not in types]
    if missing:
        raise DataError(
            f"question {missing[0]}: no question type for it in the reference ({len(missing)} such questions)."
        )
    extra = sorted({types[q] for q in verdicts} - set(OFFICIAL_TYPE_ORDER))
    per_type = {t: [int(bool(verdicts[q])) for q in verdicts if types[q] == t] for t in (*OFFICIAL_TYPE_ORDER, *extra)}
    lines = ["", "Evaluation results by task:"]
    type_means: list[float] = []
    for name, values in per_type.items():
        lines.append(f"\t{name}: {_official_number(values)} ({len(values)})")
        type_means.append(sum(values) / len(values) if values else float("nan"))
    everything = [v for values in per_type.values() for v in values]
    abstention = [int(bool(verdicts[q])) for q in verdicts if "_abs" in q]
    lines += [
        "",
        f"Task-averaged Accuracy: {_official_mean(type_means)}",
        f"Overall Accuracy: {_official_number(everything)}",
        f"Abstention Accuracy: {_official_number(abstention)} ({len(abstention)})",
    ]
    return lines


# --- comparing two sets of verdicts ---------------------------------------------------------------


@dataclass(frozen=True)
class VerdictComparison:
    n_both: int
    agree: int
    differ: tuple[tuple[str, bool, bool], ...]  # (question id, official, lme)
    only_official: tuple[str, ...]
    only_lme: tuple[str, ...]


def compare_verdicts(official: Mapping[str, bool], lme: Mapping[str, bool]) -> VerdictComparison:
    both = sorted(set(official) & set(lme))
    differ = tuple((q, bool(official[q]), bool(lme[q])) for q in both if bool(official[q]) != bool(lme[q]))
    return VerdictComparison(
        n_both=len(both),
        agree=len(both) - len(differ),
        differ=differ,
        only_official=tuple(sorted(set(official) - set(lme))),
        only_lme=tuple(sorted(set(lme) - set(official))),
    )
