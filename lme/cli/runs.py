"""`python -m lme runs repair [overrides]`: mark MLflow runs orphaned by a killed process as KILLED.

A job killed with SIGKILL (or a machine that lost power) cannot close its MLflow run, which would stay
RUNNING for ever. Every run lme creates carries its owner (`lme.host`, `lme.pid`, `lme.pid_start`); this
command, and every new run as it starts, marks KILLED each RUNNING run of the experiment whose owning
process on this machine is gone, with the reason in the tag `lme.failure`. Runs owned by another machine
are left alone: their process cannot be checked from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from lme.errors import LmeError

USAGE = "usage: python -m lme runs repair [overrides, e.g. tracking.uri=sqlite:///mlflow.db]"


def main(argv: Sequence[str]) -> int:
    from lme.compose import split_overrides
    from lme.design import compose_design
    from lme.tracking import repair_orphans

    overrides, rest = split_overrides(argv)
    if not rest or rest[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1].strip())
        return 0
    if rest[0] != "repair" or len(rest) > 1:
        raise LmeError(f"runs: unknown action {' '.join(rest)!r}; {USAGE}")
    settings = compose_design(overrides).tracking
    if not settings.enabled:
        raise LmeError("runs repair: tracking is disabled (tracking.enabled=false); nothing to repair.")
    repaired = repair_orphans(settings, quiet=True)
    for run_id in repaired:
        print(f"{run_id}: RUNNING with its process gone; marked KILLED")
    print(f"{len(repaired)} orphaned run(s) marked KILLED in experiment {settings.experiment!r} of {settings.uri}")
    return 0
