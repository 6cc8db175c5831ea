"""The answer to a request that fails as a whole with one error: Kafka's
``AbstractRequest.getErrorResponse``, API by API. The error goes into every topic, partition,
group, coordinator key or resource the request names, or at the top where Kafka puts it there
(Fetch v13+, OffsetFetch v2-v7, LeaveGroup, the group and transaction APIs); every other field
takes Kafka's "unknown" value (offsets and producer ids -1, no node). A Produce with acks=0 gets no
answer: its connection is closed, Kafka's way of telling such a producer of an error.

Used by :mod:`.request_control` to fail requests on demand."""

from __future__ import annotations

import datetime
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kafkalog.errors import AcksZeroFailure
from kafkalog.server.broker import Broker
from kafkalog.server.handlers.fetch import FIRST_TOPIC_ID as FETCH_FIRST_TOPIC_ID
from kafkalog.server.handlers.fetch import PartitionData, encode_fetch_response
from kafkalog.server.handlers.handler import Response
from kafkalog.server.handlers.produce import FIRST_TOPIC_ID as PRODUCE_FIRST_TOPIC_ID
from kafkalog.server.handlers.produce import PartitionResult, encode_produce_response
from kafkalog.server.requests.kio_build import _nested_type, build
from kafkalog.server.requests.message_schemas import response_schema
from kafkalog.server.requests.protocol import Request

#: Kafka's "no node" (``Node.noNode()``) and its unknown offsets, ids and epochs
NO_NODE = {"node_id": -1, "host": "", "port": -1}
UNKNOWN = -1

Values = dict[str, Any]
#: (request, error code, message) -> the response's values, as :func:`kio_build.build` takes them
Builder = Callable[[Request, int, "str | None"], Values]


def error_response(broker: Broker, request: Request, code: int, message: str | None = None) -> Any:
    """What Kafka answers ``request`` when it fails with error ``code`` (``message``: the error
    message where the response carries one): frame bytes or parts for Produce and Fetch (None
    never: a Produce with acks=0 raises :class:`AcksZeroFailure`, which closes the connection),
    else a kio response entity."""
    key = request.api_key
    if key == 0:
        return _produce(request, code, message)
    if key == 1:
        return _fetch(request, code)
    builder = _BUILDERS.get(key, _top_level)
    values = builder(request, code, message)
    values.setdefault("throttle_time", 0)
    return filled(response_schema(key, request.api_version), values)


def _produce(request: Request, code: int, message: str | None) -> Response:
    body = request.body
    if body.acks == 0:
        raise AcksZeroFailure(f"produce with acks=0 failed with error {code}: closing the connection")
    by_id = request.api_version >= PRODUCE_FIRST_TOPIC_ID
    results = [(td.topic_id if by_id else td.name,
                [PartitionResult(pd.index, code, message=message) for pd in td.partition_data])
               for td in body.topic_data]
    return encode_produce_response(request.correlation_id, request.api_version, results)


def _fetch(request: Request, code: int) -> Response:
    """Fetch v13+ (topic ids): the error at the top and no partitions; before, the error in every
    partition too (older clients read no top-level error)."""
    body = request.body
    version = request.api_version
    topics: list[tuple[Any, list[PartitionData]]] = []
    if version < FETCH_FIRST_TOPIC_ID:
        topics = [(t.topic, [PartitionData(p.partition, code) for p in t.partitions]) for t in body.topics]
    session_id = body.session_id if version >= 7 else 0
    return encode_fetch_response(request.correlation_id, version, code, topics, session_id)


# --- the kio APIs -------------------------------------------------------------------------------

def _top_level(request: Request, code: int, message: str | None) -> Values:
    """The APIs whose response has one error code at the top (the group and transaction APIs,
    InitProducerId, ListGroups, OffsetDelete, ...): that error, every id and epoch unknown."""
    return {"error_code": code, "error_message": message, "producer_id": UNKNOWN,
            "producer_epoch": UNKNOWN, "generation_id": UNKNOWN, "controller_id": UNKNOWN,
            "member_epoch": UNKNOWN}


