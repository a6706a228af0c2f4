"""instructions=study: the study's own texts, read from the real test data (never from the repository), each
composed step verified against the study's published SHA-256; lme's own pipeline composes the same
paragraph lists in its own words."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lme.answer.study_instructions import (
    STUDY_INSTRUCTION_SHA256,
    STUDY_STEPS,
    load_study_instructions,
    study_digest,
)
from lme.config.design import compose_design, plain
from lme.util.errors import LmeError
from lme.provenance.prereg import text_digests
from shared_data import STUDY_INSTRUCTIONS as STUDY_FILE
from shared_data import available, needs

ROOT = Path(__file__).resolve().parents[1]
needs_file = needs(STUDY_FILE)

# The digests the study published (its write-up's appendix; oh_study's README in the test data), written out
# here a second time so that a change to the pinned values in lme is caught.
PUBLISHED = {
    "first_pass": "551f0c0de5df5642a732ecbee7c5fef9359bb6ce4cfa67526476b20c1719dd84",
    "advice": "4c1404fa181fad5e1ae281aa462a87b9c5e1099ad6349a2d0cda289ed60d9616",
    "decline": "5058ea6c013da4dac2d933a6ba397ac7b6e36ab5c5cf78259d24c47528335bba",
    "recall": "6f055965d7594ef9bd7a4ac345b8b42d23335c371ba76578d0565a237b9c49de",
}
STUDY_LISTS = {
    "first_pass": ["user_log", "calibration", "answer_format"],
    "advice": ["user_log", "answer_format", "advice"],
    "decline": ["whole_sessions", "answer_format"],
    "recall": ["whole_sessions", "answer_format", "recall"],
}


def study(overrides: list[str], path: Path | str = STUDY_FILE):
    return compose_design(["+design=pipeline", "instructions=study", f"instructions.source={path}", *overrides])


def test_the_pinned_facts_are_the_published_ones():
    assert dict(STUDY_INSTRUCTION_SHA256) == PUBLISHED
    assert {step: list(names) for step, names in STUDY_STEPS.items()} == STUDY_LISTS


def test_the_digest_rule_is_sha256_of_the_json_string_with_non_ascii_kept():
    import hashlib

    assert study_digest('a "b" \u2248') == hashlib.sha256('"a \\"b\\" \u2248"'.encode()).hexdigest()


@needs_file
def test_instructions_study_composes_all_four_steps_to_the_published_digests():
    design = study([])
    texts = design.instructions.texts
    assert set(texts) == set(PUBLISHED)
    assert {step: study_digest(text) for step, text in texts.items()} == PUBLISHED
    # the texts the run uses are in the design's config: its digest, prereg and the audit see them
    config = plain(design.config)
    raw = json.loads(STUDY_FILE.read_text(encoding="utf-8"))
    assert config["instructions"]["base"] == raw["base"]
    assert config["instructions"]["paragraphs"] == raw["paragraphs"]
    from lme.config.design import canonical_design

    canonical = canonical_design(config)  # what prereg freezes: the texts, not where the file lies
    assert "source" not in canonical["instructions"]
    digests = text_digests(canonical)
    assert digests["instructions.paragraphs.recall"] and digests["instruction.advice"]
    assert "instructions.source" not in digests
    # where the file lies is not part of the design; its texts are
    moved = study([], STUDY_FILE.resolve())
    assert moved.config_sha256 == design.config_sha256


@needs_file
def test_the_first_pass_design_verifies_the_file_too():
    design = compose_design(["+design=first_pass", "instructions=study", f"instructions.source={STUDY_FILE}"])
    assert study_digest(design.instructions.first_pass) == PUBLISHED["first_pass"]


@needs_file
@pytest.mark.parametrize("where", ["base", "user_log", "calibration", "answer_format", "advice", "whole_sessions", "recall"])
def test_a_one_character_change_is_refused_naming_the_file_and_step(tmp_path, where):
    raw = json.loads(STUDY_FILE.read_text(encoding="utf-8"))
    if where == "base":
        raw["base"] = raw["base"].replace("Answer", "answer", 1)
    else:
        raw["paragraphs"][where] = raw["paragraphs"][where][:-1] + ","
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(raw, ensure_ascii=False), encoding="utf-8")
    first = next(step for step, names in STUDY_LISTS.items() if where == "base" or where in names)
    with pytest.raises(LmeError) as caught:
        study([], changed)
    message = str(caught.value)
    assert str(changed) in message and f"step {first} " in message and PUBLISHED[first] in message
    assert "\n" not in message


def test_a_missing_file_is_one_sentence(tmp_path):
    with pytest.raises(LmeError, match="does not exist; point instructions.source"):
        study([], tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(LmeError, match="not readable JSON"):
        load_study_instructions(bad)
    bad.write_text('{"base": "x", "paragraphs": {}}', encoding="utf-8")
    with pytest.raises(LmeError, match="step first_pass: the study's paragraph 'user_log' is missing"):
        load_study_instructions(bad)


@needs_file
def test_a_step_with_another_paragraph_list_is_refused():
    with pytest.raises(LmeError, match=r"step advice composes base \+ \[user_log, calibration, answer_format, advice\]"):
        study(["rules.definitions.advice.paragraphs=[user_log,calibration,answer_format,advice]"])
    with pytest.raises(LmeError, match="step first_pass composes"):
        study(["instructions.first_pass=[user_log,answer_format]"])


@needs_file
def test_a_config_base_beside_the_source_is_refused():
    with pytest.raises(LmeError, match="instructions.base: the study's texts come from instructions.source"):
        study(["+instructions.base=mine"])


@needs_file
def test_the_run_refuses_before_any_model_call(tmp_path):
    """The command line: non-zero exit, one sentence naming the file, no traceback, nothing run."""
    raw = json.loads(STUDY_FILE.read_text(encoding="utf-8"))
    raw["paragraphs"]["recall"] += " "  + "x"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(raw, ensure_ascii=False), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "lme", "+design=pipeline", "instructions=study", f"instructions.source={changed}",
         "tracking.enabled=false", f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode != 0
    assert str(changed) in result.stderr and "step recall" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache" / "ledger.sqlite").exists()


def test_lme_pipeline_steps_compose_the_studys_paragraph_lists():
    design = compose_design(["+design=pipeline"])
    assert list(design.instructions.first_pass_paragraphs) == STUDY_LISTS["first_pass"]
    lists = {step.rule.name: list(step.rule.paragraphs) for step in design.instructions.rules}
    assert lists == {name: STUDY_LISTS[name] for name in ("advice", "decline", "recall")}
    # lme's own wording, not the study's
    if available(STUDY_FILE):
        assert all(study_digest(text) != PUBLISHED[step] for step, text in design.instructions.texts.items())


@needs_file
def test_the_repository_holds_no_sentence_of_the_studys_texts():
    """The study's texts are someone else's: no sentence of them is in lme's code, configs, docs or tests."""
    import re

    raw = json.loads(STUDY_FILE.read_text(encoding="utf-8"))
    sentences = {s.strip() for text in [raw["base"], *raw["paragraphs"].values()]
                 for s in re.split(r"(?<=[.:;])\s+", text) if len(s.strip()) > 40}
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".py", ".txt", ".yaml", ".md", ".json", ".toml"} or not path.is_file():
            continue
        content = path.read_text(encoding="utf-8", errors="replace")
        hits = [s for s in sentences if s in content]
        assert not hits, f"{name} holds the study's text: {hits[0][:60]!r}"


@needs_file
def test_the_base_alone_is_the_studys_baseline_reader():
    """The study's retrieval baselines read with its base instruction alone: allowed, the base being verified
    inside every composed step; the user-log paragraph over retrieved turns is still refused."""
    design = compose_design(["instructions=study", f"instructions.source={STUDY_FILE}", "instructions.first_pass=[]"])
    assert design.instructions.first_pass == json.loads(STUDY_FILE.read_text(encoding="utf-8"))["base"]
    with pytest.raises(LmeError, match='paragraph "user_log"'):
        compose_design(["instructions=study", f"instructions.source={STUDY_FILE}"])
