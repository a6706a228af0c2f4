"""`python -m lme`: the Hydra entry point."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import lme.resolvers  # noqa: F401
from lme.errors import LmeError


@hydra.main(version_base="1.3", config_path=str(Path(__file__).parent / "conf"), config_name="config")
def main(cfg: DictConfig) -> None:
    from lme.app import run_job

    try:
        run_job(cfg)
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


_FLAGS = ("-m", "--multirun")


def hoist_flags(argv: list[str]) -> list[str]:
    """Put `-m`/`--multirun` first so `+design=x -m seed=1,2,3` parses: Hydra's argparse
    takes overrides as one positional list and rejects overrides on both sides of a flag."""
    flags = [arg for arg in argv[1:] if arg in _FLAGS]
    rest = [arg for arg in argv[1:] if arg not in _FLAGS]
    return [argv[0], *flags[:1], *rest]


def run_hydra(args: list[str]) -> None:
    sys.argv = hoist_flags([sys.argv[0], *args])
    main()


def entry() -> None:
    """`python -m lme` and the `lme` script: a subcommand, or a Hydra run."""
    from lme.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    entry()
