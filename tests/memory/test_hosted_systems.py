"""The hosted memory systems (issue 40, item 3): Supermemory and Zep through their real SDKs against the loopback
server that speaks their HTTP calls (tests/loopback_systems.py). Ingestion one unit per session with its date and
speakers (asserted on what the server received), each history in its own namespace, the ready barrier (the server
processes slowly; no search arrives before it finished), 429s with Retry-After and 5xx retried with bounded,
counted attempts (the SDKs' own retries off), a 401 stopping the study (SystemicFailure, exit status 4), the key
from the environment only and never in what lme writes, and `python -m lme +design=supermemory|zep` end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from histories import FIRST_DAY, make_question
from loopback_systems import Fault, LoopbackSystems
from lme.data.dates import format_moment
from lme.memory.base import MemoryFailed
from lme.memory.systems.base import SystemMemoryBuilder, system_sessions
from lme.memory.systems.hosted import HostedCalls, RetryPolicy, retry_after_of
from lme.memory.systems.journal import JOURNAL_FILE
from lme.memory.systems.supermemory import SupermemorySystem
from lme.memory.systems.zep import ZepSystem
from lme.models.gateway import SystemicFailure
from lme.models.keys import KeyRefused
from lme.util.errors import LmeError

SM_KEY = "sm-loopback-7f3a9c21e5d84b6f"
ZEP_KEY = "zep-loopback-91bd0e44c2a7f356"
SESSIONS = [
    [("user", "I adopted a grey kitten named Pixel last week."), ("assistant", "Pixel is a lovely name for a cat.")],
    [("user", "My sister is visiting Lisbon in the spring."), ("assistant", "Lisbon has wonderful tiled streets.")],
    [("user", "I started learning the cello on Tuesdays."), ("assistant", "The cello suits patient practice.")],
]
QUESTION = "Which grey kitten did I adopt?"


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("SUPERMEMORY_API_KEY", SM_KEY)
    monkeypatch.setenv("ZEP_API_KEY", ZEP_KEY)


def supermemory(server: LoopbackSystems, **options) -> SupermemorySystem:
    options.setdefault("backoff_base_s", 0.01)
    return SupermemorySystem(base_url=server.url, **options)


def zep(server: LoopbackSystems, **options) -> ZepSystem:
    options.setdefault("backoff_base_s", 0.01)
    return ZepSystem(base_url=server.zep_url, **options)


def builder(cache: Path, system, **options) -> SystemMemoryBuilder:
    options.setdefault("poll_interval_s", 0.02)
    options.setdefault("ready_timeout_s", 20)
    return SystemMemoryBuilder(system, cache_path=cache / JOURNAL_FILE, name=system.name, **options)


def with_speakers(question, names=("Caroline", "Melanie")):
    """The question with every user turn spoken by names[0] and every assistant turn by names[1] (as LoCoMo's)."""
    sessions = tuple(dataclasses.replace(session, turns=tuple(
        dataclasses.replace(turn, speaker=names[0] if turn.role == "user" else names[1]) for turn in session.turns))
        for session in question.sessions)
    return dataclasses.replace(question, sessions=sessions)


def searched_after_ready(server: LoopbackSystems, search_path: str) -> None:
    """Every search arrived once everything was processed, and the builder had asked before that."""
    assert server.early_searches == 0
    searches = [r for r in server.requests if search_path in r.path]
    assert searches
    last_added = max(r.at for r in server.requests if r.method == "POST" and (
        r.path.endswith("/document") or r.path.endswith("/messages")))
    assert min(r.at for r in searches) >= last_added + server.processing_s - 0.01


# ------------------------------------------------------------------------------------------------ Supermemory


def test_supermemory_ingests_one_dated_document_per_session_and_searches_only_when_processed(tmp_path):
    question = with_speakers(make_question(QUESTION, SESSIONS))
    with LoopbackSystems(processing_s=0.5) as server:
        made = builder(tmp_path, supermemory(server))
        memory = made.build(question)
        namespace = memory.notes["namespace"]
        documents = [r for r in server.requests if r.path.endswith("/document")]
        assert [r.path for r in documents] == [f"/ns/{namespace}/document"] * 3
        for request, session in zip(documents, system_sessions(question)):
            body = request.body
            assert body["date"] == session.date.isoformat() and body["id"] == f"{namespace}-{session.session_id}"
            assert body["metadata"] == {"lme_session": session.session_id, "lme_date": session.date.isoformat()}
            assert body["taskType"] == "memory"
            lines = body["content"].splitlines()
            assert lines[0] == f"Conversation on {format_moment(session.date)}"
            assert lines[1:] == [f"Caroline: {session.turns[0].text}", f"Melanie: {session.turns[1].text}"]
            assert request.headers["authorization"] == f"Bearer {SM_KEY}"
        assert documents[0].body["date"] == FIRST_DAY.isoformat()
        # the ready barrier: documents listed until processed, searched only then
        lists = [r for r in server.requests if r.path.endswith("/list/documents")]
        assert len(lists) >= 2 and float(memory.notes["ready_wait_s"]) >= 0.3
        searched_after_ready(server, "/search")
        search = [r for r in server.requests if r.path.endswith("/search")][0].body
        assert search == {"query": QUESTION, "limit": made.top_k, "searchMode": "hybrid"}
        # the system's own results, in its order, as the reader gets them
        assert memory.text.startswith(f"[{namespace}-s0000:0] (score ")
        assert "Caroline: I adopted a grey kitten named Pixel" in memory.text
        assert f"[{FIRST_DAY.isoformat()}]" in memory.text
        # a second build (another seed, a rerun) sends no document again
        again = builder(tmp_path, supermemory(server)).build(question)
        assert again.notes["ingested_now"] == "0" and again.text == memory.text
        assert len([r for r in server.requests if r.path.endswith("/document")]) == 3


def test_each_history_gets_its_own_supermemory_namespace(tmp_path):
    first = make_question(QUESTION, SESSIONS, question_id="q1")
    other = make_question(QUESTION, [[("user", "I adopted a spotted puppy named Rex.")]], question_id="q2")
    with LoopbackSystems() as server:
        made = builder(tmp_path, supermemory(server))
        one, two = made.build(first), made.build(other)
        assert one.notes["namespace"] != two.notes["namespace"]
        assert "Pixel" in one.text and "Rex" not in one.text
        assert "Rex" in two.text and "Pixel" not in two.text


def test_a_429_waits_its_retry_after_and_is_counted_and_the_sdk_does_not_retry_on_its_own(tmp_path):
    question = make_question(QUESTION, SESSIONS[:1])
    with LoopbackSystems(faults=[Fault(429, retry_after="1", path="/document")]) as server:
        system = supermemory(server)
        begun = time.monotonic()
        builder(tmp_path, system).build(question)
        documents = [r for r in server.requests if r.path.endswith("/document")]
        assert len(documents) == 2 and documents[1].at - documents[0].at >= 0.95
        assert time.monotonic() - begun >= 0.95
        assert system.calls.counts()["retries"] == 1 and system.calls.counts()["rate_limited"] == 1
    # attempts are bounded: max_attempts requests in all, then the question fails (the study goes on)
    faults = [Fault(429, retry_after="0", path="/document")] * 5
    with LoopbackSystems(faults=faults) as server:
        system = supermemory(server, max_attempts=3)
        with pytest.raises(MemoryFailed, match="after 3 attempts"):
            builder(tmp_path / "bounded", system).build(question)
        assert len([r for r in server.requests if r.path.endswith("/document")]) == 3
        assert system.calls.counts() == {"requests": 3, "retries": 2, "rate_limited": 3, "failed": 1}


def test_a_5xx_is_retried_with_backoff(tmp_path):
    question = make_question(QUESTION, SESSIONS[:1])
    with LoopbackSystems(faults=[Fault(500, path="/search"), Fault(503, path="/search")]) as server:
        system = supermemory(server, backoff_base_s=0.2)
        memory = builder(tmp_path, system).build(question)
        searches = [r for r in server.requests if r.path.endswith("/search")]
        assert len(searches) == 3 and searches[2].at - searches[1].at >= 0.38  # 0.2 s, then 0.4 s
        assert "Pixel" in memory.text


def test_a_401_is_a_systemic_failure_that_never_quotes_the_key(tmp_path):
    question = make_question(QUESTION, SESSIONS[:1])
    with LoopbackSystems(faults=[Fault(401)]) as server:
        system = supermemory(server)
        with pytest.raises(SystemicFailure) as stopped:
            builder(tmp_path, system).build(question)
        assert len(server.requests) == 1  # not retried
        with pytest.raises(SystemicFailure):  # another question of the study: nothing more is sent
            builder(tmp_path, system).build(make_question("Where is my sister going?", SESSIONS[1:]))
        assert len(server.requests) == 1
    assert stopped.value.error_class == "AuthenticationError" and "memory system supermemory" in str(stopped.value)
    assert SM_KEY not in str(stopped.value) and "[redacted]" in str(stopped.value)
    with LoopbackSystems(faults=[Fault(403)]) as server:
        with pytest.raises(SystemicFailure, match="PermissionDeniedError"):
            builder(tmp_path / "b", supermemory(server)).build(question)


def test_the_key_comes_from_the_environment_checked_as_a_value(tmp_path, monkeypatch):
    with LoopbackSystems() as server:
        monkeypatch.delenv("SUPERMEMORY_API_KEY")
        with pytest.raises(LmeError, match="SUPERMEMORY_API_KEY .* is not set") as missing:
            supermemory(server).attach_gateway(None)
        assert str(missing.value).count(".") <= 2
        monkeypatch.setenv("SUPERMEMORY_API_KEY", SM_KEY + "\n")
        with pytest.raises(KeyRefused, match="ends with a newline"):
            supermemory(server).attach_gateway(None)
        monkeypatch.delenv("ZEP_API_KEY")
        with pytest.raises(LmeError, match="ZEP_API_KEY"):
            zep(server).attach_gateway(None)
        assert server.requests == []


@pytest.mark.parametrize("vendor", ["supermemory", "zep"])
def test_a_system_still_processing_past_ready_timeout_fails_the_question_unsearched(tmp_path, vendor):
    question = make_question(QUESTION, SESSIONS[:1])
    with LoopbackSystems(processing_s=30) as server:
        system = supermemory(server) if vendor == "supermemory" else zep(server)
        with pytest.raises(MemoryFailed, match="SystemNotReady"):
            builder(tmp_path, system, ready_timeout_s=0.3).build(question)
        assert not any("/search" in r.path for r in server.requests)


def test_a_document_that_failed_or_a_missing_namespace_fails_the_question(tmp_path):
    question = make_question(QUESTION, SESSIONS[:1])
    with LoopbackSystems() as server:
        made = builder(tmp_path, supermemory(server))
        made.build(question)
        server.state.documents.clear()  # the namespace was deleted on the server; the journal says done
        with pytest.raises(MemoryFailed, match="memory_systems.sqlite"):
            builder(tmp_path, supermemory(server)).build(question)


def test_retry_after_as_an_http_date():
    class Refused(Exception):
        headers = {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}
    assert retry_after_of(Refused(), now=1445412470.0) == pytest.approx(10.0)
    waits: list[float] = []
    calls = HostedCalls("x", RetryPolicy(max_attempts=2, retry_after_max_s=3), lambda: None, sleep=waits.append)

    class Limited(Exception):
        status_code = 429
        headers = {"retry-after": "3600"}

    def limited():
        raise Limited()
    with pytest.raises(Exception, match="after 2 attempts"):
        calls.call("asking", limited)
    assert waits == [3]  # capped at retry_after_max_s


# -------------------------------------------------------------------------------------------------------- Zep


def test_zep_ingests_one_thread_per_session_with_dated_named_messages_and_waits_for_its_graph(tmp_path):
    question = with_speakers(make_question(QUESTION, SESSIONS))
    with LoopbackSystems(processing_s=0.5) as server:
        made = builder(tmp_path, zep(server, messages_per_call=1), top_k=30)
        memory = made.build(question)
        namespace = memory.notes["namespace"]
        paths = server.paths("POST")
        assert paths[:2] == ["/api/v4/users/lookup", "/api/v4/users"]
        user = server.state.users[namespace]
        assert user["user_id"] == namespace
        threads = [r for r in server.requests if r.path == "/api/v4/threads"]
        assert len(threads) == 3 and all(r.body == {"user_uuid": user["uuid"]} for r in threads)
        added = [r for r in server.requests if r.path.endswith("/messages")]
        assert len(added) == 6  # messages_per_call=1: two requests a session
        for session in system_sessions(question):
            bodies = [r.body["messages"][0] for r in added if r.body["messages"][0]["content"] in
                      {turn.text for turn in session.turns}]
            assert bodies == [{"role": turn.role, "name": "Caroline" if turn.role == "user" else "Melanie",
                               "content": turn.text, "reference_time": session.date.isoformat()}
                              for turn in session.turns]
        assert all(r.headers["authorization"] == f"Api-Key {ZEP_KEY}" for r in server.requests)
        keys = [r.headers["idempotency-key"] for r in server.requests if r.path.endswith(("/threads", "/messages"))]
        assert len(set(keys)) == len(keys) and all(key.startswith(namespace) for key in keys)
        # the ready barrier: tasks asked about, episodes listed, search only then
        assert any(r.path.startswith("/api/v4/tasks/") for r in server.requests)
        assert any(r.path.endswith("/episodes/list") for r in server.requests)
        searched_after_ready(server, "/search/edges")
        assert float(memory.notes["ready_wait_s"]) >= 0.3
        search = [r for r in server.requests if r.path.endswith("/search/edges")][0]
        assert search.body == {"query": QUESTION} and search.query == {"page_size": ["30"]}
        assert "Caroline said: I adopted a grey kitten named Pixel" in memory.text
        assert f"valid from {FIRST_DAY.isoformat()}" in memory.text


def test_zep_resent_after_a_kill_stores_nothing_twice(tmp_path):
    """A killed ingestion's sessions are sent again by the next process (the journal never acknowledged them): the
    same idempotency keys, so Zep keeps one thread and one copy of each message; the user is looked up, not made."""
    question = make_question(QUESTION, SESSIONS)
    sessions = system_sessions(question)
    with LoopbackSystems() as server:
        namespace = "lme-" + "0" * 32
        list(zep(server).ingest(namespace, sessions[:2]))  # acknowledged by Zep, never journaled: then killed
        list(zep(server).ingest(namespace, sessions))  # a new process sends all again
        assert len(server.state.users) == 1 and len(server.state.threads) == 3
        assert len(server.state.episodes) == 6
        # Supermemory: a document sent again keeps its id, so it stays one document
        list(supermemory(server).ingest(namespace, sessions[:1]))
        list(supermemory(server).ingest(namespace, sessions[:1]))
        assert len(server.state.documents) == 1


def test_zep_scopes_and_failures(tmp_path):
    question = make_question(QUESTION, SESSIONS)
    with LoopbackSystems(faults=[Fault(429, retry_after="0", path="/messages")]) as server:
        system = zep(server, scope="episodes")
        memory = builder(tmp_path, system).build(question)
        assert "user: I adopted a grey kitten named Pixel" in memory.text
        assert system.request_counts()["rate_limited"] == 1 and len(server.state.episodes) == 6
        assert len([r for r in server.requests if r.path.endswith("/messages")]) == 4  # 3 sessions, 1 retry
        nodes = builder(tmp_path / "nodes", zep(server, scope="nodes")).build(question)
        assert "user: I adopted a grey kitten" in nodes.text
        server.faults.append(Fault(401))
        with pytest.raises(SystemicFailure, match="memory system zep"):
            builder(tmp_path / "again", zep(server)).build(make_question("Where?", SESSIONS[:1]))
    with pytest.raises(LmeError, match="memory.system.scope"):
        ZepSystem(scope="everything")


# ------------------------------------------------------------------------------------------------ end to end


def run_lme(tmp: Path, *overrides: str, env: dict[str, str] | None = None,
            job: str = "job") -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "lme", *overrides, "tracking.enabled=false", f"cache_dir={tmp}/cache",
            f"hydra.run.dir={tmp}/{job}", "memory.poll_interval_s=0.05"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "SUPERMEMORY", "ZEP"))}
    return subprocess.run(args, cwd=tmp, env={**base, **(env or {})}, capture_output=True, text=True, timeout=600)


