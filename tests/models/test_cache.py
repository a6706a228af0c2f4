"""The call cache: content-addressed keys and a SQLite store shared between processes."""

from __future__ import annotations

import sqlite3

from lme.models.cache import CallCache, call_key

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where did I park?"}]
PARAMS = {"temperature": 0, "max_tokens": 10}
RESPONSE = {"text": "Level 3, bay 12.", "attempts": 1, "input_tokens": 12, "output_tokens": 5, "cost_usd": 1.5e-6}


def key(**changes):
    args = {"model": "openai/gpt-4o-mini", "messages": MESSAGES, "params": PARAMS, "seed": 1} | changes
    return call_key(args["model"], args["messages"], args["params"], args["seed"])


def test_key_is_a_sha256_hex_digest_and_stable():
    assert len(key()) == 64
    assert int(key(), 16) >= 0
    assert key() == key()


def test_key_changes_with_each_part_of_the_request():
    base = key()
    assert key(seed=2) != base
    assert key(model="openai/gpt-4o") != base
    assert key(messages=[*MESSAGES[:1], {"role": "user", "content": "Where did I park? "}]) != base
    assert key(messages=MESSAGES[1:]) != base
    assert key(messages=[{**MESSAGES[0], "role": "developer"}, MESSAGES[1]]) != base
    assert key(params={**PARAMS, "temperature": 1}) != base
    assert key(params={**PARAMS, "reasoning_effort": "medium"}) != base
    assert key(params={}) != base


def test_seed_none_differs_from_seed_zero():
    assert key(seed=None) != key(seed=0)
    assert key(seed=None) == key(seed=None)


def test_key_ignores_dict_key_order():
    reordered_messages = [{"content": m["content"], "role": m["role"]} for m in MESSAGES]
    reordered_params = {"max_tokens": 10, "temperature": 0}
    assert key(messages=reordered_messages, params=reordered_params) == key()


def test_message_order_matters():
    assert key(messages=list(reversed(MESSAGES))) != key()


def test_put_get_round_trip(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite")
    assert cache.get(key()) is None
    assert len(cache) == 0
    cache.put(key(), "openai/gpt-4o-mini", RESPONSE)
    assert cache.get(key()) == RESPONSE
    assert cache.get(key(seed=2)) is None
    assert len(cache) == 1
    cache.put(key(), "openai/gpt-4o-mini", {**RESPONSE, "text": "Level 4."})  # replace, not duplicate
    assert cache.get(key())["text"] == "Level 4."
    assert len(cache) == 1
    cache.close()


def test_unicode_survives(tmp_path):
    cache = CallCache(tmp_path / "calls.sqlite")
    cache.put("k", "m", {"text": "Café — 東京 ✓"})
    assert cache.get("k") == {"text": "Café — 東京 ✓"}
    cache.close()


def test_persists_across_instances(tmp_path):
    path = tmp_path / "nested" / "dir" / "calls.sqlite"  # parents are created
    first = CallCache(path)
    first.put(key(), "openai/gpt-4o-mini", RESPONSE)
    first.close()
    second = CallCache(path)
    assert second.get(key()) == RESPONSE
    assert len(second) == 1
    second.close()


def test_two_open_caches_on_one_file_see_each_others_writes(tmp_path):
    path = tmp_path / "calls.sqlite"
    one, two = CallCache(path), CallCache(path)
    one.put("a", "m", {"text": "from one"})
    assert two.get("a") == {"text": "from one"}
    two.put("b", "m", {"text": "from two"})
    assert one.get("b") == {"text": "from two"}
    assert len(one) == len(two) == 2
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"
    one.close()
    two.close()
