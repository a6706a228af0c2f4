"""The MLflow tracking store's faults, each one sentence (issue 36): through `lme runs repair`, `lme report` and a run.

One real store (made by lme, with one finished run) is shared by the module and copied per case. Each fault —
a URI MLflow cannot use, an unreachable server, a missing (mistyped) path, an empty, zeroed, random, truncated
file, another program's tables, an unknown schema revision, a store locked past the busy timeout, a directory
in the store's place, an artifact folder that is a file — gives exit 2 and one line `lme: error: ...` naming
what is wrong, no traceback, within seconds, and leaves every file of the folder as it was (nothing made,
nothing "repaired"). A new store is created whole or not at all: a file size limit during its creation leaves
no `mlflow.db`, and the next run makes a whole one. Arguments, the current directory and lme's environment
variables that are not UTF-8 are refused in one sentence before Hydra.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import socket
import sqlite3
import time
from pathlib import Path

import pytest

import lme.cli
from lme.util.errors import LmeError
from lme.tracking.runs import JobRun, TrackingSettings, client_for

CASE_LIMIT_S = 8.0  # every case answers within this (MLflow's own retries would take minutes)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store made by lme: experiment `lme`, one finished run (from the test process's template, tests/conftest.py)."""
    folder = tmp_path_factory.mktemp("store")
    settings = TrackingSettings(uri=f"sqlite:///{folder / 'mlflow.db'}", artifact_location=str(folder / "mlruns"))
    run = JobRun(settings, run_name="r", tags={"lme.role": "job"})
    run.log_metrics({"accuracy": 0.5})
    run.finish()
    return folder / "mlflow.db"


