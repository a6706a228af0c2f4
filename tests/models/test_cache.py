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


def reference_key(model, messages, params, seed):
    """The key as the canonical JSON of the whole request, hashed in one go (what call_key must equal)."""
    import hashlib
    import json

    canonical = json.dumps({"model": model, "messages": messages, "params": params, "seed": seed},
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


LONG = "Memory: " + "the blue bicycle, \"quoted\" \\ café 東京 🚲\n" * 600  # past the remembered size


def test_key_is_the_digest_of_the_canonical_request_for_short_long_and_structured_messages():
    cases = [
        MESSAGES,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}],
        [{"content": LONG, "role": "user", "name": "x"}],  # keys out of order
        [{"role": "user", "content": [{"type": "text", "text": LONG}, {"type": "text", "text": "2"}]}],
        [{"role": "user", "content": LONG, "cache_control": {"type": "ephemeral"}}],
        [],
    ]
    for messages in cases:
        for params, seed in ((PARAMS, 1), ({}, None), ({"b": [1, 2], "a": {"z": 1, "y": None}}, 7)):
            for _ in range(2):  # the second time, a long prompt's messages part is remembered
                assert call_key("openai/gpt-5-mini", messages, params, seed) == \
                    reference_key("openai/gpt-5-mini", messages, params, seed)


def test_a_remembered_prompt_keys_each_seed_model_and_param_apart_and_follows_changes_to_its_text():
    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": LONG}]
    first = call_key("m", messages, PARAMS, 1)
    assert call_key("m", messages, PARAMS, 1) == first
    assert len({first, call_key("m", messages, PARAMS, 2), call_key("m", messages, PARAMS, None),
                call_key("m2", messages, PARAMS, 1), call_key("m", messages, {"temperature": 1}, 1)}) == 5
    changed = [messages[0], {"role": "user", "content": LONG + "."}]
    assert call_key("m", changed, PARAMS, 1) == reference_key("m", changed, PARAMS, 1) != first
    messages[1]["content"] = LONG + "!"  # the same list, changed in place after it was remembered
    assert call_key("m", messages, PARAMS, 1) == reference_key("m", messages, PARAMS, 1) != first
