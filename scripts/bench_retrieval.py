"""Retrieval benchmark on real LongMemEval data: one table of figures, each with what it is compared to.

    python scripts/bench_retrieval.py [--data FILE] [--limit N] [--embed-texts N] [--lucene]

- FTS5 BM25 (lme): index + query time per question, `turn.recall_any_all_roles@10` (lme's variant: a turn marked
  `has_answer`, of any role, among the first 10 of every turn ranked; docs/retrieval.md, "Measures");
- the LongMemEval repository's own BM25 approach (rank_bm25 BM25Okapi over `split(" ")`), here over
  every turn (the corpus FTS5 indexes; LongMemEval indexes user turns only), on the same questions:
  time per question and the same measure;
- Lucene BM25 (lme, pyserini; with --lucene): index + query per question, then query on built indexes;
- embedding: lme's cached path vs `SentenceTransformer.encode` directly on the same distinct texts
  (overhead in %), and the second run through the cache (speed-up): `scripts/bench_embedding.py`.

The whole-study benchmark, with targets, is `scripts/bench.py`; this script adds recall and Lucene.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_memory import rank_bm25_top  # noqa: E402

from lme.data.load import load_questions  # noqa: E402
from lme.retrieval.fts5 import FTS5Retriever  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_cleaned.json.xz"


def recall_any(ranked: list[str], evidence: set[str], k: int) -> float:
    """lme's `recall_any_all_roles@k` of one question (evidence: its `has_answer` turns, any role)."""
    return 1.0 if evidence & set(ranked[:k]) else 0.0


MEASURE = "turn.recall_any_all_roles@10"


def bench_fts5(questions) -> tuple[float, float]:
    retriever = FTS5Retriever()
    times, hits = [], []
    for q in questions:
        started = time.perf_counter()
        ranking = retriever.rank(q, 100)
        times.append(time.perf_counter() - started)
        hits.append(recall_any(list(ranking.turn_ids), {t.turn_id for t in q.turns() if t.has_answer}, 10))
    return statistics.mean(times), statistics.mean(hits)


def bench_rank_bm25(questions) -> tuple[float, float]:
    import rank_bm25  # noqa: F401  (imported outside the timings)

    times, hits = [], []
    for q in questions:
        started = time.perf_counter()
        ranked = rank_bm25_top(q, 100)
        times.append(time.perf_counter() - started)
        hits.append(recall_any(ranked, {t.turn_id for t in q.turns() if t.has_answer}, 10))
    return statistics.mean(times), statistics.mean(hits)


def bench_lucene(questions, index_dir: Path) -> tuple[float, float, float]:
    from lme.retrieval.lucene import LuceneRetriever

    retriever = LuceneRetriever(index_dir=str(index_dir))
    retriever.rank(questions[0], 100)  # start the JVM outside the timings
    cold, warm, hits = [], [], []
    for q in questions[1:]:
        started = time.perf_counter()
        ranking = retriever.rank(q, 100)
        cold.append(time.perf_counter() - started)
        hits.append(recall_any(list(ranking.turn_ids), {t.turn_id for t in q.turns() if t.has_answer}, 10))
    for q in questions[1:]:
        started = time.perf_counter()
        retriever.rank(q, 100)
        warm.append(time.perf_counter() - started)
    return statistics.mean(cold), statistics.mean(warm), statistics.mean(hits)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=50, help="first N questions (default 50)")
    parser.add_argument("--embed-texts", type=int, default=1000, help="distinct turn texts to embed (0: skip)")
    parser.add_argument("--lucene", action="store_true", help="also Lucene BM25 (needs the lucene extra)")
    args = parser.parse_args()

    started = time.perf_counter()
    questions = [q for q in load_questions(args.data)[: args.limit]]
    load_s = time.perf_counter() - started
    answerable = [q for q in questions if not q.is_abstention and any(t.has_answer for t in q.turns())]
    rows = [("load + validate", f"{load_s:.1f} s for the file", "")]
    fts_s, fts_r = bench_fts5(answerable)
    bm_s, bm_r = bench_rank_bm25(answerable)
    rows.append(("FTS5 BM25 (lme), index + query", f"{fts_s * 1000:.1f} ms/question, {MEASURE} {fts_r:.3f}",
                 f"rank_bm25 BM25Okapi split(' ') (LongMemEval's): {bm_s * 1000:.1f} ms/question, "
                 f"{MEASURE} {bm_r:.3f}; ratio {bm_s / fts_s:.1f}x"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.lucene:
            cold, warm, rec = bench_lucene(answerable, Path(tmp) / "lucene")
            rows.append(("Lucene BM25 (lme)", f"{cold * 1000:.1f} ms/question index + query, {warm * 1000:.1f} ms "
                         f"query on a built index, {MEASURE} {rec:.3f}", f"FTS5: {fts_s * 1000:.1f} ms/question"))
    if args.embed_texts:
        from bench_embedding import rows as embedding_rows

        for row in embedding_rows(args.data, args.limit, args.embed_texts):
            rows.append((f"{row.figure}: {row.value:,.1f} {row.unit}", row.note, row.compared_to))
    print(f"{args.data.name}: {len(questions)} questions, {len(answerable)} answerable with marked evidence\n")
    print("| figure | lme | compared with |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
