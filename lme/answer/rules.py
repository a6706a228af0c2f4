"""Re-read rules: a trigger over the question text or the current answer, a memory view, paragraphs.

A rule is configuration (`rules.definitions.NAME` in the `rules` config group):

    "on": question | answer    what the trigger reads (quote the key: YAML reads a bare on as true)
    patterns: [regex, ...]     the rule fires when any pattern matches ...
    exclude: [regex, ...]      ... and no exclusion matches
    view: first_pass | whole_sessions   the memory the re-read gets
    paragraphs: [name, ...]    the re-read's instruction: base + these paragraphs

`rules.order` lists the steps in the order they run. A step is a rule's name, or
a mapping `{rule: NAME, view: VIEW}` that runs that rule over another view than
its definition's (the step's name, instruction and trigger stay the rule's); a
name may repeat (the reference pipeline runs `decline` twice, and the study's
design runs read their first decline over an earlier view:
`[advice, {rule: decline, view: whole_sessions_no_content_words}, decline]`).
The views a step may name are `first_pass`, the `view` group's view and those the
design adds under `views` (`lme.config.design`).

`rules.routes` (optional) lists rule names that route the first pass instead of
re-reading: the first of them whose trigger fires on the question text chooses
the first pass's instruction (base + that rule's paragraphs), in the same one
read; a question no route fires on gets `instructions.first_pass`. A route is a
question rule over the first-pass memory (`on: question`, `view: first_pass`);
the same definition may also be a re-read in `order` (`parse_routes`,
`choose_route`).

Matching (`Rule.fires`), case-insensitive, over text whose apostrophes (’ ‘ ʼ ` ´)
are folded to ' and whose runs of white space are folded to one space:

- a question rule wraps each pattern (and exclusion) in `\\b(?:...)\\b`, so it
  matches whole words only: `suggest` does not fire on "you suggested";
- an answer rule matches anywhere in the answer; a missing answer never fires.

The engine is given nothing but the question text and the current answer: it
cannot see the question type or the reference answer.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lme.util.errors import LmeError

ON_VALUES: tuple[str, ...] = ("question", "answer")
FIRST_PASS_VIEW = "first_pass"  # the view that is the first pass's own memory
RESERVED_NAMES = frozenset({"first_pass", "arbiter"})  # step names lme gives the first read and the arbiter
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
RULE_KEYS = frozenset({"on", "patterns", "exclude", "view", "paragraphs"})
STEP_KEYS = frozenset({"rule", "view"})  # an entry of `rules.order` written as a mapping
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'", "\u00b4": "'"})
_SPACE = re.compile(r"\s+")


def fold(text: str) -> str:
    """The text rules match against: apostrophes folded to ', white space runs to one space."""
    return _SPACE.sub(" ", text.translate(_APOSTROPHES))


def _compile(patterns: Sequence[str], whole_words: bool, where: str) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for index, pattern in enumerate(patterns):
        source = fold(pattern)
        if whole_words:
            source = rf"\b(?:{source})\b"
        try:
            compiled.append(re.compile(source, re.IGNORECASE))
        except re.error as exc:
            raise LmeError(f"{where}[{index}]: {pattern!r} is not a valid regular expression ({exc}).") from None
    return tuple(compiled)


@dataclass(frozen=True)
class Rule:
    """One re-read rule (see the module docstring)."""

    name: str
    on: str
    patterns: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    view: str = FIRST_PASS_VIEW
    paragraphs: tuple[str, ...] = ()
    _match: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)
    _skip: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"rules.definitions.{self.name}"
        if self.on not in ON_VALUES:
            raise LmeError(f"{where}.on: {self.on!r} is not one of {', '.join(ON_VALUES)}.")
        if not self.patterns:
            raise LmeError(f"{where}.patterns: a rule needs at least one pattern.")
        whole_words = self.on == "question"
        object.__setattr__(self, "_match", _compile(self.patterns, whole_words, f"{where}.patterns"))
        object.__setattr__(self, "_skip", _compile(self.exclude, whole_words, f"{where}.exclude"))

    def fires(self, question: str, answer: str | None) -> bool:
        """Whether the rule is chosen, given only the question text and the current answer."""
        text = question if self.on == "question" else answer
        if text is None:
            return False
        folded = fold(text)
        return any(p.search(folded) for p in self._match) and not any(p.search(folded) for p in self._skip)


