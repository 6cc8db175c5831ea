"""ApiVersions: what this broker serves. Only what is implemented is advertised, with the supported
and finalized feature levels of :mod:`kafkalog.server.features` (the data directory's, as UpdateFeatures
left them). Like Kafka 4.4 without a client telemetry plugin, the telemetry APIs
(GetTelemetrySubscriptions, PushTelemetry) are answered but not advertised."""

from __future__ import annotations

import struct
import weakref
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


#: per broker, per ApiVersions version: what the answer was made of (the served table and the
#: finalized feature levels, each replaced as a whole when it changes), the response entity and its
#: body's bytes. Every connection asks first; making the answer each time took 0.66 ms (v0) to
#: 1.14 ms (v3) a round trip here, most of it building and encoding the entity.
_answers: weakref.WeakKeyDictionary[Broker, dict[int, tuple[Any, Any, int, Any, bytes]]] = weakref.WeakKeyDictionary()

#: the size and the correlation id: an ApiVersions response's header is v0 at every version (KIP-511)
_SIZE_AND_CORRELATION_ID = struct.Struct(">ii")


def handle_api_versions(broker: Broker, request: Request) -> Any:
    """The answer's frame, or its entity while client quotas are set (the throttle time is then
    written into the entity: :mod:`.throttling`)."""
    version = request.api_version
    features = broker.features
    of_broker = _answers.get(broker)
    if of_broker is None:
        _answers[broker] = of_broker = {}
    kept = of_broker.get(version)
    if kept is None or kept[0] is not broker.api_versions or kept[1] is not features.levels \
            or kept[2] != features.epoch:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(broker.api_versions.items())]
        answer = broker.response(request, {"error_code": error_codes.NONE, "api_keys": keys, "throttle_time": 0,
                                           **features.api_versions_fields(version)})
        kept = of_broker[version] = (broker.api_versions, features.levels, features.epoch, answer,
                                     encode_response(request, answer)[_SIZE_AND_CORRELATION_ID.size:])
    if broker.client_quotas.active:
        return kept[3]
    body = kept[4]
    return _SIZE_AND_CORRELATION_ID.pack(4 + len(body), request.correlation_id) + body


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
