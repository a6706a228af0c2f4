"""Preregistration: freeze a composed design into a record; verify a run against it.

    python -m lme prereg freeze [--out prereg/NAME.yaml] [--seeds 1,2,3] [--primary MEASURE]
                                [--compare DESIGN:BASELINE ...] [--force] [overrides]
    python -m lme prereg verify RECORD [--seeds ...] [--primary ...] [--compare ...] [overrides]

`freeze` composes the config exactly as a run with the same overrides would
(`lme.config.design.compose_design`), loads the selected questions (`lme.questions.load_dataset`)
and writes a YAML record (see `build_record` for its fields). `verify`
recomputes the record from the overrides given (the record's own overrides when
none are given) and prints `matches` or every difference. A run whose config
sets `prereg=RECORD` calls `check_run` in every job before any model call and
refuses to start on any blocking difference; its MLflow run is tagged
`lme.prereg_sha256` (the record's digest) and, always, `lme.design_sha256`.

What blocks: the canonical design (every key but the run-only ones below), the
judge templates' digests, the data file's SHA-256 and the selected question ids,
the plan (seeds, primary measure, comparisons; a run's seed must be a planned
one), the code (SHA-256 of every file under `lme/` and `conf/`) and the
versions of lme, litellm, hydra-core and sentence-transformers. Reported but
not blocking (`NOTE_KEYS`): the git commit and dirty flag (committing the
record itself changes both; the file digests are the real check; the record's
own file and folder never count as a change to the tree), the data
file's path (its digest is compared), the overrides as typed (their result is
compared) and mlflow's version (it only records). The time is recorded, never
compared.

Reading a record (`load_record`, for `verify`, the run's check and the report) goes through `lme.util.yamlfile`
(no alias, no nesting past 64 levels, 16 MB at most, UTF-8) and `check_record`: the digest first (a record
cut short or edited is "truncated or edited", before any field is used), then the format, then every
field's type as `build_record` writes it (`_SHAPE`; a record edited and resealed with `seal` is refused
naming the field), then that it holds no secret. Each refusal is one `LmeError` naming the file. Writing
one (`write_record`) refuses a record holding a key-shaped value, a URL credential or a secret-named value
(`lme.util.secrets`, the run's rules) or one that would not read back as itself, and writes it whole or not at
all (`lme.util.files.write_text_atomic`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from lme import PACKAGE_DIR, config_root
from lme.util import code_version as provenance
from lme.config.design import RUN_ONLY_LEAVES, RUN_ONLY_PATHS, Design, canonical_design  # noqa: F401  (also imported from here)
from lme.util.errors import LmeError
from lme.util.hashing import canonical_json, file_sha256, file_sha256_known, sha256_bytes, sha256_json, sha256_text  # noqa: F401

FORMAT = 1

PACKAGES: tuple[str, ...] = ("lme", "litellm", "mlflow", "hydra-core", "sentence-transformers")
# Differences under these keys are reported but do not stop a run.
NOTE_KEYS: tuple[str, ...] = ("code.git_commit", "code.git_dirty", "data.path", "overrides", "packages.mlflow")
# Derived from other fields (compared there) or never compared.
_NOT_COMPARED: tuple[str, ...] = ("record_sha256", "created", "name", "design_sha256", "digests", "models",
                                  "data.question_ids_sha256", "data.n_questions", "code.source_sha256")
_SECTION_ORDER: tuple[str, ...] = ("record_sha256", "lme_prereg", "design", "judge_templates", "data", "plan",
                                   "seed", "packages", "code")

RUN_MEASURES: tuple[str, ...] = ("accuracy", "task_averaged_accuracy", "abstention_accuracy")
ACROSS_RUN_MEASURES: tuple[str, ...] = ("mean_accuracy", "majority_correct_accuracy")
DEFAULT_PRIMARY = "majority_correct_accuracy"
DEFAULT_SEEDS: tuple[int, ...] = (1, 2, 3)


# ---------------------------------------------------------------- digests


def text_digests(design: Mapping[str, Any]) -> dict[str, str]:
    """SHA-256 of every instruction text, paragraph, composed instruction, rule (whole and trigger) and view."""
    from lme.answer.reader import compose_instruction

    digests: dict[str, str] = {}
    instructions = design.get("instructions") or {}

    def texts(node: Any, prefix: str) -> None:
        if isinstance(node, str):
            digests[prefix] = sha256_text(node)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                texts(value, f"{prefix}.{key}")

    texts(instructions, "instructions")
    has_base = isinstance(instructions, Mapping) and "base" in instructions
    base = str(instructions["base"]) if has_base else ""
    paragraphs = (instructions.get("paragraphs") or {}) if has_base else {}
    if has_base:  # the composed instructions: base + the step's paragraphs (lme.answer.rules)
        digests["instruction.first_pass"] = sha256_text(
            compose_instruction(base, paragraphs, instructions.get("first_pass") or [])
        )
    rules = design.get("rules")
    if isinstance(rules, Mapping):
        if "order" in rules:
            digests["rules.order"] = sha256_json(rules["order"])
        if rules.get("routes") is not None:  # routed instructions: the question rules choosing the first pass's
            digests["rules.routes"] = sha256_json(rules["routes"])
        definitions = rules.get("definitions") or {}
        for name, definition in definitions.items():
            digests[f"rules.definitions.{name}"] = sha256_json(definition)
            if isinstance(definition, Mapping):
                trigger = {key: definition[key] for key in ("on", "patterns", "exclude") if key in definition}
                digests[f"rules.definitions.{name}.trigger"] = sha256_json(trigger)
                if has_base and isinstance(definition.get("paragraphs"), list):
                    digests[f"instruction.{name}"] = sha256_text(
                        compose_instruction(base, paragraphs, definition["paragraphs"])
                    )
    for where in ("memory", "arbiter", "arbiter.memory"):  # a model-built memory's instruction; a cross-run stage
        node: Any = design
        for part in where.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            continue
        if isinstance(node.get("instruction"), str):
            digests[f"{where}.instruction"] = sha256_text(node["instruction"])
        if where == "arbiter":
            if node.get("select") is not None:
                digests["arbiter.select"] = sha256_json(node["select"])
            if has_base and isinstance(node.get("paragraphs"), list):
                digests[f"instruction.{node.get('name') or 'arbiter'}"] = sha256_text(
                    compose_instruction(base, paragraphs, node["paragraphs"]))
    view = design.get("view")
    if view is not None:
        digests["view"] = sha256_json(view)
        if isinstance(view, Mapping) and "_target_" not in view:
            for name, node in view.items():
                digests[f"view.{name}"] = sha256_json(node)
    return dict(sorted(digests.items()))


def code_version(package_dir: Path = PACKAGE_DIR, ignore: Sequence[Path | str] = ()) -> dict[str, Any]:
    """Git commit and dirty flag of the checkout holding `package_dir` (null outside git), and the
    SHA-256 of every file under it (`__pycache__` and `.pyc` left out) and of every config under the
    config root (`lme.config_root`). Configs are named as a wheel installs them, `lme/conf/...`, also
    in a checkout, where they are in `conf/` at the top: a record frozen in a checkout verifies
    against a wheel install of the same code.

    `ignore`: preregistration records (the one being frozen or verified). Neither the file nor the
    folder holding it (unless that folder is the checkout's top or holds the package) makes the tree
    dirty, so freezing a record into the repository does not by itself turn `verify`'s git state
    from clean to dirty."""
    root = package_dir.parent
    trees = [(package_dir, PurePosixPath(package_dir.name))]
    conf = config_root(package_dir)
    if conf != package_dir / "conf":  # a checkout: conf/ at the top
        trees.append((conf, PurePosixPath(package_dir.name, "conf")))
    found = {name / path.relative_to(tree).as_posix(): path for tree, name in trees for path in tree.rglob("*")
             if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}
    files = {key.as_posix(): sha256_bytes(found[key].read_bytes()) for key in sorted(found)}

    top = provenance.git(root, "rev-parse", "--show-toplevel")
    excluded = _git_excludes(Path(top.strip()), package_dir, ignore) if top and top.strip() else []
    commit, dirty = provenance.git_state(root, excluded)
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "source_sha256": sha256_json(files),
        "files": files,
    }


def _git_excludes(top: Path, package_dir: Path, ignore: Sequence[Path | str]) -> list[str]:
    """`git status` pathspecs leaving out each record in `ignore` and the folder holding it (unless
    that folder is `top`, holds the package or the config root or is inside one), relative to the
    checkout's top."""
    top = top.resolve()
    owned = (package_dir.resolve(), config_root(package_dir).resolve())
    excluded: list[str] = []
    for item in ignore:
        path = Path(item).expanduser().resolve()
        for candidate in (path, path.parent):
            if candidate == top or any(candidate == own or candidate in own.parents or own in candidate.parents
                                       for own in owned):
                continue
            try:
                relative = candidate.relative_to(top).as_posix()
            except ValueError:  # outside the checkout: git does not see it
                continue
            excluded.append(f":(top,exclude,literal){relative}")
    return excluded


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    """Installed versions (`importlib.metadata`, nothing imported); null when not installed."""
    return provenance.package_versions(names)


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Plan:
    """What the confirmation study will run and report first."""

    seeds: tuple[int, ...] = DEFAULT_SEEDS
    primary: str = DEFAULT_PRIMARY
    comparisons: tuple[tuple[str, str], ...] = ()  # (design, baseline)

    def __post_init__(self) -> None:
        if not self.seeds:
            raise LmeError("prereg: the plan needs at least one seed (--seeds 1,2,3).")
        if len(set(self.seeds)) != len(self.seeds):
            raise LmeError(f"prereg: --seeds {format_seeds(self.seeds)} repeats a seed.")
        check_measure(self.primary)
        for design, baseline in self.comparisons:
            if not design or not baseline or design == baseline:
                raise LmeError(f"prereg: comparison {design}:{baseline} must name two different designs.")

    def as_dict(self) -> dict[str, Any]:
        return {
            "seeds": list(self.seeds),
            "primary": self.primary,
            "comparisons": [f"{design}:{baseline}" for design, baseline in self.comparisons],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            seeds=tuple(int(seed) for seed in data.get("seeds") or ()),
            primary=str(data.get("primary")),
            comparisons=tuple(parse_comparison(text) for text in data.get("comparisons") or ()),
        )


def format_seeds(seeds: Iterable[int]) -> str:
    return ",".join(str(seed) for seed in seeds)


def check_measure(name: str) -> str:
    """A measure lme computes: a run measure or an across-seed one, optionally `.TYPE` for one question type."""
    from lme.data.records import QUESTION_TYPES

    base, _, question_type = name.partition(".")
    known = RUN_MEASURES + ACROSS_RUN_MEASURES
    if base not in known or (question_type and (question_type not in QUESTION_TYPES or base == "abstention_accuracy")):
        raise LmeError(
            f"prereg: unknown primary measure {name!r}; use one of {', '.join(known)} "
            f"(optionally .TYPE, e.g. accuracy.multi-session)."
        )
    return name


def parse_seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise LmeError(f"prereg: --seeds expects comma-separated integers, got {text!r}.") from None


def parse_comparison(text: str) -> tuple[str, str]:
    design, sep, baseline = str(text).partition(":")
    if not sep:
        raise LmeError(f"prereg: --compare expects DESIGN:BASELINE, got {text!r}.")
    return design.strip(), baseline.strip()


# ---------------------------------------------------------------- the record


def build_record(
    design: Design,
    data_path: Path,
    question_ids: Sequence[str],
    plan: Plan,
    *,
    overrides: Sequence[str] = (),
    code: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    name: str | None = None,
    record_path: Path | str | None = None,
) -> dict[str, Any]:
    """The record of a composed design (without `record_sha256`; `seal` adds it).

    `code` defaults to `code_version()` (with `record_path`, the record's file and folder do not make
    the tree dirty); tests pass another checkout's."""
    from lme.config.design import plain

    judge = design.judge.build()  # reads and verifies its templates
    container = plain(design.config)
    canonical = canonical_design(container)
    created = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    ids = [str(qid) for qid in question_ids]
    return {
        "lme_prereg": FORMAT,
        "name": name,
        "created": created.isoformat().replace("+00:00", "Z"),
        "design_name": canonical.get("design_name"),
        "overrides": list(overrides),
        "plan": plan.as_dict(),
        "design_sha256": sha256_json(canonical),
        "digests": text_digests(canonical),
        "judge_templates": dict(sorted(judge.digests.items())),
        "models": {
            "reader": _model_summary(canonical.get("reader") or {}),
            "judge": _model_summary(canonical.get("judge") or {}),
        },
        "data": {
            "name": (canonical.get("dataset") or {}).get("name"),
            "path": str(data_path),
            "file_sha256": file_sha256_known(Path(data_path)),  # once per process and file
            "n_questions": len(ids),
            "question_ids_sha256": sha256_json(ids),
            "question_ids": ids,
        },
        "code": dict(code) if code is not None else code_version(ignore=[record_path] if record_path else ()),
        "packages": package_versions(),
        "design": canonical,
    }


def _model_summary(node: Mapping[str, Any]) -> dict[str, Any]:
    model = node.get("model") or {}
    summary = {key: node[key] for key in ("name", "official", "instruction_role") if key in node}
    summary.update({key: model.get(key) for key in ("model", "params", "api_base") if key in model})
    return summary


def record_digest(record: Mapping[str, Any]) -> str:
    """SHA-256 over every field but `record_sha256` itself, canonical JSON."""
    return sha256_json({key: value for key, value in record.items() if key != "record_sha256"})


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with its own digest first."""
    body = {key: value for key, value in record.items() if key != "record_sha256"}
    return {"record_sha256": record_digest(body), **body}


def dump_record(record: Mapping[str, Any]) -> str:
    import yaml

    header = (
        "# lme preregistration record (python -m lme prereg freeze). Do not edit: record_sha256 covers every field;\n"
        "# check a run against it with `python -m lme prereg verify THIS_FILE`.\n"
    )
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's, when built: the same text, ~6x faster

    class NoAliases(dumper):  # type: ignore[misc,valid-type]
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return header + yaml.dump(dict(record), Dumper=NoAliases, sort_keys=False, allow_unicode=True, width=100)


def write_record(record: Mapping[str, Any], path: Path, force: bool = False) -> None:
    """The record at `path`, whole or not at all (`lme.util.files.write_text_atomic`: a temporary file beside it,
    renamed into place), after checking that it holds no secret and reads back as itself. An existing
    record is kept unless `force`; a full disk or any refusal leaves it as it was; each failure is one
    `LmeError` naming the file."""
    from lme.util.files import write_text_atomic

    path = Path(path)
    refuse_record_secrets(record, "the preregistration record")
    text = dump_record(record)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LmeError(f"{path}: the record holds text that is not valid Unicode ({exc.reason}, character "
                       f"{exc.start}); nothing was written.") from None
    if parse_record(data.decode("utf-8"), str(path)) != dict(record):  # never write what would not read back
        raise LmeError(f"{path}: the record would not read back as written (a value YAML cannot hold as it is); "
                       "nothing was written.")
    refuse_existing(path, force)
    write_text_atomic(path, text)


def refuse_existing(path: Path, force: bool = False) -> None:
    """`LmeError` when something is at `path` already (a record is never overwritten without `force`)."""
    if os.path.lexists(path) and not force:
        raise LmeError(f"{path}: a preregistration record already exists; pick another --out or pass --force.")


def refuse_record_secrets(record: Mapping[str, Any], where: str) -> None:
    """`LmeError` naming the first field of `record` that holds a key, a password in a URL or a secret-named
    value (`lme.util.secrets`' rules, a run's), never the value itself."""
    from lme.util.secrets import findings, refusal

    found = findings(record)
    if found:
        raise refusal(found[0].path, found[0].kind, where=where)


# ---------------------------------------------------------------- reading a record

_HEX64 = re.compile(r"[0-9a-f]{64}")
_RESTORE = "restore the file `python -m lme prereg freeze` wrote, or freeze the design again"


def load_record(path: str | Path) -> dict[str, Any]:
    """Read and check a record (`check_record`): one `LmeError` sentence naming the file for anything that is
    not a record `prereg freeze` wrote (missing, not a regular file, unreadable, not UTF-8, an alias, nested
    too deeply, truncated or edited, wrong-shaped, holding a secret)."""
    import stat

    from lme.util.yamlfile import read_yaml

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise LmeError(f"{path}: preregistration record not found.") from None
    except OSError as exc:
        raise LmeError(f"{path}: preregistration record cannot be read ({exc.strerror or type(exc).__name__}); "
                       "check the path and its permissions.") from None
    if stat.S_ISDIR(mode):
        raise LmeError(f"{path}: a directory, not a preregistration record; name the record's file.")
    if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
        raise LmeError(f"{path}: not a regular file, so not a preregistration record; name the record's file.")
    try:
        data = read_yaml(path, str(path))
    except LmeError as exc:
        raise _truncated_or(exc, path) from None
    return check_record(data, path)


def parse_record(text: str, what: str) -> dict[str, Any]:
    """`load_record` for a record's text; `what` names it in an error."""
    from lme.util.yamlfile import parse_yaml

    try:
        data = parse_yaml(text, what)
    except LmeError as exc:
        raise _truncated_or(exc, what) from None
    return check_record(data, what)


def _truncated_or(error: LmeError, where: str | Path) -> LmeError:
    """A YAML syntax error in a record is a record cut short or edited (lme writes valid YAML): said so; any
    other refusal of the reader (missing, unreadable, an alias, ...) as it is."""
    import yaml

    cause = error.__context__
    if not isinstance(cause, yaml.YAMLError):
        return error
    mark = getattr(cause, "problem_mark", None)
    line = f" at line {mark.line + 1}" if mark is not None else ""
    return LmeError(f"{where}: preregistration record truncated or edited: it is not valid YAML{line}, so its "
                    f"digest does not match; {_RESTORE}.")


def check_record(data: Any, where: str | Path) -> dict[str, Any]:
    """`data` (a parsed record) when it is a record `build_record` wrote and `seal` sealed: first its digest
    (`record_sha256`, nothing else trusted before it matches), then its format, then the type of every field
    (`_SHAPE`), then that it holds no secret. Each refusal is one `LmeError` naming `where` and the field."""
    if not isinstance(data, dict) or "record_sha256" not in data:
        what = "empty" if data is None else f"{_kind(data)}, not a mapping" if not isinstance(data, dict) else ""
        detail = f" ({what})" if what else ""
        raise LmeError(f"{where}: not an lme preregistration record{detail}: no digest (record_sha256); "
                       f"{_RESTORE}.")
    stored = data["record_sha256"]
    if not isinstance(stored, str) or not _HEX64.fullmatch(stored):
        raise LmeError(f"{where}: preregistration record truncated or edited: its digest record_sha256 is "
                       f"{_kind(stored)}, not a SHA-256 (64 hex digits); {_RESTORE}.")
    odd = _not_json(data, "")
    if odd is not None:
        field, kind = odd
        raise LmeError(f"{where}: preregistration record truncated or edited: its digest does not match (field "
                       f"{field or '(top)'} holds {kind}, which no record lme writes holds); {_RESTORE}.")
    digest = record_digest(data)
    if digest != stored:
        raise LmeError(f"{where}: preregistration record truncated or edited: its digest does not match "
                       f"(record_sha256 does not match the record's contents, which hash to {digest[:12]}, not "
                       f"{stored[:12]}); {_RESTORE}.")
    version = data.get("lme_prereg")
    if version != FORMAT or isinstance(version, bool):
        shown = "absent" if "lme_prereg" not in data else repr(version)
        raise LmeError(f"{where}: preregistration record format (lme_prereg) {shown}; this lme reads {FORMAT}: "
                       "verify it with the lme that froze it, or freeze the design again.")
    for field in data:
        if field not in _SHAPE:
            raise LmeError(f"{where}: field {_name(field)} is not one `prereg freeze` writes (the record was "
                           f"edited and resealed); {_RESTORE}.")
    for field, check in _SHAPE.items():
        if field not in data:
            raise LmeError(f"{where}: field {field} is missing (the record was edited and resealed); {_RESTORE}.")
        problem = check(data[field], field)
        if problem is not None:
            name, expected, value = problem
            if value is ABSENT:
                raise LmeError(f"{where}: field {name} is missing (the record was edited and resealed); {_RESTORE}.")
            raise LmeError(f"{where}: field {name} holds {_kind(value)}, where a record has "
                           f"{expected} (the record was edited and resealed); {_RESTORE}.")
    refuse_record_secrets(data, f"preregistration record {where}")
    return data


def _name(key: Any) -> str:
    from lme.util.secrets import redact

    return redact(str(key))[:80]


def _kind(value: Any) -> str:
    """What a value is, in words, never the value itself (it may be long, or a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return f"a text of {len(value)} characters" if value else "an empty text"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    if isinstance(value, Mapping):
        return f"a mapping of {len(value)} keys"
    return f"a {type(value).__name__} value"


def _not_json(value: Any, field: str) -> tuple[str, str] | None:
    """(field, kind) of the first value canonical JSON cannot hold as YAML gave it (a date, binary, a set, NaN,
    a key that is not text): a record never holds one, and its digest could not be taken."""
    import math

    stack = [(value, field)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            for key, item in node.items():
                child = f"{at}.{_name(key)}" if at else _name(key)
                if not isinstance(key, str):
                    return child, f"a key that is {_kind(key)}, not text"
                stack.append((item, child))
        elif isinstance(node, list):
            stack.extend((item, f"{at}[{index}]") for index, item in enumerate(node))
        elif isinstance(node, float):
            if not math.isfinite(node):
                return at, "a number that is not finite"
        elif node is not None and not isinstance(node, (str, int, bool)):
            return at, f"a {type(node).__name__} value"
    return None


# Each field's check: None when the value has the shape `build_record` writes, else (field, what it should be,
# the value there).
_Problem = tuple[str, str, Any] | None


def _text(value: Any, field: str) -> _Problem:
    return None if isinstance(value, str) else (field, "a text", value)


def _text_or_null(value: Any, field: str) -> _Problem:
    return None if value is None or isinstance(value, str) else (field, "a text or null", value)


def _hex64(value: Any, field: str) -> _Problem:
    return None if isinstance(value, str) and _HEX64.fullmatch(value) else (field, "a SHA-256 (64 hex digits)", value)


def _count(value: Any, field: str) -> _Problem:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return None if ok else (field, "a count (an integer, 0 or more)", value)


def _bool_or_null(value: Any, field: str) -> _Problem:
    return None if value is None or isinstance(value, bool) else (field, "true, false or null", value)


def _mapping(value: Any, field: str) -> _Problem:
    return None if isinstance(value, dict) else (field, "a mapping", value)


def _list_of(check: Any) -> Any:
    def checked(value: Any, field: str) -> _Problem:
        if not isinstance(value, list):
            return field, "a list", value
        for index, item in enumerate(value):
            problem = check(item, f"{field}[{index}]")
            if problem is not None:
                return problem
        return None
    return checked


def _mapping_of(check: Any) -> Any:
    def checked(value: Any, field: str) -> _Problem:
        if not isinstance(value, dict):
            return field, "a mapping", value
        for key, item in value.items():
            problem = check(item, f"{field}.{_name(key)}")
            if problem is not None:
                return problem
        return None
    return checked


def _fields(checks: Mapping[str, Any], required: Sequence[str] = ()) -> Any:
    """A mapping whose keys are among `checks`' (each checked when present; `required` ones must be)."""
    def checked(value: Any, field: str) -> _Problem:
        if not isinstance(value, dict):
            return field, "a mapping", value
        for key in value:
            if key not in checks:
                return f"{field}.{_name(key)}", f"no such field (a {field} has {', '.join(checks)})", value[key]
        for key in required:
            if key not in value:
                return f"{field}.{key}", "a value", ABSENT
        for key, item in value.items():
            problem = checks[key](item, f"{field}.{key}")
            if problem is not None:
                return problem
        return None
    return checked


def _created(value: Any, field: str) -> _Problem:
    expected = "a UTC time as YYYY-MM-DDTHH:MM:SSZ"
    if not isinstance(value, str):
        return field, expected, value
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return field, expected, value
    return None if when.tzinfo is not None else (field, expected, value)


def _seed(value: Any, field: str) -> _Problem:
    return None if isinstance(value, int) and not isinstance(value, bool) else (field, "a seed (an integer)", value)


def _plan(value: Any, field: str) -> _Problem:
    problem = _fields({"seeds": _list_of(_seed), "primary": _text, "comparisons": _list_of(_text)},
                      required=("seeds", "primary", "comparisons"))(value, field)
    if problem is not None:
        return problem
    try:
        Plan.from_dict(value)
    except LmeError as exc:
        return field, f"a plan lme accepts ({str(exc).removeprefix('prereg: ').rstrip('.')})", value
    return None


def _data(value: Any, field: str) -> _Problem:
    problem = _fields({"name": _text_or_null, "path": _text, "file_sha256": _hex64, "n_questions": _count,
                       "question_ids_sha256": _hex64, "question_ids": _list_of(_text)},
                      required=("file_sha256", "question_ids"))(value, field)
    if problem is not None:
        return problem
    ids = value["question_ids"]
    if "n_questions" in value and value["n_questions"] != len(ids):
        return f"{field}.n_questions", f"the number of question_ids ({len(ids)})", value["n_questions"]
    if "question_ids_sha256" in value and value["question_ids_sha256"] != sha256_json(ids):
        return f"{field}.question_ids_sha256", "the SHA-256 of its question_ids", value["question_ids_sha256"]
    return None


def _models(value: Any, field: str) -> _Problem:
    return _mapping_of(_mapping)(value, field)


_SHAPE: dict[str, Any] = {
    "record_sha256": _hex64,
    "lme_prereg": _count,
    "name": _text_or_null,
    "created": _created,
    "design_name": _text_or_null,
    "overrides": _list_of(_text),
    "plan": _plan,
    "design_sha256": _hex64,
    "digests": _mapping_of(_hex64),
    "judge_templates": _mapping_of(_hex64),
    "models": _models,
    "data": _data,
    "code": _fields({"git_commit": _text_or_null, "git_dirty": _bool_or_null, "source_sha256": _hex64,
                     "files": _mapping_of(_hex64)}),
    "packages": _mapping_of(_text_or_null),
    "design": _mapping,
}


# ---------------------------------------------------------------- differences


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()  # a key one side of a comparison lacks (None is a YAML null)


@dataclass(frozen=True)
class Difference:
    key: str
    old: Any  # the record's value, or ABSENT
    new: Any  # the recomputed value, or ABSENT
    blocking: bool = True
    note: str = ""  # a sentence replacing the generic "old -> new"

    def describe(self) -> str:
        if self.note:
            return f"{self.key}: {self.note}"
        return f"{self.key}: {_show(self.old)} -> {_show(self.new)}"


def _show(value: Any) -> str:
    if value is ABSENT:
        return "absent"
    if isinstance(value, str):
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value):
            return value[:12]
        if len(value) > 60 or "\n" in value:
            return f"sha256 {sha256_text(value)[:12]} ({len(value)} chars)"
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 200 else f"sha256 {sha256_json(value)[:12]} ({len(value)} items)"
    return json.dumps(value)


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


