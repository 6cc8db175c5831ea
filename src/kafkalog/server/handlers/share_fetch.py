"""ShareFetch and ShareAcknowledge (KIP-932) with share sessions, over ``broker.share_partitions``
(:class:`kafkalog.coordinator.share_partition_manager.SharePartitionManager`).

A share session (Kafka's ``ShareSessionCache``) is keyed by group and member: epoch 0 opens one
(replacing an old one; acknowledgements are refused then), the next requests carry the epoch it
answered plus one (INVALID_SHARE_SESSION_EPOCH otherwise, SHARE_SESSION_NOT_FOUND without a
session) and add or forget partitions, -1 acknowledges what it carries and closes it, releasing
the member's acquired records. A fetch acquires records of the session's partitions in turn (one
``max_records`` budget for the request), long-polling up to ``max_wait`` for new records or
released ones; acknowledgements ride on a fetch or come alone in ShareAcknowledge, each
partition's answer its own error (INVALID_RECORD_STATE for records the member does not hold).
ShareFetch v2 ``is_renew_ack`` only renews locks (no fetch: ``max_*`` and ``min_bytes`` must be 0).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.share_partition import InvalidAcknowledgementError, InvalidRecordStateError
from kafkalog.errors import KafkalogError, KafkalogIOError
from kafkalog.log.naming import TopicPartition
from kafkalog.server import error_codes as ec
from kafkalog.server.handlers.modern_groups import ms
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import GROUP, READ, TOPIC
from kafkalog.server.share_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSession,
    ShareSessionError,
)

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")


def _lock_timeout(broker: Broker, group: str) -> int:
    return int(broker.group_configs.effective(group)["share.record.lock.duration.ms"])


def _leader(broker: Broker) -> dict[str, int]:
    return {"leader_id": broker.node_id, "leader_epoch": 0}


AckResults = dict[tuple[uuid.UUID, int], tuple[int, str | None]]


def _valid_batches(batches: list[tuple[int, int, list[int]]], renew_supported: bool, renew: bool) -> bool:
    """Kafka's ``validateAcknowledgementBatches``: ordered, non-overlapping batches, one type or one per
    offset, known types, Renew (4) only from v2 in a renewing request."""
    prev_end = -1
    for first, last, types in batches:
        if first > last or first < prev_end or not types:
            return False
        if len(types) > 1 and last - first != len(types) - 1:
            return False
        if any(x < 0 or x > (4 if renew_supported else 3) for x in types) or (4 in types and not renew):
            return False
        prev_end = last
    return True


def _acknowledge(broker: Broker, group: str, member: str, topics: Any, renew_supported: bool = False,
                 renew: bool = False) -> AckResults:
    """Apply the acknowledgements of ``topics``; each partition's (error, message)."""
    out: dict[tuple[uuid.UUID, int], tuple[int, str | None]] = {}
    manager = broker.share_partitions
    for t in topics:
        name = broker.topic_ids.name_of(t.topic_id)
        if name is not None and not _may_read(broker, name):       # Kafka: READ on each topic
            out.update({(t.topic_id, p.partition_index): (ec.TOPIC_AUTHORIZATION_FAILED, None)
                        for p in t.partitions if p.acknowledgement_batches})
            continue
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            batches = [(int(b.first_offset), int(b.last_offset), [int(x) for x in b.acknowledge_types])
                       for b in p.acknowledgement_batches]
            if not batches:
                continue
            if not _valid_batches(batches, renew_supported, renew):
                out[key] = (ec.INVALID_REQUEST, None)
                continue
            if name is None or broker.log(name, p.partition_index) is None:
                out[key] = (ec.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            try:
                manager.acknowledge(group, member, name, p.partition_index, batches)
                out[key] = (ec.NONE, None)
            except InvalidRecordStateError as e:
                out[key] = (ec.INVALID_RECORD_STATE, e.message)
            except InvalidAcknowledgementError as e:
                out[key] = (ec.INVALID_REQUEST, e.message)
            except KafkalogIOError as e:
                broker.log_dir_failed(TopicPartition(name, p.partition_index), e)
                out[key] = (ec.KAFKA_STORAGE_ERROR, str(e))
            except KafkalogError as e:
                out[key] = (ec.UNKNOWN_SERVER_ERROR, e.message)
    broker.notify_share(group)
    return out


def _may_read(broker: Broker, topic: str) -> bool:
    return broker.authorizer is None or broker.authorize(READ, TOPIC, topic)


def connection_closed(broker: Broker, connection: object) -> None:
    """A client's connection closed: the share sessions it opened end and their members' acquired
    records are released (Kafka's ``ShareSessionCache`` connection listener, ``onMemberLeave``)."""
    for s in broker.share_sessions.opened_on(connection):
        _close_session(broker, s.group, s.member)


def _close_session(broker: Broker, group: str, member: str) -> None:
    s = broker.share_sessions.remove(group, member)
    if s is None:
        return
    names = [(broker.topic_ids.name_of(t), p) for t, p in s.partitions]
    broker.share_partitions.release_member(group, member, [(n, p) for n, p in names if n is not None])
    broker.notify_share(group)


def _fetch(broker: Broker, session: ShareSession, max_records: int, max_bytes: int, record_limit: bool,
           settling: dict[tuple[uuid.UUID, int], frozenset[int]] | None = None
           ) -> dict[tuple[uuid.UUID, int], tuple[int, bytes, tuple[tuple[int, int, int], ...]]]:
    """Acquire records of the session's partitions in turn: (error, log bytes, acquired ranges)."""
    out: dict[tuple[uuid.UUID, int], tuple[int, bytes, tuple[tuple[int, int, int], ...]]] = {}
    parts = session.partitions
    if not parts:
        return out
    start = session.next_start % len(parts)
    order = parts[start:] + parts[:start]
    session.next_start = start + 1
    budget_records, budget_bytes = max_records, max_bytes
    for topic_id, p in order:
        name = broker.topic_ids.name_of(topic_id)
        if name is not None and not _may_read(broker, name):
            out[(topic_id, p)] = (ec.TOPIC_AUTHORIZATION_FAILED, b"", ())
            continue
        if name is None or broker.log(name, p) is None:
            out[(topic_id, p)] = (ec.UNKNOWN_TOPIC_OR_PARTITION, b"", ())
            continue
        if budget_records <= 0 or budget_bytes <= 0:
            continue
        try:
            r = broker.share_partitions.fetch(session.group, session.member, name, p, budget_records,
                                              budget_bytes, record_limit,
                                              settling=(settling or {}).get((topic_id, p), frozenset()))
        except KafkalogIOError as e:
            broker.log_dir_failed(TopicPartition(name, p), e)
            out[(topic_id, p)] = (ec.KAFKA_STORAGE_ERROR, b"", ())
            continue
        except KafkalogError as e:
            logger.error("share fetch of %s-%d for group %s failed: %s", name, p, session.group, e)
            out[(topic_id, p)] = (ec.UNKNOWN_SERVER_ERROR, b"", ())
            continue
        if r.error:
            out[(topic_id, p)] = (r.error, b"", ())
        elif r.acquired:
            out[(topic_id, p)] = (ec.NONE, r.records, r.acquired)
            budget_records -= sum(b - a + 1 for a, b, _c in r.acquired)
            budget_bytes -= len(r.records)
    return out


def _fetch_response(broker: Broker, request: Request, session: ShareSession | None, initial: bool,
                    fetched: dict[tuple[uuid.UUID, int], tuple[int, bytes, tuple[tuple[int, int, int], ...]]],
                    acks: dict[tuple[uuid.UUID, int], tuple[int, str | None]]) -> Any:
    keys: list[tuple[uuid.UUID, int]] = []
    if initial and session is not None:
        keys += session.partitions
    keys += [k for k in fetched if k not in keys]
    keys += [k for k in acks if k not in keys]
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for topic_id, p in keys:
        err, records, acquired = fetched.get((topic_id, p), (ec.NONE, b"", ()))
        ack_err, ack_msg = acks.get((topic_id, p), (ec.NONE, None))
        by_topic.setdefault(topic_id, []).append({
            "partition_index": p, "error_code": err, "error_message": None, "acknowledge_error_code": ack_err,
            "acknowledge_error_message": ack_msg, "current_leader": _leader(broker), "records": records,
            "acquired_records": [{"first_offset": a, "last_offset": b, "delivery_count": c} for a, b, c in acquired]})
    group = request.body.group_id or ""
    return broker.response(request, {
        "throttle_time": 0, "error_code": ec.NONE, "error_message": None,
        "acquisition_lock_timeout": _lock_timeout(broker, group),
        "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()], "node_endpoints": []})


def _invalid_ids(group: str | None, member: str | None) -> str | None:
    """Why a ShareFetch or ShareAcknowledge names no group or member (None: it names both)."""
    if group is None:
        return "Invalid group id in the request."
    if not member:
        return "Invalid member id in the request."
    return None


def _top_error(broker: Broker, request: Request, code: int, message: str | None = None) -> Any:
    values: dict[str, Any] = {"throttle_time": 0, "error_code": code, "error_message": message,
                              "acquisition_lock_timeout": 0, "responses": [], "node_endpoints": []}
    return broker.response(request, values)


def _request_error(broker: Broker, group: str | None, member: str | None) -> int | None:
    """The error of a ShareFetch or ShareAcknowledge as a whole before its session, in Kafka's
    order: no group id, the group's READ refused, no member id; None when there is none."""
    if group is None:
        return ec.INVALID_REQUEST
    if broker.authorizer is not None and not broker.authorize(READ, GROUP, group):
        return ec.GROUP_AUTHORIZATION_FAILED
    if not member:
        return ec.INVALID_REQUEST
    return None


def handle_share_fetch(broker: Broker, request: Request) -> Any:
    b = request.body
    group, member, epoch = b.group_id, b.member_id, b.share_session_epoch
    # Kafka's error responses here carry no message (getErrorResponse drops the exception's)
    code = _request_error(broker, group, member)
    if code is not None:
        return _top_error(broker, request, code)
    renew = request.api_version >= 2 and b.is_renew_ack
    if renew:
        problems = [f"{k} must be set to 0, " for k, v in (("maxBytes", b.max_bytes), ("minBytes", b.min_bytes),
                                                            ("maxRecords", b.max_records),
                                                            ("maxWaitMs", ms(b.max_wait))) if v != 0]
        if problems:
            return _top_error(broker, request, ec.INVALID_REQUEST, "".join(problems) + "if isRenewAck is true.")
    has_acks = any(p.acknowledgement_batches for t in b.topics for p in t.partitions)
    add = [(t.topic_id, p.partition_index) for t in b.topics for p in t.partitions]
    forget = [(t.topic_id, p) for t in b.forgotten_topics_data for p in t.partitions]
    try:
        session = broker.share_sessions.context(group, member, epoch, add, forget, has_acks)
    except ShareSessionError as e:
        return _top_error(broker, request, e.code, e.message)
    acks = _acknowledge(broker, group, member, b.topics, request.api_version >= 2, renew) if has_acks else {}
    if epoch == FINAL_EPOCH:
        _close_session(broker, group, member)
        return _fetch_response(broker, request, None, False, {}, acks)
    if renew:
        return _fetch_response(broker, request, session, False, {}, acks)
    record_limit = request.api_version >= 2 and b.share_acquire_mode == 1
    max_records = b.max_records if b.max_records > 0 else 500
    # Kafka's fetch runs beside the acknowledgements it carries: what they settle is not available
    # to this fetch's first look (the state is being written)
    settling = {(t.topic_id, p.partition_index): frozenset(
        o for a in p.acknowledgement_batches for o in range(a.first_offset, a.last_offset + 1))
        for t in b.topics for p in t.partitions if p.acknowledgement_batches}
    fetched = _fetch(broker, session, max_records, b.max_bytes, record_limit, settling)
    wait_ms = ms(b.max_wait)
    if any(v[2] for v in fetched.values()) or wait_ms <= 0 or b.min_bytes <= 0 or not session.partitions:
        return _fetch_response(broker, request, session, epoch == INITIAL_EPOCH, fetched, acks)
    return _long_poll(broker, request, session, epoch == INITIAL_EPOCH, acks, max_records, record_limit,
                      time.monotonic() + wait_ms / 1000)


async def _long_poll(broker: Broker, request: Request, session: ShareSession, initial: bool,
                     acks: dict[tuple[uuid.UUID, int], tuple[int, str | None]], max_records: int,
                     record_limit: bool, deadline: float) -> Any:
    """Wait for new records, released ones or expired locks, until ``max_wait``."""
    b = request.body
    fetched: dict[tuple[uuid.UUID, int], tuple[int, bytes, tuple[tuple[int, int, int], ...]]] = {}
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _fetch_response(broker, request, session, initial, fetched, acks)
        tps = [TopicPartition(n, p) for t, p in session.partitions
               for n in [broker.topic_ids.name_of(t)] if n is not None]
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        broker.add_waiter(tps, fut)
        broker.add_share_waiter(session.group, fut)
        try:
            await asyncio.wait_for(fut, min(remaining, 0.25))
        except TimeoutError:
            pass
        finally:
            broker.remove_waiter(tps, fut)
            broker.remove_share_waiter(session.group, fut)
        if broker.share_sessions.sessions.get((session.group, session.member)) is not session:
            return _top_error(broker, request, ec.SHARE_SESSION_NOT_FOUND)
        fetched = _fetch(broker, session, max_records, b.max_bytes, record_limit)
        if any(v[2] for v in fetched.values()):
            return _fetch_response(broker, request, session, initial, fetched, acks)


def handle_share_acknowledge(broker: Broker, request: Request) -> Any | Awaitable[Any]:
    b = request.body
    group, member, epoch = b.group_id, b.member_id, b.share_session_epoch
    code = _request_error(broker, group, member)
    if code is not None:
        return _ack_error(broker, request, code)
    try:
        broker.share_sessions.acknowledge_update(group, member, epoch)
    except ShareSessionError as e:
        return _ack_error(broker, request, e.code, e.message)
    acks = _acknowledge(broker, group, member, b.topics, request.api_version >= 2,
                        request.api_version >= 2 and b.is_renew_ack)
    if epoch == FINAL_EPOCH:
        _close_session(broker, group, member)
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (topic_id, p), (err, msg) in acks.items():
        by_topic.setdefault(topic_id, []).append({"partition_index": p, "error_code": err, "error_message": msg,
                                                  "current_leader": _leader(broker)})
    return broker.response(request, {"throttle_time": 0, "error_code": ec.NONE, "error_message": None,
                                     "acquisition_lock_timeout": _lock_timeout(broker, group),
                                     "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                                     "node_endpoints": []})


def _ack_error(broker: Broker, request: Request, code: int, message: str | None = None) -> Any:
    return broker.response(request, {"throttle_time": 0, "error_code": code, "error_message": message,
                                     "acquisition_lock_timeout": 0, "responses": [], "node_endpoints": []})
