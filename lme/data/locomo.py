"""LoCoMo (snap-research/LoCoMo, `data/locomo10.json`) as lme's questions.

The file is a list of conversations between two people, each with its question-and-answer list (`qa`). Every
question becomes one `Question` whose history is its conversation (the sessions are built once per
conversation and shared by its questions):

- **Ids.** A question is `{sample_id}-q{index:03d}` (its place in the conversation's `qa` list, e.g.
  `conv-26-q017`): neither the category nor the answer shows in it. Sessions get lme's neutral ids in date
  order (`s0000`, ...), turns `s0000:0`, ...; the file's `session_N` is kept as `original_id` and its
  `D1:3` dialogue ids only for the evidence flags.
- **Speakers.** `speaker_a` takes the role `user`, `speaker_b` the role `assistant` (lme's two roles), and every
  turn keeps its speaker's name (`Turn.speaker`), which memories show in place of the role. A memory builder
  that reads only "the user's" messages (the user log) is refused on LoCoMo (`BENCHMARK.speakers`).
- **Photos.** A turn that shares a photo has the photo as text the way LoCoMo's own QA code shows it: the text,
  then ` and shared {blip_caption}.` (the image address is dropped: a model cannot open it).
- **Categories.** `category` 1-5 become the question types `multi-hop`, `temporal`, `open-domain`,
  `single-hop`, `adversarial` (LoCoMo's `task_eval/evaluation.py` names); adversarial questions abstain
  (`Question.abstains`): the right answer is that the conversation does not say.
- **Answers.** The reference answer is `str(answer)` (six are integers); an adversarial question without
  `answer` (444 of 446) gets `NOT_MENTIONED`, the option LoCoMo's QA code offers as the right one.
- **Question date.** LoCoMo has none. The default is the date of the conversation's last session
  (`question_date=last_session`); `question_date=YYYY-MM-DD` sets one for every question.
- **Evidence.** `evidence` lists dialogue ids; a few entries in the file hold several ids in one string
  (`D8:6; D9:17`), a stray colon (`D:11:26`) or a leading zero (`D30:05`): each id is read by the pattern
  `D<session>:<turn>` and matched as numbers. Ids that name no turn (`D10:19` in a session that ends sooner,
  a bare `D`) are dropped and counted (`unresolved_evidence`). The evidence turns get `has_answer`, their
  sessions `is_evidence`, as LongMemEval's flags, so retrieval measures need nothing of their own.

Anything else wrong in the file (a missing key, a wrong type, a date that does not parse, an unknown category)
raises `DataError` with one sentence naming the file, the conversation and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from lme.data.records import LOCOMO_TYPES, Question, Session, Turn, session_id_for, turn_id_in
from lme.data.validate import text_problem
from lme.util.errors import DataError

CATEGORIES: dict[int, str] = dict(enumerate(LOCOMO_TYPES, 1))  # 1 multi-hop ... 5 adversarial
ADVERSARIAL = "adversarial"
NOT_MENTIONED = "Not mentioned in the conversation"
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
QUESTION_DATE_DEFAULT = "last_session"
_SESSION = re.compile(r"session_(\d+)")
_DIALOGUE = re.compile(r"D:?(\d+):(\d+)")
_ROLES = ("user", "assistant")  # speaker_a, speaker_b


@dataclass(frozen=True)
class _Where:
    path: Path
    conversation: str

    def error(self, field: str, problem: str) -> DataError:
        return DataError(f"{self.path}: conversation {self.conversation}, field {field}: {problem}.")


def parse_locomo(data: Any, path: Path, question_date: str = QUESTION_DATE_DEFAULT) -> list[Question]:
    """Every question of a parsed LoCoMo file, conversation by conversation, in file order."""
    fixed = _fixed_date(question_date, path)
    if not isinstance(data, list):
        raise DataError(f"{path}: a LoCoMo file holds a JSON array of conversations, not {type(data).__name__}.")
    questions: list[Question] = []
    seen: set[str] = set()
    for index, record in enumerate(data):
        where = _Where(path, f"#{index}")
        if not isinstance(record, dict):
            raise where.error("(record)", f"is {type(record).__name__}, not an object")
        sample_id = _text(where, record, "sample_id")
        where = _Where(path, repr(sample_id))
        if sample_id in seen:
            raise where.error("sample_id", "appears twice in the file")
        seen.add(sample_id)
        questions.extend(_conversation_questions(where, sample_id, record, fixed))
    return questions


def _fixed_date(question_date: str, path: Path) -> datetime | None:
    if question_date == QUESTION_DATE_DEFAULT:
        return None
    try:
        return datetime.strptime(str(question_date), "%Y-%m-%d")
    except ValueError:
        raise DataError(f"{path}: dataset.question_date {question_date!r} is neither {QUESTION_DATE_DEFAULT} nor a "
                        f"date written YYYY-MM-DD.") from None


def _text(where: _Where, record: Mapping[str, Any], field: str, within: str = "") -> str:
    """`record[field]` as text; `within` is the record's own path in the conversation (for the sentence)."""
    named = f"{within}.{field}" if within else field
    if field not in record:
        raise where.error(named, "is missing")
    value = record[field]
    if not isinstance(value, str):
        raise where.error(named, f"is {type(value).__name__}, not text")
    if (problem := text_problem(value)) is not None:
        raise where.error(named, problem)
    return value


