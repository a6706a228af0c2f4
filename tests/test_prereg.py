"""Preregistration: freeze, verify, refuse a run that differs; every hashed input is checked."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from lme import CONF_DIR
from design_helpers import load_dataset
from lme.cli import compose_config
from lme.data.sample import SAMPLE_PATH
from lme.config.design import design_from_config, resolved
from lme.util.errors import LmeError
from lme.provenance.prereg import (
    PACKAGE_DIR,
    Plan,
    build_record,
    canonical_design,
    check_run,
    code_version,
    compare,
    load_record,
    prereg_facts,
    record_digest,
    seal,
    write_record,
)
from lme.cli.prereg import main, record_for
from shared_data import TEMPLATES, needs

FAST = ["+design=bm25", "limit=4"]  # the bundled sample, BM25 baseline, four questions
RICH = ["+design=pipeline"]  # the design with the most hashed texts (instructions, rules, views)
HAS_GIT = shutil.which("git") is not None


def checkout(root: Path, commit: bool = True) -> Path:
    """A copy of the lme package and its config root (`conf/` beside it, as in the repository) under
    `root`, committed to a fresh git repository (a clean tree)."""
    shutil.copytree(PACKAGE_DIR, root / "lme", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(CONF_DIR, root / "conf")
    if commit:
        git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
            subprocess.run([*git, *args], check=True, capture_output=True, timeout=60)
    return root / "lme"


@pytest.fixture(scope="module")
def clean_code(tmp_path_factory) -> dict[str, Any]:
    """The code version of a committed copy of the package (a clean tree; no git: no commit, same file digests)."""
    return code_version(checkout(tmp_path_factory.mktemp("clean"), commit=HAS_GIT))


def record_of(overrides: list[str], plan: Plan = Plan(), code: dict[str, Any] | None = None, cfg=None) -> dict:
    cfg = cfg if cfg is not None else compose_config(overrides)
    data_path, questions = load_dataset(cfg)
    return build_record(design_from_config(cfg, check=False), data_path, [q.question_id for q in questions], plan, overrides=overrides, code=code)


# ---------------------------------------------------------------- round trip


def test_freeze_then_verify_round_trip_on_a_clean_tree(tmp_path, clean_code):
    if HAS_GIT:
        assert clean_code["git_dirty"] is False and len(clean_code["git_commit"]) == 40
    record = seal(record_for(FAST, Plan(seeds=(1, 2, 3), comparisons=(("bm25", "semantic"),)), code=clean_code))
    path = tmp_path / "prereg" / "bm25.yaml"
    write_record(record, path)
    stored = load_record(path)
    assert stored == record and stored["record_sha256"] == record_digest(stored)
    assert compare(stored, record_for(FAST, Plan.from_dict(stored["plan"]), code=clean_code)) == []
    with pytest.raises(LmeError, match="already exists"):
        write_record(record, path)


def test_record_holds_what_spec_asks(clean_code):
    record = seal(record_for(RICH, Plan(), code=clean_code))
    design = record["design"]
    for run_only in ("seed", "tracking", "cache_dir", "data_dir", "verbose", "concurrency", "prereg"):
        assert run_only not in design
    assert "path" not in design["dataset"] and "timeout_s" not in design["reader"]["model"]
    assert record["digests"]["instruction.first_pass"] and record["digests"]["view"]
    assert any(key.startswith("instructions.paragraphs.") for key in record["digests"])
    assert any(key.endswith(".trigger") for key in record["digests"])
    assert set(record["judge_templates"]) == {"abstention", "ssu_ssa_multisession", "temporal_reasoning",
                                              "knowledge_update", "single_session_preference"}
    assert record["data"]["n_questions"] == len(record["data"]["question_ids"]) > 0
    assert record["models"]["reader"]["model"] and "params" in record["models"]["judge"]
    assert record["plan"] == {"seeds": [1, 2, 3], "primary": "majority_correct_accuracy", "comparisons": []}
    assert set(record["packages"]) == {"lme", "litellm", "mlflow", "hydra-core", "sentence-transformers"}
    assert "lme/conf/instructions/pipeline.yaml" in record["code"]["files"]
    assert datetime.fromisoformat(record["created"].replace("Z", "+00:00")).tzinfo is not None


def test_cli_freeze_and_verify_in_process(tmp_path, capsys):
    out = tmp_path / "rec.yaml"
    assert main(["freeze", "--out", str(out), "--seeds", "1,2", "--compare", "bm25:semantic", *FAST]) == 0
    assert "froze design bm25" in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0  # the record's own overrides
    assert capsys.readouterr().out.splitlines()[0] == "matches"
    assert main(["verify", str(out), "--seeds", "1,2,3", "+design=bm25", "limit=3"]) == 1
    listing = capsys.readouterr().out
    assert "plan.seeds: [1, 2] -> [1, 2, 3]" in listing
    assert "design.limit: 4 -> 3" in listing
    assert "data.question_ids: 4 -> 3 questions; 1 no longer selected" in listing


# ---------------------------------------------------------------- every hashed input


def _mutate(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if value is None:
        return "x"
    if isinstance(value, str):
        if not value:
            return "x"
        i = rng.randrange(len(value))
        return value[:i] + ("Q" if value[i] != "Q" else "R") + value[i + 1:]  # one character
    if isinstance(value, list):
        return value + value[:1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    raise AssertionError(type(value))


def _leaves(node: Any, path: tuple = ()):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, node


def _set(container: dict, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = value


def test_any_single_design_value_change_is_named(clean_code):
    """Property: every leaf of the canonical design (texts changed by one character), changed alone,
    makes verification fail naming that key; a change that cannot even be built is refused too."""
    rng = random.Random(9)
    cfg = compose_config(RICH)
    data_path, questions = load_dataset(cfg)
    ids = [q.question_id for q in questions]
    stored = seal(build_record(design_from_config(cfg, check=False), data_path, ids, Plan(), code=clean_code))
    container = resolved(cfg)
    keys_by_str = {}  # canonical (string) key path -> the container's own keys (YAML may give non-str keys)
    for path, _ in _leaves(container):
        keys_by_str[tuple(str(k) for k in path)] = path
    named = refused = 0
    for path, value in _leaves(canonical_design(container)):
        if path[-1] == "_target_":
            continue
        real = resolved(cfg)  # a fresh copy of the config
        _set(real, keys_by_str[path], _mutate(value, rng))
        try:
            fresh = build_record(design_from_config(OmegaConf.create(real), check=False), data_path, ids, Plan(), code=clean_code)
        except LmeError:
            refused += 1
            continue
        differences = compare(stored, fresh)
        key = "design." + ".".join(path)
        assert key in [d.key for d in differences], (key, [d.key for d in differences])
        assert all(d.blocking for d in differences)
        named += 1
    # a rule naming no view, a trigger on no field, a bad selection: the design cannot be built, so it is refused
    assert named > 60 and refused < 15, (named, refused)


def test_data_file_change_is_named(tmp_path, clean_code):
    data = json.loads(SAMPLE_PATH.read_text(encoding="utf-8"))
    copy = tmp_path / "data.json"
    copy.write_text(json.dumps(data), encoding="utf-8")
    overrides = [*FAST, f"dataset.path={copy}"]
    stored = seal(record_of(overrides, code=clean_code))
    data[0]["answer"] = str(data[0]["answer"]) + "!"
    copy.write_text(json.dumps(data), encoding="utf-8")
    differences = compare(stored, record_of(overrides, code=clean_code))
    assert [d.key for d in differences] == ["data.file_sha256"]


def test_inline_judge_template_change_is_named(clean_code):
    stored = seal(record_of(FAST, code=clean_code))
    cfg = compose_config(FAST)
    cfg.judge.templates.knowledge_update = str(cfg.judge.templates.knowledge_update).replace("latest", "Latest")
    keys = [d.key for d in compare(stored, record_of(FAST, code=clean_code, cfg=cfg))]
    assert keys[0] == "design.judge.templates.knowledge_update" and "judge_templates.knowledge_update" in keys


@needs(TEMPLATES)
def test_official_judge_template_change_is_refused_naming_it(tmp_path, clean_code):
    copy = tmp_path / "judge_templates.json"
    shutil.copy(TEMPLATES, copy)
    overrides = [*FAST, "judge=longmemeval", f"judge.templates_path={copy}"]
    stored = seal(record_of(overrides, code=clean_code))
    assert stored["judge_templates"]["abstention"] == "5c0b365a1e1d06db36377c735432b56e122ca3c428f89faf61d43a0d5a7e050b"
    raw = json.loads(copy.read_text(encoding="utf-8"))
    raw["templates"]["abstention"] = raw["templates"]["abstention"].replace("e", "E", 1)
    copy.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(LmeError, match="judge template 'abstention' has SHA-256"):
        record_of(overrides, code=clean_code)


@pytest.mark.parametrize(("plan", "key"), [
    (Plan(seeds=(1, 2, 4)), "plan.seeds"),
    (Plan(seeds=(1, 2)), "plan.seeds"),
    (Plan(primary="accuracy"), "plan.primary"),
    (Plan(comparisons=(("bm25", "hybrid"),)), "plan.comparisons"),
])
def test_plan_change_is_named(plan, key, clean_code):
    stored = seal(record_of(FAST, code=clean_code))
    assert [d.key for d in compare(stored, record_of(FAST, plan, code=clean_code))] == [key]


def test_code_change_is_named_by_file_and_git_state_is_only_a_note(tmp_path):
    if not HAS_GIT:
        pytest.skip("needs git, which is not installed (install git to run it)")
    package = checkout(tmp_path)
    stored = seal(record_of(FAST, code=code_version(package)))
    conf = package.parent / "conf" / "instructions" / "pipeline" / "calibration.txt"
    conf.write_text(conf.read_text(encoding="utf-8").replace("loosely", "loose1y", 1), encoding="utf-8")
    differences = compare(stored, record_of(FAST, code=code_version(package)))
    blocking = [d.key for d in differences if d.blocking]
    notes = [d.key for d in differences if not d.blocking]
    assert blocking == ["code.files.lme/conf/instructions/pipeline/calibration.txt"]
    assert notes == ["code.git_dirty"]


def test_a_record_and_its_folder_do_not_make_the_tree_dirty(tmp_path):
    if not HAS_GIT:
        pytest.skip("needs git, which is not installed (install git to run it)")
    package = checkout(tmp_path)
    record = tmp_path / "prereg" / "bm25.yaml"
    record.parent.mkdir()
    record.write_text("frozen\n", encoding="utf-8")
    (tmp_path / "prereg" / "other.yaml").write_text("frozen too\n", encoding="utf-8")
    assert code_version(package)["git_dirty"] is True
    assert code_version(package, ignore=[record])["git_dirty"] is False
    (tmp_path / "notes.txt").write_text("a change elsewhere\n", encoding="utf-8")
    assert code_version(package, ignore=[record])["git_dirty"] is True
    (tmp_path / "notes.txt").unlink()
    at_top = tmp_path / "top.yaml"  # a record at the top: only the file itself is left out
    at_top.write_text("frozen\n", encoding="utf-8")
    assert code_version(package, ignore=[at_top, record])["git_dirty"] is False
    inside = package.parent / "conf" / "rec.yaml"  # never the package's own folders, nor the config root
    inside.write_text("frozen\n", encoding="utf-8")
    assert code_version(package, ignore=[inside, at_top, record])["git_dirty"] is True


def test_freeze_into_the_repository_then_verify_reports_a_clean_tree(tmp_path, monkeypatch, capsys):
    if not HAS_GIT:
        pytest.skip("needs git, which is not installed (install git to run it)")
    import lme.provenance.prereg as prereg

    package = checkout(tmp_path / "repo")
    original = prereg.code_version
    monkeypatch.setattr(prereg, "code_version", lambda ignore=(): original(package, ignore=ignore))
    monkeypatch.chdir(tmp_path / "repo")
    assert main(["freeze", *FAST]) == 0  # the default file, prereg/bm25.yaml, in the checkout
    assert "(dirty tree)" not in capsys.readouterr().out
    assert main(["verify", "prereg/bm25.yaml"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "matches" and "git_dirty" not in out, out


def test_package_versions_block_except_mlflow_and_edits_break_the_seal(clean_code):
    record = seal(record_of(FAST, code=clean_code))
    fresh = record_of(FAST, code=clean_code)
    other = seal({**record, "packages": {**record["packages"], "litellm": "0.0.1", "mlflow": "0.0.1"}})
    differences = compare(other, fresh)
    assert [(d.key, d.blocking) for d in differences] == [("packages.litellm", True), ("packages.mlflow", False)]
    edited = {**record, "plan": {**record["plan"], "seeds": [7]}}  # not resealed
    keys = [d.key for d in compare(edited, fresh)]
    assert keys[0] == "record_sha256" and "plan.seeds" in keys


# ---------------------------------------------------------------- the run's check


def test_check_run_tags_refuses_and_names_the_first_difference(tmp_path, capsys):
    rec = tmp_path / "rec.yaml"
    assert main(["freeze", "--out", str(rec), *FAST]) == 0
    record = load_record(rec)
    cfg = compose_config([*FAST, f"prereg={rec}", "seed=2"])
    tags = check_run(design_from_config(cfg, check=False), *load_dataset(cfg))
    assert tags == {"lme.design_sha256": record["design_sha256"], "lme.prereg_sha256": record["record_sha256"]}
    cfg = compose_config([*FAST, f"prereg={rec}", "seed=7"])
    with pytest.raises(LmeError, match="seed 7 is not among the planned seeds 1,2,3") as refused:
        check_run(design_from_config(cfg, check=False), *load_dataset(cfg))
    assert "\n" not in str(refused.value)
    cfg = compose_config([*FAST, f"+prereg={rec}", "seed=1", "memory.max_bytes=5000"])
    with pytest.raises(LmeError, match=r"design\.memory\.max_bytes: 96000 -> 5000"):
        check_run(design_from_config(cfg, check=False), *load_dataset(cfg))
    assert check_run(design_from_config(compose_config(FAST), check=False), *load_dataset(compose_config(FAST))) == {
        "lme.design_sha256": record["design_sha256"]}


def _lme(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "lme", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_one_character_edit_in_an_instruction_file_stops_the_run_before_any_call(tmp_path):
    """A checkout (here a copy of the package put first on PYTHONPATH) is frozen, one character of
    an instruction file is edited, and the run refuses in one sentence naming the key and the file."""
    root = tmp_path / "checkout"
    package = checkout(root, commit=False)
    design = ["+design=first_pass", "limit=2", "tracking.enabled=false", f"cache_dir={tmp_path}/cache"]
    frozen = _lme("prereg", "freeze", "--out", "rec.yaml", *design, cwd=tmp_path, pythonpath=root)
    assert frozen.returncode == 0, frozen.stderr[-2000:]
    assert str(root) in load_record(tmp_path / "rec.yaml")["data"]["path"]  # the copy's sample file
    conf = package.parent / "conf" / "instructions" / "pipeline" / "calibration.txt"
    conf.write_text(conf.read_text(encoding="utf-8").replace("loosely", "loose1y", 1), encoding="utf-8")
    run = _lme(*design, "+prereg=rec.yaml", "seed=1", cwd=tmp_path, pythonpath=root)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lme: error: rec.yaml: this run differs"), run.stderr[-2000:]
    assert "design.instructions.paragraphs.calibration: sha256" in lines[0]
    assert "files changed: lme/conf/instructions/pipeline/calibration.txt" in lines[0]
    assert not (tmp_path / "cache" / "calls.sqlite").exists()  # no model call was made, none could be
    assert not list(tmp_path.glob("outputs/**/outcomes.jsonl"))  # Hydra made the run dir; nothing ran in it


# ---------------------------------------------------------------- for the report


def _run(start: datetime, tags: dict[str, str]):
    from mlflow.entities import Run, RunData, RunInfo, RunTag

    info = RunInfo(run_id="r", experiment_id="0", user_id="u", status="FINISHED",
                   start_time=int(start.timestamp() * 1000), end_time=None, lifecycle_stage="active")
    return Run(info, RunData(tags=[RunTag(k, v) for k, v in tags.items()]))


def test_prereg_facts_give_the_primary_measure_and_whether_the_record_came_after_the_first_run(clean_code):
    record = seal(record_of(FAST, Plan(primary="accuracy", comparisons=(("bm25", "hybrid"),)), code=clean_code))
    frozen = datetime.fromisoformat(record["created"].replace("Z", "+00:00"))
    confirmation = _run(frozen + timedelta(hours=1), {"lme.prereg_sha256": record["record_sha256"]})
    earlier = _run(frozen - timedelta(days=2), {"lme.design_sha256": record["design_sha256"]})
    unrelated = _run(frozen - timedelta(days=9), {"lme.design_sha256": "0" * 64})
    facts = prereg_facts(record, [confirmation, unrelated])
    assert (facts.primary, facts.comparisons, facts.seeds) == ("accuracy", (("bm25", "hybrid"),), (1, 2, 3))
    assert facts.covered_runs == 1 and facts.written_after_first_run is False
    facts = prereg_facts(record, [confirmation, earlier, unrelated])
    assert facts.covered_runs == 2 and facts.written_after_first_run is True
    assert facts.first_run_at == (frozen - timedelta(days=2)).astimezone(timezone.utc)


@pytest.mark.slow
def test_preregistered_run_is_tagged_in_mlflow(tmp_path):
    design = ["+design=bm25", "limit=3", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
              f"tracking.artifact_location={tmp_path}/mlruns", f"cache_dir={tmp_path}/cache"]
    assert _lme("prereg", "freeze", "--out", "rec.yaml", "--seeds", "1", *design, cwd=tmp_path).returncode == 0
    run = _lme(*design, "prereg=rec.yaml", "seed=1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("lme").experiment_id])
    record = load_record(tmp_path / "rec.yaml")
    assert [r.data.tags.get("lme.prereg_sha256") for r in runs] == [record["record_sha256"]]
    assert runs[0].data.tags["lme.design_sha256"] == record["design_sha256"]
    assert prereg_facts(record, runs).written_after_first_run is False


def test_verify_refuses_an_edited_or_resealed_record_in_one_sentence(tmp_path):
    """An edited record is refused before any field is used (its digest first); one edited and resealed with a
    field of the wrong type is refused naming the field (tests/test_prereg_faults.py has the whole matrix)."""
    from lme.provenance.prereg import dump_record

    out = tmp_path / "rec.yaml"
    assert main(["freeze", "--out", str(out), *FAST]) == 0
    frozen = out.read_text(encoding="utf-8")
    out.write_text(frozen.replace("majority_correct_accuracy", "mean_accuracy"), encoding="utf-8")
    with pytest.raises(LmeError, match=r"rec\.yaml: preregistration record truncated or edited: its digest does "
                                       r"not match \(record_sha256 does not match"):
        main(["verify", str(out)])
    record = load_record_text(frozen)
    out.write_text(dump_record(seal({**record, "plan": {**record["plan"], "seeds": "1,2,3"}})), encoding="utf-8")
    with pytest.raises(LmeError, match=r"rec\.yaml: field plan\.seeds holds a text of 5 characters, where a record "
                                       r"has a list \(the record was edited and resealed\)"):
        main(["verify", str(out)])


def load_record_text(text: str) -> dict:
    from lme.provenance.prereg import parse_record

    return parse_record(text, "rec.yaml")
