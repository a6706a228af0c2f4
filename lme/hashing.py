"""SHA-256 digests as lowercase hex: of text (UTF-8), of bytes, of a file's contents.

The one home of these helpers: prereg, the judge, the job's MLflow params, the dataset fetcher and the
retrieval tool all hash through here, so the same input always gets the same digest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

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
