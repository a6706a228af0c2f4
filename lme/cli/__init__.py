"""The `lme` command line: a run (Hydra) or a subcommand.

`python -m lme [overrides] [-m]` runs an evaluation through Hydra.
`python -m lme SUBCOMMAND ...` runs a tool that composes the same config from
the same overrides (`key=value`, `+design=NAME`) without starting a run.
Subcommands register here by module path so `--help` never imports them. Each is one module of
this package; those that take options build their parser with `lme.cli.parser.make_parser`, so a
usage error is one line (`lme: error: ...`, exit 2) and `--help` exits 0 alike.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

from lme import CONF_DIR  # noqa: F401  (the config root; also imported from here)
from lme.config.compose import compose_config, prereg_alias, split_overrides  # noqa: F401  (also imported from here)
from lme.util.errors import EXIT_INCOMPLETE, EXIT_INTERRUPTED, LmeError

# name -> (module, function taking argv, one-line description)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {}


def register(name: str, module: str, function: str, description: str) -> None:
    SUBCOMMANDS[name] = (module, function, description)


register("data", "lme.cli.data", "main", "fetch and verify datasets and judge templates; dataset statistics")
register("retrieval", "lme.cli.retrieval", "main", "rank every question's turns and report recall@k / NDCG@k")
register("memory", "lme.cli.memory", "main", "build the memory the reader would see (no model call): text, payload or figures")
register("rules", "lme.cli.rules", "main", "list the questions each question-text re-read rule selects (no model call)")
register("report", "lme.cli.report", "main", "design-vs-design tables, paired bootstrap intervals, re-read steps, cost, plots")
register("export", "lme.cli.interop", "export_main", "write a job's answers as LongMemEval's hypothesis JSONL")
register("import-eval", "lme.cli.interop", "import_main", "read an official .eval-results file; print the official summary lines")
register("prereg", "lme.cli.prereg", "main", "freeze a composed design into a preregistration record; verify against it")
register("audit", "lme.cli.audit", "main", "scan instruction, paragraph, rule and example texts for reference answers")
register("estimate", "lme.cli.estimate", "main", "expected calls and dollars per design and seed, before any model call")
register("runs", "lme.cli.runs", "main", "mark MLflow runs left RUNNING by a killed process as KILLED (runs repair)")
register("ui", "lme.cli.ui", "main", "MLflow's UI on the study's store, opening on lme's runs view (accuracy, design, seed)")
register("embed", "lme.cli.embed", "main", "fill the embedding cache ahead of a study: every turn and question the retriever will embed")
register("cache", "lme.cli.cache", "main", "merge call caches (cache merge); export and import embedding vectors (cache export|import FILE)")
register("cost", "lme.cli.cost", "main", "a study's total spend from its job folders and ledger: per design and in all, paid vs from cache")


def _usage() -> str:
    lines = ["usage: python -m lme [overrides] [-m]    run an evaluation (Hydra)"]
    for name, (_, _, description) in sorted(SUBCOMMANDS.items()):
        lines.append(f"       python -m lme {name} ...".ljust(40) + description)
    lines.append("       python -m lme help".ljust(40) + "this list (--help: also a run's config groups and config)")
    return "\n".join(lines)


HELP_WORDS = ("help", "commands")
HELP_FLAGS = ("-h", "--help")


def wants_help(args: Sequence[str]) -> bool:
    """`python -m lme --help` / `-h` (anywhere, for a run): lme's usage first, then Hydra's help."""
    return any(arg in HELP_FLAGS for arg in args)


def print_help(args: Sequence[str]) -> None:
    """lme's usage, then Hydra's help for a run (config groups, the composed config); exits 0."""
    print(_usage())
    print("\nA run's overrides and config groups (Hydra):\n", flush=True)
    from lme.study.hydra_run import run_hydra

    run_hydra([*prereg_alias(args), "hydra.help.app_name=python -m lme"])
    sys.exit(0)


def unknown_command(args: Sequence[str]) -> str | None:
    """The error for a first argument that is a bare word (not `key=value`, not a flag, not `+x`/`~x`)
    and not a subcommand; None when the first argument is a subcommand or an override."""
    if not args:
        return None
    word = args[0]
    if "=" in word or word.startswith(("-", "+", "~")) or word in SUBCOMMANDS or word in HELP_WORDS:
        return None
    import difflib

    close = difflib.get_close_matches(word, [*SUBCOMMANDS, "help"], n=1)
    if close:
        return f"unknown command {word!r}; did you mean {close[0]!r}?"
    return (f"unknown command {word!r}; `python -m lme help` lists the commands, "
            "and a run takes key=value overrides.")


def run_subcommand(name: str, argv: Sequence[str]) -> int:
    module, function, _ = SUBCOMMANDS[name]
    target: Callable[[Sequence[str]], int | None] = getattr(importlib.import_module(module), function)
    try:
        return int(target(list(argv)) or 0)
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        return 2


def refuse_secret_arguments_or_exit(args: Sequence[str]) -> None:
    """A key anywhere in the arguments (a run's or a subcommand's) stops here with one sentence and exit 2,
    before anything is written."""
    from lme.util.secrets import refuse_secret_arguments

    try:
        refuse_secret_arguments(args)
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


# Hydra's flags that print or inspect instead of running (`--cfg job`, `--info`, ...): the config is still
# checked, but nothing a run needs (a key, the data file, the judge templates) is asked for.
_NOT_A_RUN = ("--cfg", "-c", "--info", "-i", "--hydra-help", "--shell-completion", "-sc", "--version")


def check_config_before_hydra(args: Sequence[str]) -> None:
    """The config a run (or each job of a multirun, one sweep value at a time) would compose, checked before
    Hydra starts, which writes the overrides and the composed config into the run directory (and, for a
    multirun, lme's callback creates the parent MLflow run) before any job runs: a key anywhere in it (a design
    file, a user's config dir on `hydra.searchpath`) and every value against its rule (`lme.config.check`).
    Each combination is composed once for both checks. Then, for every combination, what its job would check
    before its run (`lme.study.before_run`: models' credentials, judge templates, the data file, a preregistration
    record), each distinct thing once. Anything wrong stops with one sentence and exit 2 before any directory
    or MLflow run exists; a config that does not compose is left to Hydra, which lists the valid options."""
    from lme.config.design import design_from_config
    from lme.config.compose import override_combinations
    from lme.util.secrets import refuse_secrets

    designs = []
    for overrides in override_combinations(args, every_value=True) or []:
        try:
            config = compose_config(overrides)
        except LmeError:
            return
        try:
            refuse_secrets(config, where="the composed config")  # before resolving: a key never reaches a message
            designs.append(design_from_config(config))  # every value, the instructions, paragraphs vs memory
        except LmeError as exc:
            print(f"lme: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)
    if any(arg.split("=", 1)[0] in _NOT_A_RUN for arg in args):
        return
    from lme.study.before_run import check_before_run

    try:
        check_before_run(designs)
    except LmeError as exc:
        print(f"lme: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m lme ...`: every line it prints (its messages, Hydra's and litellm's logs, a traceback) goes through
    `lme.util.secrets.clean`."""
    from lme.util.secrets import cleaned_output

    with cleaned_output():
        _main(argv)


# The environment variables whose values lme reads as paths or URIs: each must be UTF-8, as the arguments.
_UTF8_ENV_PREFIXES = ("LME_", "MLFLOW_")
_UTF8_ENV_NAMES = ("HOME", "TMPDIR", "XDG_CACHE_HOME")
_MARKED = "\\xNN marks each byte that is not"


def printable(value: str) -> str:
    """`value` quoted, a byte that is not UTF-8 (Python's surrogate escape) shown as `\\xNN`."""
    shown = "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c if c.isprintable()
                    else repr(c)[1:-1] for c in value)
    return f"'{shown}'"


