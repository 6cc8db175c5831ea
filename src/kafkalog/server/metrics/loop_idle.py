"""How idle the event loop is: Kafka's ``NetworkProcessorAvgIdlePercent`` (the share of time its
network threads wait in ``select``) for kafkalog's one event loop, which does the network and the
handlers' work. The loop's selector adds up the time it waits in ``select``; a scrape reads the
share since the previous scrape (two clock reads per loop iteration, nothing per connection)."""

from __future__ import annotations

import asyncio
import selectors
from time import perf_counter
from typing import Any

__all__ = ["IdleMeter"]


class _IdleSelector(selectors.DefaultSelector):
    """The platform's default selector, timing its waits."""

    idle = 0.0

    def select(self, timeout: float | None = None) -> Any:
        start = perf_counter()
        try:
            return super().select(timeout)
        finally:
            self.idle += perf_counter() - start


class IdleMeter:
    """Makes the event loop (:meth:`new_loop`, an ``asyncio.Runner`` loop factory) and reads its idle
    share (:meth:`idle_ratio`)."""

    def __init__(self) -> None:
        self._selector: _IdleSelector | None = None
        self._last = (perf_counter(), 0.0)

    def new_loop(self) -> asyncio.AbstractEventLoop:
        self._selector = _IdleSelector()
        self._last = (perf_counter(), 0.0)
        return asyncio.SelectorEventLoop(self._selector)

    def idle_ratio(self) -> float | None:
        """The share of the time since the previous call (or the loop's start) the loop waited for
        I/O, 0 to 1; None without a loop made here."""
        sel = self._selector
        if sel is None:
            return None
        now, idle = perf_counter(), sel.idle
        then, idle_then = self._last
        self._last = (now, idle)
        elapsed = now - then
        return min(max((idle - idle_then) / elapsed, 0.0), 1.0) if elapsed > 0 else 1.0
