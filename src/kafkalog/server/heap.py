"""The collector and the partitions' objects (issue 35): every partition keeps hundreds of
long-lived Python objects (its log, segments, indexes, producer state), and each of CPython's
full collections walks all of them on the event loop: 0.4-0.6 s at 10,000 partitions here, a
pause every client of ``kafkalog serve`` waited through, several seconds at 100,000.
:func:`settle` moves the objects alive at that moment out of the collector's reach
(``gc.freeze``), after the partitions were loaded and after each topic created or grown; the
collections that follow walk only what was made since. A deleted topic's logs, segments and indexes
hold no reference cycle: reference counting frees them, frozen or not. The price: what is frozen and
later becomes garbage inside a reference cycle is never collected, e.g. the objects of a connection
open during a settle and closed afterwards, if they form cycles. Measured on ``kafkalog serve``: 300
rounds of two connections opened, a topic created (a settle) and deleted, the connections closed,
grew the resident memory by 0.2 MiB (0.9 KiB a round).

While ``kafkalog serve`` loads its partitions the collector is off (:func:`loading`): the load
makes hundreds of long-lived objects per partition and no cyclic garbage, so each full collection
it triggered walked everything loaded so far for nothing (16 of them at 100,000 partitions, 6.8 of
the load's 25.9 s here); what the load made is frozen as it ends.

The full collections themselves are the broker's to schedule (:func:`enable` turns CPython's own
trigger off; :func:`full_collections` looks every :data:`FULL_COLLECTION_INTERVAL_S` and collects when
the heap grew by :data:`FULL_COLLECTION_GROWTH` since the last one). CPython's
trigger walked every unfrozen object each time those promoted since the last full collection
reached a quarter of those found then, and a consumer's Fetch of 100,000 partitions keeps ~500,000
objects alive while it is answered (the request's, each partition's wanted offset and read): the
trigger fired several times a second, each walk 50-340 ms on the event loop, collecting nothing
(measured with a ``gc.callbacks`` hook on ``kafkalog serve`` at 100,000 partitions). The young
generations are still collected by CPython as objects are made (cheap: only what was made since);
garbage in a reference cycle that outlived them waits for the next scheduled full collection.
A scheduled collection that finds the heap about as large as the last one left it is skipped: it
would walk every unfrozen object (a consumer's Fetch in flight, the fetch session, what its reads
opened: 60-160 ms at 100,000 partitions, once a minute) to free little. Measured with
``sys.getallocatedblocks`` on ``kafkalog serve`` at 100,000 partitions: 8.1 million blocks after the
load, 8.3-9.0 million while a consumer fetched every partition. Garbage in reference cycles (e.g. a
closed connection's) thus holds at most :data:`FULL_COLLECTION_GROWTH` of the heap before it is
collected, as CPython's own rule bounds it by the objects promoted.

The young generations are also collected on a timer (:func:`young_collections`, every
:data:`YOUNG_COLLECTION_INTERVAL_S`): CPython's trigger counts objects made minus objects freed,
and an append replaces the partition's published segments and end (``LogSegments``, made on every
append) while freeing the ones before, which were old or frozen: the count stays put and the young
generation grows by two objects for each partition appended to, until some other allocation fires
the trigger and one collection walks them all, on whichever thread made that allocation, holding
the interpreter lock. Measured on ``kafkalog serve`` at 100,000 partitions under a producer writing
one record to each (a ``gc.callbacks`` hook): a young collection of 119 ms inside the parse of
librdkafka's Metadata refresh (24 KB, 0.3 ms otherwise), one of 46-114 ms (72,000-83,000 objects,
``LogSegments`` and ``LogOffsetMetadata``) on the retention thread, every other client waiting. On
the timer a walk holds what was made in one interval (a collection of empty young generations:
under a microsecond).

Only ``kafkalog serve`` turns this on (:func:`enable`, :func:`loading`, :func:`full_collections`,
:func:`young_collections`): in a process that embeds the broker (the tests' broker, an application)
the collector is left as the application set it."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: seconds between two of ``kafkalog serve``'s full collections, at least (a collection that took
#: ``t`` seconds is followed by a wait of at least ``FULL_COLLECTION_SHARE * t``)
FULL_COLLECTION_INTERVAL_S = 60.0
#: a full collection's time is at most 1/this of the time between two
FULL_COLLECTION_SHARE = 100
#: a scheduled full collection runs when the heap's blocks (``sys.getallocatedblocks``) grew by this
#: share of what the last one left (CPython's own trigger: objects promoted since reach a quarter)
FULL_COLLECTION_GROWTH = 0.25
#: seconds between two of ``kafkalog serve``'s collections of the young generations
#: (:func:`young_collections`)
YOUNG_COLLECTION_INTERVAL_S = 0.1
#: the oldest generation's threshold (young collections between two full ones) while the full
#: collections are scheduled: never reached
_NEVER = 1 << 30

#: the interpreter's switch interval in ``kafkalog serve`` (Python's is 5 ms). The event loop shares
#: the interpreter lock with the log manager's scheduler thread (retention, offset checkpoints: at
#: 100,000 partitions seconds of Python work after a start); each system call of the loop lets go of
#: the lock and waits for the scheduler's interval to end to take it back, and with 5 ms another
#: client's ApiVersions waited 91-136 ms during the first retention pass (one run with 1 ms: no
#: step over 91 ms in 50 s of it)
SWITCH_INTERVAL_S = 0.001

_enabled = False


def enable() -> None:
    """Settle after loading and after each topic creation from now on, leave the full collections
    to :func:`full_collections`, and shorten the interpreter's switch interval to
    :data:`SWITCH_INTERVAL_S` (``kafkalog serve``)."""
    global _enabled
    _enabled = True
    young, middle, _oldest = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    settle()


def collect_full() -> float:
    """One full collection; returns the seconds it took."""
    t0 = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t0


def grown(left_blocks: int, blocks: int) -> bool:
    """Whether a heap of ``blocks`` blocks grew by :data:`FULL_COLLECTION_GROWTH` since a full
    collection left it holding ``left_blocks``."""
    return blocks >= left_blocks * (1 + FULL_COLLECTION_GROWTH)


async def full_collections(interval_s: float = FULL_COLLECTION_INTERVAL_S,
                           blocks: Callable[[], int] = sys.getallocatedblocks) -> None:
    """Every ``interval_s`` seconds, a full collection if the heap (``blocks``: its size) has
    :func:`grown` since the last one (or since this started), until cancelled; after a long one
    the wait is longer (collections take at most 1/:data:`FULL_COLLECTION_SHARE` of the time)."""
    wait = interval_s
    left = blocks()
    while True:
        await asyncio.sleep(wait)
        wait = interval_s
        if grown(left, blocks()):
            wait = next_wait(interval_s, collect_full())
            left = blocks()


async def young_collections(interval_s: float = YOUNG_COLLECTION_INTERVAL_S) -> None:
    """Every ``interval_s`` seconds, a collection of the young generations (what was made since the
    last one), until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        gc.collect(1)


def next_wait(interval_s: float, took_s: float) -> float:
    """The wait after a full collection that took ``took_s`` seconds."""
    return max(interval_s, FULL_COLLECTION_SHARE * took_s)


def settle() -> None:
    """The objects alive now leave the collector's generations (when enabled). The young
    generations are collected first (cheap: only what was made since their last collection), so
    the young garbage is not kept; a cycle that became garbage in the oldest generation and was not
    collected yet is kept."""
    if _enabled:
        gc.collect(1)
        gc.freeze()


@contextmanager
def loading() -> Iterator[None]:
    """The collector off while ``kafkalog serve`` loads its data directory; what the load made is
    frozen when it succeeds (not walked: it made no cyclic garbage), and the collector is turned
    back on as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    ok = False
    try:
        yield
        ok = True
    finally:
        if ok:
            gc.freeze()
        if was_enabled:
            gc.enable()
