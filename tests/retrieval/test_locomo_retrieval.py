"""`python -m lme retrieval` on LoCoMo: lme's all-roles / all-turns variants and LoCoMo's own recall
(`locomo.turn.recall@k`, `locomo.session.recall@k`, its `task_eval/evaluation.py` recall_acc), no LongMemEval
official measure, LoCoMo's categories in its order. Values hand-computed on a made-up conversation; the real
file (gated) for the counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lme.cli.retrieval import main
from lme.data.locomo import parse_locomo
from lme.data.records import LOCOMO_TYPES
from lme.retrieval.fts5 import FTS5Retriever
from lme.retrieval.metrics import definitions_of, score_question, summarise
from shared_data import LOCOMO, ROOT, needs

# A made-up conversation (Ann is speaker_a: role user; Bob speaker_b: role assistant). Sessions s0000 (D1:*)
# and s0001 (D2:*); turn D<n>:<m> is s000<n-1>:<m-1>.
CONVERSATION = {
    "speaker_a": "Ann", "speaker_b": "Bob",
    "session_1_date_time": "1:00 pm on 1 May, 2023",
    "session_1": [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "Morning Bob, how are you?"},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Good. I painted a sunflower yesterday."},
        {"speaker": "Ann", "dia_id": "D1:3", "text": "Lovely. I went swimming at the lake."},
    ],
    "session_2_date_time": "3:00 pm on 9 June, 2023",
    "session_2": [
        {"speaker": "Ann", "dia_id": "D2:1", "text": "I adopted a puppy named Pixel."},
        {"speaker": "Bob", "dia_id": "D2:2", "text": "Pixel sounds sweet."},
        {"speaker": "Ann", "dia_id": "D2:3", "text": "Pixel loves the beach."},
    ],
}
QA = [
    # q000: Bob's evidence turn (speaker_b) ranked second, after Ann's puppy turn
    {"question": "Did Pixel the puppy see the sunflower?", "answer": "No", "evidence": ["D1:2"], "category": 4},
    # q001: two evidence ids in different sessions, ranked first and third
    {"question": "Where does Ann go swimming, and where does Pixel go?", "answer": "The lake; the beach",
     "evidence": ["D1:3", "D2:3"], "category": 1},
    # q002: no evidence at all
    {"question": "Would Ann enjoy a zoo?", "answer": "Likely yes", "evidence": [], "category": 3},
    # q003: adversarial (abstention), its evidence ranked first
    {"question": "What did Ann paint?", "adversarial_answer": "A sunflower", "evidence": ["D1:2"], "category": 5},
]
# The FTS5 BM25 rankings the hand computation below starts from (checked by the first test).
RANKINGS = {
    "conv-x-q000": ("s0001:0", "s0000:1", "s0001:2", "s0000:2", "s0001:1"),
    "conv-x-q001": ("s0000:2", "s0001:1", "s0001:2", "s0001:0"),
    "conv-x-q002": ("s0000:1", "s0001:0"),
    "conv-x-q003": ("s0000:1",),
}
KS = (1, 2, 3)
L3, L4 = math.log2(3), math.log2(4)  # textbook NDCG's discounts at ranks 2 and 3


def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_tiny.json"
    path.write_text(json.dumps([{"sample_id": "conv-x", "conversation": CONVERSATION, "qa": QA}]), encoding="utf-8")
    return path


def per_question() -> dict[str, dict[str, float]]:
    """Every measure of each question, by hand from `RANKINGS` (k = 1, 2, 3)."""
    q0 = {  # turn: E = {s0000:1} at rank 2; sessions s0001, s0000: E = {s0000} at rank 2
        "turn.recall_frac_all_roles": (0, 1, 1), "turn.recall_any_all_roles": (0, 1, 1),
        "turn.recall_all_all_roles": (0, 1, 1), "turn.ndcg_all_roles": (0, 1 / L3, 1 / L3),
        "session.recall_frac_all_turns": (0, 1, 1), "session.recall_any_all_turns": (0, 1, 1),
        "session.recall_all_all_turns": (0, 1, 1), "session.ndcg_all_turns": (0, 1 / L3, 1 / L3),
        "locomo.turn.recall": (0, 1, 1), "locomo.session.recall": (0, 1, 1),
    }
    q1 = {  # turn: E = {s0000:2, s0001:2} at ranks 1 and 3; sessions s0000, s0001, both evidence
        "turn.recall_frac_all_roles": (0.5, 0.5, 1), "turn.recall_any_all_roles": (1, 1, 1),
        "turn.recall_all_all_roles": (0, 0, 1),
        "turn.ndcg_all_roles": (1, 1 / (1 + 1 / L3), (1 + 1 / L4) / (1 + 1 / L3)),
        "session.recall_frac_all_turns": (0.5, 1, 1), "session.recall_any_all_turns": (1, 1, 1),
        "session.recall_all_all_turns": (0, 1, 1), "session.ndcg_all_turns": (1, 1, 1),
        # LoCoMo's session recall: s0000:2's session is first, s0001:2's second
        "locomo.turn.recall": (0.5, 0.5, 1), "locomo.session.recall": (0.5, 1, 1),
    }
    # no evidence: LoCoMo's code counts 1; adversarial: only LoCoMo's recall averages it (rank 1: all 1)
    no_evidence = {"locomo.turn.recall": (1, 1, 1), "locomo.session.recall": (1, 1, 1)}
    adversarial = dict(no_evidence)
    return {qid: {f"{name}@{k}": float(value) for name, values in measures.items() for k, value in zip(KS, values)}
            for qid, measures in zip(RANKINGS, (q0, q1, no_evidence, adversarial))}


def mean(questions: list[str], name: str) -> float:
    table = per_question()
    return math.fsum(table[q][name] for q in questions) / len(questions)


def expected_group(answerable: list[str], every: list[str]) -> dict[str, float]:
    """lme's variants averaged over `answerable` (with evidence, not adversarial), LoCoMo's over `every`."""
    names = per_question()["conv-x-q000"]
    return {name: mean(every if name.startswith("locomo.") else answerable, name)
            for name in names if answerable or name.startswith("locomo.")}


def test_the_bm25_rankings_the_hand_computation_starts_from(tmp_path) -> None:
    path = tiny_file(tmp_path)
    questions = parse_locomo(json.loads(path.read_text()), path)
    assert [q.question_id for q in questions] == list(RANKINGS)
    retriever = FTS5Retriever()
    for question in questions:
        assert retriever.rank(question, 100).turn_ids == RANKINGS[question.question_id]
    evidence = {q.question_id: [(t.turn_id, t.speaker) for t in q.turns() if t.has_answer] for q in questions}
    assert evidence == {"conv-x-q000": [("s0000:1", "Bob")], "conv-x-q001": [("s0000:2", "Ann"), ("s0001:2", "Ann")],
                        "conv-x-q002": [], "conv-x-q003": [("s0000:1", "Bob")]}


def test_every_reported_measure_on_a_made_up_conversation(tmp_path, capsys) -> None:
    path = tiny_file(tmp_path)
    status = main(["+design=bm25", "dataset=locomo", f"dataset.path={path}", "tracking.enabled=false",
                   "progress=false", "--k", "1,2,3", "--json"])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["definitions"] == "locomo" and "official_ks" not in report
    assert (report["n_questions"], report["n_abstention"], report["n_without_evidence"]) == (4, 1, 1)
    assert report["n_no_evidence"] == {"turn_all_roles": 1, "session_all_turns": 1, "locomo": 0}
    # LoCoMo's categories in LoCoMo's order (the file's order is single-hop, multi-hop, open-domain, adversarial)
    assert list(report["by_type"]) == ["multi-hop", "open-domain", "single-hop", "adversarial"]
    groups = {
        "overall": (["conv-x-q000", "conv-x-q001"], list(RANKINGS), 3),
        "multi-hop": (["conv-x-q001"], ["conv-x-q001"], 1),
        "open-domain": ([], ["conv-x-q002"], 1),
        "single-hop": (["conv-x-q000"], ["conv-x-q000"], 1),
        "adversarial": ([], ["conv-x-q003"], 0),
    }
    for name, (answerable, every, n_questions) in groups.items():
        group = report["overall"] if name == "overall" else report["by_type"][name]
        assert group["n_questions"] == n_questions, name
        assert group["n_scored"] == {"turn_all_roles": len(answerable), "session_all_turns": len(answerable),
                                     "locomo": len(every)}, name
        expected = expected_group(answerable, every)
        assert set(group["metrics"]) == set(expected), name  # every reported measure, and no official one
        for metric, value in expected.items():
            assert group["metrics"][metric] == pytest.approx(value, abs=1e-12), (name, metric)
    assert report["overall"]["metrics"]["locomo.turn.recall@1"] == 0.625  # (0 + 1/2 + 1 + 1) / 4
    assert report["overall"]["metrics"]["turn.recall_frac_all_roles@2"] == 0.75  # (1 + 1/2) / 2


def test_markdown_on_locomo_has_no_official_table(tmp_path, capsys) -> None:
    path = tiny_file(tmp_path)
    assert main(["+design=bm25", "dataset=locomo", f"dataset.path={path}", "tracking.enabled=false",
                 "progress=false", "--k", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "LongMemEval's definitions" not in out and "recall_any@1 " not in out
    assert "| group | n | turn.recall@1 | turn.recall@2 | session.recall@1 | session.recall@2 |" in out
    assert "| overall | 4 | 0.625 | 0.875 | 0.625 | 1.000 |" in out  # LoCoMo's recall over all four
    assert "| adversarial | 1 | 1.000 | 1.000 | 1.000 | 1.000 |" in out
    assert "LoCoMo's recall averages all 4, the 1 without evidence scoring 1." in out


def test_a_report_never_mixes_locomo_with_longmemeval(tmp_path) -> None:
    from lme.data.sample import SAMPLE_PATH
    from lme.data.load import load_questions

    path = tiny_file(tmp_path)
    locomo = parse_locomo(json.loads(path.read_text()), path)[0]
    other = load_questions(SAMPLE_PATH)[0]
    scores = [score_question(q, [t.turn_id for t in q.turns()], KS) for q in (locomo, other)]
    assert definitions_of(scores[:1]) == "locomo" and definitions_of(scores[1:]) == "longmemeval"
    assert not scores[0].officially_scored and not any(name.startswith(("turn.recall_any@", "session.recall_any@"))
                                                      for name in scores[0].values)
    with pytest.raises(ValueError, match="one benchmark's definitions"):
        summarise(scores, KS)


@pytest.mark.slow
@needs(LOCOMO)
def test_the_real_locomo_file(capsys) -> None:
    """1,986 questions: 446 adversarial, 4 (open-domain) with no evidence; lme's variants average 1,536, LoCoMo's
    recall all 1,986."""
    assert main(["+design=bm25", "dataset=locomo", f"data_dir={ROOT}", "tracking.enabled=false", "progress=false",
                 "--k", "1,5,10", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["definitions"] == "locomo"
    assert (report["n_questions"], report["n_abstention"], report["n_without_evidence"]) == (1986, 446, 4)
    assert report["n_no_evidence"] == {"turn_all_roles": 4, "session_all_turns": 4, "locomo": 0}
    assert report["overall"]["n_scored"] == {"turn_all_roles": 1986 - 446 - 4, "session_all_turns": 1536,
                                             "locomo": 1986}
    assert list(report["by_type"]) == list(LOCOMO_TYPES)
    counts = {name: (group["n_questions"], group["n_scored"]["turn_all_roles"], group["n_scored"]["locomo"])
              for name, group in report["by_type"].items()}
    assert counts == {"multi-hop": (282, 282, 282), "temporal": (321, 321, 321), "open-domain": (96, 92, 96),
                      "single-hop": (841, 841, 841), "adversarial": (0, 0, 446)}
    metrics = report["overall"]["metrics"]
    assert not any(name.split("@")[0] in {f"{level}.{m}" for level in ("turn", "session")
                                           for m in ("recall_any", "recall_all", "ndcg_any")} for name in metrics)
    for k in (1, 5, 10):
        assert 0 < metrics[f"turn.recall_all_all_roles@{k}"] <= metrics[f"turn.recall_frac_all_roles@{k}"] \
            <= metrics[f"turn.recall_any_all_roles@{k}"] <= 1
        assert 0 < metrics[f"locomo.turn.recall@{k}"] <= metrics[f"locomo.session.recall@{k}"] <= 1
