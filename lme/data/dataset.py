"""A design's dataset: which file, which questions, read how (`DatasetSpec`), and loading it.

`load_dataset(spec)` checks the file, selects the questions (`lme.data.select`) and returns them, held in
memory, or as `StreamedQuestions` (one parsed at a time) for a file too large to hold. A process keeps the
last file it loaded (`load_questions_once`), so the jobs of a multirun in one process share one load, and
`prefetch_dataset` starts that load in a background thread while the multirun parent sets up MLflow.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lme.data.load import check_data_file, file_identity, load_questions, read_data
from lme.data.records import Question
from lme.data.select import Selection, select_questions
from lme.util.errors import LmeError
from lme.util.heap import collection_paused, freeze_long_lived


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    path: Path
    fetch: str | None  # the `lme data fetch` target that provides this file
    stream: bool  # read one question at a time (LongMemEval-M)
    selection: Selection
    swept: bool = False  # the sweep gives its jobs different data files (no prefetch)
    benchmark: str = "longmemeval"  # `dataset.benchmark`: which benchmark's file it is (`lme.data.benchmark`)
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # `dataset.options`

    @property
    def loading(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What, beside the file, decides the questions a load gives: the benchmark and its options."""
        return self.benchmark, tuple(sorted((str(k), str(v)) for k, v in self.options.items()))


def load_file(path: Path, benchmark: str = "longmemeval", options: Mapping[str, Any] | None = None,
              data: bytes | None = None) -> list[Question]:
    """Every question of `path` as the benchmark reads it (LongMemEval's: `lme.data.load.load_questions`)."""
    if benchmark == "longmemeval" and not options:
        return load_questions(path, data=data)
    from lme.data.benchmark import benchmark_named

    return benchmark_named(benchmark).load(read_data(path) if data is None else data, path, options)


def load_dataset(spec: DatasetSpec) -> tuple[Path, list[Question] | StreamedQuestions]:
    """(the data file, its selected questions); one sentence naming the file for anything wrong."""
    path = spec.path
    if not os.path.lexists(path):
        from lme.data.folder import missing_in_folder

        if (sentence := missing_in_folder(path)) is not None:  # the data folder's own file: where it looked
            raise LmeError(f"dataset {spec.name}: {sentence}")
        hint = "pass dataset.path=FILE"
        if spec.fetch:
            hint = f"run `python -m lme data fetch {spec.fetch}` or pass dataset.path=FILE"
        raise LmeError(f"{path}: dataset file not found (dataset {spec.name}); {hint}.")
    check_data_file(path, f"dataset {spec.name}")  # a directory, a FIFO, a symlink loop, no permission
    if spec.stream and spec.benchmark != "longmemeval":
        from lme.data.benchmark import benchmark_named

        if not benchmark_named(spec.benchmark).streamable:
            raise LmeError(f"dataset {spec.name}: dataset.stream=true reads LongMemEval files one question at a time; "
                           f"benchmark {spec.benchmark} is read whole (set dataset.stream=false).")
    if spec.stream:
        from lme.data.stream import scan_index

        # select on a cheap index pass (ids and types only); histories are read one at a time later
        selected = select_questions(scan_index(path), spec.selection, path)
    else:
        selected = select_questions(load_questions_once(path, spec.benchmark, spec.options), spec.selection, path)
    if selected.skipped:
        print(f"lme: warning: {selected.skipped_note(path)}", file=sys.stderr, flush=True)
    if not selected.questions:
        raise LmeError(f"dataset {spec.name}: {path} selects no question ({spec.selection.describe()}).")
    if spec.stream:
        return path, StreamedQuestions(path, tuple(q.question_id for q in selected.questions))
    return path, list(selected.questions)


_LOADED: dict[tuple, list[Question]] = {}  # at most one file: the jobs of a multirun in this process share it
_LOADING = threading.Lock()  # one load at a time: a job waits for a prefetch of its file instead of loading it again
_PARSE = threading.Event()  # open unless a prefetch holds its parse back (`prefetch_dataset(..., hold_parse=True)`)
_PARSE.set()


def release_parse() -> None:
    """Let a prefetch that holds its parse back parse the file now (nothing when none does)."""
    _PARSE.set()


