"""Which MLflow runs a report covers, and their outcome rows.

A report names designs (`bm25`), parent runs by id or by name (`bm25-multirun`), or single job
runs by id; with no name it takes, for every design in the experiment, the latest parent run
that has jobs of that design (a design that never ran as a multirun: its latest lone job).
A parent whose sweep covered several designs gives one entry per design. Only finished jobs
count; the others are named in the report's notes.

`select_designs` is pure over `RunInfo`s (tested without MLflow); `list_runs` and
`load_designs` read the tracking store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lme.errors import LmeError
from lme.report import DesignRuns, JobOutcomes
from lme.tracking import TrackingSettings

PARENT, JOB = "parent", "job"


@dataclass(frozen=True)
class RunInfo:
    """The parts of an MLflow run the report needs."""

    run_id: str
    name: str
    status: str
    start_time: int
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def role(self) -> str | None:
        return self.tags.get("lme.role")

    @property
    def design(self) -> str:
        return self.tags.get("lme.design", "default")

    @property
    def parent_id(self) -> str | None:
        return self.tags.get("mlflow.parentRunId")


@dataclass(frozen=True)
class Selection:
    design: str
    source: RunInfo  # the parent, or the job itself for a lone run
    jobs: tuple[RunInfo, ...]  # finished jobs, oldest first
    notes: tuple[str, ...] = ()


def _design_selection(source: RunInfo, design: str, children: Sequence[RunInfo]) -> Selection:
    mine = sorted((c for c in children if c.design == design), key=lambda r: r.start_time)
    finished = tuple(c for c in mine if c.status == "FINISHED")
    notes = tuple(
        f"job {c.name} ({c.run_id}, seed {c.tags.get('lme.seed', '?')}) is {c.status}, left out"
        for c in mine if c.status != "FINISHED"
    )
    return Selection(design, source, finished, notes)


def select_designs(runs: Sequence[RunInfo], selectors: Sequence[str]) -> list[Selection]:
    """The designs a report covers, in the order named (default: oldest source first)."""
    parents = sorted((r for r in runs if r.role == PARENT), key=lambda r: r.start_time)
    jobs = [r for r in runs if r.role == JOB]
    by_id = {r.run_id: r for r in runs}
    children: dict[str, list[RunInfo]] = defaultdict(list)
    for job in jobs:
        if job.parent_id:
            children[job.parent_id].append(job)
    lone = sorted((j for j in jobs if not j.parent_id or j.parent_id not in by_id), key=lambda r: r.start_time)

    def latest_of_design(design: str) -> Selection | None:
        with_design = [p for p in parents
                       if any(c.design == design and c.status == "FINISHED" for c in children[p.run_id])]
        if with_design:
            return _design_selection(with_design[-1], design, children[with_design[-1].run_id])
        alone = [j for j in lone if j.design == design and j.status == "FINISHED"]
        return Selection(design, alone[-1], (alone[-1],)) if alone else None

    def of_parent(parent: RunInfo) -> list[Selection]:
        designs = sorted({c.design for c in children[parent.run_id]})
        if not designs:
            raise LmeError(f"parent run {parent.name} ({parent.run_id}) has no job runs.")
        return [_design_selection(parent, d, children[parent.run_id]) for d in designs]

    if not selectors:
        designs = sorted({j.design for j in jobs})
        chosen = [s for s in (latest_of_design(d) for d in designs) if s is not None]
        if not chosen:
            raise LmeError(
                "no finished lme job in this MLflow experiment: run a design first "
                "(python -m lme +design=bm25 -m seed=1,2,3)."
            )
        return sorted(chosen, key=lambda s: (s.source.start_time, s.design))

    selections: list[Selection] = []
    for name in selectors:
        run = by_id.get(name)
        if run is not None and run.role == PARENT:
            selections += of_parent(run)
            continue
        if run is not None and run.role == JOB:
            if run.status != "FINISHED":
                raise LmeError(f"job run {run.name} ({run.run_id}) is {run.status}, not finished.")
            selections.append(Selection(run.design, run, (run,)))
            continue
        named = [p for p in parents if p.name == name]
        if named:  # the latest of that name, preferring one with a finished job
            done = [p for p in named if any(c.status == "FINISHED" for c in children[p.run_id])]
            selections += of_parent((done or named)[-1])
            continue
        by_design = latest_of_design(name)
        if by_design is not None:
            selections.append(by_design)
            continue
        known = ", ".join(sorted({j.design for j in jobs})) or "none"
        raise LmeError(
            f"{name!r} is not a design, a parent run id or name, or a job run id in this MLflow experiment "
            f"(designs: {known})."
        )
    unique: dict[tuple[str, str], Selection] = {}
    for selection in selections:  # a run named twice (by id and by design) is reported once
        unique.setdefault((selection.design, selection.source.run_id), selection)
    return list(unique.values())


def labels_for(selections: Sequence[Selection]) -> list[str]:
    """Design names, made unique with the source run's name (then its id) when a design repeats."""
    designs = [s.design for s in selections]
    labels = [f"{s.design}@{s.source.name}" if designs.count(s.design) > 1 else s.design for s in selections]
    repeated = {label for label in labels if labels.count(label) > 1}
    return [f"{s.design}@{s.source.run_id[:8]}" if label in repeated else label for s, label in zip(selections, labels)]


# --- the tracking store -------------------------------------------------------------------------


def _client(settings: TrackingSettings):
    from mlflow.tracking import MlflowClient

    uri = settings.uri
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.exists():
            raise LmeError(
                f"{path}: no MLflow tracking store there (tracking.uri={uri}); run a design first or pass tracking.uri=..."
            )
    return MlflowClient(tracking_uri=uri)


def _experiment_id(client: Any, settings: TrackingSettings) -> str:
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        raise LmeError(
            f"tracking store {settings.uri} has no MLflow experiment {settings.experiment!r}; run a design first."
        )
    return experiment.experiment_id


def list_runs(settings: TrackingSettings) -> list[RunInfo]:
    """Every parent and job run of the experiment (all pages)."""
    client = _client(settings)
    experiment = _experiment_id(client, settings)
    runs: list[RunInfo] = []
    token = None
    while True:
        page = client.search_runs([experiment], max_results=5000, page_token=token)
        for run in page:
            if run.data.tags.get("lme.role") not in (PARENT, JOB):
                continue
            runs.append(RunInfo(run.info.run_id, run.info.run_name or run.info.run_id, run.info.status,
                                run.info.start_time or 0, dict(run.data.tags)))
        token = page.token
        if not token:
            return runs


def load_designs(settings: TrackingSettings, selectors: Sequence[str]) -> list[DesignRuns]:
    """The selected designs with every finished job's outcome rows (the `outcomes.jsonl` artifacts)."""
    from lme.tracking import read_outcome_rows

    selections = select_designs(list_runs(settings), selectors)
    designs = []
    for label, selection in zip(labels_for(selections), selections):
        jobs, notes = [], list(selection.notes)
        for job in selection.jobs:
            rows = read_outcome_rows(settings, job.run_id)
            if rows is None:
                notes.append(f"job {job.name} ({job.run_id}) logged no outcomes.jsonl, left out")
                continue
            jobs.append(JobOutcomes(
                run_id=job.run_id,
                run_name=job.name,
                seed=job.tags.get("lme.seed", "?"),
                judge=job.tags.get("lme.judge", "unknown judge"),
                judge_official=job.tags.get("lme.judge_official", "false") == "true",
                rows=tuple(rows),
            ))
        designs.append(DesignRuns(label, selection.design, selection.source.run_id, selection.source.name,
                                  tuple(jobs), tuple(notes)))
    return designs