def _conversation_questions(where: _Where, sample_id: str, record: Mapping[str, Any],
                            fixed: datetime | None) -> list[Question]:
    conversation = record.get("conversation")
    if not isinstance(conversation, dict):
        raise where.error("conversation", "is missing or not an object")
    speakers = (_text(where, conversation, "speaker_a", "conversation"),
                _text(where, conversation, "speaker_b", "conversation"))
    if speakers[0] == speakers[1]:
        raise where.error("conversation.speaker_b", f"names the same speaker as speaker_a ({speakers[0]!r})")
    sessions, dialogue = _sessions(where, conversation, speakers)
    raw_qa = record.get("qa")
    if not isinstance(raw_qa, list):
        raise where.error("qa", "is missing or not a list")
    question_date = fixed or sessions[-1].date
    date_text = question_date.strftime("%Y/%m/%d (%a) %H:%M")
    return [_question(where, sample_id, n, qa, sessions, dialogue, question_date, date_text)
            for n, qa in enumerate(raw_qa)]


def _sessions(where: _Where, conversation: Mapping[str, Any], speakers: tuple[str, str]
              ) -> tuple[tuple[Session, ...], dict[tuple[int, int], tuple[int, int]]]:
    """The conversation's sessions in date order (stable), and each dialogue id (session, turn as numbers) ->
    (session position, turn index)."""
    numbered = sorted((int(m.group(1)), key) for key in conversation if (m := _SESSION.fullmatch(key)))
    if not numbered:
        raise where.error("conversation", "holds no session_N list")
    raw: list[tuple[datetime, int, str, str, list[Any]]] = []
    for number, key in numbered:
        turns = conversation[key]
        if not isinstance(turns, list):
            raise where.error(f"conversation.{key}", f"is {type(turns).__name__}, not a list of turns")
        date_text = _text(where, conversation, f"{key}_date_time", "conversation")
        try:
            date = datetime.strptime(date_text, DATE_FORMAT)
        except ValueError:
            raise where.error(f"conversation.{key}_date_time",
                              f"{date_text!r} is not a date like '1:56 pm on 8 May, 2023'") from None
        raw.append((date, number, key, date_text, turns))
    raw.sort(key=lambda item: item[0])  # stable: sessions of one moment keep their numbers' order
    sessions: list[Session] = []
    dialogue: dict[tuple[int, int], tuple[int, int]] = {}
    for position, (date, number, key, date_text, raw_turns) in enumerate(raw):
        session_id = session_id_for(position)
        turns = []
        for index, item in enumerate(raw_turns):
            field = f"conversation.{key}[{index}]"
            if not isinstance(item, dict):
                raise where.error(field, f"is {type(item).__name__}, not an object")
            speaker = _text(where, item, "speaker", field)
            if speaker not in speakers:
                raise where.error(f"{field}.speaker", f"{speaker!r} is neither speaker_a nor speaker_b")
            text = _text(where, item, "text", field)
            caption = item.get("blip_caption")
            if caption is not None:
                if not isinstance(caption, str):
                    raise where.error(f"{field}.blip_caption", f"is {type(caption).__name__}, not text")
                text = f"{text} and shared {caption}."
            dia_id = item.get("dia_id")
            found = _DIALOGUE.fullmatch(dia_id) if isinstance(dia_id, str) else None
            if found:
                dialogue.setdefault((int(found.group(1)), int(found.group(2))), (position, index))
            turns.append(Turn(turn_id=turn_id_in(session_id, index), role=_ROLES[speakers.index(speaker)],
                              content=text, speaker=speaker))
        sessions.append(Session(session_id=session_id, date=date, date_text=date_text, turns=tuple(turns),
                                original_id=key, is_evidence=False))
    return tuple(sessions), dialogue


