"""The corruption harness (issue 36, item 2): every stored file of the registry (lme/util/stored_state.py) through a
matrix of faults, run through every command that reads it.

Design, for speed: one warm worker process per test process imports lme (Hydra, the CLI, MLflow) once, then
forks one child per case (`serve`); the child changes to the case's folder, takes the case's environment and
resource limits (RLIMIT_FSIZE for a full disk, SIGXFSZ ignored), runs `python -m lme ARGS` in-process with its
output in a file, and exits with lme's status; the worker kills the child's process group at the case's time
limit (a hang). A fork is isolated (no global state of Hydra or lme survives a case) and costs milliseconds.

One workspace is built per test process (`build_workspace`: a real run of the embedded default on two sample
questions, `prereg freeze`, the embedding cache filled through `lme embed` with the semantic retriever, an
exported vector file, a data folder); each case copies it (`shutil.copytree`), applies one fault to one file,
runs one command and classifies what happened (`classify`): refused in one sentence naming the file, recovered
or accepted as its contract says, or a failure (a traceback, a hang, an unclear message, another exit status,
a refusal-contract accepted silently, another file changed).

Run as a script (`python harness.py serve`), this module is the worker; it imports nothing but the standard
library at the top, so the worker's imports are lme's own.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

CASE_TIMEOUT_S = 120.0  # a case past this is a hang (the longest real case takes a few seconds on an idle machine;
# a tracked run took over 40 s on 2 cores shared with three other test runs, so the limit leaves room for load)
LOCK_TIMEOUT_S = "1"  # LME_SQLITE_BUSY_TIMEOUT_S for the locked cases
PRELOAD = ("lme.cli", "lme.__main__", "lme.study.hydra_run", "lme.study.job", "lme.answer.run", "lme.config.design", "lme.config.compose",
           "lme.study.before_run", "lme.provenance.prereg", "lme.cli.cost", "lme.cli.prereg", "lme.cli.report", "lme.cli.runs",
           "lme.cli.embed", "lme.cli.retrieval", "lme.cli.cache", "lme.cli.memory", "lme.cli.estimate",
           "lme.cli.interop", "lme.cli.data", "lme.retrieval.dense", "lme.retrieval.embedding_cache",
           "lme.models.gateway", "lme.tracking.runs", "lme.tracking.report_source", "mlflow", "mlflow.tracking", "numpy", "litellm")


# ============================================================================================ the warm worker


def _child(request: dict[str, Any]) -> int:
    """In the forked child: run `python -m lme ARGV` as the case says; lme's exit status."""
    os.setpgid(0, 0)
    fd = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request.get("fsize") is not None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (request["fsize"], request["fsize"]))
    sys.argv = ["lme", *request["argv"]]
    code: int = 0
    try:
        from lme.__main__ import entry

        entry()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what lme let through: printed as Python would, and counted
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
    return code


def _run_forked(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(request)
        finally:
            os._exit(code & 0xFF)
    deadline = started + float(request.get("timeout", CASE_TIMEOUT_S))
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    try:  # anything the case started (MLflow's helper) ends with it
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return {"rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out, "seconds": time.monotonic() - started}


def serve() -> None:
    """The worker: import lme once, then one forked child per request line (JSON) on stdin; one reply line."""
    import importlib

    os.environ.setdefault("LME_SQLITE_BUSY_TIMEOUT_S", LOCK_TIMEOUT_S)  # in case it is read when lme.util.sqlite loads
    # Mem0 reads these once, when imported (below, with every lme module): as lme.memory.systems.mem0 sets them
    # before its own import, telemetry off and Mem0's folder a temporary one (not the user's ~/.mem0)
    import tempfile

    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="lme-harness-mem0-"))
    import pkgutil

    import lme

    every = [info.name for info in pkgutil.walk_packages(lme.__path__, "lme.")]
    for name in (*PRELOAD, *every, "hydra._internal.hydra", "hydra._internal.config_loader_impl",
                 "hydra._internal.core_plugins.basic_launcher", "hydra._internal.core_plugins.basic_sweeper",
                 "hydra.core.utils", "mlflow.entities", "mlflow.store.tracking.sqlalchemy_store"):
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - an optional part (lucene, openvino); a case imports it itself
            pass
    try:  # Hydra's plugin discovery, a singleton: scanned once here instead of once per case
        from hydra.core.plugins import Plugins

        Plugins.instance()
    except Exception:  # noqa: BLE001
        pass
    replies = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = _run_forked(json.loads(line))
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


# ============================================================================================ the client side


@dataclass
class Result:
    rc: int
    output: str
    seconds: float
    timed_out: bool


