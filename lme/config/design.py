"""The composition root: the composed Hydra config -> one typed, frozen `Design`.

`design_from_config(cfg)` is the one place that reads a composed config. It checks the config (secrets,
every value against its rule), composes the instructions of every step, checks that each step's
paragraphs describe the memory that step reads, and returns a `Design`: plain, immutable data (component
nodes, composed instructions and their hashes, the dataset and its selection, models, budget, tracking,
where the run writes and how it resumes). The job (`lme.study.job`), the multirun parent (`lme.study.parent`), prereg,
estimate, audit and every subcommand take a `Design`; none of them reads the config or imports Hydra.

`compose_design(overrides)` composes the config a run with these overrides would get (`lme.config.compose`) and
returns its design: what the subcommands use.

Components are built from their nodes on demand (`design.build_retriever()`, ...), with Hydra's
`instantiate` (`lme.config.components.build`), so that a subcommand that needs only the cache directory never
loads an embedding model.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lme.answer.reader import Reader, compose_instruction
from lme.answer.rules import FIRST_PASS_VIEW, RuleStep, parse_routes, parse_rules, route_instruction
from lme.data.dataset import DatasetSpec
from lme.data.select import Selection
from lme.util.errors import LmeError, first_line
from lme.util.hashing import sha256_json, sha256_text
from lme.judge import Judge
from lme.models.ledger import Budget
from lme.answer.run import FIRST_PASS
from lme.tracking.runs import TrackingSettings, flatten

# Keys of the composed config that say how or where a run happens, not what it measures (the design's
# digest and prereg leave them out). Dotted paths from the root:
RUN_ONLY_PATHS: tuple[str, ...] = (
    "seed",  # the plan's seeds are recorded instead; a run's seed must be one of them
    "hydra",
    "tracking",
    "cache_dir",
    "data_dir",
    "verbose",
    "concurrency",
    "calls_in_flight",
    "prereg",
    "budget",  # spending caps and the ledger: how far a run may go, not what it measures
    "dataset.path",  # the file's SHA-256 and the selected ids are recorded instead
    "judge.templates_path",  # the templates' digests are recorded instead
    "instructions.source",  # the study's texts it holds are recorded instead (loaded into instructions.*)
    "dataset.stream",  # how the file is read, not what is in it
)
# Key names that are run-only wherever they occur (model, retriever and view settings):
RUN_ONLY_LEAVES: frozenset[str] = frozenset(
    {"concurrency", "timeout_s", "max_attempts", "api_key_env", "cache_path", "index_dir", "device",
     "batch_size", "progress", "requests_per_minute", "tokens_per_minute", "backoff_base_s", "backoff_max_s",
     "retry_after_max_s", "unreachable_after_s",
     # a memory system's waits (lme.memory.systems): how long and how often, never what is stored or found
     "ready_timeout_s", "poll_interval_s", "ingest_latency_s", "index_delay_s"}
)


def canonical_design(container: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config minus the run-only keys (`RUN_ONLY_PATHS`, `RUN_ONLY_LEAVES`)."""

    def strip(node: Any, prefix: str) -> Any:
        if isinstance(node, Mapping):
            kept = {}
            for key, value in node.items():
                path = f"{prefix}{key}"
                if path in RUN_ONLY_PATHS or str(key) in RUN_ONLY_LEAVES:
                    continue
                kept[str(key)] = strip(value, path + ".")
            return kept
        if isinstance(node, (list, tuple)):
            return [strip(item, prefix) for item in node]
        return node

    return strip(container, "")


def frozen(value: Any) -> Any:
    """Plain data made read-only: mappings become read-only views, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(key): frozen(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(item) for item in value)
    return value


def plain(value: Any) -> Any:
    """A frozen value as fresh, mutable plain data (dicts and lists), e.g. for `instantiate` or YAML."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


