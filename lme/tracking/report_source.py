"""Which MLflow runs a report covers, and their outcome rows.

A report names designs (`bm25`), parent runs by id or by name (`bm25-sample-multirun-<time>`, or without
the time for the latest of that name), or single job
runs by id (a unique prefix of a run id will do; an ambiguous one is an error naming the runs it
could be); with no name it takes, for every design in the experiment, the latest parent run
that has jobs of that design (a design that never ran as a multirun: its latest lone job), and
compares only runs made on the same questions: the same data file (the jobs' `dataset.sha256`
param) and the same question ids (their `question_ids.txt` artifact; jobs that logged neither, from
an lme before these records, match one another). Of the questions the designs' latest runs used, those the most designs
have a run on win (a tie: those most latest runs used, then the newest run's); a design whose
latest run used other questions falls back to its latest run on those, and every run or design
left out is named in the report's notes with the reason. A parent whose sweep covered several
designs gives one entry per design. Only finished jobs count; the others are
named in the report's notes.

`select_designs` and `choose_sources` are pure over `RunInfo`s (tested without MLflow);
`list_runs` and `load_sources` read the tracking store.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lme.util.errors import LmeError
from lme.util.hashing import sha256_text
from lme.models.offline import OFFLINE_PROVIDER
from lme.reporting.report import DesignRuns, JobOutcomes
from lme.tracking.runs import TrackingSettings, names_parent

PARENT, JOB = "parent", "job"


@dataclass(frozen=True)
class RunInfo:
    """The parts of an MLflow run the report needs."""

    run_id: str
    name: str
    status: str
    start_time: int
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)

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
class Questions:
    """What a job ran on: the data file's SHA-256 and the selected question ids (None: the job logged
    neither, as jobs of lme before these records did; such jobs match one another)."""

    data_sha256: str | None
    ids: frozenset[str] | None
    dataset: str | None = None  # the `dataset.name` param, for the reader of the report

    @property
    def key(self) -> tuple[str | None, frozenset[str] | None]:
        return (self.data_sha256, self.ids)

    @property
    def digest(self) -> str:
        """One string for the key (the data digest and the sorted ids)."""
        ids = "-" if self.ids is None else "\n".join(sorted(self.ids))
        return sha256_text(f"{self.data_sha256 or '-'}\n{ids}")

    def describe(self) -> str:
        if self.ids is None:
            what = "questions not logged"
        else:
            what = f"{len(self.ids)} question{'s' if len(self.ids) != 1 else ''}"
        if self.dataset:
            what += f" of dataset {self.dataset}"
        sha = f"data sha256 {self.data_sha256[:12]}" if self.data_sha256 else "data sha256 not logged"
        return f"{what} ({sha})"

    def differs(self, other: Questions) -> str:
        """Why these questions are not `other`'s (empty when they are the same)."""
        reasons = []
        if self.data_sha256 != other.data_sha256:
            reasons.append(f"data sha256 {(self.data_sha256 or 'not logged')[:12]}, "
                           f"not {(other.data_sha256 or 'not logged')[:12]}")
        if self.ids != other.ids:
            if self.ids is None or other.ids is None:
                reasons.append("question ids " + ("not logged" if self.ids is None else "logged") + ", "
                               + ("not logged" if other.ids is None else "logged"))
            else:
                common = len(self.ids & other.ids)
                reasons.append(f"{len(self.ids)} question ids, not {len(other.ids)}, {common} in common")
        if self.dataset and other.dataset and self.dataset != other.dataset:
            reasons.insert(0, f"dataset {self.dataset}, not {other.dataset}")
        return "; ".join(reasons)


@dataclass(frozen=True)
class Selection:
    design: str
    source: RunInfo  # the parent, or the job itself for a lone run
    jobs: tuple[RunInfo, ...]  # finished jobs, oldest first
    notes: tuple[str, ...] = ()
    questions: Questions | None = None  # what every job in `jobs` ran on (when the report checked)


@dataclass(frozen=True)
class Chosen:
    """The selections a report covers and the notes on what it left out."""

    selections: list[Selection]
    notes: tuple[str, ...] = ()
    questions: Questions | None = None  # the questions every selection ran on, when they all agree


def _run_words(run: RunInfo) -> str:
    kind = "parent run" if run.role == PARENT else "job run"
    return f"{kind} {run.name} ({run.run_id})"


def _design_selection(source: RunInfo, design: str, children: Sequence[RunInfo]) -> Selection:
    mine = sorted((c for c in children if c.design == design), key=lambda r: r.start_time)
    finished = tuple(c for c in mine if c.status == "FINISHED")
    notes = tuple(
        f"job {c.name} ({c.run_id}, seed {c.tags.get('lme.seed', '?')}) is {c.status}, left out"
        for c in mine if c.status != "FINISHED"
    )
    return Selection(design, source, finished, notes)


