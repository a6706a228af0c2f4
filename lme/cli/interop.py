"""`python -m lme export` and `python -m lme import-eval`: LongMemEval's official scripts, both ways.

    python -m lme export RUN_ID [--out hyp.jsonl] [tracking.uri=...]
        A job's answers as the official hypothesis file ({"question_id", "hypothesis"} per line;
        a missing answer is written as ""), then lme's verdicts for that job in the format of
        print_qa_metrics.py. Without --out the JSONL goes to stdout and the summary to stderr.

        For a LoCoMo job (its rows carry LoCoMo's `category`), the file LoCoMo's task_eval code reads instead:
        the run's data file (the one its MLflow dataset input names, or --data FILE; either must have the
        run's `dataset.sha256`) with lme's final answer under --prediction-key (default lme_prediction) in each
        answered qa item; only the run's questions are written (LoCoMo's scorer stops on an item without the
        key), every item with --keep-unselected. The summary is LoCoMo's stats lines for lme's F1 and lme's J.

    python -m lme import-eval FILE (--run RUN_ID | --ref DATASET_FILE) [--json] [tracking.uri=...]
        An official .eval-results-* file as verdicts: its summary lines (print_qa_metrics.py's
        format) and, with --run, lme's for that job next to them, with the questions whose
        verdicts differ and those only one side has.

RUN_ID is a job run's id (or its run name: the latest job of that name).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lme.cli.parser import make_parser
from lme.util.errors import LmeError
from lme.util.files import write_text_atomic
from lme.util.secrets import clean
from lme.reporting.interop import (
    LOCOMO_PREDICTION_KEY,
    OFFICIAL_JUDGE_MODEL,
    compare_verdicts,
    hypotheses_jsonl,
    locomo_prediction_file,
    locomo_prediction_json,
    official_summary_lines,
    read_eval_results,
)


def find_job(settings, name: str):
    """The job run with this id, or the latest job run with this name."""
    from lme.tracking.report_source import JOB, PARENT, list_runs

    runs = list_runs(settings)
    match = [r for r in runs if r.run_id == name] or sorted(
        (r for r in runs if r.name == name and r.role == JOB), key=lambda r: r.start_time
    )[-1:]
    if not match:
        raise LmeError(
            f"{name!r} is not a job run id or name in MLflow experiment {settings.experiment!r} at {settings.uri}."
        )
    run = match[0]
    if run.role == PARENT:
        children = [r.run_id for r in runs if r.parent_id == run.run_id]
        raise LmeError(
            f"run {run.name} ({run.run_id}) is a parent run; export one of its jobs: {', '.join(children) or 'none'}."
        )
    return run


def job_rows(settings, name: str) -> tuple[Any, list[dict[str, Any]]]:
    from lme.tracking.runs import read_outcome_rows

    run = find_job(settings, name)
    finished = run.status == "FINISHED"  # a finished job logged its outcomes, whole: a missing or short one is lost
    rows = read_outcome_rows(settings, run.run_id, job=run.name if finished else None,
                             n_questions=run.params.get("n_questions"))
    if rows is None:
        raise LmeError(f"job run {run.name} ({run.run_id}) is {run.status} and logged no outcomes.jsonl; resume the "
                       "job to finish it (its folder's outcomes.jsonl keeps the answers so far).")
    return run, rows


def lme_verdicts(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, bool], dict[str, str]]:
    from lme.reporting.report import correct_map

    return correct_map(rows), {row["question_id"]: row["question_type"] for row in rows}


def _judge_words(run) -> str:
    """The run's judge in words (`lme.judge.describe_judge`): from its tags and its `judge.model` param."""
    from lme.judge import recorded_judge

    judge = recorded_judge(run.tags.get("lme.judge", "unknown judge"), run.tags.get("lme.judge_official") == "true",
                           run.params.get("judge.model") or None)
    return f"judge {judge.name}, {judge.text}"


