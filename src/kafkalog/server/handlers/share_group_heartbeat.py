"""ShareGroupHeartbeat and ShareGroupDescribe (KIP-932) over ``broker.share_groups``
(:class:`kafkalog.server.coordinator.share_group.ShareGroupCoordinator`): requests in, Kafka's answers out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.group import GroupError
from kafkalog.server.coordinator.share_group import ShareGroup
from kafkalog.server.handlers.consumer_group_heartbeat import check_member_acls
from kafkalog.server.handlers.modern_groups import describe_groups, heartbeat_error, heartbeat_failure
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import AUTHORIZED_OPERATIONS_OMITTED

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")


def handle_share_group_heartbeat(broker: Broker, request: Request) -> Any:
    b = request.body
    try:
        check_member_acls(broker, b.group_id, b.subscribed_topic_names)
        if broker.log_dir_failure is not None:
            raise GroupError(ec.NOT_COORDINATOR)
        r = broker.share_groups.heartbeat(
            b.group_id, b.member_id, b.member_epoch, b.rack_id,
            None if b.subscribed_topic_names is None else list(b.subscribed_topic_names),
            request.client_id or "", "/" + broker.advertised.host)
    except GroupError as e:
        return heartbeat_error(broker, request, e.code, e.message)
    except KafkalogError as e:
        return heartbeat_error(broker, request, heartbeat_failure(broker, "share", b.group_id, e))
    assignment = None if r["assignment"] is None else {"topic_partitions": [
        {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(r["assignment"].items())]}
    return broker.response(request, {"throttle_time": 0, "error_code": ec.NONE, "error_message": None,
                                     "member_id": r["member_id"], "member_epoch": r["member_epoch"],
                                     "heartbeat_interval": r["heartbeat_interval"], "assignment": assignment})


def _partitions(broker: Broker, assignment: Any) -> list[dict[str, Any]]:
    out = []
    for topic_id, parts in sorted(assignment.items()):
        name = broker.topic_ids.name_of(topic_id)
        if name is not None and parts:
            out.append({"topic_id": topic_id, "topic_name": name, "partitions": sorted(parts)})
    return out


def handle_share_group_describe(broker: Broker, request: Request) -> Any:
    def describe(gid: str, g: ShareGroup) -> dict[str, Any]:
        members = [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed),
                    "assignment": {"topic_partitions": _partitions(broker, m.assigned)}}
                   for m in g.members.values()]
        return {"error_code": ec.NONE, "error_message": None, "group_id": gid, "group_state": g.state,
                "group_epoch": g.epoch, "assignment_epoch": g.assignment_epoch, "assignor_name": "simple",
                "members": members, "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    groups = describe_groups(broker, request, broker.share_groups.groups, "share", broker.group_exists, describe)
    return broker.response(request, {"throttle_time": 0, "groups": groups})
