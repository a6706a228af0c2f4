"""The composition root (`lme.config.design`): one typed, frozen `Design` per composed config, and the designs it
refuses (a step whose instruction describes another memory than the one it reads)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lme import CONF_DIR
from lme.cli import compose_config
from lme.config.design import Design, canonical_design, compose_design, design_from_config, plain
from lme.util.errors import LmeError
from lme.util.hashing import sha256_json, sha256_text

SHIPPED = sorted(path.relative_to(CONF_DIR / "design").with_suffix("").as_posix()
                 for path in (CONF_DIR / "design").rglob("*.yaml"))  # with the study's, design/study/*.yaml


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_design_composes_into_a_design(name):
    design = compose_design([f"+design={name}"], check=True)
    assert isinstance(design, Design) and design.name == name.replace("/", "_")
    assert design.config_sha256 == sha256_json(canonical_design(plain(design.config)))
    assert set(design.instructions.texts) == {"first_pass", *(step.rule.name for step in design.instructions.rules),
                                              *(step.rule.name for step in design.instructions.routes)}
    for step in (*design.instructions.rules, *design.instructions.routes):  # base + its paragraphs, as listed
        assert step.instruction == design.instructions.compose(step.rule.paragraphs)
        assert design.instructions.texts[step.rule.name] == step.instruction  # a repeated rule is the same rule
    assert design.instructions.sha256s()["first_pass"] == sha256_text(design.instructions.first_pass)
    assert yaml.safe_load(design.config_yaml) == plain(design.config)  # the config.yaml a run logs


def test_a_design_is_frozen_all_the_way_down():
    design = compose_design(["+design=pipeline"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        design.seed = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        design.config["seed"] = 3  # type: ignore[index]
    with pytest.raises(TypeError):
        design.memory.node["max_bytes"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        design.instructions.paragraphs["user_log"] = "x"  # type: ignore[index]
    assert isinstance(design.config["instructions"]["first_pass"], tuple)
    assert plain(design.config)["instructions"]["first_pass"] == ["user_log", "calibration", "answer_format"]


def test_a_design_carries_what_a_job_needs_typed():
    design = compose_design(["+design=pipeline", "seed=4", "limit=3", "question_types=[multi-session]",
                             "budget.job_dollars=2.5", "concurrency=3", "tracking.enabled=false"])
    assert design.seed == 4 and design.concurrency == 3 and design.budget.job_dollars == 2.5
    assert design.dataset.selection.limit == 3 and design.dataset.selection.question_types == ("multi-session",)
    assert design.tracking.enabled is False and isinstance(design.cache_dir, Path)
    assert design.memory.target == "lme.memory.user_log.UserLogMemoryBuilder" and design.view is not None
    assert design.reader.model.group == "reader.model" and design.judge.official is False
    assert design.arbiter is None
    arbiter = compose_design(["+design=pipeline_arbiter"]).arbiter
    assert arbiter is not None and arbiter.view == "first_pass" and arbiter.instruction.endswith(
        compose_design(["+design=pipeline_arbiter"]).instructions.paragraphs["arbiter"])


def test_the_design_digest_ignores_how_a_run_happens_but_not_what_it_measures():
    base = compose_design(["+design=bm25"]).config_sha256
    assert compose_design(["+design=bm25", "seed=9", "concurrency=2", "cache_dir=/tmp/x"]).config_sha256 == base
    assert compose_design(["+design=bm25", "memory.top_k=7"]).config_sha256 != base


def test_the_user_log_paragraph_over_the_retrieved_memory_is_refused_in_one_sentence():
    with pytest.raises(LmeError) as refused:
        compose_design(["instructions=pipeline"])
    text = str(refused.value)
    assert "\n" not in text and text.count(". ") == 0 and text.endswith(".")
    assert 'step first_pass reads memory "retrieved"' in text and '"user_log"' in text


def test_a_rule_whose_paragraph_describes_the_whole_session_view_but_reads_the_first_pass_is_refused():
    with pytest.raises(LmeError, match=r'step advice reads memory "user_log" .* paragraph "whole_sessions"'):
        compose_design(["+design=pipeline", "rules.definitions.advice.paragraphs=[user_log,whole_sessions]"])
    # the same paragraph over the view it describes is the shipped pipeline: accepted
    design = compose_design(["+design=pipeline"])
    assert any("whole_sessions" in step.rule.paragraphs and step.rule.view == "whole_sessions"
               for step in design.instructions.rules)


def test_the_arbiter_is_checked_against_the_memory_it_reads():
    with pytest.raises(LmeError, match=r'step arbiter reads memory "user_log" .* "whole_sessions"'):
        compose_design(["+design=pipeline_arbiter", "arbiter.paragraphs=[whole_sessions,arbiter]"])


def test_a_run_of_a_mismatched_design_stops_before_anything_is_written(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-m", "lme", "instructions=pipeline", "memory=retrieved"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lme: error: design default: step first_pass"), done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # no outputs/, no mlflow.db, no cache


def test_design_from_config_reads_the_multirun_callbacks_config_with_hydras_keys():
    from hydra import compose, initialize_config_dir

    import lme.config.resolvers  # noqa: F401

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+design=bm25"], return_hydra_config=True)
    design = design_from_config(cfg, check=False)
    assert "hydra" not in design.config and design.name == "bm25"
    assert design.config_sha256 == compose_design(["+design=bm25"]).config_sha256


def test_config_values_json_cannot_hold_are_named():
    cfg = compose_config(["+design=bm25"])
    cfg.memory.top_k = float("inf")
    with pytest.raises(LmeError, match=r"config memory\.top_k: NaN or infinity"):
        design_from_config(cfg, check=False)


def test_a_users_own_design_and_instruction_texts_from_another_folder(tmp_path, monkeypatch):
    """The README's recipe: a folder laid out like conf/ on `hydra.searchpath`, its texts as .txt files named
    from where lme runs; composed like a shipped design, paragraphs checked against the memory."""
    mine = tmp_path / "my_designs"
    (mine / "design").mkdir(parents=True)
    (mine / "instructions" / "terse").mkdir(parents=True)
    (mine / "instructions" / "terse" / "base.txt").write_text("Answer from the memory in five words.\n", "utf-8")
    (mine / "instructions" / "terse.yaml").write_text(
        "base: ${lme_text:my_designs/instructions/terse/base.txt}\nparagraphs: {}\nfirst_pass: []\n", "utf-8")
    (mine / "design" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /instructions: terse\ndesign_name: mine\n"
        "memory:\n  max_bytes: 48000\n", "utf-8")
    monkeypatch.chdir(tmp_path)
    design = compose_design([f"hydra.searchpath=[file://{mine}]", "+design=mine"], check=True)
    assert design.name == "mine" and design.memory.node["max_bytes"] == 48000
    assert design.instructions.first_pass == "Answer from the memory in five words."
    (mine / "design" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /instructions: pipeline\ndesign_name: mine\n", "utf-8")
    with pytest.raises(LmeError, match='design mine: step first_pass reads memory "retrieved"'):
        compose_design([f"hydra.searchpath=[file://{mine}]", "+design=mine"])


def test_changed_values_are_what_differs_from_the_option_files_the_config_comes_from():
    from lme.config.design import changed_values, config_roots, resolved

    cfg = compose_config(["+design=pipeline", "retriever.retrievers.semantic.model=xyz", "memory.max_bytes=1000",
                          "limit=4", "seed=3"])
    choices = {"retriever": "hybrid", "memory": "user_log", "view": "whole_sessions", "instructions": "pipeline",
               "rules": "pipeline", "reader": "offline", "judge": "offline", "dataset": "sample",
               "embedding": "minilm", "tracking": "mlflow", "budget": "default", "setup": "offline"}
    changed = changed_values(cfg, resolved(cfg), choices, config_roots())
    assert changed == {"retriever.retrievers.semantic.model": "xyz", "memory.max_bytes": 1000, "limit": 4,
                       "seed": 3, "design_name": "pipeline"}


def test_trace_modes_are_names_and_a_bad_one_is_refused():
    assert compose_design([]).tracking.traces == "full"  # the default (README: what traces cost)
    assert compose_design(["tracking.traces=metadata"], check=True).tracking.traces == "metadata"
    cfg = compose_config([])
    cfg.tracking.traces = False  # YAML's bare `off`
    assert design_from_config(cfg).tracking.traces == "off"
    with pytest.raises(LmeError, match=r"tracking\.traces: expected one of full, metadata, off, got 'sometimes'"):
        compose_design(["tracking.traces=sometimes"], check=True)
