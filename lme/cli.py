"""The `lme` command line: a run (Hydra) or a subcommand.

`python -m lme [overrides] [-m]` runs an evaluation through Hydra.
`python -m lme SUBCOMMAND ...` runs a tool that composes the same config from
the same overrides (`key=value`, `+design=NAME`) without starting a run.
Subcommands register here by module path so `--help` never imports them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig

from lme.errors import LmeError

CONF_DIR = Path(__file__).parent / "conf"

# name -> (module, function taking argv, one-line description)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {}


def register(name: str, module: str, function: str, description: str) -> None:
    SUBCOMMANDS[name] = (module, function, description)


register("data", "lme.data.cli", "main", "fetch and verify datasets and judge templates; dataset statistics")
register("retrieval", "lme.retrieval.cli", "main", "rank every question's turns and report recall@k / NDCG@k")
register("memory", "lme.memory.cli", "main", "build the memory the reader would see (no model call): text, payload or figures")
register("rules", "lme.answer.cli", "main", "list the questions each question-text re-read rule selects (no model call)")
register("report", "lme.report_cli", "main", "design-vs-design tables, paired bootstrap intervals, re-read steps, cost, plots")
register("export", "lme.interop_cli", "export_main", "write a job's answers as LongMemEval's hypothesis JSONL")
register("import-eval", "lme.interop_cli", "import_main", "read an official .eval-results file; print the official summary lines")
register("prereg", "lme.prereg", "main", "freeze a composed design into a preregistration record; verify against it")
register("audit", "lme.audit", "main", "scan instruction, paragraph, rule and example texts for reference answers")
register("estimate", "lme.models.estimate", "main", "expected calls and dollars per design and seed, before any model call")
register("cache", "lme.models.cache_cli", "main", "merge per-machine call caches into one (cache merge SOURCE... [--into FILE])")


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
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LmeError(f"config overrides {' '.join(overrides)!r}: {first_line}") from None


def prereg_alias(overrides: Sequence[str]) -> list[str]:
    """`+prereg=FILE` -> `prereg=FILE`: `prereg` is a config key (null), which Hydra refuses to add again."""
    return [arg[1:] if arg.startswith("+prereg=") else arg for arg in overrides]


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra overrides (`key=value`, `+key=value`, `~key`) from the other arguments."""
    overrides = [arg for arg in argv if ("=" in arg or arg.startswith("~")) and not arg.startswith("-")]
    rest = [arg for arg in argv if arg not in overrides]
    return overrides, rest


def _usage() -> str:
    lines = ["usage: python -m lme [overrides] [-m]    run an evaluation (Hydra)"]
    for name, (_, _, description) in sorted(SUBCOMMANDS.items()):
        lines.append(f"       python -m lme {name} ...".ljust(40) + description)
    return "\n".join(lines)


def run_subcommand(name: str, argv: Sequence[str]) -> int:
    module, function, _ = SUBCOMMANDS[name]
    target: Callable[[Sequence[str]], int | None] = getattr(importlib.import_module(module), function)
    try:
        return int(target(list(argv)) or 0)
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        return 2


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in SUBCOMMANDS:
        sys.exit(run_subcommand(args[0], args[1:]))
    if args and args[0] in ("help", "commands"):
        print(_usage())
        return
    from lme.__main__ import run_hydra

    run_hydra(prereg_alias(args))
