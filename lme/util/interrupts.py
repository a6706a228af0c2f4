"""Ctrl-C held back over third-party imports, and raised once they are done.

A SIGINT becomes a KeyboardInterrupt wherever the main thread happens to be. Inside the import of a large
library it can land in code that cannot take it. Seen with `import litellm`: a callback of a Rust
extension (pydantic-core prints "Exception ignored" and the run goes on as if no Ctrl-C had come), and a
run that printed lme's line and chose 130 but ended by the signal (exit -2; why was not pinned down).
Over such an import lme holds the signal and hands it on when the import ends (seconds at most), where
its own handlers say what was kept.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT over the block; a Ctrl-C that came meanwhile is raised as KeyboardInterrupt at its end.

    Only the main thread can set signal handlers: elsewhere (a prefetch or warm-up thread, which never
    receives KeyboardInterrupt anyway) the block runs as it is, and so it does where SIGINT has no Python
    handler (SIG_IGN in a helper process, SIG_DFL). The handler in place before the block is the one
    called at its end, so a Ctrl-C means what it meant before, only later."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        previous(signal.SIGINT, None)  # the handler that was in place (Python's raises KeyboardInterrupt)
