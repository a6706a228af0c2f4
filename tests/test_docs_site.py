"""The documentation site and the commands in it.

- `mkdocs build --strict` builds docs/ with mkdocs.yml (Material theme): a broken link or anchor, or a page left
  out of the navigation, fails the build (mkdocs.yml's `validation` makes each a warning, `--strict` an error);
- every page under docs/ is in mkdocs.yml's `nav`;
- every `python -m lme ...` command of README.md and docs/*.md (in ```bash blocks, in `$ ` lines and indented
  blocks, and in backticks) is checked as written: a run composes (`compose_design(args, check=True)`, the
  sweep's first values, as tests/test_study_designs.py composes the study's designs), and a subcommand's
  arguments are accepted by its own argument parser (`lme.cli.parser.ArgumentParser`) and its overrides
  compose. Placeholders (`FILE`, `DIR`, `...`) are replaced or dropped by the explicit rules below; the few
  commands that cannot be checked are named in UNCHECKED with the reason.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from lme.cli import HELP_WORDS, SUBCOMMANDS, unknown_command
from lme.config.design import compose_design
from lme.data.sample import SAMPLE_PATH
from lme.util.errors import LmeError
from shared_data import STUDY_INSTRUCTIONS as STUDY_FILE
from shared_data import available

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


# -- the site ---------------------------------------------------------------------------------------------------


def nav_pages(nav) -> list[str]:
    """Every page file the nav names, nested sections included."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


def test_every_page_under_docs_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert sorted(pages - set(listed)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(listed) - pages) == [], "mkdocs.yml's nav names pages that do not exist"
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"