def _excluded(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in _NOT_COMPARED)


def _is_note(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in NOTE_KEYS)


def _ids_note(old: Sequence[str], new: Sequence[str]) -> str:
    removed = [qid for qid in old if qid not in set(new)]
    added = [qid for qid in new if qid not in set(old)]
    if not removed and not added:
        return f"the same {len(old)} question ids in another order"

    def names(ids: Sequence[str]) -> str:
        return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")

    parts = [f"{len(old)} -> {len(new)} questions"]
    if removed:
        parts.append(f"{len(removed)} no longer selected ({names(removed)})")
    if added:
        parts.append(f"{len(added)} newly selected ({names(added)})")
    return "; ".join(parts)


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Difference]:
    """Every difference between a stored record and a recomputed one, blocking ones first, in section order."""
    differences = []
    if old.get("record_sha256") != record_digest(old):
        differences.append(Difference(
            "record_sha256", old.get("record_sha256"), record_digest(old),
            note=f"the record was edited after it was frozen (stored {str(old.get('record_sha256'))[:12]}, "
            f"its content hashes to {record_digest(old)[:12]})",
        ))
    flat_old, flat_new = _flatten(dict(old)), _flatten(dict(new))
    for key in sorted(set(flat_old) | set(flat_new), key=_order_key):
        if _excluded(key):
            continue
        before, after = flat_old.get(key, ABSENT), flat_new.get(key, ABSENT)
        if before == after:
            continue
        note = ""
        if key == "data.question_ids" and isinstance(before, list) and isinstance(after, list):
            note = _ids_note(before, after)
        elif key == "overrides" and isinstance(before, list) and isinstance(after, list):
            note = f"{' '.join(map(str, before)) or '(none)'} -> {' '.join(map(str, after)) or '(none)'}"
        differences.append(Difference(key, before, after, blocking=not _is_note(key), note=note))
    return sorted(differences, key=lambda d: (not d.blocking,))  # stable: section order kept within each group


