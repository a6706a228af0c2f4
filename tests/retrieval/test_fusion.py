"""Reciprocal rank fusion: scores and order by hand, depth cut, ties; the fused retriever and its config."""

from __future__ import annotations

import math

import pytest
from hydra.utils import instantiate

from lme.cli import compose_config
from lme.data.records import Question
from lme.util.errors import LmeError
from lme.retrieval.base import Ranking, Retriever
from lme.retrieval.fts5 import FTS5Retriever
from lme.retrieval.fusion import FusedRetriever, rrf
from histories import make_question


def ranking(*turn_ids: str, name: str = "r") -> Ranking:
    return Ranking(retriever=name, turn_ids=turn_ids, scores=tuple(float(-i) for i in range(len(turn_ids))))


class ReverseRetriever:
    """A real (if silly) retriever: every turn of the history, latest first."""

    def __init__(self, name: str = "reverse") -> None:
        self.name = name

    def rank(self, question: Question, top_k: int) -> Ranking:
        turns = [turn.turn_id for turn in reversed(question.turns())][:top_k]
        return Ranking(retriever=self.name, turn_ids=tuple(turns), scores=tuple(-float(i) for i in range(len(turns))))




HISTORY = [
    [("user", "The weather has been rainy all week."), ("assistant", "Rainy weeks are good for reading.")],
    [("user", "I bought a blue bicycle, a lovely blue bicycle."), ("assistant", "Enjoy the bicycle.")],
    [("user", "My cat knocked a plant off the shelf."), ("assistant", "Cats love pushing things off ledges.")],
]


def test_rrf_scores_and_order_by_hand() -> None:
    fused = rrf([ranking("a", "b", "c"), ranking("c", "a", "d")], k=60, depth=100, name="fused")
    # a: ranks 1 and 2; c: ranks 3 and 1; b: rank 2; d: rank 3.
    assert fused.retriever == "fused"
    assert fused.turn_ids == ("a", "c", "b", "d")
    assert fused.scores == (1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62, 1 / 63)
    assert fused.scores[0] == pytest.approx(0.0325224749)


def test_rrf_cuts_each_ranking_to_depth() -> None:
    fused = rrf([ranking("a", "b", "c"), ranking("c", "a", "d")], k=60, depth=2)
    # first ranking -> a, b; second -> c, a: d is never seen, c only at rank 1.
    assert fused.turn_ids == ("a", "c", "b")
    assert fused.scores == (1 / 61 + 1 / 62, 1 / 61, 1 / 62)


def test_rrf_equal_scores_break_ties_by_best_rank_then_by_earlier_ranking() -> None:
    # With k = 60, two ranks of 62 add up to exactly one rank of 1: 2/122 == 1/61.
    first = ranking("u", *[f"a{i}" for i in range(2, 62)], "v")
    second = ranking("w", *[f"b{i}" for i in range(2, 62)], "v")
    fused = rrf([first, second])
    assert fused.turn_ids[:3] == ("u", "w", "v")
    assert fused.scores[:3] == (1 / 61, 1 / 61, 1 / 61)
    # the same inputs the other way round give the same scores; only the u/w tie flips
    swapped = rrf([second, first])
    assert swapped.turn_ids[:3] == ("w", "u", "v")
    assert dict(zip(swapped.turn_ids, swapped.scores)) == dict(zip(fused.turn_ids, fused.scores))
    # a rank-1 tie in one ranking: x and y both score 1/61 + 1/62; x holds rank 1 in the first ranking
    assert rrf([ranking("x", "y"), ranking("y", "x")]).turn_ids == ("x", "y")


def test_rrf_with_k_zero_and_three_rankings_sums_exactly() -> None:
    fused = rrf([ranking("p", "q"), ranking("r", "q"), ranking("q", "p", "r")], k=0)
    # q: 1/2 + 1/2 + 1 = 2; p: 1 + 1/2 = 1.5; r: 1 + 1/3
    assert fused.turn_ids == ("q", "p", "r")
    assert fused.scores == (2.0, 1.5, math.fsum([1.0, 1 / 3]))


