"""The report: every number against an independent computation on outcomes of known content,
the selection of MLflow runs, the command against a real MLflow store, and (slow) end to end
over three offline designs run with three seeds each."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import IDS, PATCHY, PLAIN, TYPES, fresh_store, log_study, pipeline_runs, rows_from

from lme.util.errors import LmeError
from lme.reporting.report import (
    DesignRuns,
    JobOutcomes,
    all_pairs,
    build_report,
    parse_pairs,
    render_markdown,
    report_json,
)
from lme.tracking.report_source import Questions, RunInfo, choose_sources, labels_for, select_designs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def design(label: str, pattern, official: bool = False, **kwargs) -> DesignRuns:
    judge = "longmemeval" if official else "offline-lexical-judge"
    jobs = tuple(
        JobOutcomes(f"{label}-run{i}", f"{label}-seed{i + 1}", str(i + 1), judge, official, tuple(rows_from(p, **kwargs)))
        for i, p in enumerate(pattern)
    )
    return DesignRuns(label, label, f"{label}-parent", f"{label}-multirun", jobs)


def pipeline_design() -> DesignRuns:
    jobs = tuple(
        JobOutcomes(f"p-run{i}", f"pipeline-seed{i + 1}", str(i + 1), "offline-lexical-judge", False, tuple(rows))
        for i, rows in enumerate(pipeline_runs())
    )
    return DesignRuns("pipeline", "pipeline", "pipeline-parent", "pipeline-multirun", jobs)


# --- independent computations, straight from the fixture patterns ----------------------------------


def verdicts(pattern) -> list[dict[str, int]]:
    """Per run: question -> 1/0, a missing answer or an absent row being 0."""
    return [{q: int(v not in (None, "missing") and bool(v)) for q, v in zip(IDS, run)} for run in pattern]


def mean_of_runs(pattern, ids=IDS) -> float:
    runs = verdicts(pattern)
    return sum(sum(run[q] for q in ids) / len(ids) for run in runs) / len(runs)


def majority_set(pattern, ids=IDS) -> set[str]:
    runs = verdicts(pattern)
    return {q for q in ids if sum(run[q] for run in runs) >= 2}


# --- the assembled report ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report():
    designs = [design("plain", PLAIN), design("patchy", PATCHY, reader_tokens=300, reader_cost=0.02), pipeline_design()]
    return build_report(designs, n_resamples=2000, seed=1)


def test_headline_numbers_match_an_independent_computation(report):
    for label, pattern in (("plain", PLAIN), ("patchy", PATCHY)):
        s = report.design(label).summary
        assert s.mean_accuracy == pytest.approx(mean_of_runs(pattern))
        assert s.majority_count == len(majority_set(pattern))
        assert s.run_correct_counts == tuple(sum(run.values()) for run in verdicts(pattern))
        for t in set(TYPES.values()):
            ids = [q for q in IDS if TYPES[q] == t]
            assert s.mean_per_type[t] == pytest.approx(mean_of_runs(pattern, ids))
            assert s.majority_per_type[t] == pytest.approx(len(majority_set(pattern, ids)) / len(ids))
        per_run_task_avg = [
            sum(sum(run[q] for q in IDS if TYPES[q] == t) / sum(1 for q in IDS if TYPES[q] == t) for t in set(TYPES.values())) / 3
            for run in verdicts(pattern)
        ]
        assert s.mean_task_averaged == pytest.approx(sum(per_run_task_avg) / 3)
    assert report.design("patchy").missing_answers == (0, 1, 1)
    assert report.design("patchy").runs_cover_different_questions
    assert not report.design("plain").runs_cover_different_questions


def test_paired_numbers_match_an_independent_computation(report):
    pair = next(p for p in report.pairs if (p.a, p.b) == ("plain", "patchy"))
    overall = pair.comparison.overall
    assert overall.mean_difference == pytest.approx(mean_of_runs(PATCHY) - mean_of_runs(PLAIN))
    assert overall.majority_difference == pytest.approx((len(majority_set(PATCHY)) - len(majority_set(PLAIN))) / 8)
    assert set(overall.gained) == majority_set(PATCHY) - majority_set(PLAIN)
    assert set(overall.lost) == majority_set(PLAIN) - majority_set(PATCHY)
    # the pipeline ran three of the eight questions: compared on those
    with_pipeline = next(p for p in report.pairs if (p.a, p.b) == ("plain", "pipeline"))
    assert (with_pipeline.n_common, with_pipeline.only_a, with_pipeline.only_b) == (3, 5, 0)
    assert [(p.a, p.b) for p in report.pairs] == [("plain", "patchy"), ("plain", "pipeline"), ("patchy", "pipeline")]


def test_steps_only_for_designs_with_rereads_and_cost(report):
    assert report.design("plain").steps is None and report.design("patchy").steps is None
    steps = report.design("pipeline").steps
    assert [s.label for s in steps] == ["first_pass", "advice", "decline", "decline (2)", "recall"]
    assert [s.fixed for s in steps] == [None, 2, 0, 1, 1]
    cost = report.design("patchy").cost
    assert (cost.reader_calls, cost.mean_input_tokens_per_call) == (23, 300)
    assert cost.reader_cost_usd == pytest.approx(23 * 0.02) and cost.judge_cost_usd == pytest.approx(22 * 0.001)


def _row(markdown: str, first_cell: str, after: str | None = None) -> list[str]:
    text = markdown if after is None else markdown[markdown.index(after):]
    line = next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_markdown_shows_every_table_with_the_right_numbers(report):
    md = render_markdown(report)
    for heading in ("## Headline", "## Plain accuracy and the Mastra-style average", "## Per question type",
                    "## Paired comparisons", "### patchy vs plain (difference = patchy - plain, in points)",
                    "## Re-read steps", "### pipeline", "## Cost"):
        assert heading in md, heading
    assert _row(md, "plain", "## Headline") == ["plain", "50.0%", "50.0% (4/8)", "4, 4, 4 of 8"]
    assert _row(md, "patchy", "## Headline") == ["patchy", "62.5%", "75.0% (6/8)", "6, 5, 4 of 8"]
    averages = _row(md, "plain", "## Plain accuracy")
    assert averages[:3] == ["plain", "50.0%", f"{100 * 13 / 27:.1f}%"]  # task-averaged per run: 1/2, 4/9, 1/2
    assert _row(md, "single-session-user", "## Per question type")[1:4] == ["3", "55.6%", "66.7%"]
    paired = _row(md, "all", "### patchy vs plain")
    assert paired[:3] == ["all", "8", "+12.5"] and paired[4:6] == ["5", "1"]  # more / fewer correct runs
    assert paired[6] == "+25.0" and paired[8:] == ["3", "1"]
    assert _row(md, "1", "### pipeline")[:11] == ["1", "advice", "first_pass", "1", "3", "1", "55.6%", "66.7% (2)", "2", "0", "3"]
    assert _row(md, "patchy", "## Cost") == ["patchy", "3", "23", "23", "300", "$0.4600", "$0.0220", "$0.0200",
                                             "23", "6,900 (300)", "0", "0 (-)", "0", "-"]
    assert "NOT the LongMemEval judge" in md and "counts as wrong" in md and "silently drop" in md
    assert "Missing answers here: patchy seed 2: 1; patchy seed 3: 1." in md
    assert "Mastra" in md and "task-averaged" in md
    assert "-0.0" not in md


def test_official_judge_is_named_as_such():
    md = render_markdown(build_report([design("a", PLAIN, official=True)], n_resamples=200))
    assert "LongMemEval's official templates (longmemeval: gpt-4o-2024-08-06, the official protocol) for a" in md
    assert "NOT the LongMemEval judge" not in md
    assert "One design only: nothing to compare." in md


def test_longmemevals_templates_on_another_model_are_not_called_the_longmemeval_judge():
    """`judge=longmemeval judge.model.model=gpt-4o-mini` (or judge=gpt4o_mini): LongMemEval's templates, its tag
    lme.judge_official true, yet another model: the report names the model and never calls it the official judge."""
    from dataclasses import replace

    a, b = design("a", PLAIN, official=True), design("b", PATCHY, official=True)
    b = replace(b, jobs=tuple(replace(job, judge_model="openai/gpt-4o-mini-2024-07-18") for job in b.jobs))
    a = replace(a, jobs=tuple(replace(job, judge_model="gpt-4o-2024-08-06") for job in a.jobs))
    report = build_report([a, b], n_resamples=200)
    md = render_markdown(report)
    assert "- Judge: LongMemEval's official templates (longmemeval: gpt-4o-2024-08-06, the official protocol) for a." in md
    assert ("- Judge: longmemeval, LongMemEval's templates judged by openai/gpt-4o-mini-2024-07-18, not the official "
            "judge model (gpt-4o-2024-08-06), for b; its verdicts are not comparable with results from the "
            "LongMemEval judge.") in md
    assert "not like-for-like" in md  # the same judge name on two models is two judges
    data = {d["label"]: d for d in report_json(report)["designs"]}
    assert (data["a"]["official_judge"], data["b"]["official_judge"]) == (True, False)
    assert data["b"]["judges"] == [{"name": "longmemeval", "model": "openai/gpt-4o-mini-2024-07-18", "official": False,
                                    "description": "LongMemEval's templates judged by openai/gpt-4o-mini-2024-07-18, "
                                                   "not the official judge model (gpt-4o-2024-08-06)"}]


def test_mixed_judges_are_flagged():
    r = build_report([design("a", PLAIN, official=True), design("b", PATCHY)], n_resamples=200)
    assert "not like-for-like" in render_markdown(r)


def test_json_holds_the_same_numbers(report):
    data = json.loads(json.dumps(report_json(report)))
    plain = next(d for d in data["designs"] if d["label"] == "plain")
    assert plain["summary"]["mean_accuracy"] == pytest.approx(0.5)
    assert plain["official_judge"] is False
    pair = data["pairs"][0]
    assert pair["comparison"]["overall"]["gained"] == ["m2", "m3", "u2"]
    assert data["n_resamples"] == 2000 and data["bootstrap_seed"] == 1
    pipeline = next(d for d in data["designs"] if d["label"] == "pipeline")
    assert pipeline["steps"][0]["fixed"] is None and pipeline["steps"][1]["fixed"] == 2


def test_pairs_parse_and_refuse_unknown_designs():
    assert parse_pairs("a:b, b:c", ["a", "b", "c"]) == [("a", "b"), ("b", "c")]
    assert all_pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]
    with pytest.raises(LmeError, match="not in this report"):
        parse_pairs("a:z", ["a", "b"])
    with pytest.raises(LmeError, match="A:B"):
        parse_pairs("a-b", ["a", "b"])


# --- which runs --------------------------------------------------------------------------------------


def run(run_id, name, role, design="d", start=0, parent=None, status="FINISHED", seed="1") -> RunInfo:
    tags = {"lme.role": role, "lme.design": design, "lme.seed": seed}
    if parent:
        tags["mlflow.parentRunId"] = parent
    return RunInfo(run_id, name, status, start, tags)


RUNS = [
    run("P1", "bm25-multirun", "parent", "bm25", 1),
    run("j1", "bm25-seed1", "job", "bm25", 2, "P1"),
    run("P2", "bm25-multirun", "parent", "bm25", 10),
    run("j2", "bm25-seed1", "job", "bm25", 11, "P2"),
    run("j3", "bm25-seed2", "job", "bm25", 12, "P2", status="FAILED", seed="2"),
    run("P3", "sweep-multirun", "parent", "bm25", 20),  # a sweep over two designs
    run("j4", "hybrid-seed1", "job", "hybrid", 21, "P3"),
    run("j5", "semantic-seed1", "job", "semantic", 22, "P3"),
    run("solo", "full-seed1", "job", "full_history", 30),
    run("P5", "bm25-multirun", "parent", "bm25", 40),  # still running: no finished job yet
    run("j6", "bm25-seed1", "job", "bm25", 41, "P5", status="RUNNING"),
]


def test_default_is_the_latest_parent_of_each_design():
    chosen = select_designs(RUNS, [])
    assert [(s.design, s.source.run_id) for s in chosen] == [
        ("bm25", "P2"), ("hybrid", "P3"), ("semantic", "P3"), ("full_history", "solo")]
    bm25 = chosen[0]
    assert [j.run_id for j in bm25.jobs] == ["j2"] and "FAILED" in bm25.notes[0]


def test_names_ids_and_designs_select_runs():
    assert [s.source.run_id for s in select_designs(RUNS, ["P1"])] == ["P1"]
    assert [s.source.run_id for s in select_designs(RUNS, ["bm25-multirun"])] == ["P2"]  # the latest of that name
    assert [(s.design, s.source.run_id) for s in select_designs(RUNS, ["sweep-multirun"])] == [("hybrid", "P3"), ("semantic", "P3")]
    assert [s.source.run_id for s in select_designs(RUNS, ["semantic"])] == ["P3"]
    assert [s.jobs[0].run_id for s in select_designs(RUNS, ["j1"])] == ["j1"]
    with pytest.raises(LmeError, match="'nope' is not a design"):
        select_designs(RUNS, ["nope"])
    with pytest.raises(LmeError, match="no finished lme job"):
        select_designs([], [])


def test_repeated_designs_get_distinct_labels_and_repeats_are_dropped():
    chosen = select_designs(RUNS, ["P1", "P2", "bm25"])
    assert [s.source.run_id for s in chosen] == ["P1", "P2"]
    assert labels_for(chosen) == ["bm25@P1", "bm25@P2"]
    renamed = [run("P4", "other", "parent", "bm25", 40), run("j9", "x", "job", "bm25", 41, "P4")]
    assert labels_for(select_designs(RUNS + renamed, ["P2", "P4"])) == ["bm25@bm25-multirun", "bm25@other"]


def test_a_unique_run_id_prefix_names_a_run_and_an_ambiguous_one_is_refused():
    runs = [
        run("ab12cd", "bm25-multirun", "parent", "bm25", 1),
        run("ab34ef", "bm25-seed1", "job", "bm25", 2, "ab12cd"),
        run("99aa00", "solo-seed1", "job", "solo", 3),
    ]
    assert [s.source.run_id for s in select_designs(runs, ["ab12"])] == ["ab12cd"]
    assert [s.jobs[0].run_id for s in select_designs(runs, ["99a"])] == ["99aa00"]
    with pytest.raises(LmeError, match=r"prefix 'ab' is ambiguous.*bm25-multirun \(ab12cd\).*bm25-seed1 \(ab34ef\)"):
        select_designs(runs, ["ab"])
    with pytest.raises(LmeError, match="'zz' is not a design"):
        select_designs(runs, ["zz"])


S_IDS = frozenset(IDS)
SUBSET = frozenset(IDS[:3])


def ran_on(table: dict[str, Questions]):
    return lambda job: table[job.run_id]


QRUNS = [
    run("A1", "a-multirun", "parent", "a", 1), run("a1", "a-seed1", "job", "a", 2, "A1"),
    run("B1", "b-multirun", "parent", "b", 3), run("b1", "b-seed1", "job", "b", 4, "B1"),
    run("b2", "b-seed2", "job", "b", 5, "B1", seed="2"),
    run("C1", "c-multirun", "parent", "c", 6), run("c1", "c-seed1", "job", "c", 7, "C1"),
    run("B2", "b-multirun", "parent", "b", 8), run("b3", "b-seed1", "job", "b", 9, "B2"),  # b again, on a subset
]
ON_S = Questions("s" * 64, S_IDS, "s")
QTABLE = {
    "a1": ON_S, "b1": ON_S, "b2": ON_S,
    "c1": Questions("f" * 64, S_IDS, "foo"),  # the same ids of another file (oracle has S's ids)
    "b3": Questions("s" * 64, SUBSET, "s"),
}


def test_default_report_compares_only_runs_on_the_same_questions_and_says_what_it_skipped():
    chosen = choose_sources(QRUNS, [], ran_on(QTABLE))
    assert [(s.design, s.source.run_id) for s in chosen.selections] == [("a", "A1"), ("b", "B1")]
    assert chosen.questions == ON_S
    skipped_b, skipped_c = chosen.notes
    assert "Skipped parent run b-multirun (B2) of design b" in skipped_b
    assert "3 question ids, not 8, 3 in common" in skipped_b and "(B1), is reported instead" in skipped_b
    assert skipped_c == ("Skipped design c: its only run, parent run c-multirun (C1), ran on other questions than "
                         "the report's (dataset foo, not s; data sha256 ffffffffffff, not ssssssssssss).")
    # without the check, the latest parent of every design, as before
    assert [s.source.run_id for s in choose_sources(QRUNS, []).selections] == ["A1", "C1", "B2"]


def test_the_questions_most_designs_share_win_and_a_tie_goes_to_the_newest():
    table = {**QTABLE, "a1": Questions("s" * 64, SUBSET, "s")}  # a and b's latest (B2) on the subset
    chosen = choose_sources(QRUNS, [], ran_on(table))
    assert [(s.design, s.source.run_id) for s in chosen.selections] == [("a", "A1"), ("b", "B2")]
    tie = {**QTABLE, "c1": Questions("f" * 64, S_IDS, "foo"), "b3": Questions("f" * 64, S_IDS, "foo")}
    chosen = choose_sources(QRUNS, [], ran_on(tie))  # a on S; b (B2) and c on foo: foo has two designs
    assert [(s.design, s.source.run_id) for s in chosen.selections] == [("c", "C1"), ("b", "B2")]
    assert any("Skipped design a" in note for note in chosen.notes)


def test_jobs_of_one_run_on_other_questions_are_left_out_and_named_runs_are_kept_with_a_note():
    table = {**QTABLE, "b2": Questions("s" * 64, SUBSET, "s")}  # b's seed 2 ran a subset: one of two, the newer
    b = next(s for s in choose_sources(QRUNS, ["B1"], ran_on(table)).selections)
    assert [j.run_id for j in b.jobs] == ["b2"] and "b-seed1 (b1, seed 1) ran on other questions" in b.notes[0]
    named = choose_sources(QRUNS, ["A1", "C1"], ran_on(QTABLE))
    assert [s.source.run_id for s in named.selections] == ["A1", "C1"]
    assert named.questions is None and "did not all run on the same questions" in named.notes[0]


def test_plot_titles_say_what_and_on_which_questions():
    from lme.reporting.plots import differences_title, per_type_title

    on_s = dict(data="8 questions of dataset s (data sha256 0123)", questions_digest="d1")
    one = build_report([DesignRuns(**{**design("a", PLAIN).__dict__, **on_s})], n_resamples=200)
    assert per_type_title(one) == ("Accuracy by question type: mean of 3 runs per design, 95% stratified bootstrap "
                                   "intervals\non 8 questions of dataset s (data sha256 0123)")
    assert differences_title(one, 0).startswith("Paired differences (one design: nothing to compare)")
    assert "Every design ran on the same questions: 8 questions of dataset s" in render_markdown(one)
    apart = build_report([design("a", PLAIN), pipeline_design()], n_resamples=200)
    assert differences_title(apart, 2).startswith("Paired differences in accuracy (points)")
    assert "mean of 3 runs" in per_type_title(apart)
    other = DesignRuns(**{**design("b", PATCHY).__dict__, "data": "8 questions of dataset foo",
                          "questions_digest": "d2"})
    mixed = build_report([DesignRuns(**{**design("a", PLAIN).__dict__, **on_s}), other], n_resamples=200)
    assert mixed.data is None and per_type_title(mixed).endswith("the designs ran on different questions")
    disjoint = build_report([design("a", PLAIN), DesignRuns("z", "z", "z", "z", (JobOutcomes(
        "z1", "z-seed1", "1", "offline-lexical-judge", False, ({**rows_from(PLAIN[0])[0], "question_id": "new"},)),))],
        n_resamples=200)
    assert "no pair of designs ran a question in common" in differences_title(disjoint, 0)


def test_offline_stand_ins_are_said_once_to_say_nothing_about_a_design():
    from dataclasses import replace

    offline = ("lme-offline/extractive-reader", "lme-offline/lexical-judge")
    note = "these scores measure the stand-ins, not the design"

    def with_stand_ins(d: DesignRuns, models) -> DesignRuns:
        return replace(d, jobs=tuple(replace(job, stand_ins=models) for job in d.jobs))

    both = build_report([with_stand_ins(design("a", PLAIN), offline), with_stand_ins(design("b", PATCHY), offline)],
                        n_resamples=200)
    md = render_markdown(both)
    assert md.count(note) == 1 and md.count("Offline stand-ins (") == 1
    line = next(line for line in md.splitlines() if note in line)
    assert line.startswith("- Offline stand-ins (lme-offline/extractive-reader, lme-offline/lexical-judge): ")
    assert "the offline pipeline below bm25) is a property of the stand-ins" in line and line.endswith("design.")
    assert sum(note in entry for entry in report_json(both)["notes"]) == 1
    # a report where only one design ran on stand-ins names it; none: no note
    one = build_report([design("a", PLAIN, official=True), with_stand_ins(design("b", PATCHY), offline[:1])],
                       n_resamples=200)
    line = next(line for line in render_markdown(one).splitlines() if note in line)
    assert line.startswith("- Offline stand-ins (lme-offline/extractive-reader): ") and "(the runs of b)." in line
    assert note not in render_markdown(build_report([design("a", PLAIN, official=True)], n_resamples=200))


# --- the command, against a real MLflow store ----------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    settings, tmp = fresh_store(tmp_path_factory, "store")
    old_parent, _ = log_study(settings, "plain", [rows_from([0] * 8)], tmp)  # one run, all wrong: not the latest
    plain_parent, plain_jobs = log_study(settings, "plain", [rows_from(p) for p in PLAIN], tmp)
    log_study(settings, "patchy", [rows_from(p, reader_tokens=300, reader_cost=0.02) for p in PATCHY], tmp)
    log_study(settings, "pipeline", pipeline_runs(), tmp)
    return {"tmp": tmp, "settings": settings, "overrides": [f"tracking.uri={settings.uri}",
            f"tracking.artifact_location={settings.artifact_location}"], "plain_parent": plain_parent,
            "plain_jobs": plain_jobs, "old_parent": old_parent}


def lme(argv, capsys) -> tuple[int, str, str]:
    from lme.cli import run_subcommand

    code = run_subcommand(argv[0], argv[1:])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_report_command_prints_every_table_for_the_latest_parents(store, capsys):
    code, out, err = lme(["report", "--resamples", "1000", *store["overrides"]], capsys)
    assert code == 0, err
    assert _row(out, "plain", "## Headline") == ["plain", "50.0%", "50.0% (4/8)", "4, 4, 4 of 8"]
    assert _row(out, "patchy", "## Headline")[1] == "62.5%"
    assert store["plain_parent"] in out
    assert "### pipeline" in out and "## Cost" in out and "### patchy vs plain" in out


def test_report_command_json_pairs_and_out(store, capsys, tmp_path):
    from mlflow.tracking import MlflowClient

    out_dir = tmp_path / "rep"
    code, out, err = lme(["report", "plain", "patchy", "--pairs", "patchy:plain", "--json", "--out", str(out_dir),
                          "--resamples", "500", *store["overrides"]], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [d["label"] for d in data["designs"]] == ["plain", "patchy"]
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [("patchy", "plain")]
    assert data["pairs"][0]["comparison"]["overall"]["mean_difference"] == pytest.approx(-(mean_of_runs(PATCHY) - 0.5))
    for name in ("report.md", "report.json", "per_type_accuracy.png", "paired_differences.png"):
        assert (out_dir / name).stat().st_size > 0, name
    assert (out_dir / "per_type_accuracy.png").read_bytes()[:8] == PNG_MAGIC
    assert json.loads((out_dir / "report.json").read_text()) == data
    run_id = re.search(r"MLflow report run (\w+)", err).group(1)
    client = MlflowClient(store["settings"].uri)
    logged = client.get_run(run_id)
    assert logged.data.tags["lme.role"] == "report" and logged.data.tags["lme.report.designs"] == "plain,patchy"
    study = client.get_experiment_by_name(store["settings"].experiment)
    assert client.get_experiment(logged.info.experiment_id).name == store["settings"].experiment + "-reports"
    assert not client.search_runs([study.experiment_id], filter_string="tags.`lme.role` = 'report'")
    assert logged.data.metrics["plain/mean_accuracy"] == pytest.approx(0.5)
    assert {a.path for a in client.list_artifacts(run_id)} >= {"report.md", "report.json", "per_type_accuracy.png",
                                                              "paired_differences.png"}
    # a report run is never taken for a design's run by the next report
    code, out, _ = lme(["report", "--resamples", "200", *store["overrides"]], capsys)
    assert code == 0 and "report-" not in out


def test_two_parents_of_one_design_side_by_side(store, capsys):
    old, new = store["old_parent"], store["plain_parent"]
    code, out, err = lme(["report", old, "plain", new, "--resamples", "200", *store["overrides"]], capsys)
    assert code == 0, err  # `plain` and `new` are the same parent: listed once
    assert _row(out, f"plain@{old[:8]}", "## Headline")[1:4] == ["0.0%", "0.0% (0/8)", "0 of 8"]
    assert "majority of runs" in out  # one run against three: no single ">=2 of 3" name
    assert _row(out, f"plain@{new[:8]}", "## Headline")[1] == "50.0%"
    assert f"### plain@{new[:8]} vs plain@{old[:8]}" in out


def test_report_command_errors_are_one_sentence(store, capsys, tmp_path):
    code, _, err = lme(["report", "nosuch", *store["overrides"]], capsys)
    assert code == 2 and err.count("\n") == 1 and "'nosuch' is not a design" in err
    code, _, err = lme(["report", f"tracking.uri=sqlite:///{tmp_path}/none.db"], capsys)
    assert code == 2 and "no MLflow store at" in err and not (tmp_path / "none.db").exists()
    code, _, err = lme(["report", "--pairs", "plain:zzz", *store["overrides"]], capsys)
    assert code == 2 and "zzz" in err


def test_a_broken_outcomes_artifact_is_one_sentence_naming_the_run_and_line(tmp_path_factory, capsys):
    settings, tmp = fresh_store(tmp_path_factory, "broken")
    overrides = [f"tracking.uri={settings.uri}", f"tracking.artifact_location={settings.artifact_location}"]
    rows = rows_from(PLAIN[0])
    _, jobs = log_study(settings, "plain", [rows], tmp)
    artifact = next(Path(settings.artifact_location).rglob("outcomes.jsonl"))
    for line in ["[1, 2]", '{"question_id": ["q1"]}', "[" * 100_000, "{not json", "9" * 5000]:
        artifact.write_text(json.dumps(rows[0]) + "\n" + line + "\n", encoding="utf-8")
        code, out, err = lme(["report", "--resamples", "200", *overrides], capsys)
        lines = [text for text in err.splitlines() if text.startswith("lme")]  # MLflow's own lines creating the store
        assert code == 2 and "Traceback" not in err and len(lines) == 1, err
        assert lines[0].startswith(f"lme: error: the outcomes.jsonl of MLflow run plain-seed1 ({jobs[0]}), line 2: "
                                   "not an outcome row lme wrote")


def test_report_command_skips_runs_on_other_questions_and_accepts_a_run_id_prefix(tmp_path_factory, capsys):
    settings, tmp = fresh_store(tmp_path_factory, "questions")
    overrides = [f"tracking.uri={settings.uri}", f"tracking.artifact_location={settings.artifact_location}"]
    on_s = dict(questions=IDS, data_sha256="a" * 64, dataset="s")
    plain_parent, _ = log_study(settings, "plain", [rows_from(p) for p in PLAIN], tmp, **on_s)
    patchy_parent, _ = log_study(settings, "patchy", [rows_from(p) for p in PATCHY], tmp, **on_s)
    other, _ = log_study(settings, "other", [rows_from(p) for p in PLAIN], tmp, questions=IDS, data_sha256="b" * 64,
                         dataset="foo")
    newer, _ = log_study(settings, "patchy", [rows_from(PATCHY[0][:3])], tmp, questions=IDS[:3], data_sha256="a" * 64,
                         dataset="s")
    code, out, err = lme(["report", "--resamples", "200", *overrides], capsys)
    assert code == 0, err
    assert "| plain |" in out and "| patchy |" in out and "| other |" not in out
    assert patchy_parent in out and "### patchy vs plain" in out
    assert "Every design ran on the same questions: 8 questions of dataset s (data sha256 aaaaaaaaaaaa)." in out
    assert f"Skipped design other: its only run, parent run other-multirun ({other}), ran on other questions than " \
           f"the report's (dataset foo, not s; data sha256 bbbbbbbbbbbb, not aaaaaaaaaaaa)." in out
    assert f"Skipped parent run patchy-multirun ({newer}) of design patchy" in out
    # a unique prefix of a run id names that run; the designs named are kept, with a note
    code, out, err = lme(["report", plain_parent[:10], other[:10], "--resamples", "200", *overrides], capsys)
    assert code == 0, err
    assert "| plain |" in out and "| other |" in out and "did not all run on the same questions" in out
    ambiguous = os.path.commonprefix([plain_parent, patchy_parent])
    if ambiguous:
        code, _, err = lme(["report", ambiguous, *overrides], capsys)
        assert code == 2 and "is ambiguous" in err


# --- end to end: three offline designs, three seeds each ------------------------------------------------


def run_lme(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "lme", *args, f"tracking.uri=sqlite:///{tmp}/mlflow.db",
            f"tracking.artifact_location={tmp}/mlruns"]
    if not args or args[0] != "report":
        argv.append(f"cache_dir={tmp}/cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    return subprocess.run(argv, check=False, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)


DESIGNS = {
    "bm25": ["+design=bm25"],
    "bm25_plain": ["+design=bm25", "retriever.tokenizer=unicode61", "design_name=bm25_plain"],
    "user_log_fts5": ["memory=user_log", "design_name=user_log_fts5"],
}


@pytest.mark.slow
def test_report_over_three_offline_designs_with_three_seeds(tmp_path):
    for name, overrides in DESIGNS.items():
        result = run_lme(tmp_path, *overrides, "-m", "seed=1,2,3")
        assert result.returncode == 0, (name, result.stderr[-3000:])
    result = run_lme(tmp_path, "report", "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr[-3000:]
    md = result.stdout
    for heading in ("## Headline", "## Plain accuracy and the Mastra-style average", "## Per question type",
                    "## Paired comparisons", "## Cost"):
        assert heading in md
    assert md.count("\n### ") >= 3  # three pairs
    assert "NOT the LongMemEval judge" in md
    assert md.count("these scores measure the stand-ins, not the design") == 1  # said once, for every design
    for name in ("report.md", "report.json", "per_type_accuracy.png", "paired_differences.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    assert (tmp_path / "report" / "paired_differences.png").read_bytes()[:8] == PNG_MAGIC

    # every headline number against the jobs' own journals on disk
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    seeds_differ: dict[str, bool] = {}
    for name in DESIGNS:
        sweep = sorted((tmp_path / "multirun" / name).glob("*/*/outcomes.jsonl"))
        assert len(sweep) == 3, name
        runs = [{r["question_id"]: bool(r["correct"]) and r["answer"] is not None
                 for r in map(json.loads, path.read_text().splitlines())} for path in sweep]
        ids = list(runs[0])
        entry = next(d for d in data["designs"] if d["label"] == name)
        assert entry["summary"]["mean_accuracy"] == pytest.approx(sum(sum(r.values()) / len(ids) for r in runs) / 3)
        majority = sum(1 for q in ids if sum(r[q] for r in runs) >= 2)
        assert entry["summary"]["majority_count"] == majority
        assert sorted(entry["summary"]["run_correct_counts"]) == sorted(sum(r.values()) for r in runs)
        seeds_differ[name] = any(len({r[q] for r in runs}) > 1 for q in ids)  # the offline reader draws per seed
        assert _row(md, name, "## Headline")[2] == f"{100 * majority / len(ids):.1f}% ({majority}/{len(ids)})"
    assert all(seeds_differ.values()), seeds_differ  # no design's seeds answer every question alike
    overall = [pair["comparison"]["overall"]["mean_interval"] for pair in data["pairs"] if pair["comparison"]]
    assert any(interval["low"] != interval["high"] for interval in overall), overall  # not [+0.0, +0.0]
