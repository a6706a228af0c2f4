"""The Hydra run: `python -m lme [overrides] [-m]` composes the config, turns it into a design
(`lme.config.design.design_from_config`) and runs `lme.study.job.run_job`, with
Hydra's composition errors reported as lme's own (one `lme: error:` line with the valid options, exit 2)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import hydra
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import DictConfig

import lme.config.resolvers  # noqa: F401
from lme.config.compose import config_error_message
from lme import CONF_DIR
from lme.util.errors import LmeError


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    from lme.config.design import design_from_config
    from lme.study.job import run_job

    try:
        run_job(design_from_config(cfg))
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        from lme.study.multirun import note_job_error

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
        except LmeError as exc:  # a file Hydra keeps for the job could not be written (`_save_config_whole`)
            _exit_file_error(str(exc), getattr(exc, "advice", None))
        except OSError as exc:  # Hydra's own writes (a sweep's multirun.yaml): a full disk, a read-only folder
            _exit_file_error(_os_error_sentence(exc), _resume_advice())
        except Exception as exc:  # noqa: BLE001 - handed to Hydra's own reporting, unchanged
            failure = exc

            def again() -> Any:
                raise failure

            return original(again)

    hydra_utils.run_and_report = run_and_report
    from hydra.core import utils as core_utils

    saving = core_utils._save_config
    core_utils._save_config = _save_config_whole
    try:
        yield
    except _COMPOSITION_ERRORS as exc:  # raised outside run_and_report (`--help`, `--cfg` paths)
        _exit_config_error(exc)
    finally:
        hydra_utils.run_and_report = original
        core_utils._save_config = saving


def _exit_config_error(exc: BaseException) -> NoReturn:
    from lme.config.compose import split_overrides

    overrides = split_overrides(sys.argv[1:])[0]  # for "did you mean": the config they compose
    print(f"lme: error: {config_error_message(exc, overrides)}", file=sys.stderr, flush=True)
    sys.exit(2)


def _save_config_whole(cfg: Any, filename: str, output_dir: Any) -> None:
    """Hydra's `_save_config` (a job's `.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`), written whole or
    not at all (`lme.util.files.write_text_atomic`): a full disk or a read-only folder leaves the files of an earlier
    run of the job as they were, and is a `LmeError` naming the file; Hydra's own opens the file for writing
    first, so a full disk left it empty or cut."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from lme.util.files import write_text_atomic

    quiet_log_errors()  # Hydra configured the job's log just before
    try:
        write_text_atomic(Path(output_dir) / filename, OmegaConf.to_yaml(cfg))
    except LmeError as exc:  # what to do, said while Hydra still knows the job (it forgets it as the error leaves)
        exc.advice = _resume_advice()  # type: ignore[attr-defined]
        raise


def _resume_advice() -> str | None:
    """The running Hydra job's folder, what it keeps and the command that resumes it; None outside a job."""
    try:
        from hydra.core.hydra_config import HydraConfig

        output_dir = str(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - before Hydra set up a job (a sweep's own files): no job folder yet
        return None
    from pathlib import Path

    from lme.config.design import launch
    from lme.study.resume import job_resume_command
    from lme.tracking.runs import OUTCOMES_ARTIFACT

    return (f"lme: Nothing more was done; what {Path(output_dir) / OUTCOMES_ARTIFACT} journals is kept. Once the file "
            "can be written, resume with: " + job_resume_command(output_dir, launch()))


def _os_error_sentence(exc: OSError) -> str:
    """One sentence for an `OSError` Hydra let through while writing its files: the file (the error's, else
    the file object open in the innermost frame that has one, as Hydra's and OmegaConf's writes keep it),
    the system's reason, what to do."""
    from lme.util.files import cannot_write

    name, found = exc.filename, None
    trace = exc.__traceback__
    while name is None and trace is not None:  # outermost frame first: the last found is the innermost
        for local in ("file", "f"):
            handle = trace.tb_frame.f_locals.get(local)
            if isinstance(getattr(handle, "name", None), str):
                found = handle.name
        trace = trace.tb_next
    return str(cannot_write(name if name is not None else found or "a file of the job's folder", exc))


def _exit_file_error(sentence: str, advice: str | None = None) -> NoReturn:
    """A file Hydra writes for the job (its `.hydra/` files, a sweep's multirun.yaml) could not be written:
    the sentence, what is kept and how to resume, exit 2."""
    from lme.study.multirun import note_job_error

    print(f"lme: error: {sentence}", file=sys.stderr, flush=True)
    note_job_error(sentence)  # a multirun's parent, if any, ends FAILED with this sentence
    if advice:
        print(advice, file=sys.stderr, flush=True)
    sys.exit(2)


def quiet_log_errors() -> None:
    """The log files of the root logger (Hydra's `hydra_run.log`): a line that cannot be written (a full disk, a
    file size limit) is said once, in one sentence naming the file, instead of `logging`'s traceback for every
    line; the job goes on (lme reads nothing from the log: its journal keeps what was computed)."""
    import logging
    import types

    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and not getattr(handler, "lme_quiet", False):
            handler.lme_quiet = True  # type: ignore[attr-defined]
            handler.handleError = types.MethodType(_log_error, handler)  # type: ignore[method-assign]


def _log_error(handler: Any, record: Any) -> None:
    error = sys.exc_info()[1]
    if getattr(handler, "lme_told", False):
        return
    handler.lme_told = True
    reason = getattr(error, "strerror", None) or (type(error).__name__ if error is not None else "an error")
    print(f"lme: note: {handler.baseFilename}: a log line could not be written ({reason}); lme reads nothing from "
          "this log, so the job goes on (free space to keep later lines).", file=sys.stderr, flush=True)
