"""Reading a YAML file lme keeps or is given (preregistration records, a job's Hydra files), safely.

`yaml.safe_load` builds no objects, but it still expands aliases (a few hundred bytes of nested `*a`
references become billions of list items: minutes of CPU, then memory) and recurses once per nesting level.
lme never writes an alias (its own dumper ignores them) and Hydra's files have none, so `read_yaml` first
walks the document's events (no values built) and refuses any alias, nesting deeper than `MAX_DEPTH` or a
file larger than `MAX_BYTES`, each in one sentence naming the file; only then is the document loaded.
Every failure, from a missing file to bytes that are not UTF-8, is a `LmeError` naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lme.util.errors import LmeError

MAX_DEPTH = 64  # nesting levels; lme's records and Hydra's files use fewer than 10
MAX_BYTES = 16 * 1024 * 1024  # a preregistration record is a few KB, a job's hydra.yaml under 10 KB


def _loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, when built: ~10x the pure-Python one


def parse_yaml(text: str, what: str) -> Any:
    """The plain data of one YAML document; `what` names its source in the sentence of a `LmeError` (a
    syntax error, an alias, too deep)."""
    import yaml

    loader = _loader()
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise LmeError(f"{what}: holds a YAML alias (*{event.anchor}), which lme never writes; "
                               "restore the file lme wrote or write the value out in full.")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise LmeError(f"{what}: YAML nested deeper than {MAX_DEPTH} levels; "
                                   "this is not a file lme wrote: restore it.")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise LmeError(f"{what}: not valid YAML{where} ({type(exc).__name__}); restore the file or fix it.") from None
    except RecursionError:
        raise LmeError(f"{what}: YAML nested too deeply to read; this is not a file lme wrote: restore it.") from None


def read_yaml(path: str | Path, what: str | None = None) -> Any:
    """The plain data of the YAML file at `path`; one `LmeError` sentence naming it when it is missing, not a
    file, unreadable, larger than `MAX_BYTES`, not UTF-8 or not safe, plain YAML (see `parse_yaml`)."""
    path = Path(path)
    name = what or str(path)
    if path.exists() and not path.is_file() and not path.is_dir():  # a FIFO would block the read for ever
        raise LmeError(f"{name}: not a regular file (a pipe or a device); give the YAML file itself.")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise LmeError(f"{name}: file not found.") from None
    except IsADirectoryError:
        raise LmeError(f"{name}: a directory where a YAML file should be; move it away.") from None
    except OSError as exc:
        raise LmeError(f"{name}: cannot be read ({exc.strerror or type(exc).__name__}); check the file and its "
                       "permissions.") from None
    if len(data) > MAX_BYTES:
        raise LmeError(f"{name}: larger than {MAX_BYTES // (1024 * 1024)} MB, which no YAML file lme reads is; "
                       "restore the file lme wrote.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LmeError(f"{name}: not UTF-8 text (byte {exc.start}); restore the file lme wrote.") from None
    return parse_yaml(text, name)
