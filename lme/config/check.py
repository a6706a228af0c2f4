"""Every user-settable value of a composed config, checked before anything runs.

`validate_config(cfg)` raises `LmeError` with one sentence naming the key, the rule and the value
(`seed: expected an integer, got 'abc'.`), for the first value that breaks its rule. Values are
read one key at a time, so an interpolation that cannot be resolved (`${oc.env:NOPE}`) is named
by its key too. Values are taken as Hydra composed them, without conversion: `seed=abc` is the
string 'abc', `seed=1.5` the float 1.5 and `concurrency=true` a bool, and each is refused where an
integer is expected (an integer-looking string, e.g. from `${oc.env:SEED}`, is refused too: wrap
it in `${oc.decode:...}`).

The rules, by key (`*.x` means a key named `x` anywhere):

| keys | rule |
|---|---|
| `seed` | an integer |
| `concurrency`, `*.concurrency` (a model's requests in flight) | an integer >= 1 |
| `calls_in_flight`, `limit` | null or an integer >= 1 |
| `budget.job_dollars`, `budget.study_dollars` | null or a finite number >= 0 |
| `budget.job_calls`, `budget.study_calls` | null or an integer >= 0 |
| `*.top_k`, `*.depth`, `*.batch_size`, `*.message_max_chars`, `*.max_attempts` | an integer >= 1 |
| `*_bytes` | an integer >= 1 (`*_reserve_bytes`: >= 0, and below the `max_bytes` beside it) |
| `*.date_sessions`, `*.content_sessions`, `*.date_window_days` | an integer >= 0 |
| `*.timeout_s`, `*.unreachable_after_s` | a number > 0 |
| `*.backoff_base_s`, `*.backoff_max_s`, `*.backoff_s`, `*.retry_after_max_s` | a number >= 0 |
| `*_cost_per_token` | null or a number >= 0 |
| `*.requests_per_minute`, `*.tokens_per_minute` | null or a number > 0 |
| `*.max_seq_length`, `*.dimensions` | null or an integer >= 1 |
| model `params.max_tokens`, `params.max_completion_tokens`, `params.n` | an integer >= 1 |
| model `params.temperature` | a number from 0 to 2; `params.top_p` from 0 to 1 |
| `*.api_base` | null or an http:// or https:// URL |
| `*.api_key_env` | null or the name of an environment variable |
| `cache_dir`, `data_dir`, `*.index_dir` | a directory, or a path where one can be created |
| `budget.ledger_path`, `*.cache_path` | a file, or a path where one can be created (cache_path may be null) |
| `dataset.path` | a readable regular file (`lme.data.load.check_data_file`) |
| `prereg` | null or a readable regular file |
| `judge.templates_path`, `instructions.source` | null, or a path that is not a directory, FIFO or device |
| `tracking.uri` | sqlite:///PATH, postgresql://, mysql://, mssql:// (with +driver), http(s)://, databricks; file: only with MLFLOW_ALLOW_FILE_STORE=true |
| `verbose`, `progress`, `dataset.stream`, `tracking.enabled`, `judge.official` | true or false |
| `split_missing`, `memory.overflow_policy`, `memory.layout`, `reader.instruction_role`, `reader.payload`, `judge.verdict`, `judge.protocol`, `*.device`, `*.backend` | one of their options |
| `question_ids` / `question_types` | null, one, or a list (ids as strings; known types) |
| names (`views.*.name`, a `rules.order` step's `rule` and `view`), models, `tracking.experiment`, `budget.study`, `instructions.base` | a non-empty string |
| `tracking.traces` | full, metadata or off |
| every string anywhere | text that can be written as UTF-8 (no lone surrogate) |

A key the rules do not know is only resolved and checked for text. The `hydra` node is skipped.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig, ListConfig, OmegaConf

from lme.util.errors import LmeError

Check = Callable[[str, Any], None]

_SQL_SCHEMES = ("postgresql", "mysql", "mssql")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(?::\d+)?")


class ConfigError(LmeError):
    """A config value breaks its rule."""


# --- showing values -----------------------------------------------------------------------------------


def show(value: Any, key: str = "") -> str:
    """A value as the sentence shows it: null, true, 'text' (quoted), 1.5, [..]; a key is never shown."""
    from lme.util import secrets

    if (key and secrets.secret_named(key) and value not in (None, "")) or secrets.looks_like_a_key(value):
        return secrets.REDACTED
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 80 else repr(value[:60]) + f"... ({len(value)} characters)"
    if isinstance(value, (list, tuple, Mapping)):
        text = repr(value)
        return text if len(text) <= 80 else text[:70] + "..."
    return str(value)


def fail(key: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f"{key}: expected {rule}, got {show(value, key)}.")


# --- rules ----------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(minimum: int | None = None, optional: bool = False) -> Check:
    rule = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    rule = f"null or {rule}" if optional else rule

    def check(key: str, value: Any) -> None:
        if value is None and optional:
            return
        if not _is_int(value) or (minimum is not None and value < minimum):
            raise fail(key, rule, value)

    return check


def number(
    minimum: float | None = None, above: bool = False, maximum: float | None = None, optional: bool = False
) -> Check:
    if minimum is not None and maximum is not None:
        rule = f"a number from {minimum:g} to {maximum:g}"
    elif minimum is not None:
        rule = f"a number {'>' if above else '>='} {minimum:g}"
    else:
        rule = "a number"
    rule = f"null or {rule}" if optional else rule

    def check(key: str, value: Any) -> None:
        if value is None and optional:
            return
        if not _is_number(value) or not math.isfinite(value):
            raise fail(key, rule, value)
        if minimum is not None and (value < minimum or (above and value == minimum)):
            raise fail(key, rule, value)
        if maximum is not None and value > maximum:
            raise fail(key, rule, value)

    return check


def boolean(optional: bool = False) -> Check:
    rule = "null, true or false" if optional else "true or false"

    def check(key: str, value: Any) -> None:
        if not (isinstance(value, bool) or (optional and value is None)):
            raise fail(key, rule, value)

    return check


def text(nonempty: bool = True, optional: bool = False) -> Check:
    rule = "a non-empty string" if nonempty else "a string"
    rule = f"null or {rule}" if optional else rule

    def check(key: str, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or (nonempty and not value.strip()):
            raise fail(key, rule, value)

    return check


def choice(options: tuple[str, ...] | Callable[[], tuple[str, ...]], optional: bool = False) -> Check:
    def check(key: str, value: Any) -> None:
        known = options() if callable(options) else options
        if value is None and optional:
            return
        if value not in known:
            raise fail(key, ("null or " if optional else "") + "one of " + ", ".join(known), value)

    return check


def device(key: str, value: Any) -> None:
    if not isinstance(value, str) or not _DEVICE.fullmatch(value):
        raise fail(key, "auto, cpu, cuda, cuda:N or mps", value)


def api_base(key: str, value: Any) -> None:
    if value is None:
        return
    parsed = urlparse(value) if isinstance(value, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise fail(key, "null or an http:// or https:// URL", value)


def env_name(key: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise fail(key, "null or the name of an environment variable (letters, digits and _)", value)


def mapping(optional: bool = True) -> Check:
    def check(key: str, value: Any) -> None:
        if not (isinstance(value, Mapping) or (optional and value is None)):
            raise fail(key, ("null or " if optional else "") + "a mapping of names to values", value)

    return check


def names(what: str, known: Callable[[], tuple[str, ...]] | None = None) -> Check:
    """null, one name, or a list of names (`question_ids`, `question_types`)."""

    def check(key: str, value: Any) -> None:
        if value is None:
            return
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, (float, bool)) or item is None:
                raise ConfigError(
                    f"{key}: expected null, {what} or a list of them, got {show(item)}, which Hydra read as "
                    f"{'null' if item is None else 'a ' + type(item).__name__}; quote it, e.g. {key}=['6e984301']."
                )
            if not isinstance(item, (str, int)) or (isinstance(item, str) and not item.strip()):
                raise fail(key, f"null, {what} or a list of them", value)
            if known is not None and item not in known():
                raise fail(key, f"null, {what} or a list of them (known: {', '.join(known())})", item)

    return check


# --- paths ------------------------------------------------------------------------------------------------


def _path(key: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise fail(key, "a path", value)
    return Path(str(value)).expanduser()


def _kind(path: Path) -> str | None:
    """What a path that is not a directory or a regular file is, or None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return None


