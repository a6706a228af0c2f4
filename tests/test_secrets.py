"""Secrets in the config are refused before anything is written (issue 16, part 5).

Fast unit tests cover the rules (`lme.util.secrets`): key shapes found anywhere in a string, field
names, redaction, the one-sentence refusal, the command-line check. The slow tests run the real
`python -m lme` once for each way a key can come in (an override, a header inside
`extra_headers`, a key inside a longer value, a secret-named field with an innocent value, a
design file in a user config dir) and then read every byte under the temp directory: MLflow's
store and artifacts, Hydra's output directory, the call cache and the ledger.

Fake keys are put together at run time, so no file of the project holds a key-shaped string.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lme.util import secrets
from lme.cli import CONF_DIR, compose_config, main
from lme.util.errors import LmeError
from lme.study.resume import resume_command
from lme.config.compose import override_combinations
from lme.util.secrets import (
    find_secrets,
    holds_a_key,
    looks_like_a_key,
    redact,
    refuse_secret_arguments,
    refuse_secrets,
    secret_named,
)
from lme.tracking.runs import params_from_config

DIGEST = hashlib.sha256(b"lme").hexdigest()
OPENAI = "sk-" + "proj-" + "Zq8wX2c4V6b8N0m1L3k5J7h9"
ANTHROPIC = "sk-" + "ant-api03-" + "Yt7Rf2Gh9Jk4Lm1Np6Qs3"
SHORT = "sk-" + "abc123"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
AWS = "AKIA" + "QWERTYUIOPASDFGH"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SLACK = "xoxb-" + "1234567890-abcdefABCDEF"
GOOGLE = "AIza" + "SyD4f8G2h6J0k3L7m1N5p9Q2r6S0t4U8v2W"
JWT = "eyJ" + "hbGciOiJIUzI1NiJ9" + ".eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0" + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"
ORDINARY = [
    "openai/gpt-4o-mini", "anthropic/claude-3-5-sonnet-20241022", "lme-offline/extractive-reader",
    "/home/user/.cache/lme/data/longmemeval_s_cleaned.json", "prereg/bm25-2024.yaml", "outputs/bm25/2025-01-01_12-00-00",
    DIGEST, "sha256:" + DIGEST, hashlib.md5(b"x").hexdigest(), "0f9e8d7c6b5a49382716a5b4c3d2e1f0",
    "task: search result | query: ", "skills", "ask-me", "disk-cache-2024", "hf_datasets", "max_tokens=512",
    "input_cost_per_token=1e-06", "api_key_env=OPENAI_API_KEY", "OPENAI_API_KEY", "file:///tmp/user_conf",
    "http://localhost:8000/v1", "sqlite:///mlflow.db", "bearer of bad news", "authorization: required",
    "token: search", "Answer the question from the chat history. If unsure, say so.", "2023/05/20 (Sat) 02:21",
    "${oc.env:LME_CACHE_DIR,.lme_cache}", "mlflow-artifacts:/0/abc", "",
]


# ----- the rules -----

@pytest.mark.parametrize("text", [
    OPENAI, ANTHROPIC, SHORT, HF, AWS, GITHUB, SLACK, GOOGLE, JWT,
    f"my key is {OPENAI}...", f"note: {ANTHROPIC} (old)", f"Authorization: Bearer {SHORT}9x", "Bearer abc.def",
    "{Authorization:'Bearer abc123def456'}", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "api_key=abc123def456",
    '{"client_secret": "s3cr3t-v4lue"}', "password=hunter2", "https://user:hunter2@example.org/v1",
    "-----BEGIN RSA PRIVATE KEY-----",
])
def test_a_key_is_found_anywhere_in_a_string(text):
    assert holds_a_key(text)
    assert looks_like_a_key(text) and looks_like_a_key(["fine", text]) and looks_like_a_key({"a": {"b": text}})
    assert "[redacted]" in redact(text)


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_config_text_is_not_a_key(text):
    assert not holds_a_key(text)
    assert redact(text) == text
    assert find_secrets({"some": {"value": text}}) == []


def test_redact_keeps_the_text_around_a_key_and_removes_given_secrets():
    message = f"Incorrect API key provided: {OPENAI}. You can find your API key at the dashboard."
    assert redact(message) == "Incorrect API key provided: [redacted]. You can find your API key at the dashboard."
    assert redact("Authorization: Bearer abc123def456, retry") == "Authorization: Bearer [redacted], retry"
    assert redact("https://me:pw12345@host/x") == "https://me:[redacted]@host/x"
    assert redact("the key opensesame was refused", extra_secrets=["opensesame", None, ""]) == (
        "the key [redacted] was refused")
    assert redact(f"digest {DIGEST} of openai/gpt-4o-mini") == f"digest {DIGEST} of openai/gpt-4o-mini"
    assert redact(f"{OPENAI} {HF}") == "[redacted] [redacted]"


@pytest.mark.parametrize("name", [
    "api_key", "apikey", "api-key", "apiKey", "APIKey", "X-Api-Key", "Authorization", "proxy-authorization",
    "token", "access_token", "hf_token", "refresh_token", "secret", "client_secret", "password", "bearer",
    "OPENAI_API_KEY", "aws_secret_access_key", "key", "reader.model.params.api_key",
])
def test_secret_names(name):
    assert secret_named(name)


@pytest.mark.parametrize("name", [
    "api_key_env", "max_tokens", "max_completion_tokens", "tokens_per_minute", "input_tokens", "output_tokens",
    "input_cost_per_token", "output_cost_per_token", "eos_token", "tokenizer", "secret_env", "key_path", "k", "top_k",
    "model", "api_base", "cache_dir", "templates_path", "OPENAI_API_KEY_ENV",
])
def test_names_that_are_not_secrets(name):
    assert not secret_named(name)


def test_find_secrets_names_every_path_by_name_or_by_shape():
    config = {
        "reader": {"model": {
            "model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY",
            "params": {"api_key": "innocent", "extra_headers": {"Authorization": "abc", "X-Trace": "1"}, "max_tokens": 512},
        }},
        "judge": {"model": {"params": {"api_key": None, "token": "", "use_auth_token": True}}},
        "notes": ["fine", f"my key is {SHORT}9"],
        "dataset": {"sha256": DIGEST, "url": "https://user:pw12345@host/x.json"},
        "embedding": {"secret": "${oc.env:SOME_SECRET}"},
        OPENAI: 1,
    }
    found = find_secrets(config)
    assert found[:3] == ["reader.model.params.api_key", "reader.model.params.extra_headers.Authorization", "notes[1]"]
    assert set(found[3:5]) == {"dataset.url", "embedding.secret"} and len(found) == 6
    assert find_secrets(OmegaConf.create({"a": {"password": "x"}, "b": "${a.password}"})) == ["a.password"]


def test_the_refusal_is_one_sentence_naming_the_path_never_the_secret():
    with pytest.raises(LmeError) as caught:
        refuse_secrets({"reader": {"model": {"params": {"api_key": OPENAI, "user": OPENAI}}}}, "the composed config")
    message = str(caught.value)
    assert message == (
        "config value reader.model.params.api_key in the composed config holds a secret "
        "(so do reader.model.params.user); keys are never logged: put the key in an environment variable and "
        "name that variable in the model's api_key_env."
    )
    with pytest.raises(LmeError) as caught:
        refuse_secrets({OPENAI: {"x": 1}})
    assert OPENAI not in str(caught.value) and str(caught.value).startswith("config value [redacted] looks like")
    with pytest.raises(LmeError, match="^config value tracking.uri holds a password in a URL; secrets are never"):
        refuse_secrets({"tracking": {"uri": "postgresql://lme:pw12345@db/mlflow"}})
    refuse_secrets({"reader": {"model": {"api_key_env": "OPENAI_API_KEY", "params": {"api_key": None}}}})


@pytest.mark.parametrize(("argument", "sentence_start"), [
    (f"++reader.model.params.api_key={OPENAI}", "config value reader.model.params.api_key holds a secret;"),
    ("++reader.model.params.extra_headers={Authorization:'Bearer abc...'}",
     "config value reader.model.params.extra_headers.Authorization holds a secret;"),
    (f"+notes=my key is {SHORT}...", "config value notes looks like an API key;"),
    (f"--note=my key is {SHORT}...", "command-line argument --note looks like an API key;"),
    ("++judge.model.params.client_secret=kumquat", "config value judge.model.params.client_secret holds a secret;"),
    (f"hydra.job.env_set.OPENAI_API_KEY={OPENAI}", "config value hydra.job.env_set.OPENAI_API_KEY holds a secret;"),
    (f"+reader.model.params.user=['a','{GITHUB}']", "config value reader.model.params.user[1] looks like an API key;"),
    (OPENAI, "command-line argument number 1 looks like an API key;"),
])
def test_the_command_line_is_refused_naming_the_key(argument, sentence_start):
    with pytest.raises(LmeError) as caught:
        refuse_secret_arguments([argument])
    message = str(caught.value)
    assert message.startswith(sentence_start) and message.endswith("api_key_env.") and "\n" not in message
    for secret in (OPENAI, SHORT, GITHUB, "kumquat", "abc..."):
        assert secret not in message
    assert not secrets.keep_argument(argument)


def test_ordinary_overrides_pass_the_command_line_check():
    refuse_secret_arguments([
        "+design=bm25", "-m", "seed=1,2,3", "limit=2", "reader.model.params.api_key=null", "~reader.model.params.api_key",
        f"dataset.path=/data/{DIGEST}.json", "hydra.run.dir=outputs/x", "hydra.searchpath=[file:///tmp/conf]",
        "++reader.model.api_key_env=MY_KEY", "reader.model.model=openai/gpt-4o-mini", "--cfg", "job",
        "++reader.model.input_cost_per_token=1e-6", "question_types=[multi-session]",
    ])


def test_the_resume_command_leaves_out_every_override_that_holds_a_secret():
    command = resume_command([
        "seed=2", f"+notes=my key is {SHORT}x", "++reader.model.params.client_secret=kumquat",
        "++reader.model.params.extra_headers={Authorization:'abc'}", "limit=3", "hydra.run.dir=old",
    ], "outputs/run")
    assert command == "python -m lme seed=2 limit=3 hydra.run.dir=outputs/run"


def test_params_refuse_a_key_anywhere_and_drop_secret_named_fields():
    with pytest.raises(LmeError, match="^config value notes looks like an API key;"):
        params_from_config({"notes": f"my key is {OPENAI}"})
    with pytest.raises(LmeError, match="^config value tracking.uri holds a password in a URL;"):
        params_from_config({"tracking": {"uri": "postgresql://lme:pw12345@db/mlflow"}})
    params = params_from_config({"reader": {"model": {"params": {
        "extra_headers": {"Authorization": "abc", "X-Trace": "t1"}, "client_secret": "kumquat", "max_tokens": 9}}},
        "dataset": {"sha256": DIGEST}})
    assert params == {"reader.model.params.extra_headers.X-Trace": "t1", "reader.model.params.max_tokens": "9",
                      "dataset.sha256": DIGEST}


def test_sweeps_are_composed_one_group_value_at_a_time():
    combinations = override_combinations(["-m", "+design=bm25,semantic,hybrid", "seed=range(0,50)", "limit=2",
                                          "reader.model.params.temperature=0,1"])
    assert combinations == [
        ["+design=bm25", "seed=0", "limit=2", "reader.model.params.temperature=0"],
        ["+design=semantic", "seed=0", "limit=2", "reader.model.params.temperature=0"],
        ["+design=hybrid", "seed=0", "limit=2", "reader.model.params.temperature=0"],
    ]
    assert override_combinations(["--config-dir", "/elsewhere", "limit=2"]) is None


def _design_dir(root: Path, secret: str) -> Path:
    """A user config dir with a design whose reader sends a key in a header."""
    (root / "design").mkdir(parents=True)
    (root / "design" / "leaky.yaml").write_text(
        "# @package _global_\ndesign_name: leaky\nreader:\n  model:\n    params:\n"
        f"      extra_headers:\n        X-Org: 'team {secret}'\n"
    )
    return root


@pytest.mark.parametrize("args", [
    ["memory", "+design=bm25", "++reader.model.params.api_key=kumquat"],
    ["prereg", "freeze", "prereg/x.yaml", f"+notes={OPENAI}"],
    ["estimate", f"--note=my key is {SHORT}x"],
    ["++reader.model.params.api_key=kumquat", "--help"],
])
def test_the_cli_refuses_before_any_subcommand_or_hydra(args, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("lme: error: ") and captured.err.count("\n") == 1
    assert "kumquat" not in captured.err and OPENAI not in captured.err and SHORT not in captured.err


def test_the_cli_refuses_a_key_from_a_design_in_a_user_config_dir(tmp_path, capsys):
    conf = _design_dir(tmp_path / "conf", OPENAI)
    for args in (["+design=leaky"], ["-m", "+design=bm25,leaky", "seed=1,2"]):
        with pytest.raises(SystemExit) as stopped:
            main([*args, f"hydra.searchpath=[file://{conf}]", f"hydra.run.dir={tmp_path}/out"])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err == (
            "lme: error: config value reader.model.params.extra_headers.X-Org in the composed config looks like an "
            "API key; keys are never logged: put the key in an environment variable and name that variable in the "
            "model's api_key_env.\n"
        )
    assert not (tmp_path / "out").exists()


def test_no_design_holds_anything_taken_for_a_secret():
    """Every design, offline and paper setup: neither the composed config nor the resolved one nor its params."""
    designs = sorted(path.stem for path in (CONF_DIR / "design").glob("*.yaml"))
    assert designs
    for design in [None, *designs]:
        for setup in ("offline", "paper"):
            cfg = compose_config([*([f"+design={design}"] if design else []), f"setup={setup}"])
            assert find_secrets(cfg) == [], (design, setup)
            resolved = OmegaConf.to_container(cfg, resolve=True)
            assert find_secrets(resolved) == [], (design, setup)
            refuse_secrets(resolved, "the composed config")
            params_from_config(resolved)


# ----- the real command, and every byte it leaves -----

def _run(tmp: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "ANTHROPIC"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    args = [
        sys.executable, "-m", "lme", "limit=2",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_location={tmp}/mlruns",
        f"cache_dir={tmp}/cache", f"hydra.run.dir={tmp}/out", *overrides,
    ]
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)


def _holding(root: Path, text: str) -> list[str]:
    return [str(path) for path in root.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


@pytest.mark.slow
@pytest.mark.parametrize(("override", "secret", "path"), [
    (f"++reader.model.params.api_key={OPENAI}", OPENAI, "reader.model.params.api_key"),
    ("++reader.model.params.extra_headers={Authorization:'Bearer Ab3dE5gH7jK9mN1pQ'}", "Ab3dE5gH7jK9mN1pQ",
     "reader.model.params.extra_headers.Authorization"),
    (f"+notes=my key is {ANTHROPIC} for now", ANTHROPIC, "notes"),
    ("++judge.model.params.client_secret=kumquat", "kumquat", "judge.model.params.client_secret"),
    ("DESIGN", GITHUB, "reader.model.params.extra_headers.X-Org"),
], ids=["api_key", "bearer-header", "key-in-a-longer-value", "secret-name", "design-file"])
def test_a_refused_run_writes_nothing_and_never_echoes_the_key(tmp_path_factory, override, secret, path):
    tmp = tmp_path_factory.mktemp("run")
    if override == "DESIGN":  # the user's config dir lies outside the directory scanned
        conf = _design_dir(tmp_path_factory.mktemp("conf"), secret)
        overrides = ["+design=leaky", f"hydra.searchpath=[file://{conf}]"]
    else:
        overrides = [override]
    result = _run(tmp, *overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lme: error: config value {path} "), result.stderr
    assert lines[0].endswith(".")
    assert secret not in result.stdout and secret not in result.stderr
    assert _holding(tmp, secret) == []
    assert not (tmp / "out").exists() and not (tmp / "mlflow.db").exists()


@pytest.mark.slow
def test_the_scan_sees_what_a_run_writes(tmp_path):
    """The control: a run that is not refused writes MLflow's store, artifacts, Hydra's files and the caches,
    and a harmless marker given as a config value (a SHA-256 digest, not a key) is found by the same scan."""
    result = _run(tmp_path, f"+notes={DIGEST}")
    assert result.returncode == 0, result.stderr[-3000:]
    holding = _holding(tmp_path, DIGEST)
    assert str(tmp_path / "mlflow.db") in holding
    assert str(tmp_path / "out" / ".hydra" / "config.yaml") in holding
    assert any("mlruns" in path and path.endswith("config.yaml") for path in holding)
    names = {path.name for path in tmp_path.rglob("*") if path.is_file()}
    assert {"calls.sqlite", "ledger.sqlite", "outcomes.jsonl", "mlflow.db"} <= names


# ----- credentials in URLs and the one sanitizer (issue 36, item 3) -----

URL_TOKEN = "a1B2c3D4e5F6" + "g7H8i9J0kLmN"
URL_SECRETS = [
    f"https://host/v1/{URL_TOKEN}/chat", "https://host/v1?sig=Zx9Qw8Er7Ty6", "https://host/v1?api-key=abcd1234efgh",
    "https://host/v1?token=abc123", "host/v1?sig=CANARY123", "https://host/cb#access_token=ya29.a0AfH6SMB",
    "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=" + DIGEST,
    "https://k3j5h7g9f1d2s4a6q8w0@host/v1", "https://host/v1?code=4/0AY0e-g7x",
]
URL_ORDINARY = [
    "https://x.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-02-01",
    "https://host/v1/chat/completions", "mlflow-artifacts:/1/0f9e8d7c6b5a49382716a5b4c3d2e1f0/artifacts",
    f"file:///tmp/mlruns/1/{DIGEST[:32]}/artifacts/config.yaml", "https://huggingface.co/Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4",
    "https://host/runs/0f9e8d7c-6b5a-4938-2716-a5b4c3d2e1f0/tr-0f9e8d7c6b5a49382716a5b4c3d2e1f0",
    "https://host/2024/20240229T120000Z/x?X-Amz-Date=20240101T000000Z&max_tokens=512", "https://host/?token={api_key}",
    "postgresql://postgres@localhost/db",
]


@pytest.mark.parametrize("text", URL_SECRETS)
def test_a_token_in_a_url_is_found_and_redacted(text):
    assert holds_a_key(text) and "[redacted]" in redact(text) and "[redacted]" in secrets.clean(text)


@pytest.mark.parametrize("text", URL_ORDINARY)
def test_ordinary_urls_hold_no_token(text):
    assert redact(text) == text and secrets.clean(text) == text


def test_a_token_in_a_url_is_refused_naming_the_field():
    with pytest.raises(LmeError, match=r"^config value reader.model.api_base holds a token in a URL \(its user, path or "
                                       r"query\); secrets are never logged"):
        refuse_secrets({"reader": {"model": {"api_base": f"https://host/v1/{URL_TOKEN}/chat"}}})


def test_clean_removes_the_environment_secrets_and_secret_named_fields(monkeypatch):
    value = "plainwords" + "canaryvalue"  # no key shape: only its variable says it is a secret
    monkeypatch.setenv("LME_SOME_TOKEN", value)
    cleaned = secrets.clean({"note": f"the provider said {value}", "password": "x", "n": 3, "rows": [value, None]})
    assert cleaned == {"note": "the provider said [redacted]", "password": "[redacted]", "n": 3,
                       "rows": ["[redacted]", None]}
    assert secrets.clean("nothing here") == "nothing here"
