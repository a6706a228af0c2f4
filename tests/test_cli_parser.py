"""The subcommands' one argument parser (`lme.cli.parser`) and the one command-line package.

A usage error is one line on stderr, `lme: error: PROG: PROBLEM.`, with exit status 2; `--help` prints the
subcommand's help and exits 0. No module outside `lme/cli/` (and Hydra's entry point) has a `main()` or
its own argparse parser.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from lme.cli import main
from lme.cli.parser import ArgumentParser, make_parser
from lme.util.errors import LmeError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lme"
# the only modules outside lme/cli/ allowed a `main`: Hydra's task function and the `python -m lme` entry point
ENTRY_POINTS = {PACKAGE / "study" / "hydra_run.py", PACKAGE / "__main__.py"}

# (the subcommand, what it requires): the arguments are parsed before anything is composed or loaded
COMMANDS = [
    (["report"], []),
    (["audit"], []),
    (["retrieval"], []),
    (["export"], ["RUN"]),
    (["import-eval"], ["results.jsonl", "--run", "RUN"]),
    (["prereg", "verify"], ["record.yaml"]),
    (["data", "fetch"], ["s"]),
]
IDS = [" ".join(command) for command, _ in COMMANDS]


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(args)
    captured = capsys.readouterr()
    return int(stopped.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(("command", "required"), COMMANDS, ids=IDS)
def test_a_usage_error_is_one_line_naming_the_problem_and_exit_2(command, required, capsys) -> None:
    status, out, err = run_main([*command, *required, "--bogus"], capsys)
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"lme: error: python -m lme {command[0]}"), err
    assert "unrecognized arguments: --bogus" in lines[0], err


@pytest.mark.parametrize(("command", "required"), COMMANDS, ids=IDS)
def test_help_exits_0(command, required, capsys) -> None:
    status, out, err = run_main([*command, "--help"], capsys)
    assert status == 0, err
    assert out.startswith(f"usage: python -m lme {' '.join(command)}"), out
    assert err == ""


def test_a_usage_error_through_the_real_command() -> None:
    result = subprocess.run([sys.executable, "-m", "lme", "report", "--bogus"], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip() == "lme: error: python -m lme report: unrecognized arguments: --bogus."
    assert result.stdout == ""


def test_help_imports_no_subcommand_module() -> None:
    from lme.cli import SUBCOMMANDS

    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "lme", "--help"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip()
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "lme.cli" in imported
    assert imported & {module for module, _, _ in SUBCOMMANDS.values()} == set()
    assert "lme.cli.parser" not in imported


def test_the_parser_raises_one_sentence_with_an_optional_hint() -> None:
    parser = make_parser("python -m lme x", "A test command.", hint="python -m lme x N")
    parser.add_argument("n", type=int)
    with pytest.raises(LmeError) as err:
        parser.parse_args(["many"])
    assert str(err.value) == ("python -m lme x: argument n: invalid int value: 'many' "
                              "(usage: python -m lme x N).")
    sub = make_parser("python -m lme y", "Another.").add_subparsers(dest="action", required=True)
    assert isinstance(sub.add_parser("go"), ArgumentParser)  # sub-commands report errors the same way


def _mains_and_parsers(path: Path) -> list[str]:
    """A top-level `main`, an `ArgumentParser` subclass, or an `argparse.ArgumentParser(...)` call in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(ROOT)
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main":
            found.append(f"{where}: def main")
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base) for base in node.bases]
            if any(base.split(".")[-1] == "ArgumentParser" for base in bases):
                found.append(f"{where}: class {node.name}({', '.join(bases)})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "argparse.ArgumentParser":
            found.append(f"{where}:{node.lineno}: argparse.ArgumentParser(...)")
    return found


def test_only_the_cli_package_has_mains_and_argument_parsers() -> None:
    cli = PACKAGE / "cli"
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if cli not in p.parents and p not in ENTRY_POINTS]
    assert outside, "no module found outside lme/cli/"
    assert [hit for path in outside for hit in _mains_and_parsers(path)] == []
    in_cli = [hit for path in sorted(cli.glob("*.py")) if path.name != "parser.py"
              for hit in _mains_and_parsers(path) if not hit.endswith("def main")]
    assert in_cli == [], "subcommands build their parser with lme.cli.parser.make_parser"
