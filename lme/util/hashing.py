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


_KNOWN_FILES: dict[tuple[str, int, int, int, int, int], str] = {}  # a file's identity -> its digest


def file_sha256_known(path: str | Path) -> str:
    """`file_sha256`, read once per process while the file stays the same file unchanged (same device, inode,
    size, modification and status-change times: any write changes the last): the jobs of a multirun in one
    process name their data file's digest without reading hundreds of MB again."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    identity = (str(resolved), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    digest = _KNOWN_FILES.get(identity)
    if digest is None:
        digest = _KNOWN_FILES[identity] = file_sha256(resolved)
    return digest


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 text: the form every digest of structured data is taken over."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def sha256_json(value: Any) -> str:
    """SHA-256 (hex) of `value`'s canonical JSON."""
    return sha256_text(canonical_json(value))
