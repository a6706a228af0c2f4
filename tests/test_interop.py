"""Interop with LongMemEval's official scripts: the hypothesis file, the .eval-results file, and
print_qa_metrics.py's summary lines (format written out by hand here, not taken from its code)."""

from __future__ import annotations

import json

import pytest
from report_fixtures import PATCHY, PLAIN, TYPES, fresh_store, log_study, rows_from

from lme.util.errors import DataError
from lme.reporting.interop import (
    OFFICIAL_TYPE_ORDER,
    compare_verdicts,
    hypotheses_jsonl,
    hypothesis_records,
    official_summary_lines,
    parse_eval_results,
    read_eval_results,
)


def test_hypotheses_are_official_lines_with_missing_answers_empty():
    rows = rows_from(PATCHY[1])
    lines = [json.loads(line) for line in hypotheses_jsonl(rows).splitlines()]
    assert all(set(line) == {"question_id", "hypothesis"} for line in lines)
    assert [line["question_id"] for line in lines] == sorted(TYPES)
    by_id = {line["question_id"]: line["hypothesis"] for line in lines}
    assert by_id["m2"] == "" and by_id["u1"] == "answer to u1"
    assert hypothesis_records([{"question_id": "x", "answer": "café"}]) == [{"question_id": "x", "hypothesis": "café"}]
    assert "café" in hypotheses_jsonl([{"question_id": "x", "answer": "café"}])  # UTF-8, not \\u escapes


def test_summary_lines_by_hand_on_a_partial_run():
    # PLAIN run 1: u1 1, u2 0, u3_abs 1 | m1 1, m2 0, m3 0 | k1 1, k2 0
    verdicts = {q: bool(v) for q, v in zip(TYPES, PLAIN[0])}
    assert official_summary_lines(verdicts, TYPES) == [
        "",
        "Evaluation results by task:",
        "\tsingle-session-user: 0.6667 (3)",
        "\tsingle-session-preference: nan (0)",
        "\tsingle-session-assistant: nan (0)",
        "\tmulti-session: 0.3333 (3)",
        "\ttemporal-reasoning: nan (0)",
        "\tknowledge-update: 0.5 (2)",
        "",
        "Task-averaged Accuracy: nan",
        "Overall Accuracy: 0.5",
        "Abstention Accuracy: 1.0 (1)",
    ]


def test_summary_lines_by_hand_on_all_six_types():
    types = {"a": "single-session-user", "b": "single-session-user", "c": "single-session-preference",
             "d": "single-session-assistant", "e": "multi-session", "f": "temporal-reasoning", "g": "knowledge-update"}
    verdicts = {"a": True, "b": False, "c": True, "d": False, "e": True, "f": True, "g": False}
    lines = official_summary_lines(verdicts, types)
    assert lines[2:8] == [
        "\tsingle-session-user: 0.5 (2)",
        "\tsingle-session-preference: 1.0 (1)",
        "\tsingle-session-assistant: 0.0 (1)",
        "\tmulti-session: 1.0 (1)",
        "\ttemporal-reasoning: 1.0 (1)",
        "\tknowledge-update: 0.0 (1)",
    ]
    assert lines[9:] == [
        "Task-averaged Accuracy: 0.5833",  # (0.5 + 1 + 0 + 1 + 1 + 0) / 6
        "Overall Accuracy: 0.5714",  # 4 / 7
        "Abstention Accuracy: nan (0)",
    ]
    assert [line.split(":")[0].strip() for line in lines[2:8]] == list(OFFICIAL_TYPE_ORDER)


def test_summary_lines_need_every_question_type():
    with pytest.raises(DataError, match="question zz"):
        official_summary_lines({"zz": True}, TYPES)


def eval_line(qid: str, label: bool, model: str = "gpt-4o-2024-08-06", **extra) -> str:
    return json.dumps({"question_id": qid, "hypothesis": f"h {qid}", **extra, "autoeval_label": {"model": model, "label": label}})


