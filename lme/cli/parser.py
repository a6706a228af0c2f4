"""The one argument parser of lme's subcommands.

Every subcommand builds its parser with `make_parser(prog, description, ...)`, so all of them behave alike:

- a usage error (an unknown option, a missing or invalid argument) raises `LmeError` with one sentence,
  `"{prog}: {argparse's message}."` (and `" (usage: HINT)"` before the full stop when the subcommand gave
  a hint); `lme.cli.run_subcommand` prints it as `lme: error: ...` on one line of stderr and exits 2;
- `-h`/`--help` prints argparse's help to stdout and exits 0;
- sub-parsers (`add_subparsers().add_parser(...)`) are of the same class, so they behave the same way.

Config overrides (`key=value`, `+design=NAME`) are split off before parsing (`lme.config.compose.split_overrides`).
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from lme.util.errors import LmeError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one sentence (an `LmeError`), not usage + exit."""

    def __init__(self, *args: Any, hint: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hint = hint

    def error(self, message: str) -> NoReturn:
        hint = f" (usage: {self.hint})" if self.hint else ""
        raise LmeError(f"{self.prog}: {message.rstrip('.')}{hint}.")


def make_parser(prog: str, description: str, *, hint: str | None = None, **kwargs: Any) -> ArgumentParser:
    """The parser of one subcommand: `prog` as typed (`"python -m lme report"`), its description, an optional
    short usage `hint` added to error messages, and any other `argparse.ArgumentParser` keyword."""
    return ArgumentParser(prog=prog, description=description, hint=hint, **kwargs)