def export_main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.cli.report import tracking_settings

    overrides, rest = split_overrides(argv)
    parser = make_parser("python -m lme export",
                         "Write a job's answers as LongMemEval's hypothesis JSONL (missing answers as \"\").")
    parser.add_argument("run", metavar="RUN_ID", help="a job run's id or name")
    parser.add_argument("--out", type=Path, metavar="FILE", help="the hypothesis file (default: stdout)")
    parser.add_argument("--prediction-key", default=LOCOMO_PREDICTION_KEY, metavar="KEY",
                        help=f"LoCoMo: the qa items' key for lme's answer (default {LOCOMO_PREDICTION_KEY})")
    parser.add_argument("--data", type=Path, metavar="FILE",
                        help="LoCoMo: the run's data file, when it is no longer where the run read it")
    parser.add_argument("--keep-unselected", action="store_true",
                        help="LoCoMo: write every qa item, those the run did not ask without the key")
    args = parser.parse_args(rest)
    settings = tracking_settings(overrides)
    run, rows = job_rows(settings, args.run)
    if any(row.get("category") for row in rows):
        return _export_locomo(settings, run, rows, args)
    text = hypotheses_jsonl(clean(rows))  # lme.util.secrets: a hypothesis never carries a secret out
    missing = sum(1 for row in rows if row.get("answer") is None)
    verdicts, types = lme_verdicts(rows)
    summary = [
        (f"lme's verdicts for {run.name} ({run.run_id}; {_judge_words(run)}) in the format of LongMemEval's "
         "print_qa_metrics.py; a missing answer counts as wrong:"),
        *official_summary_lines(verdicts, types),
    ]
    if args.out is None:
        sys.stdout.write(text)
        print("\n".join(summary), file=sys.stderr, flush=True)
        return 0
    write_text_atomic(args.out, text)
    print(f"wrote {len(rows)} hypotheses to {args.out} ({missing} missing answers written as an empty hypothesis)")
    print("\n".join(summary), flush=True)
    return 0


def recorded_data_path(settings, run) -> Path | None:
    """The data file the job read, as its MLflow dataset input records it (None when it logged none)."""
    from lme.tracking.runs import client_for

    inputs = client_for(settings, create=False).get_run(run.run_id).inputs
    for dataset_input in (inputs.dataset_inputs if inputs else []):
        try:
            uri = json.loads(dataset_input.dataset.source).get("uri")
        except (TypeError, ValueError, AttributeError):
            continue
        if uri:
            return Path(uri)
    return None


def run_data(settings, run, given: Path | None) -> tuple[Path, Any]:
    """The job's data file (`given`, else the recorded one), checked against the run's `dataset.sha256`, parsed."""
    from lme.util.hashing import file_sha256

    path = given or recorded_data_path(settings, run)
    if path is None:
        raise LmeError(f"job run {run.name} ({run.run_id}) records no data file; name it with --data FILE.")
    if not path.is_file():
        raise LmeError(f"{path}: the data file of job run {run.name} is not there; name where it is with --data FILE.")
    expected = run.params.get("dataset.sha256")
    digest = file_sha256(path)
    if expected and digest != expected:
        raise LmeError(f"{path}: SHA-256 {digest} differs from job run {run.name}'s dataset.sha256 {expected}: not the "
                       "file the run read.")
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LmeError(f"{path}: cannot read it as a JSON file ({exc}).") from None


def _export_locomo(settings, run, rows: Sequence[Mapping[str, Any]], args) -> int:
    """`export` of a LoCoMo job: the data file with lme's answers under the prediction key, and the summary."""
    from lme.reporting.locomo_f1 import locomo_stats_text
    from lme.reporting.measures import locomo_metrics

    path, data = run_data(settings, run, args.data)
    records = locomo_prediction_file(data, clean(list(rows)), args.prediction_key, args.keep_unselected, path)
    text = locomo_prediction_json(records)
    metrics = locomo_metrics(rows)
    missing = sum(1 for row in rows if row.get("answer") is None)
    summary = [
        f"lme's LoCoMo F1 for {run.name} ({run.run_id}) in the format of LoCoMo's analyze_aggr_acc (each score "
        "rounded to 3 places, as its evaluate_qa.py stores them); a missing answer scores 0:",
        locomo_stats_text((row["category"], float(row["locomo_f1"] or 0.0)) for row in rows),
        f"J without adversarial (categories 1-4; {_judge_words(run)}): "
        + (f"{metrics['locomo.j_without_adversarial']:.3f}" if "locomo.j_without_adversarial" in metrics else "none"),
    ]
    if args.out is None:
        sys.stdout.write(text)
        print("\n".join(summary), file=sys.stderr, flush=True)
        return 0
    write_text_atomic(args.out, text)
    print(f"wrote {len(rows)} answers under {args.prediction_key!r} into {len(records)} conversations of {path} to "
          f"{args.out} ({missing} missing answers written as \"\")")
    print("\n".join(summary), flush=True)
    return 0


