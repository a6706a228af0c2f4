"""How a stopped job says what it kept and how to continue: the resume command (the same overrides and run
directory; in a multirun launched by this process, the sweep's own command and sweep directory, never
`hydra.run.dir`, which a multirun ignores and which started a new sweep) and the
messages printed at a spending cap, at a failure no retry can fix, and at Ctrl-C. Overrides that hold a key
are left out of every command printed."""

from __future__ import annotations

from pathlib import Path

from lme.config.design import Launch
from lme.models.gateway import SystemicFailure
from lme.models.ledger import BudgetExhausted
from lme.tracking.runs import OUTCOMES_ARTIFACT


def resume_command(overrides: list[str], run_dir: str | Path) -> str:
    """The command that continues this job in `run_dir` (its journal and call cache): the same overrides,
    the same run directory. Overrides that hold a key anywhere, or set a secret-named field, are left out."""
    import shlex

    from lme.util.secrets import keep_argument

    kept = [
        item for item in overrides
        if not item.lstrip("+~").startswith(("hydra.run.dir=", "hydra.sweep.dir=")) and keep_argument(item)
    ]
    return "python -m lme " + " ".join(shlex.quote(item) for item in [*kept, f"hydra.run.dir={run_dir}"])


def sweep_resume_command(launch: Launch) -> str | None:
    """In a multirun launched by this process, the command that continues it: the same arguments, `-m` first,
    and `hydra.sweep.dir=` its sweep directory (absolute), so Hydra places every job in its own folder again
    (`<sweep dir>/<N>`): finished jobs ask nothing again, unfinished ones ask for exactly what they lack, and no
    new sweep starts. `hydra.run.dir=` (which a multirun ignores) and overrides holding a key are left out.
    None outside such a multirun."""
    import shlex

    from lme.util.secrets import keep_argument

    if launch.sweep_dir is None:
        return None
    kept = [
        item for item in launch.argv
        if item not in ("-m", "--multirun")
        and not item.lstrip("+~").startswith(("hydra.sweep.dir=", "hydra.run.dir="))
        and keep_argument(item)
    ]
    return "python -m lme -m " + " ".join(shlex.quote(item) for item in [*kept, f"hydra.sweep.dir={launch.sweep_dir}"])


def job_resume_command(run_dir: str | Path, launch: Launch) -> str:
    """How to continue the running job: its own command and run directory; in a multirun launched by this
    process (Hydra's basic launcher), the sweep's command with its sweep directory, which resumes every job
    (`sweep_resume_command`)."""
    return sweep_resume_command(launch) or resume_command(list(launch.overrides), run_dir)


def budget_stop_message(reason: BudgetExhausted, journaled: int, total: int, run_dir: str | Path,
                        launch: Launch) -> str:
    """What a job prints when it stops at a cap: why, what it kept, and how to resume."""
    return (
        f"lme: stopped at a spending cap: {reason} {journaled} of {total} questions are journaled in "
        f"{Path(run_dir) / 'outcomes.jsonl'}; calls already paid are in the call cache.\n"
        "lme: To resume, raise or clear the cap (e.g. budget.study_dollars=null) and run: "
        + job_resume_command(run_dir, launch)
    )


def systemic_stop_message(exc: SystemicFailure, journaled: int, total: int, run_dir: Path, launch: Launch) -> str:
    """What a job prints when a model call failed in a way no retry can fix."""
    return (
        f"lme: stopped: {exc.model} failed with {exc.error_class}: {exc.detail}\n"
        f"lme: No retry can fix this, so no further call was sent. {journaled} of {total} questions are journaled "
        f"in {run_dir / OUTCOMES_ARTIFACT}. Fix the model's (or memory system's) name, key or parameters, then resume with: "
        + job_resume_command(run_dir, launch)
    )


def interrupted_message(journaled: int, total: int, run_dir: Path, launch: Launch) -> str:
    return (
        f"lme: interrupted; {journaled} of {total} questions are journaled in {run_dir / OUTCOMES_ARTIFACT}. "
        "To resume: " + job_resume_command(run_dir, launch)
    )


def store_stop_message(exc: Exception, journaled: int | None, total: int, run_dir: Path, launch: Launch) -> str:
    """What a job prints when a file it keeps (a cache, the ledger, the journal, the MLflow store) failed while
    it ran: the file's one sentence, what is kept, and how to resume once the file is fixed."""
    kept = (f"{journaled} of {total} questions are journaled in {run_dir / OUTCOMES_ARTIFACT}"
            if journaled is not None else f"the questions answered so far are in {run_dir / OUTCOMES_ARTIFACT}")
    return (
        f"lme: stopped: {exc}\n"
        f"lme: Nothing more was sent; {kept}. Once the file is fixed, resume with: "
        + job_resume_command(run_dir, launch)
    )

