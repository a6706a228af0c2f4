"""`python -m lme memory`: build the memory a run would give the reader, without calling a model.

    python -m lme memory [--json] [overrides]                        a summary of every selected question
    python -m lme memory --question ID [--payload | --json] [overrides]
    python -m lme memory --view whole_sessions [--question ID] [--json] [overrides]

The overrides are a run's (`+design=first_pass`, `memory=user_log`, `dataset.path=FILE`,
`split=dev`, `limit=20`, ...): the questions are selected as a run selects them
(`lme.data.dataset.load_dataset`), the design's retriever is built and handed to its memory
(or, with `--view NAME`, to the view of the `view` config group) through `lme.config.components`.

Output (stdout; progress goes to stderr: a bar on a terminal, a line every 30 s
otherwise, none with `progress=false`):
- `--question ID`: the memory text exactly as the reader sees it; with
  `--payload`, the reader's whole user message (`lme.answer.reader.reader_payload`:
  one JSON object holding the question, its date and the memory, in the form
  `reader.payload` names: lme's, or the study's compact `questionDate` form);
- `--json`: one JSON object per question (JSON lines), then one aggregate object
  (`"aggregate": true`; mean, median and max of each numeric field, counts of
  each true/false field);
- otherwise: a Markdown summary table.

Per-question fields are typed from the builder's `Memory.notes` (strings there);
a field the builder does not report (the baseline `retrieved` memory has no
user log) is null and left out of the aggregate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lme.cli.parser import make_parser
from lme.util.errors import LmeError

if TYPE_CHECKING:
    from lme.data.select import Selection
    from lme.config.design import Design

PROG = "python -m lme memory"


@dataclass(frozen=True, slots=True)
class Field:
    """One per-question figure: its name and type (`int` or `bool`), read from `Memory.notes`."""

    name: str
    kind: type  # int | bool


# The first-pass memory (`memory=user_log`); `memory_bytes` is `Memory.n_bytes`, the rest are notes.
MEMORY_FIELDS: tuple[Field, ...] = (
    Field("memory_bytes", int),
    Field("header_bytes", int),
    Field("user_log_bytes", int),
    Field("user_messages", int),
    Field("resolved_date_lines", int),
    Field("replies", int),
    Field("reply_bytes", int),
    Field("sessions", int),
    Field("sessions_kept", int),
    Field("same_day", bool),
    Field("overflow", bool),
    Field("replies_ran_out", bool),  # no budget refused a reply: the ranked replies ended first
)
# The whole-session view (`--view whole_sessions`): sessions shown, their bytes, and how many
# sessions each of the three selection steps contributed.
VIEW_FIELDS: tuple[Field, ...] = (
    Field("sessions", int),
    Field("bytes", int),
    Field("from_dates", int),
    Field("from_content", int),
    Field("from_retrieval", int),
)


def _parser() -> argparse.ArgumentParser:
    parser = make_parser(
        PROG,
        "Build the memory a run would give the reader (no model call) and print it or its figures. "
        "Other arguments are config overrides, as for a run (+design=first_pass memory=user_log "
        "dataset.path=FILE limit=20).",
    )
    parser.add_argument("--question", metavar="ID", help="only this question; prints its memory text")
    parser.add_argument("--payload", action="store_true",
                        help="with --question: print the reader's whole user message (a JSON object) instead")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per question, then an aggregate object (JSON lines)")
    parser.add_argument("--view", metavar="NAME",
                        help="build the view NAME of the `view` config group (e.g. whole_sessions) instead of "
                        "the first-pass memory")
    return parser


# -- pure: rows and their summary -------------------------------------------------------------------


def _typed(question_id: str, field: Field, text: str) -> int | bool:
    value = text.strip()
    if field.kind is bool:
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
    else:
        try:
            return int(value)
        except ValueError:
            pass
    raise LmeError(
        f"question {question_id}: the memory reported {field.name}={text!r}, "
        f"not {'true or false' if field.kind is bool else 'a whole number'}."
    )


def memory_row(question_id: str, n_bytes: int, notes: Mapping[str, str], fields: Sequence[Field]) -> dict[str, Any]:
    """One question's figures, typed; a field absent from `notes` is None (`memory_bytes` is `n_bytes`)."""
    row: dict[str, Any] = {"question_id": question_id}
    for field in fields:
        if field.name == "memory_bytes":
            row[field.name] = n_bytes
        elif field.name in notes:
            row[field.name] = _typed(question_id, field, notes[field.name])
        else:
            row[field.name] = None
    return row


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(float(value), 3)


def aggregate(rows: Sequence[Mapping[str, Any]], fields: Sequence[Field]) -> dict[str, Any]:
    """Mean, median and max of each numeric field and the count of true values of each true/false
    field, over the rows that report it; None for a field no row reports."""
    summary: dict[str, Any] = {"aggregate": True, "questions": len(rows)}
    for field in fields:
        values = [row[field.name] for row in rows if row.get(field.name) is not None]
        if not values:
            summary[field.name] = None
        elif field.kind is bool:
            summary[field.name] = sum(1 for value in values if value)
        else:
            summary[field.name] = {
                "mean": _number(statistics.fmean(values)),
                "median": _number(statistics.median(values)),
                "max": max(values),
            }
    return summary


