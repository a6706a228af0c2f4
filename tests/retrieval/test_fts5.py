"""BM25 over turns with SQLite FTS5, on small written histories and the real mini file."""

from __future__ import annotations

import sqlite3
import time

import pytest

from lme.data.load import load_questions
from lme.util.errors import LmeError
from lme.retrieval.base import Ranking, Retriever
from lme.retrieval.fts5 import (
    FTS5Retriever,
    TurnIndex,
    build_index,
    insert_statements,
    match_expression,
    query_tokens,
    search,
)
from histories import make_question
from shared_data import MINI, needs


FILLER = [
    [("user", "I baked a loaf of sourdough bread this morning."), ("assistant", "Sourdough needs a lively starter.")],
    [("user", "My cat knocked a plant off the shelf."), ("assistant", "Cats love pushing things off ledges.")],
    [("user", "Can you suggest a good hiking trail near the lake?"), ("assistant", "The ridge loop has a fine view.")],
    [
        ("user", "I finally bought a blue bicycle from the shop downtown."),
        ("assistant", "Enjoy riding your new bicycle!"),
    ],
    [("user", "The weather has been rainy all week."), ("assistant", "Rainy weeks are good for reading.")],
]


def test_fts5_retriever_satisfies_protocol() -> None:
    retriever: Retriever = FTS5Retriever()
    assert retriever.name == "bm25"
    assert FTS5Retriever(name="lexical").name == "lexical"


def test_turn_holding_query_words_ranks_first() -> None:
    question = make_question("Where did I buy my blue bicycle?", FILLER)
    ranking = FTS5Retriever().rank(question, 10)
    assert isinstance(ranking, Ranking)
    assert ranking.retriever == "bm25"
    assert ranking.turn_ids[0] == "s0003:0"
    assert "s0003:1" in ranking.turn_ids  # the assistant turn mentions the bicycle too
    assert len(ranking.turn_ids) == len(ranking.scores)


def test_scores_positive_and_descending() -> None:
    question = make_question("blue bicycle sourdough rainy week", FILLER)
    ranking = FTS5Retriever().rank(question, 10)
    assert ranking.scores
    assert all(score > 0 for score in ranking.scores)
    assert list(ranking.scores) == sorted(ranking.scores, reverse=True)


def test_rare_term_outranks_common_term() -> None:
    # "apple" is in 3 of 10 turns, "zebra" in one; every turn has the same length.
    sessions = [
        [("user", "apple pie was lovely today"), ("assistant", "apple season starts soon then")],
        [("user", "apple cider is sweet stuff"), ("assistant", "zebra stripes are quite unique")],
        [("user", "the train left rather late"), ("assistant", "trains run late on sundays")],
        [("user", "my garden grows many beans"), ("assistant", "beans need sunny warm spots")],
        [("user", "books pile up on my desk"), ("assistant", "a shelf would help with that")],
    ]
    question = make_question("apple zebra", sessions)
    ranking = FTS5Retriever().rank(question, 10)
    assert ranking.turn_ids[0] == "s0001:1"
    assert set(ranking.turn_ids[1:]) == {"s0000:0", "s0000:1", "s0001:0"}
    assert ranking.scores[0] > ranking.scores[1]


@pytest.mark.parametrize(
    "text",
    [
        'What\'s "AND" OR NOT near(x)?*',
        'NEAR(a b, 2) AND "unbalanced',
        "content: bicycle^ -shop + {turn_id} col:val",
        "*",
        "'; DROP TABLE turns; --",
        'say ""hi"" \\ / ( ) [ ] < > = ! @ # $ % & |',
        "AND OR NOT NEAR",
    ],
)
def test_punctuation_and_operators_do_not_break(text: str) -> None:
    question = make_question(text, FILLER + [[("user", "Is the shop near the lake, and what's open?")]])
    ranking = FTS5Retriever().rank(question, 5)
    assert len(ranking.turn_ids) <= 5
    assert len(ranking.turn_ids) == len(ranking.scores)


def test_operator_words_are_searched_as_words() -> None:
    question = make_question('What\'s "AND" OR NOT near(x)?*', FILLER + [[("user", "Nothing is near here.")]])
    ranking = FTS5Retriever().rank(question, 5)
    # "near" matches the hiking turn and the new one; the shorter new turn wins.
    assert ranking.turn_ids[0] == "s0005:0"
    assert "s0002:0" in ranking.turn_ids


def test_query_tokens_and_expression() -> None:
    assert query_tokens('What\'s "AND" what, x_y 42 café?') == ["What", "s", "AND", "x", "y", "42", "café"]
    assert match_expression("a-b a") == '"a" OR "b"'
    assert match_expression("?! ... ***") is None


@pytest.mark.parametrize("text", ["", "   ", "?! ... *** --", "___"])
def test_query_without_tokens_gives_empty_ranking(text: str) -> None:
    ranking = FTS5Retriever().rank(make_question(text, FILLER), 10)
    assert ranking == Ranking(retriever="bm25", turn_ids=(), scores=())


