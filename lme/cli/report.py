"""`python -m lme report`: design-vs-design tables from what MLflow holds.

    python -m lme report [DESIGN | PARENT_RUN_ID | PARENT_RUN_NAME | JOB_RUN_ID ...] [--latest]
                         [--pairs A:B,...] [--prereg RECORD ...] [--json] [--out DIR] [--resamples N]
                         [--bootstrap-seed N] [tracking.uri=...] [tracking.experiment=...]

With no name (or `--latest`): the latest parent run of every design in the experiment, among the
runs made on the same questions (the same data file and question ids; the report names every run
and design it skipped, and why). A design name picks that design's latest parent run; a parent run
(id, a unique prefix of its id, or name) brings every design its sweep ran. Prints Markdown (or one JSON object with `--json`); `--out DIR` also writes
`report.md`, `report.json` and the PNG plots there and logs them to MLflow as the artifacts of a
run tagged `lme.role=report` in the experiment `<experiment>-reports`, apart from the study's
runs and charts (unless `tracking.enabled=false`).

When jobs carry a preregistration record's digest (their `lme.prereg_sha256` tag), the report opens
with the record's primary measure and planned comparisons. The record file is the one given with
`--prereg`, else the `prereg` path in a tagged job's logged config, else a file under `prereg/`
whose `record_sha256` is the digest; without one, the report says the digest and that the measure
cannot be stated.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lme.cli.parser import make_parser
from lme.util.errors import LmeError
from lme.util.files import cannot_write, write_text_atomic
from lme.reporting.measures import DEFAULT_BOOTSTRAP_SEED, DEFAULT_RESAMPLES

REPORT_MD = "report.md"
REPORT_JSON = "report.json"


def _parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "python -m lme report",
        "Design-vs-design tables (headline, plain vs task-averaged, per type, paired bootstrap "
        "comparisons, re-read steps, cost) from the MLflow runs. Other key=value arguments are config "
        "overrides (tracking.uri=..., tracking.experiment=...).",
    )
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="design names, parent run ids (or unique prefixes of them) or names, or job run ids "
                        "(default: the latest parent run of every design, on the same questions)")
    parser.add_argument("--latest", action="store_true",
                        help="the latest parent run of each design (the default when no NAME is given)")
    parser.add_argument("--pairs", metavar="A:B,...",
                        help="the comparisons to make, difference B - A (default: every pair, later minus earlier)")
    parser.add_argument("--prereg", action="append", type=Path, default=[], metavar="RECORD",
                        help="a preregistration record (prereg/NAME.yaml) whose primary measure the report states "
                        "first (default: the records the runs are tagged with, found from their config or under "
                        "prereg/)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of Markdown")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write report.md, report.json and PNG plots here and log them to MLflow")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                        help=f"bootstrap resamples (default {DEFAULT_RESAMPLES:,})")
    parser.add_argument("--bootstrap-seed", type=int, default=DEFAULT_BOOTSTRAP_SEED,
                        help=f"bootstrap seed (default {DEFAULT_BOOTSTRAP_SEED})")
    return parser


def tracking_settings(overrides: Sequence[str]):
    from lme.config.design import compose_design

    return compose_design(overrides).tracking


def _metric_key(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", text)


def report_metrics(report) -> dict[str, float]:
    """The headline numbers as metrics of the report run."""
    metrics: dict[str, float] = {}
    for d in report.designs:
        key = _metric_key(d.label)
        metrics[f"{key}/mean_accuracy"] = d.summary.mean_accuracy
        metrics[f"{key}/majority_correct_accuracy"] = d.summary.majority_accuracy
        metrics[f"{key}/task_averaged_accuracy"] = d.summary.mean_task_averaged
        metrics[f"{key}/reader_cost_usd"] = d.cost.reader_cost_usd
    for statement in report.primary:
        if statement.primary is not None and statement.value == statement.value:  # not nan
            metrics[_metric_key(f"primary/{statement.record_sha256[:12]}/{statement.primary}")] = statement.value
    for p in report.pairs:
        if p.comparison is not None:
            key = _metric_key(f"{p.b} - {p.a}")
            metrics[f"diff/{key}/mean_accuracy"] = p.comparison.overall.mean_difference
            metrics[f"diff/{key}/majority_correct_accuracy"] = p.comparison.overall.majority_difference
    return metrics


REPORTS_SUFFIX = "-reports"  # a report's run goes to the study's experiment name + this, never into its charts


def log_report_run(settings, report, files: Sequence[Path], names: Sequence[str]) -> str:
    """Log the report as a run of its own experiment (`<experiment>-reports`): its tables, its plots (PNG,
    shown as images) and its headline measures; the study's experiment and its charts hold only study runs."""
    from dataclasses import replace

    from lme.tracking.runs import JobRun

    run = JobRun(
        replace(settings, experiment=settings.experiment + REPORTS_SUFFIX),
        run_name=f"report-{time.strftime('%Y-%m-%d_%H-%M-%S')}",
        tags={
            "lme.role": "report",
            "lme.report.designs": ",".join(d.label for d in report.designs),
            "lme.report.sources": ",".join(sorted({d.source_id for d in report.designs})),
        },
    )
    try:
        run.log_params({
            "report.names": " ".join(names) or "(latest of each design)",
            "report.pairs": ",".join(f"{p.a}:{p.b}" for p in report.pairs)[:500] or "(none)",
            "bootstrap.resamples": str(report.n_resamples),
            "bootstrap.seed": str(report.bootstrap_seed),
        })
        run.log_metrics(report_metrics(report))
        for path in files:
            run.log_artifact(path)
    except BaseException:
        run.finish("FAILED")
        raise
    run.finish()
    return run.run_id


