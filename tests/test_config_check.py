"""`lme.config.check.validate_config`: every user-settable value, one whole sentence naming key, rule and value.

Most cases compose the config once and set a value as Hydra would type it from the command line
(`seed=abc` is the string 'abc', `seed=1.5` a float); a few go through Hydra's own override parser.
"""

from __future__ import annotations

import copy
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from lme.cli import CONF_DIR, compose_config
from lme.config.check import validate_config
from lme.util.errors import LmeError

DESIGNS = sorted(path.stem for path in (CONF_DIR / "design").glob("*.yaml"))


@pytest.fixture(scope="module")
def base() -> DictConfig:
    return compose_config([])


def with_values(cfg: DictConfig, **values: Any) -> DictConfig:
    """A copy of `cfg` with dotted keys (`__` for `.`) set, added when new."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        for key, value in values.items():
            OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return cfg


def refused(cfg: DictConfig) -> str:
    with pytest.raises(LmeError) as caught:
        validate_config(cfg)
    message = str(caught.value)
    assert "\n" not in message and message.endswith("."), message
    return message


# --- what ships is valid ----------------------------------------------------------------------------------


def test_the_default_config_and_every_design_pass(base: DictConfig) -> None:
    validate_config(base)
    for design in DESIGNS:
        validate_config(compose_config([f"+design={design}"]))


def test_the_paper_setup_passes_once_its_data_file_exists(tmp_path: Path) -> None:
    data = tmp_path / "s.json"
    data.write_text("[]", encoding="utf-8")  # validate_config checks the path, not the contents
    validate_config(compose_config(["setup=paper", "+design=pipeline", f"dataset.path={data}"]))
    cfg = compose_config(["setup=paper", "+design=pipeline", f"dataset.path={tmp_path / 'absent.json'}"])
    validate_config(cfg, data=False)  # commands that do not read the data
    assert refused(cfg) == (
        f"dataset.path: {tmp_path / 'absent.json'}: file not found (dataset absent); pass dataset.path=FILE."
    )


# --- through Hydra's parser: the types a command line gives -----------------------------------------------


@pytest.mark.parametrize(
    ("override", "sentence"),
    [
        ("seed=abc", "seed: expected an integer, got 'abc'."),
        ("seed=1.5", "seed: expected an integer, got 1.5."),
        ("seed=true", "seed: expected an integer, got true."),
        ("concurrency=0", "concurrency: expected an integer >= 1, got 0."),
        ("concurrency=-2", "concurrency: expected an integer >= 1, got -2."),
        ("limit=abc", "limit: expected null or an integer >= 1, got 'abc'."),
        ("memory.max_bytes=-5", "memory.max_bytes: expected an integer >= 1, got -5."),
        ("+retriever.top_k=0", "retriever.top_k: expected an integer >= 1, got 0."),
        ("question_ids=[6e984301]", "question_ids: expected null, an id or a list of them, got inf, which Hydra read "
                                    "as a float; quote it, e.g. question_ids=['6e984301']."),
        ("tracking.uri=foo://x", "tracking.uri: unknown tracking URI scheme foo: in 'foo://x' (known: sqlite:///PATH, "
                                 "postgresql://, mysql://, mssql:// (each may name a +driver), http://, https:// or "
                                 "databricks)."),
    ],
)
def test_command_line_values_are_refused_in_one_sentence(override: str, sentence: str) -> None:
    assert refused(compose_config([override])) == sentence


# --- every rule ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        ({"seed": -3}, None),
        ({"seed": 2**40}, None),
        ({"concurrency": 1.0}, "concurrency: expected an integer >= 1, got 1.0."),
        ({"concurrency": "8"}, "concurrency: expected an integer >= 1, got '8'."),
        ({"calls_in_flight": 0}, "calls_in_flight: expected null or an integer >= 1, got 0."),
        ({"calls_in_flight": 32}, None),
        ({"limit": 0}, "limit: expected null or an integer >= 1, got 0."),
        ({"limit": -1}, "limit: expected null or an integer >= 1, got -1."),
        ({"limit": 3}, None),
        ({"budget__job_dollars": -0.01}, "budget.job_dollars: expected null or a number >= 0, got -0.01."),
        ({"budget__study_dollars": float("nan")}, "budget.study_dollars: expected null or a number >= 0, got nan."),
        ({"budget__study_dollars": 0}, None),
        ({"budget__job_calls": 2.5}, "budget.job_calls: expected null or an integer >= 0, got 2.5."),
        ({"budget__study_calls": -1}, "budget.study_calls: expected null or an integer >= 0, got -1."),
        ({"budget__study": ""}, "budget.study: expected a non-empty string, got ''."),
        ({"memory__top_k": 0}, "memory.top_k: expected an integer >= 1, got 0."),
        ({"view__top_k": -1}, "view.top_k: expected an integer >= 1, got -1."),
        ({"view__max_bytes": 0}, "view.max_bytes: expected an integer >= 1, got 0."),
        ({"view__message_max_chars": "many"}, "view.message_max_chars: expected an integer >= 1, got 'many'."),
        ({"view__date_sessions": -1}, "view.date_sessions: expected an integer >= 0, got -1."),
        ({"view__date_window_days": 0}, None),
        ({"reader__model__concurrency": 0}, "reader.model.concurrency: expected an integer >= 1, got 0."),
        ({"judge__model__timeout_s": 0}, "judge.model.timeout_s: expected a number > 0, got 0."),
        ({"judge__model__timeout_s": 0.5}, None),
        ({"reader__model__unreachable_after_s": -1},
         "reader.model.unreachable_after_s: expected a number > 0, got -1."),
        ({"reader__model__max_attempts": 0}, "reader.model.max_attempts: expected an integer >= 1, got 0."),
        ({"reader__model__input_cost_per_token": -1e-6},
         "reader.model.input_cost_per_token: expected null or a number >= 0, got -1e-06."),
        ({"reader__model__requests_per_minute": 0},
         "reader.model.requests_per_minute: expected null or a number > 0, got 0."),
        ({"reader__model__params__max_tokens": 0}, "reader.model.params.max_tokens: expected an integer >= 1, got 0."),
        ({"judge__model__params__temperature": 3}, "judge.model.params.temperature: expected a number from 0 to 2, got 3."),
        ({"reader__model__params": "fast"}, "reader.model.params: expected null or a mapping of names to values, got 'fast'."),
        ({"reader__model__model": ""}, "reader.model.model: expected a non-empty string, got ''."),
        ({"reader__model__api_base": "localhost:8000"},
         "reader.model.api_base: expected null or an http:// or https:// URL, got 'localhost:8000'."),
        ({"reader__model__api_base": "http://127.0.0.1:8765/v1"}, None),
        ({"reader__model__api_key_env": "MY KEY"},
         "reader.model.api_key_env: expected null or the name of an environment variable (letters, digits and _), "
         "got 'MY KEY'."),
        ({"reader__instruction_role": "admin"}, "reader.instruction_role: expected one of system, user, developer, got 'admin'."),
        ({"judge__official": "yes"}, "judge.official: expected true or false, got 'yes'."),
        ({"verbose": 1}, "verbose: expected true or false, got 1."),
        ({"dataset__stream": "true"}, "dataset.stream: expected true or false, got 'true'."),
        ({"split_missing": "ignore"}, "split_missing: expected one of error, skip, got 'ignore'."),
        ({"question_types": ["multi-hops"]}, "question_types: expected null, a question type or a list of them (known: "
         "single-session-user, single-session-assistant, single-session-preference, multi-session, "
         "temporal-reasoning, knowledge-update, multi-hop, temporal, open-domain, single-hop, adversarial), got "
         "'multi-hops'."),
        ({"question_types": ["multi-hop"]}, None),  # LoCoMo's category
        ({"question_types": "multi-session"}, None),
        ({"question_ids": ["a1", 123]}, None),
        ({"design_name": " "}, "design_name: expected a non-empty string, got ' '."),
        ({"tracking__enabled": "no"}, "tracking.enabled: expected true or false, got 'no'."),
        ({"tracking__experiment": None}, "tracking.experiment: expected a non-empty string, got null."),
        ({"tracking__uri": "sqlite://mlflow.db"}, "tracking.uri: expected sqlite:///PATH (three slashes, then the "
         "database file, e.g. sqlite:///mlflow.db), got 'sqlite://mlflow.db'."),
        ({"tracking__uri": "https://mlflow.example.org"}, None),
        ({"tracking__uri": "postgresql+psycopg2://user@host/db"}, None),
        ({"tracking__uri": "databricks"}, None),
        ({"memory__overflow_policy": "oldest"},
         "memory.overflow_policy: expected one of retrieved_and_newest, newest, got 'oldest'."),
        ({"instructions__base": ""}, "instructions.base: expected a non-empty string, got ''."),
    ],
)
def test_each_rule(base: DictConfig, values: dict[str, Any], sentence: str | None) -> None:
    cfg = with_values(base, **values)
    if sentence is None:
        validate_config(cfg)
    else:
        assert refused(cfg) == sentence


def test_user_log_memory_rules(base: DictConfig) -> None:
    full = compose_config(["memory=full_history"])
    validate_config(with_values(full, memory__overflow_policy="oldest"))  # the full history's own policy
    assert refused(with_values(full, memory__overflow_policy="retrieved_and_newest")) == (
        "memory.overflow_policy: expected one of oldest, newest, refuse, got 'retrieved_and_newest'.")
    cfg = compose_config(["+design=pipeline"])
    assert refused(with_values(cfg, memory__overflow_policy="oldest")) == (
        "memory.overflow_policy: expected one of retrieved_and_newest, newest, got 'oldest'."
    )
    assert refused(with_values(cfg, memory__overflow_reply_reserve_bytes=-1)) == (
        "memory.overflow_reply_reserve_bytes: expected an integer >= 0, got -1."
    )
    assert refused(with_values(cfg, memory__overflow_reply_reserve_bytes=180_000)) == (
        "memory.overflow_reply_reserve_bytes: expected less than memory.max_bytes (180000), got 180000."
    )
    validate_config(with_values(cfg, memory__overflow_reply_reserve_bytes=0))


def test_retriever_rules() -> None:
    hybrid = compose_config(["+design=hybrid"])
    semantic = "retriever.retrievers.semantic"
    assert refused(with_values(hybrid, **{f"{semantic}.device": "gpu"})) == (
        f"{semantic}.device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'."
    )
    validate_config(with_values(hybrid, **{f"{semantic}.device": "cuda:1"}))
    assert refused(with_values(hybrid, **{f"{semantic}.batch_size": 0})) == (
        f"{semantic}.batch_size: expected an integer >= 1, got 0."
    )
    assert refused(with_values(hybrid, **{f"{semantic}.backend": "onnx"})) == (
        f"{semantic}.backend: expected one of sentence-transformers, litellm, got 'onnx'."
    )
    assert refused(with_values(hybrid, retriever__depth=0)) == "retriever.depth: expected an integer >= 1, got 0."
    assert refused(with_values(hybrid, retriever__k=-1)) == "retriever.k: expected a number >= 0, got -1."
    lucene = compose_config(["retriever=lucene"])
    assert refused(with_values(lucene, retriever__b=1.5)) == "retriever.b: expected a number from 0 to 1, got 1.5."


# --- paths ---------------------------------------------------------------------------------------------------


def test_cache_dir_must_be_a_directory_or_creatable(base: DictConfig, tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert refused(with_values(base, cache_dir=str(a_file))) == f"cache_dir: {a_file} is a file, not a directory."
    assert refused(with_values(base, cache_dir=str(a_file / "sub" / "dir"))) == (
        f"cache_dir: {a_file / 'sub' / 'dir'} cannot be created: {a_file} is a file, not a directory."
    )
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    assert refused(with_values(base, cache_dir=str(dangling))) == (
        f"cache_dir: {dangling} is a symbolic link that cannot be resolved (dangling, or a loop)."
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert refused(with_values(base, cache_dir=str(fifo))) == f"cache_dir: {fifo} is a FIFO (named pipe), not a directory."
    validate_config(with_values(base, cache_dir=str(tmp_path / "new" / "cache")))  # created later, by the run
    assert not (tmp_path / "new").exists()  # validation creates nothing


def test_files_lme_writes(base: DictConfig, tmp_path: Path) -> None:
    assert refused(with_values(base, budget__ledger_path=str(tmp_path))) == (
        f"budget.ledger_path: {tmp_path} is a directory, not a file."
    )
    assert refused(with_values(base, tracking__uri=f"sqlite:///{tmp_path}")) == (
        f"tracking.uri: {tmp_path} is a directory, not a file."
    )
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "ledger.sqlite"))
        assert refused(with_values(base, budget__ledger_path=str(tmp_path / "ledger.sqlite"))) == (
            f"budget.ledger_path: {tmp_path / 'ledger.sqlite'} is a socket, not a regular file."
        )


def test_dataset_path_must_be_a_readable_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    assert refused(compose_config([f"dataset.path={fifo}"])) == (
        f"dataset.path: {fifo}: is a FIFO (named pipe), not a regular file (dataset fifo)."
    )
    assert refused(compose_config([f"dataset.path={loop}"])) == (
        f"dataset.path: {loop}: is a symbolic link loop (or a chain of too many links) and cannot be resolved to a "
        "file (dataset loop)."
    )
    assert refused(compose_config([f"dataset.path={folder}"])) == (
        f"dataset.path: {folder}: is a directory, not a file (dataset folder)."
    )
    assert refused(compose_config(["dataset=s", f"data_dir={tmp_path}"])) == (  # the data folder's: where it looked
        f"dataset.path: no LongMemEval-S file in the data folder {tmp_path} (looked for longmemeval_s_cleaned.json, "
        f".json.xz or .json.gz in {tmp_path} or {tmp_path / 'longmemeval'}); run `python -m lme data fetch s`, or set "
        "dataset.path=FILE."
    )


def test_prereg_and_judge_templates_paths(base: DictConfig, tmp_path: Path) -> None:
    assert refused(with_values(base, prereg=str(tmp_path / "absent.yaml"))) == (
        f"prereg: {tmp_path / 'absent.yaml'}: file not found (preregistration record)."
    )
    assert refused(with_values(base, judge__templates_path=str(tmp_path))) == (
        f"judge.templates_path: {tmp_path}: is a directory, not a file."
    )
    validate_config(with_values(base, judge__templates_path=str(tmp_path / "not_yet.json")))  # the judge says so


def test_tracking_file_store_only_when_mlflow_allows_it(base: DictConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    message = refused(with_values(base, tracking__uri="file:///tmp/mlruns"))
    assert message.startswith("tracking.uri: 'file:///tmp/mlruns' is MLflow's file store, which MLflow 3 refuses")
    assert "sqlite:///mlflow.db" in message
    assert "file store" in refused(with_values(base, tracking__uri="./mlruns"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    validate_config(with_values(base, tracking__uri="file:///tmp/mlruns"))


# --- interpolations, text, secrets ------------------------------------------------------------------------


def test_an_interpolation_that_fails_is_named_by_the_key_that_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LME_NO_SUCH_VARIABLE", raising=False)
    message = refused(compose_config(["cache_dir=${oc.env:LME_NO_SUCH_VARIABLE}"]))
    # not budget.ledger_path (${cache_dir}/ledger.sqlite), which only refers to it
    assert message.startswith("cache_dir: ${oc.env:LME_NO_SUCH_VARIABLE} cannot be resolved (")
    assert "LME_NO_SUCH_VARIABLE" in message.split("(", 1)[1]
    message = refused(compose_config(["dataset.path=${oc.env:LME_NO_SUCH_VARIABLE}"]))
    assert message.startswith("dataset.path: ${oc.env:LME_NO_SUCH_VARIABLE} cannot be resolved (")
    assert refused(compose_config(["+extra=???"])) == "extra: has no value (???); set it, e.g. extra=VALUE."


def test_a_string_that_is_not_text_is_refused(base: DictConfig) -> None:
    assert refused(with_values(base, design_name="bm25\udcff")) == (
        "design_name: holds a lone UTF-16 surrogate (\\udcff), which is not text and cannot be encoded as UTF-8."
    )


def test_a_key_like_value_is_never_shown(base: DictConfig) -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    message = refused(with_values(base, reader__model__api_key_env=key))
    assert key not in message and "[redacted]" in message


# --- components: the constructor's reason, not only Hydra's first line --------------------------------------


def test_a_component_that_refuses_its_config_says_why(base: DictConfig) -> None:
    from lme.config.design import design_from_config

    cfg = with_values(base, memory__max_bytes=-5)
    with pytest.raises(LmeError) as caught:
        design_from_config(cfg, check=False).build_memory(retriever=None)
    assert str(caught.value) == (
        "memory config: cannot build lme.memory.retrieved.RetrievedMemoryBuilder: max_bytes must be >= 0, got -5."
    )
    cfg = with_values(base, retriever__top_k=3)
    with pytest.raises(LmeError) as caught:
        design_from_config(cfg, check=False).build_retriever()
    assert str(caught.value) == (
        "retriever config: cannot build lme.retrieval.fts5.FTS5Retriever: TypeError: "
        "FTS5Retriever.__init__() got an unexpected keyword argument 'top_k'."
    )
