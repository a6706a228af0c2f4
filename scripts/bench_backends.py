"""Benchmark stage `backends`: the embedding backends side by side (`embedding.backend` x `embedding.precision`).

    python scripts/bench_backends.py [--texts 2000] [--recall-file MINI] [--recall-questions 16] [--recall-cache DIR]
                                     [--backends torch/fp32,onnx/fp32,onnx/int8,openvino/fp32,openvino/int8]

Speed: the first `--texts` distinct turn texts of LongMemEval-S (file order), encoded by every backend in
blocks of `--block` texts, the backends taking turns within each block (the order rotating from block to
block), so a machine whose load drifts slows them alike; each backend's figure is its texts over the sum of
its block times. Every backend's model is loaded (and its ONNX file exported) before the clock starts. The
vectors are compared with torch fp32's (mean and smallest cosine).

Recall: turn- and session-level recall@10 (LongMemEval's official measures, `lme.retrieval.official`) of the
semantic retriever with each backend whose vectors differ from torch (int8), on `--recall-file` (the mini file
by default), each backend on its own fresh embedding cache. fp32 exports give torch's vectors (cosine >= 0.9999,
checked at load), so their rankings are torch's.

Prints a markdown table; `--json FILE` writes the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import DEFAULT_S, Row, missing_extra, report, skipped  # noqa: E402

STAGE = "backends"
MODEL = "minilm-packaged"
BATCH_SIZE = 32
DEFAULT_MINI = DEFAULT_S.with_name("longmemeval_s_cleaned_mini.json.xz")
ALL = ("torch/fp32", "onnx/fp32", "onnx/int8", "openvino/fp32", "openvino/int8")
TARGET_SPEED = 2.5
TARGET_RECALL_DROP = 0.01


def sample_texts(path: Path, count: int) -> list[str]:
    from lme.data.stream import iter_questions

    texts: dict[str, None] = {}
    for question in iter_questions(path):
        for turn in question.turns():
            texts.setdefault(turn.content, None)
            if len(texts) >= count:
                return list(texts)
    return list(texts)


def retriever(backend: str, cache: Path | None):
    from lme.retrieval.dense import DenseRetriever

    runtime, precision = backend.split("/")
    return DenseRetriever(MODEL, device="cpu", batch_size=BATCH_SIZE, cache_path=cache, progress=False,
                          runtime=runtime, precision=precision, name=f"semantic[{backend}]")


def speed(backends: list[str], texts: list[str], block: int) -> dict[str, dict[str, float]]:
    import numpy as np

    encoders = {backend: retriever(backend, None).encoder for backend in backends}
    for encoder in encoders.values():
        encoder.encode(texts[:8], "")  # load, export, warm
    seconds = dict.fromkeys(backends, 0.0)
    vectors: dict[str, list] = {backend: [] for backend in backends}
    for number, start in enumerate(range(0, len(texts), block)):
        part = texts[start:start + block]
        order = backends[number % len(backends):] + backends[:number % len(backends)]
        for backend in order:
            began = time.perf_counter()
            vectors[backend].append(encoders[backend].encode(part, ""))
            seconds[backend] += time.perf_counter() - began
    reference = np.concatenate(vectors[backends[0]])
    out = {}
    for backend in backends:
        mine = np.concatenate(vectors[backend])
        cosines = (mine * reference).sum(axis=1)
        out[backend] = {"texts_per_s": len(texts) / seconds[backend], "seconds": seconds[backend],
                        "cos_mean": float(cosines.mean()), "cos_min": float(cosines.min())}
    return out


def recall(backend: str, path: Path, questions: int | None, k: int = 10,
           cache_dir: Path | None = None) -> dict[str, float]:
    """Official turn- and session-level recall_any@k of the semantic retriever with `backend`, on its own cache:
    a fresh temporary one, or `cache_dir/<runtime>-<precision>.sqlite` kept between runs (so a long recall run
    killed part-way resumes, and a rerun encodes nothing)."""
    from lme.data.load import load_questions, select
    from lme.retrieval.official import official_name, official_scores, official_summary

    chosen = select(load_questions(path), questions)
    kept = contextlib.nullcontext(cache_dir) if cache_dir else tempfile.TemporaryDirectory(prefix="lme-bench-backends-")
    with kept as folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        ranker = retriever(backend, Path(folder) / f"{backend.replace('/', '-')}.sqlite")
        ranker.prepare(chosen)
        scores = [official_scores(q, ranker.rank(q, sum(1 for _ in q.turns())).turn_ids, ks=(k,)) for q in chosen]
        ranker.close()
    summary = official_summary(chosen, scores)
    return {"turn": summary.values.get(official_name("turn", "recall_any", k), float("nan")),
            "session": summary.values.get(official_name("session", "recall_any", k), float("nan")),
            "n": summary.n_scored}


# runtime -> the optional packages it needs beyond lme's dependencies (lme.retrieval.onnx_runtime checks the same)
OPTIONAL: dict[str, tuple[str, ...]] = {"openvino": ("openvino",)}


def unavailable(backend: str) -> str | None:
    """Why `backend` cannot run on this install ("needs the fast-cpu extra (openvino)"), or None."""
    return missing_extra(*OPTIONAL.get(backend.split("/")[0], ()))


def rows(texts: int = 2000, block: int = 200, backends: tuple[str, ...] = ALL, recall_file: Path | None = None,
         recall_questions: int | None = None, data: Path = DEFAULT_S, recall_cache: Path | None = None) -> list[Row]:
    """The stage's rows; a backend whose optional extra is not installed is a skipped row, the others run."""
    absent = {backend: reason for backend in backends if (reason := unavailable(backend))}
    for backend, reason in absent.items():
        print(f"bench_backends: MiniLM {backend}: skipped: {reason}", file=sys.stderr, flush=True)
    runnable = tuple(backend for backend in backends if backend not in absent)
    measured = iter(_measured_rows(texts, block, runnable, recall_file, recall_questions, data, recall_cache)
                    if runnable else [])
    return [skipped(STAGE, f"MiniLM {backend}", absent[backend]) if backend in absent else next(measured)
            for backend in backends]


