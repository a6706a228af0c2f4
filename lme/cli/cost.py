"""`python -m lme cost`: what a study has spent, from its jobs' folders and its ledger.

    python -m lme cost [FOLDER ...] [--ledger FILE ...] [--study NAME] [--json] [overrides]

A job folder is a folder holding `outcomes.jsonl` (the job's journal) and Hydra's `.hydra/`; every job
folder under the FOLDERs (default: `multirun/` and `outputs/`) counts, whatever became of its design
(discarded designs, designs whose file is gone). Its files are checked as they are read (the journal row by
row, as a resume reads it; `.hydra/config.yaml`, `hydra.yaml` and `overrides.yaml` with lme's safe YAML
reader and their shapes): a fault in any of them (not UTF-8, not YAML, an alias, a row of the wrong shape,
a directory or an unreadable file in its place; a Hydra file that is empty, ends mid-line or lacks a key
Hydra writes for every lme job, which is a write cut short whose values cannot be trusted; overrides that
are not Hydra's syntax or not those `hydra.yaml` records) stops the command with one sentence naming the
file and line, exit 2, and nothing is written; fix the file or move that folder out of the FOLDERs. A job folder
without `.hydra/` still counts, its paid calls under the jobs of no folder (a note says so). Its journal gives, per question and step, the reader's,
the judge's and a model-built memory's calls, those served from the call cache, tokens and dollars. Its ledger (the SQLite file
of `budget.ledger_path`, shared by every job of a study; read from the job's own config) holds one row per
paid call, written under the job's name (`budget.job`, else its output folder); the arbiter's calls are
written as `arbiter:DESIGN`.

Per design: jobs, reader and judge calls (and memory-model calls, when a design has a model-built memory),
calls served from the cache and what they cost when they were
first paid (the price the cache recorded), the paid calls with their tokens and dollars (the ledger's
rows), and a total line. Paid dollars are the ledger's: a paid call at its cost, an interrupted call
(sent when its process died, maybe billed) at its reserved maximum, a failed call at nothing, exactly as
the ledger counts them against the caps. Rows of the ledger whose job is no folder under FOLDERs (a
folder deleted or elsewhere) are a line of their own, so the total is every row of the ledger(s). A
design whose journals record less paid spending than its ledger rows (questions that were re-asked on
resume, billed failures, calls of unfinished jobs) is named with the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lme.cli.parser import make_parser
from lme.util.errors import LmeError
from lme.models.ledger import counted_dollars, read_rows

DEFAULT_FOLDERS = ("multirun", "outputs")
JOURNAL = "outcomes.jsonl"
ARBITER_PREFIX = "arbiter:"
OTHER = "(jobs not under these folders)"
_EPSILON = 1e-9


# --- what a job folder says ---------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFolder:
    path: Path
    design: str
    seed: str
    ledger: Path | None  # None when the job's config does not say where its ledger is
    ledger_job: str  # the job's name in the ledger
    study: str | None
    rows: tuple[Mapping[str, Any], ...]


_RESTORE = "restore the job folder's .hydra/ files or move the folder out of the folders lme cost reads."


def _hydra_file(path: Path, shape: type) -> Any:
    """One of Hydra's files in a job's `.hydra/` (read safely: `lme.util.yamlfile.read_yaml`), or None when it is
    absent; `LmeError` naming it when it cannot be read, is not YAML lme can read, is empty or ends mid-line
    (Hydra writes every one of them whole, each line ended: an empty one or one cut short is a write that
    failed, whose values cannot be trusted), or is not of `shape` (a mapping for config.yaml and hydra.yaml,
    a list for overrides.yaml)."""
    from lme.util.yamlfile import read_yaml

    if not os.path.lexists(path):
        return None
    data = read_yaml(path)
    if data is None:  # empty, or nothing but blanks and comments: Hydra writes `[]` even for no overrides
        raise LmeError(f"{path}: empty, which Hydra never writes (a write that failed, a full disk?); {_RESTORE}")
    if not isinstance(data, shape):
        kind = "a mapping" if shape is dict else "a list"
        raise LmeError(f"{path}: {kind} is expected (Hydra writes one), found {type(data).__name__}; {_RESTORE}")
    try:
        with path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            last = handle.read(1)
    except OSError as exc:
        raise LmeError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__}); check the file and its "
                       "permissions.") from None
    if last != b"\n":  # a value cut mid-line still parses, as another value (a path, a name cut short)
        raise LmeError(f"{path}: ends mid-line, cut short (Hydra ends every line it writes); {_RESTORE}")
    return data


def _require(data: dict[str, Any], keys: Sequence[str], path: Path) -> None:
    """`LmeError` naming the file and the first of `keys` (dotted) that it lacks: Hydra writes them all, so a
    file without one was cut short or is not Hydra's."""
    for dotted in keys:
        node: Any = data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise LmeError(f"{path}: has no {dotted}, which Hydra writes for every lme job (a file cut short?); "
                               f"{_RESTORE}")
            node = node[part]


