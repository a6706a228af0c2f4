"""Secrets never reach anything lme writes: config values that hold a key are refused, texts are redacted.

Keys belong in the environment, named by a model's `api_key_env`. A config value that holds one
is refused (`refuse_secrets`, `refuse_secret_arguments`) before Hydra, MLflow, the journal or a
cache writes a byte; a text that may quote one (a provider's error message) goes through `redact`.

Two rules, the same everywhere:

- **by shape**, anywhere in a string: provider keys and tokens (`sk-...`, `sk-ant-...`,
  `sk-proj-...`, `Bearer ...`, `hf_...`, `AKIA...`, `ghp_...`, `xoxb-...`, `AIza...`, JWTs,
  private-key blocks), a password in a URL (`https://user:PASSWORD@host`), and a random-looking
  value after a secret name in a text (`api_key=...`, `Authorization: ...`);
- **by name**: a non-empty value under a field named like a secret (`api_key`, `Authorization`,
  `access_token`, `client_secret`, `password`, ...; `secret_named`). `api_key_env` names a
  variable and `max_tokens`, `input_cost_per_token` count tokens: neither is a secret.

SHA-256 hex digests, model names (`openai/gpt-4o-mini`), paths and prompt texts are not keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lme.errors import LmeError

REDACTED = "[redacted]"
REMEDY = "keys are never logged: put the key in an environment variable and name that variable in the model's api_key_env."
URL_REMEDY = "secrets are never logged: leave the password out of the URL and give it through the environment."

_TOKEN = r"[A-Za-z0-9._~+/=-]"


def _has_digit(text: str) -> bool:
    return any(c.isdigit() for c in text)


def _random_looking(text: str, short: int = 6, long: int = 16) -> bool:
    """A short value with a digit and a letter, or any long one: a token, not a word."""
    if len(text) >= long:
        return True
    return len(text) >= short and _has_digit(text) and any(c.isalpha() for c in text)


def _after_a_secret_name(match: re.Match[str]) -> bool:
    value = match.group("v")
    return secret_named(match.group("n")) and not value.startswith("$") and _random_looking(value, 6, 12)


def _bearer_token(match: re.Match[str]) -> bool:
    value = match.group("v")
    return len(value) >= 6 and (_has_digit(value) or any(c in "._~+/-" for c in value) or len(value) >= 16)


def _authorization_value(value: str) -> bool:
    """`Authorization: Basic dXNlcjpw...`, `Token 1a2b...`: a credential, not prose or a placeholder."""
    if value.startswith("$") or value.lower().startswith("bearer "):  # Bearer tokens have their own shape
        return False
    word = max(value.split(), key=len, default="")
    mixed = any(c.isupper() for c in word) and any(c.islower() for c in word)
    return len(word) >= 8 and (_has_digit(word) or mixed or any(c in "._~+/=-" for c in word) or len(word) >= 16)


# (pattern, check): a match is a key when check(match) holds; group "v", where present, is the secret part.
_SHAPES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], bool]]] = [
    # OpenAI / Anthropic / DeepSeek and others: sk-..., sk-ant-..., sk-proj-...
    (re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{6,}"),
     lambda m: _has_digit(m.group()[3:]) or len(m.group()) >= 23),
    # Stripe-style live/test keys
    (re.compile(r"(?<![A-Za-z0-9_])[rsp]k_(?:live|test)_[A-Za-z0-9]{10,}"), lambda m: True),
    (re.compile(r"(?<![A-Za-z0-9])(?:Bearer|BEARER|bearer)\s+(?P<v>[A-Za-z0-9](?:[A-Za-z0-9._~+/-]*[A-Za-z0-9_~+/-])?=*)"), _bearer_token),
    # Authorization: <anything> (Basic, Token, Digest, a bare key)
    (re.compile(r"(?i)(?<![A-Za-z0-9_-])(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?P<v>[^\s\"',;}\]][^\"',;}\]\n]{5,})"),
     lambda m: _authorization_value(m.group("v"))),
    (re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{8,}"), lambda m: _random_looking(m.group()[3:], 8, 30)),
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"), lambda m: True),
    (re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})"), lambda m: True),
    (re.compile(r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,}"), lambda m: True),
    (re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"), lambda m: True),
    (re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{20,}"), lambda m: True),
    (re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), lambda m: True),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), lambda m: True),
    # A password in a URL: scheme://user:PASSWORD@host
    (re.compile(r"(?i)(?<![A-Za-z0-9+.-])[a-z][a-z0-9+.-]*://[^/\s:@\"'{}]+:(?P<v>[^/\s@\"']+)@"),
     lambda m: not m.group("v").startswith("$")),
    # api_key=..., "client_secret": "...", token: ... inside a longer text
    (re.compile(rf"(?<![A-Za-z0-9_.-])(?P<n>[A-Za-z][A-Za-z0-9_.-]{{0,60}})[\"']?\s*[:=]\s*[\"']?(?P<v>\$?{_TOKEN}{{6,}})"),
     _after_a_secret_name),
]


def _spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every secret in `text`; kind is "url" for a password in a URL, else "key"."""
    found = []
    for pattern, check in _SHAPES:
        for match in pattern.finditer(text):
            if check(match):
                group = "v" if "v" in pattern.groupindex else 0
                kind = "url" if "://" in pattern.pattern else "key"
                found.append((match.start(group), match.end(group), kind))
    return found


