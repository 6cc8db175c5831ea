"""Metadata and DescribeCluster: one node that leads every partition, real topic IDs (Produce v13
and Fetch v13+ address topics by ID), auto-creation per ``auto.create.topics.enable``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kafkalog.errors import InvalidTopicError, KafkalogIOError
from kafkalog.log.naming import validate_topic
from kafkalog.server import error_codes
from kafkalog.server.broker import INTERNAL_TOPICS
from kafkalog.server.handlers.slices import SliceCounter, run_in_slices, run_now
from kafkalog.server.requests import metadata_wire
from kafkalog.server.requests.protocol import Request, encode_response
from kafkalog.server.security.acl_operations import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER,
    CREATE,
    DESCRIBE,
    TOPIC,
    authorized_operations,
)
from kafkalog.server.security.authorizer import CLUSTER_NAME

logger = logging.getLogger("kafkalog.server")

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

def _topic_entry(broker: Broker, version: int, topic: str,
                 operations: int = AUTHORIZED_OPERATIONS_OMITTED) -> bytes:
    """A topic this node leads whole, as the response's bytes (:mod:`.metadata_wire`): its head
    as kept while the topic's metadata stamp stays (:mod:`.metadata_entries`), then the operations."""
    stamp_of = broker.manager.metadata_stamp
    stamp = stamp_of(topic)             # read before what it stands for
    topic_id = broker.topic_ids.of(topic)
    head = broker.metadata_entries.head(topic, version, stamp, topic_id,
                                        lambda: _topic_head(broker, version, topic, topic_id), stamp_of)
    return head + metadata_wire.topic_tail(version, operations)


def _topic_head(broker: Broker, version: int, topic: str, topic_id: uuid.UUID) -> bytes:
    """The topic's entry up to its partitions, built: a look-up of each partition's leader epoch."""
    logs = [(p, broker.log(topic, p)) for p in broker.manager.partitions_of(topic)]
    parts = metadata_wire.partitions_entry(version, broker.node_id,
                                           [(p, broker.leader_epoch(log)) for p, log in logs])
    return metadata_wire.topic_head(version, 0, topic, topic_id, topic in INTERNAL_TOPICS, parts)


def _entry_bytes(version: int, entry: dict[str, Any] | bytes) -> bytes:
    """A topic of the response as bytes (an error entry is a dict of :func:`_error_entry`)."""
    if isinstance(entry, bytes):
        return entry
    return metadata_wire.topic_entry(version, entry["error_code"], entry["name"], entry["topic_id"],
                                     entry["is_internal"], None, entry["topic_authorized_operations"])


def _error_entry(name: str | None, code: int, topic_id: Any = None,
                 operations: int = AUTHORIZED_OPERATIONS_OMITTED) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False,
            "partitions": [], "topic_authorized_operations": operations}


#: the first version whose topics may be named by ID alone (KIP-516)
TOPIC_ID_VERSION = 12
#: topics a Metadata answer writes before the event loop serves other connections (a topic's entry
#: is kept written, a look-up, ~0.5 ms for 100 partitions; built again after a restart or a change:
#: Metadata for all of 100,000 partitions held the loop 250-450 ms)
TOPICS_PER_SLICE = 16
#: the version from which a requested topic has a ``topic_id`` field (null until v12)
TOPIC_ID_FIELD_VERSION = 10


def handle_metadata(broker: Broker, request: Request) -> Any:
    body = request.body
    requested = body.topics
    if requested and request.api_version < TOPIC_ID_VERSION:
        invalid = _invalid_before_topic_ids(requested, request.api_version)
        if invalid is not None:
            return _invalid_request(broker, request, invalid)
    if requested is None or (request.api_version == 0 and not requested):
        names: list[Any] = [(t, None) for t in broker.manager.topics()]
    else:
        names = [(t.name, t.topic_id if request.api_version >= TOPIC_ID_FIELD_VERSION else None) for t in requested]
    topics: list[dict[str, Any] | bytes] = []
    denied: list[dict[str, Any]] = []
    steps = _topic_entries(broker, request, names, topics, denied)
    if len(names) <= TOPICS_PER_SLICE:
        run_now(steps)
        return _answer(broker, request, topics, denied)
    return _answer_in_slices(broker, request, steps, topics, denied)


async def _answer_in_slices(broker: Broker, request: Request, steps: Iterator[None],
                            topics: list[dict[str, Any] | bytes], denied: list[dict[str, Any]]) -> Any:
    """A Metadata of more topics than one slice (every topic, most often): the event loop serves
    other connections between two slices of topics (:mod:`.slices`)."""
    await run_in_slices(steps)
    return _answer(broker, request, topics, denied)


