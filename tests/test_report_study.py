"""The report as the reference study reports: the preregistered primary measure stated first (whatever it
scored), questions with more / fewer correct runs on the mean measure, the reader's input tokens split
between the first pass and the re-reads. Numbers are checked against independent computations on the
fixture patterns; the command against a real MLflow store and real record files."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from report_fixtures import IDS, PATCHY, PLAIN, TYPES, fresh_store, pipeline_runs, rows_from

from lme.reporting.measures import paired_difference, stratified_bootstrap
from lme.reporting.report import (
    DesignRuns,
    JobOutcomes,
    Preregistration,
    build_report,
    correct_map,
    render_markdown,
    report_json,
)

SHA = "ab" * 32


def design(label: str, pattern, tag: str | None = None, seeds=("1", "2", "3"), **kwargs) -> DesignRuns:
    jobs = tuple(
        JobOutcomes(f"{label}-run{i}", f"{label}-seed{seed}", seed, "offline-lexical-judge", False,
                    tuple(rows_from(p, **kwargs)), prereg_sha256=tag)
        for i, (seed, p) in enumerate(zip(seeds, pattern))
    )
    return DesignRuns(label, label, f"{label}-parent", f"{label}-multirun", jobs)


def correct_counts(pattern) -> dict[str, int]:
    """Per question: the runs that got it right (a missing answer or an absent row is wrong)."""
    return {q: sum(int(run[i] not in (None, "missing") and bool(run[i])) for run in pattern) for i, q in enumerate(IDS)}


def _row(markdown: str, first_cell: str, after: str) -> list[str]:
    text = markdown[markdown.index(after):]
    line = next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


# --- more / fewer correct runs --------------------------------------------------------------------


def test_more_and_fewer_correct_runs_count_each_questions_correct_runs():
    plain, patchy = correct_counts(PLAIN), correct_counts(PATCHY)
    more = {q for q in IDS if patchy[q] > plain[q]}
    fewer = {q for q in IDS if patchy[q] < plain[q]}
    assert (len(more), len(fewer)) == (5, 1)  # by hand: u1 u2 m2 m3 k2 / m1
    report = build_report([design("plain", PLAIN), design("patchy", PATCHY)], n_resamples=500, seed=3)
    overall = report.pairs[0].comparison.overall  # patchy - plain
    assert set(overall.more_runs) == more and set(overall.fewer_runs) == fewer
    for qtype, group in report.pairs[0].comparison.per_type.items():
        members = {q for q in IDS if TYPES[q] == qtype}
        assert set(group.more_runs) == more & members and set(group.fewer_runs) == fewer & members
    row = _row(render_markdown(report), "all", "### patchy vs plain")
    assert row[4:6] == ["5", "1"]
    assert "More runs / fewer runs" in render_markdown(report)
    data = json.loads(json.dumps(report_json(report)))
    assert sorted(data["pairs"][0]["comparison"]["overall"]["more_runs"]) == sorted(more)


def test_more_runs_compares_shares_when_the_designs_have_different_numbers_of_runs():
    one = design("one", PLAIN[:1])  # u1 right in its one run (1/1)
    three = design("three", PLAIN)  # u1 right in 2 of 3
    group = build_report([one, three], n_resamples=200).pairs[0].comparison.overall  # three - one
    assert "u1" in group.fewer_runs and "u2" in group.more_runs  # u2: 0/1 -> 1/3


def test_task_averaged_difference_is_the_mean_over_types_and_leaves_the_other_intervals_as_they_were():
    runs_a = [correct_map(rows_from(p)) for p in PLAIN]
    runs_b = [correct_map(rows_from(p)) for p in PATCHY]
    types = dict(TYPES)
    result = paired_difference(runs_a, runs_b, types, n_resamples=2000, seed=5)
    by_type = {}
    for qtype in set(types.values()):
        ids = [q for q in IDS if types[q] == qtype]
        by_type[qtype] = sum(correct_counts(PATCHY)[q] - correct_counts(PLAIN)[q] for q in ids) / 3 / len(ids)
    assert result.overall.task_averaged_difference == pytest.approx(sum(by_type.values()) / len(by_type))
    assert result.overall.task_averaged_interval.covers(result.overall.task_averaged_difference)
    # the intervals of the two other measures are those of a bootstrap over those two measures alone
    ids = sorted(types)
    d_mean = [(correct_counts(PATCHY)[q] - correct_counts(PLAIN)[q]) / 3 for q in ids]
    d_major = [float(correct_counts(PATCHY)[q] >= 2) - float(correct_counts(PLAIN)[q] >= 2) for q in ids]
    alone = stratified_bootstrap([d_mean, d_major], [types[q] for q in ids], 2000, 5)
    assert (result.overall.mean_interval, result.overall.majority_interval) == alone.overall
    for qtype, group in result.per_type.items():
        assert group.task_averaged_difference == pytest.approx(by_type[qtype]) == pytest.approx(group.mean_difference)


# --- input tokens: first pass and re-reads ----------------------------------------------------------


def test_cost_splits_reader_calls_and_input_tokens_between_first_pass_and_rereads():
    runs = pipeline_runs()
    first_calls = first_tokens = later_calls = later_tokens = 0
    for rows in runs:
        for row in rows:
            first_calls += row["steps"][0]["reader"]["calls"]
            first_tokens += row["steps"][0]["reader"]["input_tokens"]
            later_calls += sum(step["reader"]["calls"] for step in row["steps"][1:])
            later_tokens += sum(step["reader"]["input_tokens"] for step in row["steps"][1:])
    assert (first_calls, later_calls) == (9, 7)  # 3 questions x 3 runs; the re-reads the fixture chose (3 + 2 + 2)
    jobs = tuple(JobOutcomes(f"p{i}", f"p-seed{i}", str(i), "offline-lexical-judge", False, tuple(rows))
                 for i, rows in enumerate(runs, start=1))
    plain = design("plain", PLAIN, reader_tokens=120)  # rows without steps: all first pass
    report = build_report([DesignRuns("pipeline", "pipeline", "pp", "pipeline-multirun", jobs), plain], n_resamples=200)
    cost = report.design("pipeline").cost
    assert (cost.first_pass_reader_calls, cost.first_pass_input_tokens) == (first_calls, first_tokens)
    assert (cost.reread_reader_calls, cost.reread_input_tokens) == (later_calls, later_tokens)
    assert cost.first_pass_reader_calls + cost.reread_reader_calls == cost.reader_calls
    assert cost.first_pass_input_tokens + cost.reread_input_tokens == cost.reader_input_tokens
    plain_cost = report.design("plain").cost
    assert (plain_cost.first_pass_reader_calls, plain_cost.first_pass_input_tokens) == (24, 24 * 120)
    assert (plain_cost.reread_reader_calls, plain_cost.reread_input_tokens) == (0, 0)
    md = render_markdown(report)
    row = _row(md, "pipeline", "## Cost")
    assert row[8:12] == [str(first_calls), f"{first_tokens:,} ({first_tokens / first_calls:,.0f})", str(later_calls),
                         f"{later_tokens:,} ({later_tokens / later_calls:,.0f})"]
    assert _row(md, "plain", "## Cost")[8:12] == ["24", f"{24 * 120:,} (120)", "0", "0 (-)"]
    assert "first pass and the re-reads" in md


# --- the preregistered primary measure ----------------------------------------------------------------


def prereg(primary: str = "majority_correct_accuracy", design_name: str = "patchy", **kwargs) -> Preregistration:
    return Preregistration(SHA, path="prereg/patchy.yaml", design_name=design_name, primary=primary,
                           seeds=(1, 2, 3), frozen_at="2026-01-01T00:00:00Z", **kwargs)


def designs(tag_patchy: bool = True, **kwargs):
    return [design("plain", PLAIN), design("patchy", PATCHY, tag=SHA if tag_patchy else None, **kwargs)]


def test_the_report_opens_with_the_primary_measure_its_value_difference_interval_and_record():
    report = build_report(designs(), n_resamples=1000, seed=2,
                          preregistrations=[prereg(comparisons=(("patchy", "plain"),))])
    md = render_markdown(report)
    lines = md.splitlines()
    assert lines[0] == "# lme report"
    assert lines[2] == (
        "**Preregistered primary measure:** majority_correct_accuracy (correct in >=2 of 3 runs) of design patchy: "
        f"**75.0%** (6/8 questions), seeds 1, 2, 3; record {SHA} (prereg/patchy.yaml)."
    )
    pair = build_report(designs(), n_resamples=1000, seed=2).pairs[0].comparison.overall  # patchy - plain
    low, high = (f"{100 * v:+.1f}" for v in (pair.majority_interval.low, pair.majority_interval.high))
    assert lines[3] == (f"- patchy - plain (planned comparison): **+25.0 points**, 95% interval [{low}, {high}], "
                        "on 8 questions in common.")
    assert md.index("Preregistered primary measure") < md.index("## Headline") < md.index("## Paired comparisons")
    statement = report_json(report)["primary"][0]
    assert statement["value"] == pytest.approx(0.75) and statement["record_sha256"] == SHA
    assert statement["comparisons"][0]["difference"] == pytest.approx(0.25)


def test_a_primary_measure_that_lost_is_stated_all_the_same():
    report = build_report(designs(), n_resamples=500, preregistrations=[prereg(
        "mean_accuracy", comparisons=(("patchy", "plain"),))])
    # a record for `plain` against `patchy` (plain's jobs tagged): a negative difference, stated first
    tagged = [design("plain", PLAIN, tag=SHA), design("patchy", PATCHY)]
    lost = build_report(tagged, n_resamples=500, preregistrations=[prereg(
        "mean_accuracy", design_name="plain", comparisons=(("plain", "patchy"),))])
    lines = render_markdown(lost).splitlines()
    assert lines[2].startswith("**Preregistered primary measure:** mean_accuracy (mean of runs) of design plain: "
                               "**50.0%**")
    assert lines[3].startswith("- plain - patchy (planned comparison): **-12.5 points**, 95% interval [")
    assert render_markdown(report).splitlines()[3].startswith("- patchy - plain (planned comparison): **+12.5 points**")


@pytest.mark.parametrize("primary, value, detail", [
    ("accuracy", (6 + 5 + 4) / 24, "8 questions; runs 75.0%, 62.5%, 50.0%"),
    ("accuracy.multi-session", (1 + 2 + 2) / 9, "3 questions"),
    ("majority_correct_accuracy.knowledge-update", 0.5, "1/2 questions"),
    ("abstention_accuracy", 2 / 3, "1 abstention questions"),
    ("task_averaged_accuracy", None, "3 question types"),
])
def test_every_preregistrable_measure_has_its_value(primary, value, detail):
    report = build_report(designs(), n_resamples=300, preregistrations=[prereg(primary, comparisons=(("patchy", "plain"),))])
    statement = report.primary[0]
    if value is None:  # the unweighted mean of the per-type means of runs
        value = report.design("patchy").summary.mean_task_averaged
        per_type = {t: sum(correct_counts(PATCHY)[q] for q in IDS if TYPES[q] == t)
                    / (3 * sum(1 for q in IDS if TYPES[q] == t)) for t in set(TYPES.values())}
        assert value == pytest.approx(sum(per_type.values()) / 3)
    assert statement.value == pytest.approx(value) and statement.detail == detail
    comparison = statement.comparisons[0]
    assert comparison.missing is None and comparison.n_questions > 0
    if primary == "abstention_accuracy":  # u3_abs: 2 of 3 in both designs; no interval for this measure
        assert comparison.difference == pytest.approx(0.0) and comparison.interval is None
        assert "no paired interval for this measure" in render_markdown(report)


def test_what_cannot_be_stated_is_said():
    # runs tagged with a record whose file was not found: the digest, and that the measure is unknown
    missing = build_report(designs(), n_resamples=200, preregistrations=[Preregistration(SHA, found=False)])
    lines = render_markdown(missing).splitlines()
    assert lines[2] == f"**Preregistered primary measure: unknown.** Runs carry preregistration record {SHA}."
    assert "no record file with this digest was found (pass --prereg RECORD)" in lines[3]
    # a baseline that is not in the report, seeds other than planned, jobs without the tag, a late record
    partial = designs(seeds=("1", "2", "4"))
    partial[1] = DesignRuns("patchy", "patchy", "pp", "patchy-multirun",
                            (*partial[1].jobs[:2], JobOutcomes("x", "patchy-seed4", "4", "offline-lexical-judge", False,
                                                              partial[1].jobs[2].rows)))
    report = build_report(partial, n_resamples=200, preregistrations=[prereg(
        comparisons=(("patchy", "bm25"),), written_after_first_run=True, first_run_at="2025-12-31T00:00:00Z")])
    md = render_markdown(report)
    assert "- patchy - bm25 (planned comparison): not computed, bm25 not in this report." in md
    assert "seeds 1, 2;" in md.splitlines()[2]  # the tagged jobs' seeds
    assert "1 job(s) of patchy do not carry the record's digest and are counted too" in md
    assert "the record planned seeds 1, 2, 3; these runs have 1, 2" in md
    assert "frozen (2026-01-01T00:00:00Z) after the first run of its design (2025-12-31T00:00:00Z)" in md
    # a record given by hand whose design ran untagged: stated, and said not to be its confirmation runs
    untagged = build_report(designs(tag_patchy=False), n_resamples=200, preregistrations=[prereg()])
    assert "no job in this report carries the record's digest" in render_markdown(untagged)
    assert untagged.primary[0].value == pytest.approx(0.75)
    # without any record, the report starts as before
    assert render_markdown(build_report(designs(), n_resamples=200)).splitlines()[2].startswith("| design |")


# --- the command: records found from the runs, against a real MLflow store ------------------------------


def write_record(path: Path, design_name: str, primary: str, created: datetime, comparisons=()) -> dict:
    from lme.provenance.prereg import dump_record, seal

    record = seal({
        "lme_prereg": 1, "name": None, "created": created.isoformat().replace("+00:00", "Z"),
        "design_name": design_name, "overrides": [f"+design={design_name}"],
        "plan": {"seeds": [1, 2, 3], "primary": primary, "comparisons": [f"{d}:{b}" for d, b in comparisons]},
        "design_sha256": "cd" * 32, "digests": {}, "judge_templates": {}, "models": {},
        "data": {"name": "sample", "file_sha256": "ef" * 32, "question_ids": IDS}, "code": {}, "packages": {},
        "design": {"design_name": design_name},
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_record(record), encoding="utf-8")
    return record


def log_design(settings, tmp: Path, name: str, pattern, tag: str | None = None, config: str | None = None) -> None:
    """A parent and three job runs as `lme.study.job.run_job` logs them: tags (with `lme.prereg_sha256` when the run
    was checked against a record), the outcomes.jsonl artifact and the config.yaml artifact."""
    from lme.tracking.runs import JobRun

    parent = JobRun(settings, f"{name}-multirun", {"lme.role": "parent", "lme.design": name})
    for seed, run in enumerate(pattern, start=1):
        tags = {"lme.role": "job", "lme.design": name, "lme.seed": str(seed), "lme.judge": "offline-lexical-judge",
                "lme.judge_official": "false", "lme.design_sha256": "cd" * 32 if tag else "00" * 32}
        if tag:
            tags["lme.prereg_sha256"] = tag
        job = JobRun(settings, f"{name}-seed{seed}", tags, parent_id=parent.run_id)
        folder = tmp / f"{name}-{seed}"
        folder.mkdir(parents=True)
        (folder / "outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_from(run)), encoding="utf-8")
        job.log_artifact(folder / "outcomes.jsonl")
        job.log_text(config or f"design_name: {name}\nprereg: null\n", "config.yaml")
        job.finish()
    parent.finish()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    settings, tmp = fresh_store(tmp_path_factory, "prereg-study")
    created = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    record = write_record(tmp / "records" / "patchy.yaml", "patchy", "majority_correct_accuracy", created,
                          comparisons=(("patchy", "plain"),))
    log_design(settings, tmp, "plain", PLAIN)
    # the run was given the record as a path relative to where it ran (here: `tmp`)
    log_design(settings, tmp, "patchy", PATCHY, tag=record["record_sha256"],
               config="design_name: patchy\nprereg: records/patchy.yaml\n")
    overrides = [f"tracking.uri={settings.uri}", f"tracking.artifact_location={settings.artifact_location}"]
    return {"tmp": tmp, "record": record, "overrides": overrides}


def lme(argv, capsys) -> tuple[int, str, str]:
    from lme.cli import run_subcommand

    code = run_subcommand(argv[0], argv[1:])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_report_command_finds_the_record_a_run_was_checked_against_and_states_it_first(study, capsys, monkeypatch):
    monkeypatch.chdir(study["tmp"])
    code, out, err = lme(["report", "--resamples", "500", *study["overrides"]], capsys)
    assert code == 0, err
    lines = out.splitlines()
    sha = study["record"]["record_sha256"]
    assert lines[2] == ("**Preregistered primary measure:** majority_correct_accuracy (correct in >=2 of 3 runs) of "
                        f"design patchy: **75.0%** (6/8 questions), seeds 1, 2, 3; record {sha} (records/patchy.yaml).")
    assert lines[3].startswith("- patchy - plain (planned comparison): **+25.0 points**, 95% interval [")
    code, out, err = lme(["report", "--json", "--resamples", "500", *study["overrides"]], capsys)
    assert code == 0 and json.loads(out)["primary"][0]["path"] == "records/patchy.yaml"


def test_report_command_without_the_record_file_says_so_and_takes_one_given_by_hand(study, capsys, monkeypatch,
                                                                                    tmp_path):
    monkeypatch.chdir(tmp_path)  # the config's relative path leads nowhere from here
    sha = study["record"]["record_sha256"]
    code, out, err = lme(["report", "--resamples", "200", *study["overrides"]], capsys)
    assert code == 0, err
    assert out.splitlines()[2] == f"**Preregistered primary measure: unknown.** Runs carry preregistration record {sha}."
    # found under prereg/ by its digest
    (tmp_path / "prereg" / "old").mkdir(parents=True)
    (tmp_path / "prereg" / "old" / "copy.yaml").write_text((study["tmp"] / "records" / "patchy.yaml").read_text())
    code, out, err = lme(["report", "--resamples", "200", *study["overrides"]], capsys)
    assert code == 0 and "of design patchy: **75.0%**" in out.splitlines()[2] and "prereg/old/copy.yaml" in out
    # given with --prereg: a record that was edited after freezing is refused in one sentence
    edited = tmp_path / "edited.yaml"
    edited.write_text((study["tmp"] / "records" / "patchy.yaml").read_text().replace("majority_correct_accuracy",
                                                                                     "mean_accuracy"))
    code, _, err = lme(["report", "--prereg", str(edited), *study["overrides"]], capsys)
    assert code == 2 and err.count("\n") == 1 and "record_sha256 does not match" in err and "edited.yaml" in err
    code, _, err = lme(["report", "--prereg", str(tmp_path / "nope.yaml"), *study["overrides"]], capsys)
    assert code == 2 and "preregistration record not found" in err


# --- end to end: freeze, a preregistered multirun, a baseline, the report ------------------------------------


def _lme_process(*args: str, cwd: Path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "HYDRA"))}
    return subprocess.run([sys.executable, "-m", "lme", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_a_preregistered_study_is_reported_with_its_primary_measure_first(tmp_path):
    common = ["limit=4", "progress=false", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
              f"tracking.artifact_location={tmp_path}/mlruns", f"cache_dir={tmp_path}/cache"]
    freeze = _lme_process("prereg", "freeze", "+design=bm25", *common, "--seeds", "1,2", "--primary", "mean_accuracy",
                          "--compare", "bm25:first_pass", "--out", "prereg/bm25.yaml", cwd=tmp_path)
    assert freeze.returncode == 0, freeze.stderr[-2000:]
    for args in (["+design=bm25", "prereg=prereg/bm25.yaml", "-m", "seed=1,2"], ["+design=first_pass", "-m", "seed=1,2"]):
        run = _lme_process(*args, *common, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
    from lme.provenance.prereg import load_record

    record = load_record(tmp_path / "prereg" / "bm25.yaml")
    report = _lme_process("report", "--json", "--resamples", "200", *common[2:4], cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    data = json.loads(report.stdout)
    statement = data["primary"][0]
    bm25 = next(d for d in data["designs"] if d["design"] == "bm25")
    assert statement["record_sha256"] == record["record_sha256"] and statement["path"] == "prereg/bm25.yaml"
    assert statement["design"] == "bm25" and sorted(statement["seeds_ran"]) == ["1", "2"]
    assert statement["value"] == pytest.approx(bm25["summary"]["mean_accuracy"])
    comparison = statement["comparisons"][0]
    pair = next(p for p in data["pairs"] if {p["a"], p["b"]} == {"bm25", "first_pass"})
    sign = 1 if pair["b"] == "bm25" else -1
    assert comparison["difference"] == pytest.approx(sign * pair["comparison"]["overall"]["mean_difference"])
    assert statement["notes"] == []
    markdown = _lme_process("report", "--resamples", "200", *common[2:4], cwd=tmp_path).stdout.splitlines()
    assert markdown[2].startswith("**Preregistered primary measure:** mean_accuracy (mean of runs) of design bm25: **")
    assert markdown[2].endswith(f"record {record['record_sha256']} (prereg/bm25.yaml).")
    assert markdown[3].startswith("- bm25 - first_pass (planned comparison): **")