def evidence_ids(entries: Any) -> list[tuple[int, int]]:
    """The dialogue ids (session, turn, as numbers) an `evidence` list names, in order, however an entry is
    written (`D1:3`, `D8:6; D9:17`, `D:11:26`, `D30:05`)."""
    if not isinstance(entries, list):
        return []
    found: list[tuple[int, int]] = []
    for entry in entries:
        if isinstance(entry, str):
            found.extend((int(a), int(b)) for a, b in _DIALOGUE.findall(entry))
    return list(dict.fromkeys(found))


def _question(where: _Where, sample_id: str, n: int, qa: Any, sessions: tuple[Session, ...],
              dialogue: Mapping[tuple[int, int], tuple[int, int]], question_date: datetime,
              date_text: str) -> Question:
    field = f"qa[{n}]"
    if not isinstance(qa, dict):
        raise where.error(field, f"is {type(qa).__name__}, not an object")
    category = qa.get("category")
    if isinstance(category, bool) or category not in CATEGORIES:
        raise where.error(f"{field}.category", f"{category!r} is not a LoCoMo category (1-5)")
    question = _text(where, qa, "question", field)
    if not question.strip():
        raise where.error(f"{field}.question", "is empty")
    answer = qa.get("answer")
    if answer is None and category == 5:
        answer = NOT_MENTIONED
    if isinstance(answer, bool) or not isinstance(answer, (str, int)):
        raise where.error(f"{field}.answer", "is missing" if answer is None else
                          f"is {type(answer).__name__}, not text or an integer")
    answer = str(answer)
    if (problem := text_problem(answer)) is not None:
        raise where.error(f"{field}.answer", problem)
    if "evidence" in qa and not isinstance(qa["evidence"], list):
        raise where.error(f"{field}.evidence", f"is {type(qa['evidence']).__name__}, not a list")
    places = {dialogue[key] for key in evidence_ids(qa.get("evidence")) if key in dialogue}
    marked = tuple(_marked(session, position, places) for position, session in enumerate(sessions))
    return Question(
        question_id=f"{sample_id}-q{n:03d}", question_type=CATEGORIES[category], question=question, answer=answer,
        question_date=question_date, question_date_text=date_text, sessions=marked,
        answer_session_ids=tuple(s.original_id for s in marked if s.is_evidence),
        abstains=category == 5, benchmark="locomo",
    )


def _marked(session: Session, position: int, places: set[tuple[int, int]]) -> Session:
    """The session with this question's evidence flags (the shared session itself when it holds none)."""
    hits = {index for at, index in places if at == position}
    if not hits:
        return session
    turns = tuple(Turn(t.turn_id, t.role, t.content, True, t.speaker) if i in hits else t
                  for i, t in enumerate(session.turns))
    return Session(session.session_id, session.date, session.date_text, turns, session.original_id, True)


def unresolved_evidence(data: Any) -> int:
    """How many dialogue ids in the file's `evidence` lists name no turn (dropped by the loader)."""
    count = 0
    for record in data if isinstance(data, list) else ():
        conversation = record.get("conversation") if isinstance(record, dict) else None
        if not isinstance(conversation, dict):
            continue
        known = {(int(m.group(1)), int(m.group(2)))
                 for key, turns in conversation.items() if _SESSION.fullmatch(key) and isinstance(turns, list)
                 for turn in turns if isinstance(turn, dict) and isinstance(turn.get("dia_id"), str)
                 and (m := _DIALOGUE.fullmatch(turn["dia_id"]))}
        for qa in record.get("qa") or ():
            if isinstance(qa, dict):
                entries = qa.get("evidence") if isinstance(qa.get("evidence"), list) else []
                raw = [e for e in entries if isinstance(e, str)]
                count += sum(1 for key in evidence_ids(raw) if key not in known)
                count += sum(1 for e in raw if not _DIALOGUE.search(e))
    return count


def _parse(data: bytes, path: Path, options: Mapping[str, Any]) -> list[Question]:
    from lme.data.benchmark import json_document

    return parse_locomo(json_document(data, path), path, str(options.get("question_date", QUESTION_DATE_DEFAULT)))


def _benchmark() -> Any:
    from lme.data.benchmark import Benchmark

    return Benchmark(
        name="locomo", title="LoCoMo", parse=_parse, categories=tuple(CATEGORIES.values()), abstaining=(ADVERSARIAL,),
        speakers="two-people", default_judge="locomo_j", fetch="locomo",
        official_measures=("locomo.f1", "locomo.j_without_adversarial"),
        options={"question_date": QUESTION_DATE_DEFAULT},
        # under LongMemEval's templates: temporal questions take its temporal template, the others its generic one,
        # adversarial ones (abstentions) its abstention template
        judge_templates={"temporal": "temporal_reasoning"},
    )


BENCHMARK = _benchmark()
