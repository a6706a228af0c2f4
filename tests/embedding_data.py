"""Small LongMemEval files for the embedding cache's tests (`lme embed`, `lme cache export/import`).

`write_dataset` writes questions in the official format from (role, content) sessions; `mini_excerpt`
cuts a few questions of the real mini file (`shared_data.MINI`: a test using it needs it) down to a few
sessions each (their evidence sessions kept), so the real semantic retriever ranks real turns in seconds.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

from histories import question_record
from shared_data import MINI


def record(question_id: str, question: str, sessions: list[list[tuple[str, str]]]) -> dict:
    return question_record(question, sessions, question_id, question_date="2023/12/30 (Sat) 10:00",
                           session_prefix=f"{question_id}_s")


def write_dataset(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def mini_excerpt(path: Path, questions: int = 3, other_sessions: int = 3) -> Path:
    """The first `questions` answerable questions of the mini file, each with its evidence sessions and its
    first `other_sessions` other sessions (in history order), written to `path`."""
    records = json.loads(lzma.open(MINI).read())
    kept = []
    for item in records:
        if item["question_id"].endswith("_abs"):
            continue
        evidence = set(item["answer_session_ids"])
        others = [i for i, sid in enumerate(item["haystack_session_ids"]) if sid not in evidence][:other_sessions]
        keep = sorted({i for i, sid in enumerate(item["haystack_session_ids"]) if sid in evidence} | set(others))
        cut = dict(item)
        for field in ("haystack_sessions", "haystack_session_ids", "haystack_dates"):
            cut[field] = [item[field][i] for i in keep]
        kept.append(cut)
        if len(kept) == questions:
            break
    return write_dataset(path, kept)