def _list_offsets(request: Request, code: int, message: str | None) -> Values:
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": code, "offset": UNKNOWN,
         "timestamp": UNKNOWN, "leader_epoch": UNKNOWN} for p in t.partitions]}
        for t in request.body.topics]}


def _metadata(request: Request, code: int, message: str | None) -> Values:
    """Each topic asked for with the error and no partitions (all topics asked for: none), and no
    brokers, as Kafka's."""
    topics = request.body.topics or ()
    return {"brokers": [], "controller_id": UNKNOWN, "topics": [
        {"name": t.name or "", "topic_id": t.topic_id if request.api_version >= 10 else None, "error_code": code,
         "is_internal": False, "partitions": []} for t in topics]}


def _partitions_by_topic(request: Request, code: int, message: str | None) -> Values:
    """OffsetCommit, TxnOffsetCommit: the error in every partition of every topic (named by id from
    OffsetCommit v10)."""
    by_id = request.api_key == 8 and request.api_version >= 10      # OffsetCommit v10: topic_id, no name
    return {"topics": [{"name": "" if by_id else t.name, "topic_id": t.topic_id if by_id else None, "partitions": [
        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
        for t in request.body.topics]}


def _offset_fetch(request: Request, code: int, message: str | None) -> Values:
    body = request.body
    version = request.api_version
    if version < 2:         # no top-level error yet: every partition asked for
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": UNKNOWN, "metadata": "", "error_code": code}
            for p in t.partition_indexes]} for t in body.topics or ()]}
    if version < 8:
        return {"error_code": code, "topics": []}
    return {"groups": [{"group_id": g.group_id, "error_code": code, "topics": []} for g in body.groups]}


def _find_coordinator(request: Request, code: int, message: str | None) -> Values:
    if request.api_version < 4:
        return {"error_code": code, "error_message": message, **NO_NODE}
    return {"coordinators": [{"key": k, "error_code": code, "error_message": message, **NO_NODE}
                             for k in request.body.coordinator_keys]}


def _describe_groups(request: Request, code: int, message: str | None) -> Values:
    return {"groups": [{"group_id": g, "error_code": code, "group_state": "", "protocol_type": "",
                        "protocol_data": "", "members": []} for g in request.body.groups]}


def _api_versions(request: Request, code: int, message: str | None) -> Values:
    """KIP-511: an UNSUPPORTED_VERSION answer lists ApiVersions' own range, so the client retries
    with a version both sides have."""
    from kafkalog.server.handlers.kafka_apis import VERSIONS
    keys = []
    if code == 35:
        lo, hi = VERSIONS[18]
        keys = [{"api_key": 18, "min_version": lo, "max_version": hi}]
    return {"error_code": code, "api_keys": keys}


def _create_topics(request: Request, code: int, message: str | None) -> Values:
    return {"topics": [{"name": t.name, "error_code": code, "error_message": message,
                        "num_partitions": UNKNOWN, "replication_factor": UNKNOWN}
                       for t in request.body.topics]}


def _delete_topics(request: Request, code: int, message: str | None) -> Values:
    body = request.body
    if request.api_version < 6:
        topics = [{"name": n} for n in body.topic_names]
    else:
        topics = [{"name": t.name, "topic_id": t.topic_id} for t in body.topics]
    return {"responses": [{**t, "error_code": code, "error_message": message} for t in topics]}


def _delete_records(request: Request, code: int, message: str | None) -> Values:
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "low_watermark": UNKNOWN, "error_code": code}
        for p in t.partitions]} for t in request.body.topics]}


def _add_partitions_to_txn(request: Request, code: int, message: str | None) -> Values:
    return {"results_by_topic_v3_and_below": [{"name": t.name, "results_by_partition": [
        {"partition_index": p, "partition_error_code": code} for p in t.partitions]}
        for t in request.body.v3_and_below_topics]}


