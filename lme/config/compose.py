"""Composing the config from overrides, as a run would, for the subcommands (and the checks before a run).

`compose_config` returns the config a run with these overrides would get; a composition error becomes one
`LmeError` sentence with Hydra's list of valid options (`config_error_message`). `split_overrides` separates
`key=value` overrides from a subcommand's own arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from omegaconf import DictConfig

from lme import CONF_DIR
from lme.util.errors import LmeError, first_line


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The config a run with these overrides would get (without Hydra's run-time keys)."""
    import lme.config.resolvers  # noqa: F401
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=prereg_alias(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        message = config_error_message(exc, overrides)
        raise LmeError(f"config overrides {' '.join(overrides)!r}: {message}") from None


def expand_sweeps(overrides: Sequence[str]) -> list[list[str]]:
    """`seed=1,2,3 +design=a,b` -> one override list per combination, in the order Hydra's basic sweeper runs
    them (the product of every key's values, keys in first-seen order, a repeated key's last value winning)."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise LmeError(f"config overrides {' '.join(overrides)!r}: {first_line(exc)}") from None
    values: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise LmeError(f"config override {key}: a {override.value_type.name if override.value_type else ''} "
                           "sweep has no list of values to expand; give the values (seed=1,2,3 or range(1,4)).")
    return [list(combo) for combo in itertools.product(*values.values())] or [[]]


def in_defaults(group: str) -> bool:
    """Whether the primary config's defaults list selects config group `group` (then `group=NAME` overrides
    it; otherwise it is added with `+group=NAME`)."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.load(CONF_DIR / "config.yaml").get("defaults") or []
    return any(isinstance(entry, Mapping) and group in entry for entry in defaults)


def prereg_alias(overrides: Sequence[str]) -> list[str]:
    """`+prereg=FILE` -> `prereg=FILE`: `prereg` is a config key (null), which Hydra refuses to add again."""
    return [arg[1:] if arg.startswith("+prereg=") else arg for arg in overrides]


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra overrides (`key=value`, `+key=value`, `~key`) from the other arguments."""
    overrides = [arg for arg in argv if ("=" in arg or arg.startswith("~")) and not arg.startswith("-")]
    rest = [arg for arg in argv if arg not in overrides]
    return overrides, rest


def config_error_message(exc: BaseException, overrides: Sequence[str] | None = None) -> str:
    """A Hydra composition error as lme prints it: Hydra's first line (and the first line of an
    OmegaConf cause) as the sentence, then Hydra's own hints and list of valid options, one per line;
    the config search path and the HYDRA_FULL_ERROR hint are left out.

    With the command line's `overrides`, an unknown key or group option gets "did you mean" (`did_you_mean`):
    the closest keys of the config those overrides compose (`limt=3` -> `limit=3`, `reader.modle=x` ->
    `reader.model=x`), or the closest options of the group, a subfolder's designs included (`study/12_recall`),
    which are listed with the group's options."""
    from omegaconf.errors import OmegaConfBaseException

    lines = [line.rstrip() for line in str(exc).strip().splitlines()]
    head = lines[0].strip() if lines else type(exc).__name__
    override = getattr(exc, "override", None)  # OverrideParseException: the override that does not parse
    if override and str(override) not in head:
        head = f"override {override!r}: {head}"
    if head.startswith("In 'config': "):  # the primary config: saying so adds nothing
        head = head[len("In 'config': "):]
    cause = exc.__cause__
    if isinstance(cause, OmegaConfBaseException) and str(cause).strip():
        reason = str(cause).strip().splitlines()[0].strip()
        if reason and reason not in head:
            head = f"{head.rstrip('.')}: {reason}"
    rest: list[str] = []
    for line in lines[1:]:
        if line.strip().startswith("Config search path") or "HYDRA_FULL_ERROR" in line:
            break
        if line.strip():
            rest.append(f"    {line.strip()}" if line.startswith(("\t", " ")) else f"  {line.strip()}")
    if overrides is not None:
        head, rest = did_you_mean(head, rest, overrides)
    if not rest and not head.endswith((".", "?", "!")):
        head += "."
    return "\n".join([head, *rest])


# -- "did you mean": the closest known keys and group options ----------------------------------------------