@dataclass(frozen=True)
class Component:
    """One component's config node (`_target_` and its arguments), as read-only plain data."""

    group: str  # the config group it came from: retriever, memory, view, reader.model, judge.model
    node: Mapping[str, Any]

    @property
    def target(self) -> str:
        return str(self.node.get("_target_", ""))

    @property
    def name(self) -> str:
        return str(self.node.get("name", self.group))

    def build(self, **kwargs: Any) -> Any:
        """Construct it; a construction error is one sentence naming the group."""
        from lme.config.components import build

        if self.group.endswith("model"):  # a model spec gets plain lists and dicts (its params), as Hydra's "all"
            kwargs.setdefault("_convert_", "all")
        return build(plain(self.node), self.group, **kwargs)


@dataclass(frozen=True)
class ReaderSpec:
    name: str
    instruction_role: str
    model: Component
    payload: str = "lme"  # the user message's form (lme.answer.reader.reader_payload): lme | study

    def build(self) -> Reader:
        return Reader(name=self.name, model=self.model.build(), instruction_role=self.instruction_role,
                      payload=self.payload)


@dataclass(frozen=True)
class JudgeSpec:
    name: str
    official: bool
    model: Component
    templates_path: str | None
    templates: Mapping[str, str] | None
    verdict: str = "contains_yes"  # how a reply is read (lme.judge.parse_verdict): LongMemEval's rule by default
    system_message: str | None = None  # sent before the template (the study's judge); LongMemEval's: none
    protocol: str = "longmemeval"  # longmemeval | locomo_j (Mem0's LoCoMo judge: lme.judge, lme.data.locomo_judge)

    def build(self) -> Judge:
        """The judge, its templates read and verified."""
        from lme.judge import make_judge

        return make_judge(name=self.name, official=self.official, model=self.model.build(),
                          templates_path=self.templates_path,
                          templates=dict(self.templates) if self.templates is not None else None,
                          verdict=self.verdict, system_message=self.system_message, protocol=self.protocol)


@dataclass(frozen=True)
class Instructions:
    """Every step's composed instruction: `base` followed by the step's paragraphs, joined by spaces."""

    base: str
    paragraphs: Mapping[str, str]
    first_pass: str
    first_pass_paragraphs: tuple[str, ...]
    rules: tuple[RuleStep, ...]  # the rules in order, each with its instruction
    texts: Mapping[str, str]  # step name -> instruction (the first pass, each rule and each route)
    routes: tuple[RuleStep, ...] = ()  # `rules.routes`: question rules that choose the first pass's instruction

    def compose(self, names: Sequence[str]) -> str:
        return compose_instruction(self.base, self.paragraphs, names)

    def first_pass_for(self, question: str) -> str:
        """The first pass's instruction for this question text: the first route that fires, else `first_pass`."""
        return route_instruction(self.routes, question, self.first_pass)

    def sha256s(self) -> dict[str, str]:
        return {name: sha256_text(text) for name, text in self.texts.items()}


@dataclass(frozen=True)
class ArbiterSpec:
    """A cross-run stage of a multirun on the questions whose runs disagree (+design=pipeline_arbiter): its
    view and instruction; optionally its name (its step, metrics and artifacts), a question rule that narrows
    the questions (`select`: counting questions), whether the request lists the runs' answers
    (`earlier_answers`), and a memory of its own (`memory`: a model-built ledger) read instead of `view`."""

    view: str
    paragraphs: tuple[str, ...]
    instruction: str
    name: str = "arbiter"
    select: Any = None  # an `lme.answer.rules.Rule` on the question text, or None
    earlier_answers: bool = True
    memory: Component | None = None


@dataclass(frozen=True)
class Launch:
    """How this run was started, for the resume command a stopped job prints."""

    overrides: tuple[str, ...] = ()  # the job's command-line overrides
    sweep_dir: Path | None = None  # a multirun launched by this process (-m): its sweep directory
    argv: tuple[str, ...] = ()  # this process's arguments (a multirun's resume command repeats them)