def select_designs(runs: Sequence[RunInfo], selectors: Sequence[str]) -> list[Selection]:
    """The designs a report covers, in the order named (default: oldest source first), without
    comparing what their runs ran on (`choose_sources` does)."""
    return choose_sources(runs, selectors).selections


def _consistent(selection: Selection, questions: Callable[[RunInfo], Questions]) -> Selection:
    """`selection` with its questions; jobs that ran on other questions than most of its jobs (a tie:
    the newest job's) left out with a note."""
    if not selection.jobs:
        return selection
    keyed = [(job, questions(job)) for job in selection.jobs]
    counts = Counter(q.key for _, q in keyed)
    newest = {q.key: i for i, (_, q) in enumerate(keyed)}
    best = max(counts, key=lambda key: (counts[key], newest[key]))
    chosen = next(q for _, q in keyed if q.key == best)
    notes = [
        f"job {job.name} ({job.run_id}, seed {job.tags.get('lme.seed', '?')}) ran on other questions than the "
        f"other jobs of its run ({q.differs(chosen)}), left out"
        for job, q in keyed if q.key != best
    ]
    return replace(selection, jobs=tuple(job for job, q in keyed if q.key == best),
                   notes=(*selection.notes, *notes), questions=chosen)


def choose_sources(
    runs: Sequence[RunInfo],
    selectors: Sequence[str],
    questions: Callable[[RunInfo], Questions] | None = None,
) -> Chosen:
    """The designs a report covers, in the order named (default: oldest source first).

    With `questions` (a job -> what it ran on) and no selector, only runs made on the same questions
    are compared (see the module's docstring); with selectors, every named run is kept and a
    difference in questions is a note."""
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

    def candidates(design: str) -> list[Selection]:
        """Every run of `design` a report could take, best first: parents newest first, then lone jobs."""
        found = [_design_selection(p, design, children[p.run_id]) for p in reversed(parents)
                 if any(c.design == design and c.status == "FINISHED" for c in children[p.run_id])]
        found += [Selection(design, j, (j,)) for j in reversed(lone) if j.design == design and j.status == "FINISHED"]
        return found

    def by_prefix(name: str) -> RunInfo | None:
        matches = sorted((r for r in runs if r.run_id.startswith(name)), key=lambda r: r.start_time)
        if len(matches) > 1:
            shown = ", ".join(f"{r.name} ({r.run_id})" for r in matches[:10])
            more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
            raise LmeError(f"run id prefix {name!r} is ambiguous: it starts {len(matches)} runs: {shown}{more}.")
        return matches[0] if matches else None

    if not selectors:
        designs = sorted({j.design for j in jobs})
        if questions is None:
            chosen = [s for s in (latest_of_design(d) for d in designs) if s is not None]
            notes: list[str] = []
            common = None
        else:
            chosen, notes, common = _same_questions({d: candidates(d) for d in designs}, questions)
        if not chosen:
            raise LmeError(
                "no finished lme job in this MLflow experiment: run a design first "
                "(python -m lme +design=bm25 -m seed=1,2,3)."
            )
        return Chosen(sorted(chosen, key=lambda s: (s.source.start_time, s.design)), tuple(notes), common)

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
        named = [p for p in parents if names_parent(name, p.name)]  # its name, with or without its stamp
        if named:  # the latest of that name, preferring one with a finished job
            done = [p for p in named if any(c.status == "FINISHED" for c in children[p.run_id])]
            selections += of_parent((done or named)[-1])
            continue
        by_design = latest_of_design(name)
        if by_design is not None:
            selections.append(by_design)
            continue
        run = by_prefix(name)
        if run is not None and run.role == PARENT:
            selections += of_parent(run)
            continue
        if run is not None:
            if run.status != "FINISHED":
                raise LmeError(f"job run {run.name} ({run.run_id}) is {run.status}, not finished.")
            selections.append(Selection(run.design, run, (run,)))
            continue
        known = ", ".join(sorted({j.design for j in jobs})) or "none"
        raise LmeError(
            f"{name!r} is not a design, a parent run id (or a prefix of one) or name, or a job run id in this "
            f"MLflow experiment (designs: {known})."
        )
    unique: dict[tuple[str, str], Selection] = {}
    for selection in selections:  # a run named twice (by id and by design) is reported once
        unique.setdefault((selection.design, selection.source.run_id), selection)
    named = list(unique.values())
    if questions is None:
        return Chosen(named)
    named = [_consistent(s, questions) for s in named]
    keys = {s.questions.key for s in named if s.questions is not None}
    if len(keys) <= 1:
        return Chosen(named, (), named[0].questions if named else None)
    described = "; ".join(f"{s.design} ({s.source.name}): {s.questions.describe()}" for s in named if s.questions)
    note = ("The runs named did not all run on the same questions (" + described + "): each comparison uses the "
            "questions both designs ran, and runs on different data files are not like-for-like.")
    return Chosen(named, (note,), None)