def reference_types(path: Path) -> dict[str, str]:
    """Question id -> type from a LongMemEval file (one streaming pass; histories are not built)."""
    from lme.data.stream import scan_index

    return {e.question_id: e.question_type for e in scan_index(path) if e.question_id and e.question_type}


def import_main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides

    overrides, rest = split_overrides(argv)
    parser = make_parser("python -m lme import-eval",
                         "Read an official .eval-results-* file as verdicts and print its summary lines "
                         "(print_qa_metrics.py's format), next to lme's for a job with --run.")
    parser.add_argument("file", type=Path, metavar="FILE", help="an .eval-results-* file from evaluate_qa.py")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", metavar="RUN_ID",
                        help="the lme job whose answers were graded (types and lme's verdicts)")
    source.add_argument("--ref", type=Path, metavar="DATASET_FILE", help="the LongMemEval file, for the question types")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(rest)
    labels = read_eval_results(args.file)
    official = {label.question_id: label.label for label in labels}
    models = sorted({label.model for label in labels})
    lme: dict[str, bool] | None = None
    run = None
    if args.run:
        from lme.cli.report import tracking_settings

        run, rows = job_rows(tracking_settings(overrides), args.run)
        lme, types = lme_verdicts(rows)
    else:
        types = reference_types(args.ref)
    unknown = [q for q in official if q not in types]
    if unknown:
        where = f"job {run.name}" if run is not None else str(args.ref)
        raise LmeError(f"{args.file}: question {unknown[0]} is not in {where} ({len(unknown)} such questions).")
    official_lines = official_summary_lines(official, types)
    lme_lines = official_summary_lines(lme, types) if lme is not None else None
    comparison = compare_verdicts(official, lme) if lme is not None else None
    if args.json:
        payload: dict[str, Any] = {
            "file": str(args.file),
            "models": models,
            "verdicts": official,
            "official_summary": official_lines,
        }
        if lme is not None and comparison is not None and run is not None:
            payload |= {
                "run_id": run.run_id,
                "lme_verdicts": lme,
                "lme_summary": lme_lines,
                "agree": comparison.agree,
                "differ": [{"question_id": q, "official": o, "lme": m} for q, o, m in comparison.differ],
                "only_official": list(comparison.only_official),
                "only_lme": list(comparison.only_lme),
            }
        print(json.dumps(payload, indent=2, sort_keys=True))
        return 0
    out = [f"Official labels from {args.file} ({len(labels)} graded questions; judge model {', '.join(models)}):"]
    if models != [OFFICIAL_JUDGE_MODEL]:
        out.append(f"(not all labels are from {OFFICIAL_JUDGE_MODEL}: print_qa_metrics.py would refuse this file)")
    out += official_lines
    if lme_lines is not None and comparison is not None and run is not None:
        heading = f"lme's verdicts for {run.name} ({run.run_id}; {_judge_words(run)}); a missing answer counts as wrong:"
        out += ["", heading,
                *lme_lines, ""]
        out.append(f"Verdicts agree on {comparison.agree} of {comparison.n_both} questions graded by both.")
        for q, o, m in comparison.differ:
            out.append(f"  differ: {q}: official {'yes' if o else 'no'}, lme {'yes' if m else 'no'}")
        if comparison.only_lme:
            out.append(f"In the lme job but not in {args.file} (the official scripts would drop them): "
                       f"{', '.join(comparison.only_lme)}")
        if comparison.only_official:
            out.append(f"In {args.file} but not in the lme job: {', '.join(comparison.only_official)}")
    print("\n".join(out))
    return 0
