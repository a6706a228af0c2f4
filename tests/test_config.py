"""Every config file composes, and its components instantiate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

import lme
import lme.config.resolvers  # noqa: F401
from lme.answer.reader import compose_instruction
from lme.models.gateway import ModelSpec

CONF = lme.CONF_DIR
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")  # hydra/launcher: tests/test_launchers.py


def _options(group: str) -> list[str]:
    """A group's options; for `design`, also those in its subfolders (`study/01_user_log_bm25`)."""
    found = (CONF / group).rglob("*.yaml") if group == "design" else (CONF / group).glob("*.yaml")
    return sorted(p.relative_to(CONF / group).with_suffix("").as_posix() for p in found)


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=False)


def test_every_group_has_options():
    expected = {"dataset", "retriever", "memory", "view", "instructions", "reader", "judge", "tracking", "setup", "design"}
    assert expected <= set(GROUPS)
    for group in GROUPS:
        assert _options(group), group


def test_design_not_in_defaults_and_seed_in_primary():
    primary = OmegaConf.load(CONF / "config.yaml")
    groups = [next(iter(item)) for item in primary.defaults if isinstance(item, dict) or OmegaConf.is_dict(item)]
    assert "design" not in groups
    assert "seed" in primary


CASES = [
    (group, option)
    for group in GROUPS
    for option in _options(group)
]


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_config_composes_and_instantiates(group, option, tmp_path):
    override = f"+design={option}" if group == "design" else f"{group}={option}"
    cfg = _compose([override, f"cache_dir={tmp_path}"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["seed"] == 0
    retriever = instantiate(cfg.retriever)
    builder = instantiate(cfg.memory, retriever=retriever)
    assert builder is not None
    assert instantiate(cfg.view, retriever=retriever) is not None
    for part in ("reader", "judge"):
        spec = instantiate(cfg[part].model, _convert_="all")
        assert isinstance(spec, ModelSpec) and spec.model
        assert isinstance(spec.params, dict)
    if "source" in cfg.instructions:  # instructions=study: its texts come from a file the user supplies, verified
        assert cfg.instructions.first_pass  # on composing a design (tests/test_study_instructions.py)
    else:
        assert compose_instruction(cfg.instructions.base, cfg.instructions.paragraphs, cfg.instructions.first_pass)
    if group == "design":  # a design in a subfolder is named after its path: study/01_x -> study_01_x
        assert cfg.design_name == option.replace("/", "_")


def test_setup_paper_selects_the_reference_models(tmp_path):
    cfg = _compose(["setup=paper", f"cache_dir={tmp_path}"])
    assert cfg.dataset.name == "s"
    assert cfg.reader.model.model == "openai/gpt-5-mini"
    assert cfg.judge.model.model == "gpt-4o-2024-08-06"
    assert cfg.judge.official is True
    assert cfg.judge.model.params == {"temperature": 0, "max_tokens": 10, "n": 1}


@pytest.mark.parametrize("design", ["semantic", "hybrid", "first_pass"])
def test_setup_paper_embeds_with_embeddinggemma_and_its_prompts(design, tmp_path):
    def semantic_part(cfg):
        return cfg.retriever if design == "semantic" else cfg.retriever.retrievers.semantic

    paper = semantic_part(_compose([f"+design={design}", "setup=paper", f"cache_dir={tmp_path}"]))
    assert paper.model == "google/embeddinggemma-300m"
    assert paper.query_prompt == "task: search result | query: "
    assert paper.document_prompt == "title: none | text: "
    offline = semantic_part(_compose([f"+design={design}", f"cache_dir={tmp_path}"]))
    assert (offline.model, offline.query_prompt, offline.document_prompt) == ("minilm-packaged", "", "")
    # a one-off model on the command line still wins over the group
    key = "retriever.model" if design == "semantic" else "retriever.retrievers.semantic.model"
    chosen = semantic_part(_compose([f"+design={design}", "setup=paper", f"{key}=/models/mine", f"cache_dir={tmp_path}"]))
    assert chosen.model == "/models/mine" and chosen.query_prompt == "task: search result | query: "


def test_default_is_offline_on_the_bundled_sample(tmp_path):
    cfg = _compose([f"cache_dir={tmp_path}"])
    assert Path(cfg.dataset.path).name.endswith(".json")
    assert cfg.reader.model.model.startswith("lme-offline/")
    assert cfg.judge.official is False
    assert cfg.tracking.uri.startswith("sqlite:///")


def test_dataset_name_resolver_gives_the_short_name_for_the_groups_own_file_else_the_stem():
    from lme.config.resolvers import data_stem, dataset_name

    assert data_stem("/d/longmemeval_s_cleaned.json.xz") == "longmemeval_s_cleaned"
    assert data_stem("/d/foo.json.gz") == "foo" and data_stem("foo.json") == "foo" and data_stem("foo.jsonl") == "foo"
    assert data_stem("/d/noext") == "noext" and data_stem("/d/.json") == ".json" and data_stem(None) == ""
    assert dataset_name("/cache/data/longmemeval_s_cleaned.json", "longmemeval_s_cleaned", "s") == "s"
    assert dataset_name("/x/longmemeval_s_cleaned.json.xz", "longmemeval_s_cleaned", "s") == "s"
    assert dataset_name("/x/y/foo.json.xz", "longmemeval_s_cleaned", "s") == "foo"
    cfg = OmegaConf.create({"dataset": {"path": "/a/b/mine.json.gz", "name": "${lme_stem:${.path}}"}})
    assert cfg.dataset.name == "mine"


@pytest.mark.parametrize(("overrides", "name"), [
    ([], "sample"),
    (["dataset.path=/x/y/foo.json.xz"], "foo"),
    (["dataset=s"], "s"),
    (["dataset=s", "data_dir=/elsewhere"], "s"),
    (["setup=paper", "dataset.path=/x/other.json"], "other"),
    (["dataset=oracle", "dataset.path=/x/longmemeval_oracle.json.gz"], "oracle"),
    (["dataset.path=/x/foo.json", "dataset.name=mine"], "mine"),
])
def test_composed_dataset_name_follows_dataset_path(overrides, name):
    from lme.cli import compose_config

    assert compose_config(overrides).dataset.name == name
