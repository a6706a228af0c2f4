"""The data folder (`data_dir`, `LME_DATA_DIR`): every command finds LongMemEval's files in any supported
compression, the judge templates and the study's instructions there (or in its `longmemeval/`, `oh_study/`
subfolders); a dataset keeps its short name however its file was chosen; `lme data where` says what the folder
holds and how to get what it lacks; a missing file is one sentence naming the folder and the command.

The data files are compressed copies of the bundled synthetic sample, made in tmp_path; the real test data
(tests/shared_data.py, LME_TEST_DATA) only where a test says so, skipped without it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lme.cli import compose_config
from lme.cli.data import where_command
from lme.data import folder
from lme.data.dataset import load_dataset
from lme.data.fetch import fetch_dataset, fetch_templates
from lme.data.sample import SAMPLE_PATH
from lme.config.design import compose_design
from lme.util.errors import LmeError
from shared_data import ROOT, S_FILE, STUDY_INSTRUCTIONS, TEMPLATES, needs

SAMPLE = SAMPLE_PATH.read_bytes()
SAMPLE_SHA = hashlib.sha256(SAMPLE).hexdigest()
REPO_ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, data: bytes = SAMPLE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".xz"):
        data = lzma.compress(data)
    elif path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def _lme(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("LME_DATA_DIR", "LME_JUDGE_TEMPLATES",
                                                             "LME_STUDY_INSTRUCTIONS")}
    return subprocess.run([sys.executable, "-m", "lme", *args], capture_output=True, text=True, timeout=240,
                          env=base | (env or {}), cwd=cwd)


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch):
    for name in ("LME_DATA_DIR", "LME_JUDGE_TEMPLATES", "LME_STUDY_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)


# ----------------------------------------------------------------------------------------------
# finding the files


@pytest.mark.parametrize("relative", [
    "longmemeval_s_cleaned.json.xz",
    "longmemeval_s_cleaned.json.gz",
    "longmemeval_s_cleaned.json",
    "longmemeval/longmemeval_s_cleaned.json.xz",
    "longmemeval/longmemeval_s_cleaned.json.gz",
])
def test_dataset_s_finds_its_file_in_the_data_folder_in_any_compression(tmp_path, relative):
    data = _write(tmp_path / "data" / relative)
    design = compose_design(["dataset=s", f"data_dir={tmp_path / 'data'}", f"cache_dir={tmp_path}"])
    assert design.dataset.path == data and design.dataset.name == "s"
    path, questions = load_dataset(design.dataset)  # and it reads: the sample's questions
    assert path == data and len(questions) == len(json.loads(SAMPLE))


def test_the_folder_prefers_what_fetch_writes_then_xz_then_gz_and_itself_before_its_subfolder(tmp_path):
    root = tmp_path / "data"
    order = ["longmemeval_oracle.json", "longmemeval_oracle.json.xz", "longmemeval_oracle.json.gz",
             "longmemeval/longmemeval_oracle.json", "longmemeval/longmemeval_oracle.json.xz",
             "longmemeval/longmemeval_oracle.json.gz"]
    assert folder.candidates(root, "oracle") == [root / name for name in order]
    for name in reversed(order):  # each one added wins over those already there
        _write(root / name)
        assert compose_config(["dataset=oracle", f"data_dir={root}"]).dataset.path == str(root / name)


def test_lme_data_dir_pointing_at_a_folder_of_compressed_files_is_found_by_a_command(tmp_path):
    _write(tmp_path / "data" / "longmemeval_s_cleaned.json.xz")
    done = _lme("data", "stats", "dataset=s", f"cache_dir={tmp_path}", env={"LME_DATA_DIR": str(tmp_path / "data")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(tmp_path / "data" / "longmemeval_s_cleaned.json.xz")


def test_the_templates_and_the_study_instructions_are_found_in_the_folder_or_their_subfolder(tmp_path):
    root = tmp_path / "data"
    overrides = ["setup=study", "instructions=study", f"data_dir={root}"]
    templates, instructions = root / "longmemeval" / "judge_templates.json", root / "oh_study" / "study_instructions.json"
    for path in (templates, instructions):
        _write(path, b"{}")
    cfg = compose_config(overrides)
    assert (cfg.judge.templates_path, cfg.instructions.source) == (str(templates), str(instructions))
    for path in (root / "judge_templates.json", root / "study_instructions.json"):  # the folder itself first
        _write(path, b"{}")
    cfg = compose_config(overrides)
    assert (cfg.judge.templates_path, cfg.instructions.source) == (str(root / "judge_templates.json"),
                                                                    str(root / "study_instructions.json"))
    cfg = compose_config([*overrides, "judge.templates_path=/x/t.json", "instructions.source=/x/i.json"])
    assert (cfg.judge.templates_path, cfg.instructions.source) == ("/x/t.json", "/x/i.json")  # a setting wins


# ----------------------------------------------------------------------------------------------
# names


@pytest.mark.parametrize(("overrides", "name"), [
    (["dataset=s"], "s"),
    (["dataset.path={data}/longmemeval/longmemeval_s_cleaned.json.xz"], "s"),  # chosen by path, default group
    (["dataset=oracle", "dataset.path={data}/longmemeval/longmemeval_s_cleaned.json.xz"], "s"),  # another group
    (["setup=paper", "dataset.path=/elsewhere/longmemeval_oracle.json.gz"], "oracle"),
    (["dataset.path=/elsewhere/longmemeval_m_cleaned.json"], "m"),
    (["dataset=s", "dataset.path={data}/longmemeval/mine.json.xz"], "mine"),  # any other file: its stem
    (["dataset.path=/x/longmemeval_s_cleaned_mini.json.xz"], "longmemeval_s_cleaned_mini"),
    (["dataset=s", "dataset.name=custom"], "custom"),
])
def test_a_dataset_is_named_the_same_however_its_file_was_chosen(tmp_path, overrides, name):
    _write(tmp_path / "data" / "longmemeval" / "longmemeval_s_cleaned.json.xz")
    filled = [o.format(data=tmp_path / "data") for o in overrides]
    assert compose_config([*filled, f"data_dir={tmp_path / 'data'}"]).dataset.name == name


@pytest.mark.slow
def test_runs_of_one_file_chosen_two_ways_carry_the_same_dataset_name_in_mlflow(tmp_path):
    """`<design>-<dataset>-seed<N>`: `dataset=s` from LME_DATA_DIR (a real run) and `dataset.path=` of the same
    `.json.xz` (the design it composes: the params and run name a run takes from it)."""
    from mlflow.tracking import MlflowClient

    from lme.tracking.runs import job_run_name

    data = _write(tmp_path / "data" / "longmemeval_s_cleaned.json.xz")
    store = f"sqlite:///{tmp_path}/mlflow.db"
    done = _lme("dataset=s", "limit=2", f"tracking.uri={store}", f"cache_dir={tmp_path / 'cache'}",
                f"tracking.artifact_location={tmp_path / 'mlruns'}", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path,
                env={"LME_DATA_DIR": str(tmp_path / "data")})
    assert done.returncode == 0, done.stderr
    client = MlflowClient(tracking_uri=store)
    [run] = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.data.params["dataset.name"] == "s" and run.info.run_name.startswith("default-s-seed0")
    by_path = compose_design([f"dataset.path={data}", f"cache_dir={tmp_path / 'cache'}"])
    assert by_path.params()["dataset.name"] == "s" == by_path.dataset.name
    assert job_run_name(by_path.name, by_path.dataset.name, 0, "stamp").startswith("default-s-seed0")


# ----------------------------------------------------------------------------------------------
# a missing file: one sentence naming the folder and the command


def test_a_run_on_a_dataset_the_folder_lacks_names_the_folder_and_the_fetch_command(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _lme("dataset=s", f"data_dir={empty}", f"cache_dir={tmp_path / 'cache'}",
                f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"lme: error: dataset.path: no LongMemEval-S file in the data folder {empty} (looked for "
        f"longmemeval_s_cleaned.json, .json.xz or .json.gz in {empty} or {empty}/longmemeval); run "
        f"`python -m lme data fetch s`, or set dataset.path=FILE.")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def test_a_missing_templates_or_instructions_file_in_the_folder_is_one_sentence_naming_it(tmp_path):
    from lme.answer.study_instructions import load_study_instructions
    from lme.data.judge_templates import load_templates

    cfg = compose_config(["setup=study", "instructions=study", f"data_dir={tmp_path}"])
    with pytest.raises(LmeError) as templates:
        load_templates(cfg.judge.templates_path)
    assert str(templates.value) == folder.missing_sentence(tmp_path, "templates")
    assert "`python -m lme data fetch templates`" in str(templates.value) and str(tmp_path) in str(templates.value)
    with pytest.raises(LmeError) as instructions:
        load_study_instructions(cfg.instructions.source)
    assert str(instructions.value) == folder.missing_sentence(tmp_path, "instructions")
    assert f"{tmp_path}/oh_study" in str(instructions.value)
    with pytest.raises(LmeError) as named:  # a file named on the command line is reported as itself
        load_templates(tmp_path / "elsewhere.json")
    assert str(named.value).startswith(f"{tmp_path / 'elsewhere.json'}: judge templates file not found")


def test_stats_on_a_missing_dataset_is_the_same_sentence(tmp_path):
    with pytest.raises(LmeError) as err:
        load_dataset(compose_design(["dataset=oracle", f"data_dir={tmp_path}"]).dataset)
    assert str(err.value) == f"dataset oracle: {folder.missing_sentence(tmp_path, 'oracle')}"
    assert "`python -m lme data fetch oracle --record-digest`" in str(err.value)


# ----------------------------------------------------------------------------------------------
# lme data where


def _where(*args: str) -> list[str]:
    lines: list[str] = []
    assert where_command(list(args), out=lines.append) == 0
    return lines


def test_data_where_lists_what_the_folder_holds_and_how_to_get_the_rest(tmp_path):
    root = tmp_path / "data"
    s = _write(root / "longmemeval" / "longmemeval_s_cleaned.json.xz")
    lines = _where(f"data_dir={root}")
    assert lines[0] == f"data folder: {root} (data_dir= on the command line)"
    by_item = {line.split()[0]: line for line in lines[2:]}
    assert f"{s}  {s.stat().st_size / 1000:.1f} KB  SHA-256 not checked (--verify" in by_item["dataset=s"]
    assert "`python -m lme data fetch m --record-digest`" in by_item["dataset=m"]
    assert f"looked for longmemeval_oracle.json, .json.xz or .json.gz in {root} or {root}/longmemeval" in \
        by_item["dataset=oracle"]
    assert str(SAMPLE_PATH) in by_item["dataset=sample"]
    assert "`python -m lme data fetch templates`" in by_item["judge"]
    assert "instructions.source=FILE" in by_item["instructions=study"]


def test_data_where_verify_hashes_the_json_a_compressed_file_holds_and_checks_small_files_always(tmp_path):
    root = tmp_path / "data"
    _write(root / "longmemeval_s_cleaned.json.gz")
    _write(root / "longmemeval" / "judge_templates.json", b'{"templates": {}}')
    (report,) = _where(f"data_dir={root}", "--verify", "--json")
    items = {item["item"]: item for item in json.loads(report)["items"]}
    assert items["s"]["sha256"] == SAMPLE_SHA  # of the JSON inside, what lme's pins are of
    assert "differs from the pin" in items["s"]["check"] and "runs use it as it is" in items["s"]["check"]
    assert items["templates"]["check"].startswith("refused: ") and "judge template 'abstention' is missing" in \
        items["templates"]["check"]
    assert items["m"]["status"] == "missing" and items["m"]["sentence"] == folder.missing_sentence(root, "m")


def test_data_where_from_lme_data_dir_in_its_own_process(tmp_path):
    _write(tmp_path / "data" / "longmemeval_oracle.json.xz")
    done = _lme("data", "where", f"cache_dir={tmp_path}", env={"LME_DATA_DIR": str(tmp_path / "data")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"data folder: {tmp_path / 'data'} (LME_DATA_DIR)\n")
    assert str(tmp_path / "data" / "longmemeval_oracle.json.xz") in done.stdout


@needs(S_FILE, TEMPLATES, STUDY_INSTRUCTIONS)
def test_data_where_on_the_real_test_data_verifies_the_templates_and_the_instructions():
    lines = _where(f"data_dir={ROOT}")
    by_item = {line.split()[0]: line for line in lines[2:]}
    assert str(S_FILE) in by_item["dataset=s"]
    assert f"{TEMPLATES}" in by_item["judge"] and "5 templates, each SHA-256 matches lme's pin" in by_item["judge"]
    assert f"{STUDY_INSTRUCTIONS}" in by_item["instructions=study"]
    assert "4 steps, each composes to the study's published SHA-256" in by_item["instructions=study"]
    cfg = compose_config(["setup=study", "instructions=study", f"data_dir={ROOT}"])  # and a run finds all three
    assert (cfg.dataset.path, cfg.dataset.name) == (str(S_FILE), "s")
    assert (cfg.judge.templates_path, cfg.instructions.source) == (str(TEMPLATES), str(STUDY_INSTRUCTIONS))


# ----------------------------------------------------------------------------------------------
# fetch sees what the folder holds


def test_fetch_takes_a_verified_compressed_copy_in_the_folder_as_present_without_the_network(tmp_path):
    root = tmp_path / "data"
    copy = _write(root / "longmemeval" / "longmemeval_s_cleaned.json.xz")
    result = fetch_dataset("s", root, endpoint="http://127.0.0.1:9", pins={"longmemeval_s_cleaned.json": SAMPLE_SHA},
                           progress=False)  # port 9: nothing listens; any request would fail
    assert (result.path, result.downloaded, result.sha256) == (copy, False, SAMPLE_SHA)
    with pytest.raises(LmeError) as err:  # another file's pin: refused, kept, named
        fetch_dataset("s", root, endpoint="http://127.0.0.1:9", pins={"longmemeval_s_cleaned.json": "0" * 64},
                      progress=False)
    assert f"{copy} is present but has SHA-256 {SAMPLE_SHA} (the JSON it holds)" in str(err.value)
    assert copy.exists()


@needs(TEMPLATES)
def test_fetch_templates_finds_verified_templates_in_the_longmemeval_subfolder(tmp_path):
    copy = tmp_path / "longmemeval" / "judge_templates.json"
    _write(copy, TEMPLATES.read_bytes())
    result = fetch_templates(tmp_path, base_url="http://127.0.0.1:9")
    assert (result.path, result.downloaded) == (copy, False)


def test_the_folder_looks_for_the_names_fetch_writes():
    from lme.data.fetch import DATASETS, TEMPLATES_FILENAME

    assert {key: folder.ITEMS[key].filename for key in folder.DATASET_KEYS} == \
        {key: DATASETS[key].filename for key in folder.DATASET_KEYS}
    assert folder.ITEMS["templates"].filename == TEMPLATES_FILENAME
    assert folder.default_path("/d", "s") == Path("/d/longmemeval_s_cleaned.json")
