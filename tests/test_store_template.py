"""lme.tracking.store_template: a new SQLite tracking store as a copy of an empty one MLflow made, not its migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from lme.tracking import runs as tracking, store_template
from lme.tracking.runs import JobRun, TrackingSettings


@pytest.fixture
def templates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "templates"
    monkeypatch.setenv(store_template.TEMPLATES_ENV, str(folder))
    return folder


def _settings(folder: Path) -> TrackingSettings:
    folder.mkdir(parents=True, exist_ok=True)
    return TrackingSettings(uri=f"sqlite:///{folder / 'mlflow.db'}", artifact_location=str(folder / "mlruns"),
                            experiment="study")


def _rows(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows, creation and update times and artifact locations left out (they name the moment and
    the store)."""
    conn = sqlite3.connect(path)
    try:
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {}
        for table in tables:
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            keep = [c for c in columns if c not in ("creation_time", "last_update_time", "artifact_location")]
            if keep:
                out[table] = sorted(conn.execute(f"SELECT {', '.join(keep)} FROM {table}").fetchall(), key=repr)
        return out
    finally:
        conn.close()


def _schema(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    finally:
        conn.close()


def _log_a_run(settings: TrackingSettings) -> tuple[str, str]:
    run = JobRun(settings, run_name="r", tags={"lme.role": "job"})
    run.log_metrics({"accuracy": 0.5})
    run.log_text("hello\n", "note.txt")
    run.finish()
    client = tracking.client_for(settings)
    default = client.get_experiment("0")
    assert client.get_run(run.run_id).data.metrics["accuracy"] == 0.5
    return run.run_id, default.artifact_location


def test_the_first_new_store_leaves_a_template_and_the_next_is_a_copy_of_it(templates: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    first = _settings(tmp_path / "a")
    monkeypatch.chdir(tmp_path / "a")  # MLflow's default experiment keeps its artifacts under the working folder
    _log_a_run(first)
    template = store_template.template_path()
    assert store_template.usable(template), "MLflow's new store was not kept as the template"
    assert _rows(template)["experiments"] == []

    copies: list[Path] = []
    real_copy = store_template.start_from_template

    def counted(path: Path) -> bool:
        done = real_copy(path)
        if done:
            copies.append(path)
        return done

    monkeypatch.setattr(store_template, "start_from_template", counted)  # as lme.tracking.store_template.create_whole calls it
    second = _settings(tmp_path / "b")
    monkeypatch.chdir(tmp_path / "b")
    _, default_location = _log_a_run(second)
    assert copies == [tmp_path / "b" / "mlflow.db"]
    # the default experiment was made for the new store (where it runs), not copied from the first one's
    assert default_location.endswith(str(tmp_path / "b" / "mlruns" / "0")), default_location


def test_a_store_from_the_template_is_the_store_mlflow_makes(templates: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    made = _settings(tmp_path / "made")
    tracking.client_for(made)  # MLflow's migrations (no template yet); keeps the template
    assert store_template.usable(store_template.template_path())
    copied = _settings(tmp_path / "copied")
    assert store_template.start_from_template(tmp_path / "copied" / "mlflow.db")
    tracking.client_for(copied)  # MLflow opens the copy: verifies the revision, adds the default experiment
    made_db, copied_db = tmp_path / "made" / "mlflow.db", tmp_path / "copied" / "mlflow.db"
    assert _schema(copied_db) == _schema(made_db)
    assert _rows(copied_db) == _rows(made_db)


def test_an_existing_store_is_never_replaced(templates: Path, tmp_path: Path) -> None:
    tracking.client_for(_settings(tmp_path / "a"))
    existing = tmp_path / "b" / "mlflow.db"
    existing.parent.mkdir()
    existing.write_bytes(b"not empty")
    assert store_template.start_from_template(existing) is False
    assert existing.read_bytes() == b"not empty"


def test_an_empty_file_is_a_new_store(templates: Path, tmp_path: Path) -> None:
    tracking.client_for(_settings(tmp_path / "a"))
    empty = tmp_path / "b" / "mlflow.db"
    empty.parent.mkdir()
    empty.touch()
    assert store_template.start_from_template(empty) is True
    assert store_template.usable(empty)


def test_a_template_that_is_not_one_is_not_copied_and_is_replaced(templates: Path, tmp_path: Path) -> None:
    bad = store_template.template_path()
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"SQLite format 3\x00 but not really")
    assert not store_template.usable(bad)
    assert store_template.start_from_template(tmp_path / "x.db") is False
    assert not (tmp_path / "x.db").exists()
    _log_a_run(_settings(tmp_path / "a"))  # MLflow makes the store; its copy replaces the bad template
    assert store_template.usable(bad)


def test_only_a_plain_sqlite_file_uri_names_a_path() -> None:
    assert store_template.sqlite_path("sqlite:///mlflow.db") == Path("mlflow.db")
    assert store_template.sqlite_path("sqlite:////abs/mlflow.db") == Path("/abs/mlflow.db")
    for uri in ("http://127.0.0.1:5000", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "postgresql://h/db",
                "sqlite:///"):
        assert store_template.sqlite_path(uri) is None, uri


def test_a_copied_store_has_the_permissions_a_new_file_gets(templates: Path, tmp_path: Path) -> None:
    import os
    import stat

    tracking.client_for(_settings(tmp_path / "a"))
    made = stat.S_IMODE((tmp_path / "a" / "mlflow.db").stat().st_mode)
    copy = tmp_path / "b" / "mlflow.db"
    copy.parent.mkdir()
    assert store_template.start_from_template(copy)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(copy.stat().st_mode) == 0o666 & ~umask == made


def test_a_store_whose_making_fails_leaves_nothing(templates: Path, tmp_path: Path) -> None:
    """`create_whole`: what `make` (MLflow's migrations) half-wrote stays in its temporary file, which goes."""
    import errno

    def make(temporary: Path) -> None:
        temporary.write_bytes(b"SQLite format 3\x00 half")
        raise OSError(errno.EFBIG, "File too large")

    folder = tmp_path / "study"
    folder.mkdir()
    with pytest.raises(OSError):
        store_template.create_whole(folder / "mlflow.db", make)
    assert list(folder.iterdir()) == []


def test_a_made_store_is_linked_whole_and_an_empty_file_in_its_place_replaced(templates: Path, tmp_path: Path) -> None:
    def make(temporary: Path) -> None:
        with sqlite3.connect(temporary) as conn:
            conn.execute("CREATE TABLE t (x)")
            conn.execute("INSERT INTO t VALUES (1)")
        conn.close()

    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "mlflow.db").touch()
    store_template.create_whole(folder / "mlflow.db", make)
    assert [p.name for p in folder.iterdir()] == ["mlflow.db"]
    assert _rows(folder / "mlflow.db") == {"t": [(1,)]}


def test_only_a_gone_process_s_old_leftovers_are_removed(tmp_path: Path) -> None:
    import os
    import time

    store = tmp_path / "mlflow.db"
    old = time.time() - 2 * store_template.LEFTOVER_AGE_S
    names = {"gone_old": ".mlflow.db.999999999.aaaaaaaaaaaa.tmp", "gone_new": ".mlflow.db.999999998.bbbbbbbbbbbb.tmp",
             "alive_old": f".mlflow.db.{os.getpid()}.cccccccccccc.tmp", "other": ".calls.sqlite.999999999.dddd.tmp"}
    for key, name in names.items():
        (tmp_path / name).write_bytes(b"x")
        if key != "gone_new":
            os.utime(tmp_path / name, (old, old))
    assert store_template.remove_leftovers(store) == [tmp_path / names["gone_old"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in names.items() if k != "gone_old")
