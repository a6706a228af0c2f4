"""`python -m lme rules`: which questions each question-text rule selects, without a model call.

    python -m lme rules [--json] [overrides]

The overrides are a run's (`+design=pipeline`, `dataset.path=FILE`, `split=dev`,
`limit=20`, ...): the rules are composed and checked as a run checks them
(`lme.config.design`) and the questions selected as a run selects
them (`lme.data.dataset.load_dataset`). Only rules with `on: question` can be decided
before a run; rules over the answer (`decline`) are named in a note. A design with routed
instructions (`rules.routes`) also lists, as `route:NAME`, the questions whose first pass
reads route NAME's instruction (the first route that fires on the question text).

Output (stdout):
- `--json`: one JSON object `{rule: [question ids]}`, rules in configured order,
  ids in dataset order; the counts per question type go to stderr as a table;
- otherwise: Markdown: a table of counts per rule and question type, then each
  rule's question ids.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence

from lme.answer.rules import Rule, select_by_question, select_routes, unique_rules
from lme.cli.parser import make_parser
from lme.data.records import QUESTION_TYPES

PROG = "python -m lme rules"


def _parser() -> argparse.ArgumentParser:
    parser = make_parser(
        PROG,
        "List the questions each question-text re-read rule selects (no model call). Other "
        "arguments are config overrides, as for a run (+design=pipeline dataset.path=FILE split=dev).",
    )
    parser.add_argument("--json", action="store_true", help="print {rule: [question ids]} as one JSON object")
    return parser


def counts_by_type(selection: Mapping[str, Sequence[str]], types: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Rule -> question type -> questions selected, plus the `all` column (every type of the data, 0s kept)."""
    present = [t for t in QUESTION_TYPES if t in set(types.values())]
    present += sorted(set(types.values()) - set(present))
    table: dict[str, dict[str, int]] = {}
    for rule, ids in selection.items():
        counted = Counter(types[qid] for qid in ids)
        table[rule] = {"all": len(ids), **{t: counted.get(t, 0) for t in present}}
    table["(questions)"] = {"all": len(types), **{t: sum(1 for v in types.values() if v == t) for t in present}}
    return table


def markdown_counts(counts: Mapping[str, Mapping[str, int]]) -> str:
    columns = list(next(iter(counts.values())).keys()) if counts else ["all"]
    lines = ["| rule | " + " | ".join(columns) + " |", "|---|" + "--:|" * len(columns)]
    for rule, row in counts.items():
        lines.append(f"| {rule} | " + " | ".join(str(row[c]) for c in columns) + " |")
    return "\n".join(lines)


def answer_rules_note(rules: Sequence[Rule]) -> str | None:
    names = [rule.name for rule in unique_rules(rules) if rule.on == "answer"]
    if not names:
        return None
    return f"Rules over the answer ({', '.join(names)}) fire on the answers of a run; they are not listed here."


ROUTES_NOTE = ("route:NAME: the questions whose first pass reads the instruction of route NAME (the first route in "
               "rules.routes that fires on the question text); the others read instructions.first_pass.")


def markdown_report(design: str, source: str, selection: Mapping[str, Sequence[str]],
                    counts: Mapping[str, Mapping[str, int]], note: str | None) -> str:
    lines = [f"## Rules of design {design}: questions selected by the question text", "", f"Dataset: {source}", ""]
    if not selection:
        lines.append("No rule reads the question text.")
    else:
        lines.append(markdown_counts(counts))
        for rule, ids in selection.items():
            lines += ["", f"### {rule} ({len(ids)})", "", ", ".join(ids) if ids else "(none)"]
    if any(name.startswith("route:") for name in selection):
        lines += ["", ROUTES_NOTE]
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.data.dataset import load_dataset
    from lme.config.design import compose_design

    overrides, rest = split_overrides(argv)
    options = _parser().parse_args(rest)
    design = compose_design(overrides)
    rules = [step.rule for step in design.instructions.rules]
    routes = [step.rule for step in design.instructions.routes]
    data_path, questions = load_dataset(design.dataset)
    texts = [(q.question_id, q.question) for q in questions]
    selection = {**{f"route:{name}": ids for name, ids in select_routes(routes, texts).items()},
                 **select_by_question(rules, texts)}
    counts = counts_by_type(selection, {q.question_id: q.question_type for q in questions})
    note = answer_rules_note(rules)
    if options.json:
        sys.stdout.write(json.dumps(selection) + "\n")
        if selection:
            print(markdown_counts(counts), file=sys.stderr)
        if note:
            print(note, file=sys.stderr)
    else:
        sys.stdout.write(markdown_report(design.name, str(data_path), selection, counts, note) + "\n")
    sys.stdout.flush()
    return 0
