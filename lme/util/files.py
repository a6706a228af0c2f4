"""Writing an output file whole or not at all, with one sentence when the disk refuses.

`write_text_atomic` writes into a temporary file beside the target and renames it into place: a full
disk, a quota, a kill or Ctrl-C mid-write leaves the earlier file (or none) and never half a file, and
the temporary file is removed. Every `OSError` becomes a `LmeError` naming the file and the reason
(`No space left on device`, `File too large`, `Permission denied`, ...), so a command that computed its
result says in one sentence why it could not keep it, without a traceback.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from lme.util.errors import LmeError


def cannot_write(path: str | Path, error: OSError) -> LmeError:
    """The one sentence for a write that failed: the file, the system's reason, what to do."""
    reason = error.strerror or type(error).__name__
    if error.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
        advice = "a file stands where a folder is needed (or a folder where a file is); move it away or pick another place"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "check the folder's permissions (or that its disk is writable) or pick another place"
    else:
        advice = "free space or pick another place"
    return LmeError(f"{path}: could not be written ({reason}); {advice}, and run the command again.")


def _umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status); 0o022 when unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _mode_for(path: Path) -> int:
    """The permissions the file keeps (an existing one's) or gets (a new file's, as `open` would give it)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666 & ~_umask()


def write_text_atomic(path: str | Path, text: str) -> None:
    """`text` (UTF-8) at `path`, whole or not at all; the parent folder is created when missing."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all (see the module's docstring)."""
    path = Path(path)
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise LmeError(f"{path}: a directory where lme would write a file; move it away or pick another place.")
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        os.fchmod(handle, _mode_for(path))  # mkstemp's 0600 would hide an output others read
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        temporary = None
    except OSError as exc:
        raise cannot_write(path, exc) from None
    finally:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