def test_the_site_builds_strict(tmp_path):
    """A broken link, a link to a missing anchor or a page missing from the nav fails this build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "img" / "compare_runs.png").is_file()


# -- the commands in the pages ----------------------------------------------------------------------------------

COMMAND = re.compile(r"python -m lme(?![\w.])(.*)")
# a line of a non-bash fence or an indented block that is a command, not output: `$ ` and `VAR=x ` prefixes allowed
COMMAND_LINE = re.compile(r"\s*(\$ )?(\S+=\S+ |/usr/bin/time -v )*python -m lme(?![\w.])")


def page_commands() -> list[tuple[str, str]]:
    """(page:line, command) for every `python -m lme ...` of the pages; `a && b` gives two."""
    found = []
    for path in PAGES:
        lines = path.read_text(encoding="utf-8").splitlines()
        fence = None
        i = 0
        while i < len(lines):
            line, where = lines[i], f"{path.relative_to(ROOT)}:{i + 1}"
            if line.startswith("```"):
                fence = None if fence is not None else line[3:].strip()
            elif fence is not None or line.startswith("    "):
                while line.endswith("\\") and i + 1 < len(lines):  # a command continued on the next line
                    i += 1
                    line = line[:-1] + " " + lines[i].strip()
                if fence == "bash" or COMMAND_LINE.match(line):
                    for part in line.split("&&"):
                        match = COMMAND.search(part)
                        if match:
                            found.append((where, "python -m lme" + strip_comment(match.group(1))))
            else:
                for span in re.findall(r"`([^`]*)`", line):
                    match = COMMAND.search(span)
                    if match:
                        found.append((where, "python -m lme" + match.group(1)))
            i += 1
    return found


def strip_comment(text: str) -> str:
    """A shell comment (`  # ...`) cut off, outside quotes."""
    quote = None
    for at, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (at == 0 or text[at - 1].isspace()):
            return text[:at].rstrip()
    return text.rstrip()


# Commands that are not checked, each with its reason (exactly as written in the page).
UNCHECKED = {
    "python -m lme prereg freeze|verify ...": "a synopsis of two subcommands; each is shown in full in "
                                              "docs/preregistration.md and the README, and checked there",
    "python -m lme data|memory|retrieval|rules|report|export|import-eval|prereg|runs|cache|audit|estimate|embed|cost|ui":
        "a list of the subcommands (docs/architecture.md), not a command",
    'python -m lme "hydra.searchpath=[file://$PWD/my_designs]" +design=mine':
        "composes the user's own design that the page's recipe writes first; tests/test_design.py runs that recipe",
    'python -m lme estimate "hydra.searchpath=[...]" +design=mine': "the same user's design, `mine`",
    "python -m lme +design=mine limit=5": "a recipe's own design file (docs/architecture.md), not shipped",
    "python -m lme rules +design=mine": "a recipe's own design file (docs/architecture.md), not shipped",
    "python -m lme data stats dataset=NAME": "a recipe's own dataset option (docs/architecture.md), not shipped",
    "python -m lme rules +design=study/NAME": "NAME stands for each file of the table below it, each checked in full",
}

# Commands shown being refused, with the words of their refusal: they must be refused, in those words.
REFUSED = {
    "python -m lme instructions=pipeline memory=retrieved": 'reads memory "retrieved" but its instruction lists',
    "python -m lme +design=pipeline setup=study instructions=study instructions.source=mine.json": "mine.json",
}

# Placeholder words of the synopses, as whole arguments, and what stands in for them.
PLACEHOLDERS = {
    "FILE": str(SAMPLE_PATH), "DIR": "{tmp}", "FOLDER": "{tmp}", "N": "5", "H": "127.0.0.1", "ID": "d82c07cd",
    "RUN_ID": "0123abcd", "JOB_RUN_ID": "0123abcd", "PARENT_RUN_ID_OR_NAME": "bm25-sample-multirun",
    "DESIGN": "bm25", "NAME": "study", "overrides": None, "...": None, "…": None,
}
# Overrides whose value is the reader's own (`dataset.path=.../x.json.xz`, `hydra.run.dir=<its output dir>`):
# a data path becomes the bundled sample's (the data file is not read in composing); any other is dropped.
DATA_KEYS = ("dataset.path",)
# `prereg=FILE` needs the record the page's freeze command writes first: the rest of the command is composed.
DROPPED_KEYS = ("prereg", "+prereg")


def is_placeholder_value(value: str) -> bool:
    return value in PLACEHOLDERS or "..." in value or "…" in value


def arguments(command: str, tmp: Path, *, optional: bool) -> list[str]:
    """The command's arguments after `python -m lme`, placeholders replaced; `[...]` groups of a synopsis are
    left out, or (`optional`) given."""
    text = re.sub(r"<[^<>]*>", "…", command.removeprefix("python -m lme"))  # `<same overrides>`: a placeholder
    groups = re.findall(r"(?<=\s)\[([^\]]*)\]", text)
    text = re.sub(r"(?<=\s)\[[^\]]*\]", " ", text)
    if optional:
        text += " " + " ".join(groups)
    args = []
    for token in shlex.split(text):
        if token in PLACEHOLDERS:
            if PLACEHOLDERS[token] is not None:
                args.append(PLACEHOLDERS[token].format(tmp=tmp))
            continue
        key, equals, value = token.partition("=")
        if equals and not token.startswith("-"):
            if key in DROPPED_KEYS:
                continue
            if is_placeholder_value(value):
                if key in DATA_KEYS:
                    args.append(f"{key}={SAMPLE_PATH}")
                continue
            token = f"{key}={value.replace('HOST', '127.0.0.1')}"
        args.append(token)
    return args


def run_overrides(args: list[str]) -> list[str]:
    """A sweep's overrides as its first job's: `-m` dropped, `key=a,b,c` -> `key=a` (not inside brackets)."""
    out = []
    for arg in args:
        if arg in ("-m", "--multirun"):
            continue
        key, _, value = arg.partition("=")
        if "," in value and not value.startswith(("[", "'", '"')):
            arg = f"{key}={value.split(',', 1)[0]}"
        out.append(arg)
    return out


@lru_cache(maxsize=None)
def _compose(args: tuple[str, ...]) -> None:
    compose_design(list(args), check=True)


def compose(overrides: list[str]) -> None:
    overrides = run_overrides(overrides)
    if "instructions=study" in overrides and not any(arg.startswith("instructions.source=") for arg in overrides):
        if not available(STUDY_FILE):  # the study's texts are never shipped: the test data's copy, as in
            pytest.skip(f"instructions=study needs the study's instructions ({STUDY_FILE})")  # test_study_designs
        overrides.append(f"instructions.source={STUDY_FILE}")
    _compose(tuple(overrides))


class Parsed(Exception):
    """Raised in place of a subcommand's work once its parser has accepted its arguments."""

    def __init__(self, extras: list[str]) -> None:
        super().__init__(extras)
        self.extras = extras