class Worker:
    """The warm worker process, started once per test process."""

    def __init__(self) -> None:
        tests = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, __file__, "serve"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env, errors="surrogateescape")

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], output: Path, timeout: float = CASE_TIMEOUT_S,
            fsize: int | None = None) -> Result:
        request = {"argv": argv, "cwd": os.fsdecode(cwd), "env": env, "output": str(output), "timeout": timeout,
                   "fsize": fsize}
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the corruption harness's worker died")
        reply = json.loads(line)
        text = output.read_bytes().decode("utf-8", "replace") if output.exists() else ""
        return Result(reply["rc"], text, reply["seconds"], reply["timed_out"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def case_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a case: the test process's, without the user's lme settings and keys."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LME_CACHE_DIR", "LME_DATA_DIR", "LME_JUDGE", "LME_STUDY", "LME_PARENT",
                                "OPENAI", "ANTHROPIC", "GEMINI", "MLFLOW_TRACKING_URI", "PYTEST_XDIST"))}
    env["LME_PROGRESS_INTERVAL_S"] = "3600"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # litellm's bundled price map: no download
    env["HF_HUB_OFFLINE"] = "1"
    env["LME_TEST_KEY"] = TEST_KEY
    env["TRANSFORMERS_OFFLINE"] = "1"
    return env | (extra or {})


# ============================================================================================ the workspace

# Placeholders of command lines; a non-UTF-8-path case renames what one of them names.
NAMES = {
    "cache": "cache",
    "job": "job",
    "mlflow": "mlflow.db",
    "prereg": "prereg/default.yaml",
    "data": "data",
    "dataset": "data/sample.json",
    "ids": "data/ids.txt",
    "export": "vectors.sqlite",
    "templates": "templates",
}

# The semantic retriever on an embedding API: the loopback server of the test process (no model to load).
_SEMANTIC = ["retriever=semantic", "retriever.backend=litellm", "retriever.model=openai/text-embedding-3-small",
             "retriever.api_base={embed_base}", "retriever.api_key_env=LME_TEST_KEY",
             "retriever.input_cost_per_token=0"]
TEST_KEY = "sk-lme-harness-0123456789abcdef"
_BASE = ["limit=2", "cache_dir={cache}", "tracking.uri=sqlite:///{mlflow}", "tracking.artifact_location=mlruns"]
_UNTRACKED = ["limit=2", "cache_dir={cache}", "tracking.enabled=false"]
# The commands the harness runs, by the registry's names (lme.util.stored_state.COMMANDS); `run` is a new job that
# asks new questions (seed 1), `resume` the workspace's own job again in its folder.
COMMAND_ARGV: dict[str, list[str]] = {
    "run": [*_UNTRACKED, "seed=1", "hydra.run.dir=job-new"],
    "run tracked": [*_BASE, "seed=1", "hydra.run.dir=job-new"],
    "run with prereg": [*_UNTRACKED, "seed=1", "hydra.run.dir=job-new", "prereg={prereg}"],
    "run on data file": [*_UNTRACKED, "seed=1", "hydra.run.dir=job-new", "dataset.path={dataset}"],
    "run on split": ["cache_dir={cache}", "tracking.enabled=false", "seed=1", "hydra.run.dir=job-new",
                     "dataset.path={dataset}", "split={ids}"],
    "resume": [*_UNTRACKED, "hydra.run.dir={job}"],
    "cost": ["cost", "{job}", "cache_dir={cache}"],
    "prereg verify": ["prereg", "verify", "{prereg}", "limit=2", "cache_dir={cache}"],
    "prereg freeze": ["prereg", "freeze", "--out", "prereg/new.yaml", "limit=2", "cache_dir={cache}",
                      "dataset.path={dataset}"],
    "report": ["report", "tracking.uri=sqlite:///{mlflow}"],
    "report with prereg": ["report", "--prereg", "{prereg}", "tracking.uri=sqlite:///{mlflow}"],
    "runs repair": ["runs", "repair", "tracking.uri=sqlite:///{mlflow}"],
    "runs repair new store": ["runs", "repair", "tracking.uri=sqlite:///new-store.db"],
    "export": ["export", "{run_id}", "tracking.uri=sqlite:///{mlflow}"],
    "embed": ["embed", *_SEMANTIC, "limit=2", "cache_dir={cache}"],
    "retrieval": ["retrieval", *_SEMANTIC, *_UNTRACKED],
    "cache merge": ["cache", "merge", "{cache}/calls.sqlite", "--into", "merged.sqlite", "cache_dir={cache}"],
    "retrieval on data file": ["retrieval", *_UNTRACKED, "dataset.path={dataset}"],
    "memory": ["memory", "limit=2", "cache_dir={cache}", "dataset.path={dataset}"],
    "memory on split": ["memory", "cache_dir={cache}", "dataset.path={dataset}", "split={ids}"],
    "cache export": ["cache", "export", "out.sqlite", "cache_dir={cache}"],
    "cache import": ["cache", "import", "{export}", "cache_dir={cache}"],
    "estimate": ["estimate", "limit=2", "cache_dir={cache}"],
    "data stats": ["data", "stats", "dataset.path={dataset}"],
    # memory=mem0 (the workspace of `build_mem0_workspace`): a new job on the same histories, their namespaces
    # already ingested, so each question opens its namespace's files and searches them
    "run mem0": [*_UNTRACKED, "+design=mem0", "seed=1", "hydra.run.dir=job-new"],
}


