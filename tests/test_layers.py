"""The shape of the package: the layers contract (import-linter, `[tool.importlinter]` in pyproject.toml),
no import cycle among lme's modules (lazy imports inside functions included), and no module importing
another module's private name."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lme"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import statement in the file, at any depth (lazy imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names in imports_of(path):
            targets = {module} | {f"{module}.{imported}" for imported in names}
            edges[name] |= {target for target in targets if target in modules and target not in (name, "lme")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:  # restored: a worker's later tests (and the C JSON parser's depth check) see the usual limit
        for node in edges:
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycle_in_the_package():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_name():
    offenders = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for module, names in imports_of(path):
            if module.startswith("lme") and module != module_name(path):
                offenders += [f"{path.relative_to(ROOT)}: {module}.{name}" for name in names
                              if name.startswith("_") and not name.startswith("__")]
    assert offenders == []


def test_the_layers_contract_holds():  # import-linter comes with the test extra
    command = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "4 kept, 0 broken" in result.stdout
    for contract in ("lme layers", "inside a study", "errors are the bottom", "one composition root"):
        assert contract in result.stdout
