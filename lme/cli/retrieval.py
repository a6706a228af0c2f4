"""`python -m lme retrieval`: rank every selected question's turns and report LongMemEval's retrieval measures
(recall_any, recall_all, ndcg_any @k, its definitions under its names) and lme's variants (suffixed `_all_roles`,
`_all_turns`); on LoCoMo (`dataset=locomo`) lme's variants and LoCoMo's own recall (`locomo.turn.recall@k`,
`locomo.session.recall@k`) in place of LongMemEval's, the JSON's `definitions` saying which.

    python -m lme retrieval [--json] [--k 1,5,10,50,100] [--user-turns-only] [overrides]

The overrides are a run's (`+design=bm25`, `dataset.path=FILE`, `limit=20`,
`retriever=...`); no model is called. The report (see `lme.retrieval.metrics`
and docs/retrieval.md) goes to stdout as Markdown tables or one JSON object,
and to MLflow as a run tagged `lme.role=retrieval` unless `tracking.enabled=false`.
Progress (questions ranked, rate, ETA) goes to stderr: a bar on a terminal, a
line every 30 s otherwise (`lme.util.progress`); `progress=false` turns it off.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lme.cli.parser import make_parser
from lme.retrieval.metrics import (
    DEFAULT_KS,
    LEVELS,
    LOCOMO,
    VARIANT_SUFFIX,
    QuestionScores,
    RetrievalReport,
    locomo_name,
    metric_name,
    official_ks,
    score_question,
    summarise,
    user_turns_view,
    variant_name,
)

if TYPE_CHECKING:
    from lme.config.design import Design

PER_QUESTION_ARTIFACT = "retrieval_per_question.jsonl"
REPORT_ARTIFACT = "retrieval.json"


def parse_ks(text: str) -> tuple[int, ...]:
    """`"1,5,10"` -> (1, 5, 10): positive integers, sorted, duplicates dropped."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k expects comma-separated positive integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"--k expects comma-separated positive integers, got {text!r}")
    return tuple(values)


def _parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "python -m lme retrieval",
        "Rank every selected question's turns with the configured retriever (no model call) and "
        "report turn- and session-level recall@k and NDCG@k, overall and per type: LongMemEval's measures under "
        "its names (recall_any, recall_all, ndcg_any), lme's variants suffixed _all_roles (turn level: assistant "
        "evidence turns count) and _all_turns (session level: any turn of an evidence session counts). Other "
        "arguments are config overrides, as for a run (+design=bm25 dataset.path=FILE limit=20 "
        "tracking.enabled=false). On LoCoMo (dataset=locomo) LongMemEval's measures are not reported (both "
        "speakers' turns are evidence there): lme's variants and LoCoMo's recall (locomo.turn.recall@k, "
        "locomo.session.recall@k) are.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of Markdown tables")
    parser.add_argument("--k", type=parse_ks, default=DEFAULT_KS, metavar="K,K,...",
                        help="cut-offs (default 1,5,10,50,100; the official measures also at 1,3,5,10,30,50, the "
                        "official script's); every turn of each question is ranked, so no session-level k is cut "
                        "short")
    parser.add_argument("--user-turns-only", action="store_true",
                        help="rank user turns only, as LongMemEval's index does (no definition changes: an "
                        "assistant evidence turn is then never found by the _all_roles variants)")
    return parser