# Commands that run a job (or compose a retriever over every question): seconds each, so their cases are marked
# slow; the others take about a second.
SLOW_COMMANDS = frozenset({"run", "run tracked", "run with prereg", "run on data file", "run on split", "resume",
                           "estimate", "retrieval", "retrieval on data file", "memory", "memory on split", "embed",
                           "run mem0"})


def fill(argv: list[str], names: dict[str, str]) -> list[str]:
    return [arg.format(**names) for arg in argv]


def build_workspace(worker: Worker, root: Path, embed_base: str) -> dict[str, str]:
    """The workspace every case copies: a real job, its caches and MLflow store, a prereg record, a filled
    embedding cache and its export, a data folder. Returns the names to fill command lines with."""
    root.mkdir(parents=True, exist_ok=True)
    sample = Path(__file__).resolve().parents[2] / "lme" / "data" / "sample_data" / "longmemeval_sample.json"
    (root / "data").mkdir()
    shutil.copyfile(sample, root / "data" / "sample.json")
    ids = [record["question_id"] for record in json.loads(sample.read_text(encoding="utf-8"))[:3]]
    (root / "data" / "ids.txt").write_text("# three questions\n" + "\n".join(ids) + "\n", encoding="utf-8")
    (root / "data" / "pins.json").write_text(json.dumps({"files": {"sample.json": {
        "sha256": hashlib.sha256((root / "data" / "sample.json").read_bytes()).hexdigest(), "repo": "local",
        "revision": "none", "recorded_at": "2025-01-01T00:00:00Z"}}}, indent=2) + "\n", encoding="utf-8")
    env = case_env({"LME_MLFLOW_TEMPLATES": str(root / NAMES["templates"])})
    names = {**NAMES, "embed_base": embed_base}
    steps = [
        [*fill(_BASE, names), "hydra.run.dir=job"],
        ["prereg", "freeze", "limit=2", "cache_dir=cache"],
        fill(COMMAND_ARGV["embed"], names),
        ["cache", "export", NAMES["export"], "cache_dir=cache"],
    ]
    for number, argv in enumerate(steps):
        result = worker.run(argv, root, env, root.parent / f"build-{number}.txt", timeout=300)
        if result.rc != 0:
            raise RuntimeError(f"building the harness's workspace: lme {' '.join(argv)} exited {result.rc}:\n"
                               f"{result.output[-3000:]}")
    (root.parent / "build-0.txt").unlink(missing_ok=True)
    with sqlite3.connect(root / NAMES["mlflow"]) as conn:
        run_id = conn.execute("SELECT run_uuid FROM runs ORDER BY start_time LIMIT 1").fetchone()[0]
    templates = sorted(path.name for path in (root / NAMES["templates"]).glob("*.db"))
    if not templates:
        raise RuntimeError("building the harness's workspace: no MLflow store template was made")
    return {**names, "run_id": run_id, "root": str(root), "template": templates[0]}


def build_mem0_workspace(worker: Worker, names: dict[str, str], root: Path) -> dict[str, str]:
    """The workspace of the Mem0 cases: a copy of the common one where a job with memory=mem0 (its offline
    extractor, the packaged MiniLM) ingested the two histories (tens of seconds: built only when a Mem0 case
    runs). Returns the names with `root` and `mem0ns`, the namespace whose files are faulted."""
    copy_workspace(names, root)
    result = worker.run([*fill(_UNTRACKED, names), "+design=mem0", "hydra.run.dir=job-mem0"], root,
                        case_env({"LME_MLFLOW_TEMPLATES": str(root / names["templates"])}),
                        root.parent / "build-mem0.txt", timeout=600)
    namespaces = sorted(path.name for path in (root / names["cache"] / "mem0").glob("lme-*")) \
        if (root / names["cache"] / "mem0").is_dir() else []
    if result.rc != 0 or not namespaces:
        raise RuntimeError(f"building the harness's Mem0 workspace: exited {result.rc}:\n{result.output[-3000:]}")
    return {**names, "root": str(root), "mem0ns": namespaces[0]}


def copy_workspace(names: dict[str, str], target: Path) -> None:
    """A copy of the workspace at `target`, its MLflow store pointing at the copy's own artifacts."""
    source = names["root"]
    shutil.copytree(source, target, symlinks=True)
    store = target / names["mlflow"]
    conn = sqlite3.connect(store)
    try:
        with conn:
            for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
                conn.execute(f"UPDATE {table} SET {column} = replace({column}, ?, ?)", (source, str(target)))
    finally:
        conn.close()


# ============================================================================================ the faults


@dataclass
class Applied:
    """What a fault did: names to fill command lines with, an environment to add, a file size limit, and
    what to undo after the case (a lock to release, an immutable flag to clear)."""

    names: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    fsize: int | None = None
    undo: list[Callable[[], None]] = field(default_factory=list)
    skip: str | None = None


def _truncate(fraction: float) -> Callable[[Path, str], Applied]:
    def fault(path: Path, fmt: str) -> Applied:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * fraction)] if fraction < 1 else data[:-7])
        return Applied()
    return fault


