"""Mem0 open source run locally as a memory system (lme/memory/systems/mem0.py, issue 40 item 2): the real
mem0ai 2.2.1 over Qdrant local mode in a temp folder, the packaged MiniLM, and its LLM the offline
memory-extractor stand-in through lme's gateway and a real call cache. Ingestion once per namespace, a session
whose acknowledgement was lost added again with the same prompt (answered by the cache) and the same memories,
a `kill -9` during ingestion resumed with no call made twice, isolated namespaces, the design's digest."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

from histories import make_question, question_record
from lme.data.load import parse_question
from lme.memory.systems.base import SystemMemoryBuilder, system_sessions
from lme.memory.systems.journal import JOURNAL_FILE
from lme.models.cache import CallCache
from lme.models.gateway import Gateway
from lme.models.offline import MEMORY_EXTRACTOR_MODEL, extract_memories
from lme.models.spec import ModelSpec

SESSIONS = [
    [("user", "I adopted a grey kitten named Pixel last week."), ("assistant", "Pixel is a lovely name for a cat.")],
    [("user", "My sister is visiting Lisbon in the spring."), ("assistant", "Lisbon has wonderful tiled streets.")],
    [("user", "I started learning the cello on Tuesdays."), ("assistant", "The cello suits patient practice.")],
    [("user", "Pixel knocked my cello bow off the table."), ("assistant", "Kittens love dangling things.")],
    [("user", "We booked a cabin near the lake for August."), ("assistant", "A lake cabin sounds restful.")],
    [("user", "My manager moved our weekly meeting to Thursdays."), ("assistant", "Thursdays it is.")],
]
QUESTION = "Which grey kitten did I adopt?"
EXTRACTOR = ModelSpec(MEMORY_EXTRACTOR_MODEL, params={"temperature": 0, "max_tokens": 8192})


def extraction_prompt(new_messages: str, observed: str = "2023-06-01", existing: str = "[]") -> str:
    """A user prompt in the layout of mem0ai 2.2.1's additive extraction (generate_additive_extraction_prompt)."""
    return "\n\n".join([
        "## Summary\n", "## Last k Messages\n", "## Recently Extracted Memories\n[]",
        f"## Existing Memories\n{existing}", f"## New Messages\n{new_messages}",
        f"## Observation Date\n{observed}", f"## Current Date\n{observed}", "# Output:"])


# ---------------------------------------------------------------------------------- the offline stand-in (fast)


def test_the_extractor_answers_in_mem0_s_json_shape_from_the_user_s_first_person_sentences():
    prompt = extraction_prompt("user: I adopted a grey kitten named Pixel. Nice weather.\n"
                               "assistant: I think Pixel is a lovely name for a cat.\n"
                               "user: Caroline: I went to a support group yesterday\nand it helped me choose my career path.\n")
    reply = json.loads(extract_memories(prompt))
    assert reply == {"memory": [
        {"id": "0", "text": "User said on 2023-06-01: I adopted a grey kitten named Pixel.", "attributed_to": "user"},
        {"id": "1", "text": "Caroline said on 2023-06-01: I went to a support group yesterday",
         "attributed_to": "user"},
        {"id": "2", "text": "Caroline said on 2023-06-01: and it helped me choose my career path.", "attributed_to": "user"}]}
    assert extract_memories(prompt) == extract_memories(prompt)  # deterministic
    known = json.dumps([{"id": "0", "text": reply["memory"][0]["text"]}])
    assert [m["id"] for m in json.loads(extract_memories(extraction_prompt(
        "user: I adopted a grey kitten named Pixel.\n", existing=known)))["memory"]] == []  # not given twice
    assert json.loads(extract_memories("Summarise this conversation.")) == {"memory": []}


def test_the_prompt_is_dated_to_the_session_not_today():
    from lme.memory.systems.mem0 import prompt_dated

    today = date.today().isoformat()
    dated = prompt_dated(extraction_prompt("user: hello\n", observed=today) + f"\nToday's date is {today}.", "2023-05-20")
    assert today not in dated
    assert "## Observation Date\n2023-05-20" in dated and "## Current Date\n2023-05-20" in dated


