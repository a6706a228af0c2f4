"""The retrieval baseline memory: packing under a UTF-8 byte budget, block format, no label leaks."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lme.util.budget import utf8_len
from lme.data.dates import LME_DATE_FORMAT
from lme.data.load import load_questions, parse_question
from lme.data.records import Question
from lme.memory.base import Memory, MemoryBuilder
from lme.memory.retrieved import RetrievedMemoryBuilder, pack_blocks
from lme.retrieval.base import Ranking
from lme.retrieval.fts5 import FTS5Retriever
from shared_data import MINI, needs
FIRST_DAY = datetime(2023, 5, 20, 2, 21)  # a Saturday
BLOCK = re.compile(r"^\[(s\d{4}:\d+)\] \d{4}-\d{2}-\d{2} \([A-Z][a-z]+day\) \d{2}:\d{2} (user|assistant): ", re.M)


def make_question(question: str, sessions: list[list[tuple[str, str]]], evidence: tuple[int, ...] = ()) -> Question:
    """A history of `sessions` (lists of (role, content)), one day apart; `evidence` sessions get
    label-leaking original ids and `has_answer` on their user turns."""
    record = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": question,
        "answer": "x",
        "question_date": "2023/06/30 (Fri) 10:00",
        "haystack_dates": [(FIRST_DAY + timedelta(days=day)).strftime(LME_DATE_FORMAT) for day in range(len(sessions))],
        "haystack_session_ids": [
            f"answer_deadbeef_{index}" if index in evidence else f"filler_{index}" for index in range(len(sessions))
        ],
        "haystack_sessions": [
            [
                {"role": role, "content": content, "has_answer": index in evidence and role == "user"}
                for role, content in turns
            ]
            for index, turns in enumerate(sessions)
        ],
        "answer_session_ids": [f"answer_deadbeef_{index}" for index in evidence],
    }
    return parse_question(record, Path("synthetic.json"), 0)


class FixedOrderRetriever:
    """A real Retriever that ranks the turns in a given order (to control packing exactly)."""

    name = "fixed"

    def __init__(self, order: list[str]) -> None:
        self.order = order

    def rank(self, question: Question, top_k: int) -> Ranking:
        ids = tuple(self.order[:top_k])
        return Ranking(retriever=self.name, turn_ids=ids, scores=tuple(float(-i) for i in range(len(ids))))


# --- pack_blocks -----------------------------------------------------------------------------


def test_pack_blocks_counts_separators() -> None:
    blocks = [("a", "x" * 10), ("b", "y" * 10), ("c", "z" * 10)]
    text, included, skipped = pack_blocks(blocks, 22)  # 10 + 2 + 10
    assert text == "x" * 10 + "\n\n" + "y" * 10
    assert (included, skipped) == (["a", "b"], ["c"])
    text, included, _ = pack_blocks(blocks, 21)
    assert (text, included) == ("x" * 10, ["a"])
    text, included, _ = pack_blocks(blocks, 34, separator="--")
    assert text == "x" * 10 + "--" + "y" * 10 + "--" + "z" * 10


def test_pack_blocks_skips_oversize_and_keeps_trying() -> None:
    blocks = [("small1", "a" * 5), ("huge", "b" * 100), ("small2", "c" * 5), ("mid", "d" * 20), ("small3", "e")]
    text, included, skipped = pack_blocks(blocks, 20)
    assert included == ["small1", "small2", "small3"]
    assert skipped == ["huge", "mid"]
    assert text == "aaaaa\n\nccccc\n\ne"
    assert utf8_len(text) <= 20


def test_pack_blocks_edge_cases() -> None:
    assert pack_blocks([], 100) == ("", [], [])
    assert pack_blocks([("a", "x")], 0) == ("", [], ["a"])
    assert pack_blocks([("a", "")], 0) == ("", ["a"], [])
    with pytest.raises(ValueError):
        pack_blocks([("a", "x")], -1)


def test_pack_blocks_counts_bytes_not_characters() -> None:
    emoji = "🙂" * 5  # 20 bytes, 5 characters
    text, included, skipped = pack_blocks([("e", emoji), ("c", "é" * 3)], 25)  # 20 + 2 + 6 > 25
    assert (text, included, skipped) == (emoji, ["e"], ["c"])
    text, included, _ = pack_blocks([("e", emoji), ("c", "é" * 3)], 28)
    assert included == ["e", "c"] and utf8_len(text) == 28


def test_pack_blocks_budget_never_exceeded_random() -> None:
    rng = random.Random(7)
    alphabet = ["a", "Z", " ", "é", "ß", "中", "🙂", "👩‍👩‍👧", "\n"]
    for _ in range(300):
        blocks = [
            (f"b{i}", "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))))
            for i in range(rng.randrange(0, 12))
        ]
        max_bytes = rng.randrange(0, 300)
        text, included, skipped = pack_blocks(blocks, max_bytes)
        assert utf8_len(text) <= max_bytes
        assert included + skipped != [] or blocks == []
        assert sorted(included + skipped, key=lambda b: int(b[1:])) == [b for b, _ in blocks]
        by_id = dict(blocks)
        assert text == "\n\n".join(by_id[b] for b in included)
        # Greedy: every skipped block really did not fit when it was tried.
        used, count = 0, 0
        for block_id, block in blocks:
            cost = utf8_len(block) + (2 if count else 0)
            if block_id in included:
                used += cost
                count += 1
            else:
                assert used + cost > max_bytes


# --- RetrievedMemoryBuilder -----------------------------------------------------------------

SESSIONS = [
    [("user", "I adopted a beagle named Pixel."), ("assistant", "Beagles are curious dogs.")],
    [("user", "Pixel chewed my favourite café slippers 🙂"), ("assistant", "Try giving Pixel chew toys.")],
    [("user", "Planning a trip to Lisbon in autumn."), ("assistant", "Lisbon has lovely tiled facades.")],
]


def test_builder_satisfies_protocol_and_formats_blocks() -> None:
    question = make_question("Which slippers did Pixel chew?", SESSIONS, evidence=(1,))
    builder: MemoryBuilder = RetrievedMemoryBuilder(FTS5Retriever())
    memory = builder.build(question)
    assert isinstance(memory, Memory)
    assert builder.name == "retrieved"
    assert memory.turn_ids[0] == "s0001:0"
    assert memory.text.startswith(
        "[s0001:0] 2023-05-21 (Sunday) 02:21 user: Pixel chewed my favourite café slippers 🙂"
    )
    blocks = memory.text.split("\n\n")
    assert len(blocks) == len(memory.turn_ids)
    for block, turn_id in zip(blocks, memory.turn_ids):
        match = BLOCK.match(block)
        assert match and match.group(1) == turn_id
    assert memory.n_bytes == utf8_len(memory.text)
    assert memory.skipped_turn_ids == ()


def test_builder_never_leaks_original_ids_or_evidence_flags() -> None:
    question = make_question("Pixel beagle Lisbon trip", SESSIONS, evidence=(0, 1, 2))
    memory = RetrievedMemoryBuilder(FTS5Retriever()).build(question)
    assert len(memory.turn_ids) >= 4
    for forbidden in ("answer_", "deadbeef", "filler_", "has_answer", "is_evidence", "True"):
        assert forbidden not in memory.text


def test_builder_keeps_rank_order_and_skips_oversize_turns() -> None:
    sessions = [
        [("user", "short one"), ("assistant", "Z" * 500)],
        [("user", "short two 🙂🙂"), ("assistant", "é" * 100)],
    ]
    question = make_question("unused", sessions)
    order = ["s0001:0", "s0000:1", "s0000:0", "s0001:1"]
    block_bytes = utf8_len("[s0001:0] 2023-05-21 (Sunday) 02:21 user: short two 🙂🙂")
    max_bytes = block_bytes + 2 + utf8_len("[s0000:0] 2023-05-20 (Saturday) 02:21 user: short one") + 2 + 100
    memory = RetrievedMemoryBuilder(FixedOrderRetriever(order), max_bytes=max_bytes).build(question)
    assert memory.turn_ids == ("s0001:0", "s0000:0")
    assert memory.skipped_turn_ids == ("s0000:1", "s0001:1")  # 500 ASCII bytes, then 200 bytes of "é"
    assert memory.n_bytes == utf8_len(memory.text) <= max_bytes
    assert memory.notes["retriever"] == "fixed"


@pytest.mark.parametrize("max_bytes", [0, 1, 60, 61, 62, 120, 150, 400, 10_000])
def test_builder_budget_never_exceeded_with_multibyte_text(max_bytes: int) -> None:
    sessions = [
        [("user", "naïve façade 🙂" * (i + 1)), ("assistant", "👩‍👩‍👧 中文 " * (3 - i % 3))]
        for i in range(6)
    ]
    question = make_question("unused", sessions)
    order = [turn.turn_id for turn in question.turns()]
    memory = RetrievedMemoryBuilder(FixedOrderRetriever(order), max_bytes=max_bytes).build(question)
    assert memory.n_bytes == utf8_len(memory.text) <= max_bytes
    assert set(memory.turn_ids) | set(memory.skipped_turn_ids) == set(order)
    assert [t for t in order if t in memory.turn_ids] == list(memory.turn_ids)


def test_builder_respects_top_k() -> None:
    sessions = [[("user", f"tea note {i}"), ("assistant", f"tea reply {i}")] for i in range(10)]
    question = make_question("tea", sessions)
    memory = RetrievedMemoryBuilder(FTS5Retriever(), top_k=3).build(question)
    assert len(memory.turn_ids) + len(memory.skipped_turn_ids) == 3
    # Even a retriever that returns more than asked is cut to top_k.
    order = [turn.turn_id for turn in question.turns()]

    class Greedy(FixedOrderRetriever):
        def rank(self, question: Question, top_k: int) -> Ranking:
            return super().rank(question, len(self.order))

    memory = RetrievedMemoryBuilder(Greedy(order), top_k=4).build(question)
    assert memory.turn_ids == tuple(order[:4])


def test_builder_empty_ranking_gives_empty_memory() -> None:
    memory = RetrievedMemoryBuilder(FTS5Retriever()).build(make_question("?!", SESSIONS))
    assert (memory.text, memory.n_bytes, memory.turn_ids, memory.skipped_turn_ids) == ("", 0, (), ())


def test_builder_rejects_unknown_turn_ids() -> None:
    question = make_question("unused", SESSIONS)
    with pytest.raises(ValueError, match="s0099:0"):
        RetrievedMemoryBuilder(FixedOrderRetriever(["s0000:0", "s0099:0"])).build(question)


@needs(MINI)
def test_mini_file_memories_fit_the_budget() -> None:
    builder = RetrievedMemoryBuilder(FTS5Retriever())
    for question in load_questions(MINI):
        memory = builder.build(question)
        assert memory.text
        assert memory.n_bytes == utf8_len(memory.text) <= 96_000
        assert 0 < len(memory.turn_ids) <= 100
        assert len(memory.turn_ids) + len(memory.skipped_turn_ids) <= 100
        position = -1
        for turn_id in memory.turn_ids:  # every included turn has its header, in rank order
            found = memory.text.find(f"[{turn_id}] ", position + 1)
            assert found > position and (found == 0 or memory.text[found - 2 : found] == "\n\n")
            assert BLOCK.match(memory.text, found)
            position = found
        assert "has_answer" not in memory.text
        for session in question.sessions:
            assert session.original_id not in memory.text
