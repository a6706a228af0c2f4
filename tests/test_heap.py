"""lme.util.heap: the garbage collector paused while a file parses, long-lived data frozen once."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lme.util import heap
from lme.data.dataset import _LOADED, load_questions_once


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as a test found it, and nothing frozen by the test left frozen."""
    enabled = gc.isenabled()
    frozen = set(heap._frozen)
    heap._frozen.clear()  # an earlier test of this process may have frozen for the same reason
    yield
    gc.unfreeze()
    heap._frozen.clear()
    heap._frozen.update(frozen)
    (gc.enable if enabled else gc.disable)()


@contextmanager
def collections_seen() -> Iterator[list[int]]:
    """The generations of the collections that start inside the block (`gc.callbacks`)."""
    generations: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        yield generations
    finally:
        gc.callbacks.remove(seen)


def test_collection_is_paused_inside_and_restored_after(collector: None) -> None:
    gc.enable()
    with heap.collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # a collector someone else disabled stays disabled
    with heap.collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_in_two_threads_restore_the_collector_only_when_both_end(collector: None) -> None:
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with heap.collection_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with heap.collection_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled(), "the other thread is still parsing"
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_pause_ends_when_the_block_raises(collector: None) -> None:
    gc.enable()
    with pytest.raises(ValueError), heap.collection_paused():
        raise ValueError("bad record")
    assert gc.isenabled()


def test_freezing_happens_once_per_reason(collector: None) -> None:
    gc.unfreeze()
    keep = [[index] for index in range(1000)]  # containers the collector tracks
    assert heap.freeze_long_lived("test data") is True
    frozen = gc.get_freeze_count()
    assert frozen >= len(keep)
    more = [[index] for index in range(1000)]
    assert heap.freeze_long_lived("test data") is False
    # (frozen objects that die leave the count: compare with what a second freeze would have added)
    assert gc.get_freeze_count() < frozen + len(more), "a second call for the same reason froze again"
    assert heap.freeze_long_lived("other data") is True
    assert gc.get_freeze_count() >= frozen + len(more) - 100


def test_a_loaded_file_is_frozen_and_no_collection_walks_it(collector: None, tmp_path: Path) -> None:
    from tests.data.test_load import _record

    gc.unfreeze()
    path = tmp_path / "questions.json"
    path.write_text(json.dumps([_record("q001"), _record("q002")]), encoding="utf-8")
    _LOADED.clear()
    try:
        questions = load_questions_once(path)
        assert gc.get_freeze_count() > 0
        tracked = {id(obj) for generation in range(3) for obj in gc.get_objects(generation)}
        assert id(questions) not in tracked and id(questions[0].sessions) not in tracked
    finally:
        _LOADED.clear()


def test_young_garbage_is_collected_not_frozen(collector: None) -> None:
    import weakref

    class Node:
        pass

    gc.unfreeze()
    gc.collect()
    cycle = Node()
    cycle.self = cycle  # garbage only the collector can free
    alive = weakref.ref(cycle)
    del cycle
    assert alive() is not None
    heap.freeze_long_lived("garbage test")
    assert alive() is None, "a cycle that was already garbage was frozen for good"


def test_a_freeze_without_the_young_collection_walks_nothing(collector: None) -> None:
    """`collect_young=False` (right after a parse, when the young generations hold all it made): no
    collection runs, so even young cyclic garbage is frozen with the rest rather than walked."""
    import weakref

    class Node:
        pass

    gc.unfreeze()
    gc.collect()
    cycle = Node()
    cycle.self = cycle
    alive = weakref.ref(cycle)
    del cycle
    with collections_seen() as collections:
        assert heap.freeze_long_lived("no walk", collect_young=False) is True
    assert collections == []
    assert alive() is not None, "the young generations were collected after all"


def test_loading_a_file_runs_no_collection(collector: None, tmp_path: Path) -> None:
    """The parse runs with the collector paused and the freeze after it does not walk what the parse made
    (S: millions of objects, walked twice, ~0.2 s holding the GIL on the way to the first request)."""
    from tests.data.test_load import _record

    gc.unfreeze()
    gc.enable()
    path = tmp_path / "questions.json"
    path.write_text(json.dumps([_record(f"q{index:03d}") for index in range(200)]), encoding="utf-8")
    _LOADED.clear()
    try:
        with collections_seen() as collections:
            questions = load_questions_once(path)
    finally:
        _LOADED.clear()
    assert len(questions) == 200 and gc.get_freeze_count() > 0
    assert collections == [], f"collections of generations {collections} while loading"
