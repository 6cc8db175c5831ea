"""ApiVersions: what this broker serves. Only what is implemented is advertised, with the supported
and finalized feature levels of :mod:`kafkalog.server.features` (the data directory's, as UpdateFeatures
left them). Like Kafka 4.4 without a client telemetry plugin, the telemetry APIs
(GetTelemetrySubscriptions, PushTelemetry) are answered but not advertised."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import (
    ApiVersionsResponse as ApiVersionsResponseV0,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from kafkalog.server import error_codes
from kafkalog.server.requests.protocol import Request, encode_response

#: API key -> the min version ApiVersions advertises where it is below the served one. Kafka 4
#: advertises Produce from v0 though it serves v3+ (``ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION``,
#: KAFKA-18659): older librdkafka (Debian's 2.0.2, so kcat 1.7.1) derives its codec features from
#: Produce v0 being offered, and without it writes gzip, snappy and lz4 batches uncompressed. A
#: v0-v2 request is still refused as any unsupported version is: the connection is closed, as
#: Kafka 4.4 closes it. Applied in :data:`kafkalog.server.handlers.kafka_apis.ADVERTISED`.
ADVERTISED_MIN_VERSION: dict[int, int] = {0: 0}

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker


def handle_api_versions(broker: Broker, request: Request) -> Any:
    keys = [{"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(broker.api_versions.items())]
    return broker.response(request, {"error_code": error_codes.NONE, "api_keys": keys, "throttle_time": 0,
                                     **broker.features.api_versions_fields(request.api_version)})


def unsupported_version_response(request: Request,
                                 versions: Mapping[int, tuple[int, int]]) -> bytes:
    """KIP-511: an ApiVersions request of a version the broker does not know gets a v0 body with
    UNSUPPORTED_VERSION and the ApiVersions range of ``versions`` (the served table), so the
    client can retry with one it shares."""
    lo, hi = versions[request.api_key]
    body = ApiVersionsResponseV0(error_code=ErrorCode.unsupported_version,
                                 api_keys=(ApiVersionV0(api_key=i16(request.api_key),
                                                        min_version=i16(lo), max_version=i16(hi)),))
    return encode_response(request, body)