def _random_bytes(path: Path, fmt: str) -> Applied:
    size = max(path.stat().st_size, 4096)
    path.write_bytes(random.Random(36).randbytes(size))
    return Applied()


def _empty(path: Path, fmt: str) -> Applied:
    path.write_bytes(b"")
    return Applied()


def _missing(path: Path, fmt: str) -> Applied:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return Applied()


def _directory(path: Path, fmt: str) -> Applied:
    _missing(path, fmt)
    path.mkdir()
    (path / "inside.txt").write_text("a directory where a file was\n")
    return Applied()


def _eio(path: Path, fmt: str) -> Applied:
    """Reading it fails with an I/O error (EIO): a link to /proc/self/mem (root can read any file)."""
    _missing(path, fmt)
    path.symlink_to("/proc/self/mem")
    return Applied()


def _loop(path: Path, fmt: str) -> Applied:
    _missing(path, fmt)
    path.symlink_to(path.name)  # itself: ELOOP on open
    return Applied()


def _immutable(path: Path, fmt: str) -> Applied:
    """Read-only even for root: `chattr +i` on the file and its folder (a SQLite store's journal too)."""
    folder = path.parent
    done = subprocess.run(["chattr", "+i", str(path), str(folder)], capture_output=True)
    if done.returncode != 0:
        subprocess.run(["chattr", "-i", str(path), str(folder)], capture_output=True)
        return Applied(skip=f"chattr +i is not possible here: {done.stderr.decode(errors='replace').strip()}")
    return Applied(undo=[lambda: subprocess.run(["chattr", "-i", str(path), str(folder)], capture_output=True)])


def _locked(path: Path, fmt: str) -> Applied:
    """Another connection holds an exclusive lock for the whole case; lme waits LME_SQLITE_BUSY_TIMEOUT_S."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    conn.execute("BEGIN EXCLUSIVE")

    def release() -> None:
        conn.rollback()
        conn.close()
    return Applied(env={"LME_SQLITE_BUSY_TIMEOUT_S": LOCK_TIMEOUT_S}, undo=[release])


def _qdrant_locked(path: Path, fmt: str) -> Applied:
    """Another program holds Qdrant's lock on its folder (an exclusive flock on `.lock`, as a Qdrant client does)."""
    import fcntl

    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return Applied(undo=[lambda: os.close(handle)])


def _full_disk(path: Path, fmt: str) -> Applied:
    """No file of the command may grow past the faulted file's size (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG)."""
    return Applied(fsize=max(path.stat().st_size if path.is_file() else 0, 1))