def markdown_summary(summary: Mapping[str, Any], fields: Sequence[Field], title: str) -> str:
    """A title, a table `field | mean | median | max` and one line counting the true/false fields."""
    lines = [f"## {title}", "", "| field | mean | median | max |", "|---|--:|--:|--:|"]
    for field in fields:
        if field.kind is bool:
            continue
        stats = summary.get(field.name)
        cells = ["-", "-", "-"] if stats is None else [_cell(stats["mean"]), _cell(stats["median"]), _cell(stats["max"])]
        lines.append(f"| {field.name} | " + " | ".join(cells) + " |")
    counts = [
        f"{field.name}: {'-' if summary.get(field.name) is None else summary[field.name]}"
        for field in fields
        if field.kind is bool
    ]
    lines.append("")
    lines.append(f"{summary['questions']} questions" + (f"; {', '.join(counts)}" if counts else "") + ".")
    return "\n".join(lines)


def _cell(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}"


# -- side effects: config, components, output --------------------------------------------------------


def view_overrides(overrides: Sequence[str], view: str) -> list[str]:
    """The overrides that select view `view`: `view=NAME` when the primary config's defaults list
    holds the `view` group, `+view=NAME` when it does not; unchanged when the user selected one."""
    from lme import CONF_DIR
    from lme.config.compose import in_defaults

    known = sorted(path.stem for path in (CONF_DIR / "view").glob("*.yaml"))
    if view not in known:
        raise LmeError(
            f"--view {view}: no such view in {CONF_DIR / 'view'} (known: {', '.join(known) or 'none yet'})."
        )
    chosen = [item.split("=", 1)[1] for item in overrides if item.lstrip("+").split("=", 1)[0] == "view"]
    if chosen and chosen[-1] != view:
        raise LmeError(f"--view {view} and the override view={chosen[-1]} name two different views; give one.")
    if chosen:
        return list(overrides)
    return [*overrides, f"view={view}"] if in_defaults("view") else [f"+view={view}", *overrides]


def build_components(design: Design, view: str | None) -> tuple[Any, Any]:
    """(retriever, builder): the run's retriever and the memory builder, or the view, fed by it."""
    retriever = design.build_retriever()
    return retriever, (design.build_memory(retriever) if view is None else design.build_view(retriever))


def pick_question(questions: Sequence[Any], question_id: str, data_path: Path, selection: Selection) -> Any:
    """The selected question `question_id`; one sentence when the file or the selection lacks it."""
    from lme.data.select import Selection

    for question in questions:
        if question.question_id == question_id:
            return question
    if replace(selection, split_missing="error") == Selection():
        raise LmeError(f"{data_path}: question {question_id} (--question) is not in the file.")
    raise LmeError(
        f"{data_path}: question {question_id} (--question) is not among the {len(questions)} questions "
        f"selected ({selection.describe()})."
    )


def _emit(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.config.design import compose_design
    from lme.util.progress import config_flag, enabled_as

    overrides, rest = split_overrides(argv)
    options = _parser().parse_args(rest)
    if options.payload and options.question is None:
        raise LmeError(f"{PROG}: --payload prints one question's reader message; give --question ID too.")
    if options.payload and options.json:
        raise LmeError(f"{PROG}: --payload and --json are two different outputs; give one.")
    if options.payload and options.view is not None:
        raise LmeError(f"{PROG}: --payload is the first-pass reader's message; it has no meaning with --view.")
    if options.view is not None:
        overrides = view_overrides(overrides, options.view)

    design = compose_design(overrides)
    with enabled_as(config_flag(design.progress)):  # progress=false: no bar, no progress line
        return _main(design, options)


def _main(design: Design, options: argparse.Namespace) -> int:
    from lme.data.dataset import load_dataset
    from lme.util.progress import progress

    data_path, questions = load_dataset(design.dataset)
    if options.question is not None:
        questions = [pick_question(questions, options.question, data_path, design.dataset.selection)]
    retriever, builder = build_components(design, options.view)
    fields = MEMORY_FIELDS if options.view is None else VIEW_FIELDS

    if options.question is not None and not options.json:
        (question,) = questions
        memory = builder.build(question)
        if options.payload:
            from lme.answer.reader import reader_payload

            _emit(reader_payload(question, memory, payload=design.reader.payload))
        else:
            _emit(memory.text)
        return 0

    started = time.perf_counter()
    rows = []
    label = options.view or str(getattr(builder, "name", type(builder).__name__))
    with progress(f"memory ({label})", len(questions), "questions") as shown:
        for question in questions:
            memory = builder.build(question)
            row = memory_row(question.question_id, memory.n_bytes, memory.notes, fields)
            if options.json:
                _emit(json.dumps(row))
            rows.append(row)
            shown.update()
    seconds = time.perf_counter() - started
    summary = aggregate(rows, fields)
    if options.json:
        _emit(json.dumps(summary))
    else:
        retriever_name = str(getattr(retriever, "name", type(retriever).__name__))
        kind = "View" if options.view else "Memory"
        title = f"{kind}: design {design.name}, {kind.lower()} {label}, retriever {retriever_name}"
        _emit(f"{markdown_summary(summary, fields, title)}\n\nDataset: {Path(str(data_path))}")
    print(f"lme memory: {len(rows)} questions in {seconds:.1f} s", file=sys.stderr, flush=True)
    return 0
