"""docs/architecture.md matches the tree: every module of `lme/` is listed in its module tables, every module it
lists exists, every package of `lme/` is a layer of the import-linter contract in the order the page draws, and
every top-level folder its layout names exists."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def listed_modules(text: str) -> set[str]:
    """`lme/...py` paths named in the module table; `lme/a/b.py`, `c.py` in one cell share b.py's folder."""
    found: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("| `lme/"):
            continue
        cell = line.split("|")[1]
        folder = ""
        for name in re.findall(r"`([^`]+\.py)`", cell):
            if name.startswith("lme/"):
                folder = name.rsplit("/", 1)[0]
                found.add(name)
            else:
                found.add(f"{folder}/{name}")
    return found


def test_every_module_is_listed_and_every_listed_module_exists():
    modules = {str(path.relative_to(ROOT)) for path in (ROOT / "lme").rglob("*.py") if "__pycache__" not in path.parts}
    # a package's __init__ says what it holds (checked below), except the dispatcher's, listed in the table
    modules -= {str(path.relative_to(ROOT)) for path in (ROOT / "lme").glob("*/__init__.py")} - {"lme/cli/__init__.py"}
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    assert sorted(modules - listed) == [], "modules missing from docs/architecture.md"
    assert sorted(listed - modules) == [], "docs/architecture.md lists modules that do not exist"


def test_the_layout_names_folders_that_exist():
    page = ARCHITECTURE.read_text(encoding="utf-8")
    layout = page.split("## The top level", 1)[1].split("\n## ", 1)[0]
    block = layout.split("```", 2)[1]
    named = [line.split()[0] for line in block.splitlines() if line.strip() and not line.startswith(" ")]
    tracked = [name for name in named if not name.startswith(("mlflow.db", "mlruns", "outputs", "multirun", ".lme_cache"))]
    assert {"conf/", "lme/", "tests/", "scripts/", "docs/", "pyproject.toml"} <= set(tracked)
    for name in tracked:
        assert (ROOT / name.rstrip("/")).exists(), name


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c)


def test_every_package_is_a_layer_drawn_in_order_and_says_what_it_holds():
    layers = contract_layers()
    packages = sorted(path.parent.name for path in (ROOT / "lme").glob("*/__init__.py"))
    modules = sorted(path.stem for path in (ROOT / "lme").glob("*.py") if path.stem != "__init__")
    # the contract is written on packages: one per layer, and the few top-level modules
    assert sorted(name.removeprefix("lme.") for name in layers) == sorted(packages + modules)
    assert len(layers) <= 15 and all("|" not in layer for layer in layers)
    page = ARCHITECTURE.read_text(encoding="utf-8")
    drawn = page.split("## Layers", 1)[1].split("```", 2)[1]
    order = [line.split()[0] for line in drawn.splitlines() if line.startswith("lme.")]
    assert order == layers  # the diagram is the contract's picture
    for package in packages:
        doc = ast.get_docstring(ast.parse((ROOT / "lme" / package / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.splitlines()) <= 12, f"lme/{package}/__init__.py says what it holds in a few lines"
