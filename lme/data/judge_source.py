"""Read LongMemEval's judge templates out of its `evaluate_qa.py` source, without running it.

Pure functions: `extract_templates(source, origin)` parses the source with
`ast`, finds the strings `get_anscheck_prompt` formats, evaluates them (string
literals, f-strings, `+`, names bound to strings) and assigns each to a
template key from the `if`/`elif`/`else` conditions around it;
`verify_templates` checks each against its pinned SHA-256.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lme.util.errors import LmeError
from lme.util.hashing import sha256_text
from lme.data.judge_templates import TEMPLATE_KEYS, template_key

TEMPLATES_FUNCTION = "get_anscheck_prompt"


class _Unsupported(Exception):
    def __init__(self, node: ast.AST, what: str) -> None:
        super().__init__(what)
        self.node = node


def _eval_string(node: ast.expr, env: Mapping[str, str]) -> str:
    """Evaluate a string expression built from literals, f-strings, `+` and names bound to strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                inner: Any = _eval_string(value.value, env)
                if value.conversion == ord("r"):
                    inner = repr(inner)
                elif value.conversion == ord("a"):
                    inner = ascii(inner)
                spec = _eval_string(value.format_spec, env) if value.format_spec is not None else ""
                parts.append(format(inner, spec))
            else:
                raise _Unsupported(value, "an f-string part that is not text")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _eval_string(node.left, env) + _eval_string(node.right, env)
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    raise _Unsupported(node, f"a {type(node).__name__} expression, not a string built from literals")


@dataclass(frozen=True)
class _Condition:
    """What one branch test says: `task in types` (or not), or `abstention` is true (or not)."""

    kind: str  # "task" | "abstention"
    types: frozenset[str] = frozenset()
    positive: bool = True


def _parse_condition(test: ast.expr, task: str, abstention: str) -> _Condition:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _parse_condition(test.operand, task, abstention)
        return _Condition(inner.kind, inner.types, not inner.positive)
    if isinstance(test, ast.Name) and test.id == abstention:
        return _Condition("abstention")
    if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == task \
            and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant) and isinstance(right.value, str):
            return _Condition("task", frozenset({right.value}), isinstance(op, ast.Eq))
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
            values = [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) == len(right.elts):
                return _Condition("task", frozenset(values), isinstance(op, ast.In))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        parts = [_parse_condition(v, task, abstention) for v in test.values]
        if all(p.kind == "task" and p.positive for p in parts):
            return _Condition("task", frozenset().union(*(p.types for p in parts)))
    raise _Unsupported(test, f"a branch condition lme does not read (only `{task} == ...`, `{task} in [...]`, "
                             f"`{abstention}` and `not`)")


def _key_for_path(path: Sequence[tuple[_Condition, bool]]) -> set[str]:
    """The template keys a branch (its conditions and whether each held) can serve."""
    abstention: bool | None = None
    types: frozenset[str] | None = None
    excluded: set[str] = set()
    for condition, held in path:
        truth = condition.positive == held
        if condition.kind == "abstention":
            abstention = truth
        elif truth:
            types = condition.types if types is None else types & condition.types
        else:
            excluded |= condition.types
    if abstention:
        return {template_key("_abs", "")}
    if types is None:
        return set()
    keys = set()
    for question_type in sorted(types - excluded):
        try:
            keys.add(template_key("", question_type))
        except LmeError:
            raise ValueError(question_type) from None
    return keys


def _function_params(func: ast.FunctionDef) -> tuple[str, str]:
    """(task parameter, abstention parameter): the first parameter, and the one with a bool default."""
    positional = [*func.args.posonlyargs, *func.args.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(func.args.defaults):]], func.args.defaults))
    defaults |= {a.arg: d for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults) if d is not None}
    flags = [name for name, d in defaults.items() if isinstance(d, ast.Constant) and isinstance(d.value, bool)]
    if not positional or len(flags) != 1:
        raise _Unsupported(func, "a signature without (task, ..., abstention=False)")
    return positional[0].arg, flags[0]


def _format_receivers(func: ast.FunctionDef) -> set[str]:
    """Names whose `.format(...)` is called in the function: the template variables."""
    return {
        node.func.value.id
        for node in ast.walk(func)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
        and isinstance(node.func.value, ast.Name)
    }


