"""What a job checks before its run, checked for every job of a command before Hydra starts.

`python -m lme` composes each job's design before Hydra writes anything (`lme.cli.check_config_before_hydra`:
every value, the instructions, a key in the config). `check_before_run(designs)` then checks, for those
designs, what each job would otherwise find only after its sweep's parent MLflow run exists (a multirun) or
after Hydra wrote its run directory (a single run), so a refusal is one `lme: error:` sentence and exit 2 with
nothing written, no `multirun/` or `outputs/` folder and no MLflow store or run:

- the reader and the judge build, the judge's templates read and verified (`JudgeSpec.build`);
- every model's credentials, by `lme.models.gateway.preflight`'s rule: the reader's, the judge's and any other
  model node of the config (a model-built memory's writer), and an embedding API's key (a `litellm` backend
  retriever's `api_key_env`, the dense retriever's own rule); an offline model needs none. Each key named by an
  `api_key_env` is checked as a value too (`lme.models.keys`): whitespace at either end or inside, a control or
  a non-ASCII character is refused in one sentence naming the variable, the character's position and code point
  (never the key), where before every call failed as a retryable server error;
- every external memory system (`lme.memory.systems`) builds (its package installed, its settings valid), and a
  hosted one's key (`api_key_env`) is set and a value an HTTP header can carry;
- the data file opens as its suffix says and starts a non-empty JSON array (its first bytes; the records are
  the job's, which loads the file beside its start-up), and a `split` names a committed split or an id list;
  a small uncompressed file (the bundled sample) is parsed and the selection made, as the job refuses it;
- a preregistration record (`prereg=`): the data file's selected questions loaded (once per process: the jobs
  of a multirun in this process reuse them) and the design compared with the record, the same refusal, with
  the same sentence, as the job's `lme.provenance.prereg.check_run`.

Each distinct thing is checked once: the seeds of a sweep share their models, judge, data file and record
comparison (only the seed itself is checked per seed), and a sweep over designs checks each design.

Measured (2 cores shared with other test runs, load 6-7; OPENAI_API_KEY unset): `+design=bm25 reader=gpt5_mini
-m seed=1,2,3` on the bundled sample refuses in 1.2-3.3 s wall, ~1.5 s of CPU (before: 21.6 s and a FAILED
parent run); the issue's `+design=pipeline setup=study instructions=study -m seed=1,2,3` with LME_DATA_DIR holding
S, the templates and the instructions, 1.6 s of CPU (4.5-5.4 s wall at that load). Of that, composing the three
configs is nearly all; these checks take ~10 ms there (S: its first bytes only) and ~50 ms for the sample, whose
42 questions are parsed for the selection: what they add to a successful run's start. No litellm import while every
paid model names its key's variable (`api_key_env`, as the OpenAI, Anthropic and Gemini options do). A paid model
without one (`reader=local`: a local server) is checked by litellm's own `validate_environment`, as the job checks
it, which imports litellm here (~2.5 s idle); the run needs it anyway, but it then no longer overlaps the data
file's decompression in the job (up to ~2.5 s more start-up for a single run on S).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from lme.config.design import Design, plain
from lme.util.errors import LmeError

_MODEL_SPEC = "ModelSpec"  # `_target_: lme.models.gateway.ModelSpec` (or lme.models.spec.ModelSpec)
_DENSE = "DenseRetriever"


def check_before_run(designs: Iterable[Design]) -> None:
    """Raise `LmeError` (one sentence) for the first thing a job of these designs would refuse before its run."""
    checks = BeforeRun()
    for design in designs:
        checks.check(design)


class BeforeRun:
    """The checks of `check_before_run`, remembering what was checked already (by its config or its path)."""

    def __init__(self) -> None:
        self.seen: set[Any] = set()
        self.records: dict[Any, tuple[dict[str, Any], list[Any]]] = {}
        self.ids: dict[Any, list[str]] = {}

    def first_time(self, key: Any) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def check(self, design: Design) -> None:
        """The job's order (`lme.study.job._run_job`): reader and judge, credentials, data file, preregistration."""
        from lme.util.hashing import sha256_json
        from lme.models.gateway import preflight

        specs = []
        for part, spec in (("reader", design.reader), ("judge", design.judge)):
            if self.first_time((part, sha256_json(plain(design.config.get(part))))):
                specs.append(spec.build().model)  # a judge reads and verifies its templates
        models = [spec for spec in specs + list(other_models(design)) if self.first_time(("model", _identity(spec)))]
        preflight(models)  # no request; imports litellm only for a paid model without api_key_env
        for key_env, name in embedding_keys(design):
            if self.first_time(("embedding key", key_env)):
                from lme.retrieval.dense import require_embedding_key  # numpy: only for an embedding API

                require_embedding_key(name, key_env)
                from lme.models.keys import check_key_variable

                check_key_variable(key_env, f"embedding model {name}")  # a newline, a non-ASCII character
        for path, node in memory_systems(design):
            if self.first_time(("memory system", sha256_json(node))):
                check_memory_system(path, node)
        spec = design.dataset
        if spec.benchmark != "longmemeval" and self.first_time(("speakers", design.name, spec.benchmark)):
            one_user_memories(design)
        if self.first_time(("data", str(spec.path))):
            if spec.benchmark == "longmemeval":
                sniff_data_file(spec.path, spec.name)
            else:  # another benchmark's file is its own shape: the loader reads it (`selected_ids` for a small one)
                from lme.data.load import check_data_file

                check_data_file(spec.path, f"dataset {spec.name}")
        if spec.selection.split is not None and self.first_time(("split", spec.selection.split)):
            from lme.data.splits import split_ids

            split_ids(spec.selection.split)
        if small_file(spec.path):  # the bundled sample: the selection too (split=dev on it selects nothing)
            self.selected_ids(spec)
        if design.prereg:
            self.check_prereg(design)
        tracking = design.tracking
        if tracking.enabled and self.first_time(("tracking", tracking.uri, tracking.artifact_location)):
            from lme.tracking.runs import check_store  # no MLflow import: the store's file, a server's address

            check_store(tracking)  # damaged, a directory, locked, unreachable: one sentence before any folder exists

    def selected_ids(self, spec: Any) -> list[str]:
        """The ids the job would select from the data file, refused as the job refuses them (`load_dataset`)."""
        key = (str(spec.path), spec.selection)
        if key not in self.ids:
            if small_file(spec.path):  # parsed here and again by the job: a few ms, and the job's start-up unchanged
                self.ids[key] = selection_of(spec)
            else:  # parsed once, kept in this process for its jobs (`load_questions_once`)
                from lme.data.dataset import load_dataset, question_ids_of

                self.ids[key] = question_ids_of(load_dataset(spec)[1])
        return self.ids[key]

    def check_prereg(self, design: Design) -> None:
        """The job's `check_run`, its notes left to the job: the comparison once per record, design and
        selection; the seed for each seed."""
        from lme.provenance.prereg import record_differences, refuse_blocking, with_seed

        spec = design.dataset
        key = (str(design.prereg), design.config_sha256, str(spec.path), spec.selection)
        if key not in self.records:
            self.records[key] = record_differences(design, spec.path, self.selected_ids(spec))
        stored, differences = self.records[key]
        refuse_blocking(design.prereg, with_seed(differences, design.seed, stored))


