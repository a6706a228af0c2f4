"""External memory systems as memory builders (issue 40): the adapter's builder over lme's offline system
(lme/memory/systems/local.py, real SQLite FTS5 stores in a temp folder): ingestion once per (history, system,
settings), a killed ingestion resumed with nothing sent twice, the readiness barrier, isolated namespaces,
the journal's faults in one sentence, and `python -m lme +design=system_local` end to end."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from full_disk import file_size_limit
from histories import make_question, question_record
from lme.data.load import parse_question
from lme.memory.base import MemoryFailed
from lme.memory.systems.base import SystemMemoryBuilder, system_sessions
from lme.memory.systems.journal import JOURNAL_FILE, IngestionJournal
from lme.memory.systems.local import LocalSystem
from lme.util.sqlite import StoreError


SESSIONS = [
    [("user", "I adopted a grey kitten named Pixel last week."), ("assistant", "Pixel is a lovely name for a cat.")],
    [("user", "My sister is visiting Lisbon in the spring."), ("assistant", "Lisbon has wonderful tiled streets.")],
    [("user", "I started learning the cello on Tuesdays."), ("assistant", "The cello suits patient practice.")],
    [("user", "Pixel knocked my cello bow off the table."), ("assistant", "Kittens love dangling things.")],
    [("user", "We booked a cabin near the lake for August."), ("assistant", "A lake cabin sounds restful.")],
]
QUESTION = "Which grey kitten did I adopt?"


def builder(cache: Path, system: LocalSystem | None = None, **options) -> SystemMemoryBuilder:
    """The builder as conf/memory/system_local.yaml makes it, over `cache`."""
    system = system or LocalSystem(cache / "local_system")
    options.setdefault("poll_interval_s", 0.01)
    return SystemMemoryBuilder(system, cache_path=cache / JOURNAL_FILE, name="system_local", **options)


def received(system: LocalSystem, namespace: str) -> dict[str, int]:
    """Ingest calls the system received per session (its own store)."""
    return system.calls(namespace)


def test_ingestion_happens_once_per_history_system_and_settings(tmp_path):
    question = make_question(QUESTION, SESSIONS)
    first = builder(tmp_path).build(question)
    assert first.notes["ingested_now"] == "5" and first.notes["ingested_reused"] == "0"
    assert "Pixel" in first.text and first.text.startswith("[s0000:0] (score ")
    for _ in ("seed 2", "a rerun"):  # a new builder: as a later job or process sees it
        again = builder(tmp_path).build(question)
        assert again.notes["ingested_now"] == "0" and again.notes["ingested_reused"] == "5"
        assert again.text == first.text and again.notes["namespace"] == first.notes["namespace"]
    system = LocalSystem(tmp_path / "local_system")
    assert received(system, first.notes["namespace"]) == {f"s000{i}": 1 for i in range(5)}
    # a changed setting: a new namespace, ingested again; the first untouched
    changed_system = LocalSystem(tmp_path / "local_system", roles=["user"])
    changed = builder(tmp_path, changed_system).build(question)
    assert changed.notes["namespace"] != first.notes["namespace"]
    assert changed.notes["ingested_now"] == "5"
    assert " assistant: " not in changed.text and " user: " in changed.text
    assert received(system, first.notes["namespace"]) == {f"s000{i}": 1 for i in range(5)}
    # the delays change only when, not what is stored: the same namespace
    slow = LocalSystem(tmp_path / "local_system", ingest_latency_s=0.01, index_delay_s=0.01)
    assert builder(tmp_path, slow).build(question).notes["namespace"] == first.notes["namespace"]


def test_the_namespace_reads_the_history_content_only(tmp_path):
    question = make_question(QUESTION, SESSIONS, question_id="q1")
    same_history = make_question("Where is my sister going?", SESSIONS, question_id="q2")
    other = make_question(QUESTION, [*SESSIONS[:4], [("user", "We booked a cabin near the sea for August.")]])
    made = builder(tmp_path)
    assert made.namespace(question) == made.namespace(same_history)
    assert made.namespace(question) != made.namespace(other)
    assert made.build(same_history).notes["ingested_reused"] == "0"
    assert made.build(question).notes["ingested_now"] == "0"


def test_namespaces_are_isolated(tmp_path):
    kitten = make_question(QUESTION, SESSIONS[:2], question_id="q1")
    harbour = make_question("Which harbour did I sail from?",
                            [[("user", "I sailed from Falmouth harbour on my new dinghy.")]], question_id="q2")
    made = builder(tmp_path)
    kitten_memory, harbour_memory = made.build(kitten), made.build(harbour)
    assert "Falmouth" in harbour_memory.text and "Pixel" not in harbour_memory.text
    assert "Falmouth" not in kitten_memory.text
    leaking = make_question("Which harbour did I sail from with Pixel?", SESSIONS[:2], question_id="q3")
    memory = made.build(leaking)  # the kitten history's namespace: nothing of the harbour one
    assert "Falmouth" not in memory.text and "Pixel" in memory.text
    assert len({made.namespace(q) for q in (kitten, harbour)}) == 2


def test_search_waits_for_readiness(tmp_path):
    system = LocalSystem(tmp_path / "local_system", index_delay_s=0.6)  # its search refuses to run early
    question = make_question(QUESTION, SESSIONS)
    begun = time.monotonic()
    memory = builder(tmp_path, system).build(question)
    assert time.monotonic() - begun >= 0.6
    assert float(memory.notes["ready_wait_s"]) >= 0.5
    assert "Pixel" in memory.text
    assert system.last_stored(memory.notes["namespace"]) <= time.time() - 0.6


class CountingSystem(LocalSystem):
    """lme's offline system, counting its searches."""

    searches = 0

    def search(self, namespace, question_text, top_k):
        self.searches += 1
        return super().search(namespace, question_text, top_k)


