"""The model catalogue: every reader and judge option file (`conf/reader/*.yaml`, `conf/judge/*.yaml`) composes into
a design, has a price (litellm's bundled cost map by the model's name, or an explicit $0 for a local server), names
the key variable its provider needs, and makes a real call through lme's gateway to the loopback server, whose
recorded request shows the family's parameters as the provider receives them.

No lme code is mocked. OpenAI models and the local (`hosted_vllm/`) reader go to the loopback's
`/v1/chat/completions`; Anthropic and Gemini models go through litellm's own `anthropic/` and `gemini/` providers,
in their own wire formats (`/v1/messages`, `/models/MODEL:generateContent`), which the loopback answers in kind.
The option files are found by listing the folders, so a new one is covered by every test here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer
from shared_data import TEMPLATES, need

from lme.config.compose import compose_config
from lme.config.design import design_from_config
from lme.util.errors import LmeError
from lme.judge import PROTOCOL_JUDGE_MODEL, describe_judge
from lme.models.gateway import Gateway, ModelSpec, preflight
from lme.models.offline import OFFLINE_PROVIDER
from lme.models.pricing import max_output_tokens, model_prices

ROOT = Path(__file__).resolve().parents[2]
READERS = sorted(path.stem for path in (ROOT / "conf" / "reader").glob("*.yaml"))
JUDGES = sorted(path.stem for path in (ROOT / "conf" / "judge").glob("*.yaml"))
OPTIONS = [("reader", name) for name in READERS] + [("judge", name) for name in JUDGES]

KEY_ENV = "LME_TEST_KEY"
# The variable each provider's option files must name (None: a local server, no key)
KEY_OF_PROVIDER = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
                   "hosted_vllm": None}
THINKING_BUDGET = {"disable": 0, "low": 1024, "medium": 2048, "high": 4096}  # litellm 1.110's for reasoning_effort
SYSTEM = "Answer from the memory."
USER = "Where did I park my car yesterday?"
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
REAL_OPENAI_KEY = "sk-real-openai-key-must-not-leave-SECRET"


def option_spec(group: str, name: str) -> ModelSpec:
    """The model of option `group=name`, composed and built into a design as a run builds it."""
    design = design_from_config(compose_config([f"{group}={name}"]), data=False)
    component = design.reader.model if group == "reader" else design.judge.model
    return component.build()


def provider(spec: ModelSpec) -> tuple[str, str]:
    """(litellm's provider, the model's name at that provider)."""
    import litellm

    model, found, _, _ = litellm.get_llm_provider(spec.model)
    return found, model


def file_model(group: str, name: str) -> str:
    """The option's model, read from its file (composing every option at collection would cost seconds)."""
    from omegaconf import OmegaConf

    return str(OmegaConf.load(ROOT / "conf" / group / f"{name}.yaml").model.model)


PAID = [(group, name) for group, name in OPTIONS if not file_model(group, name).startswith(OFFLINE_PROVIDER + "/")]


def test_the_catalogue_has_each_family():
    providers = {provider(ModelSpec(model=file_model(group, name)))[0] for group, name in PAID}
    assert providers == set(KEY_OF_PROVIDER)
    assert {"gpt5", "gpt5_mini", "gpt5_nano", "gpt4o", "claude_sonnet", "claude_haiku", "gemini_pro", "gemini_flash",
            "local"} <= set(READERS)
    assert {"longmemeval", "longmemeval_study", "gpt4o_mini", "claude_haiku", "gemini_flash", "local",
            "offline"} <= set(JUDGES)


