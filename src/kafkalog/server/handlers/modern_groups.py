"""What the handlers of the modern group protocols' APIs share (ConsumerGroupHeartbeat and
ConsumerGroupDescribe, ShareGroupHeartbeat and ShareGroupDescribe, ShareFetch; a streams group's
next): a kio duration in milliseconds, a heartbeat whose write failed, and the loop of a groups'
Describe."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
from kafkalog.errors import KafkalogError, KafkalogIOError
from kafkalog.log.naming import TopicPartition
from kafkalog.server import error_codes as ec
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, DESCRIBE, GROUP

if TYPE_CHECKING:      # the state the handlers share
    from kafkalog.server.broker import Broker

__all__ = ["describe_failure", "describe_groups", "heartbeat_error", "heartbeat_failure", "ms"]

logger = logging.getLogger("kafkalog.server")

G = TypeVar("G")


def ms(value: Any) -> int:
    """A duration field of a request (kio: a ``timedelta``, or an int of ms) in milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def describe_failure(group_id: str, code: int, message: str | None) -> dict[str, Any]:
    """A group of a ConsumerGroupDescribe or ShareGroupDescribe answered with an error only."""
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def describe_groups(broker: Broker, request: Request, groups: Mapping[str, G], kind: str,
                    exists: Callable[[str], bool],
                    describe: Callable[[str, G], dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups a ConsumerGroupDescribe or ShareGroupDescribe names, in its order: DESCRIBE on
    each needed (GROUP_AUTHORIZATION_FAILED), GROUP_ID_NOT_FOUND for an id that is no group of
    ``kind`` (naming it when another kind of group has it, ``exists``), else ``describe(id, group)``."""
    out = []
    for gid in request.body.group_ids:
        g = groups.get(gid)
        if broker.authorizer is not None and not broker.authorize(DESCRIBE, GROUP, gid):
            out.append(describe_failure(gid, ec.GROUP_AUTHORIZATION_FAILED, None))
        elif g is None:
            out.append(describe_failure(gid, ec.GROUP_ID_NOT_FOUND, f"Group {gid} is not a {kind} group."
                                        if exists(gid) else f"Group {gid} not found."))
        else:
            out.append(describe(gid, g))
    return out


def heartbeat_failure(broker: Broker, kind: str, group_id: str, e: KafkalogError) -> int:
    """The error a heartbeat of a ``kind`` group answers when writing its records failed: the data
    directory's I/O failure takes it offline (NOT_COORDINATOR), anything else is logged
    (UNKNOWN_SERVER_ERROR)."""
    if isinstance(e, KafkalogIOError):
        broker.log_dir_failed(TopicPartition(CONSUMER_OFFSETS_TOPIC, broker.offsets.partition_for(group_id)), e)
        return ec.NOT_COORDINATOR
    logger.error("%s group %s: heartbeat failed: %s", kind, group_id, e)
    return ec.UNKNOWN_SERVER_ERROR


def heartbeat_error(broker: Broker, request: Request, code: int, message: str | None = None) -> Any:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat answered with an error only."""
    return broker.response(request, {"throttle_time": 0, "error_code": code, "error_message": message,
                                     "member_id": None, "member_epoch": 0, "heartbeat_interval": 0,
                                     "assignment": None})