def not_utf8(args: Sequence[str], environ: Mapping[str, str] | None = None, cwd: str | None = None) -> str | None:
    """The one sentence for the first argument, the current directory, or an lme / MLflow environment variable
    (`_UTF8_ENV_PREFIXES`, `_UTF8_ENV_NAMES`) whose bytes are not UTF-8 (Hydra's parser and MLflow's store fail on
    them, deep inside); None when all are."""
    import os

    def bad(value: str) -> bool:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    for number, arg in enumerate(args, 1):
        if bad(arg):
            return (f"argument {number}, {printable(arg)}, is not UTF-8 text ({_MARKED}); lme's paths and values must "
                    "be UTF-8: rename the file or folder it names, or pass another.")
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError as exc:
            return (f"the current directory cannot be read ({exc.strerror or exc}); cd to a folder that exists "
                    "and run again.")
    if bad(cwd):
        return (f"the current directory, {printable(cwd)}, is not UTF-8 text ({_MARKED}); lme writes its outputs and "
                "store relative to it: run lme from a folder whose path is UTF-8.")
    environ = os.environ if environ is None else environ
    for name in sorted(environ):
        if not (name.startswith(_UTF8_ENV_PREFIXES) or name in _UTF8_ENV_NAMES):
            continue
        if bad(name) or bad(environ[name]):
            return (f"the environment variable {printable(name)}={printable(environ[name])} is not UTF-8 text "
                    f"({_MARKED}); set it to a UTF-8 path or value (rename the folder it names), or unset it.")
    return None


def _main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    refusal = not_utf8(args)  # before Hydra's parser or MLflow's store meet such bytes
    if refusal is not None:
        print(f"lme: error: {refusal}", file=sys.stderr, flush=True)
        sys.exit(2)
    refuse_secret_arguments_or_exit(args)  # before anything is written
    if args and args[0] in SUBCOMMANDS:
        sys.exit(run_subcommand(args[0], args[1:]))
    if args and args[0] in HELP_WORDS:
        print(_usage())
        return
    if wants_help(args):
        print_help(args)
    unknown = unknown_command(args)
    if unknown is not None:
        print(f"lme: error: {unknown}", file=sys.stderr, flush=True)
        sys.exit(2)
    check_config_before_hydra(prereg_alias(args))
    from lme.study.hydra_run import run_hydra

    try:
        run_hydra(prereg_alias(args))
    except KeyboardInterrupt:  # outside a job's own handling (loading, between jobs): one line, no traceback
        print("lme: interrupted.", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(study_exit_status())


def study_exit_status() -> int:
    """0 when every job of this process finished whole; `EXIT_INCOMPLETE` when a job finished with missing
    answers or verdicts, or a multirun's job failed (README, "Exit statuses")."""
    job = sys.modules.get("lme.study.job")
    tracking = sys.modules.get("lme.tracking.runs")
    incomplete = bool(job is not None and job.INCOMPLETE_JOBS)
    failed = bool(tracking is not None and tracking.FAILED_STUDIES)
    return EXIT_INCOMPLETE if incomplete or failed else 0
