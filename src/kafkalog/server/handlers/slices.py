"""Work over many partitions in slices (issue 35): a request naming thousands of partitions (a
producer's Produce to every partition, a consumer's Fetch of all it is assigned) is done
:data:`PARTITIONS_PER_SLICE` partitions at a time, and the event loop serves the other connections
between two slices, so no other client waits for the whole of it. A request of at most one slice is
done at once, with no coroutine (the readable callback answers it, as before).

A handler writes its loop as a generator that yields after each slice (:func:`every_slice` counts),
then runs it with :func:`run_now` when it is small or awaits :func:`run_in_slices`."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator

#: partitions a request's handler reads or appends to before it lets the event loop serve others
#: (an append or a read of one partition takes 20-200 us here, more on a loaded machine: a slice
#: holds the loop for a few milliseconds; 256 held it 100 ms under a load of 10 on 2 cores)
PARTITIONS_PER_SLICE = 64


class SliceCounter:
    """Counts partitions done; :meth:`tick` is True when a slice is full (the caller yields)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = 0

    def tick(self) -> bool:
        self.done += 1
        return self.done % PARTITIONS_PER_SLICE == 0


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