def test_where_the_stores_live_is_not_part_of_the_design_and_mem0_s_settings_are():
    from omegaconf import OmegaConf

    from lme.config.compose import compose_config
    from lme.config.design import canonical_design

    def design(*overrides):
        return canonical_design(OmegaConf.to_container(compose_config(["+design=mem0", *overrides]), resolve=True))

    here = design("cache_dir=/tmp/a")
    assert design("cache_dir=/tmp/b") == here and "index_dir" not in here["memory"]["system"]
    assert here["memory"]["system"]["model"]["model"] == MEMORY_EXTRACTOR_MODEL
    for changed in ("memory.system.infer=false", "memory.system.threshold=0.3", "memory.top_k=20",
                    "memory.system.custom_instructions=Only food preferences.", "memory.system.result_dates=false",
                    "memory/mem0_model@memory.system.model=gpt5_nano"):
        assert design(changed) != here, changed


# ------------------------------------------------------------------------------------- real Mem0 (slow-ish)


def mem0_builder(cache: Path, gateway: Gateway | None = None, **system_options):
    from lme.memory.systems.mem0 import Mem0System

    system = Mem0System(cache / "mem0", EXTRACTOR, **system_options)
    if gateway is not None:
        system.attach_gateway(gateway)
    return SystemMemoryBuilder(system, cache_path=cache / JOURNAL_FILE, name="mem0", poll_interval_s=0.01)


def stored(cache: Path, namespace: str) -> list[tuple[str, int, str]]:
    """What Mem0 holds in a namespace: (session, position, text) of every memory, from its own Qdrant store."""
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(cache / "mem0" / namespace / "qdrant"))
    try:
        points, _ = client.scroll("memories", limit=10_000, with_payload=True)
    finally:
        client.close()
    names = dict(sqlite3.connect(cache / "mem0" / namespace / "lme_sessions.sqlite").execute(
        "SELECT memory_id, position FROM memories").fetchall())
    return sorted((p.payload["lme_session"], names[str(p.id)], p.payload["data"]) for p in points)


@pytest.mark.slow
def test_ingested_once_searched_with_mem0_and_a_changed_setting_ingests_again(tmp_path):
    gateway = Gateway(cache=CallCache(tmp_path / "calls.sqlite"))
    question = make_question(QUESTION, SESSIONS)
    first = mem0_builder(tmp_path, gateway).build(question)
    assert first.notes["ingested_now"] == "6" and first.notes["ingested_reused"] == "0"
    assert first.text.startswith("[s0000#0] (score ") and "Pixel" in first.text.split("\n\n")[0]
    assert "(2023-06-01 (Thursday) 09:00) User said on 2023-06-01: I adopted a grey kitten" in first.text
    assert gateway.calls_made == 6 and gateway.calls_cached == 0  # one extraction call per session
    again = mem0_builder(tmp_path, gateway).build(question)  # seed 2, or a rerun
    assert again.notes["ingested_now"] == "0" and again.text == first.text and gateway.calls_made == 6
    plain = mem0_builder(tmp_path, gateway, infer=False).build(question)  # a changed setting: a new namespace
    assert plain.notes["namespace"] != first.notes["namespace"] and plain.notes["ingested_now"] == "6"
    assert gateway.calls_made == 6  # infer off: messages stored as they are, no call
    assert "Pixel is a lovely name for a cat." in plain.text


