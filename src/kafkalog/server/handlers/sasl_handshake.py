"""SaslHandshake and SaslAuthenticate on a connection that needs no more of them (authenticated
already, or on a listener without SASL): ILLEGAL_SASL_STATE, as Kafka answers them. The handshake
itself runs before any handler, in :class:`kafkalog.server.security.sasl.SaslAuthenticator`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.sasl import ILLEGAL_SASL_STATE

if TYPE_CHECKING:      # the state the handlers share
    from kafkalog.server.broker import Broker


def handle_sasl_handshake(broker: Broker, request: Request) -> Any:
    """SaslHandshake on an authenticated connection or a listener without SASL."""
    return broker.response(request, {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []})


def handle_sasl_authenticate(broker: Broker, request: Request) -> Any:
    return broker.response(request, {
        "error_code": ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0,
        "error_message": "SaslAuthenticate request received after successful authentication"})
