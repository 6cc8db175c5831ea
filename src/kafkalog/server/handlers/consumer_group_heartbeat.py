"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) over ``broker.consumer_groups``
(:class:`kafkalog.server.coordinator.consumer_group.ConsumerGroupCoordinator`): requests in, Kafka's answers out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.consumer_group import ConsumerGroup
from kafkalog.server.coordinator.group import GroupError
from kafkalog.server.handlers.modern_groups import describe_groups, heartbeat_error, heartbeat_failure, ms
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, DESCRIBE, GROUP, READ, TOPIC

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")



def check_member_acls(broker: Broker, group_id: str, subscribed: Any) -> None:
    """Kafka's checks of a ConsumerGroupHeartbeat or ShareGroupHeartbeat with an authorizer: READ on the
    group, DESCRIBE on each subscribed topic (GroupError with its code and message otherwise)."""
    if broker.authorizer is None:
        return
    if not broker.authorize(READ, GROUP, group_id):
        raise GroupError(ec.GROUP_AUTHORIZATION_FAILED)
    denied = sorted(t for t in subscribed or () if not broker.authorize(DESCRIBE, TOPIC, t))
    if denied:
        raise GroupError(ec.TOPIC_AUTHORIZATION_FAILED,
                         f"The group member is not authorized to describe topics {denied}.")


def handle_consumer_group_heartbeat(broker: Broker, request: Request) -> Any:
    b = request.body
    owned = None if b.topic_partitions is None else [
        (t.topic_id, list(t.partitions)) for t in b.topic_partitions]
    try:
        check_member_acls(broker, b.group_id, b.subscribed_topic_names)
        if broker.log_dir_failure is not None:
            raise GroupError(ec.NOT_COORDINATOR)
        if b.group_id in broker.streams_groups.groups:
            raise GroupError(ec.GROUP_ID_NOT_FOUND, f"Group {b.group_id} is not a consumer group.")
        r = broker.consumer_groups.heartbeat(
            b.group_id, b.member_id, b.member_epoch, b.instance_id, b.rack_id, ms(b.rebalance_timeout),
            None if b.subscribed_topic_names is None else list(b.subscribed_topic_names),
            b.subscribed_topic_regex if request.api_version >= 1 else None,       # v1+ (KIP-848 regexes)
            b.server_assignor, owned, request.client_id or "",
            "/" + broker.advertised.host, api_version=request.api_version)
    except GroupError as e:
        return heartbeat_error(broker, request, e.code, e.message)
    except KafkalogError as e:
        return heartbeat_error(broker, request, heartbeat_failure(broker, "consumer", b.group_id, e))
    assignment = None if r.assignment is None else {"topic_partitions": [
        {"topic_id": t, "partitions": sorted(ps)} for t, ps in r.assignment.items()]}
    return broker.response(request, {"throttle_time": 0, "error_code": ec.NONE, "error_message": None,
                                     "member_id": r.member_id, "member_epoch": r.member_epoch,
                                     "heartbeat_interval": r.heartbeat_interval_ms, "assignment": assignment})


def _partitions(broker: Broker, assignment: Any) -> list[dict[str, Any]]:
    out = []
    for topic_id, parts in assignment.items():
        name = broker.topic_ids.name_of(topic_id)
        if name is not None:
            out.append({"topic_id": topic_id, "topic_name": name, "partitions": sorted(parts)})
    return out


def handle_consumer_group_describe(broker: Broker, request: Request) -> Any:
    coordinator = broker.consumer_groups

    def describe(gid: str, g: ConsumerGroup) -> dict[str, Any]:
        members = []
        for m in g.members.values():
            current: dict[Any, set[int]] = {}
            for source in (m.assigned, m.pending_revocation):
                for t, ps in source.items():
                    current.setdefault(t, set()).update(ps)
            members.append({
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": {"topic_partitions": _partitions(broker, current)},
                "target_assignment": {"topic_partitions": _partitions(broker, g.target.get(m.member_id, {}))},
                "member_type": 0 if m.uses_classic_protocol else 1})
        return {"error_code": ec.NONE, "error_message": None, "group_id": gid, "group_state": g.state,
                "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.preferred_assignor() or coordinator.default_assignor,
                "members": members, "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    groups = describe_groups(
        broker, request, coordinator.groups, "consumer",
        lambda gid: gid in broker.groups.groups or broker.offsets.has_group(gid), describe)
    requested = bool(request.body.include_authorized_operations)
    for answer in groups:          # as Kafka: the group's operations (when asked) where no error
        if answer["error_code"] == 0:
            answer["authorized_operations"] = broker.operations(GROUP, answer["group_id"], requested)
    return broker.response(request, {"throttle_time": 0, "groups": groups})