def _resources(field: str) -> Builder:
    """DescribeConfigs (``results``), AlterConfigs and IncrementalAlterConfigs (``responses``):
    every resource."""
    def build_values(request: Request, code: int, message: str | None) -> Values:
        return {field: [{"error_code": code, "error_message": message, "resource_type": r.resource_type,
                         "resource_name": r.resource_name, "configs": []} for r in request.body.resources]}
    return build_values


def _create_partitions(request: Request, code: int, message: str | None) -> Values:
    return {"results": [{"name": t.name, "error_code": code, "error_message": message}
                        for t in request.body.topics]}


def _write_txn_markers(request: Request, code: int, message: str | None) -> Values:
    return {"markers": [{"producer_id": m.producer_id, "topics": [{"name": t.name, "partitions": [
        {"partition_index": p, "error_code": code} for p in t.partition_indexes]} for t in m.topics]}
        for m in request.body.markers]}


def _create_acls(request: Request, code: int, message: str | None) -> Values:
    """One result per creation, as Kafka's ``CreateAclsRequest.getErrorResponse``."""
    return {"results": [{"error_code": code, "error_message": message} for _ in request.body.creations]}


def _delete_acls(request: Request, code: int, message: str | None) -> Values:
    """One result per filter, no ACL matched (``DeleteAclsRequest.getErrorResponse``)."""
    return {"filter_results": [{"error_code": code, "error_message": message, "matching_acls": []}
                               for _ in request.body.filters]}


def _alter_user_scram_credentials(request: Request, code: int, message: str | None) -> Values:
    """One result per user the deletions and upsertions name, sorted, as Kafka's
    ``AlterUserScramCredentialsRequest.getErrorResponse``."""
    body = request.body
    users = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
    return {"results": [{"user": u, "error_code": code, "error_message": message} for u in users]}


def _alter_client_quotas(request: Request, code: int, message: str | None) -> Values:
    """One result per entry with its entity, as Kafka's ``AlterClientQuotasRequest.getErrorResponse``."""
    return {"entries": [{"error_code": code, "error_message": message, "entity": [
        {"entity_type": x.entity_type, "entity_name": x.entity_name} for x in e.entity]}
        for e in request.body.entries]}


def _elect_leaders(request: Request, code: int, message: str | None) -> Values:
    """The error at the top and in every partition named (Kafka's ``ElectLeadersRequest.getErrorResponse``)."""
    asked = request.body.topic_partitions or ()
    return {"error_code": code, "replica_election_results": [{"topic": t.topic, "partition_result": [
        {"partition_id": p, "error_code": code, "error_message": message} for p in t.partitions]} for t in asked]}


def _alter_partition_reassignments(request: Request, code: int, message: str | None) -> Values:
    return {"error_code": 0, "responses": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": code, "error_message": message}
        for p in t.partitions]} for t in request.body.topics]}


def _describe_log_dirs(request: Request, code: int, message: str | None) -> Values:
    """The error at the top and no directories; before v3 the response has no error field, so
    Kafka's error answer is an empty one."""
    return {"error_code": code, "results": []}


def _describe_producers(request: Request, code: int, message: str | None) -> Values:
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p, "error_code": code, "error_message": message, "active_producers": []}
        for p in t.partition_indexes]} for t in request.body.topics]}


def _describe_transactions(request: Request, code: int, message: str | None) -> Values:
    """Each id asked for with the error; its start time Kafka's -1."""
    start = datetime.datetime.fromtimestamp(0, datetime.UTC) + datetime.timedelta(milliseconds=UNKNOWN)
    return {"transaction_states": [{"transactional_id": i, "error_code": code, "producer_id": UNKNOWN,
                                    "producer_epoch": UNKNOWN, "transaction_start_time": start}
                                   for i in request.body.transactional_ids]}


