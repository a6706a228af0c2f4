"""`python -m lme estimate [overrides] [-m]`: expected calls and dollars per design and seed, before any model
call (`lme.study.estimate` counts them; see its docstring)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lme.cli.parser import ArgumentParser, make_parser
from lme.util.errors import LmeError

if TYPE_CHECKING:
    from lme.config.design import Design

PROG = "python -m lme estimate"


def _parser() -> ArgumentParser:
    import lme.study.estimate as estimate

    parser = make_parser(
        PROG,
        (estimate.__doc__ or "").split("\n\n", 1)[1].strip(),
        usage=f"{PROG} [overrides] [-m]   e.g. +design=pipeline setup=paper seed=1,2,3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-m", "--multirun", action="store_true",
                        help="accepted as for a run; sweeps (seed=1,2,3, +design=a,b) are expanded either way")
    return parser


def _is_seed(override: str) -> bool:
    return override.split("=", 1)[0].lstrip("+~") == "seed"


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import expand_sweeps, split_overrides
    from lme.config.design import compose_design
    from lme.study.estimate import estimate_design, format_estimate

    overrides, rest = split_overrides(argv)
    _, unknown = _parser().parse_known_args(rest)
    if unknown:
        raise LmeError(
            f"estimate: unknown argument {unknown[0]!r} (give Hydra overrides, e.g. +design=bm25 seed=1,2,3)."
        )
    groups: dict[tuple[str, ...], list[int]] = {}
    for combo in expand_sweeps(overrides):
        rest_of = tuple(o for o in combo if not _is_seed(o))
        seed = compose_design(combo).seed
        groups.setdefault(rest_of, [])
        if seed not in groups[rest_of]:
            groups[rest_of].append(seed)
    for combo, seeds in groups.items():
        design = compose_design(list(combo))
        print(f"lme estimate: {' '.join(combo) or '(defaults)'}: building memories ...", file=sys.stderr, flush=True)
        print(format_estimate(estimate_design(design, seeds, progress=True)), flush=True)
        _print_budget(design)
    print("no model was called.", flush=True)
    return 0


def _print_budget(design: Design) -> None:
    """The study's spending so far and its caps, when a ledger exists (read only)."""
    import sqlite3

    path = design.ledger_path
    caps = {name: getattr(design.budget, name) for name in ("job_dollars", "job_calls", "study_dollars", "study_calls")}
    cap_text = ", ".join(f"{name} {value}" for name, value in caps.items() if value is not None) or "no caps"
    if not path.exists():
        print(f"  budget: {cap_text}; no ledger yet at {path}")
        return
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        calls, dollars = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(COALESCE(dollars, reserved_dollars)), 0) FROM calls "
            "WHERE study = ? AND status != 'failed'",
            (design.study,),
        ).fetchone()
    except sqlite3.Error:
        calls, dollars = 0, 0.0
    finally:
        conn.close()
    print(f"  budget: {cap_text}; study {design.study} has made {calls} paid calls, ${dollars:,.4f}, in {path}")
