"""Kafka's ``queued.max.requests`` in kafkalog's one event loop.

In Kafka a network thread reads a request and puts it on the request channel's queue for the
request handler threads; when ``queued.max.requests`` requests wait there, the network threads
block and read nothing more. In kafkalog a plaintext connection's readable callback answers what it
can at once and hands the rest to the connection's task (a request whose handler waits, or whose
response the socket did not take whole): :class:`RequestQueue` counts the requests handed over and
not yet taken by their task, and at ``queued.max.requests`` no connection reads from its socket
until a task takes one. A task takes what it was handed as soon as the loop runs it, so the bound
is reached only when the loop is saturated; it never waits on a client (a request a task is
sending, or a parked Fetch, is no longer queued), so a client that does not read cannot hold it.
"""

from __future__ import annotations

from collections.abc import Callable


class RequestQueue:
    """The count of requests handed to connection tasks and not yet taken, and the connections
    waiting to read until it is below ``capacity``."""

    __slots__ = ("_parked", "capacity", "size")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self._parked: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    def put(self) -> None:
        self.size += 1

    def take(self) -> None:
        self.size -= 1
        if self._parked and self.size < self.capacity:
            parked, self._parked = self._parked, []
            for resume in parked:
                resume()

    def park(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once the queue is below its capacity again."""
        self._parked.append(resume)
