"""Python's cyclic garbage collector around a study's large, long-lived data.

A LongMemEval file becomes millions of small objects (S: 245,625 turns) that live until the process ends.
Left alone, the collector walks all of them in every full collection: while the file parses (about 30% of
the load), a dozen times during a study (each a pause of about 0.25 s holding the GIL, on the event loop's
core), and again at exit (seconds). Two tools:

- `collection_paused()`: no collection while a file is parsed (nothing it builds is garbage);
- `freeze_long_lived(what)`: once the first file is loaded (and kept for the process's later jobs), and once
  litellm is imported, everything alive moves to the collector's permanent generation (`gc.freeze`), which no
  collection walks again. (A third freeze, after the first job built its parts, moved 0 objects in every study
  measured, the file's freeze having taken them: removed, 2026-12-07.)

What each saves, measured with the trick on and off in alternation (docs/performance.md, "Tricks and what each
saves", 2026-12-07, 2 busy cores): the pause while S parses, 0.45 -> 0.11 s of the collector's CPU per load
(808 collections -> 1; `python scripts/bench_tricks.py parse_pause --pairs 4`); S frozen once loaded, a full
collection afterwards 95 ms -> 0 (`bench_tricks.py file_freeze`), and in a study of S's first 20 questions x 3
seeds at zero latency the study process's collector time 0.92-2.43 s -> 0.12-0.31 s; litellm's import paused and
frozen, 3.8-4.7 s -> 0.12-0.31 s of collector time in that study.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0  # callers inside `collection_paused`, over all threads
_was_enabled = False  # whether the collector ran before the first of them paused it
_frozen: set[str] = set()  # what was frozen already in this process


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection inside the block (for every thread: the collector is per process); the collector
    is as it was once the last of overlapping blocks (several threads loading files) ends."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def freeze_long_lived(what: str, *, collect_young: bool = True) -> bool:
    """Move every object alive now to the permanent generation, the first time this process calls it for
    `what`: right after data that lives until exit was made (the first file loaded and kept for the
    process's later jobs; litellm's import). Later calls for the same `what` do nothing:
    a freeze takes everything alive, not only the data, so whatever of it later becomes garbage in a cycle
    is never collected; a few freezes per process bound that, one per file loaded or job run would not (a
    process running hundreds of jobs, such as a test worker, would keep each one's leftovers). True when
    this call froze.

    `collect_young=False` freezes without collecting the young generations first: right after a file was
    parsed with the collector paused (and still paused), they hold every object the parse made (S:
    millions, all alive and none in a cycle), and walking them would hold the GIL about 0.1 s per
    generation on the way to the first request; the little cyclic garbage other threads made meanwhile is
    kept (once per process)."""
    with _lock:
        if what in _frozen:
            return False
        _frozen.add(what)
    if collect_young:
        gc.collect(1)  # the young garbage first (milliseconds: the old generation is not walked), not kept for good
    gc.freeze()
    return True