@pytest.mark.parametrize(("group", "name"), OPTIONS, ids=[f"{g}={n}" for g, n in OPTIONS])
def test_every_option_composes_into_a_design_with_a_price_and_an_output_limit(group, name):
    design = design_from_config(compose_config([f"{group}={name}"]), data=False)
    spec = option_spec(group, name)
    assert design.reader.name and design.judge.name
    prices = model_prices(spec)
    assert prices is not None, f"{group}={name}: {spec.model} has no price"
    limit = max_output_tokens(spec)
    assert limit is not None and limit >= 1  # so a dollar cap can bound every call
    if spec.is_offline:
        assert (prices.input_per_token, prices.output_per_token) == (0.0, 0.0)
        return
    found, _ = provider(spec)
    if spec.input_cost_per_token is not None:  # only a local server states its own (zero) price
        assert found == "hosted_vllm"
        assert (spec.input_cost_per_token, spec.output_cost_per_token) == (0, 0)
        assert (prices.input_per_token, prices.output_per_token) == (0.0, 0.0)
    else:  # the list price in litellm's bundled cost map, by the model's name
        import litellm

        info = litellm.get_model_info(spec.model)
        assert prices.input_per_token == info["input_cost_per_token"] > 0
        assert prices.output_per_token == info["output_cost_per_token"] > 0
        assert limit <= info["max_output_tokens"]
    assert spec.api_key_env == KEY_OF_PROVIDER[found]


@pytest.mark.parametrize(("group", "name"), PAID, ids=[f"{g}={n}" for g, n in PAID])
def test_a_missing_key_is_refused_naming_its_variable(group, name, monkeypatch):
    spec = option_spec(group, name)
    if spec.api_key_env != "OPENAI_API_KEY":  # set, yet never a stand-in for another provider's key
        monkeypatch.setenv("OPENAI_API_KEY", REAL_OPENAI_KEY)
    if spec.api_key_env is None:  # a local server: nothing to refuse
        preflight([spec])
        return
    monkeypatch.delenv(spec.api_key_env, raising=False)
    with pytest.raises(LmeError, match=f"the environment variable {spec.api_key_env} .* is not set"):
        preflight([spec])
    monkeypatch.setenv(spec.api_key_env, "sk-anything")
    preflight([spec])


def pointed_at(spec: ModelSpec, server: LoopbackServer) -> ModelSpec:
    """`spec` sent to the loopback server: the address its provider expects, the test key for a keyed model."""
    found, _ = provider(spec)
    base = server.root_url if found in ("anthropic", "gemini") else server.base_url
    key_env = None if spec.api_key_env is None else KEY_ENV
    return dataclasses.replace(spec, api_base=base, api_key_env=key_env, timeout_s=10, max_attempts=1)


def check_request(spec: ModelSpec, request, key: str) -> None:
    """The request the loopback saw carries the option's parameters in its provider's wire format."""
    found, model = provider(spec)
    params, body, headers = spec.params, request.body, request.headers
    if found in ("openai", "hosted_vllm"):
        assert request.path == "/v1/chat/completions"
        assert body["model"] == model
        assert body["messages"] == MESSAGES
        for param, value in params.items():  # every parameter as configured, nothing else added
            assert body[param] == value, param
        assert set(body) - {"model", "messages", "stream"} == set(params)
        if found == "openai":
            assert headers["authorization"] == f"Bearer {key}"
            if "reasoning_effort" in params:  # the GPT-5 family: its output limit field, no temperature
                assert "max_completion_tokens" in body and "max_tokens" not in body and "temperature" not in body
        else:  # a local server gets a dummy key, never the OpenAI key in the environment
            assert headers["authorization"] == "Bearer fake-api-key"
    elif found == "anthropic":
        assert request.path == "/v1/messages"
        assert headers["x-api-key"] == key and headers["anthropic-version"]
        assert "authorization" not in headers
        assert body["model"] == model
        assert body["system"] == [{"type": "text", "text": SYSTEM}]
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": USER}]}]
        assert body["max_tokens"] == params["max_tokens"]
        effort = params.get("reasoning_effort")
        if effort is not None:  # thinking: adaptive at that effort, or a budget below max_tokens; no temperature
            thinking = body["thinking"]
            if thinking["type"] == "adaptive":
                assert body["output_config"] == {"effort": effort}
            else:
                assert thinking == {"type": "enabled", "budget_tokens": THINKING_BUDGET[effort]}
                assert thinking["budget_tokens"] < body["max_tokens"]
            assert "temperature" not in body
        else:
            assert "thinking" not in body
            assert body.get("temperature") == params.get("temperature")
    elif found == "gemini":
        assert request.path == f"/models/{model}:generateContent"
        assert headers["x-goog-api-key"] == key and "authorization" not in headers
        assert body["system_instruction"] == {"parts": [{"text": SYSTEM}]}
        assert body["contents"] == [{"role": "user", "parts": [{"text": USER}]}]
        config = body["generationConfig"]
        assert config["temperature"] == params["temperature"]
        assert config["max_output_tokens"] == params["max_tokens"]
        effort = params.get("reasoning_effort")
        if effort is not None:
            assert config["thinkingConfig"]["thinkingBudget"] == THINKING_BUDGET[effort]
            assert config["thinkingConfig"]["thinkingBudget"] < config["max_output_tokens"]
    else:
        raise AssertionError(f"no wire format checked for provider {found}")


