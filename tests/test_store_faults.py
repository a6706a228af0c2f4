"""Every fault of lme's SQLite stores (call cache, ledger, embedding cache, trace text registry) is one sentence
naming the file (`lme.util.sqlite.StoreError`, an `LmeError`: exit 2 through the CLI), and the faulty file is left
as it was: damaged, zeroed, truncated, random bytes, another program's tables, a directory in its place, an
unreadable file (EIO, a symlink loop), read-only, locked past the busy timeout, a full disk (RLIMIT_FSIZE)
at creation and during use, the file replaced during use. Real files in tmp_path, no mocks."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from full_disk import file_size_limit

from lme.util.errors import LmeError
from lme.models.cache import CallCache
from lme.models.ledger import Ledger
from lme.retrieval.embedding_cache import EmbeddingCache, embedding_key, export_embeddings
from lme.util.sqlite import BUSY_TIMEOUT_ENV, StoreError, busy_timeout_s
from lme.tracking.traces import TextRegistry

DIM = 8
MODEL = "test/hash-model"


def hash_vector(text: str) -> np.ndarray:
    digest = hashlib.sha256(text.encode()).digest()
    return np.frombuffer(digest[:DIM], dtype=np.uint8).astype(np.float32) / 256 + 0.01


class Encoder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([hash_vector(text) for text in texts]) if texts else np.zeros((0, DIM), np.float32)


# -- each store: fill a valid file, and open it and use it (a read and a write) ------------------------------


def _calls_use(path: Path, n: int = 1) -> None:
    cache = CallCache(path)
    try:
        cache.get("k0")
        for i in range(n):
            cache.put(f"new{i}", "m", {"text": "x" * 200, "i": i})
    finally:
        cache.close()


def _ledger_use(path: Path, n: int = 1) -> None:
    ledger = Ledger(path, study="s", job="j")
    try:
        ledger.spending("study")
        for i in range(n):
            ledger.settle(ledger.reserve("m", f"key{i}-" + "k" * 200, 0.01), {"input_tokens": 1}, 0.001, 1)
    finally:
        ledger.close()


def _embeddings_use(path: Path, n: int = 1) -> None:
    fresh = os.urandom(4).hex()  # texts not yet there: a write each time
    with EmbeddingCache(path) as cache:
        cache.embed(["t0"] + [f"new text {fresh} {i} " + "y" * 200 for i in range(n)], MODEL, "", Encoder())


def _traces_use(path: Path, n: int = 1) -> None:
    registry = TextRegistry(path, "store")
    try:
        registry.holder("sha0")
        registry.record({f"new{i}-" + "s" * 200: "trace" for i in range(n)})
    finally:
        registry.close()


STORES: dict[str, Callable[..., None]] = {
    "calls": _calls_use, "ledger": _ledger_use, "embeddings": _embeddings_use, "traces": _traces_use,
}


def _valid(name: str, path: Path) -> None:
    """A valid store with enough rows for several pages."""
    STORES[name](path, 60)


# -- the faults: each makes the file at `path` faulty (or a context that is) ---------------------------------


def _garbage(name: str, path: Path) -> None:
    path.write_bytes(np.random.default_rng(7).bytes(16384))


def _zeroed(name: str, path: Path) -> None:
    _valid(name, path)
    path.write_bytes(bytes(path.stat().st_size))


def _truncated_header(name: str, path: Path) -> None:
    _valid(name, path)
    path.write_bytes(path.read_bytes()[:50])


def _truncated_half(name: str, path: Path) -> None:
    _valid(name, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _damaged_pages(name: str, path: Path) -> None:
    _valid(name, path)
    data = bytearray(path.read_bytes())
    data[100:4096] = np.random.default_rng(3).bytes(3996)  # the schema page, after the header
    path.write_bytes(bytes(data))


def _foreign_tables(name: str, path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (title TEXT, body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('a', 'b')")
    conn.commit()
    conn.close()


def _wrong_columns(name: str, path: Path) -> None:
    table = {"calls": "calls", "ledger": "calls", "embeddings": "embeddings", "traces": "texts"}[name]
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE {table} (a TEXT, b TEXT)")
    conn.commit()
    conn.close()


def _directory(name: str, path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x")


def _eio(name: str, path: Path) -> None:
    path.symlink_to("/proc/self/mem")  # reading its first bytes gives EIO


def _loop(name: str, path: Path) -> None:
    path.symlink_to(path.name)


FAULTS = {
    "garbage": (_garbage, "damaged"),
    "zeroed": (_zeroed, "damaged"),
    "truncated-header": (_truncated_header, "damaged"),
    "truncated-half": (_truncated_half, "damaged"),
    "damaged-pages": (_damaged_pages, "damaged"),
    "foreign-tables": (_foreign_tables, "wrong-schema"),
    "wrong-columns": (_wrong_columns, "wrong-schema"),
    "directory": (_directory, "not-a-file"),
    "eio": (_eio, "unreadable"),
    "symlink-loop": (_loop, "unreadable"),
}


def _snapshot(path: Path) -> object:
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_dir():
        return ("dir", sorted((p.name, p.read_bytes()) for p in path.iterdir()))
    return ("file", path.read_bytes())


def _assert_one_sentence(error: LmeError, path: Path, fault: str) -> None:
    message = str(error)
    assert isinstance(error, StoreError) and error.fault == fault, (fault, message)
    assert str(path) in message and "\n" not in message and message.endswith("."), message


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("store", sorted(STORES))
def test_a_faulty_store_is_one_sentence_and_is_left_as_it_was(tmp_path: Path, store: str, fault: str) -> None:
    path = tmp_path / f"{store}.sqlite"
    make, expected = FAULTS[fault]
    make(store, path)
    before = _snapshot(path)
    with pytest.raises(LmeError) as caught:
        STORES[store](path)
    _assert_one_sentence(caught.value, path, expected)
    assert _snapshot(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no side file, no half-made store


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_zero_byte_file_is_a_new_store_and_leftovers_of_a_killed_creation_are_removed(tmp_path: Path,
                                                                                       store: str) -> None:
    path = tmp_path / f"{store}.sqlite"
    path.write_bytes(b"")  # a creation killed by an older lme: holds nothing
    leftover = tmp_path / f".{path.name}.999999999.abcd.creating"
    leftover.write_bytes(b"half a store")
    STORES[store](path)
    STORES[store](path)  # opened again: the rows are there, the file is a store
    assert path.stat().st_size > 0 and path.read_bytes()[:16] == b"SQLite format 3\x00"
    assert not leftover.exists()


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_full_disk_at_creation_leaves_nothing_and_during_use_keeps_what_was_committed(tmp_path: Path,
                                                                                       store: str) -> None:
    path = tmp_path / f"{store}.sqlite"
    with file_size_limit(1024):  # too small for the schema's pages
        with pytest.raises(LmeError) as caught:
            STORES[store](path)
    _assert_one_sentence(caught.value, path, "full")
    assert list(tmp_path.iterdir()) == []  # no half-made store, no temporary file

    STORES[store](path, 5)
    committed = _rows(path)
    sizes = sum(p.stat().st_size for p in tmp_path.iterdir())
    with file_size_limit(sizes + 4096):
        with pytest.raises(LmeError) as caught:
            STORES[store](path, 400)
    _assert_one_sentence(caught.value, path, "full")
    assert committed <= _rows(path)  # what was committed before the disk filled is kept
    STORES[store](path)  # and the store works again once there is room


def _rows(path: Path) -> set[tuple]:
    conn = sqlite3.connect(path)
    try:
        table = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                 if name in ("calls", "embeddings", "texts")][0]
        return set(conn.execute(f"SELECT * FROM {table}"))
    finally:
        conn.close()


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_store_locked_past_the_busy_timeout_is_one_sentence(tmp_path: Path, store: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / f"{store}.sqlite"
    _valid(store, path)
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "0.3")
    assert busy_timeout_s() == 0.3
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LmeError) as caught:
            STORES[store](path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _assert_one_sentence(caught.value, path, "locked")
    assert BUSY_TIMEOUT_ENV in str(caught.value)


def test_the_busy_timeout_variable_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "soon")
    with pytest.raises(LmeError, match=BUSY_TIMEOUT_ENV):
        busy_timeout_s()
    monkeypatch.delenv(BUSY_TIMEOUT_ENV)
    assert busy_timeout_s() == 60.0


@contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """The store file read-only: chmod for a user; for root (whom modes do not stop) the immutable flag."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        path.parent.chmod(0o555)
        try:
            yield
        finally:
            path.parent.chmod(0o755)
            path.chmod(0o644)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("root, and no immutable flag on this filesystem")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_read_only_store_is_one_sentence(tmp_path: Path, store: str) -> None:
    path = tmp_path / f"{store}.sqlite"
    _valid(store, path)
    before = path.read_bytes()
    with _read_only(path):
        with pytest.raises(LmeError) as caught:
            STORES[store](path)
    _assert_one_sentence(caught.value, path, "read-only")
    assert path.read_bytes() == before


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_store_replaced_during_use_is_not_written_to(tmp_path: Path, store: str) -> None:
    path = tmp_path / f"{store}.sqlite"
    _valid(store, path)
    other = tmp_path / "other.sqlite"
    _valid(store, other)
    if store == "calls":
        handle: object = CallCache(path)
        write = lambda: handle.put("late", "m", {"text": "x"})  # noqa: E731
    elif store == "ledger":
        handle = Ledger(path, study="s", job="j")
        write = lambda: handle.reserve("m", "late", 0.01)  # noqa: E731
    elif store == "embeddings":
        handle = EmbeddingCache(path)
        handle.embed(["t0"], MODEL, "", Encoder())
        write = lambda: handle.embed(["late"], MODEL, "", Encoder())  # noqa: E731
    else:
        handle = TextRegistry(path, "store")
        write = lambda: handle.record({"late": "trace"})  # noqa: E731
    try:
        os.replace(other, path)
        replacement = path.read_bytes()
        with pytest.raises(LmeError) as caught:
            write()
        _assert_one_sentence(caught.value, path, "moved")
    finally:
        handle.close()  # type: ignore[attr-defined]
    assert path.read_bytes() == replacement