def load_questions_once(path: Path, benchmark: str = "longmemeval",
                        options: Mapping[str, Any] | None = None) -> list[Question]:
    """`load_file(path, benchmark, options)`, kept for this process's later jobs (a multirun's seeds) while the file
    is unchanged."""
    options = dict(options or {})
    key = (*file_identity(path), benchmark, tuple(sorted((str(k), str(v)) for k, v in options.items())))
    release_parse()  # a prefetch holding `_LOADING` may wait for this: never wait here for a parse no one lets go
    with _LOADING:
        return _load_held(path, key, None, benchmark, options)


def _load_held(path: Path, key: tuple, data: bytes | None = None, benchmark: str = "longmemeval",
               options: Mapping[str, Any] | None = None) -> list[Question]:
    """The questions of `path` (identity `key`, its bytes `data` when read already), loaded unless held; the
    caller holds `_LOADING`."""
    if key not in _LOADED:
        _LOADED.clear()  # free the previous file before loading the next
        # Frozen before the collector runs again: its first young collection after the parse (and one
        # before the freeze) would walk every object the parse made (S: ~0.2 s holding the GIL).
        with collection_paused():
            _LOADED[key] = load_file(path, benchmark, options, data=data)
            # kept until exit: never walked again (lme.util.heap); a full collection after S's load takes 0 ms
            # instead of 95 (`python scripts/bench_tricks.py file_freeze`, 2026-12-07)
            freeze_long_lived("file", collect_young=False)
    return _LOADED[key]


def prefetch_dataset(spec: DatasetSpec, hold_parse: bool = False) -> threading.Thread | None:
    """Start loading the dataset file (all held, not streamed) in a background thread, for the jobs this
    process will run: the multirun parent's MLflow set-up (or a single run's imports) runs meanwhile, and
    most of a load (xz decompression) runs beside it on another core. None when nothing is to be loaded
    (streamed, swept, no such file, or this process holds the file already). A load that fails is left to
    the job, which loads the file again and says what is wrong.

    `hold_parse`: the thread reads (and decompresses) the file at once but parses it only after
    `release_parse()`, which the caller calls once its own GIL-bound start-up (litellm's import) is done,
    and which a job asking for the file calls itself. Parsing holds the GIL, and `json.loads` never lets
    it go: beside an import, both ran slower than one after the other (a single run from S's `.json`
    reached its first request at 6.2 s, from `.json.xz`, whose decompression kept the parse after the
    import, at 4.8 s)."""
    if spec.stream or spec.swept:
        return None
    path = spec.path
    # The lock is taken here and handed to the thread, which releases it when the load ends: a job that
    # asks for the file at once waits for this load, whichever thread the scheduler runs first.
    _LOADING.acquire()
    try:
        key = (*file_identity(path), *spec.loading) if path.is_file() else None
    except OSError:
        key = None
    if key is None or key in _LOADED:  # nothing to load, or loaded already
        _LOADING.release()
        return None

    if hold_parse:
        _PARSE.clear()

    def load() -> None:
        try:
            data = read_data(path) if hold_parse else None
            _PARSE.wait()
            _load_held(path, key, data, spec.benchmark, spec.options)
        except Exception:  # noqa: BLE001 - reported by the job's own load
            pass
        finally:
            _LOADING.release()

    thread = threading.Thread(target=load, name="lme-prefetch", daemon=True)
    try:
        thread.start()
    except BaseException:
        _PARSE.set()
        _LOADING.release()
        raise
    return thread


@contextmanager
def loading_in_background(spec: DatasetSpec) -> Iterator[threading.Thread | None]:
    """`prefetch_dataset(spec, hold_parse=True)` around the caller's GIL-bound start-up (litellm's import, in
    the block): the file is read and decompressed beside it and parsed once the block ends, however it ends.
    Yields the loading thread, or None when nothing is to be loaded."""
    thread = prefetch_dataset(spec, hold_parse=True)
    try:
        yield thread
    finally:
        release_parse()


class StreamedQuestions:
    """The selected questions of a large file (LongMemEval-M), parsed one at a time when iterated,
    in file order; `ids` and `len()` need no parsing."""

    def __init__(self, path: Path, ids: tuple[str, ...]) -> None:
        self.path = path
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[Question]:
        from lme.data.stream import iter_questions

        return iter_questions(self.path, self.ids)


def question_ids_of(questions: list[Question] | StreamedQuestions) -> list[str]:
    """The selected ids, without parsing a streamed file."""
    return list(questions.ids) if isinstance(questions, StreamedQuestions) else [q.question_id for q in questions]
