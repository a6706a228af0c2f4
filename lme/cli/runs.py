"""`python -m lme runs repair [overrides]`: mark MLflow runs orphaned by a killed process as KILLED.

A job killed with SIGKILL (or a machine that lost power) cannot close its MLflow run, which would stay
RUNNING for ever. Every run lme creates carries its owner (`lme.host`, `lme.pid`, `lme.pid_start`); this
command, and every new run as it starts, marks KILLED each RUNNING run of the experiment whose owning
process on this machine is gone, with the reason in the tag `lme.failure`. Runs owned by another machine
are left alone: their process cannot be checked from here. The store must exist: a path that names none
is refused (with the names close to it), never made into a new, empty store; a store that cannot be read
(damaged, locked, of another MLflow) is one sentence, and is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from lme.util.errors import LmeError

USAGE = "usage: python -m lme runs repair [overrides, e.g. tracking.uri=sqlite:///mlflow.db]"


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.config.check import tracking_uri
    from lme.config.design import compose_design
    from lme.tracking.runs import client_for, repair_orphans, store_failure

    overrides, rest = split_overrides(argv)
    if not rest or rest[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1].strip())
        return 0
    if rest[0] != "repair" or len(rest) > 1:
        raise LmeError(f"runs: unknown action {' '.join(rest)!r}; {USAGE}")
    settings = compose_design(overrides).tracking
    if not settings.enabled:
        raise LmeError("runs repair: tracking is disabled (tracking.enabled=false); nothing to repair.")
    tracking_uri("tracking.uri", settings.uri)  # a URI MLflow cannot use: one sentence, before MLflow's import
    client = client_for(settings, create=False)  # a store that does not exist is refused, not made
    try:
        experiment = client.get_experiment_by_name(settings.experiment)
        if experiment is None:
            raise LmeError(f"runs repair: the tracking store {settings.uri} has no experiment {settings.experiment!r}; "
                           "name the study's with tracking.experiment=NAME.")
        repaired = repair_orphans(settings, experiment_ids=[experiment.experiment_id], quiet=True, strict=True)
    except LmeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store damaged past its first page, locked meanwhile: one sentence
        raise store_failure(settings, exc) from None
    for run_id in repaired:
        print(f"{run_id}: RUNNING with its process gone; marked KILLED")
    print(f"{len(repaired)} orphaned run(s) marked KILLED in experiment {settings.experiment!r} of {settings.uri}")
    return 0