# Hydra's override syntax, as far as lme cost needs it: `key=value`, `+key=value`, `++key=value`, `~key`,
# `~key=value`, `group@package=option` (a key: letters, digits, `_`, `-`, `.`, `/`, `@`, `$`).
_OVERRIDE = re.compile(r"(?:~[\w.\-/@$]+(?:=.*)?|(?:\+\+|\+)?[\w.\-/@$]+=.*)", re.DOTALL)


def _overrides(data: list[Any], path: Path, recorded: Any) -> list[str]:
    """The job's overrides from overrides.yaml: each a plain value of Hydra's override syntax, and the same
    list as hydra.yaml's `hydra.overrides.task` when that file records it (Hydra writes both from one list);
    `LmeError` naming overrides.yaml otherwise."""
    overrides = [str(_scalar(item, "an override", path)) for item in data]
    for item in overrides:
        if not _OVERRIDE.fullmatch(item):
            raise LmeError(f"{path}: {item[:80]!r} is not a Hydra override (key=value); {_RESTORE}")
    if isinstance(recorded, list) and [str(item) for item in recorded] != overrides:
        raise LmeError(f"{path}: its {len(overrides)} override(s) differ from the {len(recorded)} that "
                       f"hydra.yaml records for the job (hydra.overrides.task); {_RESTORE}")
    return overrides