def holds_a_key(text: str) -> bool:
    """Whether a string holds something shaped like a key or token anywhere in it."""
    return isinstance(text, str) and bool(_spans(text))


def looks_like_a_key(value: Any) -> bool:
    """Whether a config value (a string, or any string inside a list or mapping) holds a key-shaped text."""
    if isinstance(value, (list, tuple)):
        return any(looks_like_a_key(item) for item in value)
    if isinstance(value, Mapping):
        return any(looks_like_a_key(key) or looks_like_a_key(item) for key, item in value.items())
    return isinstance(value, str) and holds_a_key(value)


# Field names: the whole name, or its last words, say it holds a secret ...
_SECRET_ENDINGS = (
    "apikey", "token", "secret", "password", "passwd", "passphrase", "authorization", "bearer",
    "accesskey", "secretkey", "privatekey", "authkey", "subscriptionkey", "signingkey", "sessionkey",
    "credential", "credentials", "cookie",
)
_SECRET_WHOLE = {"key", "auth", "pass"}
# ... unless a word counts or describes tokens (max_tokens, input_cost_per_token, eos_token).
_NOT_SECRET_WORDS = {
    "max", "min", "num", "n", "count", "per", "cost", "costs", "price", "limit", "budget", "total", "input",
    "output", "prompt", "completion", "reasoning", "cached", "eos", "bos", "pad", "unk", "sep", "cls", "mask",
    "stop", "start", "end", "special", "next", "first", "last", "length", "len", "size", "rate",
}


def _words(name: str) -> list[str]:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name))
    return [word for word in re.split(r"[^a-z0-9]+", name.lower()) if word]


def secret_named(key: Any) -> bool:
    """Whether a field name says its value is a secret: `api_key`, `apiKey`, `x-api-key`, `Authorization`,
    `access_token`, `client_secret`, `password`, ... (not `api_key_env`, `max_tokens`, `tokens_per_minute`)."""
    words = _words(str(key).rsplit(".", 1)[-1])
    if not words or _NOT_SECRET_WORDS.intersection(words):
        return False
    joined = "".join(words)
    return joined in _SECRET_WHOLE or joined.endswith(_SECRET_ENDINGS)


@dataclass(frozen=True)
class Finding:
    path: str
    kind: str  # "name": a secret-named field; "key": a key-shaped text; "url": a password in a URL


def _filled(value: Any) -> bool:
    """A value a secret-named field may hold without holding a secret: nothing."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, str):
        return value.strip().lower() not in ("", "null", "none", "~", "''", '""')
    if isinstance(value, Mapping):
        return any(_filled(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_filled(item) for item in value)
    return True


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def findings(config: Any, prefix: str = "") -> list[Finding]:
    """Every place in a config (mappings and lists, recursively) that holds a secret, with why."""
    found: list[Finding] = []

    def visit(value: Any, path: str, named: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                child = _join(path, key)
                if holds_a_key(str(key)):
                    found.append(Finding(child, "key"))
                visit(item, child, named or secret_named(key))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                visit(item, f"{path}[{index}]", named)
        elif named and _filled(value):
            found.append(Finding(path, "name"))
        elif isinstance(value, str):
            kinds = {kind for _, _, kind in _spans(value)}
            if kinds:
                found.append(Finding(path, "key" if "key" in kinds else "url"))

    visit(_plain(config), prefix, False)
    return found


def _plain(config: Any) -> Any:
    """An OmegaConf node as plain containers, interpolations left as written (never resolved here)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover
        return config
    if isinstance(config, (DictConfig, ListConfig)):
        return OmegaConf.to_container(config, resolve=False)
    return config