def _describe_topic_partitions(request: Request, code: int, message: str | None) -> Values:
    """Each topic asked for with the error, no partitions, Kafka's zero topic id and its
    "authorized operations not asked" (Integer.MIN_VALUE)."""
    return {"topics": [{"name": t.name, "error_code": code, "topic_id": uuid.UUID(int=0), "is_internal": False,
                        "partitions": [], "topic_authorized_operations": -(2 ** 31)}
                       for t in request.body.topics]}


def _delete_groups(request: Request, code: int, message: str | None) -> Values:
    return {"results": [{"group_id": g, "error_code": code} for g in request.body.groups_names]}


def _leave_group(request: Request, code: int, message: str | None) -> Values:
    return {"error_code": code, "members": []}


def _consumer_group_describe(request: Request, code: int, message: str | None) -> Values:
    return {"groups": [{"group_id": g, "error_code": code, "error_message": message, "group_state": "",
                        "members": []} for g in request.body.group_ids]}


def _describe_share_group_offsets(request: Request, code: int, message: str | None) -> Values:
    """Kafka's ``getErrorDescribeShareGroupOffsets``: the error in every group named, no topics."""
    return {"groups": [{"group_id": g.group_id, "error_code": code, "error_message": message, "topics": []}
                       for g in request.body.groups]}


_BUILDERS: Mapping[int, Builder] = {
    2: _list_offsets,
    3: _metadata,
    8: _partitions_by_topic,
    9: _offset_fetch,
    10: _find_coordinator,
    13: _leave_group,
    15: _describe_groups,
    18: _api_versions,
    19: _create_topics,
    20: _delete_topics,
    21: _delete_records,
    24: _add_partitions_to_txn,
    27: _write_txn_markers,
    28: _partitions_by_topic,
    30: _create_acls,
    31: _delete_acls,
    51: _alter_user_scram_credentials,
    43: _elect_leaders,
    45: _alter_partition_reassignments,
    49: _alter_client_quotas,
    32: _resources("results"),
    33: _resources("responses"),
    35: _describe_log_dirs,
    37: _create_partitions,
    42: _delete_groups,
    44: _resources("responses"),
    61: _describe_producers,
    65: _describe_transactions,
    69: _consumer_group_describe,
    77: _consumer_group_describe,          # ShareGroupDescribe: the same described groups
    89: _consumer_group_describe,          # StreamsGroupDescribe: the same described groups
    90: _describe_share_group_offsets,
    75: _describe_topic_partitions,
}


# --- kio entities with every field set ---------------------------------------------------------

_ZERO: Mapping[str, Any] = {"bool": False, "bytes": b"", "error_code": 0, "int8": 0, "int16": 0,
                            "int32": 0, "int64": 0, "float64": 0.0, "string": "", "uuid": None,
                            "timedelta_i32": 0, "timedelta_i64": 0, "datetime_i64": -1}


@cache
def _fields(cls: type) -> tuple[tuple[str, str, Any, bool], ...]:
    """(name, Kafka type, type hint, required) of each field of a kio entity."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, f.metadata.get("kafka_type", ""), hints[f.name],
                  f.default is MISSING and f.default_factory is MISSING) for f in fields(cls))


def filled(cls: type, values: Mapping[str, Any]) -> Any:
    """``build(cls, values)`` with every field the version requires and ``values`` lacks set to its
    zero (nested entities too; keys the version lacks are dropped)."""
    out: dict[str, Any] = {}
    for name, kafka_type, hint, required in _fields(cls):
        nested = _nested_type(hint)
        if name in values:
            value = values[name]
            if nested is not None and isinstance(value, list):
                value = [filled(nested, v) for v in value]
            elif nested is not None and isinstance(value, Mapping):
                value = filled(nested, value)
            out[name] = value
        elif required:
            if nested is not None:
                out[name] = [] if typing.get_origin(hint) is tuple else None
            elif typing.get_origin(hint) is tuple:
                out[name] = []
            elif type(None) in typing.get_args(hint):
                out[name] = None
            else:
                out[name] = _ZERO.get(kafka_type, 0)
    return build(cls, out)


__all__ = ["error_response", "filled"]
