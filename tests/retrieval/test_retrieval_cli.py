"""`python -m lme retrieval`: on the bundled sample, on the real mini file, with MLflow in a temp SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lme.data.load import load_questions
from lme.data.records import Question
from lme.data.sample import SAMPLE_PATH
from lme.retrieval.base import Ranking
from lme.cli.retrieval import main, markdown_tables, parse_ks
from lme.retrieval.fts5 import FTS5Retriever
from lme.retrieval.metrics import score_question, summarise
from shared_data import MINI, needs

KS = (1, 5, 10, 50, 100)


class ReverseRetriever:
    """A real retriever for the hybrid design: every turn of the history, latest first."""

    def __init__(self, name: str = "reverse") -> None:
        self.name = name

    def rank(self, question: Question, top_k: int) -> Ranking:
        turns = [turn.turn_id for turn in reversed(question.turns())][:top_k]
        return Ranking(retriever=self.name, turn_ids=tuple(turns), scores=tuple(-float(i) for i in range(len(turns))))


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lme", "retrieval", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})},
    )


def expected_report(path: Path, user_turns_only: bool = False) -> dict:
    """The report computed in this process, straight from the retriever and the measures."""
    from lme.retrieval.metrics import user_turns_view

    retriever = FTS5Retriever()
    scores = []
    for question in load_questions(path):
        view = user_turns_view(question) if user_turns_only else question
        scores.append(score_question(question, retriever.rank(view, 10_000).turn_ids, KS))
    return summarise(scores, KS).as_dict()


def assert_same_groups(got: dict, expected: dict) -> None:
    """Two report dicts agree: counts exactly, measures to rounding."""
    groups = [("overall", got["overall"], expected["overall"])]
    assert set(got["by_type"]) == set(expected["by_type"])
    groups += [(name, got["by_type"][name], expected["by_type"][name]) for name in expected["by_type"]]
    for name, mine, theirs in groups:
        assert (mine["n_questions"], mine["n_scored"]) == (theirs["n_questions"], theirs["n_scored"]), name
        assert mine["metrics"] == pytest.approx(theirs["metrics"]), name


def check_consistent(group: dict) -> None:
    """Within one group: recall_all <= recall_frac <= recall_any (lme's variants), recall_all <= recall_any
    (official), and no recall falls as k grows."""
    metrics = group["metrics"]
    for level, suffix in (("turn", "_all_roles"), ("session", "_all_turns")):
        if not group["n_scored"][level + suffix]:
            assert not any(name.startswith(level + ".") and suffix in name for name in metrics)
            continue
        recalls = [metrics[f"{level}.recall_frac{suffix}@{k}"] for k in KS]
        assert recalls == sorted(recalls)
        for k in KS:
            low, mid, high = (metrics[f"{level}.{m}{suffix}@{k}"] for m in ("recall_all", "recall_frac", "recall_any"))
            assert low <= mid <= high
            assert 0.0 <= metrics[f"{level}.ndcg{suffix}@{k}"] <= 1.0
    for level in ("turn", "session"):
        if not group["n_scored"]["official"]:
            assert f"{level}.recall_any@1" not in metrics
            continue
        recalls = [metrics[f"{level}.recall_any@{k}"] for k in KS]
        assert recalls == sorted(recalls)
        for k in KS:
            assert metrics[f"{level}.recall_all@{k}"] <= metrics[f"{level}.recall_any@{k}"]
            assert 0.0 <= metrics[f"{level}.ndcg_any@{k}"] <= 1.0 + 1e-12


def test_parse_ks() -> None:
    assert parse_ks("10,1,5,5") == (1, 5, 10)
    for bad in ("", "0,5", "a,b", "-1"):
        with pytest.raises(Exception, match="positive integers"):
            parse_ks(bad)


def test_json_on_the_bundled_sample_matches_the_measures_computed_here() -> None:
    result = run_cli("+design=bm25", "--json", "tracking.enabled=false")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["design"], report["retriever"], report["mlflow_run_id"]) == ("bm25", "bm25", None)
    assert report["ks"] == list(KS) and report["official_ks"] == [1, 3, 5, 10, 30, 50, 100]
    assert (report["n_questions"], report["n_abstention"]) == (42, 5)
    # the sample's single-session-assistant evidence lies in assistant turns: the official average leaves them out
    assert report["overall"]["n_scored"] == {"official": 31, "turn_all_roles": 37, "session_all_turns": 37}
    assert set(report["by_type"]) == {
        "single-session-user", "single-session-assistant", "single-session-preference",
        "multi-session", "temporal-reasoning", "knowledge-update",
    }
    expected = expected_report(SAMPLE_PATH)
    for key in ("n_questions", "n_abstention", "n_no_evidence"):
        assert report[key] == expected[key], key
    assert_same_groups(report, expected)
    # the sample plants every fact in words the question uses: BM25 finds all of it within 100 turns
    assert report["overall"]["metrics"]["turn.recall_frac_all_roles@100"] == 1.0
    for group in [report["overall"], *report["by_type"].values()]:
        check_consistent(group)


def test_markdown_table_on_the_sample(capsys) -> None:
    assert main(["+design=bm25", "tracking.enabled=false", "--k", "1,10"]) == 0
    out = capsys.readouterr().out
    assert "## Retrieval: design bm25, retriever bm25" in out
    assert "turn level, LongMemEval's definitions" in out and "session level, LongMemEval's definitions" in out
    assert "turn level, lme's turn-level variants" in out and "session level, lme's session-level variants" in out
    assert "| group | n | recall_any@1 | recall_any@10 | ndcg_any@1 | ndcg_any@10 |" in out
    for suffix in ("all_roles", "all_turns"):
        names = [f"{measure}_{suffix}@{k}" for measure in ("recall_frac", "ndcg") for k in (1, 10)]
        assert "| group | n | " + " | ".join(names) + " |" in out
    assert out.count("| overall | 37 |") == 2 and out.count("| overall | 31 |") == 2
    assert "| single-session-user |" in out
    assert "42 questions ranked; left out: 5 abstention" in out


def test_markdown_tables_show_a_dash_where_a_group_has_no_evidence() -> None:
    from lme.retrieval.metrics import GroupScores, RetrievalReport

    empty = GroupScores(name="single-session-assistant", n_questions=1,
                        n_scored={"official": 0, "turn_all_roles": 0, "session_all_turns": 1},
                        values={"session.recall_frac_all_turns@1": 1.0, "session.ndcg_all_turns@1": 1.0})
    report = RetrievalReport(ks=(1,), n_questions=1, n_abstention=0,
                             n_no_evidence={"official": 1, "turn_all_roles": 1, "session_all_turns": 0},
                             overall=empty, by_type=(empty,))
    text = markdown_tables(report)
    assert text.count("| single-session-assistant | 0 | - | - |") == 6  # official at 2 levels (x2 rows), lme turn
    assert "| single-session-assistant | 1 | 1.000 | 1.000 |" in text


@needs(MINI)
def test_json_on_the_real_mini_file() -> None:
    result = run_cli("+design=bm25", f"dataset.path={MINI}", "--json", "tracking.enabled=false")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["n_questions"], report["n_abstention"]) == (16, 4)
    assert len(report["by_type"]) == 6 and all(g["n_questions"] == 2 for g in report["by_type"].values())
    assert_same_groups(report, expected_report(MINI))
    for group in [report["overall"], *report["by_type"].values()]:
        check_consistent(group)

    # the official names hold the official measures: single-session-assistant evidence lies in assistant turns,
    # so the official average leaves those questions out
    assert report["by_type"]["single-session-assistant"]["n_scored"]["official"] == 0
    assert report["n_no_evidence"]["official"] >= 2
    for name in ("turn.recall_any@10", "turn.recall_all@10", "turn.ndcg_any@10", "session.recall_any@1",
                 "session.recall_all@50", "session.ndcg_any@10", "session.recall_any_all_turns@1"):
        assert name in report["overall"]["metrics"], name

    # --user-turns-only restricts the ranking; the names and definitions stay
    user = run_cli("+design=bm25", f"dataset.path={MINI}", "--json", "tracking.enabled=false", "--user-turns-only")
    assert user.returncode == 0, user.stderr
    user_report = json.loads(user.stdout)
    assert user_report["user_turns_only"] is True
    assert user_report["overall"]["n_scored"] == report["overall"]["n_scored"]
    # the assistant's evidence turns are never ranked: single-session-assistant finds none of them
    assert user_report["by_type"]["single-session-assistant"]["metrics"]["turn.recall_any_all_roles@100"] == 0.0
    assert_same_groups(user_report, expected_report(MINI, user_turns_only=True))


def test_bad_input_is_one_sentence_and_exit_2(tmp_path) -> None:
    missing = run_cli("+design=bm25", f"dataset.path={tmp_path}/nope.json", "tracking.enabled=false")
    assert missing.returncode == 2
    assert missing.stderr.startswith("lme: error:") and "nope.json" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad_k = run_cli("+design=bm25", "--k", "0,x", "tracking.enabled=false")
    assert bad_k.returncode == 2 and "positive integers" in bad_k.stderr and "Traceback" not in bad_k.stderr
    bad_tokenizer = run_cli("retriever.tokenizer=nope", "tracking.enabled=false")
    assert bad_tokenizer.returncode == 2 and "tokenizer 'nope'" in bad_tokenizer.stderr
    assert "Traceback" not in bad_tokenizer.stderr


def test_hybrid_design_with_a_local_second_retriever(capsys) -> None:
    args = ["+design=hybrid", "~retriever.retrievers.semantic",
            f"+retriever.retrievers.reverse._target_={__name__}.ReverseRetriever", "tracking.enabled=false", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["design"], report["retriever"]) == ("hybrid", "hybrid")
    # every turn is in the reverse list and the sample's histories are short: all evidence within the top 100
    assert report["overall"]["metrics"]["turn.recall_frac_all_roles@100"] == 1.0
    for group in [report["overall"], *report["by_type"].values()]:
        check_consistent(group)


@pytest.mark.slow
def test_mlflow_run_holds_the_metrics_params_and_artifacts(tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = run_cli(
        "+design=bm25", "--json", f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/mlruns",
        "tracking.experiment=retrieval-test", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    run_id = report["mlflow_run_id"]
    assert run_id and f"MLflow run {run_id}" in result.stderr

    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["lme.role"] == "retrieval"
    assert run.data.tags["lme.design"] == "bm25" and run.data.tags["lme.retriever"] == "bm25"
    assert run.data.params["retriever._target_"] == "lme.retrieval.fts5.FTS5Retriever"
    assert run.data.params["retrieval.ks"] == "1,5,10,50,100"
    assert len(run.data.params["dataset.sha256"]) == 64
    metrics = run.data.metrics
    overall = report["overall"]["metrics"]
    for k in KS:
        for name in ("turn.recall_frac_all_roles", "session.ndcg_all_turns", "session.recall_any", "turn.ndcg_any"):
            assert metrics[f"{name}_at_{k}"] == pytest.approx(overall[f"{name}@{k}"]), name
    assert metrics["turn.recall_frac_all_roles_at_10.multi-session"] == pytest.approx(
        report["by_type"]["multi-session"]["metrics"]["turn.recall_frac_all_roles@10"]
    )
    assert metrics["turn.ndcg_any_at_10.multi-session"] == pytest.approx(
        report["by_type"]["multi-session"]["metrics"]["turn.ndcg_any@10"])
    assert metrics["n_questions"] == 42 and metrics["n_abstention"] == 5 and metrics["official.n_scored"] == 31
    assert not any(name.startswith("official.") and "_at_" in name for name in metrics)
    artifacts = {artifact.path for artifact in client.list_artifacts(run_id)}
    assert artifacts == {"retrieval.json", "retrieval_per_question.jsonl"}
    local = client.download_artifacts(run_id, "retrieval_per_question.jsonl", str(tmp_path))
    rows = [json.loads(line) for line in Path(local).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 42 and sum(row["abstention"] for row in rows) == 5


@needs(MINI)
@pytest.mark.parametrize("user_turns_only", [False, True])
def test_the_official_names_hold_longmemeval_s_own_measures_on_the_mini_file(capsys, user_turns_only) -> None:
    """The official measures of the command, with or without --user-turns-only, equal those computed here with
    lme.retrieval.official from the same rankings (its user turns)."""
    from lme.retrieval.metrics import user_turns_view
    from lme.retrieval.metrics import scope_of
    from lme.retrieval.official import official_name, official_scores, official_summary

    flag = ["--user-turns-only"] if user_turns_only else []
    assert main(["+design=bm25", "retriever=fts5", f"dataset.path={MINI}", "tracking.enabled=false", "--json",
                 "--k", "1,10", *flag]) == 0
    report = json.loads(capsys.readouterr().out)
    questions = load_questions(MINI)
    retriever = FTS5Retriever()
    ks = (1, 3, 5, 10, 30, 50)
    views = [user_turns_view(q) if user_turns_only else q for q in questions]
    per_question = [official_scores(q, retriever.rank(view, 10_000).turn_ids, ks) for q, view in zip(questions, views)]
    expected = official_summary(questions, per_question)
    assert report["official_ks"] == list(ks)
    assert report["overall"]["n_scored"]["official"] == expected.n_scored
    assert report["n_abstention"] == expected.ignored_abstention
    assert report["n_no_evidence"]["official"] == expected.ignored_no_target
    official = {name: value for name, value in report["overall"]["metrics"].items()
                if scope_of(name) == "official"}
    assert official == pytest.approx(dict(expected.values))
    assert official_name("session", "recall_any", 50) == "session.recall_any@50" and "session.recall_any@50" in official
