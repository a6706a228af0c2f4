"""Writes the bad-input corpus next to this file: `python tests/data/bad_inputs/make_corpus.py`.

Every file is tiny and synthetic (the text was written for lme's tests). Each
breaks one rule of the LongMemEval format; `expected.json` maps every file to
what the one-sentence error must contain (the file name, the question id when
the file has one to name, the field) and says what is wrong with it.
The output is deterministic: running this again rewrites the same bytes.
"""

from __future__ import annotations

import copy
import gzip
import json
import lzma
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def record(question_id: str) -> dict[str, Any]:
    return {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": "Which instrument did I start learning this spring?",
        "answer": "The cello",
        "question_date": "2024/04/20 (Sat) 10:15",
        "haystack_dates": ["2024/03/02 (Sat) 09:00", "2024/03/09 (Sat) 17:45"],
        "haystack_session_ids": ["filler_soup", "answer_cello"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "Can you give me a quick lentil soup recipe?"},
                {"role": "assistant", "content": "Simmer red lentils with onion, cumin and stock for twenty minutes."},
            ],
            [
                {"role": "user", "content": "I had my first cello lesson today.", "has_answer": True},
                {"role": "assistant", "content": "Congratulations! Practise open strings slowly at first."},
            ],
        ],
        "answer_session_ids": ["answer_cello"],
    }


def good_pair() -> list[dict[str, Any]]:
    return [record("bi001"), record("bi002")]