def test_no_matching_turn_gives_empty_ranking() -> None:
    ranking = FTS5Retriever().rank(make_question("xylophone", FILLER), 10)
    assert ranking.turn_ids == ()


def test_top_k_respected() -> None:
    sessions = [[("user", f"note number {index} about tea")] for index in range(8)]
    question = make_question("tea", sessions)
    retriever = FTS5Retriever()
    assert len(retriever.rank(question, 3).turn_ids) == 3
    assert len(retriever.rank(question, 100).turn_ids) == 8
    assert retriever.rank(question, 0).turn_ids == ()
    with pytest.raises(ValueError):
        retriever.rank(question, -1)


def test_ties_follow_history_order_and_are_deterministic() -> None:
    sessions = [[("user", "same words here"), ("assistant", "other text entirely")] for _ in range(4)]
    question = make_question("same words", sessions)
    first = FTS5Retriever().rank(question, 10)
    assert first.turn_ids == ("s0000:0", "s0001:0", "s0002:0", "s0003:0")
    assert len(set(first.scores)) == 1
    assert FTS5Retriever().rank(question, 10) == first
    assert FTS5Retriever().rank(question, 2).turn_ids == ("s0000:0", "s0001:0")


def test_porter_stemming_with_default_tokenizer() -> None:
    question = make_question("running?", [[("user", "I run every morning by the river.")]] + FILLER)
    assert FTS5Retriever().rank(question, 5).turn_ids[:1] == ("s0000:0",)
    # Without the porter stemmer the inflected form does not match.
    assert "s0000:0" not in FTS5Retriever(tokenizer="unicode61").rank(question, 5).turn_ids


def test_diacritics_and_non_ascii() -> None:
    sessions = FILLER + [[("user", "We met at the cafe in Zurich."), ("assistant", "東京 is lovely in spring.")]]
    question = make_question("Which café in Zürich?", sessions)
    assert FTS5Retriever().rank(question, 3).turn_ids[0] == "s0005:0"
    assert FTS5Retriever().rank(make_question("東京", sessions), 3).turn_ids == ("s0005:1",)


def test_bad_tokenizer_is_one_clear_error() -> None:
    with pytest.raises(LmeError, match="tokenizer 'no_such_tokenizer'"):
        FTS5Retriever(tokenizer="no_such_tokenizer")


def test_index_can_be_reused_across_queries() -> None:
    question = make_question("unused", FILLER)
    index = build_index(question.turns())
    try:
        assert search(index, "downtown", 1)[0][0] == "s0003:0"
        assert search(index, "starter", 1)[0][0] == "s0000:1"
        assert search(index, "?!", 5) == []
    finally:
        index.close()


def test_the_index_keeps_no_copy_of_the_text() -> None:
    """Contentless: the table answers MATCH and bm25 but holds no turn text (a history is not copied into it)."""
    question = make_question("unused", FILLER)
    index = build_index(question.turns())
    try:
        rows = index.conn.execute("SELECT rowid, content FROM turns ORDER BY rowid").fetchall()
        assert [rowid for rowid, _ in rows] == list(range(len(question.turns())))
        assert {content for _, content in rows} == {None}
        assert index.turn_ids == tuple(turn.turn_id for turn in question.turns())
    finally:
        index.close()


@needs(MINI)
def test_recall_at_100_on_mini_file() -> None:
    questions = load_questions(MINI)
    retriever = FTS5Retriever()
    hits = 0
    answerable = [question for question in questions if not question.is_abstention]
    elapsed = []
    for question in questions:
        start = time.perf_counter()
        ranking = retriever.rank(question, 100)
        elapsed.append(time.perf_counter() - start)
        assert len(ranking.turn_ids) <= 100
        assert len(set(ranking.turn_ids)) == len(ranking.turn_ids)
        if question.is_abstention:
            continue
        evidence = {turn.turn_id for turn in question.turns() if turn.has_answer}
        hits += bool(evidence & set(ranking.turn_ids))
    mean_ms = 1000 * sum(elapsed) / len(elapsed)
    print(
        f"\nFTS5 BM25 recall@100 (any has_answer turn): {hits}/{len(answerable)} non-abstention questions; "
        f"ranking {mean_ms:.1f} ms/question (max {1000 * max(elapsed):.1f} ms)"
    )
    assert len(answerable) == 12
    assert hits >= 11  # measured 12/12
    assert mean_ms < 500  # measured ~15 ms; loose so a slow machine does not fail it


def _row_by_row_index(turns) -> sqlite3.Connection:
    """The plain way to build the index (one INSERT per turn, the text and turn id stored in the table, as lme
    built it before its index became contentless): the reference for rows, tokens and scores."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE turns USING fts5(turn_id UNINDEXED, content, tokenize = 'porter unicode61')")
    with conn:
        conn.executemany("INSERT INTO turns(rowid, turn_id, content) VALUES (?, ?, ?)",
                         ((i, turn.turn_id, turn.content) for i, turn in enumerate(turns)))
    return conn


def _reference_search(conn: sqlite3.Connection, query: str, top_k: int) -> list[tuple[str, float]]:
    """The reference's ranking, its turn ids read from the table."""
    rows = conn.execute("SELECT turn_id, bm25(turns) AS score FROM turns WHERE turns MATCH ? ORDER BY score, rowid "
                        "LIMIT ?", (match_expression(query), top_k)).fetchall()
    return [(turn_id, -score) for turn_id, score in rows]