def _creatable(key: str, path: Path, what: str) -> None:
    """`path` does not exist: its nearest existing ancestor must be a directory this process may write to."""
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        if ancestor.is_symlink():  # a dangling link or a loop on the way
            raise ConfigError(f"{key}: {path} cannot be created: {ancestor} is a symbolic link that cannot be resolved.")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{key}: {path} cannot be created: {ancestor} is a file, not a directory.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: {path} cannot be created: {ancestor} is not writable.")


def directory(optional: bool = False) -> Check:
    def check(key: str, value: Any) -> None:
        if value is None and optional:
            return
        path = _path(key, value)
        if path.is_symlink() and not path.exists():
            raise ConfigError(f"{key}: {path} is a symbolic link that cannot be resolved (dangling, or a loop).")
        if path.exists():
            if not path.is_dir():
                kind = _kind(path) or "a file"
                raise ConfigError(f"{key}: {path} is {kind}, not a directory.")
            if not os.access(path, os.W_OK | os.X_OK):
                raise ConfigError(f"{key}: {path} is a directory this process cannot write to.")
            return
        _creatable(key, path, "directory")

    return check


def file_path(optional: bool = False) -> Check:
    """A file lme writes (a SQLite database): a regular file, or a path where one can be created."""

    def check(key: str, value: Any) -> None:
        if value is None and optional:
            return
        path = _path(key, value)
        if path.is_symlink() and not path.exists():
            raise ConfigError(f"{key}: {path} is a symbolic link that cannot be resolved (dangling, or a loop).")
        if path.exists():
            if path.is_dir():
                raise ConfigError(f"{key}: {path} is a directory, not a file.")
            if (kind := _kind(path)) is not None:
                raise ConfigError(f"{key}: {path} is {kind}, not a regular file.")
            return
        _creatable(key, path, "file")

    return check