def second(change: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Two records; `change` breaks the second (so the message must name bi002, not the first record)."""
    records = good_pair()
    change(records[1])
    return records


def setter(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(rec: dict[str, Any]) -> None:
        rec[field] = copy.deepcopy(value)

    return change


def deleter(field: str) -> Callable[[dict[str, Any]], None]:
    def change(rec: dict[str, Any]) -> None:
        del rec[field]

    return change


def turn_change(session: int, turn: int, change: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def apply(rec: dict[str, Any]) -> None:
        rec["haystack_sessions"][session][turn] = change(rec["haystack_sessions"][session][turn])

    return apply


def dumps(data: Any) -> bytes:
    return json.dumps(data, indent=1).encode("utf-8")


# name -> (bytes, what is wrong, substrings the message must contain besides the file name)
CASES: dict[str, tuple[bytes, str, list[str]]] = {}


def case(name: str, content: bytes, what: str, expect: list[str]) -> None:
    CASES[name] = (content, what, expect)


case("empty_file.json", b"", "a 0-byte file", ["is empty"])
case("whitespace_only.json", b" \n\n ", "only whitespace", ["is empty"])
case("truncated.json", dumps(good_pair())[:700], "JSON cut off in the middle of a record", ["not valid JSON"])
case("trailing_garbage.json", dumps(good_pair()) + b"\n]", "a stray bracket after the array", ["not valid JSON"])
case("not_xz.json.xz", dumps(good_pair()), "plain JSON under an .xz name", ["cannot be read as xz"])
case("not_gzip.json.gz", dumps(good_pair()), "plain JSON under a .gz name", ["cannot be read as gzip"])
case(
    "truncated_stream.json.xz",
    lzma.compress(dumps(good_pair()))[:120],
    "an xz stream cut short",
    ["cannot be read as xz"],
)
case(
    "truncated_inside.json.xz",
    lzma.compress(dumps(good_pair())[:500]),
    "a complete xz stream holding truncated JSON",
    ["not valid JSON"],
)
case(
    "truncated_inside.json.gz",
    gzip.compress(dumps(good_pair())[:500], mtime=0),
    "a complete gzip stream holding truncated JSON",
    ["not valid JSON"],
)
case("empty_array.json", b"[]\n", "an empty array", ["holds no question"])
case(
    "non_utf8.json",
    dumps(good_pair()).replace(b"lentil soup", b"lentil soup \xe0 la carte"),
    "a Latin-1 byte in a turn",
    ["UTF-8", "0xe0"],
)
case(
    "top_level_object.json",
    dumps({"questions": good_pair()}),
    "an object instead of an array",
    ["JSON array", "found dict"],
)
case("top_level_string.json", b'"bi001"\n', "a string instead of an array", ["JSON array", "found str"])
case(
    "record_is_string.json",
    dumps([record("bi001"), "bi002"]),
    "a record that is a string",
    ["record 1", "JSON object", "found str"],
)
case(
    "missing_question_id.json",
    dumps(second(deleter("question_id"))),
    "no question_id",
    ["record 1", "field question_id", "missing"],
)
case(
    "missing_answer.json", dumps(second(deleter("answer"))), "no answer", ["question bi002", "field answer", "missing"]
)
case(
    "missing_haystack_sessions.json",
    dumps(second(deleter("haystack_sessions"))),
    "no history",
    ["question bi002", "field haystack_sessions", "missing"],
)
case(
    "question_id_number.json",
    dumps(second(setter("question_id", 2))),
    "a numeric id",
    ["record 1", "field question_id", "found int"],
)
case(
    "empty_question_id.json",
    dumps(second(setter("question_id", ""))),
    "an empty id",
    ["record 1", "field question_id", "empty"],
)
case(
    "answer_float.json",
    dumps(second(setter("answer", 2.5))),
    "a fractional answer",
    ["question bi002", "field answer", "found float"],
)
case(
    "answer_nan.json",
    dumps(good_pair()).replace(b'"The cello"', b"NaN", 1),
    "NaN as the answer",
    ["question bi001", "field answer", "found float"],
)
case(
    "question_null.json",
    dumps(second(setter("question", None))),
    "a null question",
    ["question bi002", "field question", "found null"],
)
case(
    "answer_session_ids_null.json",
    dumps(second(setter("answer_session_ids", None))),
    "null evidence ids",
    ["question bi002", "field answer_session_ids", "found null"],
)
case(
    "haystack_dates_string.json",
    dumps(second(setter("haystack_dates", "2024/03/02 (Sat) 09:00"))),
    "dates as one string",
    ["question bi002", "field haystack_dates", "found str"],
)
case(
    "session_id_null.json",
    dumps(second(setter("haystack_session_ids", ["filler_soup", None]))),
    "a null session id",
    ["question bi002", "field haystack_session_ids[1]", "found null"],
)
case(
    "mismatched_lengths.json",
    dumps(second(setter("haystack_dates", ["2024/03/02 (Sat) 09:00"]))),
    "one date for two sessions",
    ["question bi002", "field haystack_sessions", "unequal length", "haystack_dates has 1"],
)
case(
    "empty_history.json",
    dumps(second(setter("haystack_sessions", [[], []]))),
    "sessions without turns",
    ["question bi002", "field haystack_sessions", "empty history"],
)
case(
    "bad_question_date.json",
    dumps(second(setter("question_date", "2024-04-20 10:15"))),
    "an ISO date",
    ["question bi002", "field question_date", "2024-04-20 10:15"],
)
case(
    "impossible_haystack_date.json",
    dumps(second(setter("haystack_dates", ["2024/03/02 (Sat) 09:00", "2023/02/30 (Thu) 17:45"]))),
    "February 30",
    ["question bi002", "field haystack_dates[1]", "2023/02/30"],
)
case(
    "bad_weekday.json",
    dumps(second(setter("haystack_dates", ["2024/03/02 (Sbt) 09:00", "2024/03/09 (Sat) 17:45"]))),
    "a misspelt weekday",
    ["question bi002", "field haystack_dates[0]", "unparseable date"],
)
case(
    "session_is_object.json",
    dumps(second(lambda r: r["haystack_sessions"].__setitem__(1, {"turns": []}))),
    "a session that is an object",
    ["question bi002", "field haystack_sessions[1]", "found dict"],
)
case(
    "turn_is_string.json",
    dumps(second(turn_change(0, 1, lambda t: "assistant: Simmer the lentils."))),
    "a turn that is a string",
    ["question bi002", "field haystack_sessions[0][1]", "turn object", "found str"],
)
case(
    "turn_missing_content.json",
    dumps(second(turn_change(1, 0, lambda t: {"role": "user"}))),
    "a turn without content",
    ["question bi002", "field haystack_sessions[1][0].content", "missing"],
)
case(
    "content_null.json",
    dumps(second(turn_change(0, 0, lambda t: {**t, "content": None}))),
    "null content",
    ["question bi002", "field haystack_sessions[0][0].content", "found null"],
)
case(
    "unknown_role.json",
    dumps(second(turn_change(1, 1, lambda t: {**t, "role": "system"}))),
    "role system",
    ["question bi002", "field haystack_sessions[1][1].role", "'system'"],
)
case(
    "has_answer_string.json",
    dumps(second(turn_change(1, 0, lambda t: {**t, "has_answer": "yes"}))),
    "has_answer as text",
    ["question bi002", "field haystack_sessions[1][0].has_answer", "found str"],
)
case(
    "unknown_type.json",
    dumps(second(setter("question_type", "multi-hop"))),
    "a type LongMemEval does not have",
    ["question bi002", "field question_type", "'multi-hop'"],
)
case(
    "duplicate_ids.json",
    dumps([record("bi001"), record("bi002"), record("bi001")]),
    "the same id twice",
    ["question bi001", "field question_id", "duplicate"],
)

# --- text that cannot be written as UTF-8: JSON escapes of lone UTF-16 surrogates --------------------
SURROGATE = ["lone UTF-16 surrogate", "cannot be encoded as UTF-8"]
case(
    "surrogate_question.json",
    dumps(second(setter("question", "Which instrument did I start learning \ud800 this spring?"))),
    "a lone high surrogate escape inside the question",
    ["question bi002", "field question", "\\ud800", *SURROGATE],
)
case(
    "surrogate_answer_end.json",
    dumps(second(setter("answer", "The cello\udbff"))),
    "a lone high surrogate escape at the end of the answer (ijson would read it as '?')",
    ["question bi002", "field answer", "\\udbff", *SURROGATE],
)
case(
    "surrogate_content_low.json",
    dumps(second(turn_change(1, 0, lambda t: {**t, "content": "I had my first \udc00 cello lesson today."}))),
    "a lone low surrogate escape in a turn's content",
    ["question bi002", "field haystack_sessions[1][0].content", "\\udc00", *SURROGATE],
)
case(
    "surrogate_broken_pair.json",
    dumps(second(turn_change(0, 1, lambda t: {**t, "content": "Simmer \ud83dA lentils."}))),
    "a high surrogate followed by a letter, not by its low half",
    ["question bi002", "field haystack_sessions[0][1].content", "\\ud83d", *SURROGATE],
)
case(
    "surrogate_question_id.json",
    dumps(second(setter("question_id", "bi\udfff002"))),
    "a lone surrogate in the question id (the message names the record instead)",
    ["record 1", "field question_id", "\\udfff", *SURROGATE],
)
case(
    "surrogate_session_id.json",
    dumps(second(setter("haystack_session_ids", ["filler_soup", "answer_\ud800"]))),
    "a lone surrogate in a session id",
    ["question bi002", "field haystack_session_ids[1]", *SURROGATE],
)
case(
    "surrogate_date.json",
    dumps(second(setter("question_date", "2024/04/20 (Sat) 10:15\udc00"))),
    "a lone surrogate in the question date",
    ["question bi002", "field question_date", *SURROGATE],
)
case(
    "surrogate_turn_key.json",
    dumps(second(turn_change(0, 0, lambda t: {**t, "note\ud800": "x"}))),
    "a lone surrogate in the key of an extra turn field",
    ["question bi002", "field haystack_sessions[0][0]", "a key holds", *SURROGATE],
)


# --- nesting deeper than any LongMemEval record needs ------------------------------------------------
NESTED = "@@NESTED@@"


def nested(depth: int, change: Callable[[dict[str, Any]], None]) -> bytes:
    """Two records; `change` puts the NESTED marker where `depth` nested arrays go (bi002)."""
    text = json.dumps(second(change), separators=(",", ":"))
    return text.replace(f'"{NESTED}"', "[" * depth + "]" * depth).encode("utf-8")


DEEP = ["nested more than 64 deep"]
case(
    "deep_nesting_question.json.xz",
    lzma.compress(nested(100_000, setter("question", NESTED))),
    "100,000 nested arrays as the question (json.load: RecursionError; ijson.items: memory grows as depth squared)",
    ["question bi002", "field question[0][0][0][0][0]...", *DEEP],
)
case(
    "deep_nesting_content.json",
    nested(1_200, turn_change(1, 1, lambda t: {**t, "content": NESTED})),
    "1,200 nested arrays as a turn's content",
    ["question bi002", "field haystack_sessions[1][1].content", *DEEP],
)
case(
    "deep_nesting_extra_field.json",
    nested(100, setter("metadata", NESTED)),
    "an extra field 100 arrays deep (json.load reads it; a record needs 5 levels)",
    ["question bi002", "field metadata[0][0][0][0][0]...", *DEEP],
)


# --- absurd numbers ------------------------------------------------------------------------------------
BIG = ["integer too large", "at most 15 digits"]


def raw_answer(digits: str) -> bytes:
    return dumps(second(setter("answer", "@@ANSWER@@"))).replace(b'"@@ANSWER@@"', digits.encode("ascii"))


case(
    "answer_5000_digits.json.xz",
    lzma.compress(raw_answer("7" * 5000)),
    "an integer answer of 5,000 digits (json.load: ValueError, over Python's 4,300-digit limit)",
    ["question bi002", "field answer", *BIG],
)
case(
    "answer_25_digits.json",
    raw_answer("1" + "0" * 24),
    "an integer answer of 25 digits (past 64 bits: ijson's parser overflows)",
    ["question bi002", "field answer", *BIG],
)
case(
    "answer_16_digits.json",
    raw_answer("-1" + "0" * 15),
    "an integer answer of 16 digits",
    ["question bi002", "field answer", *BIG],
)
case(
    "session_id_20_digits.json",
    dumps(second(setter("haystack_session_ids", ["filler_soup", 10**19]))),
    "an integer session id of 20 digits",
    ["question bi002", "field haystack_session_ids[1]", *BIG],
)


# --- empty answers -------------------------------------------------------------------------------------
case(
    "answer_empty.json",
    dumps(second(setter("answer", ""))),
    "an empty answer (the offline judge would call any response correct)",
    ["question bi002", "field answer", "empty"],
)
case(
    "answer_whitespace.json",
    dumps(second(setter("answer", " \n\t "))),
    "an answer of only whitespace",
    ["question bi002", "field answer", "empty"],
)
case(
    "encoded_surrogate_bytes.json",
    dumps(good_pair()).replace(b"quick lentil", b"quick \xed\xa0\x80 lentil"),
    "a surrogate written as raw (CESU-8) bytes, which UTF-8 forbids",
    ["question bi001", "UTF-8", "0xed"],
)


def main() -> None:
    manifest = {}
    for name, (content, what, expect) in CASES.items():
        (HERE / name).write_bytes(content)
        manifest[name] = {"what": what, "expect": [name, *expect]}
    (HERE / "expected.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(CASES)} files and expected.json to {HERE}")


if __name__ == "__main__":
    main()
