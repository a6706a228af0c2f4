"""A full disk, as a writer sees it, for tests: no file may grow past a size (RLIMIT_FSIZE) and a write past it
fails with EFBIG (SIGXFSZ ignored) instead of killing the process."""

from __future__ import annotations

import resource
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """In this process, for the block: no file grows past `limit` bytes; lifted afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def limit_child(limit: int) -> Callable[[], None]:
    """A `preexec_fn` for `subprocess.run`: the child may write no file past `limit` bytes."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return apply