def _fmt(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


OFFICIAL_SHOWN: tuple[str, ...] = ("recall_any", "ndcg_any")  # in the tables; --json holds recall_all too
VARIANTS_SHOWN: tuple[str, ...] = ("recall_frac", "ndcg")
_TITLES = {
    "official": "LongMemEval's definitions (n = questions the official average keeps: not abstention, with a user "
                "turn marked has_answer)",
    "turn": "lme's turn-level variants: every has_answer turn is evidence, the assistant's too; textbook NDCG "
            "(n = questions with such a turn)",
    "session": "lme's session-level variants: any turn of an answer_session_ids session is a hit; textbook NDCG "
               "(n = questions with such a session)",
    LOCOMO: "LoCoMo's recall (its evaluation.py recall_acc): the fraction of the evidence turns in the top k "
            "turns, or whose session is in the top k sessions (n = every question, adversarial included; one "
            "without evidence scores 1, as LoCoMo's code has it)",
}


def _table(report: RetrievalReport, title: str, scope: str, names: Sequence[str]) -> str:
    header = ["group", "n"] + [name.split(".", 1)[1] for name in names]
    lines = [title, "", "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["--:"] * (len(header) - 1)) + "|"]
    for group in report.groups():
        cells = [group.name, str(group.n_scored[scope])] + [_fmt(group.values.get(name)) for name in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_tables(report: RetrievalReport, measures: Sequence[str] = VARIANTS_SHOWN,
                    official: Sequence[str] = OFFICIAL_SHOWN) -> str:
    """Markdown tables, rows overall + each type, columns at the report's k (the JSON also holds the official
    measures at the official script's k): the official measures at each level (`recall_any@k`, `ndcg_any@k`),
    then lme's variants at each level (`recall_frac_all_roles@k`, `ndcg_all_roles@k`, ...). Under LoCoMo's
    definitions: lme's variants at each level, then LoCoMo's recall at both levels."""
    locomo = report.definitions == LOCOMO
    blocks = [] if locomo else [
        _table(report, f"{level} level, {_TITLES['official']}", "official",
               [metric_name(level, measure, k) for measure in official for k in report.ks]) for level in LEVELS]
    blocks += [_table(report, f"{level} level, {_TITLES[level]}", f"{level}_{VARIANT_SUFFIX[level]}",
                      [variant_name(level, measure, k) for measure in measures for k in report.ks])
               for level in LEVELS]
    missing = report.n_no_evidence
    if locomo:
        blocks.append(_table(report, _TITLES[LOCOMO], LOCOMO,
                             [locomo_name(level, k) for level in LEVELS for k in report.ks]))
        notes = (
            f"{report.n_questions} questions ranked, under LoCoMo's definitions (LongMemEval's official measures "
            f"do not apply); lme's variants leave out {report.n_abstention} adversarial (abstention), then "
            f"{missing['turn_all_roles']} without a has_answer turn (_all_roles), "
            f"{missing['session_all_turns']} without an evidence session (_all_turns); LoCoMo's recall averages "
            f"all {report.n_questions}, the {report.n_without_evidence} without evidence scoring 1."
        )
        return "\n\n".join(blocks) + "\n\n" + notes
    notes = (
        f"{report.n_questions} questions ranked; left out: {report.n_abstention} abstention; then "
        f"{missing['official']} without a user turn marked has_answer (official), "
        f"{missing['turn_all_roles']} without a has_answer turn (_all_roles), "
        f"{missing['session_all_turns']} without an evidence session (_all_turns)."
    )
    return "\n\n".join(blocks) + "\n\n" + notes


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def per_question_row(score: QuestionScores) -> dict[str, Any]:
    return {
        "question_id": score.question_id,
        "question_type": score.question_type,
        "abstention": score.abstention,
        "turn_evidence": score.turn_evidence,
        "session_evidence": score.session_evidence,
        "first_turn_hit": score.first_turn_hit,
        "first_session_hit": score.first_session_hit,
        "officially_scored": score.officially_scored,
        "metrics": dict(score.values),
    }


def rank_and_score(
    questions: Sequence[Any], retriever: Any, ks: Sequence[int], user_turns_only: bool,
) -> list[QuestionScores]:
    """Each question ranked (all its turns, or its user turns with `user_turns_only`; never fewer than the
    largest k) and scored, official measures and lme's variants, with progress on stderr (`lme.util.progress`:
    questions done, rate, ETA)."""
    from lme.util.progress import progress

    depth = max(official_ks(ks))
    scores = []
    with progress(f"ranking ({retriever.name})", len(questions), "questions") as shown:
        for question in questions:
            view = user_turns_view(question) if user_turns_only else question
            ranking = retriever.rank(view, max(depth, len(view.turns())))
            scores.append(score_question(question, ranking.turn_ids, ks))
            shown.update()
    return scores


def _log_to_mlflow(design: Design, data_path: Any, report: RetrievalReport,
                   scores: Sequence[QuestionScores], retriever_name: str, options: argparse.Namespace,
                   seconds: float, result: Mapping[str, Any]) -> str | None:
    from lme.util.hashing import file_sha256
    from lme.tracking.runs import JobRun

    settings = design.tracking
    if not settings.enabled:
        return None
    tracker = JobRun(
        settings,
        run_name=f"{design.name}-retrieval",
        tags={"lme.role": "retrieval", "lme.design": design.name, "lme.retriever": retriever_name},
    )
    status = "FAILED"
    try:
        params = design.params()
        params["dataset.sha256"] = file_sha256(data_path)
        params["n_questions"] = str(report.n_questions)
        params["retrieval.ks"] = ",".join(str(k) for k in report.ks)
        params["retrieval.user_turns_only"] = str(options.user_turns_only).lower()
        tracker.log_params(params)
        metrics = report.as_metrics() | {"seconds_per_question": seconds / max(1, report.n_questions)}
        tracker.log_metrics(metrics)
        tracker.log_text(json.dumps(_json_safe(result), indent=2, sort_keys=True) + "\n", REPORT_ARTIFACT)
        rows = "".join(json.dumps(_json_safe(per_question_row(s)), sort_keys=True) + "\n" for s in scores)
        tracker.log_text(rows, PER_QUESTION_ARTIFACT)
        status = "FINISHED"
    finally:
        tracker.finish(status)
    return tracker.run_id


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.config.design import compose_design
    from lme.util.progress import config_flag, enabled_as

    overrides, rest = split_overrides(argv)
    options = _parser().parse_args(rest)
    design = compose_design(overrides)
    with enabled_as(config_flag(design.progress)):  # progress=false: no bar, no progress line
        return _main(design, options)


def _main(design: Design, options: argparse.Namespace) -> int:
    from lme.data.dataset import load_dataset

    data_path, questions = load_dataset(design.dataset)
    retriever = design.build_retriever()
    name = str(getattr(retriever, "name", type(retriever).__name__))

    started = time.perf_counter()
    scores = rank_and_score(questions, retriever, options.k, options.user_turns_only)
    seconds = time.perf_counter() - started
    report = summarise(scores, options.k)
    result: dict[str, Any] = {
        "design": design.name,
        "retriever": name,
        "dataset": str(data_path),
        "user_turns_only": options.user_turns_only,
        "definitions": report.definitions,
        **report.as_dict(),
        "seconds": round(seconds, 3),
    }
    run_id = _log_to_mlflow(design, data_path, report, scores, name, options, seconds, result)
    result["mlflow_run_id"] = run_id
    if options.json:
        print(json.dumps(_json_safe(result)), flush=True)
    else:
        convention = ", user turns only" if options.user_turns_only else ""
        print(f"## Retrieval: design {result['design']}, retriever {name}{convention}\n", flush=True)
        print(markdown_tables(report), flush=True)
    print(
        f"lme retrieval: {report.n_questions} questions in {seconds:.1f} s"
        + (f"; MLflow run {run_id}" if run_id else ""),
        file=sys.stderr,
        flush=True,
    )
    return 0
