"""The shared SQLite helpers on real temp files: a write transaction that rolls back on error, an attached
source that is detached whatever happens, and a copy that keeps existing rows and counts only the new ones."""

from __future__ import annotations

import pytest

from lme.sqlite import attached, connect, immediate, insert_missing

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