def _snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: a file's SHA-256, a directory's mark."""
    out = {}
    for path in sorted(folder.rglob("*")):
        out[str(path.relative_to(folder))] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _lme(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        lme.cli.main(args)
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    return code, capsys.readouterr().err, time.monotonic() - started


def _one_sentence(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("lme: error: "), err
    return lines[0]


def _refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed on leaving: nothing listens there


def _drop_runs(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE runs")
    conn.close()


def _unknown_revision(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'from_the_future'")
    conn.close()


# name -> (how the case's folder is damaged: store copy at `db`, returns the tracking URI or None for the copy's;
#          what the sentence says)
FAULTS = {
    "unknown scheme": (lambda db: "foo://x", "foo"),
    "sqlite without a path": (lambda db: "sqlite://", "sqlite:///PATH"),
    "unreachable server": (lambda db: f"http://127.0.0.1:{_refused_port()}", "no tracking server answers"),
    "random bytes": (lambda db: db.write_bytes(os.urandom(4096)), "not an SQLite file"),
    "zeroed": (lambda db: db.write_bytes(b"\0" * db.stat().st_size), "not an SQLite file"),
    "truncated": (lambda db: db.write_bytes(db.read_bytes()[:40_000]), "damaged"),
    "cut by 7 bytes": (lambda db: db.write_bytes(db.read_bytes()[:-7]), "cut short"),  # SQLite reads it, zero-filled
    "tables missing": (_drop_runs, "lacks MLflow's table(s) runs"),
    "unknown schema revision": (_unknown_revision, "schema revision from_the_future"),
    "directory in its place": (lambda db: (db.unlink(), db.mkdir()), "directory"),
    "artifact folder a file": (lambda db: (db.parent / "mlruns").write_text("x"), "a file stands where the MLflow artifact"),
}


def _case(store: Path, tmp_path: Path, fault: str) -> tuple[str, Path]:
    folder = tmp_path / "study"
    folder.mkdir()
    db = folder / "mlflow.db"
    shutil.copyfile(store, db)
    uri = FAULTS[fault][0](db)
    return (uri if isinstance(uri, str) else f"sqlite:///{db}"), folder


@pytest.mark.parametrize("command", [["runs", "repair"], ["report"]])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_store_fault_is_one_sentence_and_changes_nothing(store, tmp_path, capsys, fault, command):
    uri, folder = _case(store, tmp_path, fault)
    before = _snapshot(tmp_path)
    code, err, elapsed = _lme([*command, f"tracking.uri={uri}", f"tracking.artifact_location={folder / 'mlruns'}"],
                              capsys)
    line = _one_sentence(err)
    assert code == 2, err
    assert FAULTS[fault][1] in line, line
    assert elapsed < CASE_LIMIT_S, f"{fault}: {elapsed:.1f} s"
    assert _snapshot(tmp_path) == before  # nothing made, nothing rewritten


@pytest.mark.parametrize("command", [["runs", "repair"], ["report"]])
def test_a_store_locked_past_the_busy_timeout_is_one_sentence(store, tmp_path, capsys, monkeypatch, command):
    monkeypatch.setenv("LME_SQLITE_BUSY_TIMEOUT_S", "0.3")
    uri, folder = _case(store, tmp_path, "artifact folder a file")
    (folder / "mlruns").unlink()
    holder = sqlite3.connect(folder / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than lme waits
    try:
        before = _snapshot(tmp_path)
        code, err, elapsed = _lme([*command, f"tracking.uri={uri}"], capsys)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    line = _one_sentence(err)
    assert code == 2 and "locked" in line and "LME_SQLITE_BUSY_TIMEOUT_S" in line, err
    assert elapsed < CASE_LIMIT_S
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [["runs", "repair"], ["report"], ["ui"]])
def test_a_mistyped_store_path_is_never_made_into_a_new_store(store, tmp_path, capsys, command):
    shutil.copyfile(store, tmp_path / "mlflow.db")
    before = _snapshot(tmp_path)
    code, err, _ = _lme([*command, f"tracking.uri=sqlite:///{tmp_path / 'mlfow.db'}"], capsys)
    line = _one_sentence(err)
    assert code == 2
    assert f"no MLflow store at {tmp_path / 'mlfow.db'}" in line
    assert f"did you mean tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}?" in line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [["runs", "repair"], ["report"]])
def test_an_empty_store_file_is_refused_by_readers(tmp_path, capsys, command):
    (tmp_path / "mlflow.db").write_bytes(b"")
    code, err, _ = _lme([*command, f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"], capsys)
    assert code == 2 and "empty (0 bytes)" in _one_sentence(err)
    assert (tmp_path / "mlflow.db").stat().st_size == 0


def test_runs_repair_reads_a_whole_store(store, tmp_path, capsys):
    shutil.copyfile(store, tmp_path / "mlflow.db")
    code, err, _ = _lme(["runs", "repair", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("fault", ["random bytes", "directory in its place", "tables missing", "artifact folder a file"])
def test_a_run_on_a_broken_store_stops_before_hydra_and_never_overwrites_it(store, tmp_path, capsys, monkeypatch,
                                                                            fault):
    """Before any job folder exists: lme.study.before_run checks the store without importing MLflow. (The schema
    revision is MLflow's to judge, when the job opens the store: `store_failure`, covered by the readers' cases.)"""
    uri, folder = _case(store, tmp_path, fault)
    monkeypatch.chdir(folder)
    before = _snapshot(folder)
    code, err, _ = _lme(["dataset=sample", "limit=1", "progress=false", f"tracking.uri={uri}",
                         f"tracking.artifact_location={folder / 'mlruns'}", f"cache_dir={tmp_path / 'cache'}"], capsys)
    line = _one_sentence(err)
    assert code == 2 and FAULTS[fault][1] in line, err
    assert _snapshot(folder) == before and not (tmp_path / "cache").exists()  # stopped before anything was made


# --- creation: whole or not at all ----------------------------------------------------------------------------


@pytest.fixture
def file_size_limit():
    """`limit(n)`: this process may write no file past n bytes (SIGXFSZ ignored: the write fails with EFBIG, as on a
    full disk); lifted afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def limit(size: int | None) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft if size is None else size, hard))

    yield limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, handler)


