"""A request's quotas, once its handler has answered (Kafka's ``KafkaApis`` around
``ClientQuotaManager.maybeRecordAndGetThrottleTimeMs``): its bytes and handling time counted
(:mod:`.quotas`), and when a quota is exceeded the answer carries ``throttle_time_ms`` and the
connection is muted for that long. Called by :meth:`KafkaApis.dispatch` only while a quota is set."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.handlers.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from kafkalog.server.quota.quotas import now_ms, user_of, with_throttle
from kafkalog.server.requests.protocol import Request
from kafkalog.server.requests.request_context import current_connection
from kafkalog.server.requests.wire import EMPTY_TAGS
from kafkalog.server.security.authorizer import current_session

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

PRODUCE, FETCH, METADATA = 0, 1, 3
#: CreateTopics, DeleteTopics: the controller mutations Kafka 4.4 counts, and from which version a client
#: over its quota is refused (THROTTLING_QUOTA_EXCEEDED, no message) rather than only throttled
#: (CreatePartitions is not counted: Kafka 4.4 grows a topic over the quota, tests/server/test_client_quotas.py)
MUTATIONS = {19: 6, 20: 5}
_I32 = struct.Struct(">i")
#: (throttle, error, session id) of a Fetch response, v7+
_FETCH_HEAD = struct.Struct(">ihi")


def _fetch_size(parts: list[Any]) -> int:
    return sum(p.size if isinstance(p, FileSlice) else len(p) for p in parts)


def _empty_fetch(request: Request, parts: list[Any], ms: int) -> bytes:
    """Kafka's ``getThrottledResponse``: no partitions, the session's id (none for a new session)."""
    first = parts[0]
    flex = request.api_version >= 12
    head = 8 + (1 if flex else 0)           # size, correlation id, header tags
    session_id = 0
    if request.api_version >= 7:
        _t, _e, session_id = _FETCH_HEAD.unpack_from(first, head)
        if request.body.session_id == 0:
            session_id = 0
    for p in parts:
        if isinstance(p, FileSlice):
            os.close(p.fd)
    body = first[4:head] + (_FETCH_HEAD.pack(ms, 0, session_id) if request.api_version >= 7 else _I32.pack(ms))
    body += (b"\x01" + EMPTY_TAGS) if flex else _I32.pack(0)
    return _I32.pack(len(body)) + body


def _with_throttle(request: Request, result: Any, ms: int) -> Any:
    if result is None:
        return None
    if type(result) is bytes:
        if request.api_key == METADATA and request.api_version >= 3:
            # written by hand (server/requests/metadata_wire.py): size, correlation id, the header's
            # tags (flexible, v9+), then throttle_time_ms
            at = 8 + (1 if request.api_version >= 9 else 0)
            return result[:at] + _I32.pack(ms) + result[at + 4:]
        if request.api_key != PRODUCE:
            return result
        end = len(result) - (1 if request.api_version >= 9 else 0)
        return result[:end - 4] + _I32.pack(ms) + result[end:]
    if type(result) is list:
        first = result[0]
        at = 8 + (1 if request.api_version >= 12 else 0)
        result[0] = first[:at] + _I32.pack(ms) + first[at + 4:]
        return result
    return with_throttle(result, ms)


def _who(request: Request) -> tuple[str, str]:
    session = current_session.get()
    return user_of(session.principal if session is not None else None), request.client_id or ""


def fetch_window_bytes(broker: Broker, request: Request) -> int:
    """Kafka's ``getMaxValueInQuotaWindow``: the most a Fetch may answer under the consumer's quota
    (quota x (quota.window.num - 1) x quota.window.size.seconds)."""
    quotas = broker.client_quotas
    q = quotas.quota(CONSUMER_BYTE_RATE, *_who(request))
    if q is None:
        return 2**31 - 1
    return int(min(q[0] * (quotas.samples - 1) * quotas.window_ms / 1000, 2**31 - 1))


def _always(partitions: int) -> bool:
    return True


def mutation_quota(broker: Broker, request: Request) -> Callable[[int], bool]:
    """Kafka's ``ControllerMutationQuota`` of a CreateTopics or DeleteTopics request:
    ``permit(partitions)`` counts a topic's partitions created or deleted in the client's token bucket; from
    the strict versions on it is False (the topic refused, THROTTLING_QUOTA_EXCEEDED) while the bucket is
    below 0."""
    quotas = broker.client_quotas
    if not quotas.active:
        return _always
    bucket = quotas.bucket(CONTROLLER_MUTATION_RATE, *_who(request), now_ms())
    if bucket is None:
        return _always
    strict = request.api_version >= MUTATIONS[request.api_key]

    def permit(partitions: int) -> bool:
        now = now_ms()
        if strict and bucket.exceeded(now):
            return False
        bucket.record(partitions, now)
        return True
    return permit


def throttle(broker: Broker, request: Request, result: Any, handling_s: float) -> Any:
    """``result`` (a handler's: kio entity, frame bytes or parts) with the throttle time its request
    earned; the connection muted for it."""
    quotas = broker.client_quotas
    now = now_ms()
    quotas.prune(now)
    user, client = _who(request)
    request_ms, _r = quotas.record(REQUEST_PERCENTAGE, user, client, handling_s * 100.0, now,
                                   cap_ms=quotas.window_ms)
    bandwidth_ms = 0
    if request.api_key == PRODUCE:
        bandwidth_ms, _r = quotas.record(PRODUCER_BYTE_RATE, user, client, request.size, now)
    elif request.api_key == FETCH and type(result) is list:
        size = _fetch_size(result)
        bandwidth_ms, rate = quotas.record(CONSUMER_BYTE_RATE, user, client, size, now)
        if max(bandwidth_ms, request_ms) > 0:
            if rate is not None:
                rate.unrecord(size)         # the answer is empty: its bytes are not sent
            result = _empty_fetch(request, result, max(bandwidth_ms, request_ms))
            quotas.mute(current_connection.get(), max(bandwidth_ms, request_ms))
            return result
    mutation_ms = 0
    if request.api_key in MUTATIONS:
        bucket = quotas.bucket(CONTROLLER_MUTATION_RATE, user, client, now, create=False)
        if bucket is not None:
            mutation_ms = bucket.throttle_ms(now)
    ms = max(bandwidth_ms, request_ms)
    if ms <= 0 and mutation_ms <= 0:
        return result
    # the controller's throttle is answered, not enforced by muting: Kafka's broker sends a forwarded
    # answer without throttling the client's channel (the client backs off itself, KIP-219)
    quotas.mute(current_connection.get(), ms)
    return _with_throttle(request, result, max(ms, mutation_ms))
