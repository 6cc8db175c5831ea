"""Work over many partitions in slices (issue 35): a request naming thousands of partitions (a
producer's Produce to every partition, a consumer's Fetch of all it is assigned) is done
:data:`PARTITIONS_PER_SLICE` partitions at a time, and the event loop serves the other connections
between two slices, so no other client waits for the whole of it. A request of at most one slice is
done at once, with no coroutine (the readable callback answers it, as before).

A handler writes its loop as a generator that yields after each slice (:func:`every_slice` counts),
then runs it with :func:`run_now` when it is small or awaits :func:`run_in_slices`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

#: partitions a request's handler reads or appends to before it lets the event loop serve others
#: (an append or a read of one partition takes 20-200 us here, more on a loaded machine: a slice
#: holds the loop for a few milliseconds; 256 held it 100 ms under a load of 10 on 2 cores)
PARTITIONS_PER_SLICE = 64

#: partitions per slice of the cheap per-partition steps around the reads and appends: a request's
#: partition list built, its response encoded (a few microseconds each: at 100,000 partitions the
#: whole of a Fetch answer's encoding held the event loop 118 ms on a quiet machine)
ENTRIES_PER_SLICE = 1024

#: seconds a slice may hold the event loop before it ends early, whatever its count: partitions read
#: for the first time open their segments' files and indexes (64 of them held the loop 105-124 ms
#: under a consumer's load at 100,000 partitions)
SLICE_SECONDS = 0.005


class SliceCounter:
    """Counts partitions done; :meth:`tick` is True when a slice is full (the caller yields):
    ``per_slice`` partitions (by default :data:`PARTITIONS_PER_SLICE`), or fewer that took
    :data:`SLICE_SECONDS`. A slice's clock starts at its first partition's tick, so the time the
    loop spent elsewhere between two slices is not counted. ``clock`` is read once a tick."""

    __slots__ = ("clock", "done", "per_slice", "started")

    def __init__(self, per_slice: int = PARTITIONS_PER_SLICE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.done = 0
        self.per_slice = per_slice
        self.started = 0.0

    def tick(self) -> bool:
        now = self.clock()
        if self.done == 0:
            self.started = now
        self.done += 1
        if self.done >= self.per_slice or now - self.started >= SLICE_SECONDS:
            self.done = 0
            return True
        return False


def run_now(steps: Iterator[None]) -> None:
    """Run a handler's sliced loop to its end without letting go of the event loop."""
    for _ in steps:
        pass


async def run_in_slices(steps: Iterator[None]) -> None:
    """Run a handler's sliced loop, letting the event loop serve other connections between two
    slices. If the awaiting coroutine is closed (its connection ended) the loop is closed too, so
    its own ``finally``/``except`` blocks release what it holds."""
    try:
        for _ in steps:
            await asyncio.sleep(0)
    finally:
        if isinstance(steps, Generator):     # a handler's sliced loop is a generator
            steps.close()


async def release_in_slices(items: list[Any]) -> None:
    """Empty ``items`` :data:`ENTRIES_PER_SLICE` at a time, the event loop serving other
    connections between two: a request's per-partition objects freed at once (a Fetch of 100,000
    partitions: its partition list, what each read found and the records read) held the loop
    25-37 ms after the answer was made."""
    while len(items) > ENTRIES_PER_SLICE:
        del items[-ENTRIES_PER_SLICE:]
        await asyncio.sleep(0)
    items.clear()
