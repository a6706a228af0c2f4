"""The multirun parent: a Hydra callback that opens a parent MLflow run around a sweep and, at its end,
logs the across-seed measures and runs the parent's own stages (`lme.study.parent.after_multirun`).

Any Hydra launcher works (basic, joblib, Ray, submitit): `MultirunParent` creates the parent in the launching
process and hands every job, through the job's own config, what a worker in another process or on another
machine lacks (`job_overrides`): the parent id and lme's path variables as `hydra.job.env_set` (Hydra sets
them around the job wherever it runs) and the sweep directory as an absolute path. A job whose process started
elsewhere (a Ray worker starts in the directory `ray start` ran in) moves to the launch directory when it exists
there, so relative paths mean the same in every job.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lme.tracking.runs as tracking  # STOPPED and FAILED_STUDIES are read at call time
from lme.tracking.runs import (
    ACROSS_SEEDS_TABLE,
    MAX_PARAM_CHARS,
    FORWARDED_ENV,
    PARENT_ENV,
    RemoteRun,
    TrackingSettings,
    open_run,
    parent_run_name,
    run_stamp,
    study_call,
)

try:
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover - hydra is a dependency
    _HydraCallback = object  # type: ignore[misc,assignment]


def _quoted(value: str) -> str:
    """A Hydra override value as a quoted string (any path: spaces, colons, quotes)."""
    # Hydra's grammar: a backslash is an escape only before a quote (or the closing quote).
    escaped = re.sub(r"(\\*)'", lambda match: match.group(1) * 2 + "\\'", value)
    trailing = len(escaped) - len(escaped.rstrip("\\"))
    return "'" + escaped + "\\" * trailing + "'"


def job_overrides(parent_id: str | None, sweep_dir: str, environ: Mapping[str, str]) -> list[str]:
    """Hydra overrides that make each job of a multirun self-sufficient in any process on any launcher:
    the parent run id and lme's path variables set around the job (`hydra.job.env_set`), and the sweep
    directory as an absolute path (a worker's current directory may not be the launch directory)."""
    env = {PARENT_ENV: parent_id} if parent_id else {}
    env |= {name: environ[name] for name in FORWARDED_ENV if environ.get(name)}
    overrides = [f"++hydra.job.env_set.{name}={_quoted(value)}" for name, value in env.items()]
    overrides.append(f"hydra.sweep.dir={_quoted(str(Path(sweep_dir).absolute()))}")
    return overrides


BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def runs_jobs_here(config: Any) -> bool:
    """Whether the sweep's jobs run in this process, one after another (Hydra's basic launcher)."""
    launcher = config.hydra.get("launcher") if config.get("hydra") is not None else None
    return launcher is not None and str(launcher.get("_target_", "")) == BASIC_LAUNCHER


class MultirunParent(_HydraCallback):
    """Hydra callback: a parent MLflow run around a multirun, with across-seed measures at the end.

    `on_multirun_start`/`on_multirun_end` run in the launching process; `on_job_start` runs wherever
    the launcher runs the job (this process, a joblib worker, a Ray worker, a SLURM node). The callback
    is pickled to those workers with the rest of Hydra's context, so it carries only plain data there."""

    def __init__(self) -> None:
        self.parent: RemoteRun | None = None
        self.settings: TrackingSettings | None = None
        self.prefetch: Any = None  # the thread loading the data file for this process's jobs, if any

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}  # the parent's client (open connections) stays in the launching process

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.parent = None
        self.prefetch = None
        self.settings = state.get("settings")

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from omegaconf import OmegaConf, read_write

        node = OmegaConf.to_container(config.tracking, resolve=True)
        self.settings = TrackingSettings(**node)  # type: ignore[arg-type]
        if self.settings.enabled:  # the helper that holds MLflow for this process starts now, beside what follows
            from lme.tracking.traces import start_helper

            start_helper(self.settings)
        if runs_jobs_here(config):  # the jobs will load the data file in this process: start now
            from lme.data.dataset import loading_in_background

            design = _design(config)
            self.prefetch = None
            if design is not None:  # the file is parsed after litellm's import, not beside it (lme.data.dataset)
                with loading_in_background(design.dataset) as self.prefetch:
                    if self.prefetch is not None:  # litellm now, while the file decompresses on another core,
                        from lme.study.job import warm_model_calls  # not on the event loop at the first call

                        warm_model_calls(design)
        if self.settings.enabled:
            overrides = list(config.hydra.overrides.task)
            dataset = str(config.dataset.name) if not _sweeps(overrides, "dataset") else "datasets"
            design = str(config.design_name) if not _sweeps(overrides, "+design", "design") else "designs"
            self.parent = open_run(  # held by the helper (lme.tracking.helper): this process never imports MLflow
                self.settings,  # named with the sweep's folder, as its jobs are (two sweeps told apart)
                run_name=parent_run_name(design, dataset, run_stamp(str(config.hydra.sweep.dir))),
                tags={"lme.role": "parent", "lme.design": str(config.design_name), "lme.dataset": dataset,
                      "lme.overrides": " ".join(overrides),
                      "mlflow.note.content": sweep_description(config, overrides, design == "designs")},
            )
            self.parent.log_params({"sweep.overrides": " ".join(overrides)[:MAX_PARAM_CHARS]})
            os.environ[PARENT_ENV] = self.parent.run_id  # jobs in this process (the basic launcher)
            atexit.register(self._fail_if_open)  # a job that stops the sweep must not leave the parent RUNNING
        # Every launcher composes each job's config from `hydra.overrides.hydra` + the job's overrides.
        extra = job_overrides(self.parent.run_id if self.parent else None, str(config.hydra.sweep.dir), os.environ)
        with read_write(config.hydra.overrides):
            config.hydra.overrides.hydra.extend(extra)

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        """In the job's process: start from the launch directory, as a job of the basic launcher does."""
        launch_dir = str(config.hydra.runtime.cwd)
        if os.getcwd() != launch_dir and Path(launch_dir).is_dir():
            os.chdir(launch_dir)

    def _fail_if_open(self) -> None:
        """At exit, a parent still open was left by a job that stopped the study (a cap, a failure no retry
        can fix, Ctrl-C: its run says more), or by a job that refused to start, with no run of its own
        (`JOB_ERRORS`): it ends FAILED (KILLED when stopped on purpose) with the job's reason."""
        if self.parent is not None:
            if tracking.STOPPED is not None:
                status, reason = tracking.STOPPED
                reason = f"{reason} (see the job's run)"
            elif JOB_ERRORS:
                status, reason = "FAILED", f"a job stopped the sweep: lme: error: {JOB_ERRORS[-1]}"
            else:
                status, reason = "FAILED", "a job stopped the sweep before it ended (its output says why)"
            self.parent.finish(status, reason)
            self.parent = None

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if self.parent is None or self.settings is None:
            return
        status, failure = "FINISHED", None
        try:
            metrics, summary = study_call("summarise_children", self.settings, self.parent.run_id)
            self.parent.log_metrics(metrics)
            self.parent.adopt_children_dataset()  # the parent's row in the runs table shows the data file too
            table = summary.pop("table", [])
            self.parent.log_text(json.dumps({"metrics": metrics, **summary}, indent=2, sort_keys=True), "across_runs.json")
            if table:
                self.parent.log_table(table, ACROSS_SEEDS_TABLE)
            if metrics.get("n_failed_runs"):
                status, failure = "FAILED", f"{int(metrics['n_failed_runs'])} job(s) failed or are incomplete"
            from lme.study.parent import after_multirun  # the parent's own stages: steps.json, the arbiter

            design = _design(config)
            if design is None or not after_multirun(design, self.parent, self.settings):
                status, failure = "FAILED", failure or "a stage after the jobs failed"
            print(multirun_summary(metrics, summary, self.parent.run_id, self.settings, self.parent.experiment_id,
                                   resume=_sweep_resume(config)), flush=True)
        finally:
            if status != "FINISHED":
                tracking.FAILED_STUDIES.append(self.parent.run_id)
            self.parent.finish(status, failure)
            self.parent = None
            os.environ.pop(PARENT_ENV, None)