_UNKNOWN_KEY = re.compile(r"^Could not override '([^']+)': Key '[^']+' is not in struct")
_UNKNOWN_OPTION = re.compile(r"^Could not find '([^']+)'")
_OPTIONS_IN = re.compile(r"^Available options in '([^']+)':$")
CLOSE_ENOUGH = 0.6  # difflib's ratio for a suggestion (its get_close_matches default)


def did_you_mean(head: str, rest: list[str], overrides: Sequence[str]) -> tuple[str, list[str]]:
    """`head` and `rest` (`config_error_message`'s sentence and indented lines) with the closest known keys or
    group options added: an unknown key's sentence ends `; did you mean limit=3?` and Hydra's hint to append it
    (`+limt=3`) says it adds a new key; an unknown option's sentence ends `; did you mean +design=pipeline?` and
    the group's list gains the options in its subfolders (a design's `study/NAME`). Unchanged when nothing is
    close."""
    key = _UNKNOWN_KEY.match(head)
    if key:
        name = key.group(1)
        value = _override_value(overrides, name)
        close = close_keys(name, _config_for_suggestions(overrides, name))
        if not close:
            return head, rest
        wanted = " or ".join(f"{found}={value}" if value is not None else found for found in close)
        hints = [f"  To add a new key {name} instead: +{name}={value if value is not None else '...'}"
                 if line.strip().startswith("To append to your config use") else line for line in rest]
        return f"{head}; did you mean {wanted}?", hints
    option = _UNKNOWN_OPTION.match(head)
    if option:
        path = option.group(1)
        listed = [match.group(1) for line in rest if (match := _OPTIONS_IN.match(line.strip()))]
        group = listed[0] if listed else path.split("/", 1)[0]
        if not path.startswith(group + "/"):
            return head, rest
        wrong = path[len(group) + 1:]
        shown = [line.strip() for line in rest[1:]] if listed else []
        nested = [name for name in nested_options(group) if name not in shown]
        close = close_names(wrong, [*shown, *nested])
        if listed and nested:
            rest = [*rest, *(f"    {name}" for name in nested)]
        if not close:
            return head, rest
        written = _override_for_option(overrides, group, wrong)
        wanted = " or ".join(f"{written}{found}" for found in close)
        return f"{head}; did you mean {wanted}?", rest
    return head, rest


