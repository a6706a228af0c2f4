"""Composing the config from overrides, as a run would, for the subcommands (and the checks before a run).

`compose_config` returns the config a run with these overrides would get; a composition error becomes one
`LmeError` sentence with Hydra's list of valid options (`config_error_message`). `split_overrides` separates
`key=value` overrides from a subcommand's own arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig

from lme import CONF_DIR
from lme.errors import LmeError


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