def data_file(what: Callable[[], str], hint: Callable[[], str] = lambda: "", optional: bool = False) -> Check:
    """A file lme reads: `check_data_file`, its sentence prefixed with the key."""

    def check(key: str, value: Any) -> None:
        from lme.data.load import check_data_file
        from lme.util.errors import DataError

        if value is None and optional:
            return
        path = _path(key, value)
        if not os.path.lexists(path):
            from lme.data.folder import missing_in_folder

            if (sentence := missing_in_folder(path)) is not None:  # the data folder's own file: where it looked
                raise ConfigError(f"{key}: {sentence}")
        try:
            check_data_file(path, what())
        except DataError as exc:
            sentence = str(exc).rstrip(".")
            extra = hint() if not os.path.lexists(path) else ""
            raise ConfigError(f"{key}: {sentence}{'; ' + extra if extra else ''}.") from None

    return check


def existing_not_special(key: str, value: Any) -> None:
    """null, or a path which, when it exists, is a regular file (its absence is the reader's to report)."""
    if value is None:
        return
    path = _path(key, value)
    if os.path.lexists(path):
        data_file(lambda: "")(key, value)


def traces_mode(key: str, value: Any) -> None:
    """full, metadata or off (YAML's bare `off` is false, and is taken as off; true as full)."""
    from lme.tracking.runs import TRACE_MODES

    if isinstance(value, bool) or value in TRACE_MODES:
        return
    raise fail(key, f"one of {', '.join(TRACE_MODES)}", value)