def test_a_system_not_ready_in_time_fails_the_question_unsearched(tmp_path):
    system = CountingSystem(tmp_path / "local_system", index_delay_s=30)
    question = make_question(QUESTION, SESSIONS)
    made = builder(tmp_path, system, ready_timeout_s=0.2)
    with pytest.raises(MemoryFailed) as failed:
        made.build(question)
    message = str(failed.value)
    assert "\n" not in message and message.startswith("SystemNotReady: memory step system_local (model local)")
    assert made.namespace(question) in message and "within 0.2 s" in message
    assert system.searches == 0


@pytest.mark.slow
def test_a_memory_system_not_ready_is_the_question_s_memory_error_in_a_run(tmp_path):
    result = run_lme(tmp_path, "+design=system_local", "limit=2", "memory.system.index_delay_s=30",
                     "memory.ready_timeout_s=0.2", f"hydra.run.dir={tmp_path}/job")
    assert result.returncode == 5, result.stderr[-3000:]  # answers missing: a rerun asks for them again
    assert "2 answers missing" in result.stderr and "Traceback" not in result.stderr
    rows = [json.loads(line) for line in (tmp_path / "job" / "outcomes.jsonl").read_text().splitlines() if line]
    assert len(rows) == 2
    for row in rows:
        assert row["answer"] is None
        assert row["memory_error"].startswith("SystemNotReady: memory step system_local (model local)")


