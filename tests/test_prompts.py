"""Prompts as text files: `${lme_text:PATH}` (lme/config/resolvers.py) and the texts the configs compose from them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

import lme
from lme.config.compose import compose_config
from lme.config.check import validate_config
from lme.config.design import resolved
from lme.util.errors import LmeError
from lme.config.resolvers import text_file

CONF = lme.CONF_DIR
REFERENCE = re.compile(r"\$\{lme_text:([^}]*)\}")
JUDGE_KEYS = {"abstention", "ssu_ssa_multisession", "temporal_reasoning", "knowledge_update",
              "single_session_preference"}


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _references() -> list[tuple[str, str]]:
    """(config file, PATH) for every `${lme_text:PATH}` in a value under conf/ (comments left out)."""
    return [(path.relative_to(CONF).as_posix(), match.group(1).strip())
            for path in sorted(CONF.rglob("*.yaml"))
            for text in _strings(yaml.safe_load(path.read_text(encoding="utf-8")))
            for match in REFERENCE.finditer(text)]


# ---------------------------------------------------------------- the shipped files


def test_every_text_reference_in_conf_names_an_existing_file():
    references = _references()
    assert {name for name, _ in references} >= {"instructions/baseline.yaml", "instructions/pipeline.yaml",
                                                "judge/offline.yaml"}
    for name, path in references:
        assert not path.startswith("/"), (name, path)  # shipped configs name files from the config root
        assert (CONF / path).is_file(), f"{name}: ${{lme_text:{path}}} names no file under {CONF}"


def test_every_prompt_file_is_referenced_and_ends_with_one_newline():
    referenced = {path for _, path in _references()}
    files = sorted(CONF.rglob("*.txt"))
    assert files
    for file in files:
        name = file.relative_to(CONF).as_posix()
        assert name in referenced, f"{name} is not read by any config"
        data = file.read_bytes()
        assert data.endswith(b"\n") and not data.endswith(b"\n\n") and b"\r" not in data, name
        data.decode("utf-8")


@pytest.mark.parametrize("overrides", [[], ["+design=pipeline"], ["+design=pipeline_counting"],
                                       ["+design=pipeline_arbiter"], ["instructions=pipeline"]],
                         ids=["default", "pipeline", "pipeline_counting", "pipeline_arbiter", "instructions=pipeline"])
def test_composed_texts_are_single_line_with_no_stray_newline(overrides):
    cfg = compose_config(overrides)
    instructions = OmegaConf.to_container(cfg.instructions, resolve=True)
    texts = {"base": instructions["base"], **{f"paragraphs.{k}": v for k, v in instructions["paragraphs"].items()}}
    for key, text in texts.items():
        assert isinstance(text, str) and text.strip() == text and text, key
        assert "\n" not in text and "  " not in text, key  # folded: one line, words joined by single spaces
    templates = OmegaConf.to_container(cfg.judge.templates, resolve=True)
    if cfg.judge.name == "offline-lexical-judge":
        assert set(templates) == JUDGE_KEYS
        for key, template in templates.items():
            assert template.count("{}") == 3, key
            assert not template.endswith("\n") and not template.startswith("\n"), key
            parts = template.split("\n\n")  # the double-quoted YAML strings' `\n\n` between parts
            assert len(parts) == 5 and all(part.endswith(": {}") for part in parts[1:4]), key
            assert "\n" not in "".join(parts) and parts[4].endswith("Answer yes or no."), key


def test_pipeline_texts_are_the_files_less_their_newline():
    cfg = compose_config(["+design=pipeline"])
    folder = CONF / "instructions" / "pipeline"
    assert cfg.instructions.base == (folder / "base.txt").read_text(encoding="utf-8")[:-1]
    for name, text in cfg.instructions.paragraphs.items():
        assert text == (folder / f"{name}.txt").read_text(encoding="utf-8")[:-1], name


# ---------------------------------------------------------------- the resolver, without YAML


def test_one_trailing_newline_is_dropped_and_nothing_else(tmp_path):
    cases = {"one.txt": (b"A text.\n", "A text."), "none.txt": (b"A text.", "A text."),
             "two.txt": (b"A text.\n\n", "A text.\n"), "inner.txt": (b"a\n\nb {}\n", "a\n\nb {}"),
             "crlf.txt": (b"a\r\n\r\nb\r\n", "a\n\nb"), "spaces.txt": (b"  a  \n", "  a  "),
             "utf8.txt": ("caf\u00e9 \u2014 ok\n".encode(), "caf\u00e9 \u2014 ok"), "empty.txt": (b"", "")}
    for name, (data, text) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert text_file(name, config_root=tmp_path, cwd=tmp_path / "elsewhere") == text, name


def test_paths_absolute_then_config_root_then_current_directory(tmp_path):
    root, here = tmp_path / "conf", tmp_path / "here"
    (root / "p").mkdir(parents=True)
    (here / "p").mkdir(parents=True)
    (root / "p" / "both.txt").write_text("from the root\n", encoding="utf-8")
    (here / "p" / "both.txt").write_text("from here\n", encoding="utf-8")
    (here / "p" / "mine.txt").write_text("mine\n", encoding="utf-8")
    assert text_file("p/both.txt", config_root=root, cwd=here) == "from the root"
    assert text_file("p/mine.txt", config_root=root, cwd=here) == "mine"
    assert text_file(str(here / "p" / "both.txt"), config_root=root, cwd=tmp_path) == "from here"


def test_the_default_root_is_lmes_config_root():
    assert text_file("instructions/pipeline/base.txt") == (CONF / "instructions/pipeline/base.txt").read_text(
        encoding="utf-8")[:-1]


@pytest.mark.parametrize("name", ["nope.txt", "p", "", "/no/such/dir/nope.txt"])
def test_a_missing_file_is_one_sentence_naming_it_and_the_config_root(tmp_path, name):
    (tmp_path / "p").mkdir()  # a folder is not a text file
    with pytest.raises(LmeError) as info:
        text_file(name, config_root=tmp_path, cwd=tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.endswith(".") and message.startswith("lme_text: ")
    assert repr(name) in message and str(tmp_path) in message


def test_a_non_utf8_file_is_one_sentence_naming_it_and_the_config_root(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9\n".encode("latin-1"))
    with pytest.raises(LmeError) as info:
        text_file("latin1.txt", config_root=tmp_path, cwd=tmp_path)
    message = str(info.value)
    assert "\n" not in message and "not UTF-8" in message
    assert str(tmp_path / "latin1.txt") in message and f"config root is {tmp_path}" in message


# ---------------------------------------------------------------- through composition


def test_a_missing_file_in_an_override_reaches_the_user_as_one_sentence():
    cfg = compose_config(["instructions.base=${lme_text:nope.txt}"])  # composing does not read it
    with pytest.raises(LmeError) as info:
        resolved(cfg)  # how the run and prereg read the config (lme.config.design)
    message = str(info.value)
    assert "\n" not in message and "'nope.txt'" in message and str(CONF) in message
    with pytest.raises(LmeError) as info:
        validate_config(cfg)  # the check before a run
    message = str(info.value)
    assert "\n" not in message and message.startswith("instructions.base: ")
    assert "'nope.txt'" in message and str(CONF) in message
