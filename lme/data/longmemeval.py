"""LongMemEval (Wu et al., ICLR 2025) as an lme benchmark: its files (S, M, oracle and the bundled sample) are
read by `lme.data.load` / `lme.data.stream`, judged by its own per-type templates (`lme.judge`) and measured by
its official retrieval code's rules (`lme.retrieval.official`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lme.data.benchmark import Benchmark
from lme.data.records import QUESTION_TYPES, Question


def _parse(data: bytes, path: Path, options: Mapping[str, Any]) -> list[Question]:
    from lme.data.load import load_questions

    return load_questions(path, data=data)


BENCHMARK = Benchmark(
    name="longmemeval", title="LongMemEval", parse=_parse, categories=QUESTION_TYPES, abstaining=(),
    speakers="user-assistant", default_judge="longmemeval", fetch="s",
    official_measures=("accuracy", "recall_any@k", "ndcg_any@k"), streamable=True,
)