def _order_key(key: str) -> tuple[int, str]:
    section = key.split(".", 1)[0]
    return (_SECTION_ORDER.index(section) if section in _SECTION_ORDER else len(_SECTION_ORDER), key)


def seed_difference(seed: int, plan: Mapping[str, Any]) -> Difference | None:
    seeds = [int(s) for s in plan.get("seeds") or ()]
    if seed in seeds:
        return None
    return Difference("seed", seeds, seed, note=f"seed {seed} is not among the planned seeds {format_seeds(seeds)}")


def changed_files(differences: Iterable[Difference]) -> list[str]:
    return [d.key.removeprefix("code.files.") for d in differences if d.key.startswith("code.files.")]


def refusal(path: str | Path, differences: Sequence[Difference]) -> str:
    """One sentence: the first blocking difference, how many there are, the files that changed."""
    blocking = [d for d in differences if d.blocking]
    first = blocking[0].describe()
    more = f" and {len(blocking) - 1} more blocking difference{'s' if len(blocking) > 2 else ''}" if len(blocking) > 1 else ""
    files = changed_files(blocking)
    in_files = ""
    if files:
        in_files = "; files changed: " + ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (
        f"{path}: this run differs from the preregistration, so it does not start: {first}{more}{in_files} "
        f"(`python -m lme prereg verify {path}` with the same overrides lists every difference)."
    )