def find_secrets(config: Any) -> list[str]:
    """Dotted paths (`reader.model.params.api_key`, `notes[0]`) of the values in a config that hold a secret:
    a non-empty value under a secret-named field, or a key-shaped text anywhere in a string."""
    seen: dict[str, None] = {}
    for finding in findings(config):
        seen.setdefault(finding.path, None)
    return list(seen)


def redact(text: str, extra_secrets: Iterable[str | None] = ()) -> str:
    """`text` with every key-shaped substring and every given secret value replaced by `[redacted]`."""
    if not isinstance(text, str):
        text = str(text)
    for secret in sorted((s for s in extra_secrets if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    spans = sorted(_spans(text))
    if not spans:
        return text
    merged: list[list[int]] = []
    for start, end, _ in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, last = [], 0
    for start, end in merged:
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


def _sentence(found: Sequence[Finding], noun: str = "config value", where: str = "") -> str:
    first = found[0]
    subject = f"{noun} {redact(first.path)}"
    if where:
        subject += f" in {where}"
    others = sorted({redact(f.path) for f in found[1:]} - {redact(first.path)})
    also = f" (so do {', '.join(others[:5])}{', ...' if len(others) > 5 else ''})" if others else ""
    if first.kind == "name":
        return f"{subject} holds a secret{also}; {REMEDY}"
    if first.kind == "url":
        return f"{subject} holds a password in a URL{also}; {URL_REMEDY}"
    return f"{subject} looks like an API key{also}; {REMEDY}"


def refusal(path: str, kind: str = "key", where: str = "") -> LmeError:
    """The one-sentence error for a secret at `path` (kind "key", "name" or "url")."""
    return LmeError(_sentence([Finding(path, kind)], where=where))


def refuse_secrets(config: Any, where: str = "") -> None:
    """Raise `LmeError` (one sentence naming the first path, never the secret) when the config holds a
    secret anywhere. `where` says which config (e.g. "the composed config"); empty: not said."""
    found = findings(config)
    if found:
        raise LmeError(_sentence(found, where=where))


# ----- the command line: raw arguments, before Hydra writes .hydra/overrides.yaml -----

def argument_findings(argument: str, label: str = "argument") -> list[Finding]:
    """Secrets in one command-line argument: a Hydra override (`++a.b.api_key=...`, `x={Authorization: ...}`)
    or any other argument (`--note=my key is sk-...`). A finding's path is the override's key or the
    option's name; `label` names an argument that has neither."""
    text = str(argument)
    body = text.lstrip("~+")
    if "=" in body and not text.startswith("-"):
        name, value = body.split("=", 1)
        name = name.split("@", 1)[0]
    elif text.startswith("-") and "=" in text:
        name, value = text.split("=", 1)
    else:
        name, value = "", text
    label = name if name and not holds_a_key(name) else label
    if name and secret_named(name) and _filled(value):
        return [Finding(label, "name")]
    parsed = _parsed_value(text) if name and not text.startswith("-") else None
    found = findings(parsed, name) if isinstance(parsed, (Mapping, list, tuple)) else []
    if found:
        return found
    kinds = {kind for _, _, kind in _spans(text)}
    if kinds:
        return [Finding(label, "key" if "key" in kinds else "url")]
    return []


def _parsed_value(argument: str) -> Any:
    """The value of a Hydra override as Python data ({...}, [...]), or None when it does not parse."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        override = OverridesParser.create().parse_override(argument)
        return None if override.is_sweep_override() else override.value()
    except Exception:  # not an override Hydra parses: Hydra reports it later
        return None


def refuse_secret_arguments(arguments: Sequence[str]) -> None:
    """Raise `LmeError` when a command-line argument holds a secret: one sentence naming the override's key
    (or the argument), never the secret."""
    for position, argument in enumerate(arguments, 1):
        found = argument_findings(argument, label=f"number {position}")
        if found:
            is_override = not str(argument).startswith("-") and found[0].path != f"number {position}"
            raise LmeError(_sentence(found, noun="config value" if is_override else "command-line argument"))


def keep_argument(argument: str) -> bool:
    """Whether an argument may be repeated in a printed command (a resume command): it holds no secret."""
    return not argument_findings(argument)