PREREG_DIR = Path("prereg")


def _checked_record(path: Path) -> dict:
    """A record whose `record_sha256` is the digest of its contents; one sentence otherwise."""
    from lme.provenance.prereg import load_record, record_digest

    record = load_record(path)
    if record_digest(record) != record.get("record_sha256"):
        raise LmeError(f"{path}: record_sha256 does not match the record's contents (was it edited after freezing?).")
    return record


def preregistrations(sources, paths: Sequence[Path], search: Path = PREREG_DIR) -> list:
    """The records the report states first: those the reported jobs are tagged with (in report order), then
    those given with --prereg; a tag whose record is not found becomes a statement that says so."""
    from lme.provenance.prereg import prereg_facts
    from lme.reporting.report import Preregistration

    records: dict[str, tuple[dict, str]] = {}
    for path in paths:
        record = _checked_record(path)
        records.setdefault(str(record["record_sha256"]), (record, str(path)))
    tagged: list[str] = []
    for design in sources.designs:
        for job in design.jobs:
            if job.prereg_sha256 and job.prereg_sha256 not in tagged:
                tagged.append(job.prereg_sha256)
    for digest in tagged:
        if digest in records:
            continue
        named = sources.prereg_paths.get(digest)
        candidates = ([Path(named)] if named else []) + (sorted(search.glob("**/*.yaml")) if search.is_dir() else [])
        for candidate in candidates:
            try:
                record = _checked_record(candidate)
            except LmeError:
                continue
            if record.get("record_sha256") == digest:
                records[digest] = (record, str(candidate))
                break
    result = []
    for digest in tagged + [d for d in records if d not in tagged]:
        if digest not in records:
            result.append(Preregistration(digest, found=False))
            continue
        record, path = records[digest]
        facts = prereg_facts(record, sources.runs)
        result.append(Preregistration(
            record_sha256=digest, found=True, path=path, design_name=facts.design_name, primary=facts.primary,
            comparisons=facts.comparisons, seeds=facts.seeds,
            frozen_at=facts.frozen_at.isoformat().replace("+00:00", "Z"),
            written_after_first_run=facts.written_after_first_run,
            first_run_at=facts.first_run_at.isoformat().replace("+00:00", "Z") if facts.first_run_at else None,
        ))
    return result


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.reporting.report import build_report, parse_pairs, render_markdown, report_json
    from lme.tracking.report_source import load_sources
    from lme.util.secrets import clean

    overrides, rest = split_overrides(argv)
    args = _parser().parse_args(rest)
    if args.resamples < 100:
        raise LmeError(f"--resamples must be at least 100, got {args.resamples}.")
    settings = tracking_settings(overrides)
    sources = load_sources(settings, [] if args.latest and not args.names else args.names)
    designs = sources.designs
    labels = [d.label for d in designs]
    pairs = parse_pairs(args.pairs, labels) if args.pairs else None
    report = build_report(designs, pairs, args.resamples, args.bootstrap_seed, notes=sources.notes,
                          preregistrations=preregistrations(sources, args.prereg))
    markdown = clean(render_markdown(report))  # lme.util.secrets: what is printed, written and logged
    payload = json.dumps(clean(report_json(report)), indent=2, sort_keys=True) + "\n"
    print(payload if args.json else markdown, end="", flush=True)
    if args.out is not None:
        from lme.reporting.plots import write_plots

        out: Path = args.out
        write_text_atomic(out / REPORT_MD, markdown)
        write_text_atomic(out / REPORT_JSON, payload)
        try:
            plots = write_plots(report, out)
        except OSError as exc:
            raise cannot_write(out, exc) from None
        files = [out / REPORT_MD, out / REPORT_JSON, *plots]
        where = f"lme: wrote {', '.join(str(f) for f in files)}"
        if settings.enabled:
            run_id = log_report_run(settings, report, files, args.names)
            where += f"; MLflow report run {run_id}"
        print(where, file=sys.stderr, flush=True)
    return 0
