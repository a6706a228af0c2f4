"""Reciprocal rank fusion (RRF) of several rankings of the same history's turns.

`rrf` is pure: each input ranking is cut to its first `depth` turn ids, and a
turn's fused score is the sum, over the rankings that hold it, of
`1 / (k + rank)` with `rank` 1-based (Cormack, Clarke and Buettcher, 2009).
A turn id repeated within one ranking counts at its first position only.
Scores are summed with `math.fsum` (correctly rounded), so a score never
depends on the order of the inputs.

Ties (equal fused scores) are broken deterministically, in this order:
1. the better (smaller) best single rank the turn holds in any input;
2. the earlier input ranking in which the turn holds that best rank.
No two turns can tie on both (one ranking holds one turn per rank), so the
fused order is total and the same on every run.

`FusedRetriever` asks each of its retrievers for its top `depth` turns and
returns the fused list cut to `top_k`; it holds at most
`len(retrievers) * depth` turns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lme.data.records import Question
from lme.util.errors import LmeError
from lme.retrieval.base import Ranking, Retriever

DEFAULT_K = 60
DEFAULT_DEPTH = 100


def rrf(rankings: Sequence[Ranking], k: float = DEFAULT_K, depth: int = DEFAULT_DEPTH, name: str = "rrf") -> Ranking:
    """Fuse `rankings` by reciprocal rank fusion; every fused turn, best first (see the module doc)."""
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}.")
    if depth < 1:
        raise ValueError(f"RRF depth must be >= 1, got {depth}.")
    parts: dict[str, list[float]] = {}
    best: dict[str, tuple[int, int]] = {}  # turn id -> (best rank, index of the first ranking holding it there)
    for source, ranking in enumerate(rankings):
        seen: set[str] = set()
        for rank, turn_id in enumerate(ranking.turn_ids[:depth], start=1):
            if turn_id in seen:
                continue
            seen.add(turn_id)
            parts.setdefault(turn_id, []).append(1.0 / (k + rank))
            if turn_id not in best or rank < best[turn_id][0]:
                best[turn_id] = (rank, source)
    scores = {turn_id: math.fsum(values) for turn_id, values in parts.items()}
    order = sorted(scores, key=lambda turn_id: (-scores[turn_id], *best[turn_id]))
    return Ranking(retriever=name, turn_ids=tuple(order), scores=tuple(scores[turn_id] for turn_id in order))


class FusedRetriever:
    """Several retrievers' top-`depth` lists fused by RRF (the `hybrid` baseline: BM25 + semantic).

    `retrievers` is a list, or a mapping from a label to a retriever (the order
    of the mapping is the order of the inputs, which only matters for ties).
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever] | Mapping[str, Retriever],
        k: float = DEFAULT_K,
        depth: int = DEFAULT_DEPTH,
        name: str = "hybrid",
    ) -> None:
        parts = list(retrievers.values()) if isinstance(retrievers, Mapping) else list(retrievers)
        if not parts:
            raise LmeError(f"retriever {name}: fusion needs at least one retriever in retrievers, found none.")
        for part in parts:
            if not callable(getattr(part, "rank", None)):
                raise LmeError(
                    f"retriever {name}: field retrievers: {part!r} is not a retriever (it has no rank method)."
                )
        if isinstance(k, bool) or not isinstance(k, (int, float)) or k < 0:
            raise LmeError(f"retriever {name}: field k: expected a number >= 0, found {k!r}.")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise LmeError(f"retriever {name}: field depth: expected an integer >= 1, found {depth!r}.")
        self.retrievers: tuple[Retriever, ...] = tuple(parts)
        self.k = k
        self.depth = depth
        self.name = name

    def __repr__(self) -> str:
        inner = ", ".join(repr(part) for part in self.retrievers)
        return f"FusedRetriever([{inner}], k={self.k!r}, depth={self.depth!r}, name={self.name!r})"

    def rank(self, question: Question, top_k: int) -> Ranking:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}.")
        if top_k == 0:
            return Ranking(retriever=self.name, turn_ids=(), scores=())
        fused = rrf([part.rank(question, self.depth) for part in self.retrievers], self.k, self.depth, self.name)
        return Ranking(retriever=self.name, turn_ids=fused.turn_ids[:top_k], scores=fused.scores[:top_k])