def _mapping(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    """`data[key]` when it is a mapping, {} when absent or null; `LmeError` naming the file otherwise."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LmeError(f"{path}: {key} is {type(value).__name__}, not a mapping as Hydra writes it; {_RESTORE}")
    return value


def _scalar(value: Any, key: str, path: Path) -> Any:
    """A config value that should be plain (text, a number, null); `LmeError` naming the file for a list or a
    mapping."""
    if isinstance(value, (dict, list)):
        raise LmeError(f"{path}: {key} is {type(value).__name__}, not a single value; {_RESTORE}")
    return value


def _resolved(path: Path) -> Path:
    """`path` made absolute, its links resolved where they can be (a loop of links: as written)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _plain(value: Any) -> str | None:
    """A config value that needs no resolving (no `${...}` interpolation), as text; else None."""
    if value is None:
        return None
    text = str(value)
    return None if "${" in text else text


_LEDGER_KEYS = ("cache_dir", "budget")


def _ledger_overrides(overrides: Sequence[str]) -> tuple[str, ...]:
    """The job's overrides that can move its ledger (`cache_dir=`, `budget.*`), for composing its ledger path."""
    kept = []
    for override in overrides:
        key = str(override).split("=", 1)[0].lstrip("+~")
        if key.split(".", 1)[0] in _LEDGER_KEYS:
            kept.append(str(override))
    return tuple(kept)


class _Composer:
    """`budget.ledger_path` as a run with these overrides composes it (memoised)."""

    def __init__(self) -> None:
        self.done: dict[tuple[str, ...], tuple[Path, str]] = {}

    def __call__(self, overrides: tuple[str, ...]) -> tuple[Path, str]:
        if overrides not in self.done:
            from lme.config.design import compose_design

            design = compose_design(list(overrides))
            self.done[overrides] = (design.ledger_path, design.study)
        return self.done[overrides]


def read_job(path: Path, compose: _Composer) -> JobFolder:
    """One job folder: its design, seed, ledger and name in it (from `.hydra/`), and its journal's rows.
    Every file is checked as it is read: a fault in any of them is one `LmeError` naming the file."""
    from lme.answer.run import Journal

    hydra = path / ".hydra"
    config_path, hydra_path, overrides_path = hydra / "config.yaml", hydra / "hydra.yaml", hydra / "overrides.yaml"
    config = _hydra_file(config_path, dict)
    hydra_data = _hydra_file(hydra_path, dict)
    hydra_node = _mapping(hydra_data or {}, "hydra", hydra_path)
    runtime = _mapping(hydra_node, "runtime", hydra_path)
    recorded = _mapping(hydra_node, "overrides", hydra_path).get("task")
    if recorded is not None and not isinstance(recorded, list):
        raise LmeError(f"{hydra_path}: hydra.overrides.task is {type(recorded).__name__}, not a list as Hydra "
                       f"writes it; {_RESTORE}")
    overrides_data = _hydra_file(overrides_path, list)
    overrides = [] if overrides_data is None else _overrides(overrides_data, overrides_path, recorded)
    budget = _mapping(config or {}, "budget", config_path)
    for key in ("ledger_path", "study", "job"):
        _scalar(budget.get(key), f"budget.{key}", config_path)
    for key in ("cache_dir", "design_name", "seed"):
        _scalar((config or {}).get(key), key, config_path)
    for key in ("cwd", "output_dir"):
        _scalar(runtime.get(key), f"hydra.runtime.{key}", hydra_path)
    if config is not None:  # what cost reads of it, which every lme job's config holds
        _require(config, ("design_name", "seed", "cache_dir", "budget.ledger_path"), config_path)
    if hydra_data is not None:
        _require(hydra_data, ("hydra.runtime.cwd", "hydra.runtime.output_dir"), hydra_path)
    config = config or {}
    cwd = Path(str(runtime.get("cwd") or "."))
    ledger: Path | None = None
    study = _plain(budget.get("study"))
    raw, cache_dir = budget.get("ledger_path"), _plain(config.get("cache_dir"))
    substituted = None if raw is None or cache_dir is None else str(raw).replace("${cache_dir}", cache_dir)
    if _plain(raw):
        ledger = Path(str(raw))
    elif substituted is not None and "${" not in substituted:  # the default, `${cache_dir}/ledger.sqlite`
        ledger = Path(substituted)
    elif config:
        try:
            composed, composed_study = compose(_ledger_overrides(overrides))
        except LmeError:
            composed, composed_study = None, None
        ledger, study = composed, study or composed_study
    if ledger is not None:
        try:
            ledger = ledger.expanduser()
        except RuntimeError:  # `~user` of no user here: the path as written
            pass
        ledger = ledger if ledger.is_absolute() else cwd / ledger
    name = _plain(budget.get("job")) or str(_resolved(Path(str(runtime.get("output_dir") or path))))
    rows = tuple(asdict(outcome) for outcome in Journal(path / JOURNAL).read())
    return JobFolder(path=path, design=str(config.get("design_name") or _design_from_path(path)),
                     seed=str(config.get("seed", "?")), ledger=ledger, ledger_job=name, study=study, rows=rows)


def _design_from_path(path: Path) -> str:
    """`multirun/DESIGN/TIME/N` or `outputs/DESIGN/TIME`: the design's name from the folder, when no config says it."""
    parts = _resolved(path).parts
    for root in DEFAULT_FOLDERS:
        if root in parts:
            index = len(parts) - 1 - parts[::-1].index(root)
            if index + 1 < len(parts):
                return parts[index + 1]
    return "default"


def find_jobs(folders: Sequence[Path]) -> list[Path]:
    """Every job folder under `folders`, sorted: a folder holding an entry named outcomes.jsonl, whatever it is
    (a journal that is a directory, a broken link or a loop of links is the job's fault, said by `read_job`).
    Links to folders are not followed."""
    found: set[Path] = set()
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            if JOURNAL in dirs or JOURNAL in files:
                found.add(Path(root))
            dirs[:] = [name for name in dirs if name != JOURNAL]  # not what lies inside a journal's place
    return sorted(found)


# --- the ledger's rows ------------------------------------------------------------------------------


# --- the totals ----------------------------------------------------------------------------------------


@dataclass
class Spend:
    """One line of the table."""

    name: str
    jobs: int = 0
    seeds: list[str] = field(default_factory=list)
    reader_calls: int = 0
    judge_calls: int = 0
    memory_calls: int = 0  # a model-built memory's calls (journals of format 3)
    cached_calls: int = 0  # reader, judge and memory-model calls served from the call cache
    cached_original_usd: float = 0.0  # what those cost when first paid (the price the cache recorded)
    journal_spent_usd: float = 0.0  # paid, as the journals record it
    list_usd: float = 0.0  # the journals' calls at list price, cache hits included
    paid_calls: int = 0  # ledger rows: paid
    interrupted_calls: int = 0
    failed_calls: int = 0
    arbiter_calls: int = 0  # ledger rows written by the design's arbiter
    input_tokens: int = 0  # ledger rows' tokens (paid calls)
    cached_input_tokens: int = 0
    output_tokens: int = 0
    paid_usd: float = 0.0  # the ledger's dollars (interrupted calls at their reserved maximum)
    unpriced_calls: int = 0  # paid rows without a price: the dollars are a lower bound
    ledger_jobs: set[str] = field(default_factory=set)

    def add_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        from lme.reporting.measures import row_call_totals

        for row in rows:
            for part in ("reader", "judge", "memory"):
                totals = row_call_totals(row, part)
                name = f"{part}_calls"
                setattr(self, name, getattr(self, name) + int(totals["calls"]))
                self.cached_calls += int(totals["cached_calls"])
                self.cached_original_usd += totals["cost_usd"] - totals["spent_usd"]
                self.journal_spent_usd += totals["spent_usd"]
                self.list_usd += totals["cost_usd"]

    def add_ledger(self, row: Mapping[str, Any]) -> None:
        status = row.get("status")
        if status == "paid":
            self.paid_calls += 1
            if row.get("dollars") is None:
                self.unpriced_calls += 1
        elif status == "interrupted":
            self.interrupted_calls += 1
        else:
            self.failed_calls += 1
        if str(row.get("job", "")).startswith(ARBITER_PREFIX):
            self.arbiter_calls += 1
        self.input_tokens += int(row.get("input_tokens") or 0)
        self.cached_input_tokens += int(row.get("cached_input_tokens") or 0)
        self.output_tokens += int(row.get("output_tokens") or 0)
        self.paid_usd += counted_dollars(row)
        self.ledger_jobs.add(str(row.get("job")))

    def absorb(self, other: Spend) -> None:
        for name, value in vars(other).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(self, name, getattr(self, name) + value)
        self.ledger_jobs |= other.ledger_jobs


@dataclass
class StudySpend:
    designs: list[Spend]
    other: Spend | None  # ledger rows of jobs that are no folder under the folders given
    total: Spend
    ledgers: list[tuple[str, int]]  # (path, rows read)
    folders: list[str]
    notes: list[str]


def study_spend(folders: Sequence[Path], ledgers: Sequence[Path] = (), study: str | None = None,
                compose: _Composer | None = None) -> StudySpend:
    """Every job folder under `folders` and every row of their ledgers (and of `ledgers`), per design."""
    compose = compose or _Composer()
    jobs = [read_job(path, compose) for path in find_jobs(folders)]
    notes: list[str] = []
    files: list[Path] = []
    for path in [*ledgers, *(job.ledger for job in jobs if job.ledger is not None)]:
        resolved = _resolved(path)
        if resolved not in files:
            files.append(resolved)
    for path in ledgers:
        if not os.path.lexists(path):
            raise LmeError(f"{path}: no ledger file there (--ledger).")
    rows: list[dict[str, Any]] = []
    read: list[tuple[str, int]] = []
    for path in files:
        if not os.path.lexists(path):  # a directory, a broken link or a link loop there: read_rows says which
            users = sum(1 for job in jobs if job.ledger is not None and _resolved(job.ledger) == path)
            notes.append(f"the ledger {path} of {users} job(s) does not exist (no paid call was made, or it was "
                         "moved: pass --ledger FILE)")
            continue
        found = [row for row in read_rows(path) if study is None or row.get("study") == study]
        read.append((str(path), len(found)))
        rows += [{**row, "_ledger": str(path)} for row in found]
    unknown = [job for job in jobs if job.ledger is None]
    if unknown:
        notes.append(f"{len(unknown)} job folder(s) do not say where their ledger is (no .hydra/config.yaml): "
                     "their paid calls are counted under " + OTHER)

    by_design: dict[str, Spend] = {}
    owner: dict[tuple[str, str], Spend] = {}  # (ledger file, job name) -> the design's line
    for job in jobs:
        spend = by_design.setdefault(job.design, Spend(job.design))
        spend.jobs += 1
        spend.seeds.append(job.seed)
        spend.add_rows(job.rows)
        if job.ledger is not None:
            key = (str(_resolved(job.ledger)), job.ledger_job)
            if key in owner and owner[key] is not spend:
                notes.append(f"job folders of designs {owner[key].name} and {job.design} share the ledger job name "
                             f"{job.ledger_job!r} (budget.job): its rows are counted under {owner[key].name}")
            owner.setdefault(key, spend)
    other = Spend(OTHER)
    for row in rows:
        job_name = str(row.get("job"))
        spend = owner.get((row["_ledger"], job_name))
        if spend is None and job_name.startswith(ARBITER_PREFIX):
            spend = by_design.get(job_name[len(ARBITER_PREFIX):])
        (spend or other).add_ledger(row)
    other.jobs = len(other.ledger_jobs)
    for spend in by_design.values():
        gap = spend.paid_usd - spend.journal_spent_usd
        if gap > _EPSILON and spend.paid_usd - spend.journal_spent_usd > _EPSILON * max(1.0, spend.paid_usd):
            notes.append(
                f"design {spend.name}: its ledger rows count ${gap:,.4f} more than its journals record as paid "
                "(questions re-asked on resume, billed failed or interrupted calls, arbiter calls, calls of unfinished "
                "questions)"
            )
    total = Spend("total")
    designs = sorted(by_design.values(), key=lambda s: s.name)
    for spend in [*designs, other]:
        total.absorb(spend)
    total.jobs = sum(s.jobs for s in designs) + other.jobs
    return StudySpend(designs, other if other.ledger_jobs else None, total, read, [str(f) for f in folders], notes)


# --- output --------------------------------------------------------------------------------------------


def _usd(value: float) -> str:
    return f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"


HEADER = ["design", "jobs", "reader calls", "judge calls", "from cache: calls", "from cache: first paid",
          "paid calls", "input tokens (paid)", "output tokens (paid)", "paid"]
MEMORY_COLUMN = "memory-model calls"  # after the judge's, when a design has a model-built memory


def _line(spend: Spend, journals: bool = True, memory: bool = False) -> list[str]:
    paid = str(spend.paid_calls) + (f" (+{spend.interrupted_calls} interrupted)" if spend.interrupted_calls else "")
    if journals:
        cells = [str(spend.reader_calls), str(spend.judge_calls), *([str(spend.memory_calls)] if memory else []),
                 str(spend.cached_calls), _usd(spend.cached_original_usd)]
    else:
        cells = ["-"] * (5 if memory else 4)
    return [spend.name, str(spend.jobs), *cells, paid, f"{spend.input_tokens:,}", f"{spend.output_tokens:,}",
            _usd(spend.paid_usd)]


COST_NOTE = (
    "Calls and cache hits are the journals' (every step of every question: reader, judge and a model-built "
    "memory's calls); paid calls, their "
    "tokens and dollars are the ledger's rows (an interrupted call at its reserved maximum, a failed one at nothing, "
    "as the caps count them). A call served from the call cache cost nothing now; \"first paid\" is what it cost "
    "when it was paid (the price the cache recorded with the response). The total is every row of the ledger(s), "
    "designs no longer in use included."
)


def render(spend: StudySpend) -> str:
    memory = spend.total.memory_calls > 0
    rows = [_line(s, memory=memory) for s in spend.designs]
    if spend.other is not None:
        rows.append(_line(spend.other, journals=False, memory=memory))
    rows.append(_line(spend.total, memory=memory))
    header = [*HEADER[:4], MEMORY_COLUMN, *HEADER[4:]] if memory else HEADER
    lines = ["# lme cost", ""]
    ledgers = "; ".join(f"{path} ({n} rows)" for path, n in spend.ledgers) or "none found"
    lines.append(f"- Job folders under {', '.join(spend.folders)}: {spend.total.jobs - (spend.other.jobs if spend.other else 0)}.")
    lines.append(f"- Ledgers: {ledgers}.")
    lines += [f"- Note: {note}." for note in spend.notes]
    unpriced = spend.total.unpriced_calls
    if unpriced:
        lines.append(f"- {unpriced} paid call(s) have no price: the dollars are a lower bound.")
    lines += ["", "| " + " | ".join(header) + " |", "|---|" + "--:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    t = spend.total
    lines += ["", f"Total spent: {_usd(t.paid_usd)} over {t.paid_calls + t.interrupted_calls} paid call(s)"
              f"{f' ({t.interrupted_calls} interrupted)' if t.interrupted_calls else ''}; "
              f"{t.cached_calls} call(s) from the cache, first paid {_usd(t.cached_original_usd)}.", "", COST_NOTE]
    return "\n".join(lines) + "\n"


def as_json(spend: StudySpend) -> dict[str, Any]:
    def one(s: Spend) -> dict[str, Any]:
        data = asdict(s)
        data["ledger_jobs"] = sorted(s.ledger_jobs)
        return data

    return {
        "folders": spend.folders,
        "ledgers": [{"path": path, "rows": n} for path, n in spend.ledgers],
        "designs": [one(s) for s in spend.designs],
        "other": one(spend.other) if spend.other is not None else None,
        "total": one(spend.total),
        "notes": spend.notes,
    }


def _parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "python -m lme cost",
        "A study's total spend from its job folders and ledger: per design, jobs, reader and judge calls, calls "
        "from the cache (and what they first cost), paid calls, tokens and dollars, and the total, discarded "
        "designs included. Other key=value arguments are config overrides (cache_dir=..., budget.ledger_path=...) "
        "naming the ledger a run here would use. A job folder is one holding outcomes.jsonl; a fault in its "
        "journal or .hydra/ files stops the command with one sentence naming the file (exit 2): fix it or move the "
        "folder away.",
    )
    parser.add_argument("folders", nargs="*", type=Path, metavar="FOLDER",
                        help=f"job folders or folders holding them (default: {', '.join(DEFAULT_FOLDERS)})")
    parser.add_argument("--ledger", action="append", type=Path, default=[], metavar="FILE",
                        help="a ledger file to read as well (default: each job's own, and the one the overrides name)")
    parser.add_argument("--study", metavar="NAME", help="only the ledger rows of this study (budget.study)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of Markdown")
    return parser


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides

    overrides, rest = split_overrides(argv)
    args = _parser().parse_args(rest)
    folders = list(args.folders)
    if folders:
        for folder in folders:
            if not folder.is_dir():
                raise LmeError(f"{folder}: no such folder.")
    else:
        folders = [Path(name) for name in DEFAULT_FOLDERS if Path(name).is_dir()]
        if not folders:
            raise LmeError(f"no {' or '.join(DEFAULT_FOLDERS)} folder here: run a design first, or name the folders "
                           "holding the job folders.")
    compose = _Composer()
    ledgers = list(args.ledger)
    try:
        here, _ = compose(tuple(overrides))
    except LmeError:
        if overrides:
            raise
        here = None
    if here is not None and os.path.lexists(here) and _resolved(here) not in [_resolved(p) for p in ledgers]:
        ledgers.append(here)
    spend = study_spend(folders, ledgers, args.study, compose)
    if not spend.designs and spend.other is None:
        raise LmeError(f"no job folder (with {JOURNAL}) under {', '.join(str(f) for f in folders)} and no ledger row.")
    print(json.dumps(as_json(spend), indent=2, sort_keys=True) if args.json else render(spend), end="" if not args.json
          else "\n", flush=True)
    return 0
