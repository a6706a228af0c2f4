"""Composing the config from overrides, as a run would, for the subcommands (and the checks before a run).

`compose_config` returns the config a run with these overrides would get; a composition error becomes one
`LmeError` sentence with Hydra's list of valid options (`config_error_message`). `split_overrides` separates
`key=value` overrides from a subcommand's own arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from omegaconf import DictConfig

from lme import CONF_DIR
from lme.errors import LmeError, first_line


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The config a run with these overrides would get (without Hydra's run-time keys)."""
    import lme.resolvers  # noqa: F401
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=prereg_alias(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise LmeError(f"config overrides {' '.join(overrides)!r}: {config_error_message(exc)}") from None


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


def config_error_message(exc: BaseException) -> str:
    """A Hydra composition error as lme prints it: Hydra's first line (and the first line of an
    OmegaConf cause) as the sentence, then Hydra's own hints and list of valid options, one per line;
    the config search path and the HYDRA_FULL_ERROR hint are left out."""
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
    if not rest and not head.endswith((".", "?", "!")):
        head += "."
    return "\n".join([head, *rest])


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