@dataclass(frozen=True)
class RuleStep:
    """A rule in the configured order, with its composed instruction."""

    rule: Rule
    instruction: str


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise LmeError(f"{where}: expected a list of strings, found {type(value).__name__}.")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise LmeError(f"{where}[{index}]: expected a non-empty string, found {item!r}.")
    return tuple(value)


def parse_rule(name: str, definition: Any, paragraphs: Collection[str], views: Collection[str]) -> Rule:
    """One `rules.definitions.NAME` node -> a `Rule`, checked against the defined paragraphs and views."""
    where = f"rules.definitions.{name}"
    if not _NAME.match(name) or name in RESERVED_NAMES:
        raise LmeError(
            f"{where}: a rule name is a letter then letters, digits or _, and not "
            f"{' or '.join(sorted(RESERVED_NAMES))}."
        )
    if not isinstance(definition, Mapping):
        raise LmeError(f"{where}: expected a mapping with keys {', '.join(sorted(RULE_KEYS))}.")
    if True in definition and "on" not in definition:  # YAML 1.1 reads an unquoted `on:` key as true
        definition = {("on" if key is True else key): value for key, value in definition.items()}
    unknown = sorted(set(definition) - RULE_KEYS)
    if unknown:
        raise LmeError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(RULE_KEYS))}).")
    view = definition.get("view", FIRST_PASS_VIEW)
    if view not in views:
        raise LmeError(f"{where}.view: {view!r} is not a view (known: {', '.join(views)}).")
    names = _strings(definition.get("paragraphs"), f"{where}.paragraphs")
    for index, paragraph in enumerate(names):
        if paragraph not in paragraphs:
            raise LmeError(
                f"{where}.paragraphs[{index}]: {paragraph!r} is not defined in instructions.paragraphs."
            )
    return Rule(
        name=name,
        on=str(definition.get("on", "")),
        patterns=_strings(definition.get("patterns"), f"{where}.patterns"),
        exclude=_strings(definition.get("exclude"), f"{where}.exclude"),
        view=str(view),
        paragraphs=names,
    )


def parse_rules(
    rules: Mapping[str, Any] | None, paragraphs: Collection[str], views: Collection[str]
) -> tuple[Rule, ...]:
    """The `rules` node -> the rules in `order` (a name may repeat), each over the view its step names, else
    its definition's; every definition is checked, including those `order` does not use."""
    if not rules:
        return ()
    order = parse_order(rules.get("order"))
    definitions = rules.get("definitions") or {}
    if not isinstance(definitions, Mapping):
        raise LmeError("rules.definitions: expected a mapping from rule name to rule.")
    parsed = {name: parse_rule(str(name), node, paragraphs, views) for name, node in definitions.items()}
    steps = []
    for index, (name, view) in enumerate(order):
        if name not in parsed:
            raise LmeError(
                f"rules.order[{index}]: rule {name!r} is not defined in rules.definitions "
                f"(defined: {', '.join(parsed) or 'none'})."
            )
        if view is not None and view not in views:
            raise LmeError(f"rules.order[{index}].view: {view!r} is not a view (known: {', '.join(views)}).")
        rule = parsed[name]
        steps.append(rule if view is None or view == rule.view else replace(rule, view=view))
    return tuple(steps)


