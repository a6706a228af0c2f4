"""`python -m lme embed [overrides]`: fill the embedding cache for a dataset ahead of a study.

    python -m lme embed retriever=hybrid dataset.path=FILE split=dev limit=20
    python -m lme embed +design=first_pass

The overrides are a run's: the questions are selected as a run selects them, and the run's retriever is
built; each of its semantic parts (`retriever=semantic`, hybrid's semantic part) encodes, through its
embedding cache, exactly what ranking will ask for: every turn of every selected question's history
with the document prompt, every question with the query prompt (`DenseRetriever.prepare`). Texts are
de-duplicated across histories and texts already cached are not encoded again; the rest are encoded
longest first and stored chunk by chunk as each completes (one transaction each), so a killed
`lme embed` loses at most the chunks in flight (the one being encoded, the one being written) and a rerun
encodes only what is missing. Progress (texts encoded, texts/s, ETA) goes
to stderr: a bar on a terminal, a line every 30 s otherwise, none with `progress=false`.

An embedding API (`retriever.backend=litellm`) is called through the gateway: the call cache
`<cache_dir>/calls.sqlite`, the ledger (`budget.ledger_path`, job `budget.job` or `embed`) and the
budget's caps; at a cap it stops (exit 3), every batch already answered stored; a failure no retry can
fix (a bad key, an unknown model) stops it with exit 4.

Prints, per semantic retriever: texts requested and distinct, already cached, encoded, seconds, texts/s.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from lme.cli.parser import make_parser
from lme.util.errors import EXIT_BUDGET, EXIT_INTERRUPTED, EXIT_SYSTEMIC, LmeError

if TYPE_CHECKING:
    from lme.config.design import Design

PROG = "python -m lme embed"
STREAM_GROUP = 50  # questions per pass over a streamed file (LongMemEval-M): memory grows with this, not the file


def _parser() -> Any:
    return make_parser(
        PROG,
        "Fill the embedding cache with every text the run's semantic retriever (or hybrid's semantic part) "
        "will ask for: each selected question's turns and the question itself. Other arguments are config "
        "overrides, as for a run (retriever=hybrid dataset.path=FILE split=dev limit=20).",
    )


def semantic_parts(retriever: Any) -> list[Any]:
    """`lme.retrieval.dense.semantic_parts` (imported when called: numpy and the retrieval code load then)."""
    from lme.retrieval.dense import semantic_parts as parts

    return parts(retriever)


def _groups(questions: Iterable[Any], size: int) -> Iterator[list[Any]]:
    group: list[Any] = []
    for question in questions:
        group.append(question)
        if len(group) >= size:
            yield group
            group = []
    if group:
        yield group


def summary_line(name: str, model_id: str, requested: int, hits: int, encoded: int, seconds: float,
                 stored: int) -> str:
    """`semantic (MODEL): 1,234 texts requested, 1,100 distinct; 100 already cached, 1,000 encoded in 12.3 s
    (81.3 texts/s); 5,000 vectors in the cache`."""
    rate = f"{encoded / seconds:,.1f} texts/s" if seconds > 0 and encoded else "-"
    return (f"{name} ({model_id}): {requested:,} texts requested, {hits + encoded:,} distinct; {hits:,} already "
            f"cached, {encoded:,} encoded in {seconds:,.1f} s ({rate}); {stored:,} vectors in the cache")


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.config.design import compose_design
    from lme.util.progress import config_flag, enabled_as

    overrides, rest = split_overrides(argv)
    _parser().parse_args(rest)
    design = compose_design(overrides)
    with enabled_as(config_flag(design.progress)):  # progress=false: no bar, no progress line
        return _main(design)


def _main(design: Design) -> int:
    from lme.data.dataset import load_dataset
    from lme.models.gateway import SystemicFailure
    from lme.models.ledger import BudgetExhausted
    from lme.retrieval.dense import attach_gateway

    retriever = design.build_retriever()
    parts = semantic_parts(retriever)
    if not parts:
        name = getattr(retriever, "name", type(retriever).__name__)
        raise LmeError(
            f"{PROG}: the retriever {name} embeds nothing (no semantic part); choose retriever=semantic or "
            "retriever=hybrid, or a design that uses one."
        )
    data_path, questions = load_dataset(design.dataset)
    api = any(callable(getattr(getattr(part, "encoder", None), "use_gateway", None)) for part in parts)
    gateway = _open_gateway(design) if api else None  # a local model calls no API: no gateway, no ledger
    if gateway is not None:
        attach_gateway(retriever, gateway)
    print(f"lme embed: {len(questions):,} questions of {data_path}", file=sys.stderr, flush=True)
    status = 0
    try:
        for part in parts:
            part.cache.reset_counters()
            started = time.perf_counter()
            try:
                if isinstance(questions, list):
                    part.prepare(questions)
                else:  # a streamed file: a few histories at a time
                    for group in _groups(questions, STREAM_GROUP):
                        part.prepare(group)
            except BudgetExhausted as exc:
                print(f"lme embed: stopped: {exc}", file=sys.stderr, flush=True)
                status = EXIT_BUDGET
            except SystemicFailure as exc:  # a bad key, an unknown model: nothing more is sent
                print(f"lme embed: stopped: {exc}", file=sys.stderr, flush=True)
                status = EXIT_SYSTEMIC
            except KeyboardInterrupt:
                print("lme embed: interrupted.", file=sys.stderr, flush=True)
                status = EXIT_INTERRUPTED
            seconds = time.perf_counter() - started
            counters = part.cache.counters()
            print(summary_line(part.name, part.model_id, counters.requested, counters.hits, counters.encoded,
                               seconds, len(part.cache)), flush=True)
            if status:
                print(f"lme embed: what was encoded is stored in {part.cache.path or 'memory'}; rerun the same "
                      "command to encode the rest.", file=sys.stderr, flush=True)
                return status
    finally:
        for part in parts:
            part.close()
        if gateway is not None:
            gateway.close_background()
            gateway.cache.close()
            gateway.ledger.close()
    return status


def _open_gateway(design: Design) -> Any:
    """The gateway of an embedding API's calls: the run's call cache, ledger (job `budget.job` or `embed`) and
    caps. Opening it costs two small SQLite files; a local model never uses it."""
    from lme.models.cache import CallCache
    from lme.models.gateway import Gateway
    from lme.models.ledger import Ledger

    ledger = Ledger(design.ledger_path, study=design.study, job=design.job_name or "embed")
    return Gateway(CallCache(design.cache_dir / "calls.sqlite"), ledger=ledger, budget=design.budget,
                   calls_in_flight=design.calls_in_flight)
