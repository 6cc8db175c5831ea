"""kafka-dump-log.sh's record decoders for the coordinators' topics: ``--offsets-decoder``
(``__consumer_offsets``: offset commits and group metadata) and ``--transaction-log-decoder``
(``__transaction_state``) and ``--share-group-state-decoder`` (``__share_group_state``), printing
what Kafka's ``OffsetsMessageParser``, ``TransactionLogMessageParser`` and
``ShareGroupStateMessageParser`` print.

A decoder turns a record into ``(key, payload)``: the key as ``{"type": "<key version>", "data":
{...}}`` and the payload as ``{"version": "<value version>", "data": {...}}`` (the fields of Kafka's
message schemas, in their order and JSON names, bytes as base64; a ``consumer`` group's member
subscriptions and assignments decoded), ``"<DELETE>"`` for a tombstone, and for a record that does
not decode Kafka's ``Unknown record type N at offset O, skipping.`` or ``Error at offset O,
skipping. ...`` in place of the key with no payload. Decoding is the coordinator's
(:mod:`kafkalog.coordinator.group_metadata`, :mod:`kafkalog.coordinator.transaction_log`).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any, Protocol

from kafkalog.coordinator import consumer_group_records as cgr
from kafkalog.coordinator import share_state_records as ssr
from kafkalog.coordinator import streams_group_records as sgr
from kafkalog.coordinator.group_metadata import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    decode_consumer_assignment,
    decode_consumer_subscription,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from kafkalog.coordinator.transaction_log import TransactionState, key_from_bytes, read_value
from kafkalog.errors import InvalidRecordError, KafkalogError

__all__ = ["Decoded", "RecordDecoder", "offsets_decoder", "share_group_state_decoder", "transaction_log_decoder"]

#: a decoded key or payload: Kafka's JSON object, or a text such as ``<DELETE>``; None: not printed
Decoded = dict[str, Any] | str | None


class _Record(Protocol):
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> Any: ...
    @property
    def value(self) -> Any: ...


RecordDecoder = Callable[[_Record], tuple[Decoded, Decoded]]


def _status_name(status: int) -> str | int:
    """Kafka 4.4 prints a transaction's status by its name (``PrepareCommit``), an unknown one as
    its number."""
    try:
        return "".join(w.capitalize() for w in TransactionState(status).name.split("_"))
    except ValueError:
        return status


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _version(buf: bytes) -> int:
    return int(struct.unpack_from(">h", buf, 0)[0]) if len(buf) >= 2 else -1


def _missing_key(offset: int) -> InvalidRecordError:
    return InvalidRecordError(f"Failed to decode message at offset {offset} using the specified decoder "
                              f"(message had a missing key)")


def _topic_partitions(tps: tuple[tuple[str, tuple[int, ...]], ...]) -> list[dict[str, Any]]:
    return [{"topic": t, "partitions": list(ps)} for t, ps in tps]


def _subscription_json(raw: bytes) -> Any:
    try:
        s = decode_consumer_subscription(raw)
    except KafkalogError:
        return _b64(raw)                  # as Kafka: the original bytes when they do not decode
    out: dict[str, Any] = {"topics": list(s.topics), "userData": _b64(s.user_data)}
    if s.version >= 1:
        out["ownedPartitions"] = _topic_partitions(s.owned_partitions)
    if s.version >= 2:
        out["generationId"] = s.generation_id
    if s.version >= 3:
        out["rackId"] = s.rack_id
    return out


def _assignment_json(raw: bytes) -> Any:
    try:
        a = decode_consumer_assignment(raw)
    except KafkalogError:
        return _b64(raw)
    return {"assignedPartitions": _topic_partitions(a.assigned_partitions), "userData": _b64(a.user_data)}


def _group_metadata_json(v: GroupMetadataValue, version: int) -> dict[str, Any]:
    consumer = v.protocol_type == "consumer"
    out: dict[str, Any] = {"protocolType": v.protocol_type, "generation": v.generation,
                           "protocol": v.protocol, "leader": v.leader}
    if version >= 2:
        out["currentStateTimestamp"] = v.current_state_timestamp
    members = []
    for m in v.members:
        j: dict[str, Any] = {"memberId": m.member_id}
        if version >= 3:
            j["groupInstanceId"] = m.group_instance_id
        j["clientId"] = m.client_id
        j["clientHost"] = m.client_host
        if version >= 1:
            j["rebalanceTimeout"] = m.rebalance_timeout
        j["sessionTimeout"] = m.session_timeout
        j["subscription"] = _subscription_json(m.subscription) if consumer else _b64(m.subscription)
        j["assignment"] = _assignment_json(m.assignment) if consumer else _b64(m.assignment)
        members.append(j)
    out["members"] = members
    return out


def _uuid(u: Any) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def _partitions_json(topics: Any, with_epochs: bool) -> list[dict[str, Any]]:
    out = []
    for t in topics:
        j: dict[str, Any] = {"topicId": _uuid(t[0]), "partitions": list(t[1])}
        if with_epochs and t[2] is not None:
            j["assignmentEpochs"] = list(t[2])
        out.append(j)
    return out


def _consumer_group_json(v: Any) -> dict[str, Any]:
    """A consumer group record's value (KIP-848) in Kafka's JSON: a tagged field only when it is not
    its default (the classic member metadata always, null or not, as Kafka prints it)."""
    if isinstance(v, cgr.GroupEpochValue):
        out: dict[str, Any] = {"epoch": v.epoch}
        if v.metadata_hash:
            out["metadataHash"] = v.metadata_hash
        return out
    if isinstance(v, cgr.TargetAssignmentMetadataValue):
        out = {"assignmentEpoch": v.assignment_epoch}
        if v.assignment_timestamp:
            out["assignmentTimestamp"] = v.assignment_timestamp
        return out
    if isinstance(v, cgr.MemberMetadataValue):
        c = v.classic_member_metadata
        return {"instanceId": v.instance_id, "rackId": v.rack_id, "clientId": v.client_id,
                "clientHost": v.client_host, "subscribedTopicNames": list(v.subscribed_topic_names),
                "subscribedTopicRegex": v.subscribed_topic_regex, "rebalanceTimeoutMs": v.rebalance_timeout_ms,
                "serverAssignor": v.server_assignor,
                "classicMemberMetadata": None if c is None else {
                    "sessionTimeoutMs": c.session_timeout_ms,
                    "supportedProtocols": [{"name": n, "metadata": _b64(m)} for n, m in c.supported_protocols]}}
    if isinstance(v, cgr.TargetAssignmentMemberValue):
        return {"topicPartitions": [{"topicId": _uuid(t), "partitions": list(ps)} for t, ps in v.partitions]}
    if isinstance(v, cgr.CurrentMemberAssignmentValue):
        return {"memberEpoch": v.member_epoch, "previousMemberEpoch": v.previous_member_epoch, "state": v.state,
                "assignedPartitions": _partitions_json(v.assigned, True),
                "partitionsPendingRevocation": _partitions_json(v.pending_revocation, True)}
    if isinstance(v, cgr.RegularExpressionValue):
        return {"topics": list(v.topics), "version": v.version, "timestamp": v.timestamp}
    assert isinstance(v, cgr.PartitionMetadataValue)
    return {"topics": [{"topicId": _uuid(t), "topicName": n, "numPartitions": c, "partitionMetadata": [
        {"partition": p, "racks": list(r)} for p, r in parts]} for t, n, c, parts in v.topics]}


def _consumer_group_record(record: _Record, key: bytes) -> tuple[Decoded, Decoded] | None:
    got = cgr.decode_record(key, None if record.value is None else bytes(record.value))
    return _group_record_json(got, (cgr.MEMBER_METADATA, cgr.TARGET_ASSIGNMENT_MEMBER, cgr.CURRENT_MEMBER_ASSIGNMENT),
                               lambda k, v: _consumer_group_json(v), lambda k: (
        {"regularExpression": k.regex} if k.record_type == cgr.REGULAR_EXPRESSION else {}))


def _group_record_json(got: tuple[Any, Any] | None, member_keyed: tuple[int, ...],
                       value_json: Callable[[Any, Any], Any],
                       more_key: Callable[[Any], dict[str, Any]] = lambda k: {}) -> tuple[Decoded, Decoded] | None:
    """A modern group's decoded record (key, value or None for a tombstone) in Kafka's JSON: its
    type and key fields (the member id of a member-keyed type, ``more_key``'s), its value (version
    0) or ``<DELETE>``; None when the record is not of the group's types."""
    if got is None:
        return None
    k, v = got
    data: dict[str, Any] = {"groupId": k.group_id}
    if k.record_type in member_keyed:
        data["memberId"] = k.member_id
    data.update(more_key(k))
    decoded_key = {"type": str(k.record_type), "data": data}
    if v is None:
        return decoded_key, "<DELETE>"
    return decoded_key, {"version": "0", "data": value_json(k, v)}