def parse_order(value: Any) -> tuple[tuple[str, str | None], ...]:
    """`rules.order` -> (rule name, the view the step names or None) per step; a step is a rule's name or a
    mapping `{rule: NAME, view: VIEW}` (`view` optional)."""
    where = "rules.order"
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise LmeError(f"{where}: expected a list of steps, found {type(value).__name__}.")
    steps: list[tuple[str, str | None]] = []
    for index, item in enumerate(value):
        if isinstance(item, str) and item:
            steps.append((item, None))
            continue
        if not isinstance(item, Mapping):
            raise LmeError(f"{where}[{index}]: expected a rule name or a mapping {{rule: NAME, view: VIEW}}, "
                           f"found {item!r}.")
        unknown = sorted(str(key) for key in item if key not in STEP_KEYS)
        if unknown:
            raise LmeError(f"{where}[{index}]: unknown key {unknown[0]!r} (a step names its rule and, "
                           f"optionally, its view: {', '.join(sorted(STEP_KEYS))}).")
        name, view = item.get("rule"), item.get("view")
        if not isinstance(name, str) or not name:
            raise LmeError(f"{where}[{index}].rule: expected a rule name, found {name!r}.")
        if view is not None and (not isinstance(view, str) or not view):
            raise LmeError(f"{where}[{index}].view: expected a view name, found {view!r}.")
        steps.append((name, view))
    return tuple(steps)


def parse_routes(
    rules: Mapping[str, Any] | None, paragraphs: Collection[str], views: Collection[str]
) -> tuple[Rule, ...]:
    """The `rules.routes` list -> its rules in order: each a defined question rule over the first-pass
    memory, named once."""
    if not rules or rules.get("routes") is None:
        return ()
    names = _strings(rules.get("routes"), "rules.routes")
    definitions = rules.get("definitions") or {}
    if not isinstance(definitions, Mapping):
        raise LmeError("rules.definitions: expected a mapping from rule name to rule.")
    routes = []
    for index, name in enumerate(names):
        where = f"rules.routes[{index}]"
        if name not in definitions:
            raise LmeError(f"{where}: rule {name!r} is not defined in rules.definitions "
                           f"(defined: {', '.join(map(str, definitions)) or 'none'}).")
        if name in names[:index]:
            raise LmeError(f"{where}: rule {name!r} is listed twice; a route is tried once, in order.")
        rule = parse_rule(name, definitions[name], paragraphs, views)
        if rule.on != "question":
            raise LmeError(f"{where}: rule {name!r} reads the {rule.on}; a route chooses the first pass's "
                           "instruction before there is an answer, so it must be `on: question`.")
        if rule.view != FIRST_PASS_VIEW:
            raise LmeError(f"{where}: rule {name!r} reads view {rule.view!r}; a route only chooses the first "
                           f"pass's instruction, over the first-pass memory (view {FIRST_PASS_VIEW!r}).")
        routes.append(rule)
    return tuple(routes)


def choose_route(routes: Sequence[Rule], question: str) -> Rule | None:
    """The first route whose trigger fires on the question text; None when none does."""
    return next((rule for rule in routes if rule.fires(question, None)), None)


def route_instruction(routes: Sequence[RuleStep], question: str, default: str) -> str:
    """The first pass's instruction for this question text: that of the first route that fires (`routes`:
    each route with its composed instruction), else `default`."""
    rule = choose_route([step.rule for step in routes], question)
    return default if rule is None else next(step.instruction for step in routes if step.rule is rule)


def select_routes(routes: Sequence[Rule], questions: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """For each route, in order: the ids of the `(question_id, question_text)` pairs whose first pass it
    routes (the first route that fires wins)."""
    chosen: dict[str, list[str]] = {rule.name: [] for rule in routes}
    for qid, text in questions:
        rule = choose_route(routes, text)
        if rule is not None:
            chosen[rule.name].append(qid)
    return chosen


def unique_rules(rules: Sequence[Rule]) -> list[Rule]:
    """Each rule once, in first-use order."""
    seen: dict[str, Rule] = {}
    for rule in rules:
        seen.setdefault(rule.name, rule)
    return list(seen.values())


def select_by_question(rules: Sequence[Rule], questions: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """For each question-text rule (once, in order): the ids of the `(question_id, question_text)`
    pairs it fires on. Answer rules need an answer, so they are left out."""
    return {
        rule.name: [qid for qid, text in questions if rule.fires(text, None)]
        for rule in unique_rules(rules)
        if rule.on == "question"
    }