@pytest.mark.slow
def test_a_session_added_again_after_a_lost_acknowledgement_is_the_same_memories_with_no_new_call(tmp_path):
    """Mem0 stored session 3, then the process died before the journal recorded it: adding it again deletes what
    the first add left and sends the very same prompt (the call cache answers it)."""
    from lme.memory.systems.mem0 import Mem0System

    question = make_question(QUESTION, SESSIONS)
    sessions = system_sessions(question)

    def system(cache: Path) -> tuple[Mem0System, Gateway]:
        gateway = Gateway(cache=CallCache(cache / "calls.sqlite"))
        made = Mem0System(cache / "mem0", EXTRACTOR)
        made.attach_gateway(gateway)
        return made, gateway

    interrupted, gateway = system(tmp_path / "a")
    assert list(interrupted.ingest("lme-a", sessions[:3])) == ["s0000", "s0001", "s0002"]
    assert list(interrupted.ingest("lme-a", sessions[2:])) == ["s0002", "s0003", "s0004", "s0005"]
    assert gateway.calls_made == 6 and gateway.calls_cached == 1
    clean, _ = system(tmp_path / "b")
    assert list(clean.ingest("lme-a", sessions)) == [s.session_id for s in sessions]
    assert stored(tmp_path / "a", "lme-a") == stored(tmp_path / "b", "lme-a")
    assert len(stored(tmp_path / "a", "lme-a")) == 6
    assert interrupted.search("lme-a", QUESTION, 3) == clean.search("lme-a", QUESTION, 3)
    assert len(interrupted.take_calls()) == 7 and interrupted.take_calls() == []


@pytest.mark.slow
def test_memories_never_leak_between_namespaces(tmp_path):
    gateway = Gateway(cache=CallCache(tmp_path / "calls.sqlite"))
    made = mem0_builder(tmp_path, gateway)
    mine = made.build(make_question(QUESTION, SESSIONS))
    other = made.build(make_question(QUESTION, [[("user", "I adopted a grey kitten named Biscuit yesterday.")]],
                                     question_id="q2"))
    assert mine.notes["namespace"] != other.notes["namespace"]
    assert "Biscuit" in other.text and "Biscuit" not in mine.text
    assert "Pixel" in mine.text and "Pixel" not in other.text and other.notes["results"] == "1"
    assert sorted(p.name for p in (tmp_path / "mem0").iterdir() if p.name.startswith("lme-")) == sorted(
        [mine.notes["namespace"], other.notes["namespace"]])


KILLED_BUILD = """  # argv: the question record's file, the cache folder
import json, sys
from pathlib import Path
from lme.data.load import parse_question
from lme.memory.systems.base import SystemMemoryBuilder
from lme.memory.systems.mem0 import Mem0System
from lme.models.cache import CallCache
from lme.models.gateway import Gateway
from lme.models.offline import MEMORY_EXTRACTOR_MODEL
from lme.models.spec import ModelSpec
question = parse_question(json.loads(Path(sys.argv[1]).read_text()), Path("synthetic.json"), 0)
cache = Path(sys.argv[2])
gateway = Gateway(cache=CallCache(cache / "calls.sqlite"))
system = Mem0System(cache / "mem0", ModelSpec(MEMORY_EXTRACTOR_MODEL, params={"temperature": 0, "max_tokens": 8192}))
system.attach_gateway(gateway)
memory = SystemMemoryBuilder(system, cache_path=cache / "memory_systems.sqlite", name="mem0").build(question)
print(json.dumps({"text": memory.text, "made": gateway.calls_made, "cached": gateway.calls_cached,
                  "notes": memory.notes}))
"""


def journal_count(cache: Path) -> int:
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


def cached_calls(cache: Path) -> int:
    conn = sqlite3.connect(cache / "calls.sqlite")
    try:
        return conn.execute("SELECT COUNT(*) FROM calls WHERE model = ?", (MEMORY_EXTRACTOR_MODEL,)).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.slow