SMALL_FILE_BYTES = 1 << 20  # an uncompressed data file this small is parsed in ~10-60 ms (the sample: 0.28 MB)


def small_file(path: Path) -> bool:
    """Whether the data file is an uncompressed `.json` file small enough to parse twice (here and in the job)."""
    try:
        return path.suffix == ".json" and path.stat().st_size <= SMALL_FILE_BYTES
    except OSError:
        return False


def selection_of(spec: Any) -> list[str]:
    """The ids `load_dataset(spec)` would select, with its refusals (a selection of nothing, an id or a split id
    the file lacks), without its warning (the job gives it) and without keeping the questions."""
    from lme.data.dataset import load_file
    from lme.data.select import select_questions

    selected = select_questions(load_file(spec.path, spec.benchmark, spec.options), spec.selection, spec.path)
    if not selected.questions:  # load_dataset's sentence
        raise LmeError(f"dataset {spec.name}: {spec.path} selects no question ({spec.selection.describe()}).")
    return [question.question_id for question in selected.questions]


def _identity(spec: Any) -> tuple[str, str | None, str | None]:
    return (spec.model, spec.api_base, spec.api_key_env)


def _nodes(value: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every mapping of a plain config, with its dotted path."""
    if isinstance(value, Mapping):
        yield path, value
        for key, item in value.items():
            yield from _nodes(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _nodes(item, f"{path}[{index}]")


def other_models(design: Design) -> Iterator[Any]:
    """The model specs of the config besides the reader's and the judge's (a model-built memory's writer)."""
    from lme.models.spec import ModelSpec

    names = {f.name for f in fields(ModelSpec)}
    for path, node in _nodes(plain(design.config)):
        if path in ("reader.model", "judge.model") or not str(node.get("_target_", "")).endswith(_MODEL_SPEC):
            continue
        if isinstance(node.get("model"), str):
            yield ModelSpec(**{key: value for key, value in node.items() if key in names})


def embedding_keys(design: Design) -> Iterator[tuple[str, str]]:
    """(api_key_env, model) of every retriever that embeds through an API (`backend: litellm`) and names its key."""
    for _, node in _nodes(plain(design.config)):
        if (str(node.get("_target_", "")).endswith(_DENSE) and node.get("backend") == "litellm"
                and node.get("api_key_env")):
            yield str(node["api_key_env"]), str(node.get("name") or node.get("model"))


_SYSTEMS = "lme.memory.systems."
_SYSTEM_BUILDER = "lme.memory.systems.base.SystemMemoryBuilder"


def memory_systems(design: Design) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, node) of every external memory system of the config (`memory.system`, a view's `system`)."""
    for path, node in _nodes(plain(design.config)):
        target = str(node.get("_target_", ""))
        if target.startswith(_SYSTEMS) and target != _SYSTEM_BUILDER:
            yield path, node


def check_memory_system(path: str, node: Mapping[str, Any]) -> None:
    """A memory system as the job would build it (its package installed, its settings valid: the constructor's own
    sentences; nothing is opened or sent), and a hosted system's key, by `lme.memory.systems.hosted.api_key`'s
    rule (set, and a value an HTTP header can carry)."""
    from lme.config.components import build

    build(node, path)
    if node.get("api_key_env") is not None:
        from lme.memory.systems.hosted import api_key

        api_key(str(node["api_key_env"]), str(node.get("name") or path))


_USER_LOG = "UserLogMemoryBuilder"


def one_user_memories(design: Design) -> None:
    """Refuse, before the run, a memory or view that reads "the user's" messages on a benchmark of two people
    (`lme.data.benchmark.require_one_user`, which the builder itself also applies)."""
    from lme.data.benchmark import benchmark_named

    benchmark = benchmark_named(design.dataset.benchmark)
    if benchmark.speakers != "two-people":
        return
    for path, node in _nodes(plain(design.config)):
        if str(node.get("_target_", "")).endswith(_USER_LOG) and node.get("speakers") is None:
            raise LmeError(f"design {design.name}: {path} is the user log, which reads the user's messages, and "
                           f"{benchmark.title} is a conversation between two people with no user; set "
                           f"{path}.speakers=both (every message of both) or {path}.speakers=asked_about (the "
                           f"speaker the question names), or choose a memory that reads both speakers "
                           f"(memory=retrieved, memory=full_history).")


def sniff_data_file(path: Path, name: str) -> None:
    """The data file is a readable regular file whose (decompressed) content starts a non-empty JSON array: its
    first bytes, read as the loader reads the file (`lme.data.stream.check_top_level`, a few ms whatever the
    file's size), with the loader's sentences. The records themselves are the job's (`load_dataset`)."""
    from lme.data.load import check_data_file
    from lme.data.stream import check_top_level

    check_data_file(path, f"dataset {name}")  # missing, a directory, a FIFO, no permission
    check_top_level(path)


__all__: Sequence[str] = ["BeforeRun", "check_before_run", "sniff_data_file"]
