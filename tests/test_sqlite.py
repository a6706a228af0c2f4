"""The shared SQLite helpers on real temp files: a write transaction that rolls back on error, an attached
source that is detached whatever happens, and a copy that keeps existing rows and counts only the new ones."""

from __future__ import annotations

import pytest

from lme.util.sqlite import attached, connect, immediate, insert_missing

SCHEMA = "CREATE TABLE items (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def _file(path, rows):
    conn = connect(path)
    conn.execute(SCHEMA)
    conn.executemany("INSERT INTO items VALUES (?, ?)", rows)
    return conn


def test_a_copy_keeps_existing_rows_and_counts_only_those_it_adds(tmp_path):
    source = _file(tmp_path / "source.sqlite", [("a", "new a"), ("b", "b"), ("c", "c")])
    source.close()
    target = _file(tmp_path / "target.sqlite", [("a", "old a")])
    with attached(target, tmp_path / "source.sqlite", "source"), immediate(target):
        assert insert_missing(target, "items", ("key", "value"), "source", order_by="key") == 2
    assert dict(target.execute("SELECT key, value FROM items")) == {"a": "old a", "b": "b", "c": "c"}
    assert [row[1] for row in target.execute("PRAGMA database_list")] == ["main"]  # detached


def test_an_error_rolls_the_transaction_back_and_detaches_the_source(tmp_path):
    _file(tmp_path / "source.sqlite", [("b", "b")]).close()
    target = _file(tmp_path / "target.sqlite", [])
    with pytest.raises(RuntimeError, match="stop"):
        with attached(target, tmp_path / "source.sqlite", "source"), immediate(target):
            insert_missing(target, "items", ("key", "value"), "source")
            raise RuntimeError("stop")
    assert not target.in_transaction
    assert target.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 0
    assert [row[1] for row in target.execute("PRAGMA database_list")] == ["main"]
    with pytest.raises(ValueError, match="not an SQL name"):
        with attached(target, tmp_path / "source.sqlite", "x; DROP TABLE items"):
            pass


def test_open_store_completes_an_older_schema_and_keeps_a_live_creation(tmp_path):
    """A file made by an older lme (one table of two) gets the missing table and keeps its rows; the temporary
    file of a creation whose process still runs (this one's parent) is left alone; a plain SQLite error during
    use becomes a StoreError naming the file."""
    import os
    import sqlite3

    from lme.util.sqlite import StoreError, StoreKind, open_store

    kind = StoreKind("test store", SCHEMA.replace("TABLE items", "TABLE IF NOT EXISTS items")
                     + "; CREATE TABLE IF NOT EXISTS extra (id INTEGER PRIMARY KEY)",
                     {"items": ("key", "value")}, "nothing is lost")
    path = tmp_path / "store.sqlite"
    _file(path, [("a", "1")]).close()
    live = tmp_path / f".store.sqlite.{os.getppid()}.abcd.creating"
    live.write_bytes(b"in progress")
    conn = open_store(path, kind)
    assert conn.execute("SELECT value FROM items").fetchall() == [("1",)]
    assert conn.execute("SELECT COUNT(*) FROM extra").fetchone() == (0,)
    with pytest.raises(sqlite3.IntegrityError):  # a constraint: lme's own bug, raised as it is
        conn.execute("INSERT INTO items VALUES ('a', NULL)")
    other = sqlite3.connect(path)
    other.execute("DROP TABLE extra")  # another program changed the file under this connection
    other.commit()
    other.close()
    with pytest.raises(StoreError, match="store.sqlite: the test store cannot be read or written") as caught:
        conn.execute("SELECT COUNT(*) FROM extra")
    assert str(path) in str(caught.value)
    conn.close()
    fresh = open_store(tmp_path / "new.sqlite", kind)
    assert fresh.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    fresh.close()
    assert live.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".creating")) == [live.name]