def _topic_entries(broker: Broker, request: Request, names: list[Any],
                   topics: list[dict[str, Any] | bytes], denied: list[dict[str, Any]]) -> Iterator[None]:
    """Each topic of ``names`` answered into ``topics`` (or ``denied``, written after them),
    yielding after each :data:`TOPICS_PER_SLICE` topics, or fewer that took
    :data:`~.slices.SLICE_SECONDS` (entries built again after a restart, on a loaded machine:
    slices of 16 topics of 100 partitions held the loop 43-143 ms)."""
    body = request.body
    version = request.api_version
    requested = body.topics
    allow_auto = request.api_version < 4 or body.allow_auto_topic_creation           # v4+
    # Kafka answers a topic's operations for every topic named (an unknown ID stays "omitted")
    want_ops = request.api_version >= 8 and body.include_topic_authorized_operations  # v8+
    ops = authorized_operations(TOPIC, want_ops)
    explicit = requested is not None and not (request.api_version == 0 and not requested)
    auth = broker.authorizer
    # with an authorizer (Kafka's KafkaApis.getTopicMetadata): a topic the principal may not describe is
    # left out of "all topics" and answered TOPIC_AUTHORIZATION_FAILED at the end when named; a topic to
    # auto-create needs CREATE on the cluster or the topic
    may_create_all = auth is None or broker.authorize(CREATE, CLUSTER, CLUSTER_NAME)
    count = SliceCounter(TOPICS_PER_SLICE)      # (or fewer topics that took SLICE_SECONDS)
    for i, (name, tid) in enumerate(names):
        if i and count.tick():
            yield
        if name is None:
            found = broker.topic_ids.name_of(tid) if tid is not None else None
            if found is None:
                topics.append(_error_entry(None, error_codes.UNKNOWN_TOPIC_ID, tid))
                continue
            name = found
        if not explicit and not broker.manager.has_topic(name):
            continue            # (every topic: one deleted while an earlier slice was answered)
        if auth is not None:
            if not broker.authorize(DESCRIBE, TOPIC, name):
                if explicit:
                    denied.append(_error_entry(None if tid is not None else name,
                                               error_codes.TOPIC_AUTHORIZATION_FAILED, tid))
                continue
            if want_ops:
                ops = broker.operations(TOPIC, name, True)
            if (explicit and allow_auto and broker.config.auto_create_topics_enable and not may_create_all
                    and not broker.manager.has_topic(name) and not broker.authorize(CREATE, TOPIC, name)):
                denied.insert(0, _error_entry(name, error_codes.TOPIC_AUTHORIZATION_FAILED))
                continue
        if not broker.manager.has_topic(name):
            try:
                validate_topic(name)
            except InvalidTopicError:
                topics.append(_error_entry(name, error_codes.INVALID_TOPIC_EXCEPTION, operations=ops))
                continue
            try:
                if explicit and allow_auto:
                    broker.auto_create(name)
            except KafkalogIOError:                 # the data directory went (or is) offline
                topics.append(_error_entry(name, error_codes.KAFKA_STORAGE_ERROR, operations=ops))
                continue
            # Kafka's broker asks its controller to create the topic and answers it unknown until its
            # metadata has it (also right after DeleteTopics); the client's next Metadata finds it
            topics.append(_error_entry(name, error_codes.UNKNOWN_TOPIC_OR_PARTITION, operations=ops))
            continue
        topics.append(_topic_entry(broker, version, name, ops))


def _answer(broker: Broker, request: Request, topics: list[dict[str, Any] | bytes],
            denied: list[dict[str, Any]]) -> Any:
    """The response: the brokers and the cluster as kio encodes them, the topics spliced in."""
    version = request.api_version
    topics.extend(denied)
    adv = broker.advertised
    without_topics = encode_response(request, broker.response(request, {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": adv.host, "port": adv.port, "rack": broker.rack}],
        "cluster_id": broker.cluster_id, "controller_id": broker.node_id, "topics": [],
        "cluster_authorized_operations": broker.operations(
            CLUSTER, CLUSTER_NAME, 8 <= version <= 10 and request.body.include_cluster_authorized_operations),
        "error_code": 0}))
    return metadata_wire.splice_topics(version, without_topics, [_entry_bytes(version, t) for t in topics])


