"""Each injected fault kind of the loopback server against the gateway (litellm's real HTTP path),
faults drawn at a rate, and the server as a command a user runs.

The queue-scripted 429 / 500 / 503 / malformed / empty body / disconnect / 4xx cases are in
test_gateway.py; this file adds slow replies past the timeout, empty content, refusals,
rate-drawn fault mixes, and the command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections import Counter

import pytest
from loopback import REFUSAL_TEXT, SCRIPT, LoopbackServer, mixed_fault_rates

from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.ledger import Ledger

pytestmark = pytest.mark.usefixtures("warm_litellm", "test_key")

MESSAGES = [{"role": "user", "content": "Which shelf holds the red notebook?"}]


def spec_for(server: LoopbackServer, **changes) -> ModelSpec:
    settings = {
        "model": "openai/gpt-4o-mini",
        "api_base": server.base_url,
        "api_key_env": "LME_TEST_KEY",
        "timeout_s": 5.0,
        "max_attempts": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    } | changes
    return ModelSpec(**settings)


def call(gateway: Gateway, spec: ModelSpec, seed: int | None = 1):
    return asyncio.run(gateway.complete(spec, MESSAGES, seed=seed))


def test_a_slow_reply_past_the_timeout_is_retried(tmp_path):
    with LoopbackServer(reply="top shelf", faults=[("slow", 3.0)]) as server:
        result = call(Gateway(CallCache(tmp_path / "c.sqlite")), spec_for(server, timeout_s=1.0))
        assert len(server.requests) == 2
    assert result.ok and result.text == "top shelf" and result.attempts == 2


def test_empty_content_is_an_answer_not_a_retry(tmp_path):
    """A 200 with empty content was paid for: it is returned (the run counts it as a missing answer), not
    retried, and not cached: a rerun asks again."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    cache = CallCache(tmp_path / "c.sqlite")
    with LoopbackServer(reply="said later", faults=[("empty_content",)]) as server:
        result = call(Gateway(cache, ledger=ledger), spec_for(server))
        assert len(server.requests) == 1
        again = call(Gateway(cache, ledger=ledger), spec_for(server))
        assert len(server.requests) == 2
    assert result.ok and result.text == "" and result.refusal is None
    assert again.text == "said later" and not again.cached
    assert [row["status"] for row in ledger.rows()] == ["paid", "paid"]
    ledger.close()


def test_a_refusal_is_kept_with_an_empty_answer(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    with LoopbackServer(reply="never sent", faults=[("refusal",)]) as server:
        result = call(Gateway(cache), spec_for(server))
        again = call(Gateway(cache), spec_for(server))
        assert len(server.requests) == 1
    assert result.ok and result.text == "" and result.refusal == REFUSAL_TEXT
    assert again.cached and again.refusal == REFUSAL_TEXT


def test_the_reply_is_cut_to_max_tokens_words():
    with LoopbackServer(reply="one two three four five six seven") as server:
        result = call(Gateway(), spec_for(server, params={"max_tokens": 3}))
    assert result.text == "one two three" and result.output_tokens == 3


def test_offline_reply_mode_answers_like_the_offline_reader():
    payload = json.dumps({"question": "What colour is the bike I bought?", "question_date": "x",
                          "memory": "[s0001:2] I finally bought a red bike last week. It was on sale."})
    with LoopbackServer(reply="offline") as server:
        result = asyncio.run(Gateway().complete(spec_for(server), [{"role": "user", "content": payload}], 1))
    assert result.text == "I finally bought a red bike last week."


def test_rate_drawn_faults_of_every_kind_are_survived():
    """30% faults over seven kinds (429, 500, 503, malformed, empty body, disconnect, slow): with
    enough attempts every one of 120 distinct calls is answered."""
    rates = mixed_fault_rates(0.3)
    with LoopbackServer(reply="echo", fault_rates=rates, fault_seed=7, slow_s=1.5, retry_after_s=0.01) as server:
        spec = spec_for(server, timeout_s=1.0, max_attempts=10, concurrency=32)
        gateway = Gateway()

        async def many():
            return await asyncio.gather(*(
                gateway.complete(spec, [{"role": "user", "content": f"question {i}"}], seed=1) for i in range(120)
            ))

        results = asyncio.run(many())
        counts = Counter(server.counts)
    assert all(result.ok for result in results)
    assert [result.text for result in results] == [f"question {i}" for i in range(120)]
    faults = {name.removeprefix("fault:") for name in counts if name.startswith("fault:")}
    assert faults == set(rates), counts
    assert counts["completed"] + counts["fault:slow"] >= 120  # a late reply may still be read, by timing
    assert gateway.calls_failed == 0


def test_fault_rates_are_checked():
    with pytest.raises(ValueError, match="unknown fault"):
        LoopbackServer(fault_rates={"teapot": 0.1})
    with pytest.raises(ValueError, match="add up to"):
        LoopbackServer(fault_rates={"500": 0.7, "429": 0.6})


def test_the_server_runs_as_a_command_and_reports_what_it_served():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--port", "0", "--reply", "echo", "--fault-rate", "429=1.0",
         "--retry-after", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        banner = process.stdout.readline()
        assert banner.startswith("serving OpenAI chat completions at http://127.0.0.1:"), banner
        base_url = banner.split(" at ", 1)[1].split(" ", 1)[0]
        request = urllib.request.Request(
            base_url + "/chat/completions", data=json.dumps({"model": "m", "messages": MESSAGES}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=10)
        assert info.value.code == 429 and info.value.headers["Retry-After"] == "0"
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "stopped: fault:429 1" in out