def _instances(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    """Every token instance the index holds: (term, rowid, column, offset), in order."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.instances USING fts5vocab(main, turns, 'instance')")
    return conn.execute("SELECT term, doc, col, offset FROM temp.instances ORDER BY term, doc, col, offset").fetchall()


def _varints(blob: bytes) -> list[int]:
    """SQLite's varints (7 bits a byte, high bit set on all but the last byte of each), as FTS5's docsize holds."""
    values, value = [], 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            values.append(value)
            value = 0
    return values


def _lengths(conn: sqlite3.Connection) -> list[tuple[int, int]]:
    """Each row's length in tokens in its text column (what bm25 normalises by; the last column), by rowid."""
    return [(rowid, _varints(size)[-1]) for rowid, size in
            conn.execute("SELECT id, sz FROM turns_docsize ORDER BY id").fetchall()]


TRICKY = [
    [("user", 'She said "it\'s fine" \\ then left; 50% of it\nwas\ttabs.'), ("assistant", "")],
    [("user", "Café naïve 東京 emoji 🚲 bicycle, \u2028 line separator"), ("assistant", "[1, 2] {\"a\": 1} ->> $[0]")],
]
WITH_NUL = [[("user", "a NUL \x00 byte in the middle of a bicycle message"), ("assistant", "fine")]]


@needs(MINI)
def test_one_statement_index_equals_the_row_by_row_index() -> None:
    """Every token instance, row length, rowid and score is what one INSERT per turn into a table that stores the
    text gives, on tricky text (quotes, backslashes, JSON-like text, a NUL byte) and on real histories."""
    tricky = make_question("tricky", TRICKY + FILLER)
    with_nul = make_question("nul", WITH_NUL + FILLER)
    for question in [tricky, with_nul, *load_questions(MINI)[:4]]:
        turns = question.turns()
        ours, reference = build_index(turns), _row_by_row_index(turns)
        try:
            assert _instances(ours.conn) == _instances(reference)
            assert len({doc for _, doc, _, _ in _instances(ours.conn)}) > 0
            assert _lengths(ours.conn) == _lengths(reference)
            assert len(_lengths(ours.conn)) == len(turns)
            queries = (question.question, "bicycle tabs fine", "emoji café")
            for query in queries:
                assert search(ours, query, 100) == _reference_search(reference, query, 100)
            assert any(search(ours, query, 100) for query in queries)
        finally:
            ours.close()
            reference.close()


def test_a_history_beyond_sqlites_limit_on_bound_values_is_inserted_in_several_statements() -> None:
    """Each statement binds at most the limit's values (2 per turn); together they insert every turn once, in
    order, and the index ranks as one INSERT per turn does. A limit below one row still inserts one per statement."""
    question = make_question("bicycle", TRICKY + FILLER)
    turns = question.turns()
    for limit, per_statement in ((5, 2), (2, 1), (1, 1), (10_000, len(turns))):
        statements = insert_statements(turns, limit)
        assert [len(values) // 2 for _, values in statements] == \
            [min(per_statement, len(turns) - start) for start in range(0, len(turns), per_statement)]
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE VIRTUAL TABLE turns USING fts5(content, tokenize = 'porter unicode61', content = '')")
        for statement, values in statements:
            assert statement.count("?") == len(values) <= max(limit, 2)
            conn.execute(statement, values)
        index = TurnIndex(conn, tuple(turn.turn_id for turn in turns))
        reference = _row_by_row_index(turns)
        try:
            assert _instances(conn) == _instances(reference)
            assert _lengths(conn) == _lengths(reference)
            assert search(index, "bicycle downtown", 10) == _reference_search(reference, "bicycle downtown", 10)
        finally:
            conn.close()
            reference.close()


def test_build_index_inserts_in_chunks_when_sqlite_allows_few_bound_values(monkeypatch) -> None:
    """build_index asks the connection for its limit: with a limit of 9 values (4 turns per INSERT) the index is
    the same as with one statement."""
    question = make_question("bicycle", FILLER)
    whole = build_index(question.turns())
    real_connect = sqlite3.connect

    def low_limit(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 9)
        return conn

    monkeypatch.setattr(sqlite3, "connect", low_limit)
    chunked = build_index(question.turns())
    try:
        assert chunked.conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) == 9
        assert _instances(chunked.conn) == _instances(whole.conn)
        assert len(_lengths(chunked.conn)) == len(_lengths(whole.conn)) == len(question.turns()) > 4
        assert search(chunked, "bicycle downtown", 10) == search(whole, "bicycle downtown", 10)
    finally:
        chunked.close()
        whole.close()