def _same_questions(
    candidates: dict[str, list[Selection]], questions: Callable[[RunInfo], Questions]
) -> tuple[list[Selection], list[str], Questions | None]:
    """For each design, its latest run on the chosen questions: among the questions of the designs'
    latest runs, those the most designs have any run on (a tie: those the most latest runs are on, then
    those of the newest); the runs passed over and the designs left out, with why."""
    checked: dict[tuple[str, str], Selection] = {}

    def check(selection: Selection) -> Selection:
        key = (selection.design, selection.source.run_id)
        if key not in checked:
            checked[key] = _consistent(selection, questions)
        return checked[key]

    latest = {d: check(found[0]) for d, found in candidates.items() if found}
    if not latest:
        return [], [], None
    # the questions of some design's latest run: those the most designs have a run on, then those the
    # most designs' latest runs are on, then those of the newest latest run
    counts = Counter(s.questions.key for s in latest.values() if s.questions is not None)
    newest: dict[tuple, int] = {}
    for s in latest.values():
        if s.questions is not None:
            newest[s.questions.key] = max(newest.get(s.questions.key, 0), s.source.start_time)
    reach = Counter()
    if len(counts) > 1:
        for found in candidates.values():
            reach.update({c.questions.key for c in map(check, found) if c.questions is not None} & set(counts))
    best = max(counts, key=lambda key: (reach[key], counts[key], newest[key]))
    reference = next(s.questions for s in latest.values() if s.questions is not None and s.questions.key == best)
    assert reference is not None
    chosen: list[Selection] = []
    notes: list[str] = []
    for design, found in candidates.items():
        passed: list[Selection] = []
        match = None
        for candidate in found:
            candidate = check(candidate)
            if candidate.questions is not None and candidate.questions.key == best:
                match = candidate
                break
            passed.append(candidate)
        if match is None:
            latest_run = passed[0]
            why = latest_run.questions.differs(reference) if latest_run.questions is not None else "no finished job"
            if len(passed) == 1:
                said = f"its only run, {_run_words(latest_run.source)}, ran on other questions than the report's"
            else:
                said = (f"none of its {len(passed)} runs ran on the report's questions (the latest, "
                        f"{_run_words(latest_run.source)}")
            notes.append(f"Skipped design {design}: {said} ({why}){')' if len(passed) > 1 else ''}.")
            continue
        for skipped in passed:
            why = skipped.questions.differs(reference) if skipped.questions is not None else "no finished job"
            notes.append(
                f"Skipped {_run_words(skipped.source)} of design {design}: it ran on other questions than the "
                f"report's ({why}); its latest run on them, {_run_words(match.source)}, is reported instead."
            )
        chosen.append(match)
    return chosen, notes, reference


def labels_for(selections: Sequence[Selection]) -> list[str]:
    """Design names, made unique with the source run's name (then its id) when a design repeats."""
    designs = [s.design for s in selections]
    labels = [f"{s.design}@{s.source.name}" if designs.count(s.design) > 1 else s.design for s in selections]
    repeated = {label for label in labels if labels.count(label) > 1}
    return [f"{s.design}@{s.source.run_id[:8]}" if label in repeated else label for s, label in zip(selections, labels)]


# --- the tracking store -------------------------------------------------------------------------


def _client(settings: TrackingSettings):
    """A client of the store the report reads: one that does not exist, or cannot be opened, is one sentence
    (`lme.tracking.runs.client_for` with `create=False`: a mistyped path never makes a new, empty store)."""
    from lme.tracking.runs import client_for

    return client_for(settings, create=False)


def _experiment_id(client: Any, settings: TrackingSettings) -> str:
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        raise LmeError(
            f"tracking store {settings.uri} has no MLflow experiment {settings.experiment!r}; run a design first."
        )
    return experiment.experiment_id


def list_runs(settings: TrackingSettings) -> list[RunInfo]:
    """Every parent and job run of the experiment (all pages)."""
    from lme.tracking.runs import store_failure

    client = _client(settings)
    try:
        experiment = _experiment_id(client, settings)
    except LmeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store damaged past its first page: one sentence naming it
        raise store_failure(settings, exc) from None
    runs: list[RunInfo] = []
    token = None
    while True:
        try:
            page = client.search_runs([experiment], max_results=5000, page_token=token)
        except Exception as exc:  # noqa: BLE001 - as above
            raise store_failure(settings, exc) from None
        for run in page:
            if run.data.tags.get("lme.role") not in (PARENT, JOB):
                continue
            runs.append(RunInfo(run.info.run_id, run.info.run_name or run.info.run_id, run.info.status,
                                run.info.start_time or 0, dict(run.data.tags), dict(run.data.params)))
        token = page.token
        if not token:
            return runs