def _assignment(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    """`name = value` or `name: type = value`, as (name, value)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    return None


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to strings, which a template may use."""
    env: dict[str, str] = {}
    for node in tree.body:
        if (assigned := _assignment(node)) is not None:
            name, value = assigned
            try:
                env[name] = _eval_string(value, env)
            except _Unsupported:
                env.pop(name, None)
    return env


def extract_templates(source: str, origin: str, function: str = TEMPLATES_FUNCTION) -> dict[str, str]:
    """The five judge templates defined in `function` of LongMemEval's evaluate_qa.py source.

    The source is parsed, never run. Each string assigned to a variable whose
    `.format(...)` the function calls (or a string literal `.format`-ed in place)
    is evaluated (literals, f-strings, `+`, names bound to strings) and assigned
    to a template key by the `if`/`elif`/`else` conditions around it
    (`task in [...]`, `task == ...`, `not abstention`), mapped with
    `lme.judge.template_key`.
    """
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as exc:
        raise LmeError(f"{origin}: not valid Python (line {exc.lineno}), so no judge template can be read.") from None
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if func is None:
        raise LmeError(f"{origin}: defines no function {function}(), so no judge template can be read.")
    found: dict[str, tuple[str, int]] = {}
    try:
        task, abstention = _function_params(func)
        receivers = _format_receivers(func)
        env = _module_strings(tree)

        def add(expr: ast.expr, path: list[tuple[_Condition, bool]], line: int) -> None:
            text = _eval_string(expr, env)
            try:
                keys = _key_for_path(path)
            except ValueError as exc:
                raise _Unsupported(expr, f"a branch for an unknown question type {exc.args[0]!r}") from None
            if len(keys) != 1:
                raise _Unsupported(expr, "a template whose branch does not select exactly one template key "
                                         f"(it selects {sorted(keys) or 'none'})")
            key = keys.pop()
            if key in found and found[key][0] != text:
                raise _Unsupported(expr, f"a second, different template for {key!r} (first at line {found[key][1]})")
            found[key] = (text, line)

        def visit(statements: list[ast.stmt], path: list[tuple[_Condition, bool]]) -> None:
            for stmt in statements:
                if isinstance(stmt, ast.If):
                    condition = _parse_condition(stmt.test, task, abstention)
                    visit(stmt.body, [*path, (condition, True)])
                    visit(stmt.orelse, [*path, (condition, False)])
                elif isinstance(stmt, (ast.With, ast.For, ast.While, ast.Try)):
                    for block in ("body", "orelse", "finalbody"):
                        visit(getattr(stmt, block, []), path)
                    for handler in getattr(stmt, "handlers", []):
                        visit(handler.body, path)
                elif (assigned := _assignment(stmt)) is not None:
                    name, value = assigned
                    if name in receivers:
                        add(value, path, stmt.lineno)
                        continue
                    try:  # a helper string (a shared suffix, say) a template may use
                        env[name] = _eval_string(value, env)
                    except _Unsupported:
                        pass
                    visit_format_calls(stmt, path)
                else:
                    visit_format_calls(stmt, path)

        def visit_format_calls(stmt: ast.stmt, path: list[tuple[_Condition, bool]]) -> None:
            """A literal formatted in place: `return "...".format(question, answer, response)`."""
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "format" and not isinstance(node.func.value, ast.Name):
                    add(node.func.value, path, node.lineno)

        visit(func.body, [])
    except _Unsupported as exc:
        line = getattr(exc.node, "lineno", "?")
        raise LmeError(f"{origin} line {line}: {function}() holds {exc}, so the judge templates cannot be read.") \
            from None
    missing = [key for key in TEMPLATE_KEYS if key not in found]
    if missing:
        raise LmeError(f"{origin}: {function}() defines no template for {', '.join(missing)}.")
    return {key: found[key][0] for key in TEMPLATE_KEYS}


def verify_templates(templates: Mapping[str, str], pins: Mapping[str, str], origin: str) -> dict[str, str]:
    """Each template's SHA-256, checked against the pins; one sentence on the first mismatch."""
    digests: dict[str, str] = {}
    for key in TEMPLATE_KEYS:
        digest = sha256_text(templates[key])
        expected = pins.get(key)
        if expected is None:
            raise LmeError(f"{origin}: lme has no pinned SHA-256 for judge template {key!r}.")
        if digest != expected:
            raise LmeError(
                f"{origin}: judge template {key!r} has SHA-256 {digest}, expected {expected}, so it is refused."
            )
        digests[key] = digest
    return digests