# ---------------------------------------------------------------- the run's check


def check_run(design: Design, data_path: Path, questions: Sequence[Any]) -> dict[str, str]:
    """Called by every job before any model call. Returns the MLflow tags (`lme.design_sha256`, and
    `lme.prereg_sha256` when the design names a prereg record); raises `LmeError` on any blocking difference."""
    tags = {"lme.design_sha256": design.config_sha256}
    record_path = design.prereg
    if not record_path:
        return tags
    stored, differences = record_differences(design, data_path, [q.question_id for q in questions])
    differences = with_seed(differences, design.seed, stored)
    refuse_blocking(record_path, differences)
    for difference in differences:
        print(f"lme: prereg note (not blocking): {difference.describe()}", file=sys.stderr, flush=True)
    tags["lme.prereg_sha256"] = str(stored["record_sha256"])
    return tags


def record_differences(design: Design, data_path: Path, question_ids: Sequence[str]
                       ) -> tuple[dict[str, Any], list[Difference]]:
    """The record `design.prereg` names, and every difference of this design, data file and questions from it,
    the seed aside (`with_seed`): the same for every seed of a sweep, so computed once for them all."""
    record_path = str(design.prereg)
    stored = load_record(record_path)
    plan = Plan.from_dict(stored.get("plan") or {})
    fresh = build_record(design, data_path, list(question_ids), plan,
                         overrides=stored.get("overrides") or [], name=stored.get("name"), record_path=record_path)
    return stored, compare(stored, fresh)


