"""SHA-256 digests as lowercase hex: of text (UTF-8), of bytes, of a file's contents.

The one home of these helpers: prereg, the judge, the job's MLflow params, the dataset fetcher and the
retrieval tool all hash through here, so the same input always gets the same digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20  # files are read 1 MiB at a time, never whole


def sha256_bytes(data: bytes) -> str:
    """SHA-256 (hex) of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """SHA-256 (hex) of `text` encoded as UTF-8."""
    return sha256_bytes(text.encode("utf-8"))


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of the file's bytes, read in chunks (a multi-gigabyte file is not held in memory)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 text: the form every digest of structured data is taken over."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def sha256_json(value: Any) -> str:
    """SHA-256 (hex) of `value`'s canonical JSON."""
    return sha256_text(canonical_json(value))