def written_bytes(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


DESIGNS = {"supermemory": ("SUPERMEMORY_API_KEY", SM_KEY, "url", "/document"),
           "zep": ("ZEP_API_KEY", ZEP_KEY, "zep_url", "/messages")}


@pytest.mark.slow
@pytest.mark.parametrize("design", sorted(DESIGNS))
def test_the_design_runs_end_to_end_against_the_loopback_server(tmp_path, design):
    variable, key, url, ingest_path = DESIGNS[design]
    with LoopbackSystems(processing_s=0.3) as server:
        done = run_lme(tmp_path, f"+design={design}", "limit=2", f"memory.system.base_url={getattr(server, url)}",
                       env={variable: key})
        assert done.returncode == 0, done.stderr[-3000:]
        rows = [json.loads(line) for line in (tmp_path / "job" / "outcomes.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(row["memory_error"] is None for row in rows)
        assert any(r.path.endswith(ingest_path) for r in server.requests)
        dated = [r for r in server.requests if r.path.endswith(ingest_path)]
        assert all("date" in r.body or all("reference_time" in m for m in r.body["messages"]) for r in dated)
        assert server.early_searches == 0
        assert key.encode() not in written_bytes(tmp_path / "job") + written_bytes(tmp_path / "cache")
        # a rerun ingests nothing: the journal says every history is there
        before = len([r for r in server.requests if r.path.endswith(ingest_path)])
        again = run_lme(tmp_path, f"+design={design}", "limit=2", "seed=2",
                        f"memory.system.base_url={getattr(server, url)}", env={variable: key}, job="rerun")
        assert again.returncode == 0, again.stderr[-3000:]
        assert len([r for r in server.requests if r.path.endswith(ingest_path)]) == before


@pytest.mark.slow
@pytest.mark.parametrize("design", sorted(DESIGNS))
def test_a_401_stops_the_study_with_exit_status_4(tmp_path, design):
    variable, key, url, _ = DESIGNS[design]
    with LoopbackSystems(faults=[Fault(401)]) as server:
        done = run_lme(tmp_path, f"+design={design}", "limit=2", f"memory.system.base_url={getattr(server, url)}",
                       env={variable: key})
        assert done.returncode == 4, done.stderr[-3000:]
        assert f"memory system {design}" in done.stderr and "AuthenticationError" in done.stderr
        assert "Traceback" not in done.stderr
        assert key not in done.stdout + done.stderr
        assert key.encode() not in written_bytes(tmp_path / "job")
        # nothing more was sent: at most the requests of the questions in flight when the 401 came back
        sent = server.requests  # concurrency 8: at most one request per question in flight, none after
        assert len(sent) <= 8 and all(r.at <= sent[0].at + 0.5 for r in sent)


@pytest.mark.slow
def test_a_missing_key_stops_the_run_before_any_question(tmp_path):
    with LoopbackSystems() as server:
        done = run_lme(tmp_path, "+design=supermemory", "limit=2", f"memory.system.base_url={server.url}")
        assert done.returncode == 2, done.stderr[-3000:]
        assert "SUPERMEMORY_API_KEY" in done.stderr and "Traceback" not in done.stderr
        assert server.requests == []
        assert not (tmp_path / "job" / "outcomes.jsonl").exists() or not (
            tmp_path / "job" / "outcomes.jsonl").read_text().strip()