def test_two_jobs_building_one_history_at_once_ingest_it_once(tmp_path):
    system = LocalSystem(tmp_path / "local_system", ingest_latency_s=0.05)
    question = make_question(QUESTION, SESSIONS)
    made = [builder(tmp_path, system), builder(tmp_path, system)]  # two jobs, one journal file
    memories = [None, None]

    def build(index):
        memories[index] = made[index].build(question)

    threads = [threading.Thread(target=build, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert memories[0].text == memories[1].text
    assert sorted(int(memory.notes["ingested_now"]) for memory in memories) == [0, 5]
    assert received(system, made[0].namespace(question)) == {f"s000{i}": 1 for i in range(5)}


KILLED_BUILD = """  # argv: the question record's file, the cache folder, the system's ingest latency
import json, sys
from pathlib import Path
from lme.data.load import parse_question
from lme.memory.systems.base import SystemMemoryBuilder
from lme.memory.systems.local import LocalSystem
question = parse_question(json.loads(Path(sys.argv[1]).read_text()), Path("synthetic.json"), 0)
cache = Path(sys.argv[2])
system = LocalSystem(cache / "local_system", ingest_latency_s=float(sys.argv[3]))
print(SystemMemoryBuilder(system, cache_path=cache / "memory_systems.sqlite", poll_interval_s=0.01).build(question).text)
"""


def acknowledged(cache: Path) -> int:
    path = cache / JOURNAL_FILE
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM ingested").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def test_a_killed_ingestion_resumes_and_sends_nothing_twice(tmp_path):
    record = question_record(QUESTION, SESSIONS)
    (tmp_path / "q.json").write_text(json.dumps(record))
    question = parse_question(record, Path("synthetic.json"), 0)
    cache = tmp_path / "cache"
    child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "q.json"), str(cache), "0.4"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while acknowledged(cache) < 2 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before = acknowledged(cache)
    assert 2 <= before < 5, child.stderr.read().decode()[-2000:]
    journal = IngestionJournal(cache / JOURNAL_FILE)
    namespace = builder(cache).namespace(question)
    assert journal._conn.execute("SELECT pid FROM claims").fetchall() == [(child.pid,)]  # left by the killed job
    journal.close()

    resumed = builder(cache).build(question)  # takes over the dead job's claim
    assert resumed.notes["ingested_reused"] == str(before) and resumed.notes["ingested_now"] == str(5 - before)
    system = LocalSystem(cache / "local_system")
    assert received(system, namespace) == {f"s000{i}": 1 for i in range(5)}  # every session sent exactly once
    reference = builder(tmp_path / "uninterrupted").build(question)
    assert resumed.text == reference.text
    journal = IngestionJournal(cache / JOURNAL_FILE)
    assert journal.counts(namespace) == (5, 5) and journal.state(namespace).done
    assert journal._conn.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
    journal.close()


def test_two_processes_building_one_history_at_once_ingest_it_once(tmp_path):
    record = question_record(QUESTION, SESSIONS)
    (tmp_path / "q.json").write_text(json.dumps(record))
    cache = tmp_path / "cache"
    children = [subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "q.json"), str(cache), "0.1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err[-2000:] for _, err in outputs]
    assert outputs[0][0] == outputs[1][0] and "Pixel" in outputs[0][0]
    namespace = builder(cache).namespace(parse_question(record, Path("synthetic.json"), 0))
    assert received(LocalSystem(cache / "local_system"), namespace) == {f"s000{i}": 1 for i in range(5)}


# ---------------------------------------------------------------------------------------- the journal's faults


def test_a_corrupt_journal_is_one_sentence_naming_it(tmp_path):
    (tmp_path / JOURNAL_FILE).write_bytes(b"this is not a database, just some bytes" * 50)
    with pytest.raises(StoreError) as failed:
        builder(tmp_path).build(make_question(QUESTION, SESSIONS))
    message = str(failed.value)
    assert failed.value.fault == "damaged" and str(tmp_path / JOURNAL_FILE) in message and "\n" not in message
    assert "memory-system ingestion journal" in message


def test_a_locked_journal_is_one_sentence_naming_it(tmp_path, monkeypatch):
    IngestionJournal(tmp_path / JOURNAL_FILE).close()
    holder = sqlite3.connect(tmp_path / JOURNAL_FILE, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    monkeypatch.setenv("LME_SQLITE_BUSY_TIMEOUT_S", "0.2")
    try:
        with pytest.raises(StoreError) as failed:
            builder(tmp_path).build(make_question(QUESTION, SESSIONS))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert failed.value.fault == "locked" and str(tmp_path / JOURNAL_FILE) in str(failed.value)


def test_a_full_disk_under_the_journal_is_one_sentence_naming_it(tmp_path):
    IngestionJournal(tmp_path / JOURNAL_FILE).close()
    made = builder(tmp_path)
    made.journal()  # opened before the disk fills
    with file_size_limit(1000), pytest.raises(StoreError) as failed:
        made.build(make_question(QUESTION, SESSIONS))
    assert failed.value.fault == "full" and str(tmp_path / JOURNAL_FILE) in str(failed.value)


def test_bad_settings_are_refused_in_one_sentence(tmp_path):
    from lme.util.errors import LmeError

    with pytest.raises(LmeError, match="memory.system.roles"):
        LocalSystem(tmp_path, roles=["narrator"])
    with pytest.raises(LmeError, match="memory.ready_timeout_s"):
        builder(tmp_path, ready_timeout_s=-1)
    with pytest.raises(LmeError, match="tokenizer"):
        LocalSystem(tmp_path, tokenizer="no_such_tokenizer")


def test_sessions_reach_the_system_in_order_with_dates_and_speakers():
    question = make_question(QUESTION, SESSIONS)
    sessions = system_sessions(question)
    assert [s.session_id for s in sessions] == [f"s000{i}" for i in range(5)]
    assert [s.date for s in sessions] == sorted(s.date for s in sessions)
    assert sessions[0].turns[0].role == "user" and sessions[0].turns[0].text == SESSIONS[0][0][1]


# ---------------------------------------------------------------------------------------- end to end


def run_lme(tmp: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "lme", *overrides, "tracking.enabled=false", f"cache_dir={tmp}/cache"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


def ingest_calls(cache: Path) -> dict[str, dict[str, int]]:
    """Every namespace's ingest calls per session, from the local system's own stores."""
    system = LocalSystem(cache / "local_system")
    return {path.name.split(".")[0]: system.calls(path.name.split(".")[0])
            for path in sorted((cache / "local_system").glob("*.fts5.sqlite"))}


@pytest.mark.slow
def test_the_design_runs_end_to_end_and_later_seeds_and_reruns_ingest_nothing(tmp_path):
    result = run_lme(tmp_path, "+design=system_local", "limit=5", f"hydra.sweep.dir={tmp_path}/sweep", "-m",
                     "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1"):
        rows = [json.loads(line) for line in (tmp_path / "sweep" / job / "outcomes.jsonl").read_text().splitlines()]
        assert len(rows) == 5 and all(row["memory_error"] is None for row in rows)
    calls = ingest_calls(tmp_path / "cache")
    journal = IngestionJournal(tmp_path / "cache" / JOURNAL_FILE)
    namespaces = journal._conn.execute("SELECT namespace, sessions, done FROM namespaces").fetchall()
    assert namespaces and set(calls) == {row[0] for row in namespaces}
    assert all(row[2] is not None for row in namespaces)
    for namespace, sessions, _ in namespaces:
        assert len(calls[namespace]) == sessions and set(calls[namespace].values()) == {1}
    journal.close()
    rerun = run_lme(tmp_path, "+design=system_local", "limit=5", "seed=3", f"hydra.run.dir={tmp_path}/rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert ingest_calls(tmp_path / "cache") == calls  # a new process: every namespace done, nothing sent


@pytest.mark.slow
def test_a_corrupt_journal_stops_the_run_in_one_sentence(tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / JOURNAL_FILE).write_bytes(b"\x00garbage" * 300)
    result = run_lme(tmp_path, "+design=system_local", "limit=1", f"hydra.run.dir={tmp_path}/job")
    assert result.returncode == 2, result.stderr[-3000:]
    assert JOURNAL_FILE in result.stderr and "Traceback" not in result.stderr


def test_where_the_stores_live_is_not_part_of_the_design():
    """The journal's and the index's paths are run-only keys: a design frozen on one machine is the same design
    under another cache folder; the system's settings are part of it."""
    from omegaconf import OmegaConf

    from lme.config.compose import compose_config
    from lme.config.design import canonical_design

    def design(*overrides):
        return canonical_design(OmegaConf.to_container(compose_config(["+design=system_local", *overrides]),
                                                       resolve=True))

    here, there = design("cache_dir=/tmp/a"), design("cache_dir=/tmp/b")
    assert here == there and "cache_path" not in here["memory"] and "index_dir" not in here["memory"]["system"]
    assert design("memory.system.tokenizer=unicode61") != here
    # how long and how often lme waits for a system is not part of the design either
    assert design("cache_dir=/tmp/a", "memory.ready_timeout_s=5", "memory.poll_interval_s=1",
                  "memory.system.ingest_latency_s=2", "memory.system.index_delay_s=3") == here


def test_an_estimate_ingests_and_searches_nothing(tmp_path):
    """`lme estimate` of a memory-system design makes no ingestion (which may cost a system's model calls) and
    counts the reader's input at the memory's largest."""
    done = subprocess.run(
        [sys.executable, "-m", "lme", "estimate", "+design=system_local", "limit=3", f"cache_dir={tmp_path}/cache"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("LME_")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "memory system local: nothing ingested or searched" in done.stdout + done.stderr
    assert not (tmp_path / "cache" / "memory_systems.sqlite").exists()
    assert not (tmp_path / "cache" / "local_system").exists()


# ---------------------------------------------------------------------------------------- measured (item 4)


class PayingSystem(LocalSystem):
    """lme's offline system, as a system whose ingestion and search make model calls through lme's gateway would
    hand them over (`take_calls`), and which reports what its ingestion cost (`reported_cost_usd`)."""

    def __init__(self, *args, reported=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending, self.reported = [], reported

    def _call(self, tokens):
        from lme.models.gateway import CallResult

        return CallResult(model="lme-offline/extractive-reader", key=f"k{len(self.pending)}", text="{}",
                          input_tokens=tokens, output_tokens=7, cost_usd=tokens * 1e-6)

    def ingest(self, namespace, sessions):
        for session_id in super().ingest(namespace, sessions):
            self.pending.append(self._call(100))  # one extraction call per session
            yield session_id

    def search(self, namespace, question_text, top_k):
        self.pending.append(self._call(10))  # one embedding-like call per search
        return super().search(namespace, question_text, top_k)

    def take_calls(self):
        taken, self.pending = self.pending, []
        return taken

    def reported_cost_usd(self, namespace):
        return self.reported


def test_the_notes_measure_ingestion_once_and_hold_the_system_s_raw_results(tmp_path):
    system = LocalSystem(tmp_path / "local_system", ingest_latency_s=0.02)
    question = make_question(QUESTION, SESSIONS)
    first = builder(tmp_path, system, max_bytes=120).build(question)  # room for one result: the rest skipped
    assert float(first.notes["ingest_s"]) >= 5 * 0.02 and first.notes["ingest_calls"] == "0"
    assert first.notes["search_calls"] == "0" and first.model_calls == ()
    raw = json.loads(first.notes["system_results"])
    expected = system.search(first.notes["namespace"], QUESTION, 100)
    assert raw == [{"id": r.id, "score": r.score, "text": r.text} for r in expected]  # every result, in order
    assert len(raw) == int(first.notes["results"]) > int(first.notes["included"]) == len(first.turn_ids) == 1
    again = builder(tmp_path, system).build(question)  # a later seed: nothing ingested, nothing spent on it
    assert again.notes["ingest_s"] == "0.000" and again.notes["ingested_now"] == "0"
    assert again.notes["ingest_cost_usd"] == "0.00000000"


def test_a_system_s_model_calls_are_taken_after_ingest_and_after_search(tmp_path):
    from lme.answer.run import CallStats, SystemStats

    system = PayingSystem(tmp_path / "local_system", reported=0.25)
    question = make_question(QUESTION, SESSIONS)
    memory = builder(tmp_path, system).build(question)
    notes = memory.notes
    assert (notes["ingest_calls"], notes["ingest_input_tokens"], notes["ingest_output_tokens"]) == ("5", "500", "35")
    assert float(notes["ingest_cost_usd"]) == pytest.approx(500e-6)
    assert notes["ingest_reported_cost_usd"] == "0.25000000"
    assert (notes["search_calls"], float(notes["search_cost_usd"])) == ("1", pytest.approx(10e-6))
    assert [call.input_tokens for call in memory.model_calls] == [100] * 5 + [10]  # the outcome counts them all
    assert CallStats.of_calls(memory.model_calls).cost_usd == pytest.approx(510e-6)
    stats = SystemStats.of(memory)
    assert (stats.ingested_now, stats.ingest_calls, stats.reported_cost_usd) == (5, 5, 0.25)
    assert stats.ingest_cost_usd == pytest.approx(500e-6) and stats.search_calls == 1
    later = SystemStats.of(builder(tmp_path, system).build(question))  # the history was ingested: counted once
    assert (later.ingested_now, later.ingested_reused, later.ingest_calls, later.ingest_s) == (0, 5, 0, 0.0)
    assert later.reported_cost_usd is None and later.search_calls == 1


def test_a_build_that_fails_after_ingesting_keeps_the_calls_it_made(tmp_path):
    system = PayingSystem(tmp_path / "local_system", index_delay_s=30)
    with pytest.raises(MemoryFailed) as failed:
        builder(tmp_path, system, ready_timeout_s=0.1).build(make_question(QUESTION, SESSIONS))
    assert str(failed.value).startswith("SystemNotReady:") and len(failed.value.calls) == 5  # paid: counted


def test_an_outcome_row_carries_the_system_s_figures_and_reads_back(tmp_path):
    from lme.answer.run import Outcome, SystemStats, outcome_row, parse_journal_line

    memory = builder(tmp_path, PayingSystem(tmp_path / "local_system")).build(make_question(QUESTION, SESSIONS))
    outcome = Outcome("q1", "single-session-user", False, "Pixel", True, None, "yes", "", memory.n_bytes,
                      len(memory.turn_ids), system=SystemStats.of(memory))
    row = json.loads(outcome.to_json())
    assert row["system"]["ingested_now"] == 5 and row["system"]["namespace"] == memory.notes["namespace"]
    assert parse_journal_line(outcome.to_json()) == outcome
    plain = Outcome("q2", "single-session-user", False, "x", True, None, "yes", "", 1, 1)
    assert "system" not in outcome_row(plain) and parse_journal_line(plain.to_json()).system is None
    from lme.util.errors import LmeError

    with pytest.raises(LmeError, match="field system.namespace"):
        parse_journal_line(json.dumps({**row, "system": {**row["system"], "namespace": ""}}))
    with pytest.raises(LmeError, match="field system.ingest_calls"):
        parse_journal_line(json.dumps({**row, "system": {**row["system"], "ingest_calls": "5"}}))


_WITHOUT_PACKAGES = """
import runpy, sys
for name in ("mem0", "supermemory", "zep_cloud"):
    sys.modules[name] = None  # as if the 'systems' extra were not installed
sys.argv = ["lme", *sys.argv[1:]]
runpy.run_module("lme", run_name="__main__")
"""


@pytest.mark.parametrize(("design", "package"), [("mem0", "mem0ai==2.2.1"), ("supermemory", "supermemory==5.0.1"),
                                                 ("zep", "zep-cloud==4.0.1")])
def test_a_system_whose_package_is_not_installed_is_refused_before_the_run(tmp_path, design, package):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PACKAGES, f"+design={design}", "limit=2",
                           f"cache_dir={tmp_path}/cache", "tracking.enabled=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, env=env | {"SUPERMEMORY_API_KEY": "k", "ZEP_API_KEY": "k"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"lme: error: memory system {design} needs the Python package {package}, which is not installed: "
        f'pip install -e ".[systems]" (or pip install {package}).')
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()