def _sqlite_tables(path: Path) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    conn = sqlite3.connect(path)
    try:
        tables = [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        return [(t, [(c[1], (c[2] or "").upper(), bool(c[5])) for c in conn.execute(f'PRAGMA table_info("{t}")')])
                for t in tables]
    finally:
        conn.close()


def _sqlite_wrong_schema(path: Path, fmt: str) -> Applied:
    """A valid SQLite file whose tables are lme's names with other columns."""
    tables = _sqlite_tables(path)
    path.unlink()
    for sidecar in ("-wal", "-shm", "-journal"):
        Path(f"{path}{sidecar}").unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    with conn:
        for name, _ in tables:
            conn.execute(f'CREATE TABLE "{name}" (something_else TEXT)')
            conn.execute(f'INSERT INTO "{name}" VALUES (?)', ("not lme's",))
    conn.close()
    return Applied()


def _sqlite_update(path: Path, value_of: Callable[[str, str], Any]) -> None:
    """Every row changed as `value_of` says, as another program would: past the store's triggers (the ledger's
    append-only ones are dropped for the change and made again)."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
            for trigger, _ in triggers:
                conn.execute(f'DROP TRIGGER "{trigger}"')
            for name, columns in _sqlite_tables(path):
                for column, kind, primary in columns:
                    if primary:
                        continue
                    try:
                        conn.execute(f'UPDATE "{name}" SET "{column}" = ?', (value_of(column, kind),))
                    except sqlite3.DatabaseError:  # a NOT NULL or CHECK constraint: that column stays
                        pass
            for _, sql in triggers:
                conn.execute(sql)
    finally:
        conn.close()


def _sqlite_wrong_types(path: Path, fmt: str) -> Applied:
    """Every column of every row holds the other type: text where a number or blob is, a number where text is."""
    _sqlite_update(path, lambda column, kind: 12345 if "TEXT" in kind or "CHAR" in kind else "not a number")
    return Applied()


def _nan_vectors(path: Path, fmt: str) -> Applied:
    conn = sqlite3.connect(path)
    with conn:
        rows = conn.execute("SELECT key, dim FROM embeddings").fetchall()
        for key, dim in rows:
            conn.execute("UPDATE embeddings SET vector = ? WHERE key = ?",
                         (bytes.fromhex("0000c07f") * int(dim), key))  # float32 NaN
    conn.close()
    return Applied()


def _short_vectors(path: Path, fmt: str) -> Applied:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE embeddings SET vector = substr(vector, 1, length(vector) / 2)")
    conn.close()
    return Applied()


def _text_lines(path: Path, change: Callable[[Any], Any]) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        try:
            out.append(json.dumps(change(json.loads(line)), allow_nan=True))
        except ValueError:
            out.append(line)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def _listify(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: [item] if not isinstance(item, (dict, list)) else _listify(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_listify(item) for item in value]
    return [value]


def _nanify(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _nanify(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nanify(item) for item in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float("nan")
    return value


def _json_change(change: Callable[[Any], Any]) -> Callable[[Path, str], Applied]:
    def fault(path: Path, fmt: str) -> Applied:
        if fmt == "jsonl":
            _text_lines(path, change)
        elif fmt == "yaml":
            import yaml

            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            path.write_text(yaml.safe_dump(change(data)), encoding="utf-8")
        else:
            path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8"))), allow_nan=True),
                            encoding="utf-8")
        return Applied()
    return fault


def _wrong_schema_text(path: Path, fmt: str) -> Applied:
    if fmt == "jsonl":
        text = '{"unrelated": 1}\n["a", "list"]\n"a string"\n'
    elif fmt == "yaml":
        text = "- a list\n- where a mapping was\n"
    elif fmt == "json":
        text = '["a list where an object was"]'
    else:
        text = "no_such_question_id\nanother_unknown_id\n"
    path.write_text(text, encoding="utf-8")
    return Applied()


def _nested(path: Path, fmt: str) -> Applied:
    depth = 100_000
    if fmt == "yaml":
        text = "a: " + "[" * depth + "]" * depth + "\n"
    elif fmt == "jsonl":
        text = path.read_text(encoding="utf-8") + '{"question_id": ' + "[" * depth + "]" * depth + "}\n"
    else:
        text = "[" * depth + "]" * depth
    path.write_text(text, encoding="utf-8")
    return Applied()


def _huge(path: Path, fmt: str) -> Applied:
    """20 MB more (a line of one long string: past any reader's cap for a file of its kind)."""
    filler = "x" * (20 << 20)
    if fmt == "jsonl":
        extra = json.dumps({"question_id": filler}) + "\n"
    elif fmt == "yaml":
        extra = f"huge: {filler}\n"
    elif fmt == "json":
        path.write_text(json.dumps({"huge": filler}), encoding="utf-8")
        return Applied()
    else:
        extra = filler + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(extra)
    return Applied()


def _aliases(path: Path, fmt: str) -> Applied:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for index, letter in enumerate("bcdefghi"):
        previous = "abcdefghi"[index]
        lines.append(f"{letter}: &{letter} [{', '.join(['*' + previous] * 9)}]")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Applied()


def _not_utf8(path: Path, fmt: str) -> Applied:
    path.write_bytes(b"\xff\xfe\xfa not UTF-8 \x80\x81\n" + path.read_bytes()[:200])
    return Applied()


Fault = Callable[[Path, str], Applied]

# fault name -> (the registry's case it belongs to, the formats it applies to, the function)
FAULTS: dict[str, tuple[str, tuple[str, ...], Fault]] = {
    "missing": ("missing", ("*",), _missing),
    "empty": ("corrupt", ("*",), _empty),
    "truncated-100": ("corrupt", ("sqlite",), lambda p, f: (p.write_bytes(p.read_bytes()[:100]), Applied())[1]),
    "wal-debris": ("corrupt", ("sqlite",), lambda p, f: (Path(f"{p}-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(60)),
                                                          Applied())[1]),
    "truncated-half": ("corrupt", ("*",), _truncate(0.5)),
    "truncated-end": ("corrupt", ("*",), _truncate(1.0)),
    "random-bytes": ("corrupt", ("*",), _random_bytes),
    "not-utf8": ("corrupt", ("jsonl", "json", "yaml", "text"), _not_utf8),
    "wrong-schema": ("wrong_shape", ("*",), lambda p, f: _sqlite_wrong_schema(p, f) if f == "sqlite"
                     else _wrong_schema_text(p, f)),
    "wrong-types": ("wrong_shape", ("sqlite", "jsonl", "json", "yaml"),
                    lambda p, f: _sqlite_wrong_types(p, f) if f == "sqlite" else _json_change(_listify)(p, f)),
    "nan-values": ("wrong_shape", ("jsonl", "json"), _json_change(_nanify)),
    "nan-vectors": ("wrong_shape", ("vectors",), _nan_vectors),
    "short-vectors": ("wrong_shape", ("vectors",), _short_vectors),
    "deeply-nested": ("wrong_shape", ("jsonl", "json", "yaml"), _nested),
    "huge": ("wrong_shape", ("jsonl", "yaml", "text"), _huge),
    "yaml-aliases": ("wrong_shape", ("yaml",), _aliases),
    "directory": ("unreadable", ("*",), _directory),
    "io-error": ("unreadable", ("*",), _eio),
    "symlink-loop": ("unreadable", ("*",), _loop),
    "read-only": ("read_only", ("*",), _immutable),
    "locked": ("locked", ("sqlite",), _locked),
    "qdrant-locked": ("locked", ("lock",), _qdrant_locked),
    "full-disk": ("full_disk", ("*",), _full_disk),
    "non-utf8-path": ("non_utf8_path", ("*",), lambda p, f: Applied()),  # done by `Target.non_utf8`
}


# ============================================================================================ the matrix


@dataclass(frozen=True)
class Target:
    """A registry entry as it lies in the workspace, with the commands that read (or write) it."""

    key: str  # the registry's key
    path: str  # in the workspace, with placeholders
    fmt: str  # the fault formats it takes: sqlite | vectors (an embedding cache) | jsonl | json | yaml | text
    commands: tuple[str, ...]
    placeholder: str | None = None  # the name whose folder or file a non-UTF-8-path case renames
    faults: tuple[str, ...] | None = None  # only these (None: every fault of its format)
    workspace: str = "common"  # which workspace it lies in: the common one, or the Mem0 one (build_mem0_workspace)

    def fault_names(self) -> list[str]:
        formats = {self.fmt, "sqlite"} if self.fmt == "vectors" else {self.fmt}
        names = [name for name, (_, kinds, _) in FAULTS.items()
                 if "*" in kinds or formats & set(kinds)]
        return [name for name in names if self.faults is None or name in self.faults]


_CACHE_FAULTS_FOR_WRITERS = ("full-disk",)

TARGETS: tuple[Target, ...] = (
    Target("calls.sqlite", "{cache}/calls.sqlite", "sqlite", ("cache merge", "resume", "estimate"), "cache"),  # resume: a run
    Target("ledger.sqlite", "{cache}/ledger.sqlite", "sqlite", ("cost", "resume", "run"), "cache"),
    Target("embeddings.sqlite", "{cache}/embeddings.sqlite", "vectors", ("cache export", "embed", "retrieval"),
           "cache"),
    Target("embedding export", "{export}", "sqlite", ("cache import",), "export"),
    Target("traces.sqlite", "{cache}/traces.sqlite", "sqlite", ("run tracked",), "cache",
           faults=("empty", "truncated-half", "random-bytes", "wrong-schema", "directory", "io-error", "locked",
                   "full-disk")),
    Target("outcomes.jsonl", "{job}/outcomes.jsonl", "jsonl", ("cost", "resume"), "job"),
    Target("outcomes.csv", "{job}/outcomes.csv", "text", ("resume",), "job",
           faults=("directory", "read-only", "full-disk")),
    Target("metrics.json", "{job}/metrics.json", "json", ("resume",), "job", faults=("directory", "read-only")),
    Target(".hydra/config.yaml", "{job}/.hydra/config.yaml", "yaml", ("cost",), "job"),
    Target(".hydra/hydra.yaml", "{job}/.hydra/hydra.yaml", "yaml", ("cost",), "job"),
    Target(".hydra/overrides.yaml", "{job}/.hydra/overrides.yaml", "yaml", ("cost",), "job"),
    Target("mlflow.db", "{mlflow}", "sqlite", ("report", "runs repair", "export", "run tracked"), "mlflow"),
    Target("mlruns", "mlruns/{run_id}/artifacts/outcomes.jsonl", "jsonl", ("export", "report"), None,
           faults=("missing", "empty", "truncated-half", "random-bytes", "wrong-types", "deeply-nested",
                   "directory", "io-error")),
    Target("mlflow store template", "templates/{template}", "sqlite", ("runs repair new store",), None,
           faults=("empty", "truncated-half", "random-bytes", "wrong-schema", "directory", "io-error")),
    Target("prereg record", "{prereg}", "yaml", ("prereg verify", "run with prereg", "report with prereg"),
           "prereg"),
    Target("dataset file", "{dataset}", "json", ("run on data file", "retrieval on data file", "memory",
                                                  "data stats", "prereg freeze"), "dataset"),
    Target("split id file", "{ids}", "text", ("run on split", "memory on split"), "ids"),
    # memory=mem0's namespace files (the Mem0 workspace); the cache folder's non-UTF-8 path is the caches' case
    Target("lme_sessions.sqlite", "{cache}/mem0/{mem0ns}/lme_sessions.sqlite", "sqlite", ("run mem0",), None,
           workspace="mem0"),
    Target("mem0 history.db", "{cache}/mem0/{mem0ns}/history.db", "sqlite", ("run mem0",), None, workspace="mem0"),
    # the Qdrant folder through the files Qdrant keeps in it: its points (SQLite) and its meta.json
    Target("mem0 qdrant folder", "{cache}/mem0/{mem0ns}/qdrant/collection/memories/storage.sqlite", "sqlite",
           ("run mem0",), None, workspace="mem0"),
    Target("mem0 qdrant folder", "{cache}/mem0/{mem0ns}/qdrant/meta.json", "json", ("run mem0",), None,
           faults=("missing", "truncated-half", "random-bytes", "wrong-types", "directory"), workspace="mem0"),
    Target("mem0 qdrant folder", "{cache}/mem0/{mem0ns}/qdrant", "folder", ("run mem0",), None,
           faults=("missing",), workspace="mem0"),
    Target("mem0 qdrant folder", "{cache}/mem0/{mem0ns}/qdrant/.lock", "lock", ("run mem0",), None,
           faults=("qdrant-locked",), workspace="mem0"),
)

# Registry entries the harness does not fault, each with its reason (a test checks every entry is one or other).
NOT_FAULTED: dict[str, str] = {
    "onnx export": "a fault makes the next run export the model again (10-20 s a case); lme.retrieval.onnx_runtime "
                   "writes it atomically",
    "memory_systems.sqlite": "opened through lme.util.sqlite.open_store like the stores faulted here; its corrupt, "
                             "locked and full-disk cases are tested in tests/memory/test_systems.py",
    "local memory system index": "opened through lme.util.sqlite.open_store; read only by memory=system_local, "
                                 "its faults tested in tests/memory/test_systems.py",
    "mem0 namespace lock": "its content is never read (an empty file for a flock); a directory in its place is "
                           "refused by lme.memory.systems.mem0 (tests/memory/test_mem0.py)",
    "mem0 home": "Mem0's own best-effort file (read as empty when malformed, rewritten); Mem0 is imported once by "
                 "the harness's warm worker, before a case's MEM0_DIR, so a case cannot point Mem0 at its copy",
    "hub model cache": "huggingface_hub's own folder (MiniLM ships in a package: no hub cache is read)",
    "mlflow store lock": "its content is never read; it lives in the system's temporary folder, shared by the "
                         "test processes",
    "sample dataset": "lme's own package file; the same parser is faulted through `dataset file`",
    "judge_templates.json": "read only by a paid judge's run (a key); its parser is property-tested "
                            "(tests/test_properties.py) and faulted by tests/data",
    "locomo judge template": "read only by judge=locomo_j (a key); its content is Mem0's text (not in the project); "
                             "its reader is faulted by tests/test_locomo_judge.py",
    "pins.json": "read by `lme data fetch` only (the network); its parser is property-tested (tests/test_properties.py)",
    "study_instructions.json": "its valid content is the study's own text (not in the project); its parser is "
                               "property-tested (tests/test_properties.py)",
    "fetch staging": "a temporary folder of `lme data fetch` (the network)",
    "hydra_run.log": "Hydra's log, only appended",
    "multirun.yaml": "written by Hydra for a sweep, never read",
    "report output": "only written, to a folder named by --out",
    "hypothesis file": "only written, to --out",
    "eval-results file": "the official scripts' output; its reader is tested in tests/test_interop.py",
    "design files": "composition errors are tested in tests/test_config.py; aliases and nesting by lme.util.yamlfile",
    "instruction texts": "lme's own package files",
}


@dataclass(frozen=True)
class Case:
    target: Target
    fault: str
    command: str

    @property
    def id(self) -> str:
        key = self.target.key
        if key == "mem0 qdrant folder":  # faulted through several of its files
            key = f"{key}:{self.target.path.rsplit('/qdrant', 1)[1].lstrip('/') or '.'}"
        return f"{key}|{self.fault}|{self.command}"


# A command that runs a job takes seconds: it meets one fault of each class; the cheap commands meet them all.
SLOW_COMMAND_FAULTS = ("missing", "truncated-half", "random-bytes", "wrong-types", "nan-vectors", "short-vectors",
                       "deeply-nested", "directory", "locked", "qdrant-locked", "full-disk", "non-utf8-path")


def cases() -> list[Case]:
    return [Case(target, fault, command) for target in TARGETS for fault in target.fault_names()
            for command in target.commands
            if command not in SLOW_COMMANDS or fault in SLOW_COMMAND_FAULTS]


# ============================================================================================ checks


SIDECARS = ("-wal", "-shm", "-journal")


def checksums(root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            try:
                found[os.fsdecode(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
    return found


def registry_command(command: str) -> str:
    """The registry's name (lme.util.stored_state.COMMANDS) of one of the harness's command lines."""
    return {"run tracked": "run", "run with prereg": "run", "run on data file": "run", "run on split": "run",
            "report with prereg": "report", "runs repair new store": "runs repair",
            "retrieval on data file": "retrieval", "memory on split": "memory", "run mem0": "run"}.get(command, command)


def may_change(relative: str, command: str, names: dict[str, str]) -> bool:
    """Whether `command` is one that writes the file at `relative` (the registry's writers), or it is a file
    any command may touch (SQLite's sidecars, Hydra's log)."""
    from lme.util.stored_state import stored

    if relative.endswith(SIDECARS) or relative.endswith("hydra_run.log"):
        return True
    verb = registry_command(command)
    first = relative.split("/", 1)[0]
    if "/mem0/" in relative:  # memory=mem0's namespace files
        tail = relative.rsplit("/", 1)[-1]
        key = ("mem0 home" if "/mem0/home/" in relative else "mem0 qdrant folder" if "/qdrant/" in relative
               else "mem0 namespace lock" if tail == "lme.lock" else "mem0 history.db" if tail == "history.db"
               else tail)
    elif relative.startswith("mlruns/"):
        key = "mlruns"
    elif relative.startswith("templates/"):
        key = "mlflow store template"
    elif first == names["cache"] or first.startswith("cache"):
        key = relative.rsplit("/", 1)[-1]
        key = key if key.endswith(".sqlite") else "onnx export"
    elif first.startswith("job"):
        tail = relative.split("/", 1)[1] if "/" in relative else relative
        key = tail
    elif relative.endswith(".db"):
        key = "mlflow.db"
    else:
        return False
    try:
        entry = stored(key)
    except KeyError:
        return False
    return verb in entry.writers


@dataclass
class Verdict:
    outcome: str  # refused | recovered | accepted | skipped | traceback | hang | unclear | accepted-against-contract | other-changed
    detail: str

    @property
    def failed(self) -> bool:
        return self.outcome not in ("refused", "recovered", "accepted", "skipped")


def names_the_file(message: str, case: Case, names: dict[str, str], path: Path) -> bool:
    """Whether a refusal names the faulted file (its name, its folder's setting, or its key; a name that is
    not UTF-8 as lme prints it, each such byte as \\xNN). On a full disk, the file whose write failed is named
    (RLIMIT_FSIZE holds for every file of the command)."""
    if FAULTS[case.fault][0] == "full_disk" and ("disk" in message or "file size" in message):
        return True
    text = message.lower().replace("\\xff", "\udcff")
    words = {case.target.key, path.name, os.fsdecode(path.name), names.get(case.target.placeholder or "", ""),
             case.target.key.split(".")[0]}
    words |= {os.fsdecode(path.parent.name)} if case.target.key.startswith(".hydra") else set()
    if case.target.key == "mlruns":
        words |= {"artifact", names["run_id"]}
    if case.target.key == "mem0 qdrant folder":
        words |= {"qdrant"}
    if case.target.key == "mlflow store template":
        words |= {"template", "store"}
    return any(word and word.lower() in text for word in words)


def registry_case_of(case: Case) -> str:
    """The registry's case a fault is: an empty SQLite file is a new, empty database to SQLite, so it is held
    to the contract of a missing one."""
    if case.fault == "empty" and case.target.fmt in ("sqlite", "vectors"):
        return "missing"
    return FAULTS[case.fault][0]


def classify(case: Case, result: Result, changed: list[str], names: dict[str, str], path: Path) -> Verdict:
    from lme.util.stored_state import stored

    registry_case = registry_case_of(case)
    contract = stored(case.target.key).contract.of_fault(registry_case, case.fault)
    outcome_word = contract.split(":", 1)[0]
    text = result.output
    tail = text.strip()[-600:]
    if result.timed_out:
        return Verdict("hang", f"no end after {CASE_TIMEOUT_S:.0f} s")
    if "Traceback (most recent call last)" in text or result.rc == 1 or result.rc < 0:
        last = [line for line in text.strip().splitlines() if line.strip()][-1:] or [f"exit {result.rc}"]
        return Verdict("traceback", last[0][:300])
    if changed:
        return Verdict("other-changed", "changed or removed: " + ", ".join(changed[:5]))
    if result.rc == 2:
        # a job stopped by a file it keeps (lme.study.resume.store_stop_message): `lme: stopped: <the file's sentence>`,
        # then what is kept and the resume command
        errors = [line for line in text.splitlines() if line.startswith("lme: error:")
                  or (line.startswith("lme: stopped:") and "resume with: " in text)]
        if not errors:
            return Verdict("unclear", f"exit 2 without an `lme: error:` or `lme: stopped:` line: {tail[-300:]}")
        if not names_the_file(errors[-1], case, names, path):
            return Verdict("unclear", f"does not name the file: {errors[-1][:300]}")
        return Verdict("refused", errors[-1][:300])
    if result.rc == 0:
        if outcome_word in ("created", "recovered", "ignored", "accepted", "n/a"):
            return Verdict("recovered" if outcome_word in ("created", "recovered") else "accepted", contract)
        return Verdict("accepted-against-contract", f"exit 0; the contract says {contract!r}")
    return Verdict("unclear", f"exit {result.rc}: {tail[-300:]}")


# ============================================================================================ the summary

OUTCOME_KEY = "lme_corruption"


def summary_line(outcomes: list[str]) -> str | None:
    """'lme corruption harness: N cases: ...' from the outcomes of every case run (None when none ran)."""
    if not outcomes:
        return None
    count = {name: outcomes.count(name) for name in set(outcomes)}
    good = [f"{count.get('refused', 0)} refused in one sentence", f"{count.get('recovered', 0)} recovered",
            f"{count.get('accepted', 0)} accepted"]
    if count.get("skipped"):
        good.append(f"{count['skipped']} skipped")
    bad = [f"{count.get('traceback', 0)} tracebacks", f"{count.get('hang', 0)} hangs",
           f"{count.get('other-changed', 0)} other files changed", f"{count.get('unclear', 0)} unclear",
           f"{count.get('accepted-against-contract', 0)} accepted against their contract"]
    return f"lme corruption harness: {len(outcomes)} cases: {', '.join(good)}; {', '.join(bad)}"


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    serve()