def test_rrf_counts_a_repeated_id_once_and_handles_empty_input() -> None:
    fused = rrf([ranking("a", "a", "b")])
    assert fused.turn_ids == ("a", "b")
    assert fused.scores == (1 / 61, 1 / 63)
    assert rrf([]).turn_ids == ()
    assert rrf([ranking(), ranking("z")]).turn_ids == ("z",)
    with pytest.raises(ValueError):
        rrf([ranking("a")], k=-1)
    with pytest.raises(ValueError):
        rrf([ranking("a")], depth=0)


def test_fused_retriever_fuses_fts5_and_a_second_retriever() -> None:
    question = make_question("Which blue bicycle?", HISTORY)
    bm25, reverse = FTS5Retriever(), ReverseRetriever()
    assert bm25.rank(question, 100).turn_ids == ("s0001:0", "s0001:1")
    assert reverse.rank(question, 100).turn_ids == ("s0002:1", "s0002:0", "s0001:1", "s0001:0", "s0000:1", "s0000:0")

    retriever: Retriever = FusedRetriever([bm25, reverse])
    result = retriever.rank(question, 100)
    assert result.retriever == "hybrid"
    # s0001:0 = 1/61 + 1/64 beats s0001:1 = 1/62 + 1/63
    assert result.turn_ids == ("s0001:0", "s0001:1", "s0002:1", "s0002:0", "s0000:1", "s0000:0")
    assert result.scores[:3] == (1 / 61 + 1 / 64, 1 / 62 + 1 / 63, 1 / 61)
    assert retriever.rank(question, 3).turn_ids == result.turn_ids[:3]
    assert retriever.rank(question, 0).turn_ids == ()


def test_fused_retriever_depth_and_mapping_order_decide_ties() -> None:
    question = make_question("Which blue bicycle?", HISTORY)
    shallow = FusedRetriever({"bm25": FTS5Retriever(), "reverse": ReverseRetriever()}, depth=2, name="both")
    result = shallow.rank(question, 10)
    # bm25 -> s0001:0, s0001:1; reverse -> s0002:1, s0002:0. Two rank-1 ties: the first input wins.
    assert result.retriever == "both"
    assert result.turn_ids == ("s0001:0", "s0002:1", "s0001:1", "s0002:0")
    flipped = FusedRetriever({"reverse": ReverseRetriever(), "bm25": FTS5Retriever()}, depth=2).rank(question, 10)
    assert flipped.turn_ids == ("s0002:1", "s0001:0", "s0002:0", "s0001:1")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retrievers": []}, "at least one retriever"),
        ({"retrievers": [object()]}, "not a retriever"),
        ({"retrievers": [ReverseRetriever()], "k": -1}, "field k"),
        ({"retrievers": [ReverseRetriever()], "depth": 0}, "field depth"),
    ],
)
def test_fused_retriever_refuses_bad_settings_in_one_sentence(kwargs, message) -> None:
    with pytest.raises(LmeError, match=message):
        FusedRetriever(**kwargs)


def test_hybrid_design_composes_fts5_and_semantic_and_instantiates() -> None:
    cfg = compose_config(["+design=hybrid"])
    assert cfg.design_name == "hybrid"
    assert cfg.retriever._target_ == "lme.retrieval.fusion.FusedRetriever"
    assert (cfg.retriever.k, cfg.retriever.depth, cfg.retriever.name) == (60, 100, "hybrid")
    assert list(cfg.retriever.retrievers) == ["bm25", "semantic"]
    assert cfg.retriever.retrievers.bm25 == compose_config([]).retriever  # the fts5 option itself
    assert cfg.retriever.retrievers.semantic == compose_config(["retriever=semantic"]).retriever
    assert (cfg.memory.top_k, cfg.memory.max_bytes) == (100, 96000)

    swapped = compose_config(
        [
            "+design=hybrid",
            "~retriever.retrievers.semantic",
            f"+retriever.retrievers.reverse._target_={__name__}.ReverseRetriever",
        ]
    )
    retriever = instantiate(swapped.retriever)
    assert isinstance(retriever, FusedRetriever)
    assert [type(part).__name__ for part in retriever.retrievers] == ["FTS5Retriever", "ReverseRetriever"]
    question = make_question("Which blue bicycle?", HISTORY)
    assert retriever.rank(question, 2).turn_ids == ("s0001:0", "s0001:1")
