"""Score a LoCoMo-format predictions file with lme's copy of LoCoMo's QA measure, for comparison with LoCoMo's code.

    python scripts/locomo_eval_check.py PREDICTIONS.json [--key prediction] [--quiet]

PREDICTIONS.json is LoCoMo's dataset layout (a list of samples, each with `sample_id` and `qa`) where each
question also holds its prediction under `--key` (`prediction` by default, what LoCoMo's
`eval_question_answering` reads; its `evaluate_qa.py` writes `<model>_prediction`). Prints one tab-separated line
per question (sample id, question index, category number, lme's F1 at full precision, F1 as LoCoMo stores it,
rounded to 3), then lme's per-category means (`f1_summary`), then the table LoCoMo's `analyze_aggr_acc` prints,
computed by `lme.reporting.locomo_f1.locomo_stats_text`. A question without the key scores 0 and is counted
(LoCoMo's code would stop there). Reads only the file: no network, no model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lme.reporting.locomo_f1 import (
    f1_summary,
    locomo_stats_text,
    question_f1,
    reference_of,
    stored_score,
)
from lme.util.errors import DataError, LmeError


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The samples of a LoCoMo-format file, checked to be a list of objects with a `qa` list."""
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(f"{path}: cannot be read as JSON ({type(error).__name__}).") from None
    if not isinstance(samples, list) or not all(
            isinstance(sample, dict) and isinstance(sample.get("qa"), list) for sample in samples):
        raise DataError(f"{path}: is not LoCoMo's layout, a list of samples each with a 'qa' list.")
    return samples


def score_file(path: Path, key: str) -> tuple[list[tuple[str, int, int, float]], int]:
    """(sample id, question index, category, F1) for every question of `path`, and how many lacked `key`."""
    rows: list[tuple[str, int, int, float]] = []
    missing = 0
    for number, sample in enumerate(read_samples(path)):
        sample_id = str(sample.get("sample_id", f"#{number}"))
        for index, qa in enumerate(sample["qa"]):
            where = f"{path}: sample {sample_id}, question {index}"
            if not isinstance(qa, dict):
                raise DataError(f"{where} is not an object.")
            try:
                reference = reference_of(qa)
            except LmeError as error:
                raise DataError(f"{where}: {error}") from None
            prediction = qa.get(key)
            if prediction is None:
                missing += 1
            elif not isinstance(prediction, str):
                raise DataError(f"{where}: its {key!r} field is not a string.")
            rows.append((sample_id, index, qa["category"], question_f1(prediction, reference, qa["category"])))
    return rows, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("predictions", type=Path)
    parser.add_argument("--key", default="prediction", help="the qa field holding the prediction")
    parser.add_argument("--quiet", action="store_true", help="only the summaries, no per-question lines")
    args = parser.parse_args(argv)
    try:
        rows, missing = score_file(args.predictions, args.key)
    except LmeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: {args.predictions}: holds no questions.", file=sys.stderr)
        return 2
    if not args.quiet:
        print("sample_id\tquestion\tcategory\tf1\tf1_stored")
        for sample_id, index, category, score in rows:
            print(f"{sample_id}\t{index}\t{category}\t{score!r}\t{stored_score(score, category)!r}")
        print()
    summary = f1_summary((category, score) for _, _, category, score in rows)
    print("lme: mean F1 (unrounded)")
    for name, figures in summary["per_category"].items():
        print(f"  {name:<12} {figures['count']:5}  {figures['mean']:.4f}")
    for label in ("overall", "overall_without_adversarial"):
        figures = summary[label]
        mean = "-" if figures["mean"] is None else f"{figures['mean']:.4f}"
        print(f"  {label:<28} {figures['count']:5}  {mean}")
    if missing:
        print(f"  {missing} question(s) had no {args.key!r} field and scored 0")
    print()
    print("LoCoMo's table (evaluation_stats.analyze_aggr_acc), recomputed:")
    print(locomo_stats_text((category, score) for _, _, category, score in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
