"""`python -m lme prereg freeze|verify`: freeze a composed design into a preregistration record, or verify
the current config against one (`lme.provenance.prereg` holds the record itself)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lme.provenance.prereg as prereg  # code_version looked up at call time (tests replace it)
from lme.cli.parser import make_parser
from lme.provenance.prereg import (
    DEFAULT_PRIMARY,
    DEFAULT_SEEDS,
    Difference,
    Plan,
    build_record,
    compare,
    format_seeds,
    load_record,
    parse_comparison,
    parse_seeds,
    seal,
    write_record,
)


def _parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "python -m lme prereg",
        "Freeze a composed design into a preregistration record, or verify the current config against "
        "one. Other arguments are config overrides, as for a run (+design=pipeline setup=paper ...).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    freeze = commands.add_parser("freeze", help="write a record of the design the overrides compose")
    freeze.add_argument("--out", type=Path, help="record file (default prereg/DESIGN_NAME.yaml)")
    freeze.add_argument("--force", action="store_true", help="overwrite an existing record")
    verify = commands.add_parser("verify", help="recompute a record and list every difference")
    verify.add_argument("record", type=Path)
    for command in (freeze, verify):
        command.add_argument("--seeds", help=f"planned seeds, comma-separated (freeze default {format_seeds(DEFAULT_SEEDS)})")
        command.add_argument("--primary", help=f"the primary measure (freeze default {DEFAULT_PRIMARY})")
        command.add_argument("--compare", action="append", default=None, metavar="DESIGN:BASELINE",
                             help="a planned paired comparison; repeat for several")
    return parser


def _plan(args: argparse.Namespace, base: Plan) -> Plan:
    return Plan(
        seeds=parse_seeds(args.seeds) if args.seeds is not None else base.seeds,
        primary=args.primary if args.primary is not None else base.primary,
        comparisons=tuple(parse_comparison(c) for c in args.compare) if args.compare is not None else base.comparisons,
    )


def record_for(overrides: Sequence[str], plan: Plan, **kwargs: Any) -> dict[str, Any]:
    """Compose the config as a run would, refuse it as a run refuses it when it holds a secret (an override, a
    design file, a user's config dir: `lme.util.secrets.refuse_secrets` on the composed config, before anything is
    resolved or written), load its questions and build the record."""
    from lme.config.compose import compose_config
    from lme.data.dataset import load_dataset
    from lme.config.design import design_from_config
    from lme.util.secrets import refuse_secret_arguments, refuse_secrets

    refuse_secret_arguments(list(overrides))  # as `python -m lme` does first (a record's own overrides too)
    config = compose_config(list(overrides))
    refuse_secrets(config, where="the composed config")  # `lme.cli.check_config_before_hydra`'s check
    design = design_from_config(config, data=False)  # the run's checks: every value, a key once resolved
    data_path, questions = load_dataset(design.dataset)
    return build_record(design, data_path, [q.question_id for q in questions], plan, overrides=overrides, **kwargs)


def freeze(overrides: Sequence[str], plan: Plan, out: Path | None, force: bool = False) -> tuple[Path, dict[str, Any]]:
    if out is not None:  # before the work (on LongMemEval-S, ~20 s); write_record checks again
        prereg.refuse_existing(out, force)
    record = record_for(overrides, plan, record_path=out)
    path = out or Path("prereg") / f"{record['design_name']}.yaml"
    if out is None:  # the default file is known only now: its folder must not count as a change either
        record = {**record, "code": prereg.code_version(ignore=[path])}
    record = seal({**record, "name": path.stem})
    write_record(record, path, force=force)  # refuses a record holding a secret, writes it whole or not at all
    return path, record


def verify(path: Path, overrides: Sequence[str], plan_args: argparse.Namespace | None = None) -> list[Difference]:
    stored = load_record(path)
    plan = Plan.from_dict(stored.get("plan") or {})
    if plan_args is not None:
        plan = _plan(plan_args, plan)
    used = list(overrides) if overrides else list(stored.get("overrides") or [])
    fresh = record_for(used, plan, name=stored.get("name"), record_path=path)
    return compare(stored, fresh)


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides

    overrides, rest = split_overrides(argv)
    args = _parser().parse_args(rest)
    if args.command == "freeze":
        path, record = freeze(overrides, _plan(args, Plan()), args.out, force=args.force)
        code = record["code"]
        dirty = " (dirty tree)" if code.get("git_dirty") else ""
        git = str(code["git_commit"])[:12] + dirty if code.get("git_commit") else "not a git checkout"
        print(f"froze design {record['design_name']} into {path}: record_sha256 {record['record_sha256']}")
        print(f"  design_sha256 {record['design_sha256']}; {record['data']['n_questions']} questions of "
              f"{record['data']['path']} (sha256 {record['data']['file_sha256'][:12]}); seeds "
              f"{format_seeds(record['plan']['seeds'])}; primary {record['plan']['primary']}; "
              f"code {code['source_sha256'][:12]}, git {git}")
        return 0
    differences = verify(args.record, overrides, args)
    blocking = [d for d in differences if d.blocking]
    if not blocking:
        print("matches")
    else:
        print(f"{args.record}: {len(blocking)} blocking difference{'s' if len(blocking) != 1 else ''} "
              "(key: frozen -> now):")
        for difference in blocking:
            print(f"  {difference.describe()}")
    notes = [d for d in differences if not d.blocking]
    if notes:
        print("not blocking:")
        for difference in notes:
            print(f"  {difference.describe()}")
    return 1 if blocking else 0
