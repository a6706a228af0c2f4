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

- **in a URL**: its user info (`https://user:PASSWORD@host`, `https://TOKEN@host`), a query or fragment
  parameter named like a secret (`?sig=`, `?api-key=`, `?token=`, `&code=`, `X-Amz-Signature=`,
  `X-Amz-Credential=`, `#access_token=`; `url_secret_named`) and a path segment that holds a random-looking
  token (`/v1/<token>/chat`: a run of 16 or more letters and digits, with at least 3 letters and a digit,
  that changes between upper case, lower case and digits at least every fifth character; `token_like`).

SHA-256 hex digests, 32-hex run ids, UUIDs, model names (`openai/gpt-4o-mini`, `Meta-Llama-3.1-70B-Instruct`,
`/openai/deployments/gpt-4o/chat/completions`), paths and prompt texts are not keys.

**One sanitizer on every path out**: `clean(value)` (a text, or any mapping or list of them) is what lme
writes or prints for anything that may quote a secret it did not refuse: a provider's error, an exception's
text, a reply holding a URL. It redacts the shapes above, the values of secret-named fields, and the literal
values of the environment's secret variables (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, ... and every
variable a config names in `api_key_env`), whatever their shape. Cost (measured on one core): a quick byte
scan for what any rule needs first (`_could_hold`), about 15 µs for a short text and 2-4 ms for a 100 KB chat
history that holds nothing; the rules run only on a text the scan cannot clear (a `key=` or a URL in it), about
60 ms for 100 KB of this README. So it runs on every trace text and every line printed (`cleaned_output`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lme.util.errors import LmeError

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


# What each of `_SHAPES` needs in a text (a regular expression that starts with a lookbehind scans slowly: it runs
# only where one of these is found, at str.find's speed)
_SHAPE_NEEDLES: list[tuple[str, ...]] = [
    ("sk-",), ("k_live_", "k_test_"), ("Bearer", "BEARER", "bearer"), (":", "="), ("hf_",), ("AKIA", "ASIA"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), ("glpat-",), ("xox",), ("AIza",), ("eyJ",),
    ("PRIVATE KEY",), ("://",), (":", "="),
]
assert len(_SHAPE_NEEDLES) == len(_SHAPES)


# ----- credentials in URLs: user info, secret-named query parameters, token-like path segments -----

URL_TOKEN_REMEDY = ("secrets are never logged: leave the token out of the URL and give it through the environment "
                    "(a model's key: the variable named in its api_key_env).")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*\Z")  # searched just before a "://" (so the scan runs at str.find's speed)
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>\\`{}|^]+")
_URL_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?P<v>[^/\s:@\"'{}\\?#]+)@")
_QUERY = re.compile(r"(?<=[?&;#])(?P<n>[A-Za-z][A-Za-z0-9_.-]{0,60})=(?P<v>[^&#;\s\"'<>\\]+)")
_PIECE = re.compile(r"[A-Za-z0-9]{16,}")
_HEX = re.compile(r"[0-9a-fA-F]+")
# query parameters that carry a secret though `secret_named` does not say so (Azure's SAS `sig`, OAuth's `code`)
_URL_SECRET_WHOLE = {"sig", "code", "key", "token", "auth", "pass", "pwd", "sas", "secret", "session", "sessionid"}


def url_secret_named(name: str) -> bool:
    """Whether a URL's query parameter carries a secret: `secret_named` (`api_key`, `api-key`, `access_token`,
    `X-Amz-Security-Token`, `X-Amz-Credential`, `password`) or `sig`, `code`, `*signature` (`X-Amz-Signature`)."""
    if secret_named(name):
        return True
    words = _words(name)
    joined = "".join(words)
    return joined in _URL_SECRET_WHOLE or (joined.endswith("signature") and not _NOT_SECRET_WORDS.intersection(words))


def _placeholder(value: str) -> bool:
    """`${VAR}`, `{key}`, `<KEY>`, `***`, `xxx`, `[redacted]`: a value standing for a secret, not one."""
    return (len(value) < 3 or value.startswith(("$", "{", "<", "[", "%24", "%7B", "%7b", "%3C", "%3c"))
            or not value.strip("*xX.-_") or value.lower() in ("null", "none", "redacted"))


def token_like(text: str) -> bool:
    """Whether a run of letters and digits is a random token, not a word, a name or a digest: 16 or more characters,
    not hexadecimal (SHA-256 digests, 32-hex run ids, UUIDs' parts), at least 3 letters, and changing between
    upper case, lower case and digits at least every fifth character (a digit is needed below 20 characters).
    `Instruct`, `gpt4o`, `20240229T120000Z`, `generateContent` are not tokens; `AAHdqTcvCH1vGWJxfSeofSAs0K5P`,
    `k3j5h7g9f1d2s4a6q8w0` are."""
    n = len(text)
    if n < 16 or not (text.isascii() and text.isalnum()) or _HEX.fullmatch(text):
        return False
    letters = sum(c.isalpha() for c in text)
    if letters < 3 or (letters == n and n < 20):
        return False
    classes = [0 if c.isdigit() else 1 if c.islower() else 2 for c in text]
    switches = sum(a != b for a, b in zip(classes, classes[1:]))
    return switches * (5 if letters < n else 5 / 2) >= n - 1


def _url_spans(text: str) -> list[tuple[int, int, str]]:
    """Credentials in URLs: a token as the user (`https://TOKEN@host`), a secret-named query or fragment parameter
    (anywhere in a text: `host/v1?sig=...`), a token-like path segment of a URL with a scheme."""
    found = []
    at = text.find("://")
    while at >= 0:
        scheme = _SCHEME.search(text, max(0, at - 40), at)
        start = scheme.start() if scheme else at
        at = text.find("://", at + 3)
        if scheme is None or (start and text[start - 1] in _SCHEME_CHARS):
            continue
        user = _URL_USER.match(text, start)
        if user and ":" not in user.group("v") and _random_looking(user.group("v"), 8, 16) \
                and not user.group("v").startswith("$"):
            found.append((user.start("v"), user.end("v"), "url-token"))
        match = _URL.match(text, start)
        if match:
            url, base = match.group(), match.start()
            after = url.index("://") + 3
            slash = url.find("/", after)
            if slash < 0:
                continue
            end = len(url)
            for mark in "?#":
                position = url.find(mark, slash)
                if position >= 0:
                    end = min(end, position)
            for piece in _PIECE.finditer(url, slash, end):
                if token_like(piece.group()):
                    first = url.rfind("/", slash, piece.start()) + 1
                    stop = url.find("/", piece.end(), end)
                    found.append((base + first, base + (end if stop < 0 else stop), "url-token"))
    if "=" in text:
        for match in _QUERY.finditer(text):
            if url_secret_named(match.group("n")) and not _placeholder(match.group("v")):
                found.append((match.start("v"), match.end("v"), "url-token"))
    return found


def _spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every secret in `text`; kind is "url" for a password in a URL, "url-token" for a token
    in a URL's user, query or path, else "key"."""
    found = []
    for (pattern, check), needles in zip(_SHAPES, _SHAPE_NEEDLES):
        if not any(needle in text for needle in needles):
            continue
        for match in pattern.finditer(text):
            if check(match):
                group = "v" if "v" in pattern.groupindex else 0
                kind = "url" if "://" in pattern.pattern else "key"
                found.append((match.start(group), match.end(group), kind))
    found.extend(_url_spans(text))
    return found


def _kind(kinds: Iterable[str]) -> str:
    """The kind a refusal names when a value holds several: a key first, then a token in a URL, then a password."""
    kinds = set(kinds)
    return next(kind for kind in ("key", "url-token", "url", "name") if kind in kinds)


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
    kind: str  # "name": a secret-named field; "key": a key-shaped text; "url": a password in a URL; "url-token": a
    # token in a URL's user, query or path


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
                if key == "api_key_env":
                    note_key_variable(item)  # its value is a key: `clean` removes it wherever it turns up
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
                found.append(Finding(path, _kind(kinds)))

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


# ----- one sanitizer on every path out -----

# The quick scan before the rules (`_could_hold`): a text with none of these holds no secret by any rule above. Each
# rule needs one: a shape's own letters (case as the rule has it), or a secret's name (`key`, `token`, `pass`, in any
# case) followed by `:` or `=` (`Bearer` by a space; `sig`, `code`, ... by `=`, as in a URL's query).
_CASED_NEEDLES = (b"sk-", b"k_live_", b"k_test_", b"hf_", b"AKIA", b"ASIA", b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_",
                  b"github_pat_", b"glpat-", b"xox", b"AIza", b"eyJ", b"PRIVATE KEY", b"://")
_NAMED_NEEDLES = (b"key", b"token", b"secret", b"passwd", b"password", b"passphrase", b"authorization", b"credential",
                  b"credentials", b"cookie", b"auth", b"pass")
_QUERY_NEEDLES = (b"sig", b"signature", b"code", b"pwd", b"sas", b"session", b"sessionid")
_AFTER_A_NAME = re.compile(rb"[\"']?\s*[:=]")
_BLANK = frozenset(b" \t\r\n\f\v")
_ENV_SECRET_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS",
                       "COOKIE", "SIGNATURE")
