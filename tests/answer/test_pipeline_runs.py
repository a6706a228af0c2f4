"""`python -m lme +design=pipeline -m seed=1,2,3` end to end, offline, with a real MLflow store:
per-step journals, instruction digests, the parent's steps.json; and the arbiter stage of
`+design=pipeline_arbiter` against the loopback server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.judge import sha256_text
from lme.models.offline import DECLINE_ANSWER, extractive_answer

pytestmark = pytest.mark.slow

# The first-pass memory starved to 400 bytes: the offline reader declines often, the whole-session
# view (100,000 bytes) holds the facts, so the decline re-reads have something to fix.
STARVED = ["retriever=fts5", "memory.max_bytes=400", "memory.overflow_reply_reserve_bytes=100"]
RULES = ["first_pass", "advice", "decline", "decline", "recall"]


def run_lme(tmp: Path, *overrides: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable, "-m", "lme", *overrides,
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
        f"tracking.artifact_location={tmp}/mlruns",
        f"cache_dir={tmp}/cache",
    ]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    return subprocess.run(args, cwd=tmp, env=base | (env or {}), capture_output=True, text=True, timeout=900)


def mlflow_runs(tmp: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db")
    experiment = client.get_experiment_by_name("lme")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parent = next(r for r in runs if r.data.tags.get("lme.role") == "parent")
    children = sorted((r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
                      key=lambda r: int(r.data.tags["lme.seed"]))
    return client, parent, children


def artifact(tmp: Path, run_id: str, path: str) -> str:
    import mlflow

    with tempfile.TemporaryDirectory() as out:
        local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=out,
                                                    tracking_uri=f"sqlite:///{tmp}/mlflow.db")
        return Path(local).read_text(encoding="utf-8")


def journals(tmp: Path, design: str) -> list[dict[str, dict]]:
    """Each job's journal rows by question id, in seed order (job number = seed order here)."""
    (sweep,) = (tmp / "multirun" / design).iterdir()
    lines = [(sweep / str(n) / "outcomes.jsonl").read_text().splitlines() for n in range(3)]
    return [{row["question_id"]: row for row in map(json.loads, job)} for job in lines]


def test_pipeline_multirun_records_every_step_and_the_parent_holds_the_step_table(tmp_path):
    result = run_lme(tmp_path, "+design=pipeline", *STARVED, "-m", "seed=1,2,3")
    assert result.returncode == 0, result.stderr[-3000:]
    client, parent, children = mlflow_runs(tmp_path)
    assert [c.data.tags["lme.seed"] for c in children] == ["1", "2", "3"]
    assert all(r.info.status == "FINISHED" for r in [parent, *children])
    runs = journals(tmp_path, "pipeline")
    ids = list(runs[0])

    replaced = 0
    for run in runs:
        for row in run.values():
            steps = row["steps"]
            assert [s["rule"] for s in steps] == RULES
            assert steps[0]["chosen"] and not steps[0]["reread"]
            for before, step in zip(steps, steps[1:]):
                if step["rule"] == "decline":
                    # fires exactly when the answer so far declines in the offline reader's words
                    assert step["chosen"] == (before["answer"] is not None and "not contain enough" in before["answer"])
                if step["reread"] and not step["failed"]:
                    assert step["answer"] == step["step_answer"]  # a re-read's answer replaces the current one
                    replaced += step["rule"] == "decline" and step["answer"] != DECLINE_ANSWER
                else:
                    assert step["answer"] == before["answer"]
            assert row["answer"] == steps[-1]["answer"] and row["correct"] == steps[-1]["correct"]
            assert row["reader"]["calls"] == sum(s["reader"]["calls"] for s in steps)
            assert row["judge"]["calls"] == sum(s["judge"]["calls"] for s in steps)
    assert replaced >= 3 * 10  # the starved first pass declines; whole sessions answer

    # each job records the digest and text of every instruction it used
    for child in children:
        for name in ("first_pass", "advice", "decline", "recall"):
            text = artifact(tmp_path, child.info.run_id, f"instructions/{name}.txt")
            assert child.data.params[f"instruction.{name}.sha256"] == sha256_text(text.rstrip("\n"))
        assert child.data.metrics["steps.decline.fixed"] > 0
        assert "rules_reread" in artifact(tmp_path, child.info.run_id, "outcomes.csv").splitlines()[0]

    # the parent's per-step table, checked against the journals
    table = json.loads(artifact(tmp_path, parent.info.run_id, "steps.json"))["designs"]["pipeline"]
    assert table["seeds"] == ["1", "2", "3"] and table["n_runs"] == 3
    rows = table["steps"]
    assert [row["rule"] for row in rows] == RULES
    for index, row in enumerate(rows):
        after = [{q: bool(run[q]["steps"][index]["correct"]) for q in ids} for run in runs]
        assert row["questions_chosen"] == len({q for run in runs for q in ids if run[q]["steps"][index]["chosen"]})
        assert row["reread"] == sum(run[q]["steps"][index]["reread"] for run in runs for q in ids)
        assert row["mean_accuracy"] == pytest.approx(sum(sum(a.values()) / len(ids) for a in after) / 3)
        assert row["majority_count"] == sum(1 for q in ids if sum(a[q] for a in after) >= 2)
        if index:
            before = [{q: bool(run[q]["steps"][index - 1]["correct"]) for q in ids} for run in runs]
            assert row["fixed"] == sum(1 for b, a in zip(before, after) for q in ids if not b[q] and a[q])
            assert row["broken"] == sum(1 for b, a in zip(before, after) for q in ids if b[q] and not a[q])
    assert rows[2]["fixed"] > 0 and rows[2]["questions_chosen"] >= 10
    assert rows[-1]["mean_accuracy"] == pytest.approx(parent.data.metrics["mean_accuracy"])


