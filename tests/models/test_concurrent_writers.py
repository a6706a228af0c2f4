"""The call cache and the spending ledger under concurrent writers: several processes (as jobs of one
sweep on one machine run under the joblib or Ray launcher) open one fresh SQLite file at the same
moment and write distinct and overlapping keys and rows while others read. Nothing may be lost,
nothing duplicated, and no process may see `database is locked`."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from lme.models.cache import CallCache, merge_caches
from lme.models.ledger import Ledger

WORKERS = 4

CACHE_WORKER = r"""
import json, random, sys, time
from pathlib import Path
from lme.models.cache import CallCache

path, worker, n_own, n_shared, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
while not go.exists():
    time.sleep(0.001)
cache = CallCache(path)  # every worker opens the new file at once: creation and the switch to WAL race too
rng = random.Random(worker)
problems = []
for i in range(max(n_own, n_shared)):
    if i < n_own:
        cache.put(f"own-{worker}-{i}", "m", {"text": f"{worker}:{i}", "writer": worker})
        j = rng.randrange(i + 1)
        if cache.get(f"own-{worker}-{j}") != {"text": f"{worker}:{j}", "writer": worker}:
            problems.append(f"own-{worker}-{j} read back wrong")
    if i < n_shared:
        cache.put(f"shared-{i}", "m", {"text": f"shared {i}", "writer": worker})
        got = cache.get(f"shared-{i}")
        if got is None or got["text"] != f"shared {i}":
            problems.append(f"shared-{i} read back {got!r}")
    if i % 50 == 0:
        len(cache)
cache.close()
print(json.dumps(problems))
"""

LEDGER_WORKER = r"""
import json, sys, time
from pathlib import Path
from lme.models.cache import CallCache
from lme.models.ledger import Budget, BudgetExhausted, Ledger

ledger_path, cache_path, worker, n_own, n_shared, cap, go = sys.argv[1:8]
worker, n_own, n_shared, go = int(worker), int(n_own), int(n_shared), Path(go)
budget = Budget(study_calls=int(cap)) if cap != "none" else None
while not go.exists():
    time.sleep(0.001)
ledger = Ledger(ledger_path, study="study", job=f"job-{worker}")
cache = CallCache(cache_path)
usage = {"input_tokens": 30, "cached_input_tokens": 10, "output_tokens": 5}
paid = shared_hits = 0
stopped = False

def pay(key):
    # the gateway's protocol: look in the cache, reserve (None: the same call or the cap is busy
    # elsewhere, so wait), look again, then call, cache the answer and settle.
    global paid, shared_hits
    while True:
        if cache.get(key) is not None:
            shared_hits += 1
            return
        reservation = ledger.reserve("m", key, 0.01, budget)
        if reservation is None:
            time.sleep(0.002)
            continue
        if cache.get(key) is not None:
            ledger.cancel(reservation)
            shared_hits += 1
            return
        cache.put(key, "m", {"text": key, **usage, "cost_usd": 0.01})
        ledger.settle(reservation, usage, 0.01, 1)
        paid += 1
        return

try:
    for i in range(max(n_own, n_shared)):
        if i < n_own:
            pay(f"own-{worker}-{i}")
        if i < n_shared:
            pay(f"shared-{i}")
except BudgetExhausted:
    stopped = True
ledger.close()
cache.close()
print(json.dumps({"paid": paid, "shared_hits": shared_hits, "stopped": stopped}))
"""

READER = r"""
import json, sys, time
from pathlib import Path
from lme.models.ledger import Ledger

ledger_path, go, stop = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
while not Path(ledger_path).exists():
    time.sleep(0.001)
ledger = Ledger(ledger_path, study="study", job="reader")
seen = []
while not stop.exists():
    seen.append(ledger.spending("study").paid_calls)
    ledger.rows("study")
    time.sleep(0.005)
