"""What a handler of an API is: ``handler(broker, request) -> Response`` (or a coroutine of one,
when it waits), the response the network layer sends, and the topics the broker keeps for itself.
The handlers (one module per API group) and their table (:mod:`kafkalog.server.apis`) build on
this; the :class:`~kafkalog.server.broker.Broker` they are handed is the one state owner, which
dispatches to them, so no handler imports it at run time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
from kafkalog.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from kafkalog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.protocol import Request

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

__all__ = ["Handler", "INTERNAL_TOPICS", "Response", "current_connection"]

#: A response as the network layer sends it: one frame, or frame parts where a ``FileSlice`` is sent
#: from its segment file; None sends nothing (Produce with acks=0).
Response = bytes | list[bytes | FileSlice] | None
#: One API's handler: the broker (the state every handler shares) and the parsed request in, the
#: response (or a coroutine of it) out.
Handler = Callable[["Broker", Request], Response | Awaitable[Response]]

#: Kafka's internal topics: never auto-created by a client's request, flagged in Metadata.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})

#: A token for the connection being served (set by the network layer beside the listener): share sessions
#: remember the connection that opened them, and its close releases their records, as Kafka's
#: ``ShareSessionCache`` does on a disconnect.
current_connection: ContextVar[object | None] = ContextVar("kafkalog_current_connection", default=None)