def test_eval_results_parse_and_compare():
    text = "\n".join(eval_line(q, bool(v)) for q, v in zip(TYPES, PLAIN[0])) + "\n\n"
    labels = parse_eval_results(text, "x.eval-results-gpt-4o")
    assert [l.question_id for l in labels] == list(TYPES) and labels[0].label is True and labels[0].model == "gpt-4o-2024-08-06"
    official = {l.question_id: l.label for l in labels}
    lme = {q: bool(v) for q, v in zip(TYPES, PLAIN[1])}
    lme["extra"] = True
    comparison = compare_verdicts(official, lme)
    # PLAIN run 1 vs run 2 differ on u2, u3_abs, m3, k1
    assert [d[0] for d in comparison.differ] == ["k1", "m3", "u2", "u3_abs"]
    assert comparison.agree == 4 and comparison.n_both == 8 and comparison.only_lme == ("extra",)


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "line 2: not a JSON object"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    (json.dumps({"hypothesis": "x"}), "line 2: field question_id is missing"),
    (json.dumps({"question_id": "q2", "autoeval_label": {"model": "m", "label": True}}), "question q2: field hypothesis"),
    (json.dumps({"question_id": "q2", "hypothesis": "x"}), "question q2: field autoeval_label is missing"),
    (json.dumps({"question_id": "q2", "hypothesis": "x", "autoeval_label": {"model": "m", "label": "yes"}}),
     "question q2: field autoeval_label.label"),
    (json.dumps({"question_id": "q2", "hypothesis": "x", "autoeval_label": {"label": True}}),
     "question q2: field autoeval_label.model"),
    (eval_line("q1", True), "question q1: question_id appears twice"),
])
def test_bad_eval_results_lines_are_one_sentence(line, message):
    with pytest.raises(DataError, match=message) as caught:
        parse_eval_results(eval_line("q1", True) + "\n" + line + "\n", "f.jsonl")
    assert str(caught.value).startswith("f.jsonl: line 2") and "\n" not in str(caught.value)


def test_unreadable_and_empty_eval_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_eval_results(tmp_path / "none")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(DataError, match="no graded line"):
        read_eval_results(tmp_path / "empty")


# --- the commands, against a real MLflow store -------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    settings, tmp = fresh_store(tmp_path_factory, "interop")
    parent, jobs = log_study(settings, "patchy", [rows_from(p) for p in PATCHY], tmp)
    return {"tmp": tmp, "parent": parent, "jobs": jobs,
            "overrides": [f"tracking.uri={settings.uri}", f"tracking.artifact_location={settings.artifact_location}"]}


def lme(argv, capsys):
    from lme.cli import run_subcommand

    code = run_subcommand(argv[0], argv[1:])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_export_writes_the_hypothesis_file_and_lme_summary(store, capsys, tmp_path):
    job = store["jobs"][1]  # run 2: m2 missing
    out_file = tmp_path / "hyp.jsonl"
    code, out, err = lme(["export", job, "--out", str(out_file), *store["overrides"]], capsys)
    assert code == 0, err
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(lines) == 8 and {"question_id": "m2", "hypothesis": ""} in lines
    assert "1 missing answers written as an empty hypothesis" in out
    # run 2: u1 1, u2 1, u3_abs 0 | m1 1, m2 missing, m3 1 | k1 1, k2 0
    assert "\tsingle-session-user: 0.6667 (3)" in out and "\tmulti-session: 0.6667 (3)" in out
    assert "Overall Accuracy: 0.625" in out and "Abstention Accuracy: 0.0 (1)" in out
    assert "NOT the LongMemEval judge" in out
    # by run name, to stdout
    code, out, err = lme(["export", "patchy-seed2", *store["overrides"]], capsys)
    assert code == 0 and out == out_file.read_text() and "Overall Accuracy: 0.625" in err


def test_export_refuses_a_parent_and_unknown_runs(store, capsys):
    code, _, err = lme(["export", store["parent"], *store["overrides"]], capsys)
    assert code == 2 and "is a parent run; export one of its jobs" in err and store["jobs"][0] in err
    code, _, err = lme(["export", "nope", *store["overrides"]], capsys)
    assert code == 2 and "'nope' is not a job run id or name" in err