@dataclass(frozen=True)
class Design:
    """A composed design, typed and frozen: what a job, the multirun parent, prereg, estimate, audit and the
    subcommands read instead of the config."""

    name: str
    seed: int
    config: Mapping[str, Any] = field(repr=False)  # the resolved composed config (Hydra's own keys aside)
    config_yaml: str = field(repr=False)  # the same, as YAML (logged with every run)
    config_sha256: str  # SHA-256 of the canonical design (`canonical_design`): the design's identity
    dataset: DatasetSpec
    retriever: Component
    memory: Component
    view: Component | None
    reader: ReaderSpec
    judge: JudgeSpec
    instructions: Instructions
    arbiter: ArbiterSpec | None
    budget: Budget
    ledger_path: Path
    study: str
    job_name: str | None  # the job's name in the ledger (None: its output directory)
    tracking: TrackingSettings
    cache_dir: Path
    data_dir: Path
    output_dir: Path  # where the job writes (Hydra's run directory)
    concurrency: int
    calls_in_flight: int | None
    verbose: bool
    progress: bool | str
    prereg: str | None  # the preregistration record a job is checked against
    launch: Launch = Launch()
    views: Mapping[str, Component] = field(default_factory=lambda: MappingProxyType({}))  # `views`: more, by name
    choices: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # group -> chosen option
    changed: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # key -> value unlike its file
    description: str = ""  # the design file's leading comment (`design_description`): its MLflow runs' description

    # -- components, built on demand --------------------------------------------------------------

    def build_retriever(self) -> Any:
        return self.retriever.build()

    def build_memory(self, retriever: Any) -> Any:
        return self.memory.build(retriever=retriever)

    def build_view(self, retriever: Any, name: str | None = None) -> Any:
        """The memory builder of the view named `name` (None: the `view` group's)."""
        return self.view_component(name).build(retriever=retriever)

    def view_component(self, name: str | None = None) -> Component:
        """The config node of the view named `name`: one the design adds under `views`, else (None or its name)
        the `view` group's."""
        if name is not None and name in self.views:
            return self.views[name]
        if self.view is None:
            raise LmeError("view: this design has no `view` group, so no rule or arbiter can read one.")
        if name is not None and name != self.view.name:
            raise LmeError(f"view {name!r}: not a view of this design (known: {', '.join(self.known_views())}).")
        return self.view

    def build_views(self, retriever: Any) -> dict[str, Any]:
        """The memory builder of every view a step reads, other than the first-pass memory, by name."""
        needed = {step.rule.view for step in self.instructions.rules} - {FIRST_PASS_VIEW}
        return {name: self.build_view(retriever, name) for name in sorted(needed)}

    def known_views(self) -> list[str]:
        """The views a step may name: the first-pass memory, the `view` group's view and those under `views`."""
        return known_views(self.view, self.views)

    def params(self) -> dict[str, str]:
        """MLflow params: what defines the design, tens not hundreds (the whole config is an artifact): its
        name and digest, each group's chosen option, the values that differ from the option files they come
        from (run-only keys aside), the models and the dataset. Without Hydra's choices (a subcommand), every
        value of the config. Secrets are refused, long texts hashed (`lme.tracking.runs.params_from_config`)."""
        from lme.tracking.runs import params_from_config

        if not self.choices:
            return params_from_config(plain(self.config))
        changed = {key: value for key, value in self.changed.items() if not run_only(key) and key != "design_name"}
        return {
            "design": self.name,
            "design.sha256": self.config_sha256,
            # a group placed by a package (`memory/writer@arbiter.memory.model`): MLflow refuses "@" in a key
            **{f"choice.{group.replace('@', ':')}": option for group, option in sorted(self.choices.items())},
            **params_from_config(plain(changed)),
            "reader.model": str(self.reader.model.node.get("model", "")),
            "judge.model": str(self.judge.model.node.get("model", "")),
            "dataset.name": self.dataset.name,
        }


def known_views(view: Component | None, views: Mapping[str, Component] | None = None) -> list[str]:
    """The views a step may name: the first-pass memory, the `view` group's view (when it has a name) and the
    design's further views (`views`)."""
    return [FIRST_PASS_VIEW, *([view.name] if view is not None and view.node.get("name") else []), *(views or {})]


