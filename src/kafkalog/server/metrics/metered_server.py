"""The network layer with its request timers and connection counts: a
:class:`~kafkalog.server.network.socket_server.Server` that times each request (Kafka's RequestMetrics: queue,
local, remote, send and total times) and counts connections per listener (Kafka's
``socket-server-metrics`` ``connection-count``). ``kafkalog serve`` runs it when metrics are on;
the plain ``Server`` runs otherwise, so metrics off cost nothing.

A request answered in its connection's readable callback is timed there (its response goes out in
the same callback: no queue, no send time). One left to the connection's task has a queue time
(from its dispatch to the task taking it: kafkalog's request queue, ``queued.max.requests``), a
remote time (while its handler waits) and a send time (its response going out)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine
from contextvars import ContextVar
from time import perf_counter
from typing import Any

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.config import Listener
from kafkalog.server.handlers.handler import Response
from kafkalog.server.metrics.broker_metrics import BrokerMetrics
from kafkalog.server.network.channel import Channel
from kafkalog.server.network.socket_server import Server

__all__ = ["MeteredServer"]

_HEADER = struct.Struct(">hh")
#: the task path's request awaiting its response's send: (api key, version, queue, local, remote)
_unsent: ContextVar[tuple[int, int, float, float, float] | None] = ContextVar("kafkalog_metrics_unsent",
                                                                               default=None)


class MeteredServer(Server):
    """:class:`Server` with :class:`BrokerMetrics`' request timers and per-listener connection counts."""

    def __init__(self, broker: Any, *args: Any, metrics: BrokerMetrics, **kwargs: Any) -> None:
        super().__init__(broker, *args, **kwargs)
        self.metrics = metrics
        #: open connections by listener name
        self.connections: dict[str, int] = {}

    async def _serve(self, conn: Any, addr: object, listener: Listener) -> None:
        counts = self.connections
        counts[listener.name] = counts.get(listener.name, 0) + 1
        try:
            await super()._serve(conn, addr, listener)
        finally:
            counts[listener.name] -= 1

    def dispatch(self, frame: bytes) -> Response | Coroutine[Any, Any, Response]:
        """The readable callback's dispatch: an immediate answer is timed here, a waiting one when it
        finishes (in the connection's task)."""
        start = perf_counter()
        result = Server.dispatch(self, frame)
        local = perf_counter() - start
        key, version = _HEADER.unpack_from(frame, 0)
        if asyncio.iscoroutine(result):
            return self._finish(key, version, local, perf_counter(), result)
        self.metrics.request_done(key, version, 0.0, local, 0.0, 0.0)
        return result

    async def _finish(self, key: int, version: int, local: float, queued: float,
                      pending: Coroutine[Any, Any, Response]) -> Response:
        begun = perf_counter()
        response = await pending
        done = perf_counter()
        self._answered(key, version, begun - queued, local, done - begun, response)
        return response

    async def _process(self, frame: bytes) -> Response:
        """The connection task's dispatch (a large frame parsed on the parsing thread: its local
        time includes the parse, as Kafka's includes the handler thread's)."""
        start = perf_counter()
        result = await self._dispatched(frame)
        local = perf_counter() - start
        key, version = _HEADER.unpack_from(frame, 0)
        remote = 0.0
        if asyncio.iscoroutine(result):
            begun = perf_counter()
            result = await result
            remote = perf_counter() - begun
        self._answered(key, version, 0.0, local, remote, result)
        return result

    def _answered(self, key: int, version: int, queue: float, local: float, remote: float,
                  response: Response) -> None:
        if response is None:
            self.metrics.request_done(key, version, queue, local, remote, 0.0)
        else:       # timed once sent (_send)
            _unsent.set((key, version, queue, local, remote))

    async def _send(self, channel: Channel, response: bytes | list[bytes | FileSlice]) -> None:
        unsent = _unsent.get()
        if unsent is None:
            await Server._send(self, channel, response)
            return
        _unsent.set(None)
        start = perf_counter()
        try:
            await Server._send(self, channel, response)
        finally:
            key, version, queue, local, remote = unsent
            self.metrics.request_done(key, version, queue, local, remote, perf_counter() - start)
