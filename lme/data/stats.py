"""Dataset statistics, without any model: what a LongMemEval file holds.

`dataset_stats(questions)` is pure and takes any iterable of `Question`s, one at
a time (a streamed file never has to be held whole): it keeps running totals and,
for `distinct_turn_texts`, a 16-byte BLAKE2b digest per distinct text.

Definitions (bytes are UTF-8 bytes of turn contents, `lme.util.budget.utf8_len`'s unit):

- `mean_history_bytes`: all turn contents of a history, averaged over questions;
- `user_share`: user bytes / all bytes, over the whole file;
- `mean_user_messages`, `mean_user_bytes`, `max_user_bytes`: the user's turns of a
  history (the size of a complete user log);
- `evidence_all_user` / `evidence_all_assistant`: questions whose `has_answer`
  turns are all user / all assistant turns; a question with both kinds counts in
  `evidence_mixed`, one with no marked turn in `evidence_unmarked` (and in
  neither of the first two);
- `same_day_histories`: every session of the history on one calendar day;
- `distinct_turn_texts`: distinct turn contents over the whole file (`turns` counts all);
- `duplicate_session_ids`: questions whose history repeats an original session id;
- `question_date_before_last_session`: the question is dated earlier than the
  history's latest session.

These count every question as a history (LongMemEval's questions each have their own). LoCoMo's questions share
their conversation: `locomo_stats` counts each conversation once (by the question id's part before `-q`), its
questions per category, and reads from the parsed file what lme's questions no longer show (photo turns,
adversarial questions with no `answer`, integer answers, evidence ids that name no turn).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from lme.data.records import QUESTION_TYPES, Question


@dataclass(frozen=True, slots=True)
class DatasetStats:
    questions: int
    question_types: dict[str, int]  # every known type (0 when absent), then any other, in that order
    abstention: int
    turns: int
    mean_sessions: float
    mean_turns: float
    mean_history_bytes: float
    user_share: float
    mean_user_messages: float
    mean_user_bytes: float
    max_user_bytes: int
    evidence_all_user: int
    evidence_all_assistant: int
    evidence_mixed: int
    evidence_unmarked: int
    same_day_histories: int
    distinct_turn_texts: int
    duplicate_session_ids: int
    question_date_before_last_session: int


@dataclass(slots=True)
class StatsAccumulator:
    """Running totals; `add` one question at a time, then `result()`."""

    questions: int = 0
    types: dict[str, int] = field(default_factory=dict)
    abstention: int = 0
    sessions: int = 0
    turns: int = 0
    total_bytes: int = 0
    user_bytes: int = 0
    user_messages: int = 0
    max_user_bytes: int = 0
    evidence: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("user", "assistant", "mixed", "none"), 0))
    same_day: int = 0
    texts: set[bytes] = field(default_factory=set)
    duplicate_ids: int = 0
    asked_before_last: int = 0

    def add(self, question: Question) -> None:
        self.questions += 1
        self.types[question.question_type] = self.types.get(question.question_type, 0) + 1
        self.abstention += question.is_abstention
        self.sessions += len(question.sessions)
        user_bytes = 0
        marked_roles: set[str] = set()
        for session in question.sessions:
            for turn in session.turns:
                data = turn.content.encode("utf-8")
                self.turns += 1
                self.total_bytes += len(data)
                if turn.role == "user":
                    user_bytes += len(data)
                    self.user_messages += 1
                if turn.has_answer:
                    marked_roles.add(turn.role)
                self.texts.add(hashlib.blake2b(data, digest_size=16).digest())
        self.user_bytes += user_bytes
        self.max_user_bytes = max(self.max_user_bytes, user_bytes)
        kind = "none" if not marked_roles else marked_roles.pop() if len(marked_roles) == 1 else "mixed"
        self.evidence[kind] += 1
        if question.sessions:
            days = {session.date.date() for session in question.sessions}
            self.same_day += len(days) == 1
            self.asked_before_last += question.question_date < max(session.date for session in question.sessions)
        original_ids = [session.original_id for session in question.sessions]
        self.duplicate_ids += len(set(original_ids)) < len(original_ids)

    def result(self) -> DatasetStats:
        n = self.questions

        def mean(total: int) -> float:
            return total / n if n else 0.0

        types = {name: self.types.get(name, 0) for name in QUESTION_TYPES}
        types.update({name: count for name, count in sorted(self.types.items()) if name not in types})
        return DatasetStats(
            questions=n,
            question_types=types,
            abstention=self.abstention,
            turns=self.turns,
            mean_sessions=mean(self.sessions),
            mean_turns=mean(self.turns),
            mean_history_bytes=mean(self.total_bytes),
            user_share=self.user_bytes / self.total_bytes if self.total_bytes else 0.0,
            mean_user_messages=mean(self.user_messages),
            mean_user_bytes=mean(self.user_bytes),
            max_user_bytes=self.max_user_bytes,
            evidence_all_user=self.evidence["user"],
            evidence_all_assistant=self.evidence["assistant"],
            evidence_mixed=self.evidence["mixed"],
            evidence_unmarked=self.evidence["none"],
            same_day_histories=self.same_day,
            distinct_turn_texts=len(self.texts),
            duplicate_session_ids=self.duplicate_ids,
            question_date_before_last_session=self.asked_before_last,
        )


def dataset_stats(questions: Iterable[Question]) -> DatasetStats:
    """Statistics of a dataset, reading each question once."""
    accumulator = StatsAccumulator()
    for question in questions:
        accumulator.add(question)
    return accumulator.result()


def stats_json(stats: DatasetStats) -> dict[str, Any]:
    """The statistics as one JSON-ready object (keys as in `DatasetStats`)."""
    return asdict(stats)


# key -> what it means, for the table; question types are listed under `question_types`.
DESCRIPTIONS: dict[str, str] = {
    "questions": "questions",
    "abstention": "abstention questions (`_abs` in the id)",
    "turns": "turns, all histories",
    "mean_sessions": "sessions per history (mean)",
    "mean_turns": "turns per history (mean)",
    "mean_history_bytes": "UTF-8 bytes of turn text per history (mean)",
    "user_share": "user bytes / all bytes",
    "mean_user_messages": "user messages per history (mean)",
    "mean_user_bytes": "user bytes per history (mean)",
    "max_user_bytes": "user bytes per history (max)",
    "evidence_all_user": "questions whose evidence turns are all user turns",
    "evidence_all_assistant": "questions whose evidence turns are all assistant turns",
    "evidence_mixed": "questions with user and assistant evidence turns",
    "evidence_unmarked": "questions with no evidence turn marked",
    "same_day_histories": "histories whose sessions all fall on one day",
    "distinct_turn_texts": "distinct turn texts, all histories",
    "duplicate_session_ids": "questions whose history repeats a session id",
    "question_date_before_last_session": "questions dated before their last session",
}


def _format_value(key: str, value: float) -> str:
    if key == "user_share":
        return f"{100 * value:.1f}%"
    if isinstance(value, int):
        return f"{value:,}"
    if key.endswith("_bytes"):
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def format_table(stats: DatasetStats) -> str:
    """A Markdown table: key (as in the JSON), value, meaning."""
    rows = [("key", "value", "meaning"), ("---", "---:", "---")]
    for key, value in stats_json(stats).items():
        if key == "question_types":
            for name, count in value.items():
                rows.append((f"question_types.{name}", f"{count:,}", "questions of this type"))
            continue
        rows.append((key, _format_value(key, value), DESCRIPTIONS.get(key, key)))
    return "\n".join(f"| {key} | {value} | {meaning} |" for key, value, meaning in rows)


# ----------------------------------------------------------------------------------------------
# LoCoMo: questions share their conversation, so each history is counted once


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """One LoCoMo conversation, as lme loaded it (and `photo_turns` from the file)."""

    conversation: str  # the sample id (the question id's part before `-q`)
    sessions: int
    turns: int
    photo_turns: int  # read from the file: turns with a `blip_caption`
    questions: dict[str, int]  # selected questions per category, every category (0 when none)
    history_bytes: int  # UTF-8 bytes of the turn texts as lme shows them (a photo's ` and shared ...` included)


@dataclass(frozen=True, slots=True)
class LocomoStats:
    conversations: int
    sessions: int
    turns: int
    photo_turns: int  # from the file
    questions: int
    categories: dict[str, int]
    adversarial_without_answer: int  # from the file
    integer_answers: int  # from the file
    unresolved_evidence: int  # from the file (`lme.data.locomo.unresolved_evidence`), the selected questions'
    history_bytes: int
    per_conversation: tuple[ConversationStats, ...]


def history_key(question: Question) -> str:
    """The conversation a LoCoMo question belongs to: its id's part before `-q` (`conv-26-q017` -> `conv-26`).
    The sessions tuple is no key: each question gets its own copies of the sessions that hold its evidence."""
    return question.question_id.rsplit("-q", 1)[0]


@dataclass(frozen=True, slots=True)
class _FileFacts:
    photo_turns: dict[str, int]  # sample id -> turns with a photo
    no_answer: frozenset[str]  # question ids: adversarial, no `answer` field
    integer: frozenset[str]  # question ids whose `answer` is a JSON integer
    unresolved: dict[str, int]  # question id -> evidence ids that name no turn


def _file_facts(data: Any) -> _FileFacts:
    """What lme's questions no longer show, read from the parsed file (which lme's loader has already accepted)."""
    from lme.data.locomo import unresolved_evidence

    photos: dict[str, int] = {}
    no_answer: set[str] = set()
    integer: set[str] = set()
    unresolved: dict[str, int] = {}
    for record in data:
        sample_id = record["sample_id"]
        conversation = record["conversation"]
        photos[sample_id] = sum(1 for key, turns in conversation.items()
                                if key.startswith("session_") and isinstance(turns, list)
                                for turn in turns if turn.get("blip_caption") is not None)
        for n, qa in enumerate(record["qa"]):
            question_id = f"{sample_id}-q{n:03d}"
            if "answer" not in qa:
                no_answer.add(question_id)
            elif isinstance(qa["answer"], int) and not isinstance(qa["answer"], bool):
                integer.add(question_id)
            unresolved[question_id] = unresolved_evidence([{"conversation": conversation, "qa": [qa]}])
    return _FileFacts(photos, frozenset(no_answer), frozenset(integer), unresolved)


def locomo_stats(questions: Iterable[Question], data: Any, categories: tuple[str, ...]) -> LocomoStats:
    """LoCoMo's counts over the selected questions: histories (sessions, turns, bytes, photos) once per
    conversation, questions per category; the file-level facts (`data`, the parsed file) of those questions."""
    facts = _file_facts(data)
    rows: dict[str, dict[str, Any]] = {}
    totals = dict.fromkeys(categories, 0)
    selected: list[str] = []
    for question in questions:
        key = history_key(question)
        selected.append(question.question_id)
        if key not in rows:
            rows[key] = {"sessions": len(question.sessions),
                         "turns": sum(len(s.turns) for s in question.sessions),
                         "bytes": sum(len(t.content.encode("utf-8")) for s in question.sessions for t in s.turns),
                         "questions": dict.fromkeys(categories, 0)}
        counts = rows[key]["questions"]
        counts[question.question_type] = counts.get(question.question_type, 0) + 1
        totals[question.question_type] = totals.get(question.question_type, 0) + 1
    per = tuple(ConversationStats(key, row["sessions"], row["turns"], facts.photo_turns.get(key, 0),
                                  row["questions"], row["bytes"]) for key, row in rows.items())
    return LocomoStats(
        conversations=len(per),
        sessions=sum(r.sessions for r in per),
        turns=sum(r.turns for r in per),
        photo_turns=sum(r.photo_turns for r in per),
        questions=len(selected),
        categories=totals,
        adversarial_without_answer=sum(q in facts.no_answer for q in selected),
        integer_answers=sum(q in facts.integer for q in selected),
        unresolved_evidence=sum(facts.unresolved.get(q, 0) for q in selected),
        history_bytes=sum(r.history_bytes for r in per),
        per_conversation=per,
    )


LOCOMO_DESCRIPTIONS: dict[str, str] = {
    "conversations": "conversations (histories, each counted once)",
    "sessions": "sessions, all conversations",
    "turns": "turns, all conversations",
    "photo_turns": "turns that share a photo (read from the file: `blip_caption`)",
    "questions": "questions",
    "adversarial_without_answer": "adversarial questions with no `answer` field (read from the file)",
    "integer_answers": "questions whose `answer` is a JSON integer (read from the file)",
    "unresolved_evidence": "evidence dialogue ids that name no turn (read from the file; dropped by the loader)",
    "history_bytes": "UTF-8 bytes of turn text, all conversations (photos as lme shows them)",
}


def format_locomo_table(stats: LocomoStats) -> str:
    """Two Markdown tables: the totals (key as in the JSON, value, meaning), then one row per conversation."""
    rows = [("key", "value", "meaning"), ("---", "---:", "---")]
    for key, value in asdict(stats).items():
        if key == "per_conversation":
            continue
        if key == "categories":
            rows.extend((f"categories.{name}", f"{count:,}", "questions of this category")
                        for name, count in value.items())
            continue
        rows.append((key, f"{value:,}", LOCOMO_DESCRIPTIONS.get(key, key)))
    lines = [f"| {key} | {value} | {meaning} |" for key, value, meaning in rows]
    names = list(stats.categories)
    lines += ["", "| conversation | sessions | turns | photo turns | " + " | ".join(names) + " | history bytes |",
              "| --- |" + " ---: |" * (len(names) + 4)]
    for row in stats.per_conversation:
        counts = " | ".join(f"{row.questions.get(name, 0):,}" for name in names)
        lines.append(f"| {row.conversation} | {row.sessions:,} | {row.turns:,} | {row.photo_turns:,} | {counts} | "
                     f"{row.history_bytes:,} |")
    return "\n".join(lines)
