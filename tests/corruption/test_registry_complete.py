"""The inventory of stored state (lme/util/stored_state.py) is complete and its page is current (issue 36, item 1).

A file added to lme without a registry entry fails here: every string literal in lme's code that looks like a
stored file's name (by its extension) or an `LME_*` environment variable, and every `${oc.env:...}` in the
config, must be named by the registry (an entry's `literals`, an environment variable, or `NOT_STORED` with
its reason). f-strings are read as patterns with `{}` for each formatted part (`instructions/{}.txt`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lme.util import stored_state
from lme.util.stored_state import CASES, ENVIRONMENT, STORED, check_registry, registered_literals, render_markdown

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lme"
CONF = ROOT / "conf"
DOCS_PAGE = ROOT / "docs" / "stored-state.md"

STORED_NAME = re.compile(r"^[\w.*/{}:<>+-]*\.(sqlite|jsonl|json|yaml|yml|txt|db|onnx|npy|lock|xz|gz)$")
ENV_NAME = re.compile(r"^LME_[A-Z0-9_]+$")


def _pattern(node: ast.JoinedStr) -> str:
    """An f-string as a pattern: its constant parts, `{}` for each formatted value."""
    return "".join(part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "{}"
                   for part in node.values)


def code_literals() -> dict[str, set[str]]:
    """Every string literal (f-strings as patterns) in lme's code that looks like a stored file or an LME_
    variable -> the files (relative paths) using it. Docstrings are left out."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "stored_state.py":  # the registry itself
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        inside_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = _pattern(node)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and id(node) not in inside_fstrings):
                text = node.value
            else:
                continue
            text = text.strip()
            if STORED_NAME.match(text) or ENV_NAME.match(text):
                found.setdefault(text, set()).add(str(path.relative_to(ROOT)))
    return found


def config_variables() -> dict[str, set[str]]:
    """Every environment variable the config reads (`${oc.env:NAME,...}`) -> the config files."""
    found: dict[str, set[str]] = {}
    for path in sorted(CONF.rglob("*.yaml")):
        for name in re.findall(r"oc\.env:([A-Za-z_][A-Za-z0-9_]*)", path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_registry_is_sound():
    assert check_registry() == []


def test_every_stored_file_literal_in_lme_is_registered():
    known = registered_literals()
    missing = {literal: sorted(files) for literal, files in code_literals().items() if literal not in known}
    assert not missing, (
        "lme's code names files or LME_ variables that lme/util/stored_state.py does not register (add an entry, or a "
        f"literal to one, or a reason in NOT_STORED): {missing}")


def test_every_environment_variable_of_the_config_is_registered():
    names = {variable.name for variable in ENVIRONMENT}
    missing = {name: sorted(files) for name, files in config_variables().items() if name not in names}
    assert not missing, f"the config reads environment variables lme/util/stored_state.py does not register: {missing}"


def test_every_api_key_variable_of_the_config_is_registered():
    names = {variable.name for variable in ENVIRONMENT}
    used = set()
    for path in CONF.rglob("*.yaml"):
        used.update(re.findall(r"api_key_env:\s*([A-Z][A-Z0-9_]+)", path.read_text(encoding="utf-8")))
    assert used and used <= names, sorted(used - names)


def test_the_scan_finds_what_it_should():
    """The scan itself works: it sees plain literals, f-string patterns and LME_ variables."""
    literals = code_literals()
    assert "calls.sqlite" in literals
    assert "LME_PROGRESS_INTERVAL_S" in literals
    assert any("{}" in literal for literal in literals)


def test_no_registered_literal_is_stale():
    """A literal the registry names for an entry is still in lme's code (a renamed file is renamed here too)."""
    used = set(code_literals())
    stale = sorted(literal for entry in STORED for literal in entry.literals if literal not in used)
    assert not stale, f"literals registered in lme/util/stored_state.py that lme's code no longer uses: {stale}"


def test_the_docs_page_is_generated_from_the_registry():
    assert DOCS_PAGE.is_file(), "docs/stored-state.md is missing: generate it with lme.util.stored_state.render_markdown"
    page = DOCS_PAGE.read_text(encoding="utf-8")
    assert page == render_markdown(), (
        "docs/stored-state.md differs from the registry: regenerate it with "
        "`python -c \"from lme.util.stored_state import render_markdown; print(render_markdown(), end='')\" "
        "> docs/stored-state.md`")
    for entry in STORED:
        assert f"**{entry.key}**" in page
    for variable in ENVIRONMENT:
        assert f"`{variable.name}`" in page
    for case in CASES:
        assert case.replace("_", " ") in page


def test_the_readme_links_the_page():
    assert "docs/stored-state.md" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("entry", STORED, ids=lambda e: e.key)
def test_every_entry_has_a_contract_for_every_case(entry):
    for case in CASES:
        assert entry.contract.of(case).strip(), (entry.key, case)
    assert entry.owner and entry.what and entry.pattern


def test_module_is_data_only():
    """The registry imports nothing of lme (it is in the bottom layer, next to lme.util.yamlfile)."""
    tree = ast.parse(Path(stored_state.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name == "lme" or name.startswith("lme.") for name in imported), imported