def _streams_group_record(record: _Record, key: bytes) -> tuple[Decoded, Decoded] | None:
    """A streams group's record (KIP-1071, types 17 and 19-23) in Kafka's JSON."""
    got = sgr.decode_record(key, None if record.value is None else bytes(record.value))
    return _group_record_json(got, (sgr.MEMBER_METADATA, sgr.TARGET_ASSIGNMENT_MEMBER, sgr.CURRENT_MEMBER_ASSIGNMENT),
                               lambda k, v: sgr.value_json(k.record_type, v))


def offsets_decoder(record: _Record) -> tuple[Decoded, Decoded]:
    """A ``__consumer_offsets`` record as kafka-dump-log.sh's ``--offsets-decoder`` prints it."""
    if record.key is None:
        raise _missing_key(record.offset)
    key = bytes(record.key)
    try:
        k = decode_key(key)
        if k is None:
            consumer_group = _consumer_group_record(record, key)
            if consumer_group is not None:
                return consumer_group
            streams_group = _streams_group_record(record, key)
            if streams_group is not None:
                return streams_group
            return f"Unknown record type {_version(key)} at offset {record.offset}, skipping.", None
        if isinstance(k, OffsetCommitKey):
            key_json: dict[str, Any] = {"group": k.group, "topic": k.topic, "partition": k.partition}
        else:
            assert isinstance(k, GroupMetadataKey)
            key_json = {"group": k.group}
        decoded_key = {"type": str(_version(key)), "data": key_json}
        if record.value is None:
            return decoded_key, "<DELETE>"
        value = bytes(record.value)
        version = _version(value)
        if isinstance(k, OffsetCommitKey):
            v = decode_offset_commit_value(value)
            data: dict[str, Any] = {"offset": v.offset}
            if version >= 3:
                data["leaderEpoch"] = v.leader_epoch
            data["metadata"] = v.metadata
            data["commitTimestamp"] = v.commit_timestamp
            if version == 1:
                data["expireTimestamp"] = v.expire_timestamp
            if v.topic_id is not None and any(v.topic_id):
                data["topicId"] = base64.urlsafe_b64encode(v.topic_id).decode("ascii").rstrip("=")
        else:
            data = _group_metadata_json(decode_group_metadata_value(value), version)
        return decoded_key, {"version": str(version), "data": data}
    except KafkalogError as e:
        return f"Error at offset {record.offset}, skipping. {e.message}", None


