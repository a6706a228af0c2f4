"""The command-line dispatcher."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import lme
from lme.cli import compose_config, split_overrides, unknown_command
from lme.util.errors import LmeError
from lme.study.hydra_run import hoist_flags


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


def lme_process(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "lme", *args], capture_output=True, text=True, timeout=120,
                          env={**environ, **env})


def test_an_unknown_command_is_refused_with_the_nearest_one():
    result = lme_process("reprot")
    assert result.returncode == 2
    assert result.stderr == "lme: error: unknown command 'reprot'; did you mean 'report'?\n"
    assert unknown_command(["reprot", "--json"]) == "unknown command 'reprot'; did you mean 'report'?"
    assert unknown_command(["hlep"]) == "unknown command 'hlep'; did you mean 'help'?"
    assert "unknown command 'xyzzy'; `python -m lme help` lists the commands" in unknown_command(["xyzzy"])
    for fine in ([], ["report"], ["help"], ["seed=1"], ["+design=bm25"], ["~prereg"], ["-m", "seed=1,2"], ["--help"]):
        assert unknown_command(fine) is None, fine


def test_a_config_group_option_that_does_not_exist_lists_the_options_and_exits_2():
    # HYDRA_FULL_ERROR asks Hydra for tracebacks: a user's config error still gets one sentence
    result = lme_process("reader=gpt6", "tracking.enabled=false", HYDRA_FULL_ERROR="1")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "lme: error: Could not find 'reader/gpt6'; did you mean reader=gpt5 or reader=gpt4o?"
    assert "Available options in 'reader':" in lines[1] and {"gpt5_mini", "offline"} <= {line.strip() for line in lines}
    assert "Traceback" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr
    assert result.stderr.count("lme: error:") == 1 and result.stdout == ""


def test_an_unknown_key_exits_2_with_hydras_hint():
    result = lme_process("-m", "foo=1", "seed=1,2", "tracking.enabled=false")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("lme: error: Could not override 'foo': Key 'foo' is not in struct\n")
    assert "+foo=1" in result.stderr and "Traceback" not in result.stderr  # nothing close: Hydra's hint alone


def test_a_mistyped_key_gets_did_you_mean_and_exits_2(tmp_path):
    result = lme_process("-m", "limt=3", "seed=1,2", "tracking.enabled=false", f"hydra.sweep.dir={tmp_path / 's'}",
                         HYDRA_FULL_ERROR="1")
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("lme: error: Could not override 'limt': Key 'limt' is not in struct; did you mean "
                             "limit=3?\n  To add a new key limt instead: +limt=3\n")
    assert result.stdout == "" and not (tmp_path / "s").exists()
    # a nested key: its siblings in the config the other overrides compose (the bm25 design's memory)
    result = lme_process("+design=bm25", "memory.top_kk=5", "tracking.enabled=false")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].endswith("; did you mean memory.top_k=5?"), result.stderr
    assert result.stderr.count("lme: error:") == 1


@pytest.mark.parametrize(("overrides", "suggestion"), [
    (["limt=3"], "did you mean limit=3?"),
    (["concurency=2"], "did you mean concurrency=2?"),
    (["reader.modle=x"], "did you mean reader.model=x?"),
    (["reder.model=x"], "did you mean reader.model=x?"),  # a wrong first part: the rest of the key is kept
    (["+design=bm25", "retriever.top_kk=5"], "did you mean memory.top_k=5 or view.top_k=5?"),  # found elsewhere
    (["+design=pipelin"], "did you mean +design=pipeline?"),
    (["reader=offlin"], "did you mean reader=offline?"),
    (["+design=study/12_recal"], "did you mean +design=study/12_recall?"),
    (["+design=12_recall"], "did you mean +design=study/12_recall?"),  # a study design by its file name
    (["+design=study/d12"], "did you mean +design=study/12_recall?"),
])
def test_did_you_mean_names_the_closest_keys_and_options(overrides, suggestion):
    with pytest.raises(LmeError) as error:
        compose_config(overrides)
    head = str(error.value).splitlines()[0]
    assert head.endswith("; " + suggestion), head


def test_an_unknown_design_lists_the_study_designs_too():
    with pytest.raises(LmeError) as error:
        compose_config(["+design=pipelin"])
    lines = [line.strip() for line in str(error.value).splitlines()]
    assert lines[1] == "Available options in 'design':"
    studies = sorted(path.stem for path in (lme.CONF_DIR / "design" / "study").glob("*.yaml"))
    assert {"bm25", "pipeline"} <= set(lines[2:]) and {f"study/{name}" for name in studies} <= set(lines[2:])
    with pytest.raises(LmeError) as error:  # memory/writer is a group of its own, not an option of memory
        compose_config(["memory=retrievd"])
    assert "memory=retrieved?" in str(error.value) and "writer/" not in str(error.value)


def test_nothing_close_adds_no_suggestion():
    with pytest.raises(LmeError) as error:
        compose_config(["xyzzy=1"])
    assert "did you mean" not in str(error.value) and "+xyzzy=1" in str(error.value)
    with pytest.raises(LmeError) as error:
        compose_config(["+design=zzzzzz"])
    assert "did you mean" not in str(error.value) and "study/12_recall" in str(error.value)


def test_help_starts_with_lmes_own_usage_then_hydras():
    for flag in ("--help", "-h"):
        result = lme_process(flag)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("usage: python -m lme [overrides] [-m]")
        assert "python -m lme report ..." in result.stdout and "python -m lme help" in result.stdout
        assert "== Configuration groups ==" in result.stdout and "dataset: locomo, m, oracle, s, sample" in result.stdout


def test_config_error_message_keeps_the_options_and_drops_the_search_path():
    with pytest.raises(LmeError) as error:
        compose_config(["reader=gpt6"])
    message = str(error.value)
    assert message.splitlines()[0] == ("config overrides 'reader=gpt6': Could not find 'reader/gpt6'; did you mean "
                                       "reader=gpt5 or reader=gpt4o?")
    assert "    gpt5_mini" in message.splitlines() and "search path" not in message
    with pytest.raises(LmeError, match=r"override 'seed=\[1': no viable alternative"):
        compose_config(["seed=[1"])