ledger.close()
print(json.dumps({"reads": len(seen), "monotonic": seen == sorted(seen)}))
"""


def start(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]):
    out, err = process.communicate(timeout=120)
    assert "database is locked" not in err
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_cache_writers_in_several_processes_lose_and_duplicate_nothing(tmp_path):
    path, go = tmp_path / "calls.sqlite", tmp_path / "go"
    n_own, n_shared = 150, 60
    workers = [start(CACHE_WORKER, path, w, n_own, n_shared, go) for w in range(WORKERS)]
    time.sleep(1.0)  # let every interpreter start, then release them together
    go.touch()
    for process in workers:
        assert finish(process) == []
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    rows = conn.execute("SELECT key, response FROM calls").fetchall()
    conn.close()
    keys = [key for key, _ in rows]
    assert len(keys) == len(set(keys)) == WORKERS * n_own + n_shared
    stored = {key: json.loads(response) for key, response in rows}
    for w in range(WORKERS):
        for i in range(n_own):
            assert stored[f"own-{w}-{i}"] == {"text": f"{w}:{i}", "writer": w}
    for i in range(n_shared):
        assert stored[f"shared-{i}"]["text"] == f"shared {i}" and stored[f"shared-{i}"]["writer"] in range(WORKERS)


def test_ledger_writers_in_several_processes_pay_each_call_once_with_a_reader_watching(tmp_path):
    ledger_path, cache_path, go, stop = tmp_path / "ledger.sqlite", tmp_path / "calls.sqlite", tmp_path / "go", tmp_path / "stop"
    n_own, n_shared = 40, 30
    reader = start(READER, ledger_path, go, stop)
    workers = [start(LEDGER_WORKER, ledger_path, cache_path, w, n_own, n_shared, "none", go) for w in range(WORKERS)]
    time.sleep(1.0)
    go.touch()
    results = [finish(process) for process in workers]
    stop.touch()
    watched = finish(reader)
    assert watched["reads"] > 0 and watched["monotonic"]

    assert sum(r["paid"] for r in results) == WORKERS * n_own + n_shared
    assert sum(r["shared_hits"] for r in results) == (WORKERS - 1) * n_shared
    ledger = Ledger(ledger_path, study="study", job="check")
    rows = ledger.rows("study")
    keys = [row["call_key"] for row in rows]
    assert len(keys) == len(set(keys)) == WORKERS * n_own + n_shared  # every call once, none twice
    assert all(row["status"] == "paid" for row in rows)
    for w in range(WORKERS):
        mine = [row for row in rows if row["job"] == f"job-{w}"]
        assert sorted(row["call_key"] for row in mine if row["call_key"].startswith("own-")) == sorted(
            f"own-{w}-{i}" for i in range(n_own))
        assert len(mine) == results[w]["paid"]
    spent = ledger.spending("study")
    assert spent.paid_calls == len(rows) and spent.reserved_calls == 0
    assert spent.dollars == pytest.approx(0.01 * len(rows))
    assert sum(row["input_tokens"] for row in rows) == 30 * len(rows)
    assert ledger.open_reservations() == 0
    ledger.close()


def test_a_study_call_cap_holds_across_processes(tmp_path):
    ledger_path, cache_path, go = tmp_path / "ledger.sqlite", tmp_path / "calls.sqlite", tmp_path / "go"
    cap = 50
    # each worker wants more calls than the whole study may pay for, so every worker must meet the cap
    # however the processes happen to be scheduled
    workers = [start(LEDGER_WORKER, ledger_path, cache_path, w, cap + 10, 0, cap, go) for w in range(WORKERS)]
    time.sleep(1.0)
    go.touch()
    results = [finish(process) for process in workers]
    assert all(r["stopped"] for r in results)
    assert sum(r["paid"] for r in results) == cap
    ledger = Ledger(ledger_path, study="study", job="check")
    assert len(ledger.rows("study")) == cap and ledger.open_reservations() == 0
    ledger.close()


def test_merge_caches_adds_missing_entries_and_keeps_existing_ones(tmp_path):
    target, one, two = (CallCache(tmp_path / name / "calls.sqlite") for name in ("main", "node1", "node2"))
    target.put("both", "m", {"text": "kept"})
    one.put("both", "m", {"text": "from node 1"})
    one.put("a", "m", {"text": "a"})
    two.put("b", "m", {"text": "b"})
    two.put("a", "m", {"text": "a again"})
    for cache in (one, two):
        cache.close()
    counts = merge_caches(tmp_path / "main" / "calls.sqlite", [tmp_path / "node1" / "calls.sqlite",
                                                             tmp_path / "node2" / "calls.sqlite"])
    assert counts == {str(tmp_path / "node1" / "calls.sqlite"): 1, str(tmp_path / "node2" / "calls.sqlite"): 1}
    assert target.get("both") == {"text": "kept"} and target.get("a") == {"text": "a"}
    assert target.get("b") == {"text": "b"} and len(target) == 3
    target.close()


def test_cache_merge_command_merges_node_caches_into_the_configured_cache(tmp_path):
    for node, key in (("node1", "a"), ("node2", "b")):
        cache = CallCache(tmp_path / node / "calls.sqlite")
        cache.put(key, "m", {"text": key})
        cache.close()
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-m", "lme", "cache", "merge", str(tmp_path / "node1"), str(tmp_path / "node2" / "calls.sqlite"),
               f"cache_dir={tmp_path}/main"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "1 entries added" in result.stdout and f"into {tmp_path}/main/calls.sqlite" in result.stdout
    merged = CallCache(tmp_path / "main" / "calls.sqlite")
    assert merged.get("a") == {"text": "a"} and merged.get("b") == {"text": "b"}
    merged.close()
    missing = subprocess.run([*command[:5], str(tmp_path / "nowhere.sqlite"), f"cache_dir={tmp_path}/main"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"lme: error: cache merge: {tmp_path}/nowhere.sqlite: no such cache file."
