"""`python -m lme` and the `lme` script: the command line (`lme.cli`), Hydra runs through `lme.study.hydra_run`."""

from __future__ import annotations

import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    print("lme: interrupted.", file=sys.stderr, flush=True)
    sys.exit(130)


if __name__ == "__main__":  # Ctrl-C while Hydra and lme import: one line, not a traceback (`entry` restores it)
    signal.signal(signal.SIGINT, _interrupted_while_starting)


def entry() -> None:
    """`python -m lme` and the `lme` script: a subcommand, or a Hydra run."""
    from lme.cli import main as cli_main
    from lme.util.progress import quiet_library_bars

    quiet_library_bars()  # before any library is imported: only lme's own bars and lines show
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `python -m lme --help | head` ends quietly, as a command should
    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here, KeyboardInterrupt: each stage says what it kept
    try:
        cli_main()
    except KeyboardInterrupt:  # outside a job (a job says what it kept and how to resume)
        print("lme: interrupted.", file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    entry()
