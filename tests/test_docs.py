"""docs/architecture.md and the README's Layout section match the tree: every module of `lme/` is listed in
the architecture page's module table, every module it lists exists, and every top-level folder the README's
layout names exists."""

from __future__ import annotations

import re
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
    modules -= {f"lme/{name}/__init__.py" for name in ("answer", "data", "memory", "models", "retrieval")}
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    assert sorted(modules - listed) == [], "modules missing from docs/architecture.md"
    assert sorted(listed - modules) == [], "docs/architecture.md lists modules that do not exist"


def test_the_readme_layout_names_folders_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    block = layout.split("```", 2)[1]
    named = [line.split()[0] for line in block.splitlines() if line.strip() and not line.startswith(" ")]
    tracked = [name for name in named if not name.startswith(("mlflow.db", "mlruns", "outputs", "multirun", ".lme_cache"))]
    assert {"conf/", "lme/", "tests/", "scripts/", "pyproject.toml"} <= set(tracked)
    for name in tracked:
        assert (ROOT / name.rstrip("/")).exists(), name
