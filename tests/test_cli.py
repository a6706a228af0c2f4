"""The command-line dispatcher."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lme.cli import compose_config, split_overrides
from lme.errors import LmeError
from lme.__main__ import hoist_flags


def test_help_lists_the_subcommands():
    result = subprocess.run([sys.executable, "-m", "lme", "help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "data" in result.stdout and "retrieval" in result.stdout


def test_multirun_flag_is_moved_before_the_overrides():
    assert hoist_flags(["lme", "+design=bm25", "-m", "seed=1,2,3"]) == ["lme", "-m", "+design=bm25", "seed=1,2,3"]
    assert hoist_flags(["lme", "seed=1"]) == ["lme", "seed=1"]


def test_split_overrides_keeps_flags_apart():
    overrides, rest = split_overrides(["stats", "--json", "dataset.path=x.json", "+design=bm25", "--out", "dir"])
    assert overrides == ["dataset.path=x.json", "+design=bm25"]
    assert rest == ["stats", "--json", "--out", "dir"]


def test_compose_config_applies_overrides_and_reports_a_bad_one_in_one_sentence(tmp_path):
    cfg = compose_config(["+design=bm25", "limit=3"])
    assert cfg.design_name == "bm25" and cfg.limit == 3
    with pytest.raises(LmeError, match="no_such_group"):
        compose_config(["no_such_group=x"])