def test_import_eval_prints_both_summaries_and_the_differences(store, capsys, tmp_path):
    job = store["jobs"][1]
    graded = tmp_path / "hyp.jsonl.eval-results-gpt-4o"
    # the official grader said yes on m2's empty hypothesis (so it differs from lme) and skipped k2
    official = {q: bool(v) if v != "missing" else True for q, v in zip(TYPES, PATCHY[1])}
    graded.write_text("".join(eval_line(q, official[q]) + "\n" for q in TYPES if q != "k2"))
    code, out, err = lme(["import-eval", str(graded), "--run", job, *store["overrides"]], capsys)
    assert code == 0, err
    assert "Official labels from" in out and "(7 graded questions; judge model gpt-4o-2024-08-06)" in out
    official_block, lme_block = out.split("lme's verdicts for", 1)
    assert "Overall Accuracy: 0.8571" in official_block  # 6 of 7
    assert "Overall Accuracy: 0.625" in lme_block  # 5 of 8, the missing m2 wrong
    assert "Verdicts agree on 6 of 7 questions graded by both." in out
    assert "differ: m2: official yes, lme no" in out
    assert "the official scripts would drop them): k2" in out
    code, out, err = lme(["import-eval", str(graded), "--run", job, "--json", *store["overrides"]], capsys)
    data = json.loads(out)
    assert data["verdicts"]["m2"] is True and data["lme_verdicts"]["m2"] is False and data["only_lme"] == ["k2"]


def test_import_eval_with_a_reference_file_and_its_errors(capsys, tmp_path):
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps([{"question_id": q, "question_type": t} for q, t in TYPES.items()]))
    graded = tmp_path / "g.jsonl"
    graded.write_text("".join(eval_line(q, True, model="gpt-4o-mini-2024-07-18") + "\n" for q in TYPES))
    code, out, err = lme(["import-eval", str(graded), "--ref", str(reference)], capsys)
    assert code == 0, err
    assert "Overall Accuracy: 1.0" in out and "print_qa_metrics.py would refuse this file" in out
    code, _, err = lme(["import-eval", str(graded)], capsys)
    assert code == 2 and "--run" in err and "--ref" in err
    graded.write_text(eval_line("unknown", True) + "\n")
    code, _, err = lme(["import-eval", str(graded), "--ref", str(reference)], capsys)
    assert code == 2 and "question unknown is not in" in err


def test_a_run_judged_on_another_model_is_said_so_in_export_and_report(tmp_path_factory, capsys):
    """A run whose tags say LongMemEval's templates (lme.judge_official=true) and whose `judge.model` param is not
    the protocol's model: export's heading and the report's judge line name the model, never 'the LongMemEval
    judge'; the same tags with the protocol's model are the LongMemEval judge."""
    settings, tmp = fresh_store(tmp_path_factory, "judged-elsewhere")
    overrides = [f"tracking.uri={settings.uri}", f"tracking.artifact_location={settings.artifact_location}"]
    _, mini = log_study(settings, "mini", [rows_from(PLAIN[0])], tmp, judge="longmemeval-templates gpt-4o-mini",
                        official=True, judge_model="openai/gpt-4o-mini-2024-07-18")
    _, real = log_study(settings, "real", [rows_from(PLAIN[0])], tmp, judge="longmemeval", official=True,
                        judge_model="gpt-4o-2024-08-06")
    said = ("LongMemEval's templates judged by openai/gpt-4o-mini-2024-07-18, not the official judge model "
            "(gpt-4o-2024-08-06)")
    code, out, err = lme(["export", mini[0], "--out", str(tmp / "hyp.jsonl"), *overrides], capsys)
    assert code == 0, err
    assert f"judge longmemeval-templates gpt-4o-mini, {said}" in out and "the LongMemEval judge)" not in out
    code, out, err = lme(["export", real[0], "--out", str(tmp / "hyp2.jsonl"), *overrides], capsys)
    assert code == 0, err
    assert "judge longmemeval, the LongMemEval judge" in out
    code, out, err = lme(["report", "mini", "real", "--resamples", "200", *overrides], capsys)
    assert code == 0, err
    assert f"- Judge: longmemeval-templates gpt-4o-mini, {said}, for mini;" in out
    assert "LongMemEval's official templates (longmemeval: gpt-4o-2024-08-06, the official protocol) for real." in out
    assert "not like-for-like" in out