_key_variables: set[str] = set()  # variables a config this process checked names in an api_key_env
_env_names: tuple[tuple[int, int], list[str]] = ((-1, -1), [])  # (environment size, noted count), secret variables


def note_key_variable(name: Any) -> None:
    """Remember that variable `name` holds a key (a config's `api_key_env`): `clean` removes its value."""
    if isinstance(name, str) and name.strip():
        _key_variables.add(name.strip())


def secret_variable(name: str) -> bool:
    """Whether an environment variable holds a secret by its name: `secret_named`, or ending in `_KEY`, `_TOKEN`,
    `_SECRET`, `_PASSWORD`, ... (`OPENAI_API_KEY`, `LME_FAKE_KEY`, `HF_TOKEN`; not `LME_MAX_TOKENS`), or named in a
    config's `api_key_env`."""
    if name in _key_variables:
        return True
    words = _words(name)
    if not words or _NOT_SECRET_WORDS.intersection(words):
        return False
    return secret_named(name) or name.upper().endswith(_ENV_SECRET_ENDINGS)


def _secret_value(value: str) -> bool:
    """A variable's value worth removing from texts: 8 characters or more, one word, not a path or a flag."""
    return (len(value) >= 8 and not any(c.isspace() for c in value) and not value.startswith(("/", "~", "./"))
            and value.lower() not in ("true", "false", "disabled", "required"))


