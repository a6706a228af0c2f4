"""Retrieval benchmark on real LongMemEval data: one table of figures, each with what it is compared to.

    python scripts/bench_retrieval.py [--data FILE] [--limit N] [--embed-texts N] [--lucene]

- FTS5 BM25 (lme): index + query time per question, any-evidence recall@10;
- the LongMemEval repository's own BM25 approach (rank_bm25 BM25Okapi over `split(" ")` of each turn),
  on the same questions: time per question and recall@10;
- Lucene BM25 (lme, pyserini; with --lucene): index + query per question, then query on built indexes;
- embedding: lme's cached path vs `SentenceTransformer.encode` directly on the same distinct texts
  (overhead in %), and the second run through the cache (speed-up).
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

from lme.data.load import load_questions  # noqa: E402
from lme.retrieval.fts5 import FTS5Retriever  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_cleaned.json.xz"


def recall_any(ranked: list[str], evidence: set[str], k: int) -> float:
    return 1.0 if evidence & set(ranked[:k]) else 0.0


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
    from rank_bm25 import BM25Okapi

    times, hits = [], []
    for q in questions:
        turns = q.turns()
        started = time.perf_counter()
        bm25 = BM25Okapi([t.content.split(" ") for t in turns])
        scores = bm25.get_scores(q.question.split(" "))
        order = sorted(range(len(turns)), key=lambda i: -scores[i])[:100]
        times.append(time.perf_counter() - started)
        hits.append(recall_any([turns[i].turn_id for i in order], {t.turn_id for t in turns if t.has_answer}, 10))
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


def bench_embedding(questions, n_texts: int, cache_path: Path) -> tuple[int, float, float, float]:
    from lme.retrieval.dense import SentenceTransformerEncoder
    from lme.retrieval.embedding_cache import EmbeddingCache

    texts = list(dict.fromkeys(t.content for q in questions for t in q.turns()))[:n_texts]
    encoder = SentenceTransformerEncoder("minilm-packaged", device="cpu")
    encoder.encode(texts[:8], "")  # load the model outside the timings
    model = encoder._loaded[0] if encoder._loaded else None  # the loaded SentenceTransformer
    started = time.perf_counter()
    model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    direct = time.perf_counter() - started
    cache = EmbeddingCache(cache_path)
    started = time.perf_counter()
    cache.embed(texts, encoder.location.model_id, "", lambda batch: encoder.encode(batch, ""), progress=False)
    through_lme = time.perf_counter() - started
    started = time.perf_counter()
    cache.embed(texts, encoder.location.model_id, "", lambda batch: encoder.encode(batch, ""), progress=False)
    second = time.perf_counter() - started
    return len(texts), direct, through_lme, second


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
    rows.append(("FTS5 BM25 (lme), index + query", f"{fts_s * 1000:.1f} ms/question, recall_any@10 {fts_r:.3f}",
                 f"rank_bm25 BM25Okapi split(' ') (LongMemEval's): {bm_s * 1000:.1f} ms/question, "
                 f"recall_any@10 {bm_r:.3f}; ratio {bm_s / fts_s:.1f}x"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.lucene:
            cold, warm, rec = bench_lucene(answerable, Path(tmp) / "lucene")
            rows.append(("Lucene BM25 (lme)", f"{cold * 1000:.1f} ms/question index + query, {warm * 1000:.1f} ms "
                         f"query on a built index, recall_any@10 {rec:.3f}", f"FTS5: {fts_s * 1000:.1f} ms/question"))
        if args.embed_texts:
            n, direct, lme_s, second = bench_embedding(questions, args.embed_texts, Path(tmp) / "emb.sqlite")
            rows.append(("embedding through lme (MiniLM, CPU)", f"{n / lme_s:.0f} texts/s ({n} distinct texts)",
                         f"SentenceTransformer.encode directly: {n / direct:.0f} texts/s; "
                         f"lme overhead {100 * (lme_s - direct) / direct:+.1f}%"))
            rows.append(("second run through the cache", f"{second * 1000:.0f} ms (encodes nothing)",
                         f"first run {lme_s:.1f} s: {lme_s / second:.0f}x faster"))
    print(f"{args.data.name}: {len(questions)} questions, {len(answerable)} answerable with marked evidence\n")
    print("| figure | lme | compared with |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
