"""OffsetCommit, OffsetFetch and OffsetDelete over ``broker.offsets``
(:class:`kafkalog.coordinator.offsets.OffsetsStore`, the ``__consumer_offsets`` topic), checked
against the group's generation and members as Kafka's group coordinator does."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
from kafkalog.coordinator.offsets import OffsetAndMetadata
from kafkalog.errors import KafkalogError, KafkalogIOError
from kafkalog.log.naming import TopicPartition
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.classic_group import STABLE
from kafkalog.server.coordinator.group import GroupError
from kafkalog.server.error_codes import error_code
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import DELETE, DESCRIBE, GROUP, READ, TOPIC

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")


#: KIP-848's follow-up: OffsetCommit and OffsetFetch v10 name topics by id
FIRST_TOPIC_IDS = 10


def topic_name(broker: Broker, t: Any, by_id: bool) -> str | None:
    """The name of a request's topic: its own, or (``by_id``) the one its id resolves to, None for an
    id no topic has (the zero id too)."""
    if not by_id:
        return t.name
    return broker.topic_ids.name_of(t.topic_id) if t.topic_id is not None and t.topic_id.int else None


def offsets_to_commit(broker: Broker, topics: Any, err: int, with_leader_epoch: bool, by_id: bool = False
                      ) -> tuple[list[dict[str, Any]], dict[TopicPartition, OffsetAndMetadata]]:
    """The response rows of an OffsetCommit or TxnOffsetCommit (``err`` for every partition when
    set, else each partition's own check: a topic id that names no topic (v10), a known partition,
    metadata not too large) and the offsets to write."""
    max_meta = broker.config.values["offset.metadata.max.bytes"]
    rows = []
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for t in topics:
        parts = []
        name = topic_name(broker, t, by_id)
        known = set(broker.manager.partitions_of(name)) if name and broker.manager.has_topic(name) else set()
        for p in t.partitions:
            e = err
            meta = p.committed_metadata or ""
            if not e and name is None:
                e = ec.UNKNOWN_TOPIC_ID
            elif not e and broker.authorizer is not None and not broker.authorize(READ, TOPIC, name or ""):
                e = ec.TOPIC_AUTHORIZATION_FAILED
            elif not e and p.partition_index not in known:
                e = ec.UNKNOWN_TOPIC_OR_PARTITION
            elif not e and len(meta.encode("utf-8")) > max_meta:
                e = ec.OFFSET_METADATA_TOO_LARGE
            elif not e and name is not None:
                epoch = p.committed_leader_epoch if with_leader_epoch else -1
                offsets[TopicPartition(name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, meta, None if epoch < 0 else epoch)
            parts.append({"partition_index": p.partition_index, "error_code": e})
        rows.append({"name": name or "", "topic_id": t.topic_id if by_id else None, "partitions": parts})
    return rows, offsets


def epoch_checked(broker: Broker, rows: list[dict[str, Any]], offsets: dict[TopicPartition, OffsetAndMetadata],
                  check: Callable[[str, Any, int], int]) -> None:
    """A consumer group member committing with an older member epoch: each partition must have been
    assigned to it at that epoch or before (Kafka's assignment epoch validation)."""
    for t in rows:
        topic_id = broker.topic_ids.of(t["name"]) if t["name"] and broker.manager.has_topic(t["name"]) else None
        for p in t["partitions"]:
            if p["error_code"] == ec.NONE:
                e = check(t["name"], topic_id, p["partition_index"])
                if e:
                    p["error_code"] = e
                    offsets.pop(TopicPartition(t["name"], p["partition_index"]), None)


def fail_written(rows: list[dict[str, Any]], code: int) -> None:
    """The write of the offsets failed: ``code`` for every partition that had no error."""
    for t in rows:
        for p in t["partitions"]:
            if p["error_code"] == ec.NONE:
                p["error_code"] = code


def store_offsets(broker: Broker, group_id: str, topics: list[dict[str, Any]],
                  write: Callable[[], None]) -> None:
    """``write`` the offsets of an OffsetCommit or TxnOffsetCommit to ``__consumer_offsets``, its
    failure answered as Kafka's group coordinator does (``GroupMetadataManager.storeOffsets``): a
    storage error takes the data directory offline, as a produce's does, and every partition gets
    NOT_COORDINATOR (the client finds its coordinator again and retries; nothing is acknowledged);
    so does every commit while the directory is offline; a record too large is
    UNKNOWN_SERVER_ERROR; any other error its own code."""
    if broker.log_dir_failure is not None:
        fail_written(topics, ec.NOT_COORDINATOR)
        return
    try:
        write()
    except KafkalogIOError as e:
        broker.log_dir_failed(TopicPartition(CONSUMER_OFFSETS_TOPIC, broker.offsets.partition_for(group_id)), e)
        fail_written(topics, ec.NOT_COORDINATOR)
    except KafkalogError as e:
        code = error_code(e)
        if code in (ec.MESSAGE_TOO_LARGE, ec.RECORD_LIST_TOO_LARGE, ec.UNKNOWN_SERVER_ERROR):
            logger.error("committing offsets of group %s failed: %s", group_id, e)
            code = ec.UNKNOWN_SERVER_ERROR
        fail_written(topics, code)


def handle_offset_commit(broker: Broker, request: Request) -> Any:
    b = request.body
    instance = b.group_instance_id if request.api_version >= 7 else None
    check = None
    if broker.authorizer is not None and not broker.authorize(READ, GROUP, b.group_id):
        err = ec.GROUP_AUTHORIZATION_FAILED
    elif b.group_id in broker.consumer_groups.groups:     # KIP-848: validated by member epoch
        try:
            check = broker.consumer_groups.validate_commit(b.group_id, b.member_id, instance,
                                                           b.generation_id_or_member_epoch, request.api_version)
            err = ec.NONE
        except GroupError as e:
            err = e.code
    elif b.group_id in broker.streams_groups.groups:      # KIP-1071: validated by member epoch
        try:
            check = broker.streams_groups.validate_commit(b.group_id, b.member_id,
                                                          b.generation_id_or_member_epoch)
            err = ec.NONE
        except GroupError as e:
            err = e.code
    else:
        err = (broker.groups.check_commit(b.group_id, b.generation_id_or_member_epoch, b.member_id, instance,
                                          has_offsets=broker.offsets.has_group(b.group_id),
                                          version=request.api_version)
               if b.group_id else ec.INVALID_GROUP_ID)
    topics, offsets = offsets_to_commit(broker, b.topics, err, request.api_version >= 6,
                                        by_id=request.api_version >= FIRST_TOPIC_IDS)
    if check is not None:
        epoch_checked(broker, topics, offsets, check)
    if offsets:
        store_offsets(broker, b.group_id, topics,
                     lambda: broker.offsets.commit(b.group_id, offsets, any_offset=True))
    return broker.response(request, {"throttle_time": 0, "topics": topics})


#: KIP-447: OffsetFetch v7 may require stable offsets
FIRST_REQUIRE_STABLE = 7


def _fetch_group(broker: Broker, group_id: str, topics: Any, require_stable: bool = False,
                 by_id: bool = False) -> list[dict[str, Any]]:
    """The committed offsets of ``topics`` (None: every partition with one) of a group;
    ``require_stable`` (KIP-447): UNSTABLE_OFFSET_COMMIT for a partition with offsets of a
    transaction not ended yet; ``by_id`` (v10): topics named by id, UNKNOWN_TOPIC_ID for an id no
    topic has, and every topic answered with its id (a topic gone since its offsets were committed
    has none: left out of the every-partition answer)."""
    got = broker.offsets.fetch(group_id)
    unstable = broker.offsets.pending_transactional(group_id) if require_stable else set()
    wanted: dict[Any, list[int]] = {}        # a topic's name; an id that names no topic, as asked
    if topics is None:
        for tp in got:
            if not by_id or broker.manager.has_topic(tp.topic):
                wanted.setdefault(tp.topic, []).append(tp.partition)
    else:
        for t in topics:
            name = topic_name(broker, t, by_id)
            wanted.setdefault(t.topic_id if name is None else name, []).extend(t.partition_indexes)
    out = []
    denied = []
    if broker.authorizer is not None:         # Kafka: DESCRIBE on each topic; the others answered last
        for name in [n for n in wanted if isinstance(n, str) and not broker.authorize(DESCRIBE, TOPIC, n)]:
            parts = wanted.pop(name)
            if topics is not None:
                denied.append({"name": name, "topic_id": broker.topic_ids.of(name) if by_id else None,
                               "partitions": [{"partition_index": p, "committed_offset": -1,
                                               "committed_leader_epoch": -1, "metadata": "",
                                               "error_code": ec.TOPIC_AUTHORIZATION_FAILED} for p in parts]})
    for name, parts in wanted.items():
        rows = []
        if not isinstance(name, str):          # an id that names no topic
            out.append({"name": "", "topic_id": name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": ec.UNKNOWN_TOPIC_ID} for p in parts]})
            continue
        for p in sorted(parts) if topics is None else parts:
            oam = got.get(TopicPartition(name, p))
            if TopicPartition(name, p) in unstable:
                rows.append({"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                             "metadata": "", "error_code": ec.UNSTABLE_OFFSET_COMMIT})
                continue
            rows.append({"partition_index": p, "committed_offset": -1 if oam is None else oam.offset,
                         "committed_leader_epoch": -1 if oam is None or oam.leader_epoch is None
                         else oam.leader_epoch,
                         "metadata": "" if oam is None else oam.metadata, "error_code": 0})
        out.append({"name": name, "topic_id": broker.topic_ids.of(name) if by_id else None, "partitions": rows})
    return out + denied


def _fetch_error(broker: Broker, g: Any, version: int) -> int:
    """A consumer group's check of the fetching member's epoch (OffsetFetch v9+)."""
    if not g.group_id:
        return ec.INVALID_GROUP_ID
    if version >= 9 and g.group_id in broker.consumer_groups.groups:
        try:
            broker.consumer_groups.validate_fetch(g.group_id, g.member_id, g.member_epoch)
        except GroupError as e:
            return e.code
    if version >= 9 and g.group_id in broker.streams_groups.groups:
        try:
            broker.streams_groups.validate_fetch(g.group_id, g.member_id, g.member_epoch)
        except GroupError as e:
            return e.code
    return ec.NONE


def handle_offset_fetch(broker: Broker, request: Request) -> Any:
    b = request.body
    if request.api_version >= 8:
        groups = []
        for g in b.groups:
            err = ec.GROUP_AUTHORIZATION_FAILED if broker.authorizer is not None and not broker.authorize(
                DESCRIBE, GROUP, g.group_id) else _fetch_error(broker, g, request.api_version)
            groups.append({"group_id": g.group_id, "error_code": err,
                           "topics": [] if err not in (ec.NONE, ec.INVALID_GROUP_ID)
                           else _fetch_group(broker, g.group_id, g.topics, b.require_stable,
                                             by_id=request.api_version >= FIRST_TOPIC_IDS)})
        return broker.response(request, {"throttle_time": 0, "groups": groups})
    if broker.authorizer is not None and not broker.authorize(DESCRIBE, GROUP, b.group_id):
        return broker.response(request, {"throttle_time": 0, "error_code": ec.GROUP_AUTHORIZATION_FAILED,
                                         "topics": []})
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "topics": _fetch_group(
        broker, b.group_id, b.topics, request.api_version >= FIRST_REQUIRE_STABLE and b.require_stable)})


def subscribed_topics(subscription: bytes) -> set[str]:
    """The topics of a ``consumer`` protocol subscription (Kafka's ConsumerProtocolSubscription:
    version, then an array of strings); empty when it cannot be read."""
    try:
        (n,) = struct.unpack_from(">i", subscription, 2)
        pos, out = 6, set()
        for _ in range(max(n, 0)):
            (size,) = struct.unpack_from(">h", subscription, pos)
            out.add(subscription[pos + 2:pos + 2 + size].decode("utf-8"))
            pos += 2 + size
        return out
    except (struct.error, UnicodeDecodeError):
        return set()


def handle_offset_delete(broker: Broker, request: Request) -> Any:
    b = request.body
    g = broker.groups.groups.get(b.group_id)
    if broker.authorizer is not None and not broker.authorize(DELETE, GROUP, b.group_id):
        return broker.response(request, {"error_code": ec.GROUP_AUTHORIZATION_FAILED, "throttle_time": 0,
                                         "topics": []})
    if g is None and not broker.offsets.has_group(b.group_id):
        return broker.response(request, {"error_code": ec.GROUP_ID_NOT_FOUND, "throttle_time": 0,
                                          "topics": []})
    subscribed: set[str] = set()
    if g is not None and g.state == STABLE and g.protocol_type == "consumer":
        for m in g.members.values():
            subscribed |= subscribed_topics(m.metadata(g.protocol))
    cg = broker.consumer_groups.groups.get(b.group_id)
    if cg is not None:                  # a consumer group (KIP-848): its members' subscribed topic names
        for cm in cg.members.values():
            subscribed |= set(cm.subscribed_topic_names)
    sg = broker.streams_groups.groups.get(b.group_id)
    if sg is not None and sg.members:   # a streams group (KIP-1071): the topics its topology reads
        subscribed |= sg.source_topics()
    topics, delete = [], []
    for t in b.topics:
        parts = []
        denied = broker.authorizer is not None and not broker.authorize(READ, TOPIC, t.name)
        for p in t.partitions:
            err = ec.TOPIC_AUTHORIZATION_FAILED if denied else \
                ec.GROUP_SUBSCRIBED_TO_TOPIC if t.name in subscribed else ec.NONE
            if not err:
                delete.append(TopicPartition(t.name, p.partition_index))
            parts.append({"partition_index": p.partition_index, "error_code": err})
        topics.append({"name": t.name, "partitions": parts})
    broker.offsets.delete_offsets(b.group_id, delete)
    return broker.response(request, {"error_code": 0, "throttle_time": 0, "topics": topics})