def _invalid_before_topic_ids(requested: Any, version: int) -> str | None:
    """Kafka's refusal of a topic without a name, or with an ID, before v12."""
    for t in requested:
        if t.name is None:
            return f"Topic name can not be null for version {version}"
        if version >= TOPIC_ID_FIELD_VERSION and t.topic_id is not None:
            return f"Topic IDs are not supported in requests for version {version}"
    return None


def _invalid_request(broker: Broker, request: Request, reason: str) -> Any:
    """Kafka's ``MetadataRequest.getErrorResponse``: INVALID_REQUEST for every topic asked for
    (a null name answered as ""), no broker."""
    logger.info("INVALID_REQUEST for %s: %s", request.describe(), reason)
    topics = [_error_entry(t.name or "", error_codes.INVALID_REQUEST,
                           t.topic_id if request.api_version >= TOPIC_ID_FIELD_VERSION else None)
              for t in request.body.topics]
    return broker.response(request, {
        "throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
        "topics": topics, "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        "error_code": 0})


def handle_describe_cluster(broker: Broker, request: Request) -> Any:
    adv = broker.advertised
    return broker.response(request, {
        "throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
        "cluster_id": broker.cluster_id or "", "controller_id": broker.node_id,
        "brokers": [{"broker_id": broker.node_id, "host": adv.host, "port": adv.port, "rack": broker.rack,
                     "is_fenced": False}],
        "cluster_authorized_operations": broker.operations(
            CLUSTER, CLUSTER_NAME, bool(request.body.include_cluster_authorized_operations))})


#: Kafka's ``max.request.partition.size.limit``: DescribeTopicPartitions answers at most this many
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000


def handle_describe_topic_partitions(broker: Broker, request: Request) -> Any:
    """DescribeTopicPartitions (KIP-966; ``kafka-topics --describe`` and ``Admin.describeTopics``
    from Kafka 3.8): the topics asked for (none: every topic) in name order from the cursor, at most
    ``response_partition_limit`` partitions (capped at Kafka's 2000), then a cursor to the next
    partition; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION. One node and no replication: the
    eligible leader replicas are empty lists, as Kafka answers for a partition whose ISR is whole.
    Kafka answers every topic's authorized operations here (the request has no flag)."""
    body = request.body
    ops = authorized_operations(TOPIC, True)
    names = sorted({t.name for t in body.topics}) if body.topics else sorted(broker.manager.topics())
    cursor = body.cursor
    if cursor is not None:
        if cursor.topic_name not in names:
            invalid = _error_entry(cursor.topic_name, error_codes.INVALID_REQUEST)
            return broker.response(request, {"throttle_time": 0, "topics": [invalid], "next_cursor": None})
        names = names[names.index(cursor.topic_name):]
    left = max(0, min(body.response_partition_limit, MAX_REQUEST_PARTITION_SIZE_LIMIT))
    topics: list[dict[str, Any]] = []
    next_cursor = None
    node = broker.node_id
    for i, name in enumerate(names):
        if left == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if broker.authorizer is not None:
            if not broker.authorize(DESCRIBE, TOPIC, name):
                if body.topics:
                    topics.append({**_error_entry(name, error_codes.TOPIC_AUTHORIZATION_FAILED),
                                   "topic_id": uuid.UUID(int=0)})
                continue
            ops = broker.operations(TOPIC, name, True)
        if not broker.manager.has_topic(name):
            topics.append({**_error_entry(name, error_codes.UNKNOWN_TOPIC_OR_PARTITION),
                           "topic_id": uuid.UUID(int=0), "topic_authorized_operations": ops})
            continue
        first = cursor.partition_index if cursor is not None and i == 0 else 0
        partitions = [p for p in broker.manager.partitions_of(name) if p >= first]
        if len(partitions) > left:
            next_cursor = {"topic_name": name, "partition_index": partitions[left]}
            partitions = partitions[:left]
        left -= len(partitions)
        topics.append({"error_code": 0, "name": name, "topic_id": broker.topic_ids.of(name),
                       "is_internal": name in INTERNAL_TOPICS,
                       "topic_authorized_operations": ops,
                       "partitions": [{"error_code": 0, "partition_index": p, "leader_id": node,
                                       "leader_epoch": broker.leader_epoch(broker.log(name, p)),
                                       "replica_nodes": [node], "isr_nodes": [node],
                                       "eligible_leader_replicas": [], "last_known_elr": [],
                                       "offline_replicas": []} for p in partitions]})
        if next_cursor is not None:
            break
    return broker.response(request, {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor})