def _measured_rows(texts: int, block: int, backends: tuple[str, ...], recall_file: Path | None,
                   recall_questions: int | None, data: Path, recall_cache: Path | None) -> list[Row]:
    recall_file = recall_file or DEFAULT_MINI
    sample = sample_texts(data, texts)
    measured = speed(list(backends), sample, block)
    base = measured[backends[0]]["texts_per_s"]
    recalls = {backend: recall(backend, recall_file, recall_questions, cache_dir=recall_cache)
               for backend in backends if backend == backends[0] or backend.endswith("int8")}
    out: list[Row] = []
    for backend in backends:
        figure = measured[backend]
        ratio = figure["texts_per_s"] / base
        found = recalls.get(backend) or recalls[backends[0]]
        drop = max(recalls[backends[0]]["turn"] - found["turn"], recalls[backends[0]]["session"] - found["session"])
        met = None if backend == backends[0] else (ratio >= TARGET_SPEED and drop <= TARGET_RECALL_DROP)
        same = "" if backend in recalls else " (fp32: torch's vectors, its rankings)"
        out.append(Row(STAGE, f"MiniLM {backend}", round(figure["texts_per_s"], 1), "texts/s",
                       f"torch/fp32 {base:.1f} texts/s on the same {len(sample)} S turns", round(ratio, 2),
                       f">= {TARGET_SPEED}x, recall@10 within {TARGET_RECALL_DROP}", met,
                       f"cosine to torch mean {figure['cos_mean']:.4f}, min {figure['cos_min']:.4f}; recall@10 on "
                       f"{found['n']} questions of {recall_file.name}: turn {found['turn']:.3f}, session "
                       f"{found['session']:.3f}{same}"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--backends", default=",".join(ALL), help="RUNTIME/PRECISION,... (the first is the reference)")
    parser.add_argument("--recall-file", type=Path, default=DEFAULT_MINI)
    parser.add_argument("--recall-questions", type=int, default=None, help="first N questions of the recall file")
    parser.add_argument("--recall-cache", type=Path, default=None,
                        help="folder for the recall runs' embedding caches, kept (default: fresh temporary ones)")
    parser.add_argument("--data", type=Path, default=DEFAULT_S)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    found = rows(args.texts, args.block, tuple(args.backends.split(",")), args.recall_file, args.recall_questions,
                 args.data, args.recall_cache)
    report(found, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