def parse_subcommand(name: str, argv: list[str], monkeypatch) -> None:
    """Hand argv to the subcommand as `python -m lme NAME` does; stop at its parser's answer."""
    from lme.cli.parser import ArgumentParser

    original = ArgumentParser.parse_known_args
    depth = [0]

    def parse_known_args(self, args=None, namespace=None):
        depth[0] += 1
        try:
            namespace, extras = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0:  # the outermost parse is done: nothing of the command runs
            raise Parsed(extras)
        return namespace, extras

    monkeypatch.setattr(ArgumentParser, "parse_known_args", parse_known_args)
    module, function, _ = SUBCOMMANDS[name]
    rest = [arg for arg in argv if "=" not in arg or arg.startswith("-")]
    if name == "runs":  # `runs` takes one action and overrides, no options: its own check, before any store
        assert rest == ["repair"], argv
        return
    if name == "cache" and rest[:1] == ["merge"]:  # merge: source files and `--into FILE`, read by hand
        options = [arg for arg in rest[1:] if arg.startswith("-")]
        assert set(options) <= {"--into"} and len(rest) > 1 + 2 * len(options), argv
        return
    with pytest.raises(Parsed) as parsed:
        getattr(importlib.import_module(module), function)(argv)
    assert parsed.value.extras == [], f"python -m lme {name}: not accepted: {parsed.value.extras}"


def check(command: str, tmp: Path, monkeypatch) -> None:
    for optional in (False, True):
        args = arguments(command, tmp, optional=optional)
        if args[:1] and args[0] in SUBCOMMANDS:
            parse_subcommand(args[0], args[1:], monkeypatch)
            compose([arg for arg in args[1:] if "=" in arg and not arg.startswith("-")])
        elif args in (["--help"], ["-h"]) or args[:1] and args[0] in HELP_WORDS:
            assert len(args) == 1
        else:
            assert unknown_command(args) is None, unknown_command(args)
            assert all("=" in arg or arg.startswith("~") or arg in ("-m", "--multirun") for arg in args), args
            compose(args)


COMMANDS = page_commands()


def test_the_pages_have_their_commands():
    commands = {command for _, command in COMMANDS}
    assert len(COMMANDS) > 100
    assert "python -m lme +design=pipeline -m seed=1,2,3" in commands  # the README's design run
    assert sorted(set(UNCHECKED) - commands) == [], "UNCHECKED names commands no page has"
    assert sorted(set(REFUSED) - commands) == [], "REFUSED names commands no page has"


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_command_in_the_docs_is_accepted_as_written(where, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # should a command get past its parser, it writes nothing in the checkout
    monkeypatch.setenv("LME_CACHE_DIR", str(tmp_path / "cache"))
    if command in UNCHECKED:
        pytest.skip(f"not checked: {UNCHECKED[command]}")
    if command in REFUSED:
        with pytest.raises(LmeError, match=re.escape(REFUSED[command])):
            check(command, tmp_path, monkeypatch)
        return
    try:
        check(command, tmp_path, monkeypatch)
    except LmeError as error:
        pytest.fail(f"{where}: `{command}` is refused: {error}")
