"""Fetch and pin LongMemEval's data files and its judge prompt templates, and LoCoMo's file.

`python -m lme data fetch s|m|oracle|templates|locomo|all [--record-digest] [overrides]` (the command: `lme.cli.data`)

Data files come from the Hugging Face dataset `xiaowu0162/longmemeval-cleaned`
at a pinned revision, through `huggingface_hub`, with progress (`lme.util.progress`:
a tqdm bar on a terminal, a line with bytes, rate and ETA every 30 s otherwise;
`--no-progress` or the override `progress=false`: none). A file is
downloaded into a private staging folder inside `data_dir` (same filesystem),
its SHA-256 is checked against the pin, and only then is it renamed into place:
a failed, refused or interrupted fetch leaves neither the file nor a partial
copy behind. Pins live in this module (`DATASETS`); a file lme has no pin for
is refused unless `--record-digest` is given, which records the digest of the
first download in `{data_dir}/pins.json` (trust on first use, and the command says so).

The judge templates are LongMemEval's own text and are not part of lme: the
same command downloads `src/evaluation/evaluate_qa.py` at a pinned commit,
extracts the five templates from the source with `ast` (nothing is executed),
checks each against `lme.judge.LONGMEMEVAL_TEMPLATE_SHA256`, and writes
`{data_dir}/judge_templates.json` in the form `lme.judge.load_templates` reads.

LoCoMo (`fetch_locomo`): `data/locomo10.json` of snap-research/LoCoMo at a pinned commit, from
raw.githubusercontent.com (`LME_LOCOMO_BASE_URL` replaces that base: a mirror, or a test's loopback server),
streamed into the staging folder with progress, checked against lme's SHA-256 pin and only then renamed to
`{data_dir}/locomo10.json`. It is another benchmark under another license (CC BY-NC 4.0), so `all` (LongMemEval's
files and templates) does not include it: it is fetched by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lme.data.folder import content_sha256, locate
from lme.data.judge_source import extract_templates, verify_templates
from lme.util.errors import LmeError, first_line
from lme.util.hashing import file_sha256, sha256_text
from lme.data.judge_templates import LONGMEMEVAL_TEMPLATE_SHA256
from lme.util.progress import BYTES, Progress
from lme.util.progress import progress as progress_display

REPO_ID = "xiaowu0162/longmemeval-cleaned"
REVISION = "98d7416c24c778c2fee6e6f3006e7a073259d48f"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"  # huggingface_hub's own default; HF_ENDPOINT overrides it

TEMPLATES_REPO_BASE_URL = "https://raw.githubusercontent.com/xiaowu0162/LongMemEval"
TEMPLATES_COMMIT = "9e0b455f4ef0e2ab8f2e582289761153549043fc"
TEMPLATES_SOURCE_PATH = "src/evaluation/evaluate_qa.py"
TEMPLATES_FILENAME = "judge_templates.json"
USER_PINS_FILENAME = "pins.json"
_MAX_SOURCE_BYTES = 1 << 20  # evaluate_qa.py is about 7 KB
_STAGING_PREFIX = ".fetch-"


@dataclass(frozen=True)
class DatasetFile:
    """One official LongMemEval file and its pinned SHA-256 (None: lme has no pin yet)."""

    name: str
    filename: str
    sha256: str | None
    description: str


DATASETS: dict[str, DatasetFile] = {
    "s": DatasetFile(
        "s",
        "longmemeval_s_cleaned.json",
        "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442",
        "LongMemEval-S: 500 questions, about 48 sessions each",
    ),
    "m": DatasetFile(
        "m",
        "longmemeval_m_cleaned.json",
        None,
        "LongMemEval-M: 500 questions, about 500 sessions each (about 2.6 GB)",
    ),
    "oracle": DatasetFile(
        "oracle",
        "longmemeval_oracle.json",
        None,
        "LongMemEval oracle: 500 questions, evidence sessions only",
    ),
}
TARGETS: tuple[str, ...] = (*DATASETS, "templates", "locomo", "all")  # all: LongMemEval's files and templates


@dataclass(frozen=True)
class FetchResult:
    """What a fetch did for one item."""

    name: str
    path: Path
    sha256: str  # of the data file, or of judge_templates.json
    downloaded: bool  # False: already present and verified, nothing was downloaded
    recorded: bool = False  # True: the digest was recorded in the user pin file (no pin in lme)
    digest_source: str = "lme"  # "lme" (pinned in the project) or the user pin file's path


# ----------------------------------------------------------------------------------------------
# digests and pins


def project_pins() -> dict[str, str]:
    """The SHA-256 digests lme pins, by file name."""
    return {f.filename: f.sha256 for f in DATASETS.values() if f.sha256}


def user_pins_path(data_dir: Path) -> Path:
    return data_dir / USER_PINS_FILENAME


def read_user_pins(data_dir: Path) -> dict[str, dict[str, str]]:
    """`{filename: {"sha256", "repo", "revision", "recorded_at"}}` from `{data_dir}/pins.json` ({} if absent)."""
    path = user_pins_path(data_dir)
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LmeError(f"{path}: user pin file cannot be read ({exc}); fix or delete it.") from None
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values()
    ):
        raise LmeError(f"{path}: user pin file has no valid 'files' object; fix or delete it.")
    return files


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def record_user_pin(data_dir: Path, filename: str, sha256: str, repo_id: str, revision: str) -> Path:
    path = user_pins_path(data_dir)
    files = read_user_pins(data_dir)
    files[filename] = {
        "sha256": sha256,
        "repo": repo_id,
        "revision": revision,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_json_atomic(path, {
        "note": "SHA-256 digests recorded by `lme data fetch --record-digest` on first download (not pinned by lme)",
        "files": files,
    })
    return path


def expected_digest(
    file: DatasetFile, data_dir: Path, pins: Mapping[str, str], repo_id: str, revision: str
) -> tuple[str | None, str]:
    """The digest a file must have and where it comes from: lme's pin first, then the user pin file."""
    if file.filename in pins:
        return pins[file.filename], "lme"
    recorded = read_user_pins(data_dir).get(file.filename)
    if recorded and recorded.get("repo", repo_id) == repo_id and recorded.get("revision", revision) == revision:
        return recorded["sha256"], str(user_pins_path(data_dir))
    return None, ""


