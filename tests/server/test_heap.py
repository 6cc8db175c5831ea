"""``kafkalog serve``'s collector around the load of its partitions (issue 35, ``server/heap.py``):
off while the load runs (its full collections walked every partition loaded so far: 6.8 of 25.9 s
at 100,000 partitions), what the load made frozen as it ends, and the collector back as it was;
a failed load freezes nothing; the full collections scheduled by the broker, not by CPython's
trigger."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalog.server import heap


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()                   # (nothing else in this process freezes)
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_load_runs_without_the_collector_and_what_it_made_is_frozen() -> None:
    gc.enable()
    before = gc.get_freeze_count()
    with heap.loading():
        assert not gc.isenabled()
        made = [[i] for i in range(20_000)]          # long-lived objects, as a load's
    assert gc.isenabled()
    assert gc.get_freeze_count() - before >= len(made)


def test_a_failed_load_freezes_nothing_and_the_collector_stays_as_it_was() -> None:
    gc.disable()                    # an application that turned it off keeps it off
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), heap.loading():
        _garbage = [[i] for i in range(1_000)]
        raise RuntimeError("the load failed")
    assert gc.get_freeze_count() == before
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(RuntimeError), heap.loading():
        raise RuntimeError("the load failed")
    assert gc.isenabled()


@pytest.fixture
def _threshold_restored() -> Iterator[None]:
    was = gc.get_threshold()
    interval = sys.getswitchinterval()
    yield
    heap._enabled = False
    gc.set_threshold(*was)
    sys.setswitchinterval(interval)


def _generations_collected() -> tuple[list[int], Any]:
    seen: list[int] = []

    def hook(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append(info["generation"])
    gc.callbacks.append(hook)
    return seen, hook


def test_serve_schedules_the_full_collections_itself(_threshold_restored: None) -> None:
    """With CPython's thresholds, keeping objects alive as a Fetch of 100,000 partitions does
    triggers full collections; after :func:`heap.enable` only the young generations are collected
    as objects are made, and :func:`heap.collect_full` makes the full one."""
    gc.enable()
    seen, hook = _generations_collected()
    try:
        alive: list[list[int]] = []
        while 2 not in seen and len(alive) < 5_000_000:   # objects alive at once, until a full one
            alive.extend([i] for i in range(100_000))
        assert 2 in seen, "CPython's own trigger: a full collection while they were made"
        made = len(alive)
        del alive
        heap.enable()
        seen.clear()
        alive = [[i] for i in range(2 * made)]
        assert seen and set(seen) <= {0, 1}           # young collections only
        assert sys.getswitchinterval() == pytest.approx(heap.SWITCH_INTERVAL_S)
        del alive
        heap.collect_full()
        assert seen[-1] == 2
    finally:
        gc.callbacks.remove(hook)


def test_a_scheduled_full_collection_runs_only_when_the_heap_grew(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedule looks every interval and collects once the heap grew by
    :data:`heap.FULL_COLLECTION_GROWTH` since the last collection (a consumer's Fetch of 100,000
    partitions in flight grew it by 3-10%: no full collection walks it once a minute), then goes
    on from the heap that collection left; it runs until cancelled. The heap's size is the test's
    (an xdist worker's own heap moves with the other tests' threads); the collections are real
    and counted."""
    monkeypatch.setattr(heap, "FULL_COLLECTION_SHARE", 0)       # the interval only
    collections: list[float] = []
    real = heap.collect_full
    monkeypatch.setattr(heap, "collect_full", lambda: collections.append(real()) or collections[-1])
    size = [1_000_000]

    async def intervals(n: int) -> None:       # at least n intervals of 0.01 s pass
        for _ in range(n):
            await asyncio.sleep(0.011)

    async def run() -> list[int]:
        task = asyncio.get_running_loop().create_task(heap.full_collections(0.01, lambda: size[0]))
        counts = []
        await intervals(20)
        counts.append(len(collections))             # the heap as it was: none
        size[0] = 1_240_000
        await intervals(20)
        counts.append(len(collections))             # grown by less than a quarter: none
        size[0] = 1_250_000
        deadline = time.monotonic() + 30
        while not collections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        counts.append(len(collections))             # by a quarter: one
        await intervals(20)
        counts.append(len(collections))             # grown no further since: still one
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        return counts
    assert asyncio.run(run()) == [0, 0, 1, 1]


def test_a_heap_grows_by_a_quarter_before_it_is_collected() -> None:
    assert not heap.grown(800, 999) and heap.grown(800, 1000) and not heap.grown(800, 500)


def test_a_long_full_collection_is_followed_by_a_longer_wait() -> None:
    assert heap.next_wait(60.0, 0.05) == 60.0
    assert heap.next_wait(60.0, 2.0) == 2.0 * heap.FULL_COLLECTION_SHARE    # at most 1% of the time


def test_objects_made_as_others_are_freed_are_collected_young_on_the_timer(
        _threshold_restored: None) -> None:
    """An append replaces its partition's published segments with new ones and frees the old,
    frozen ones: CPython's count (made minus freed) stays put, and without the timer every object
    so made waits in the young generations for one walk of them all (at 100,000 partitions: 119 ms
    on the event loop); :func:`heap.young_collections` walks them an interval at a time. Counted:
    the objects in the young generations, and the collections."""
    published = [(i, [i]) for i in range(50_000)]    # a partition's published state each
    heap.enable()                                     # (frozen, as after a load)

    def young() -> int:
        return len(gc.get_objects(0)) + len(gc.get_objects(1))

    def append_to_all() -> None:
        for i in range(len(published)):
            published[i] = (i, [i])                   # made, and the old one freed

    append_to_all()
    assert young() >= len(published), "CPython's trigger left them young"
    seen, hook = _generations_collected()

    async def run() -> int:
        task = asyncio.get_running_loop().create_task(heap.young_collections(0.01))
        most = 0
        for _ in range(5):                            # a slice of the appends an interval
            for i in range(0, len(published), 10_000):
                for j in range(i, i + 10_000):
                    published[j] = (j, [j])
                await asyncio.sleep(0.02)
                most = max(most, young())
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return most
    try:
        most = asyncio.run(run())
    finally:
        gc.callbacks.remove(hook)
    assert young() < 5_000
    assert most < 25_000                              # two objects for each of one slice's appends
    assert 1 in seen and 2 not in seen                # young collections only