def test_the_arbiter_rereads_questions_whose_runs_disagree_after_the_sweep(tmp_path):
    from loopback import LoopbackServer

    questions = {q.question: q for q in load_questions(SAMPLE_PATH)[:8]}
    wobbly = {"ba26d851", "3d792fa1", "961d8dcf"}  # their answer changes from one job to the next
    asked: Counter[str] = Counter()
    arbiter_payloads: list[dict] = []

    def reply(body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        payload = json.loads(user)
        question = questions[payload["question"]]
        if "earlier_answers" in payload:
            arbiter_payloads.append(payload)
            return question.answer
        asked[system + user] += 1  # each job asks the same request again (its seed misses the cache)
        answer = extractive_answer(payload["question"], payload["memory"])
        if question.question_id in wobbly and asked[system + user] % 2 == 0:
            return "I am not sure."
        return answer

    with LoopbackServer(reply=reply) as server:
        result = run_lme(
            tmp_path, "+design=pipeline_arbiter", "retriever=fts5", "limit=8",
            "reader=gpt5_mini", "reader.model.model=openai/gpt-4o-mini", "~reader.model.params.reasoning_effort",
            f"reader.model.api_base={server.base_url}",
            "reader.model.api_key_env=LOOPBACK_KEY", "-m", "seed=1,2,3",
            env={"LOOPBACK_KEY": "sk-loopback"},
        )
    assert result.returncode == 0, result.stderr[-3000:]
    client, parent, children = mlflow_runs(tmp_path)
    assert parent.info.status == "FINISHED" and len(children) == 3
    runs = journals(tmp_path, "pipeline_arbiter")
    ids = list(runs[0])
    answers = {q: [run[q]["answer"] for run in runs] for q in ids}
    disagreeing = {q for q, a in answers.items() if len(set(a)) > 1}
    assert disagreeing == wobbly

    # one arbiter call per disagreeing question, shown the runs' answers in seed order
    assert sorted(p["question"] for p in arbiter_payloads) == sorted(
        next(text for text, q in questions.items() if q.question_id == qid) for qid in disagreeing)
    for payload in arbiter_payloads:
        qid = questions[payload["question"]].question_id
        assert payload["earlier_answers"] == [a for a in answers[qid] if a]
    lines = artifact(tmp_path, parent.info.run_id, "arbiter/outcomes.jsonl").splitlines()
    outcomes = [json.loads(line) for line in lines]
    assert {o["question_id"] for o in outcomes if o["chosen"]} == disagreeing
    assert all(o["correct"] for o in outcomes if o["chosen"])

    rows = json.loads(artifact(tmp_path, parent.info.run_id, "steps.json"))["designs"]["pipeline_arbiter"]["steps"]
    assert [row["rule"] for row in rows] == [*RULES, "arbiter"]
    arbiter = rows[-1]
    wrong_before = sum(1 for run in runs for q in disagreeing if not run[q]["correct"])
    assert arbiter["questions_chosen"] == 3 and arbiter["reread"] == 9
    assert wrong_before > 0 and arbiter["fixed"] == wrong_before and arbiter["broken"] == 0
    assert parent.data.metrics["arbiter.questions_chosen"] == 3
    assert parent.data.metrics["arbiter.fixed"] == wrong_before
    text = artifact(tmp_path, parent.info.run_id, "instructions/arbiter.txt").rstrip("\n")
    assert parent.data.params["instruction.arbiter.sha256"] == sha256_text(text) and "earlier_answers" in text


def test_study_design_7s_arbiter_keeps_the_studys_three_keys_and_opens_the_memory_with_the_earlier_answers(
        tmp_path):
    """Under setup=study every request, the arbiter's too, carries exactly question, questionDate and memory; the
    arbiter's memory is the earlier-answers section (the runs' answers in seed order, each a JSON string) followed
    by the first-pass memory, byte for byte."""
    from loopback import LoopbackServer

    from lme.answer.reader import EARLIER_HEADING

    questions = {q.question: q for q in load_questions(SAMPLE_PATH)[:8]}
    wobbly = {"ba26d851", "3d792fa1", "961d8dcf"}
    asked: Counter[str] = Counter()
    first_pass: dict[str, str] = {}  # question -> its first-pass memory
    arbiter_memories: dict[str, str] = {}
    keys: set[tuple[str, ...]] = set()

    def reply(body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        payload = json.loads(user)
        keys.add(tuple(payload))
        question = questions[payload["question"]]
        if payload["memory"].startswith(EARLIER_HEADING):
            arbiter_memories[payload["question"]] = payload["memory"]
            return 'A "quoted"\nanswer: ' + question.answer  # the arbiter's answer, with a quote and a line break
        if "advice" not in system and "whole" not in system:
            first_pass.setdefault(payload["question"], payload["memory"])
        asked[system + user] += 1
        if question.question_id in wobbly and asked[system + user] % 2 == 0:
            return 'I am "not" sure.\nMaybe.'  # an answer whose quotes and line break the section must keep apart
        return extractive_answer(payload["question"], payload["memory"])

    with LoopbackServer(reply=reply) as server:
        result = run_lme(
            tmp_path, "+design=study/07_arbiter", "setup=study", "dataset=sample", "retriever=fts5", "split=null",
            "judge=offline", "limit=8", f"reader.model.api_base={server.base_url}",
            "reader.model.api_key_env=LOOPBACK_KEY", "-m", "seed=1,2,3", env={"LOOPBACK_KEY": "sk-loopback"},
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert keys == {("question", "questionDate", "memory")}
    runs = journals(tmp_path, "study_07_arbiter")
    answers = {q: [run[q]["answer"] for run in runs] for q in runs[0]}
    disagreeing = {q for q, a in answers.items() if len(set(a)) > 1}
    assert disagreeing == wobbly
    by_id = {q.question_id: text for text, q in questions.items()}
    assert set(arbiter_memories) == {by_id[q] for q in disagreeing}
    for qid in disagreeing:
        memory = arbiter_memories[by_id[qid]]
        head, _, rest = memory.partition("\n\n")
        heading, *lines = head.split("\n")
        assert heading == EARLIER_HEADING
        assert [json.loads(line.split(". ", 1)[1]) for line in lines] == [a for a in answers[qid] if a]
        assert [line.split(". ", 1)[0] for line in lines] == [str(n) for n in range(1, len(lines) + 1)]
        assert rest == first_pass[by_id[qid]]
    client, parent, children = mlflow_runs(tmp_path)
    outcomes = [json.loads(line) for line in artifact(tmp_path, parent.info.run_id, "arbiter/outcomes.jsonl").splitlines()]
    assert {o["question_id"] for o in outcomes if o["reread"]} == disagreeing
    assert all(o["answer"].startswith('A "quoted"\nanswer: ') for o in outcomes if o["reread"])