def _key_of(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _override_value(overrides: Sequence[str], key: str) -> str | None:
    values = [override.split("=", 1)[1] for override in overrides if "=" in override and _key_of(override) == key]
    return values[-1] if values else None


def _override_for_option(overrides: Sequence[str], group: str, option: str) -> str:
    """How the command line chose the group (`+design=`, `reader=`), to write the suggestion the same way."""
    for override in overrides:
        if "=" in override and _key_of(override).split("@", 1)[0] == group and option in override.split("=", 1)[1]:
            return override.split("=", 1)[0] + "="
    return f"{group}="


def _config_for_suggestions(overrides: Sequence[str], wrong_key: str) -> Any:
    """The config the command line composes without its unknown key (a sweep at its first value), as plain
    data: the keys a suggestion may name; the default config when that does not compose; None when neither does."""
    from omegaconf import OmegaConf

    rest = [override for override in overrides if "=" not in override or _key_of(override) != wrong_key]
    combinations = override_combinations(rest) or [[]]
    for attempt in (combinations[0], []):
        try:
            config = _compose_quietly(attempt)
        except Exception:  # noqa: BLE001 - another error in the overrides: try the default config
            continue
        data = OmegaConf.to_container(config, resolve=False)
        if isinstance(data, dict):
            data.pop("hydra", None)
        return data
    return None


def _compose_quietly(overrides: Sequence[str]) -> Any:
    """The config `overrides` compose, outside any Hydra run (the one that failed is ending with exit 2)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside `python -m lme`'s failed Hydra run
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=prereg_alias(list(overrides)))


def _ratio(a: str, b: str) -> float:
    import difflib

    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()


def close_names(wrong: str, names: Sequence[str], n: int = 3, separator: str = "/") -> list[str]:
    """The names closest to `wrong`, closest first: at most `n`, each with difflib's ratio at least
    `CLOSE_ENOUGH` and within 0.1 of the closest (`limt`: `limit`, not also `split`). A name with parts
    (`study/12_recall`, `memory.top_k`: `separator`) is also compared by its last part, with and without a
    leading number."""
    scored = []
    for name in dict.fromkeys(names):
        base = name.rsplit(separator, 1)[-1]
        forms = {name, base, re.sub(r"^\d+_", "", base)}
        score = max(_ratio(wrong, form) for form in forms)
        if score >= CLOSE_ENOUGH:
            scored.append((-score, name))
    scored.sort()
    return [name for score, name in scored[:n] if score <= scored[0][0] + 0.1]


def close_keys(key: str, config: Any, n: int = 3) -> list[str]:
    """The known keys closest to the unknown dotted `key` in `config` (plain data): the first part that is not
    there is matched among its siblings (`reader.modle` -> `reader.model`, `limt` -> `limit`); when none is
    close, that part among every key of the config by its last part (`retriever.top_kk` -> `memory.top_k`)."""
    if not isinstance(config, dict):
        return []
    parts = key.split(".")
    node: Any = config
    for index, part in enumerate(parts):
        if isinstance(node, dict) and part in node:
            node = node[part]
            continue
        siblings = [str(name) for name in node] if isinstance(node, dict) else []
        close = close_names(part, siblings, n)
        if close:
            return [".".join([*parts[:index], found, *parts[index + 1:]]) for found in close]
        wrong = ".".join(parts[index:])
        return [found for found in close_names(wrong, list(_dotted_keys(config)), n, separator=".")
                if not found.startswith("_") and not found.endswith("._target_")]
    return []


def _dotted_keys(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for name, value in node.items():
            path = f"{prefix}{name}"
            yield path
            yield from _dotted_keys(value, path + ".")


def nested_options(group: str) -> list[str]:
    """A group's options in its subfolders (`study/12_recall` for the `design` group): the YAML files that put
    their keys at the top of the config (`# @package _global_`, as designs do), which any `group=sub/name`
    places the same way. Other subfolders are groups of their own (`memory/writer`), not options."""
    root = CONF_DIR / group
    if not root.is_dir():
        return []
    names = []
    for path in sorted(root.rglob("*.yaml")):
        if path.parent == root:
            continue
        try:
            first = path.read_text(encoding="utf-8").lstrip().splitlines()[0]
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if first.replace(" ", "") == "#@package_global_":
            names.append(path.relative_to(root).with_suffix("").as_posix())
    return names


# -- the configs a command line can compose, checked before Hydra writes .hydra/config.yaml --

# Flags that make Hydra compose another primary config than lme's: the check leaves those runs to `run_job`.
_OTHER_PRIMARY = ("-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir", "--experimental-rerun",
                  "-sc", "--shell-completion")
MAX_COMPOSITIONS = 24


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def override_combinations(arguments: Sequence[str], every_value: bool = False) -> list[list[str]] | None:
    """The override lists whose composed configs cover every config file a run or multirun of these
    arguments can load: each sweep over a group (`+design=a,b`) is taken one value at a time, the other sweeps
    at their first value (numbers and dotted keys load no file, so only their first value is composed, unless
    `every_value`: then every value of every sweep is taken once, for checking each value). None when the run composes another primary config (`--config-name`, `--config-dir`, ...)."""
    if any(str(arg).split("=", 1)[0] in _OTHER_PRIMARY for arg in arguments):
        return None
    overrides = [arg for arg in arguments if ("=" in arg or arg.startswith("~")) and not arg.startswith("-")]
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parser = OverridesParser.create()
        parsed = [parser.parse_override(arg) for arg in overrides]
    except Exception:  # Hydra reports an override it cannot parse
        return [overrides]
    base: list[str] = []
    sweeps: list[tuple[int, str, list[str]]] = []
    for text, override in zip(overrides, parsed):
        if not override.is_sweep_override():
            base.append(text)
            continue
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # glob(...) needs the config repository: left to run_job's check
            values = []
        if not values:
            continue
        key = override.get_key_element()
        base.append(f"{key}={values[0]}")
        if every_value or ("." not in override.key_or_group and not all(_is_number(value) for value in values)):
            sweeps.append((len(base) - 1, key, values[1:]))
    combinations = [base]
    for index, key, rest in sweeps:
        for value in rest:
            combination = list(base)
            combination[index] = f"{key}={value}"
            combinations.append(combination)
    return combinations[:MAX_COMPOSITIONS]