def more_views(node: Any, view: Component | None) -> dict[str, Component]:
    """The design's further views (`views`: name -> a view node, e.g. placed by a design's defaults list as
    `- /view@views.whole_sessions_no_content_words: whole_sessions_no_content_words`), each named by its key;
    absent or null: none. A view whose `name` differs from its key, or whose key is another view's, is refused."""
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise LmeError("views: expected a mapping from view name to a view node (`_target_` and its arguments).")
    views: dict[str, Component] = {}
    taken = known_views(view)
    for key, value in node.items():
        name = str(key)
        where = f"views.{name}"
        if not name.isidentifier() or name in taken:
            raise LmeError(f"{where}: a view's name is a letter then letters, digits or _, and not "
                           f"{' or '.join(taken)} (the first-pass memory and the `view` group's view).")
        if not isinstance(value, Mapping) or not value.get("_target_"):
            raise LmeError(f"{where}: expected a view node with a `_target_` (conf/view/*.yaml).")
        if value.get("name") is not None and str(value["name"]) != name:
            raise LmeError(f"{where}.name: {value['name']!r} differs from the key {name!r}; a step names the view "
                           "by its key, and its memory notes name it by `name`: make them the same.")
        views[name] = Component("view", frozen({**value, "name": name}))
    return views


# -- from the config ---------------------------------------------------------------------------------


