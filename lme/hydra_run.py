"""The Hydra run: `python -m lme [overrides] [-m]` composes the config, turns it into a design
(`lme.design.design_from_config`) and runs `lme.job.run_job`, with
Hydra's composition errors reported as lme's own (one `lme: error:` line with the valid options, exit 2)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import hydra
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import DictConfig

import lme.resolvers  # noqa: F401
from lme.compose import config_error_message
from lme import CONF_DIR
from lme.errors import LmeError


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from lme.design import design_from_config
    from lme.job import run_job

    try:
        run_job(design_from_config(cfg))
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        from lme.multirun import note_job_error

        note_job_error(str(exc))  # a multirun's parent, if any, ends FAILED with this sentence
        sys.exit(2)


_FLAGS = ("-m", "--multirun")
# Hydra's errors for overrides and configs that do not compose (MissingConfigException is a
# ConfigCompositionException): the user's to fix, reported in one sentence, exit 2.
_COMPOSITION_ERRORS = (ConfigCompositionException, OverrideParseException)


def hoist_flags(argv: list[str]) -> list[str]:
    """Put `-m`/`--multirun` first so `+design=x -m seed=1,2,3` parses: Hydra's argparse
    takes overrides as one positional list and rejects overrides on both sides of a flag."""
    flags = [arg for arg in argv[1:] if arg in _FLAGS]
    rest = [arg for arg in argv[1:] if arg not in _FLAGS]
    return [argv[0], *flags[:1], *rest]


def run_hydra(args: list[str]) -> None:
    sys.argv = hoist_flags([sys.argv[0], *args])
    with config_errors_exit_2():
        main()


@contextmanager
def config_errors_exit_2() -> Iterator[None]:
    """A composition error (an unknown config group option, an unknown key, an override that does not
    parse) is the user's: one `lme: error:` line with Hydra's list of valid options, exit 2, no
    traceback, whatever HYDRA_FULL_ERROR says. Hydra reports the errors of a run through
    `hydra._internal.utils.run_and_report` (a traceback or its message, then exit 1); while the run
    lasts, that function is wrapped so these errors come here first. Any other error keeps Hydra's
    reporting."""
    from hydra._internal import utils as hydra_utils

    original = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        try:
            return func()
        except _COMPOSITION_ERRORS as exc:
            _exit_config_error(exc)
        except Exception as exc:  # noqa: BLE001 - handed to Hydra's own reporting, unchanged
            failure = exc

            def again() -> Any:
                raise failure

            return original(again)

    hydra_utils.run_and_report = run_and_report
    try:
        yield
    except _COMPOSITION_ERRORS as exc:  # raised outside run_and_report (`--help`, `--cfg` paths)
        _exit_config_error(exc)
    finally:
        hydra_utils.run_and_report = original


def _exit_config_error(exc: BaseException) -> NoReturn:
    from lme.compose import split_overrides

    overrides = split_overrides(sys.argv[1:])[0]  # for "did you mean": the config they compose
    print(f"lme: error: {config_error_message(exc, overrides)}", file=sys.stderr, flush=True)
    sys.exit(2)
