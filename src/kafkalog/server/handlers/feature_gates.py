"""The APIs a feature level enables: below it Kafka 4.4 answers UNSUPPORTED_VERSION, though ApiVersions
still lists the API (``KafkaApis.isConsumerGroupProtocolEnabled``: ``group.version`` 1,
``isShareGroupProtocolEnabled``: ``share.version`` 1, ``isStreamsGroupProtocolEnabled``:
``streams.version`` 1). The level is read at each request, so UpdateFeatures takes effect at once.
The consumer and streams group APIs also need their protocol in ``group.coordinator.rebalance.protocols``
(Kafka 4.4 answers the same refusal without it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalog.server.error_codes import UNSUPPORTED_VERSION
from kafkalog.server.handlers.handler import Handler
from kafkalog.server.requests.protocol import Request

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

#: API key -> the feature and the level that enable it
GATED: Mapping[int, tuple[str, int]] = {
    **dict.fromkeys((68, 69), ("group.version", 1)),            # the consumer group protocol (KIP-848)
    **dict.fromkeys((76, 77, 78, 79, 90, 91, 92), ("share.version", 1)),      # share groups (KIP-932)
    **dict.fromkeys((88, 89), ("streams.version", 1)),          # streams groups (KIP-1071)
}

#: API key -> the ``group.coordinator.rebalance.protocols`` value it also needs
PROTOCOL: Mapping[int, str] = {**dict.fromkeys((68, 69), "consumer"), **dict.fromkeys((88, 89), "streams")}

#: Kafka's "no authorized operations asked" (``Integer.MIN_VALUE``)
_NO_OPERATIONS = -(1 << 31)
_REFUSED: dict[str, Any] = {"error_code": UNSUPPORTED_VERSION, "error_message": None}
_NO_MEMBER: dict[str, Any] = {**_REFUSED, "member_id": None, "member_epoch": 0, "heartbeat_interval": 0,
                              "assignment": None}
_NO_STREAMS_MEMBER: dict[str, Any] = {
    **_NO_MEMBER, "member_id": "", "acceptable_recovery_lag": 0, "task_offset_interval": 0, "status": [],
    "active_tasks": None, "standby_tasks": None, "warmup_tasks": None, "endpoint_information_epoch": 0,
    "partitions_by_user_endpoint": None}
_NO_SHARE_RECORDS: dict[str, Any] = {**_REFUSED, "acquisition_lock_timeout": 0, "responses": [],
                                     "node_endpoints": []}
_OFFSETS_REFUSED: dict[str, Any] = {**_REFUSED, "error_message": "The version of API is not supported.",
                                    "responses": []}


def _groups(request: Request) -> dict[str, Any]:
    return {"groups": [{**_REFUSED, "group_id": g, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                        "assignor_name": "", "topology": None, "members": [],
                        "authorized_operations": _NO_OPERATIONS} for g in request.body.group_ids]}


#: API key -> Kafka's refusal (``getErrorResponse`` of the request): the error at the top, or in each
#: group the request names; every other field empty (a field a version lacks is left out)
_REFUSALS: Mapping[int, Callable[[Request], dict[str, Any]]] = {
    68: lambda r: _NO_MEMBER,
    69: _groups,
    76: lambda r: _NO_MEMBER,
    77: _groups,
    78: lambda r: _NO_SHARE_RECORDS,
    79: lambda r: _NO_SHARE_RECORDS,
    88: lambda r: _NO_STREAMS_MEMBER,
    89: _groups,
    90: lambda r: {"groups": [{**_REFUSED, "group_id": g.group_id, "topics": []} for g in r.body.groups]},
    91: lambda r: _OFFSETS_REFUSED,
    92: lambda r: _OFFSETS_REFUSED,
}


def gated(api_key: int, handler: Handler) -> Handler:
    """``handler`` behind its feature's level, or ``handler`` itself for an API no feature gates."""
    gate = GATED.get(api_key)
    if gate is None:
        return handler
    feature, level = gate
    refusal = _REFUSALS[api_key]
    protocol = PROTOCOL.get(api_key)

    def serve(broker: Broker, request: Request) -> Any:
        if broker.features.level(feature) >= level and (protocol is None
                                                        or protocol in broker.config.rebalance_protocols):
            return handler(broker, request)
        return broker.response(request, {"throttle_time": 0, **refusal(request)})
    return serve