JOB_ERRORS: list[str] = []  # the `lme: error:` sentence of each job of this process that stopped on one


def note_job_error(sentence: str) -> None:
    """A job of this process stops on an `LmeError` (exit 2 follows): a multirun's parent ends with its sentence."""
    JOB_ERRORS.append(sentence)


def _design(config: Any) -> Any:
    """The sweep's design (`lme.config.design`); None, after saying why, when it does not compose (its jobs say so too)."""
    from lme.config.design import design_from_config
    from lme.util.errors import LmeError

    try:
        return design_from_config(config, check=False)  # every sweep value was checked before Hydra started
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        return None


def sweep_description(config: Any, overrides: list[str], several_designs: bool) -> str:
    """The parent run's description: its design file's (`lme.config.design.design_description`; none for a sweep over
    designs), then the sweep's overrides."""
    from lme.config.design import config_roots, design_description

    text = ""
    choice = (config.hydra.runtime.get("choices") or {}).get("design") if "runtime" in config.hydra else None
    if choice and not several_designs:
        text = design_description(str(choice), config_roots())
    sweep = f"Sweep: `{' '.join(overrides)}`"
    return f"{text}\n\n{sweep}" if text else sweep


def _sweeps(overrides: list[str], *keys: str) -> bool:
    """Whether the sweep's overrides give the jobs several values of a key starting with one of `keys`."""
    for override in overrides:
        key, _, value = str(override).partition("=")
        if key.lstrip("+~").startswith(tuple(k.lstrip("+") for k in keys)) and ("," in value or "(" in value):
            return True
    return False