@pytest.mark.usefixtures("warm_litellm")
@pytest.mark.parametrize(("group", "name"), PAID, ids=[f"{g}={n}" for g, n in PAID])
def test_a_call_through_the_gateway_reaches_the_loopback_with_the_familys_parameters(group, name, test_key,
                                                                                      monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", REAL_OPENAI_KEY)
    spec = option_spec(group, name)
    with LoopbackServer(reply="It is in the north garage.") as server:
        sent = pointed_at(spec, server)
        result = asyncio.run(Gateway().complete(sent, MESSAGES, seed=1))
        assert result.ok, result.error
        assert result.text == "It is in the north garage."
        (request,) = server.requests
    check_request(spec, request, test_key)
    assert REAL_OPENAI_KEY not in str(request.headers) + str(request.body)
    assert (result.input_tokens, result.output_tokens) == (len((SYSTEM + " " + USER).split()), 6)
    prices = model_prices(spec)
    assert prices is not None
    expected = prices.dollars(result.input_tokens, result.output_tokens)
    assert result.cost_usd == pytest.approx(expected, rel=1e-9, abs=0.0)
    assert (result.cost_usd > 0) == (spec.input_cost_per_token is None)  # priced from the map; local at $0


@pytest.mark.parametrize("name", JUDGES)
def test_every_judge_on_a_model_follows_longmemevals_protocol_and_says_which_model(name):
    """Every judge but the offline stand-in reads LongMemEval's templates (the same templates_path as judge=longmemeval)
    as one user message at temperature 0 with a few output tokens and no thinking; only judge=longmemeval is described
    as the LongMemEval judge, the study's judge as the study's protocol, every other one by its model."""
    from omegaconf import OmegaConf

    raw = OmegaConf.load(ROOT / "conf" / "judge" / f"{name}.yaml")
    design = design_from_config(compose_config([f"judge={name}"]), data=False)
    judge, spec = design.judge, option_spec("judge", name)
    label = describe_judge(judge.name, judge.official, spec.model, spec.is_offline)
    if spec.is_offline:
        assert (judge.official, label.kind) == (False, "stand-in")
        return
    if judge.protocol == "locomo_j":  # Mem0's LoCoMo judge: own template file and request (tests/test_locomo_judge.py)
        assert (judge.official, judge.verdict, label.kind) == (False, "locomo_label", "locomo-j")
        assert spec.params == {"temperature": 0.0, "response_format": {"type": "json_object"}}
        return
    official = OmegaConf.load(ROOT / "conf" / "judge" / "longmemeval.yaml")
    assert judge.official and raw._get_node("templates_path")._value() == official._get_node("templates_path")._value()
    assert spec.params["temperature"] == 0 and spec.params["max_tokens"] <= 16
    assert spec.params.get("reasoning_effort") in (None, "disable")
    expected = {"longmemeval": "longmemeval", "longmemeval_study": "study"}.get(name, "templates")
    assert label.kind == expected
    if expected == "templates":  # LongMemEval's protocol on another model, named for it
        assert (judge.verdict, judge.system_message) == ("contains_yes", None)
        assert spec.model in judge.name and spec.model.removeprefix("openai/") != PROTOCOL_JUDGE_MODEL
        assert label.text == (f"LongMemEval's templates judged by {spec.model}, not the official judge model "
                              f"({PROTOCOL_JUDGE_MODEL})")
    other = design_from_config(compose_config([f"judge={name}", "judge.model.model=openai/gpt-4.1-mini"]), data=False)
    moved = describe_judge(other.judge.name, other.judge.official, "openai/gpt-4.1-mini", False)
    assert moved.kind == "templates"  # `judge=longmemeval judge.model.model=X` is not the LongMemEval judge either


def test_one_override_picks_another_model_and_the_run_is_named_after_it():
    base = design_from_config(compose_config(["reader=local"]), data=False)
    assert base.reader.name == "local hosted_vllm/Qwen/Qwen2.5-7B-Instruct"
    design = design_from_config(compose_config(
        ["reader=local", "reader.model.model=hosted_vllm/qwen2.5:7b", "reader.model.api_base=http://localhost:11434/v1"]
    ), data=False)
    spec = design.reader.model.build()
    assert (spec.model, spec.api_base) == ("hosted_vllm/qwen2.5:7b", "http://localhost:11434/v1")
    assert spec.api_key_env is None
    assert design.reader.name == "local hosted_vllm/qwen2.5:7b"
    other = design_from_config(compose_config(["reader=claude_sonnet", "reader.model.model=anthropic/claude-opus-4-7"]),
                               data=False)
    assert other.reader.name == "anthropic/claude-opus-4-7"
    assert model_prices(other.reader.model.build()) is not None  # priced from the map by the new name


def test_a_setup_keeps_the_reader_chosen_on_the_command_line():
    """`setup=study reader=NAME`: the study's setting around another reader, with the study's reader settings."""
    cfg = compose_config(["setup=study", "reader=gemini_flash"])
    assert cfg.reader.model.model == "gemini/gemini-2.5-flash"
    assert (cfg.reader.payload, cfg.reader.model.max_attempts, cfg.judge.name) == ("study", 1, "longmemeval-study")
    assert compose_config(["reader=claude_haiku", "setup=paper"]).reader.model.model == \
        "anthropic/claude-haiku-4-5-20251001"


@pytest.mark.usefixtures("warm_litellm")
@pytest.mark.parametrize("name", ["claude_haiku", "gemini_flash"])
def test_provider_formats_carry_faults_and_limits_too(name, test_key):
    """On Anthropic's and Gemini's routes a 429 is retried like OpenAI's, and a reply cut at the request's maximum
    comes back cut (Anthropic's `max_tokens`, Gemini's `MAX_TOKENS`), billed for what it used."""
    spec = option_spec("reader", name)
    with LoopbackServer(reply="one two three four five", faults=[("429", 0.01)]) as server:
        sent = dataclasses.replace(pointed_at(spec, server), max_attempts=2, backoff_base_s=0.01,
                                   params={**spec.params, "max_tokens": 3})
        result = asyncio.run(Gateway().complete(sent, MESSAGES, seed=1))
        assert len(server.requests) == 2 and server.counts["fault:429"] == 1
    assert result.ok, result.error
    assert (result.text, result.attempts, result.output_tokens) == ("one two three", 2, 3)


def models_table() -> dict[tuple[str, str], tuple[str, str, str]]:
    """The Models tables of docs/configuration.md: (group, option) -> (model id, key variable, price cell)."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("\n### Models\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(reader|judge)=(\w+)`", cells[0]) if len(cells) >= 4 else None
        if match:
            rows[match.groups()] = (cells[1].strip("`"), cells[2].strip("`"), cells[3])
    return rows


def test_the_readme_lists_every_reader_and_judge_with_its_model_key_and_list_price():
    rows = models_table()
    assert set(rows) == set(OPTIONS)
    for (group, name), (model, key, price) in rows.items():
        spec = option_spec(group, name)
        assert model == spec.model, name
        assert key == (spec.api_key_env or "none"), name
        prices = model_prices(spec)
        assert prices is not None
        shown = [float(value) for value in re.findall(r"\$([0-9.]+)", price)]
        assert shown == pytest.approx([prices.input_per_token * 1e6, prices.output_per_token * 1e6]), name


@pytest.mark.slow
def test_a_run_with_the_local_reader_on_a_loopback_server_exits_0(tmp_path):
    """`python -m lme reader=local reader.model.api_base=URL limit=2`: the whole run, no key, $0, the OpenAI key
    in the environment never sent to the local server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "HYDRA"))}
    env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": REAL_OPENAI_KEY}
    with LoopbackServer(reply="offline") as server:
        result = subprocess.run(
            [sys.executable, "-m", "lme", "reader=local", f"reader.model.api_base={server.base_url}", "limit=2",
             f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/mlruns",
             f"cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/run"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
        requests = server.completion_requests
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(requests) == 2
    assert {request.body["model"] for request in requests} == {"Qwen/Qwen2.5-7B-Instruct"}
    assert all(request.headers["authorization"] == "Bearer fake-api-key" for request in requests)
    with sqlite3.connect(tmp_path / "mlflow.db") as conn:
        tags = dict(conn.execute("SELECT key, value FROM tags WHERE key = 'lme.reader'").fetchall())
        cost = conn.execute("SELECT value FROM metrics WHERE key = 'reader_cost_usd'").fetchall()
    assert tags["lme.reader"] == "local hosted_vllm/Qwen/Qwen2.5-7B-Instruct"
    assert cost and all(value == 0.0 for (value,) in cost)
    assert REAL_OPENAI_KEY not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_run_judged_by_a_local_server_says_which_judge_in_its_summary(tmp_path):
    """`python -m lme judge=local judge.model.api_base=URL limit=2`: LongMemEval's templates sent to the local
    server as one user message, and the summary line, the run's tags and the report say the verdicts are that
    model's, not the LongMemEval judge's."""
    templates = need(TEMPLATES)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "HYDRA"))}
    env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": REAL_OPENAI_KEY}
    store = [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/mlruns"]
    with LoopbackServer(reply="Yes.") as server:
        result = subprocess.run(
            [sys.executable, "-m", "lme", "judge=local", f"judge.model.api_base={server.base_url}",
             f"judge.templates_path={templates}", "limit=2", *store, f"cache_dir={tmp_path}/cache",
             f"hydra.run.dir={tmp_path}/run"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
        requests = server.completion_requests
    assert result.returncode == 0, result.stderr[-3000:]
    assert 1 <= len(requests) <= 2  # one verdict per answered question
    for request in requests:
        assert request.body["model"] == "Qwen/Qwen2.5-7B-Instruct"
        assert (request.body["temperature"], request.body["max_tokens"]) == (0, 10)
        (message,) = request.body["messages"]
        assert message["role"] == "user"
        assert request.headers["authorization"] == "Bearer fake-api-key"
    model = "hosted_vllm/Qwen/Qwen2.5-7B-Instruct"
    said = f"LongMemEval's templates judged by {model}, not the official judge model (gpt-4o-2024-08-06)"
    summary = next(line for line in result.stdout.splitlines() if line.startswith("design "))
    assert summary.endswith(f"; judge longmemeval-templates {model} ({said})"), summary
    with sqlite3.connect(tmp_path / "mlflow.db") as conn:
        tags = dict(conn.execute("SELECT key, value FROM tags WHERE key LIKE 'lme.judge%'").fetchall())
    assert tags == {"lme.judge": f"longmemeval-templates {model}", "lme.judge_official": "true",
                    "lme.judge_description": said}
    report = subprocess.run([sys.executable, "-m", "lme", "report", "--resamples", "100", *store], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-3000:]
    assert f"- Judge: longmemeval-templates {model}, {said}, for " in report.stdout
    assert "LongMemEval's official templates" not in report.stdout
    assert REAL_OPENAI_KEY not in result.stdout + result.stderr
