"""What a request carries besides its bytes (Kafka's ``RequestContext``): the connection it came on.

The network layer sets :data:`current_connection` beside the listener while it serves a connection's
requests; share sessions remember the connection that opened them (its close releases their records,
as Kafka's ``ShareSessionCache`` does on a disconnect) and throttling mutes it.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_connection"]

#: A token for the connection being served (None outside a connection's requests).
current_connection: ContextVar[object | None] = ContextVar("kafkalog_current_connection", default=None)