def environment_secrets() -> list[str]:
    """The values of the environment's secret variables (`secret_variable`), longest first. The names are found
    again when the environment's size or the noted variables change; the values are read on every call."""
    global _env_names
    stamp = (len(os.environ), len(_key_variables))
    if stamp != _env_names[0]:
        _env_names = (stamp, [name for name in os.environ if secret_variable(name)])
    values = {value.strip() for name in _env_names[1] if (value := os.environ.get(name))}
    return sorted((value for value in values if _secret_value(value)), key=len, reverse=True)


def _could_hold(text: str) -> bool:
    """Whether any rule may find something in `text` (False: certainly nothing): byte searches, about 2 ms for 100 KB."""
    raw = text.encode("utf-8", "surrogatepass")
    if any(needle in raw for needle in _CASED_NEEDLES):
        return True
    low = raw.lower()
    for needles, after in ((_NAMED_NEEDLES, _AFTER_A_NAME.match), (_QUERY_NEEDLES, None), ((b"bearer",), None)):
        for needle in needles:
            at = low.find(needle)
            while at >= 0:
                end = at + len(needle)
                if after is not None and after(low, end):
                    return True
                if needle == b"bearer" and low[end:end + 1] and low[end] in _BLANK:
                    return True
                if after is None and needle != b"bearer" and low[end:end + 1] == b"=":
                    return True
                at = low.find(needle, end)
    return False


def clean_text(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every secret removed (`[redacted]`): the rules' shapes, and the given values (`secrets`: by
    default none; `clean` passes the environment's)."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return redact(text) if _could_hold(text) else text


def clean(value: Any, extra_secrets: Iterable[str | None] = ()) -> Any:
    """What lme writes or prints, with every secret removed: a text (`clean_text` with the environment's secret values
    and `extra_secrets`), or a mapping, list or tuple of them, recursively (keys cleaned too; a secret-named field's
    non-empty value becomes `[redacted]`). Numbers, None and other values are returned as they are. The one sanitizer
    on every path out: MLflow params, tags, run names, texts, tables and artifacts (`lme.tracking.runs`), traces
    (`lme.tracking.traces`), reports and exports, error messages and every line printed (`cleaned_output`)."""
    secrets = environment_secrets()
    extra = [s for s in extra_secrets if s]
    if extra:
        secrets = sorted({*secrets, *extra}, key=len, reverse=True)
    return _clean(value, secrets)


def _clean(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        return clean_text(value, secrets)
    if isinstance(value, Mapping):
        return {(_clean(key, secrets) if isinstance(key, str) else key):
                (REDACTED if secret_named(key) and _filled(item) else _clean(item, secrets))
                for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item, secrets) for item in value]
    if isinstance(value, tuple):
        return tuple(_clean(item, secrets) for item in value)
    return value


class _CleanedStream:
    """A text stream whose writes go through `clean` (everything else is the stream's own: `isatty`, `fileno`, ...)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def cleaned_stream(stream: Any) -> Any:
    """`stream` with its writes through `clean` (as it is, when it already has them)."""
    return stream if isinstance(stream, _CleanedStream) else _CleanedStream(stream)


@contextlib.contextmanager
def cleaned_output():
    """Within: every line this process prints on stdout and stderr (lme's messages, Hydra's and litellm's logs,
    a traceback) goes through `clean`; the streams are put back after."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cleaned_stream(sys.stdout), cleaned_stream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


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
    if first.kind == "url-token":
        return f"{subject} holds a token in a URL (its user, path or query){also}; {URL_TOKEN_REMEDY}"
    return f"{subject} looks like an API key{also}; {REMEDY}"


def refusal(path: str, kind: str = "key", where: str = "") -> LmeError:
    """The one-sentence error for a secret at `path` (kind "key", "name", "url" or "url-token")."""
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
        return [Finding(label, _kind(kinds))]
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
