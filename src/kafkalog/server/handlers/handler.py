"""What a handler of an API is: ``handler(broker, request) -> Response`` (or a coroutine of one,
when it waits), and the response the network layer sends. The handlers (one module per API group)
and their table (:mod:`kafkalog.server.handlers.kafka_apis`) build on this; the
:class:`~kafkalog.server.broker.Broker` they are handed is the state they share, which knows
nothing of them: :class:`~kafkalog.server.handlers.kafka_apis.KafkaApis` dispatches to them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.requests.protocol import Request

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

__all__ = ["Handler", "Response"]

#: A response as the network layer sends it: one frame, or frame parts where a ``FileSlice`` is sent
#: from its segment file; None sends nothing (Produce with acks=0).
Response = bytes | list[bytes | FileSlice] | None
#: One API's handler: the broker (the state every handler shares) and the parsed request in, the
#: response (or a coroutine of it) out.
Handler = Callable[["Broker", Request], Response | Awaitable[Response]]