def read_artifact_text(settings: TrackingSettings, run_id: str, artifact_path: str) -> str | None:
    """A run's text artifact, or None when it logged none (an older lme); `LmeError` (one sentence naming the run
    and the artifact) when it is there but cannot be read or is not UTF-8 text."""
    from lme.tracking.runs import artifact_place, read_artifact_bytes

    data = read_artifact_bytes(settings, run_id, artifact_path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LmeError(f"{artifact_place(settings, run_id, artifact_path)}: the {artifact_path} artifact of MLflow run "
                       f"{run_id} is not UTF-8 text (byte {exc.start}); restore it or rerun the job.") from None


QUESTION_IDS_ARTIFACT = "question_ids.txt"
CONFIG_ARTIFACT = "config.yaml"  # the job's resolved config (`lme.study.job.run_job` logs it)


def prereg_path_of(config_yaml: str | None) -> str | None:
    """The `prereg` value (the record's path, as the run was given it) of a job's logged config, if any."""
    if not config_yaml:
        return None
    import yaml

    try:
        config = yaml.safe_load(config_yaml)
    except yaml.YAMLError:
        return None
    value = config.get("prereg") if isinstance(config, dict) else None
    return str(value) if value else None


@dataclass(frozen=True)
class Sources:
    """What `lme report` reads: the designs with their outcome rows, and the notes on runs left out."""

    designs: list[DesignRuns]
    notes: tuple[str, ...] = ()
    runs: tuple[RunInfo, ...] = ()  # every parent and job run of the experiment (for the preregistration facts)
    prereg_paths: dict[str, str] = field(default_factory=dict)  # record digest -> `prereg` of a job's config.yaml


def load_sources(settings: TrackingSettings, selectors: Sequence[str]) -> Sources:
    """The selected designs with every finished job's outcome rows (the `outcomes.jsonl` artifacts),
    compared on the same questions (see the module's docstring)."""
    from lme.tracking.runs import read_outcome_rows

    rows_of: dict[str, list[dict[str, Any]] | None] = {}

    def rows(job: RunInfo) -> list[dict[str, Any]] | None:
        if job.run_id not in rows_of:  # a finished job's outcomes, whole, or one sentence naming the run
            rows_of[job.run_id] = read_outcome_rows(settings, job.run_id, job=job.name,
                                                    n_questions=job.params.get("n_questions"))
        return rows_of[job.run_id]

    def questions(job: RunInfo) -> Questions:
        text = read_artifact_text(settings, job.run_id, QUESTION_IDS_ARTIFACT)
        ids = None if text is None else frozenset(line.strip() for line in text.splitlines() if line.strip())
        return Questions(job.params.get("dataset.sha256"), ids, job.params.get("dataset.name"))

    runs = list_runs(settings)
    chosen = choose_sources(runs, selectors, questions)
    prereg_paths: dict[str, str] = {}
    designs = []
    for label, selection in zip(labels_for(chosen.selections), chosen.selections):
        jobs, notes = [], list(selection.notes)
        for job in selection.jobs:
            job_rows = rows(job)
            if job_rows is None:
                notes.append(f"job {job.name} ({job.run_id}) logged no outcomes.jsonl, left out")
                continue
            jobs.append(JobOutcomes(
                run_id=job.run_id,
                run_name=job.name,
                seed=job.tags.get("lme.seed", "?"),
                judge=job.tags.get("lme.judge", "unknown judge"),
                judge_official=job.tags.get("lme.judge_official", "false") == "true",
                rows=tuple(job_rows),
                prereg_sha256=job.tags.get("lme.prereg_sha256"),
                stand_ins=tuple(model for model in (job.params.get("reader.model"), job.params.get("judge.model"))
                                if model and model.startswith(OFFLINE_PROVIDER + "/")),
                judge_model=job.params.get("judge.model") or None,
            ))
            digest = job.tags.get("lme.prereg_sha256")
            if digest and digest not in prereg_paths:
                named = prereg_path_of(read_artifact_text(settings, job.run_id, CONFIG_ARTIFACT))
                if named:
                    prereg_paths[digest] = named
        q = selection.questions
        designs.append(DesignRuns(label, selection.design, selection.source.run_id, selection.source.name,
                                  tuple(jobs), tuple(notes), data=q.describe() if q else None,
                                  questions_digest=q.digest if q else None))
    return Sources(designs, chosen.notes, tuple(runs), prereg_paths)


def load_designs(settings: TrackingSettings, selectors: Sequence[str]) -> list[DesignRuns]:
    """The selected designs with every finished job's outcome rows (`load_sources` without its notes)."""
    return load_sources(settings, selectors).designs