def with_seed(differences: Sequence[Difference], seed: int, stored: Mapping[str, Any]) -> list[Difference]:
    """`differences`, with the run's seed when the record's plan does not list it, in the order `refusal` names them."""
    difference = seed_difference(seed, stored.get("plan") or {})
    if difference is None:
        return list(differences)
    return sorted([*differences, difference], key=lambda d: (not d.blocking, _order_key(d.key)))


def refuse_blocking(record_path: str | Path, differences: Sequence[Difference]) -> None:
    """`LmeError` with `refusal`'s sentence when any difference blocks the run."""
    if any(d.blocking for d in differences):
        raise LmeError(refusal(record_path, differences))


# ---------------------------------------------------------------- for the report


@dataclass(frozen=True)
class PreregFacts:
    """What a report of a preregistered study states first."""

    record_sha256: str
    design_name: str
    primary: str
    comparisons: tuple[tuple[str, str], ...]
    seeds: tuple[int, ...]
    frozen_at: datetime
    covered_runs: int  # runs tagged with this record's digest or its design's digest
    first_run_at: datetime | None
    written_after_first_run: bool  # the record is later than the first run it covers


def prereg_facts(record: Mapping[str, Any], runs: Iterable[Any]) -> PreregFacts:
    """The primary measure spec of `record`, and whether it was frozen after the first of `runs` it covers.

    `runs` are MLflow `Run`s (`run.info.start_time` in ms, `run.data.tags`) or the report's
    `lme.tracking.report_source.RunInfo`s (`run.start_time`, `run.tags`); a run is covered when its
    `lme.prereg_sha256` tag is the record's digest or its `lme.design_sha256` tag is the record's design
    digest (so runs of the same design made before freezing count)."""
    plan = Plan.from_dict(record.get("plan") or {})
    frozen_at = datetime.fromisoformat(str(record["created"]).replace("Z", "+00:00"))
    starts = []
    for run in runs:
        tags, start = (run.data.tags, run.info.start_time) if hasattr(run, "data") else (run.tags, run.start_time)
        if tags.get("lme.prereg_sha256") == record.get("record_sha256") or (
            tags.get("lme.design_sha256") and tags.get("lme.design_sha256") == record.get("design_sha256")
        ):
            starts.append(datetime.fromtimestamp(start / 1000, tz=timezone.utc))
    first = min(starts) if starts else None
    return PreregFacts(
        record_sha256=str(record.get("record_sha256")),
        design_name=str(record.get("design_name")),
        primary=plan.primary,
        comparisons=plan.comparisons,
        seeds=plan.seeds,
        frozen_at=frozen_at,
        covered_runs=len(starts),
        first_run_at=first,
        written_after_first_run=first is not None and frozen_at > first,
    )