# -- the embedding cache's vectors: damaged ones are encoded again and replaced ------------------------------


def _ranking(vectors: np.ndarray, query: np.ndarray) -> list[int]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return list(np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")[:10])


def test_nan_and_short_vectors_are_encoded_again_and_give_a_clean_caches_results(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    texts = [f"turn {i}: " + "word " * (i % 7) for i in range(40)]
    query = hash_vector("the question")
    with EmbeddingCache(tmp_path / "clean.sqlite") as clean:
        expected = clean.embed(texts, MODEL, "", Encoder())
    path = tmp_path / "damaged.sqlite"
    with EmbeddingCache(path) as cache:
        cache.embed(texts, MODEL, "", Encoder())
    conn = sqlite3.connect(path)
    key = lambda i: embedding_key(MODEL, "", texts[i])  # noqa: E731
    conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?", (np.full(DIM, np.nan, "<f4").tobytes(), key(0)))
    conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?", (np.ones(DIM - 3, "<f4").tobytes(), key(1)))
    conn.execute("UPDATE embeddings SET vector = ?, dim = ? WHERE key = ?", (np.ones(4, "<f4").tobytes(), 4, key(2)))
    conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?", (b"", key(3)))
    conn.commit()
    conn.close()
    capsys.readouterr()
    encoder = Encoder()
    with EmbeddingCache(path) as cache:
        got = cache.embed(texts, MODEL, "", encoder)
        assert cache.replaced == 4
    assert sorted(text for call in encoder.calls for text in call) == sorted(texts[:4])
    np.testing.assert_array_equal(got, expected)
    assert _ranking(got, query) == _ranking(expected, query)
    err = capsys.readouterr().err
    assert f"{path}: 4 damaged vector(s)" in err and len(err.strip().splitlines()) == 1
    with EmbeddingCache(path) as cache:  # replaced in the file: nothing encoded the next time
        encoder = Encoder()
        np.testing.assert_array_equal(cache.embed(texts, MODEL, "", encoder), expected)
        assert encoder.calls == []


def test_ensure_replaces_vectors_cut_short_without_reading_the_others(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite"
    texts = ["a", "b", "c"]
    with EmbeddingCache(path) as cache:
        cache.ensure(texts, MODEL, "", Encoder())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?", (b"\x00" * 5, embedding_key(MODEL, "", "b")))
    conn.commit()
    conn.close()
    encoder = Encoder()
    with EmbeddingCache(path) as cache:
        cache.ensure(texts, MODEL, "", encoder)
        assert encoder.calls == [["b"]]
        np.testing.assert_array_equal(cache.embed(texts, MODEL, "", Encoder()),
                                      np.stack([hash_vector(t) for t in texts]))


# -- `python -m lme cache ...` on faulty files: one sentence, exit 2 ----------------------------------------


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from lme.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    return int(exited.value.code or 0), err


@pytest.mark.parametrize("fault", ["garbage", "zeroed", "truncated-half", "foreign-tables", "directory", "eio"])
def test_cache_commands_on_a_faulty_file_say_one_sentence_and_exit_2(tmp_path: Path, fault: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    make, _ = FAULTS[fault]
    bad_calls = tmp_path / "bad" / "calls.sqlite"
    bad_calls.parent.mkdir()
    make("calls", bad_calls)
    good = tmp_path / "good.sqlite"
    _calls_use(good, 3)
    bad_embeddings = tmp_path / "bad" / "embeddings.sqlite"
    make("embeddings", bad_embeddings)
    export = tmp_path / "export.sqlite"
    with EmbeddingCache(tmp_path / "vectors.sqlite") as cache:
        cache.embed(["a", "b"], MODEL, "", Encoder())
    export_embeddings(tmp_path / "vectors.sqlite", export)
    before = {path: _snapshot(path) for path in (bad_calls, bad_embeddings)}
    runs = [
        ["cache", "merge", str(bad_calls), "--into", str(good)],  # a faulty source
        ["cache", "merge", str(good), "--into", str(bad_calls)],  # a faulty target
        ["cache", "export", str(tmp_path / "out.sqlite"), "--cache", str(bad_embeddings)],
    ]
    for argv in runs:
        code, err = _cli(argv, capsys)
        assert code == 2, (argv, err)
        assert err.startswith("lme: error: ") and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err and ("bad/calls.sqlite" in err or "bad/embeddings.sqlite" in err), err
    code, err = _cli(["cache", "import", str(export), "--cache", str(bad_embeddings)], capsys)
    assert code == 2 and "bad/embeddings.sqlite" in err and len(err.strip().splitlines()) == 1, err
    code, err = _cli(["cache", "import", str(bad_calls), "--cache", str(tmp_path / "vectors.sqlite")], capsys)
    assert code == 2 and "bad/calls.sqlite" in err and len(err.strip().splitlines()) == 1, err
    assert {path: _snapshot(path) for path in (bad_calls, bad_embeddings)} == before


@pytest.mark.parametrize("name", sorted(STORES))
def test_a_store_cut_by_a_few_bytes_is_refused_even_beside_a_wal_file(name: str, tmp_path: Path) -> None:
    """SQLite writes whole pages: a file that is not a whole number of pages was cut, with or without a `-wal`
    beside it (a WAL beside it made the header's page count unreliable, and the cut was read as zeros)."""
    path = tmp_path / f"{name}.sqlite"
    _valid(name, path)
    path.write_bytes(path.read_bytes()[:-7])
    Path(f"{path}-wal").write_bytes(b"")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a whole number of") as caught:
        STORES[name](path)
    assert str(path) in str(caught.value) and path.read_bytes() == before