def _sweep_resume(config: Any) -> str | None:
    """The command that continues this sweep in its own folders (`lme.study.resume.sweep_resume_command`): this
    process's arguments with the sweep directory."""
    from lme.config.design import Launch
    from lme.study.resume import sweep_resume_command

    try:
        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
    except Exception:  # noqa: BLE001 - no sweep directory to name: the jobs' own lines say how to resume
        return None
    return sweep_resume_command(Launch(sweep_dir=sweep_dir, argv=tuple(sys.argv[1:])))


def multirun_summary(metrics: Mapping[str, float], summary: Mapping[str, Any], parent_id: str,
                     settings: TrackingSettings, experiment_id: str, resume: str | None = None) -> str:
    """What a multirun prints at the end: per design, the mean of runs and the count correct in a majority of
    runs (a LoCoMo sweep: also LoCoMo's F1 and J without adversarial, means of runs), the failed jobs (with
    `resume`, the sweep's command that continues them in their own folders), the parent run and how to look at it (lme's runs-table view, `runs_view_url`)."""
    designs = summary.get("designs", {})
    lines = []
    for design, info in sorted(designs.items()):
        prefix = "" if len(designs) == 1 else f"{design}/"
        n_runs = int(info.get("n_runs", 0))
        mean = metrics.get(prefix + "mean_accuracy")
        count = metrics.get(prefix + "majority_correct_count")
        share = metrics.get(prefix + "majority_correct_accuracy")
        threshold = n_runs // 2 + 1
        line = f"multirun, design {design}: {n_runs} run{'s' if n_runs != 1 else ''}"
        if mean is not None:
            line += f", mean of runs {mean:.3f}"
        if count is not None:
            line += f", correct in at least {threshold} of {n_runs}: {int(count)}"
            line += f" ({share:.3f})" if share is not None else ""
        f1, j = metrics.get(prefix + "mean_locomo.f1"), metrics.get(prefix + "mean_locomo.j_without_adversarial")
        if f1 is not None:  # a LoCoMo sweep: its own figures beside the mean accuracy
            line += f"; LoCoMo F1 {f1:.3f} (mean_locomo.f1)"
        if j is not None:
            line += f", J without adversarial {j:.3f} (mean_locomo.j_without_adversarial)"
        lines.append(line)
    failed = int(metrics.get("n_failed_runs", 0))
    if failed or not designs:
        lines.append(f"multirun: {failed} job(s) failed or are incomplete; they are left out of the measures above"
                     + (f"; to finish them in their own folders (only what is missing is asked): {resume}"
                        if failed and resume else ""))
    lines.append(f"MLflow parent run {parent_id}; to compare: {tracking.ui_hint(settings, experiment_id)} "
                 "(design, dataset, seed, accuracy per run)")
    return "\n".join(lines)
