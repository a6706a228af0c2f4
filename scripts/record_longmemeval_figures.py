"""Record LongMemEval's figures as lme computes them, to guard a refactoring that must change none of them.

    python scripts/record_longmemeval_figures.py                     # writes tests/data/longmemeval_figures.json
    python scripts/record_longmemeval_figures.py --out FILE --data DIR --s-memories 50

Whatever `lme` is first on the path computes the figures: to record the figures of a commit, check it out in a
worktree and run this script with `PYTHONPATH=WORKTREE` (the project venv installs lme editable, so the path must
come first). tests/test_longmemeval_figures.py recomputes them with the checkout's lme and compares.

The figures (SHA-256 hex digests of canonical JSON or of text; never any text from the data, which is not ours
to commit; question ids are identifiers, as in lme/data/split_ids):

- over the bundled sample (`lme.data.sample.SAMPLE_PATH`, no shared data needed) and the mini S file, per
  question: the parsed record (an explicit list of fields, so a new field with a default changes no digest), the
  judge prompt for the answer "ANSWER" under the offline judge's templates and LongMemEval's, the FTS5 turn
  ranking and its retrieval measures (official and lme's variants at `DEFAULT_KS`), the memory text of each
  design in `MEMORY_DESIGNS`; per dataset: which questions each question rule of `RULE_DESIGNS` selects
  (`python -m lme rules --json`) and the mean retrieval measures (`lme.retrieval.metrics.summarise`);
- over S, a table: the mean FTS5 retrieval measures at k = 1, 5, 10 (the official measures at the official k
  as well), each rule's count and a digest of its ids, one digest over every question's record digest, over
  every judge prompt, and over the first-pass memories of the first `--s-memories` questions (all by default).

Deterministic settings only: retriever=fts5, no embeddings, no model call.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = CHECKOUT / "tests" / "data" / "longmemeval_figures.json"
ANSWER = "ANSWER"  # the hypothesis every judge prompt is filled with
DATA_FILES = {  # relative to the shared data folder (tests/shared_data.py lays it out)
    "mini": "longmemeval/longmemeval_s_cleaned_mini.json.xz",
    "s": "longmemeval/longmemeval_s_cleaned.json.xz",
    "templates": "longmemeval/judge_templates.json",
}
# Memory figures: name -> (the design's overrides, the view to build instead of its memory, or None).
MEMORY_DESIGNS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "memory.bm25": (("+design=bm25", "retriever=fts5"), None),
    "memory.pipeline.first_pass": (("+design=pipeline", "retriever=fts5"), None),
    "memory.pipeline.whole_sessions": (("+design=pipeline", "retriever=fts5"), "whole_sessions"),
    "memory.full_history": (("+design=full_history", "retriever=fts5"), None),
}
# Rule figures: name -> the design whose question rules (and routes) select questions.
RULE_DESIGNS: dict[str, tuple[str, ...]] = {
    "pipeline": ("+design=pipeline", "retriever=fts5"),
    "pipeline_counting": ("+design=pipeline_counting", "retriever=fts5"),
    "pipeline_current_state": ("+design=pipeline_current_state", "retriever=fts5"),
}
RETRIEVAL_DESIGN: tuple[str, ...] = ("+design=bm25", "retriever=fts5")
S_KS: tuple[int, ...] = (1, 5, 10)
S_FIRST_PASS = "memory.pipeline.first_pass"


def canonical(value: Any) -> str:
    """`value` as canonical JSON: sorted keys, no spaces, non-finite floats as null."""
    return json.dumps(json_safe(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def digest(value: Any) -> str:
    """SHA-256 hex of `value`: of its UTF-8 bytes when it is text, else of its canonical JSON."""
    text = value if isinstance(value, str) else canonical(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_safe(value: Any) -> Any:
    """Non-finite floats as None, tuples as lists, mappings as dicts (what JSON gives back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def record_fields(question: Any) -> dict[str, Any]:
    """The parsed record's fields named one by one (never `dataclasses.asdict`: a field added later with a
    default must change no digest)."""
    return {
        "question_id": question.question_id,
        "question_type": question.question_type,
        "question": question.question,
        "answer": question.answer,
        "question_date": question.question_date.isoformat(),
        "question_date_text": question.question_date_text,
        "answer_session_ids": list(question.answer_session_ids),
        "is_abstention": bool(question.is_abstention),
        "sessions": [
            {
                "session_id": session.session_id,
                "original_id": session.original_id,
                "date": session.date.isoformat(),
                "date_text": session.date_text,
                "is_evidence": bool(session.is_evidence),
                "turns": [
                    {"turn_id": turn.turn_id, "role": turn.role, "content": turn.content,
                     "has_answer": bool(turn.has_answer)}
                    for turn in session.turns
                ],
            }
            for session in question.sessions
        ],
    }


def score_fields(score: Any) -> dict[str, Any]:
    """One question's retrieval measures, named one by one."""
    return {
        "question_id": score.question_id,
        "question_type": score.question_type,
        "abstention": score.abstention,
        "turn_evidence": score.turn_evidence,
        "session_evidence": score.session_evidence,
        "first_turn_hit": score.first_turn_hit,
        "first_session_hit": score.first_session_hit,
        "officially_scored": score.officially_scored,
        "values": dict(score.values),
    }


def design_for(overrides: Sequence[str], data_path: Path) -> Any:
    from lme.config.design import compose_design

    return compose_design([*overrides, f"dataset.path={data_path}", "tracking.enabled=false", "progress=false"])


def load_questions(data_path: Path) -> list[Any]:
    """The file's questions as a run reads them (every question, in file order)."""
    from lme.data.dataset import load_dataset

    _, questions = load_dataset(design_for(RETRIEVAL_DESIGN, data_path).dataset)
    return list(questions)


def judge_templates(data_path: Path, templates_path: Path | None) -> dict[str, Mapping[str, str]]:
    """Judge name -> its templates: the offline judge's (conf/judge/offline), and LongMemEval's when the
    templates file is given."""
    judges = {"offline": design_for(("judge=offline",), data_path).judge.build().templates}
    if templates_path is not None:
        judges["longmemeval"] = design_for(("judge=longmemeval", f"judge.templates_path={templates_path}"),
                                           data_path).judge.build().templates
    return judges


def judge_prompts(questions: Sequence[Any], templates: Mapping[str, str]) -> list[str]:
    from lme.judge import build_judge_prompt

    return [build_judge_prompt(templates, question, ANSWER) for question in questions]


def memory_digests(name: str, questions: Sequence[Any], data_path: Path) -> list[str]:
    """The digest of each question's memory text under the design (or view) `name` of `MEMORY_DESIGNS`."""
    overrides, view = MEMORY_DESIGNS[name]
    design = design_for(overrides, data_path)
    retriever = design.build_retriever()
    builder = design.build_memory(retriever) if view is None else design.build_view(retriever, view)
    return [digest(builder.build(question).text) for question in questions]


def rankings_and_scores(questions: Sequence[Any], data_path: Path, ks: Sequence[int]) -> tuple[list[Any], list[Any]]:
    """Each question's FTS5 turn ranking (every turn) and its scores at `ks` (the official k too)."""
    from lme.retrieval.metrics import official_ks, score_question

    retriever = design_for(RETRIEVAL_DESIGN, data_path).build_retriever()
    depth = max(official_ks(ks))
    rankings, scores = [], []
    for question in questions:
        ranking = retriever.rank(question, max(depth, len(question.turns())))
        rankings.append(tuple(ranking.turn_ids))
        scores.append(score_question(question, ranking.turn_ids, ks))
    return rankings, scores


def retrieval_table(scores: Sequence[Any], ks: Sequence[int]) -> dict[str, Any]:
    from lme.retrieval.metrics import summarise

    return json_safe(summarise(scores, ks).as_dict())


def rule_selections(data_path: Path) -> dict[str, dict[str, list[str]]]:
    """Design -> rule (and `route:NAME`) -> the question ids it selects, as `python -m lme rules --json` says."""
    from lme.cli.rules import main

    selections = {}
    for name, overrides in RULE_DESIGNS.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = main(["--json", *overrides, f"dataset.path={data_path}", "tracking.enabled=false"])
        if status != 0:
            raise RuntimeError(f"python -m lme rules {' '.join(overrides)} exited {status}")
        selections[name] = json.loads(out.getvalue())
    return selections


def per_question_figures(data_path: Path, templates_path: Path | None) -> dict[str, Any]:
    """Every figure of one small file: per question (by id, in file order), per dataset."""
    from lme.retrieval.metrics import DEFAULT_KS

    questions = load_questions(data_path)
    ids = [question.question_id for question in questions]
    columns: dict[str, list[str]] = {"record": [digest(record_fields(question)) for question in questions]}
    for judge, templates in judge_templates(data_path, templates_path).items():
        columns[f"judge_prompt.{judge}"] = [digest(prompt) for prompt in judge_prompts(questions, templates)]
    rankings, scores = rankings_and_scores(questions, data_path, DEFAULT_KS)
    columns["ranking.fts5"] = [digest(list(ranking)) for ranking in rankings]
    columns["retrieval.fts5"] = [digest(score_fields(score)) for score in scores]
    for name in MEMORY_DESIGNS:
        columns[name] = memory_digests(name, questions, data_path)
    return {
        "file_sha256": file_digest(data_path),
        "n_questions": len(questions),
        "questions": {qid: {name: column[index] for name, column in columns.items()}
                      for index, qid in enumerate(ids)},
        "rules": rule_selections(data_path),
        "retrieval_means.fts5": retrieval_table(scores, DEFAULT_KS),
    }


def s_table(data_path: Path, templates_path: Path | None, memories: int | None) -> dict[str, Any]:
    """The S figures as a table: means, counts and digests over all questions (first-pass memories over the
    first `memories` questions, all when None)."""
    questions = load_questions(data_path)
    ids = [question.question_id for question in questions]
    table: dict[str, Any] = {
        "file_sha256": file_digest(data_path),
        "n_questions": len(questions),
        "question_ids": digest(ids),
        "records": digest([digest(record_fields(question)) for question in questions]),
    }
    for judge, templates in judge_templates(data_path, templates_path).items():
        table[f"judge_prompts.{judge}"] = digest([digest(prompt) for prompt in judge_prompts(questions, templates)])
    rankings, scores = rankings_and_scores(questions, data_path, S_KS)
    table["rankings.fts5"] = digest([digest(list(ranking)) for ranking in rankings])
    table["retrieval.fts5"] = digest([digest(score_fields(score)) for score in scores])
    table["retrieval_means.fts5"] = retrieval_table(scores, S_KS)
    table["rules"] = {design: {rule: {"count": len(selected), "ids": digest(selected)}
                               for rule, selected in selection.items()}
                      for design, selection in rule_selections(data_path).items()}
    chosen = questions if memories is None else questions[:memories]
    table["memories"] = {
        "design": S_FIRST_PASS,
        "n_questions": len(chosen),
        "digest": digest(memory_digests(S_FIRST_PASS, chosen, data_path)),
    }
    return table


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def commit_of(folder: Path) -> str | None:
    """The git commit checked out where `folder` (lme's package) lies, with `+changes` when the tree differs."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if changed else "")


def data_root() -> Path:
    """The shared data folder: `$LME_TEST_DATA`, else ../shared/data beside the checkout (tests/shared_data.py)."""
    value = os.environ.get("LME_TEST_DATA", "")
    return Path(value).expanduser().absolute() if value else CHECKOUT.parent / "shared" / "data"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON file to write (default {DEFAULT_OUT})")
    parser.add_argument("--data", type=Path, default=None, help="the shared data folder (default $LME_TEST_DATA, "
                        "else ../shared/data beside the checkout); without it only the sample is recorded")
    parser.add_argument("--s-memories", type=int, default=None, metavar="N",
                        help="record S's first-pass memories for the first N questions only (default: all)")
    options = parser.parse_args(argv)

    import lme
    from lme.data.sample import SAMPLE_PATH

    root = options.data or data_root()
    templates = root / DATA_FILES["templates"]
    templates_path = templates if templates.is_file() else None
    print(f"lme from {Path(lme.__file__).parent}", file=sys.stderr)
    figures: dict[str, Any] = {"recorded_from": commit_of(Path(lme.__file__).parent), "answer": ANSWER}
    seconds: dict[str, float] = {}
    for name, path in (("sample", SAMPLE_PATH), ("mini", root / DATA_FILES["mini"])):
        if not path.is_file():
            print(f"{path} is absent: no {name} figures", file=sys.stderr)
            continue
        started = time.perf_counter()
        figures[name] = per_question_figures(path, templates_path)
        seconds[name] = round(time.perf_counter() - started, 1)
        print(f"{name}: {figures[name]['n_questions']} questions in {seconds[name]} s", file=sys.stderr)
    s_path = root / DATA_FILES["s"]
    if s_path.is_file():
        started = time.perf_counter()
        figures["s"] = s_table(s_path, templates_path, options.s_memories)
        seconds["s"] = round(time.perf_counter() - started, 1)
        print(f"s: {figures['s']['n_questions']} questions in {seconds['s']} s", file=sys.stderr)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {options.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