def test_a_kill_during_ingestion_and_a_rerun_give_the_same_memories_with_no_call_made_twice(tmp_path):
    sessions = [[("user", f"I planted {n} tulips in my garden on day {n}."), ("assistant", "Lovely tulips.")]
                for n in range(1, 25)]
    record = question_record("How many tulips did I plant?", sessions)
    (tmp_path / "q.json").write_text(json.dumps(record))
    question = parse_question(record, Path("synthetic.json"), 0)
    cache = tmp_path / "cache"
    child = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "q.json"), str(cache)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while journal_count(cache) < 3 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before, calls_before = journal_count(cache), cached_calls(cache)
    assert 3 <= before < 24, child.stderr.read().decode()[-2000:]

    def run(where: Path) -> dict:
        done = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "q.json"), str(where)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    resumed = run(cache)
    assert resumed["notes"]["ingested_reused"] == str(before)
    assert resumed["notes"]["ingested_now"] == str(24 - before)
    assert resumed["made"] == 24 - calls_before  # every call the killed process made is answered by the cache
    assert cached_calls(cache) == 24  # one prompt per session: the resumed prompts are the first run's
    reference = run(tmp_path / "uninterrupted")
    assert reference["made"] == 24
    assert resumed["text"] == reference["text"]
    namespace = resumed["notes"]["namespace"]
    assert stored(cache, namespace) == stored(tmp_path / "uninterrupted", namespace)
    assert namespace == mem0_builder(tmp_path / "x").namespace(question)