def transaction_log_decoder(record: _Record) -> tuple[Decoded, Decoded]:
    """A ``__transaction_state`` record as kafka-dump-log.sh's ``--transaction-log-decoder``
    prints it."""
    if record.key is None:
        raise _missing_key(record.offset)
    key = bytes(record.key)
    if _version(key) > 0:
        return f"Unknown record type {_version(key)} at offset {record.offset}, skipping.", None
    try:
        decoded_key = {"type": str(_version(key)), "data": {"transactionalId": key_from_bytes(key)}}
        if record.value is None:
            return decoded_key, "<DELETE>"
        v = read_value(bytes(record.value))
    except KafkalogError as e:
        return f"Error at offset {record.offset}, skipping. {e.message}", None
    data: dict[str, Any] = {"producerId": v.producer_id}
    if v.version >= 1 and v.previous_producer_id != -1:
        data["previousProducerId"] = v.previous_producer_id
    if v.version >= 1 and v.next_producer_id != -1:
        data["nextProducerId"] = v.next_producer_id
    data["producerEpoch"] = v.producer_epoch
    if v.version >= 1 and v.next_producer_epoch != -1:
        data["nextProducerEpoch"] = v.next_producer_epoch
    data.update({"transactionTimeoutMs": v.transaction_timeout_ms,
                 "transactionStatus": _status_name(v.transaction_status),
                 "transactionPartitions": None if v.transaction_partitions is None else [
                     {"topic": t, "partitionIds": ids} for t, ids in v.transaction_partitions],
                 "transactionLastUpdateTimestampMs": v.transaction_last_update_timestamp_ms,
                 "transactionStartTimestampMs": v.transaction_start_timestamp_ms})
    if v.version >= 1 and v.client_transaction_version != 0:
        data["clientTransactionVersion"] = v.client_transaction_version
    return decoded_key, {"version": str(v.version), "data": data}


def share_group_state_decoder(record: _Record) -> tuple[Decoded, Decoded]:
    """A ``__share_group_state`` record (ShareSnapshot, type 0; ShareUpdate, type 1) as
    kafka-dump-log.sh's ``--share-group-state-decoder`` prints it (the delivery complete count,
    a tagged field, only when set)."""
    if record.key is None:
        raise _missing_key(record.offset)
    key = bytes(record.key)
    try:
        k = ssr.decode_key(key)
        if k is None:
            return f"Unknown record type {_version(key)} at offset {record.offset}, skipping.", None
        decoded_key = {"type": str(k.record_type), "data": {"groupId": k.group_id,
                                                            "topicId": ssr.kafka_uuid(k.topic_id),
                                                            "partition": k.partition}}
        if record.value is None:
            return decoded_key, "<DELETE>"
        raw = bytes(record.value)
        v = ssr.decode_value(k.record_type, raw)
    except KafkalogError as e:
        return f"Error at offset {record.offset}, skipping. {e.message}", None
    data: dict[str, Any] = {"snapshotEpoch": v.snapshot_epoch}
    if k.record_type == ssr.SHARE_SNAPSHOT:
        data["stateEpoch"] = v.state_epoch
    data.update({"leaderEpoch": v.leader_epoch, "startOffset": v.start_offset})
    if v.delivery_complete_count != -1:
        data["deliveryCompleteCount"] = v.delivery_complete_count
    if k.record_type == ssr.SHARE_SNAPSHOT:
        data.update({"createTimestamp": v.create_timestamp, "writeTimestamp": v.write_timestamp})
    data["stateBatches"] = [{"firstOffset": b.first_offset, "lastOffset": b.last_offset,
                             "deliveryState": b.delivery_state, "deliveryCount": b.delivery_count}
                            for b in v.state_batches]
    return decoded_key, {"version": str(_version(raw)), "data": data}
