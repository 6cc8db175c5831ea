"""Client telemetry (KIP-714) as Kafka 4.4 answers it without a metrics plugin: GetTelemetrySubscriptions
gets a subscription that requests no metrics (so a client never pushes any), PushTelemetry of that
subscription is accepted and dropped. Like Kafka, ApiVersions does not advertise them. While the
metrics endpoint is on, :mod:`.client_metrics` answers instead (a subscription, pushes re-exported)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kafkalog.server import error_codes as ec
from kafkalog.server.requests.protocol import Request

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

ZERO = uuid.UUID(int=0)
#: the one subscription: no metrics requested
SUBSCRIPTION_ID = 0
#: Kafka's answer without a plugin: zstd, lz4, gzip, snappy accepted; re-asked every 5 minutes
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
PUSH_INTERVAL_MS = 300000
TELEMETRY_MAX_BYTES = 1048576
UNKNOWN_SUBSCRIPTION_ID = 117


def handle_get_telemetry_subscriptions(broker: Broker, request: Request) -> Any:
    instance = request.body.client_instance_id
    if broker.client_metrics is not None:
        return broker.response(request, broker.client_metrics.get_subscriptions(instance, request.client_id))
    if instance is None or instance == ZERO:
        instance = uuid.uuid4()
    return broker.response(request, {
        "throttle_time": 0, "error_code": ec.NONE, "client_instance_id": instance,
        "subscription_id": SUBSCRIPTION_ID, "accepted_compression_types": ACCEPTED_COMPRESSION_TYPES,
        "push_interval": PUSH_INTERVAL_MS, "telemetry_max_bytes": TELEMETRY_MAX_BYTES,
        "delta_temporality": True, "requested_metrics": ()})


def handle_push_telemetry(broker: Broker, request: Request) -> Any:
    if broker.client_metrics is not None:
        return _push(broker, request)
    ok = request.body.subscription_id == SUBSCRIPTION_ID
    return broker.response(request, {"throttle_time": 0,
                                     "error_code": ec.NONE if ok else UNKNOWN_SUBSCRIPTION_ID})


async def _push(broker: Broker, request: Request) -> Any:
    """PushTelemetry while the metrics endpoint is on (:meth:`.ClientMetricsManager.push`)."""
    assert broker.client_metrics is not None
    b = request.body
    code = await broker.client_metrics.push(b.client_instance_id, request.client_id, b.subscription_id,
                                            b.terminating, b.compression_type, b.metrics)
    return broker.response(request, {"throttle_time": 0, "error_code": code})