@pytest.mark.parametrize("template", [True, False], ids=["from the template", "by MLflow's migrations"])
def test_a_full_disk_while_creating_the_store_leaves_none_and_the_next_run_makes_it_whole(
        store, tmp_path, monkeypatch, file_size_limit, template):
    if not template:
        monkeypatch.setenv("LME_MLFLOW_TEMPLATES", str(tmp_path / "no-templates"))
    folder = tmp_path / "study"
    folder.mkdir()
    settings = TrackingSettings(uri=f"sqlite:///{folder / 'mlflow.db'}", artifact_location=str(folder / "mlruns"))
    file_size_limit(100_000)  # the store is about 1 MB
    try:
        with pytest.raises(LmeError) as refused:
            client_for(settings)
    finally:
        file_size_limit(None)
    message = str(refused.value)
    assert "could not be created" in message and "nothing was made there" in message and "\n" not in message
    assert list(folder.iterdir()) == []  # no half-made store, no temporary file
    run = JobRun(settings, run_name="after", tags={"lme.role": "job"})  # the next run: a whole store
    run.finish()
    with sqlite3.connect(folder / "mlflow.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)
    conn.close()


def test_a_creation_killed_midway_leaves_nothing_that_breaks_the_next(store, tmp_path):
    """A kill leaves a temporary file beside the store (never `mlflow.db`), or, from an older lme, a zero-byte
    `mlflow.db`: the next run makes a whole store and removes the leftover once its process is gone."""
    folder = tmp_path / "study"
    folder.mkdir()
    leftover = folder / ".mlflow.db.999999999.0123456789ab.tmp"  # no such process
    leftover.write_bytes(b"SQLite format 3\0" + b"\0" * 100)
    old = time.time() - 3600
    os.utime(leftover, (old, old))
    (folder / "mlflow.db").write_bytes(b"")
    settings = TrackingSettings(uri=f"sqlite:///{folder / 'mlflow.db'}", artifact_location=str(folder / "mlruns"))
    JobRun(settings, run_name="after", tags={"lme.role": "job"}).finish()
    assert sorted(p.name for p in folder.iterdir()) == ["mlflow.db"]
    with sqlite3.connect(folder / "mlflow.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)
    conn.close()


# --- paths that are not UTF-8 -----------------------------------------------------------------------------------


def test_an_argument_that_is_not_utf8_is_one_sentence_showing_the_byte(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = os.fsdecode(b"hydra.run.dir=out\xff")
    code, err, _ = _lme([bad], capsys)
    assert code == 2
    assert _one_sentence(err).startswith("lme: error: argument 1, 'hydra.run.dir=out\\xff', is not UTF-8 text")
    code, err, _ = _lme(["runs", "repair", "tracking.uri=sqlite:///" + os.fsdecode(str(tmp_path).encode() + b"/\xfe.db")],
                        capsys)
    assert code == 2 and "\\xfe.db'" in _one_sentence(err)
    assert list(tmp_path.iterdir()) == []


def test_a_current_directory_that_is_not_utf8_is_one_sentence(tmp_path, capsys, monkeypatch):
    folder = tmp_path / os.fsdecode(b"study\xe9")
    folder.mkdir()
    monkeypatch.chdir(folder)
    code, err, _ = _lme(["runs", "repair"], capsys)
    assert code == 2 and "the current directory" in err and "study\\xe9'" in _one_sentence(err)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("name", ["LME_DATA_DIR", "MLFLOW_TRACKING_URI", "LME_CACHE_DIR"])
def test_an_environment_path_that_is_not_utf8_is_one_sentence(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, os.fsdecode(b"/data/\xc3("))
    code, err, _ = _lme(["report"], capsys)
    assert code == 2 and _one_sentence(err).startswith(f"lme: error: the environment variable '{name}'='/data/\\xc3('")


# --- a run's writes: a full disk while a job logs to the store or its artifacts ------------------------------


@pytest.mark.parametrize("what", ["store", "artifact"])
def test_a_full_disk_while_a_run_logs_is_one_sentence_naming_the_file(store, tmp_path, file_size_limit, what):
    """The helper's side of a job's run (`serve_run`): a write that fails on a full disk is one `LmeError` sentence
    naming the store or the artifact's file (the job then stops with lme.study.resume.store_stop_message)."""
    from lme.tracking.runs import serve_run

    folder = tmp_path / "study"
    folder.mkdir()
    shutil.copyfile(store, folder / "mlflow.db")
    settings = TrackingSettings(uri=f"sqlite:///{folder / 'mlflow.db'}", artifact_location=str(folder / "mlruns"))
    runs: dict = {}
    run_id, _ = serve_run(runs, ("open", settings, "full", {"lme.role": "job"}, None, None))
    request = (("method", run_id, "log_params", ({f"p{i}": "x" * 400 for i in range(2000)},)) if what == "store"
               else ("method", run_id, "log_text", ("x" * 200_000, "big.txt")))
    before = (folder / "mlflow.db").stat().st_size
    file_size_limit(before if what == "store" else 100_000)
    try:
        with pytest.raises(LmeError) as refused:
            serve_run(runs, request)
    finally:
        file_size_limit(None)
    message = str(refused.value)
    assert "\n" not in message and ("disk is full" in message or "size limit" in message), message
    named = str(folder / "mlflow.db") if what == "store" else "big.txt"
    assert named in message, message
    serve_run(runs, ("method", run_id, "finish", ("FINISHED", None)))  # the store is whole: the run still finishes