def tracking_uri(key: str, value: Any) -> None:
    known = "sqlite:///PATH, postgresql://, mysql://, mssql:// (each may name a +driver), http://, https:// or databricks"
    if not isinstance(value, str) or not value.strip():
        raise fail(key, f"a tracking URI ({known})", value)
    scheme = value.split(":", 1)[0].lower() if ":" in value else ""
    base = scheme.split("+", 1)[0]
    if base == "sqlite":
        if not value.startswith("sqlite:///") or value.rstrip("/") in ("sqlite:", "sqlite:/", "sqlite://"):
            raise ConfigError(
                f"{key}: expected sqlite:///PATH (three slashes, then the database file, e.g. sqlite:///mlflow.db), "
                f"got {show(value)}."
            )
        location = value.removeprefix("sqlite:///").split("?", 1)[0]
        file_path()(key, location if not value.startswith("sqlite:////") else "/" + location.lstrip("/"))
        return
    if base in _SQL_SCHEMES and value.startswith(f"{scheme}://"):
        return
    if scheme in ("http", "https"):
        api_base(key, value)
        return
    if scheme == "databricks" or value == "databricks":
        return
    if scheme == "file" or (not scheme and value.strip()) or (len(scheme) == 1 and os.name == "nt"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true", "yes"):
            return
        raise ConfigError(
            f"{key}: {show(value)} is MLflow's file store, which MLflow 3 refuses unless MLFLOW_ALLOW_FILE_STORE=true; "
            f"use sqlite:///mlflow.db or one of {known}."
        )
    raise ConfigError(f"{key}: unknown tracking URI scheme {scheme + ':' if scheme else ''} in {show(value)} "
                      f"(known: {known}).")


# --- which rule for which key -----------------------------------------------------------------------------


def _question_types() -> tuple[str, ...]:
    from lme.data.records import KNOWN_TYPES

    return KNOWN_TYPES


def _split_policies() -> tuple[str, ...]:
    from lme.data.select import SPLIT_MISSING_POLICIES

    return SPLIT_MISSING_POLICIES


def _payloads() -> tuple[str, ...]:
    from lme.answer.reader import PAYLOADS

    return PAYLOADS


def _verdict_rules() -> tuple[str, ...]:
    from lme.judge import VERDICT_RULES

    return VERDICT_RULES


def _judge_protocols() -> tuple[str, ...]:
    from lme.judge import PROTOCOLS

    return PROTOCOLS


def _layouts() -> tuple[str, ...]:
    from lme.memory.user_log import LAYOUTS

    return LAYOUTS


def _overflow_policies(target: Any) -> tuple[str, ...]:
    """The overflow policies of the memory builder `target` names (the full history's, or the user log's)."""
    from lme.memory.full_history import OVERFLOW_POLICIES as FULL_HISTORY
    from lme.memory.user_log import OVERFLOW_POLICIES as USER_LOG

    return FULL_HISTORY if str(target or "").endswith("FullHistoryMemoryBuilder") else USER_LOG


def _rules(cfg: DictConfig) -> list[tuple[re.Pattern[str], Check]]:
    def dataset_name() -> str:
        name = OmegaConf.select(cfg, "dataset.name", default=None, throw_on_resolution_failure=False)
        return f"dataset {name}" if name else "dataset"

    def fetch_hint() -> str:
        fetch = OmegaConf.select(cfg, "dataset.fetch", default=None, throw_on_resolution_failure=False)
        name = OmegaConf.select(cfg, "dataset.name", default=None, throw_on_resolution_failure=False)
        if fetch and name == fetch:  # the group's own file (a dataset.path of another file is named by its stem)
            return f"run `python -m lme data fetch {fetch}` or pass dataset.path=FILE"
        return "pass dataset.path=FILE"

    model = r"(?:reader|judge)\.model"
    table: list[tuple[str, Check]] = [
        # top level
        (r"seed", integer()),
        (r"concurrency", integer(1)),
        (r"calls_in_flight", integer(1, optional=True)),
        (r"limit", integer(1, optional=True)),
        (r"verbose|progress", boolean()),
        (r"split", text(optional=True)),
        (r"split_missing", choice(_split_policies)),
        (r"question_ids", names("an id")),
        (r"question_types", names("a question type", _question_types)),
        (r"design_name", text()),
        (r"cache_dir|data_dir", directory()),
        (r"prereg", data_file(lambda: "preregistration record", optional=True)),
        # dataset
        (r"dataset\.name", text()),
        (r"dataset\.path", data_file(dataset_name, fetch_hint)),
        (r"dataset\.stream", boolean()),
        (r"dataset\.fetch", text(optional=True)),
        (r"dataset\.benchmark", text(optional=True)),
        # tracking and budget
        (r"tracking\.enabled", boolean()),
        (r"tracking\.uri", tracking_uri),
        (r"tracking\.experiment", text()),
        (r"tracking\.traces", traces_mode),
        (r"tracking\.artifact_location", text(optional=True)),
        (r"budget\.(?:job|study)_dollars", number(0, optional=True)),
        (r"budget\.(?:job|study)_calls", integer(0, optional=True)),
        (r"budget\.ledger_path", file_path()),
        (r"budget\.study", text()),
        (r"budget\.job", text(optional=True)),
        # models
        (rf"{model}\.model", text()),
        (rf"{model}\.params", mapping()),
        (rf"{model}\.params\.(?:max_tokens|max_completion_tokens|n)", integer(1)),
        (rf"{model}\.params\.temperature", number(0, maximum=2)),
        (rf"{model}\.params\.top_p", number(0, maximum=1)),
        (r"(?:reader|judge)\.name", text()),
        (r"reader\.instruction_role", choice(("system", "user", "developer"))),
        (r"reader\.payload", choice(_payloads)),
        (r"judge\.official", boolean()),
        (r"judge\.templates_path", existing_not_special),
        (r"judge\.verdict", choice(_verdict_rules)),
        (r"judge\.protocol", choice(_judge_protocols)),
        (r"judge\.system_message", text(optional=True)),
        # memory, view, retrievers, embedding
        (r"memory\.speakers", choice(("both", "asked_about"), optional=True)),
        (r"memory\.overflow_policy", choice(lambda: _overflow_policies(
            OmegaConf.select(cfg, "memory._target_", default=None, throw_on_resolution_failure=False)))),
        (r"memory\.layout", choice(_layouts)),
        (r"(?:.+\.)?\w*reserve_bytes", integer(0)),
        (r"(?:.+\.)?\w*_bytes", integer(1)),
        (r"(?:.+\.)?(?:top_k|depth|batch_size|message_max_chars|max_attempts|concurrency)", integer(1)),
        (r"(?:.+\.)?(?:date_sessions|content_sessions|date_window_days)", integer(0)),
        (r"(?:.+\.)?(?:timeout_s|unreachable_after_s)", number(0, above=True)),
        (r"(?:.+\.)?(?:backoff_base_s|backoff_max_s|backoff_s|retry_after_max_s)", number(0)),
        (r"(?:.+\.)?\w*_cost_per_token", number(0, optional=True)),
        (r"(?:.+\.)?(?:requests|tokens)_per_minute", number(0, above=True, optional=True)),
        (r"(?:.+\.)?(?:max_seq_length|dimensions)", integer(1, optional=True)),
        (r"(?:.+\.)?api_base", api_base),
        (r"(?:.+\.)?api_key_env", env_name),
        (r"(?:.+\.)?index_dir", directory()),
        (r"(?:.+\.)?cache_path", file_path(optional=True)),
        (r"retriever(?:\..+)?\.device", device),
        (r"retriever(?:\..+)?\.backend", choice(("sentence-transformers", "litellm"))),
        (r"retriever(?:\..+)?\.progress", boolean(optional=True)),
        (r"retriever(?:\..+)?\.k1", number(0)),
        (r"retriever(?:\..+)?\.b", number(0, maximum=1)),
        (r"retriever(?:\..+)?\.k", number(0)),
        (r"retriever(?:\..+)?\.(?:model|name|tokenizer)", text()),
        (r"retriever(?:\..+)?\.(?:query_prompt|document_prompt)", text(nonempty=False)),
        (r"embedding\.model", text()),
        (r"embedding\.(?:query_prompt|document_prompt)", text(nonempty=False)),
        (r"(?:memory|view|views\.\w+)\.name", text()),
        (r"rules\.order\[\d+\]\.(?:rule|view)", text()),  # a step that names its view
        (r"instructions\.base", text()),
        (r"instructions\.source", existing_not_special),
        (r"arbiter\.view", text()),
    ]
    return [(re.compile(pattern), check) for pattern, check in table]


# --- walking the config -------------------------------------------------------------------------------------


class _Unresolved(Exception):
    """A value that could not be resolved: its sentence, and whether its text refers to another key."""

    def __init__(self, sentence: str, refers: bool) -> None:
        super().__init__(sentence)
        self.sentence, self.refers = sentence, refers


_KEY_REFERENCE = re.compile(r"\$\{\.*[A-Za-z_][\w.]*(?:\[\d+\])*\}")


def _resolve(container: DictConfig | ListConfig, key: Any, path: str) -> Any:
    """`container[key]`, resolved; a failing interpolation or a missing value becomes `_Unresolved`."""
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        return container[key]
    except MissingMandatoryValue:
        raise _Unresolved(f"{path}: has no value (???); set it, e.g. {path}=VALUE.", False) from None
    except Exception as exc:  # noqa: BLE001 - an interpolation or a resolver's own error
        node = container._get_node(key)  # noqa: SLF001 - the raw text of the interpolation
        raw = str(node._value()) if node is not None else ""  # noqa: SLF001
        first = str(exc).strip().split("\n")[0] if str(exc).strip() else ""
        reason = " ".join(first.split()).rstrip(".") or type(exc).__name__
        if not isinstance(exc, OmegaConfBaseException):
            reason = f"{type(exc).__name__}: {reason}"
        raise _Unresolved(f"{path}: {raw or 'its value'} cannot be resolved ({reason}).",
                          bool(_KEY_REFERENCE.search(raw))) from None


def _leaves(cfg: DictConfig) -> list[tuple[str, Any]]:
    """(path, value) for every key, values resolved one at a time, containers after their contents;
    the top level's plain values first (cache_dir before budget.ledger_path, which is made from it).
    A value that cannot be resolved raises the sentence of the first one whose own text fails (not
    one that only refers to a key that fails: `${cache_dir}/ledger.sqlite`)."""
    found: list[tuple[str, Any]] = []
    failed: list[_Unresolved] = []

    def walk(node: DictConfig | ListConfig, prefix: str) -> None:
        keys = list(node.keys()) if isinstance(node, DictConfig) else list(range(len(node)))
        later = []
        for key in keys:
            path = (f"{prefix}.{key}" if prefix else str(key)) if isinstance(node, DictConfig) else f"{prefix}[{key}]"
            if not prefix and key == "hydra":
                continue
            try:
                value = _resolve(node, key, path)
            except _Unresolved as exc:
                failed.append(exc)
                continue
            if isinstance(value, (DictConfig, ListConfig)):
                later.append((path, value))
            else:
                found.append((path, value))
        for path, value in later:
            walk(value, path)
            try:
                found.append((path, OmegaConf.to_container(value, resolve=True)))
            except Exception:  # noqa: BLE001 - a value inside failed, and is in `failed` already
                pass

    walk(cfg, "")
    if failed:
        root = next((exc for exc in failed if not exc.refers), failed[0])
        raise ConfigError(root.sentence)
    return found


def _text_problem(key: str, value: Any) -> None:
    from lme.data.validate import text_problem

    if isinstance(value, str) and (problem := text_problem(value)) is not None:
        raise ConfigError(f"{key}: {problem}.")
    if isinstance(key, str) and (problem := text_problem(key)) is not None:
        raise ConfigError(f"a config key {problem}.")


def validate_config(cfg: DictConfig, *, data: bool = True) -> None:
    """Raise `LmeError` (one sentence: key, rule, value) for the first value of `cfg` that breaks its rule.

    `data=False` skips the checks that need the data file (`dataset.path`), for commands that do
    not read it."""
    rules = _rules(cfg)
    values: dict[str, Any] = {}
    for path, value in _leaves(cfg):
        _text_problem(path, value)
        values[path] = value
        if path == "dataset.path" and not data:
            continue
        for pattern, check in rules:
            if pattern.fullmatch(path):
                check(path, value)
                break
    for group in ("memory", "view"):
        reserve = values.get(f"{group}.overflow_reply_reserve_bytes")
        total = values.get(f"{group}.max_bytes")
        if _is_int(reserve) and _is_int(total) and reserve >= total:
            raise ConfigError(
                f"{group}.overflow_reply_reserve_bytes: expected less than {group}.max_bytes ({total}), got {reserve}."
            )
