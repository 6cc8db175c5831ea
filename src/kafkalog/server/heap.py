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

Only ``kafkalog serve`` turns this on (:func:`enable`, :func:`loading`): in a process that embeds
the broker (the tests' broker, an application) the collector is left as the application set it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_enabled = False


def enable() -> None:
    """Settle after loading and after each topic creation from now on (``kafkalog serve``)."""
    global _enabled
    _enabled = True
    settle()


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