def resolved(cfg: Any) -> dict[str, Any]:
    """The config as plain data, interpolations resolved, Hydra's own keys left out; an unresolvable value
    is one sentence."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    import lme.config.resolvers  # noqa: F401

    try:
        if isinstance(cfg, DictConfig) and "hydra" in cfg:  # the multirun callback's config: Hydra's keys aside
            cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
        container = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise LmeError(f"config: {first_line(exc)}") from None
    if not isinstance(container, dict):
        raise LmeError("config: the composed config is not a mapping.")
    container.pop("hydra", None)
    return container


def design_from_config(cfg: Any, *, check: bool = True, data: bool = True) -> Design:
    """The `Design` of a composed config. With `check`, the config is first refused if it holds a secret
    and checked value by value (`lme.config.check`; `data=False` leaves the data file to the command that
    reads it); then the instructions are composed and every step's paragraphs checked against the memory
    it reads. Anything wrong is one `LmeError` sentence."""
    container = resolved(cfg)
    if check:
        from lme.config.check import validate_config
        from lme.util.secrets import refuse_secrets

        refuse_secrets(container, "the composed config")  # before any file or MLflow run is written
        validate_config(cfg, data=data)  # every value checked against its rule, in one sentence, before anything runs
    try:
        return _design(cfg, container)
    except (TypeError, ValueError) as exc:  # a value of the wrong kind that no check caught (check=False)
        raise LmeError(f"config: {first_line(exc)}.".replace("..", ".")) from None


def _design(cfg: Any, container: dict[str, Any]) -> Design:
    from omegaconf import OmegaConf

    choices = group_choices(cfg)
    cache_dir = Path(str(container.get("cache_dir", ".lme_cache")))

    def node(key: str) -> Mapping[str, Any]:
        value = container.get(key)
        return value if isinstance(value, Mapping) else {}

    dataset, budget = node("dataset"), node("budget")
    view = Component("view", frozen(container["view"])) if isinstance(container.get("view"), Mapping) else None
    views = more_views(container.get("views"), view)  # further views a step may name (`views`, usually none)
    source = load_instruction_source(container)  # instructions=study: the study's texts, verified, into the config
    instructions = compose_instructions(node("instructions"), container.get("rules"), view, views)
    if source is not None:
        from lme.answer.study_instructions import check_study_steps

        steps = {FIRST_PASS: instructions.first_pass_paragraphs,
                 **{step.rule.name: step.rule.paragraphs for step in (*instructions.rules, *instructions.routes)}}
        check_study_steps(source, steps, instructions.texts)
    memory = Component("memory", frozen(container.get("memory") or {}))
    arbiter = arbiter_spec(container.get("arbiter"), instructions, view)
    check_paragraphs(instructions, memory, view, arbiter, container.get("design_name"), views)
    judge = node("judge")
    reader = node("reader")
    dataset_spec = DatasetSpec(
        name=str(dataset.get("name")),
        path=Path(str(dataset.get("path"))).expanduser(),
        fetch=str(dataset["fetch"]) if dataset.get("fetch") else None,
        stream=bool(dataset.get("stream")),
        selection=Selection.from_config(
            **{key: container.get(key) for key in ("split", "question_ids", "question_types", "limit")},
            split_missing=container.get("split_missing", "error"),
        ),
        swept=sweeps_dataset(cfg),
        benchmark=str(dataset.get("benchmark") or "longmemeval"),
        options=MappingProxyType(dict(dataset.get("options") or {})),
    )  # its selection refuses a bad id list first
    return Design(
        name=str(container.get("design_name", "default")),
        seed=int(container.get("seed", 0)),
        config=frozen(container),
        config_yaml=OmegaConf.to_yaml(container),
        config_sha256=design_digest(container),
        dataset=dataset_spec,
        retriever=Component("retriever", frozen(container.get("retriever") or {})),
        memory=memory,
        view=view,
        reader=ReaderSpec(name=str(reader.get("name")), instruction_role=str(reader.get("instruction_role", "system")),
                          model=Component("reader.model", frozen(reader.get("model") or {})),
                          payload=str(reader.get("payload") or "lme")),
        judge=JudgeSpec(
            name=str(judge.get("name")), official=bool(judge.get("official")),
            model=Component("judge.model", frozen(judge.get("model") or {})),
            templates_path=str(judge["templates_path"]) if judge.get("templates_path") else None,
            templates=frozen(judge["templates"]) if judge.get("templates") else None,
            verdict=str(judge.get("verdict") or "contains_yes"),
            system_message=str(judge["system_message"]) if judge.get("system_message") else None,
            protocol=str(judge.get("protocol") or "longmemeval"),
        ),
        instructions=instructions,
        arbiter=arbiter,
        budget=Budget.from_config(budget),
        ledger_path=Path(str(budget.get("ledger_path") or cache_dir / "ledger.sqlite")),
        study=str(budget.get("study", "default")),
        job_name=str(budget["job"]) if budget.get("job") else None,
        tracking=TrackingSettings(**tracking_node(node("tracking"))),
        cache_dir=cache_dir,
        data_dir=Path(str(container.get("data_dir", ".lme_cache/data"))).expanduser(),
        output_dir=output_dir(),
        concurrency=int(container.get("concurrency", 8)),
        calls_in_flight=container.get("calls_in_flight"),
        verbose=bool(container.get("verbose")),
        progress=container.get("progress", True),
        prereg=str(container["prereg"]) if container.get("prereg") else None,
        launch=launch(),
        views=MappingProxyType(views),
        choices=frozen(choices),
        changed=frozen(changed_values(cfg, container, choices, config_roots())) if choices else MappingProxyType({}),
        description=design_description(choices.get("design"), config_roots()) if choices.get("design") else "",
    )


def tracking_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """The `tracking` group's values, `traces` as a mode name (YAML's bare off/on are booleans)."""
    values = dict(node)
    if isinstance(values.get("traces"), bool):
        values["traces"] = "full" if values["traces"] else "off"
    return values


def run_only(key: str) -> bool:
    """Whether a dotted config key says how or where a run happens (`RUN_ONLY_PATHS`, `RUN_ONLY_LEAVES`)."""
    parts = key.split(".")
    return any(".".join(parts[:n]) in RUN_ONLY_PATHS for n in range(1, len(parts) + 1)) or any(
        part.split("[")[0] in RUN_ONLY_LEAVES for part in parts)


def group_choices(cfg: Any) -> dict[str, str]:
    """Each config group's chosen option in this Hydra run (`hydra.runtime.choices`; Hydra's own groups
    aside); {} outside a Hydra run or callback (a subcommand's composition)."""
    choices: Any = None
    try:
        from hydra.core.hydra_config import HydraConfig

        choices = HydraConfig.get().runtime.choices
    except ValueError:
        hydra = cfg.get("hydra") if hasattr(cfg, "get") else None
        choices = hydra.runtime.choices if hydra is not None and "runtime" in hydra else None
    return {str(group): str(option) for group, option in (choices or {}).items()
            if option is not None and not str(group).startswith("hydra")}


def config_roots() -> list[Path]:
    """The folders configs come from: the config root and any on `hydra.searchpath` (in a Hydra run)."""
    from lme import CONF_DIR

    roots = [CONF_DIR]
    try:
        from hydra.core.hydra_config import HydraConfig

        for source in HydraConfig.get().runtime.config_sources:
            if source.schema == "file" and Path(source.path) not in roots:
                roots.append(Path(source.path))
    except ValueError:
        pass
    return roots


def design_description(option: str, roots: Sequence[Path]) -> str:
    """What a design file says it is: its leading comment (`# ...` lines before the first key, Hydra's
    `# @package` line aside), each paragraph's lines joined; '' when the file has none or is not found.
    It is the MLflow description (`mlflow.note.content`) of the design's runs, never part of the design."""
    for root in roots:
        path = Path(root) / "design" / f"{option}.yaml"
        if not path.is_file():
            continue
        paragraphs: list[list[str]] = [[]]
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            text = line.lstrip("#")
            if text.strip().startswith("@package"):
                continue
            if text.startswith("   ") and text.strip():  # an indented line (a command): a paragraph of its own
                paragraphs += [[f"`{text.strip()}`"], []]
            elif text.strip():
                paragraphs[-1].append(text.strip())
            else:
                paragraphs.append([])
        return "\n\n".join(" ".join(lines) for lines in paragraphs if lines)
    return ""


def changed_values(cfg: Any, container: Mapping[str, Any], choices: Mapping[str, str],
                   roots: Sequence[Path]) -> dict[str, Any]:
    """Dotted key -> resolved value of every leaf of the composed config that is not what the file it comes
    from says: a group's leaves against its chosen option's file, the primary keys against config.yaml.
    Compared as written (interpolations unresolved), so `dataset.path=/x` differs from `${data_dir}/...`; a
    group whose option file is global (`@package _global_`) or cannot be found counts as all changed."""
    from omegaconf import OmegaConf

    def load(relative: str) -> dict[str, Any] | None:
        """An option file as written; the same group's options its defaults list places (`fts5@retrievers.bm25`)
        merged in under their package, its own keys last."""
        for root in roots:
            path = root / relative
            if path.is_file():
                text = path.read_text(encoding="utf-8")
                if "@package _global_" in text:
                    return None
                node = OmegaConf.create(text)
                merged = OmegaConf.create({})
                for entry in node.pop("defaults", None) or []:
                    name, _, package = str(entry).partition("@")
                    if not isinstance(entry, str) or entry == "_self_" or " " in name or "/" in name:
                        continue
                    part = load(f"{Path(relative).parent}/{name}.yaml")
                    if part is None:
                        return None
                    placed = OmegaConf.create({})
                    if package:
                        OmegaConf.update(placed, package, part, force_add=True)
                    else:
                        placed = OmegaConf.create(part)
                    merged = OmegaConf.merge(merged, placed)
                return OmegaConf.to_container(OmegaConf.merge(merged, node), resolve=False)  # type: ignore[return-value]
        return None

    written = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(written, dict)
    written.pop("hydra", None)
    primary = load("config.yaml") or {}
    changed: dict[str, Any] = {}
    for key, value in written.items():
        if key in choices and isinstance(value, Mapping):
            base = load(f"{key}/{choices[key]}.yaml")
            mine, theirs = flatten(value, f"{key}."), flatten(base, f"{key}.") if base is not None else {}
        else:
            mine, theirs = flatten({key: value}), flatten({key: primary[key]}) if key in primary else {}
        resolved_leaves = flatten({key: container.get(key)})
        for leaf, text in mine.items():
            if leaf not in theirs or theirs[leaf] != text:
                changed[leaf] = resolved_leaves.get(leaf, text)
    return changed


def design_digest(container: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical design; a value JSON cannot hold (NaN, infinity) is named in one sentence."""
    try:
        return sha256_json(canonical_design(container))
    except ValueError:
        def finite(value: Any) -> bool:
            if isinstance(value, (list, tuple)):
                return all(finite(item) for item in value)
            return not isinstance(value, float) or math.isfinite(value)

        bad = next((path for path, value in flatten(canonical_design(container)).items() if not finite(value)), "?")
        raise LmeError(f"config {bad}: NaN or infinity is not a value a design can hold; quote it if it is text.") from None


def load_instruction_source(container: dict[str, Any]) -> str | None:
    """`instructions.source` set (instructions=study): read the study's base instruction and paragraphs from
    that file, every step verified against the study's published digest (`lme.answer.study_instructions`),
    and put them in the config as `instructions.base` and `instructions.paragraphs`, so that the design's
    digest, prereg and the audit see the texts the run uses. Paragraphs of other names the config gives stay
    (a variant's own paragraph); a config `base`, or a paragraph named like one of the study's, is refused.
    Returns the file's path, or None without a source."""
    node = container.get("instructions")
    if not isinstance(node, dict) or not node.get("source"):
        return None
    from lme.answer.study_instructions import STUDY_PARAGRAPHS, load_study_instructions

    path = str(node["source"])
    own = dict(node.get("paragraphs") or {})
    clash = [name for name in own if name in STUDY_PARAGRAPHS]
    if node.get("base") or clash:
        what = "instructions.base" if node.get("base") else f"instructions.paragraphs.{clash[0]}"
        raise LmeError(f"{what}: the study's texts come from instructions.source ({path}); drop {what} or "
                       "instructions.source.")
    study = load_study_instructions(path)
    node["base"] = study.base
    node["paragraphs"] = {**dict(study.paragraphs), **own}
    return str(study.path)


def compose_instructions(instructions: Mapping[str, Any], rules: Any, view: Component | None,
                         views: Mapping[str, Component] | None = None) -> Instructions:
    """Every step's instruction: `instructions.base` followed by its paragraphs (`instructions.first_pass`
    for the first pass, `rules.definitions.NAME.paragraphs` for a rule), joined by single spaces. A step
    reads the view its `rules.order` entry names, else its rule's: one of `known_views(view, views)`."""
    base = str(instructions.get("base", ""))
    paragraphs = {str(key): str(value) for key, value in (instructions.get("paragraphs") or {}).items()}
    names = tuple(str(name) for name in instructions.get("first_pass") or [])
    first_pass = compose_instruction(base, paragraphs, names)
    parsed = parse_rules(rules, paragraphs, known_views(view, views))  # type: ignore[arg-type]
    routed = parse_routes(rules, paragraphs, known_views(view, views))  # type: ignore[arg-type]
    texts = {FIRST_PASS: first_pass}
    steps, routes = [], []
    for rule in parsed:
        text = compose_instruction(base, paragraphs, rule.paragraphs)
        texts.setdefault(rule.name, text)
        steps.append(RuleStep(rule, text))
    for rule in routed:  # a route's instruction is its rule's, as a re-read of that rule would send it
        text = compose_instruction(base, paragraphs, rule.paragraphs)
        texts.setdefault(rule.name, text)
        routes.append(RuleStep(rule, text))
    return Instructions(base=base, paragraphs=MappingProxyType(paragraphs), first_pass=first_pass,
                        first_pass_paragraphs=names, rules=tuple(steps), texts=MappingProxyType(texts),
                        routes=tuple(routes))


def arbiter_spec(node: Any, instructions: Instructions, view: Component | None) -> ArbiterSpec | None:
    if node is None:
        return None
    node = node if isinstance(node, Mapping) else {}
    memory = node.get("memory")
    if memory is not None and not (isinstance(memory, Mapping) and memory.get("_target_")):
        raise LmeError("arbiter.memory: expected a memory node with a `_target_` (e.g. a model-built ledger), or null.")
    stage_memory = Component("arbiter.memory", frozen(memory)) if memory is not None else None
    name = stage_memory.name if stage_memory is not None else str(node.get("view", FIRST_PASS_VIEW))
    if stage_memory is None and name not in known_views(view):
        raise LmeError(f"arbiter.view: {name!r} is not a view (known: {', '.join(known_views(view))}).")
    paragraphs = tuple(str(item) for item in node.get("paragraphs") or [])
    for index, paragraph in enumerate(paragraphs):
        if paragraph not in instructions.paragraphs:
            raise LmeError(f"arbiter.paragraphs[{index}]: {paragraph!r} is not defined in instructions.paragraphs.")
    stage = str(node.get("name") or "arbiter")
    if stage != "arbiter" and not stage.isidentifier():
        raise LmeError(f"arbiter.name: {stage!r} is not a name (a letter, then letters, digits or _).")
    from lme.answer.rules import Rule

    select = node.get("select")
    rule = None
    if select is not None:
        if not isinstance(select, Mapping) or set(select) - {"on", "patterns", "exclude"}:
            raise LmeError("arbiter.select: expected a question rule, a mapping with keys on, patterns, exclude.")
        rule = Rule(name=f"{stage}_select", on=str(select.get("on", "question")),
                    patterns=tuple(str(p) for p in select.get("patterns") or ()),
                    exclude=tuple(str(p) for p in select.get("exclude") or ()))
        if rule.on != "question":
            raise LmeError("arbiter.select.on: a cross-run stage selects on the question text only (on: question).")
    return ArbiterSpec(view=name, paragraphs=paragraphs, instruction=instructions.compose(paragraphs), name=stage,
                       select=rule, earlier_answers=bool(node.get("earlier_answers", True)), memory=stage_memory)


def check_paragraphs(instructions: Instructions, memory: Component, view: Component | None,
                     arbiter: ArbiterSpec | None, design: Any, views: Mapping[str, Component] | None = None) -> None:
    """Refuse a design whose instruction describes another memory than the one its step reads (the user-log
    paragraph over `memory=retrieved`): lme's own builders and the design's declare their paragraphs."""
    from lme.memory.paragraphs import LME_BUILDERS, paragraph_mismatch

    more = list((views or {}).values())
    targets = [*LME_BUILDERS, *(c.target for c in (memory, view, *more) if c is not None and c.target)]
    reads = {FIRST_PASS_VIEW: memory, **({view.name: view} if view is not None else {}), **(views or {})}
    steps = [(FIRST_PASS, memory, instructions.first_pass_paragraphs)]
    steps += [(step.rule.name, reads.get(step.rule.view, memory), step.rule.paragraphs)
              for step in (*instructions.rules, *instructions.routes)]
    if arbiter is not None:
        stage_reads = arbiter.memory if arbiter.memory is not None else reads.get(arbiter.view, memory)
        if arbiter.memory is not None:
            targets.append(arbiter.memory.target)
        steps.append((arbiter.name, stage_reads, arbiter.paragraphs))
    for step, component, paragraphs in steps:
        others = [target for target in targets if target != component.target]
        problem = paragraph_mismatch(step, component.name, component.target, list(paragraphs), others)
        if problem:
            raise LmeError(f"design {design}: {problem}")


def sweeps_dataset(cfg: Any) -> bool:
    """Whether the sweep's overrides give the jobs different data files (`dataset=s,oracle`, `dataset.path=a,b`)."""
    try:
        overrides = list(cfg.hydra.overrides.task)
    except Exception:  # noqa: BLE001 - not a Hydra config with overrides
        return False
    for override in overrides:
        key, _, value = str(override).partition("=")
        if key.lstrip("+~").startswith("dataset") and ("," in value or "(" in value):
            return True
    return False


def output_dir() -> Path:
    """Hydra's run directory for this job; `outputs` outside a Hydra run (a subcommand, a test)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:
        return Path("outputs")


def launch() -> Launch:
    """The running Hydra job's overrides, and its sweep directory when this process launched a multirun."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra = HydraConfig.get()
    except (ImportError, ValueError):
        return Launch(argv=tuple(sys.argv[1:]))
    argv = tuple(sys.argv[1:])
    sweep = None
    if hydra.mode == RunMode.MULTIRUN and any(flag in argv for flag in ("-m", "--multirun")):
        sweep = Path(str(hydra.sweep.dir)).absolute()
    return Launch(overrides=tuple(str(item) for item in hydra.overrides.task), sweep_dir=sweep, argv=argv)


def compose_design(overrides: Sequence[str], *, check: bool = False) -> Design:
    """The design a run with these overrides would get, for the subcommands (`check`: every value against its
    rule as a run checks them, the data file aside, which the command that reads it reports). Unchecked,
    the instructions and paragraphs are still checked, and a value of the wrong kind is still one sentence."""
    from lme.config.compose import compose_config

    return design_from_config(compose_config(overrides), check=check, data=False)
