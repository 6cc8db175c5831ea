"""The replica administration a single node answers (Kafka's controller ``ReplicationControlManager``):
ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments. This node holds the only
replica of every partition and leads it, so no election is ever needed and no reassignment is ever in
progress; a reassignment to this node alone is a no-op that succeeds, one naming another broker is
refused as Kafka refuses a broker that is not registered. Each needs ALTER (List: DESCRIBE) on the
cluster (checked against Kafka 4.4 by the ``replica_admin`` session of tests/server/test_differential.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.server.error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    ELECTION_NOT_NEEDED,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REQUEST,
    NO_REASSIGNMENT_IN_PROGRESS,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER, CLUSTER, DESCRIBE

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

CLUSTER_NAME = "kafka-cluster"
_NOT_NEEDED = "Leader election not needed for topic partition."


def denied(request: Request, op: str) -> str:
    """Kafka's controller's refusal (it names its request object: docs/kafka-compatibility.md)."""
    return f"Request {request.describe()} needs {op} permission."


def _election(broker: Broker, topic: str, partition: int) -> tuple[int, str]:
    if not broker.manager.has_topic(topic):
        return UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    if broker.log(topic, partition) is None:
        return UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    return ELECTION_NOT_NEEDED, _NOT_NEEDED


def handle_elect_leaders(broker: Broker, request: Request) -> Any:
    body = request.body
    election = 0 if request.api_version == 0 else body.election_type
    asked = body.topic_partitions
    if not broker.authorize(ALTER, CLUSTER, CLUSTER_NAME):
        top, why = CLUSTER_AUTHORIZATION_FAILED, denied(request, "ALTER")
    elif election not in (0, 1):
        top, why = INVALID_REQUEST, f"Unknown election type {election}"
    else:
        top, why = 0, ""
    results: list[dict[str, Any]]
    if asked is None:
        # every partition: each topic listed, without the partitions whose election is not needed
        results = [] if top else [{"topic": t, "partition_result": []} for t in broker.manager.topics()]
    else:
        results = [{"topic": tp.topic, "partition_result": [
            {"partition_id": p, **dict(zip(("error_code", "error_message"),
                                           (top, why) if top else _election(broker, tp.topic, p), strict=True))}
            for p in tp.partitions]} for tp in asked]
    return broker.response(request, {"throttle_time": 0, "error_code": top, "replica_election_results": results})


def _reassignment(broker: Broker, topic: str, partition: int, replicas: Any) -> tuple[int, str | None]:
    if not broker.manager.has_topic(topic):
        return UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if broker.log(topic, partition) is None:
        return UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
    if replicas is None:                # a cancellation: nothing is ever in progress
        return NO_REASSIGNMENT_IN_PROGRESS, None
    if not replicas:
        return INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):  # Kafka's validateManualPartitionAssignment, in id order
        if broker_id != broker.node_id:
            return INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes broker {broker_id}, "
                                                "but no such broker is registered.")
        if broker_id == previous:
            return INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes the broker {previous} "
                                                "more than once.")
        previous = broker_id
    return 0, None                      # its replicas already: nothing to move


def handle_alter_partition_reassignments(broker: Broker, request: Request) -> Any:
    body = request.body
    allowed = broker.authorize(ALTER, CLUSTER, CLUSTER_NAME)
    responses = [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         **dict(zip(("error_code", "error_message"),
                    _reassignment(broker, t.name, p.partition_index, p.replicas) if allowed
                    else (CLUSTER_AUTHORIZATION_FAILED, denied(request, "ALTER")), strict=True))}
        for p in t.partitions]} for t in body.topics]
    return broker.response(request, {
        "throttle_time": 0, "error_code": 0 if allowed else CLUSTER_AUTHORIZATION_FAILED,
        "error_message": (None if body.topics else "") if allowed else denied(request, "ALTER"),
        "allow_replication_factor_change": body.allow_replication_factor_change if request.api_version >= 1 else True,
        "responses": responses})


def handle_list_partition_reassignments(broker: Broker, request: Request) -> Any:
    if not broker.authorize(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return broker.response(request, {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                         "error_message": denied(request, "DESCRIBE"), "topics": []})
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": []})