# ----------------------------------------------------------------------------------------------
# errors from huggingface_hub / the network, turned into one sentence

_NETWORK_ERROR_NAMES = {
    "ConnectError", "ConnectTimeout", "ConnectionError", "TimeoutException", "Timeout", "ReadTimeout",
    "OfflineModeIsEnabled", "LocalEntryNotFoundError", "NameResolutionError", "gaierror",
    "ConnectionRefusedError", "NewConnectionError", "MaxRetryError",
}


def is_network_error(exc: BaseException) -> bool:
    """Whether the host could not be reached at all (checked along the cause chain, by class name so
    it holds for the httpx- and requests-based huggingface_hub versions alike)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(cls.__name__ in _NETWORK_ERROR_NAMES for cls in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return int(status) if isinstance(status, int) else None


# ----------------------------------------------------------------------------------------------
# staging: a private folder in data_dir, removed whatever happens


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_staging(data_dir: Path, filename: str) -> None:
    """Staging folders left by a fetch that was killed outright (SIGKILL, power loss)."""
    for folder in data_dir.glob(f"{_STAGING_PREFIX}{filename}.*"):
        try:
            pid = int(folder.name[len(f"{_STAGING_PREFIX}{filename}."):].split(".")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _staging_dir(data_dir: Path, filename: str) -> Iterator[Path]:
    _remove_stale_staging(data_dir, filename)
    folder = data_dir / f"{_STAGING_PREFIX}{filename}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:  # success (the file was moved out), failure, refusal, KeyboardInterrupt alike
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# data files


def _resolve_url(endpoint: str, repo_id: str, revision: str, filename: str) -> str:
    return f"{endpoint.rstrip('/')}/datasets/{repo_id}/resolve/{revision}/{filename}"


def _probe(endpoint: str, repo_id: str, revision: str, filename: str) -> tuple[str | None, int | None]:
    """HEAD the file once, without retries: fail fast, in one sentence, when the hub cannot be reached.

    Returns the server's ETag (the SHA-256 of an LFS file) and size.
    """
    from huggingface_hub import get_hf_file_metadata
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    url = _resolve_url(endpoint, repo_id, revision, filename)
    try:
        meta = get_hf_file_metadata(url, token=False, endpoint=endpoint)
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as exc:
        raise LmeError(f"{url}: not found on the hub ({type(exc).__name__}).") from None
    except Exception as exc:  # noqa: BLE001 - every failure becomes one sentence
        if is_network_error(exc):
            raise LmeError(
                f"cannot reach {endpoint} to download {filename} (no network?); download it elsewhere and put it "
                f"into the data folder (as .json, .json.xz or .json.gz) or pass dataset.path=FILE."
            ) from None
        status = _http_status(exc)
        raise LmeError(f"{url}: {'HTTP ' + str(status) if status else first_line(exc)}.") from None
    if meta.commit_hash and meta.commit_hash != revision:
        raise LmeError(f"{url}: the hub answered for commit {meta.commit_hash}, not the pinned revision {revision}.")
    return meta.etag, meta.size


def _tqdm_into(shown: Progress) -> type:
    """A tqdm class for huggingface_hub that draws nothing and passes the bytes it is told of on to `shown`.

    huggingface_hub calls `update` with the bytes written to the file (plain HTTP: each chunk; xet: the
    reconstructed bytes) and, where the class has it, `update_transfer` with the bytes received, which
    are not counted again. A retried request reuses its bar and takes back (negative `update`) what
    it rewinds.
    """
    from tqdm import tqdm

    class ProgressTqdm(tqdm):  # type: ignore[misc, type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "disable": True})
            total = kwargs.get("total")
            if isinstance(total, int) and total > 0 and shown.total is None:
                shown.set_total(total)
            initial = kwargs.get("initial")
            if isinstance(initial, int) and initial > 0:
                shown.update(initial)

        def update(self, n: float | None = 1) -> bool | None:
            if n:
                shown.update(int(n))
            return None

        def update_transfer(self, n: float | None = 1) -> None:
            pass

        def set_transfer_postfix_str(self, *args: Any, **kwargs: Any) -> None:
            pass

    return ProgressTqdm


def _download(endpoint: str, repo_id: str, revision: str, filename: str, staging: Path, shown: Progress) -> Path:
    from huggingface_hub import hf_hub_download

    tqdm_class = _tqdm_into(shown)
    try:
        local = hf_hub_download(
            repo_id=repo_id,
            filename=filename,
            repo_type="dataset",
            revision=revision,
            endpoint=endpoint,
            local_dir=staging,
            cache_dir=staging / ".hf-cache",  # never reuse (or fill) a shared HF cache: we verify what we fetched
            token=False,
            tqdm_class=tqdm_class,
        )
    except Exception as exc:  # noqa: BLE001
        url = _resolve_url(endpoint, repo_id, revision, filename)
        if is_network_error(exc):
            raise LmeError(
                f"the download of {filename} from {endpoint} failed (network: {first_line(exc)}); nothing was kept, "
                f"try again or download it elsewhere and put it into the data folder (as .json, .json.xz or .json.gz) "
                f"or pass dataset.path=FILE."
            ) from None
        status = _http_status(exc)
        reason = f"HTTP {status}" if status else first_line(exc)
        raise LmeError(f"{url}: the download failed ({reason}); nothing was kept.") from None
    return Path(str(local))


_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def fetch_dataset(
    name: str,
    data_dir: str | Path,
    *,
    record_digest: bool = False,
    endpoint: str | None = None,
    pins: Mapping[str, str] | None = None,
    repo_id: str = REPO_ID,
    revision: str = REVISION,
    progress: bool | None = True,
) -> FetchResult:
    """Download one LongMemEval file into `data_dir`, verified, or leave nothing.

    `pins` maps file names to SHA-256 digests (default: lme's pins); tests inject
    their own. A file with no pin is refused before any download unless
    `record_digest` is set or the user pin file already holds its digest.
    `progress` (bytes downloaded, rate, ETA on stderr; `lme.util.progress`): None a tqdm
    bar on a terminal and a line every 30 s otherwise (what the command uses), True
    a bar whatever stderr is, False nothing; `lme.util.progress.set_enabled(False)` turns
    it off in every case.
    """
    if name not in DATASETS:
        raise LmeError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}.")
    file = DATASETS[name]
    data_dir = Path(data_dir).expanduser()
    pins = project_pins() if pins is None else pins
    endpoint = (endpoint or _default_endpoint()).rstrip("/")
    target = data_dir / file.filename

    expected, source = expected_digest(file, data_dir, pins, repo_id, revision)

    present = locate(data_dir, name)  # the .json, or a .json.xz / .json.gz, here or in data_dir/longmemeval
    if present is not None and os.path.exists(present):
        digest = content_sha256(present)  # of the JSON it holds: the pin is the official .json's
        held = "" if present.name == file.filename else " (the JSON it holds)"
        if expected is None:
            raise LmeError(
                f"{present} is present but lme has no pinned SHA-256 for it; delete it and fetch again with "
                f"--record-digest to record the digest of the official file."
            )
        if digest != expected:
            raise LmeError(
                f"{present} is present but has SHA-256 {digest}{held}, expected {expected} (pinned in {source}): "
                f"not the official file, which runs would use as it is; delete it (or move it out of {data_dir}) and fetch again."
            )
        return FetchResult(name, present, digest, downloaded=False, digest_source=source)

    if expected is None and not record_digest:
        raise LmeError(
            f"{file.filename} has no pinned SHA-256 in lme, so its download cannot be verified; rerun with "
            f"--record-digest to download it and record its digest in {user_pins_path(data_dir)} "
            f"(trusting the first download)."
        )

    etag, size = _probe(endpoint, repo_id, revision, file.filename)
    data_dir.mkdir(parents=True, exist_ok=True)
    with _staging_dir(data_dir, file.filename) as staging:
        with progress_display(
            f"fetch {file.filename}", size if size else None, BYTES,
            enabled=progress is not False, bar=True if progress else None,
        ) as shown:
            staged = _download(endpoint, repo_id, revision, file.filename, staging, shown)
        digest = file_sha256(staged)
        recorded = False
        if expected is not None:
            if digest != expected:
                raise LmeError(
                    f"downloaded {file.filename} has SHA-256 {digest}, expected {expected} (pinned in {source}); "
                    f"the file was discarded."
                )
        else:
            server_sha = (etag or "").strip('"').lower()
            if _SHA256_RE.match(server_sha) and server_sha != digest:
                raise LmeError(
                    f"downloaded {file.filename} has SHA-256 {digest} but the hub announced {server_sha}; "
                    f"the file was discarded and no digest was recorded."
                )
            source = str(record_user_pin(data_dir, file.filename, digest, repo_id, revision))
            recorded = True
        os.replace(staged, target)
    return FetchResult(name, target, digest, downloaded=True, recorded=recorded, digest_source=source)


def _default_endpoint() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.ENDPOINT)
    except Exception:  # noqa: BLE001
        return DEFAULT_HF_ENDPOINT


# ----------------------------------------------------------------------------------------------
# judge templates: download and store


def templates_url(base_url: str = TEMPLATES_REPO_BASE_URL, commit: str = TEMPLATES_COMMIT) -> str:
    return f"{base_url.rstrip('/')}/{commit}/{TEMPLATES_SOURCE_PATH}"


def _get_text(url: str, timeout_s: float) -> str:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "lme-data-fetch"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s) URL from config
            body = response.read(_MAX_SOURCE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise LmeError(f"{url}: HTTP {exc.code}, so the judge templates were not fetched.") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LmeError(
            f"cannot reach {url} ({reason}; no network?); fetch evaluate_qa.py elsewhere or point "
            f"judge.templates_path= at a verified templates file."
        ) from None
    if len(body) > _MAX_SOURCE_BYTES:
        raise LmeError(f"{url}: larger than {_MAX_SOURCE_BYTES} bytes, not LongMemEval's evaluate_qa.py.")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise LmeError(f"{url}: not UTF-8 text, not LongMemEval's evaluate_qa.py.") from None


def fetch_templates(
    data_dir: str | Path,
    *,
    base_url: str = TEMPLATES_REPO_BASE_URL,
    commit: str = TEMPLATES_COMMIT,
    pins: Mapping[str, str] = LONGMEMEVAL_TEMPLATE_SHA256,
    timeout_s: float = 30.0,
) -> FetchResult:
    """Download evaluate_qa.py, extract and verify the five templates, store `{data_dir}/judge_templates.json`."""
    from lme.data.judge_templates import load_templates

    data_dir = Path(data_dir).expanduser()
    target = data_dir / TEMPLATES_FILENAME
    present = locate(data_dir, "templates")  # data_dir/judge_templates.json, or data_dir/longmemeval/'s
    if present is not None and present.exists():
        try:
            load_templates(present, pins)
        except LmeError:
            pass  # stale or damaged: fetch again and store a verified one at target (which is then the one found)
        else:
            return FetchResult("templates", present, file_sha256(present), downloaded=False)

    url = templates_url(base_url, commit)
    source = _get_text(url, timeout_s)
    templates = extract_templates(source, url)
    digests = verify_templates(templates, pins, url)
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(target, {
        "source": (f"LongMemEval {TEMPLATES_SOURCE_PATH} (xiaowu0162/LongMemEval, MIT License, Copyright (c) 2024 "
                   f"Di Wu), commit {commit}; template text unchanged"),
        "url": url,
        "source_sha256": sha256_text(source),
        "format": "each template is filled with str.format(question, answer, hypothesis)",
        "templates": templates,
        "sha256": digests,
    })
    load_templates(target, pins)  # the file we wrote reads back as the judge will read it
    return FetchResult("templates", target, file_sha256(target), downloaded=True)


# ----------------------------------------------------------------------------------------------
# LoCoMo: one file from raw GitHub at a pinned commit, verified by SHA-256 before it is moved into place

LOCOMO_REPO_BASE_URL = "https://raw.githubusercontent.com/snap-research/LoCoMo"
LOCOMO_BASE_URL_ENV = "LME_LOCOMO_BASE_URL"  # the base above, for a mirror (or a test's loopback server)
LOCOMO_COMMIT = "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376"
LOCOMO_SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
LOCOMO_LICENSE = ("LoCoMo (snap-research/LoCoMo) is licensed CC BY-NC 4.0 (Attribution-NonCommercial): "
                  "non-commercial use only, with attribution")
_MAX_LOCOMO_BYTES = 64 << 20  # the file is about 2.8 MB; anything far larger is not it


def locomo_base_url() -> str:
    """Where LoCoMo's files are served, by commit: `LME_LOCOMO_BASE_URL`, else raw.githubusercontent.com."""
    return os.environ.get(LOCOMO_BASE_URL_ENV) or LOCOMO_REPO_BASE_URL


def locomo_url(base_url: str | None = None, commit: str = LOCOMO_COMMIT) -> str:
    from lme.data.folder import item

    return f"{(base_url or locomo_base_url()).rstrip('/')}/{commit}/data/{item('locomo').filename}"


def _download_url(url: str, staged: Path, shown_label: str, progress: bool | None, timeout_s: float,
                  what: str) -> None:
    """Stream `url` into `staged` with progress; one sentence for anything that goes wrong."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "lme-data-fetch"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s) URL
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with progress_display(shown_label, total, BYTES, enabled=progress is not False,
                                  bar=True if progress else None) as shown, open(staged, "wb") as handle:
                written = 0
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    written += len(chunk)
                    if written > _MAX_LOCOMO_BYTES:
                        raise LmeError(f"{url}: larger than {_MAX_LOCOMO_BYTES} bytes, not {what}; nothing was kept.")
                    handle.write(chunk)
                    shown.update(len(chunk))
    except urllib.error.HTTPError as exc:
        raise LmeError(f"{url}: HTTP {exc.code}, so {what} was not fetched; nothing was kept.") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LmeError(f"cannot download {url} ({reason}; no network?); nothing was kept: download it elsewhere and "
                       f"put it into the data folder or pass dataset.path=FILE.") from None


def fetch_locomo(
    data_dir: str | Path,
    *,
    base_url: str | None = None,
    commit: str = LOCOMO_COMMIT,
    sha256: str = LOCOMO_SHA256,
    progress: bool | None = True,
    timeout_s: float = 60.0,
) -> FetchResult:
    """Download LoCoMo's `data/locomo10.json` at `commit` into `data_dir`, verified against `sha256`, or leave
    nothing.

    `base_url` (default `locomo_base_url()`: `LME_LOCOMO_BASE_URL` or raw GitHub) and `sha256` are for tests and
    mirrors. A copy already in the data folder (`.json`, `.json.xz`, `.json.gz`, here or in `locomo/`) whose JSON
    has the pinned digest is kept and nothing is downloaded; one with another digest is refused and kept.
    `progress` as in `fetch_dataset`.
    """
    from lme.data.folder import item

    data_dir = Path(data_dir).expanduser()
    filename = item("locomo").filename
    target = data_dir / filename
    present = locate(data_dir, "locomo")
    if present is not None and os.path.exists(present):
        digest = content_sha256(present)
        held = "" if present.name == filename else " (the JSON it holds)"
        if digest != sha256:
            raise LmeError(
                f"{present} is present but has SHA-256 {digest}{held}, expected {sha256} (pinned in lme): not "
                f"LoCoMo's file at commit {commit[:8]}, which runs would use as it is; delete it (or move it out of "
                f"{data_dir}) and fetch again."
            )
        return FetchResult("locomo", present, digest, downloaded=False)

    url = locomo_url(base_url, commit)
    data_dir.mkdir(parents=True, exist_ok=True)
    with _staging_dir(data_dir, filename) as staging:
        staged = staging / filename
        _download_url(url, staged, f"fetch {filename}", progress, timeout_s, "LoCoMo's file")
        digest = file_sha256(staged)
        if digest != sha256:
            raise LmeError(f"downloaded {filename} ({url}) has SHA-256 {digest}, expected {sha256} (pinned in lme); "
                           f"the file was discarded.")
        os.replace(staged, target)
    return FetchResult("locomo", target, digest, downloaded=True)