def run_lme(tmp: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "lme", *overrides, "tracking.enabled=false", f"cache_dir={tmp}/cache"]
    # MEM0_DIR: an in-process test of this worker set it (Mem0 reads it at import); the job sets its own
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "MEM0_"))}
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_design_runs_offline_and_later_seeds_and_reruns_ingest_nothing(tmp_path):
    result = run_lme(tmp_path, "+design=mem0", "limit=4", f"hydra.sweep.dir={tmp_path}/sweep", "-m", "seed=1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Task was destroyed" not in result.stdout + result.stderr  # litellm's worker held (lme.models.gateway)
    rows = {job: [json.loads(line) for line in (tmp_path / "sweep" / job / "outcomes.jsonl").read_text().splitlines()]
            for job in ("0", "1")}
    calls = sqlite3.connect(tmp_path / "cache" / "calls.sqlite")  # the job's gateway, its call cache, sent them
    extractions = calls.execute("SELECT COUNT(*) FROM calls WHERE model = ?", (EXTRACTOR.model,)).fetchone()[0]
    calls.close()
    assert extractions == sum(row["system"]["ingest_calls"] for row in rows["0"])
    assert all(len(found) == 4 and all(row["memory_error"] is None for row in found) for found in rows.values())
    assert sum(row["system"]["ingest_calls"] for row in rows["0"]) > 0
    assert all(row["system"]["ingested_now"] == 0 and row["system"]["ingest_calls"] == 0 for row in rows["1"])
    journal = sqlite3.connect(tmp_path / "cache" / JOURNAL_FILE)
    namespaces = journal.execute("SELECT namespace, sessions, done FROM namespaces").fetchall()
    journal.close()
    assert namespaces and all(done is not None for _, _, done in namespaces)
    for namespace, sessions, _ in namespaces:  # every session added once: no memory ever deleted
        history = sqlite3.connect(tmp_path / "cache" / "mem0" / namespace / "history.db")
        assert history.execute("SELECT COUNT(*) FROM history WHERE event = 'DELETE'").fetchone()[0] == 0
        added = sqlite3.connect(tmp_path / "cache" / "mem0" / namespace / "lme_sessions.sqlite")
        assert added.execute("SELECT COUNT(*), MAX(seq) FROM sessions").fetchone() == (sessions, sessions)
    rerun = run_lme(tmp_path, "+design=mem0", "limit=4", "seed=3", f"hydra.run.dir={tmp_path}/rerun")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    again = [json.loads(line) for line in (tmp_path / "rerun" / "outcomes.jsonl").read_text().splitlines()]
    assert len(again) == 4 and all(row["memory_error"] is None for row in again)
    assert all(row["system"]["ingested_now"] == 0 and row["system"]["ingest_calls"] == 0 for row in again)
    assert (tmp_path / "cache" / "mem0" / "home").is_dir()


@pytest.mark.slow
def test_the_planned_requests_are_the_sent_ones_but_for_the_existing_memories(tmp_path):
    """`planned_requests` (for `lme estimate`): one request per session, each the one Mem0 sends with its
    existing memories left out; none with infer off."""
    from lme.memory.systems.mem0 import Mem0System

    sessions = system_sessions(make_question(QUESTION, SESSIONS))
    made = Mem0System(tmp_path / "mem0", EXTRACTOR)
    sent, gateway = [], Gateway()
    made._send = lambda spec, messages: sent.append(messages) or gateway.run_blocking(
        gateway.complete(spec, messages, seed=None))
    planned = made.planned_requests(sessions)
    list(made.ingest("lme-plan", sessions))
    assert len(planned) == len(sent) == 6
    assert planned[0] == sent[0]  # the first session: no memory exists yet
    for plan, real in zip(planned[1:], sent[1:]):
        assert plan[0] == real[0]
        head, _, rest = real[1]["content"].partition("## Existing Memories\n")
        assert plan[1]["content"] == head + "## Existing Memories\n[]" + rest[rest.index("\n\n## New Messages"):]
    assert Mem0System(tmp_path / "mem0", EXTRACTOR, infer=False).planned_requests(sessions) == []


def test_the_extraction_spec_keys_the_calls_as_sent(tmp_path):
    from lme.memory.systems.mem0 import Mem0System
    from lme.models.cache import call_key

    made = Mem0System(tmp_path / "mem0", EXTRACTOR)
    assert made.extraction_spec.params == {**EXTRACTOR.params, "response_format": {"type": "json_object"}}
    gateway = Gateway(cache=CallCache(tmp_path / "calls.sqlite"))
    made.attach_gateway(gateway)
    made._local.day = "2023-06-01"
    made.complete([{"role": "user", "content": "## New Messages\nuser: I adopted a grey kitten named Pixel.\n"}],
                  {"type": "json_object"})
    key = call_key(MEMORY_EXTRACTOR_MODEL, [{"role": "user", "content": "## New Messages\nuser: I adopted a grey "
                                             "kitten named Pixel.\n"}], made.extraction_spec.params, None)
    assert CallCache(tmp_path / "calls.sqlite").get(key) is not None
    assert [call.key for call in made.take_calls()] == [key]


def test_an_estimate_counts_the_ingestion_calls_the_journal_does_not_hold_yet(tmp_path):
    """`lme estimate +design=mem0`: one extraction call per session of every history not yet ingested (a finished
    namespace counts none, an acknowledged session none), its tokens litellm's count of the requests Mem0 sends."""
    from lme.cli import compose_config
    from lme.config.design import design_from_config
    from lme.data.dataset import load_dataset
    from lme.memory.systems.journal import IngestionJournal
    from lme.models.pricing import count_input_tokens
    from lme.study.estimate import estimate_design, ingestion_plan, systems_of

    cfg = compose_config(["+design=mem0", "limit=3", f"cache_dir={tmp_path}/cache", "tracking.enabled=false"])
    design = design_from_config(cfg)
    _, questions = load_dataset(design.dataset)
    builder = systems_of([design.build_memory(design.build_retriever())])[0]
    system = builder.system
    sessions = [system_sessions(question) for question in questions]
    first = ingestion_plan(builder, questions)
    assert first is not None and first.model == EXTRACTOR.model and first.histories == 3
    assert (first.calls, first.histories_ingested) == (sum(map(len, sessions)), 0)
    assert first.input_tokens == sum(count_input_tokens(EXTRACTOR.model, [message])
                                     for history in sessions for request in system.planned_requests(history)
                                     for message in request)
    journal = IngestionJournal(builder.journal_path)  # the first history ingested, one session of the second
    done, half = builder.namespace(questions[0]), builder.namespace(questions[1])
    journal.register(done, system.name, "{}", len(sessions[0]))
    journal.finish(done)
    journal.register(half, system.name, "{}", len(sessions[1]))
    journal.acknowledge(half, sessions[1][0].session_id)
    journal.close()
    later = ingestion_plan(builder, questions)
    assert (later.histories, later.histories_ingested) == (3, 1)
    assert later.calls == len(sessions[1]) - 1 + len(sessions[2])
    note = [n for n in estimate_design(design, [1]).notes if n.startswith("memory system mem0")]
    assert f"3 histories, 1 already ingested, {later.calls} calls to send" in note[0]
