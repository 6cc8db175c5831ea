"""StreamsGroupHeartbeat and StreamsGroupDescribe (KIP-1071) over ``broker.streams_groups``
(:class:`kafkalog.server.coordinator.streams_group.StreamsGroupCoordinator`): requests in, Kafka's answers out.
Internal topics the heartbeat finds missing are created after the answer, off the event loop, as
Kafka's ``AutoTopicCreationManager.createStreamsInternalTopics`` does."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError, KafkalogIOError
from kafkalog.log.naming import TopicPartition
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.consumer_group import GroupError
from kafkalog.server.coordinator.streams_topology import validate
from kafkalog.server.handlers.consumer_group_heartbeat import check_member_acls
from kafkalog.server.handlers.topics import MAX_ADDITIONAL_PARTITIONS
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, DESCRIBE, GROUP

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")


def _tasks(tasks: Any) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items()) if ps]


def _offsets(offsets: Any) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partition": p, "offset": o}
            for s, ps in sorted(offsets.items()) for p, o in sorted(ps.items())]


def _recovery_lag(request: Request, lag: int) -> int:
    """AcceptableRecoveryLag: v1's 64-bit field; v0's 32-bit one is Kafka 4.4's deprecated
    ``AcceptableRecoveryLagLegacy``, which it never sets (0)."""
    return lag if request.api_version >= 1 else 0


def _error(broker: Broker, request: Request, code: int, message: str | None = None) -> Any:
    return broker.response(request, {
        "throttle_time": 0, "error_code": code, "error_message": message, "member_id": "", "member_epoch": 0,
        "heartbeat_interval": 0, "acceptable_recovery_lag": _recovery_lag(request, -1), "task_offset_interval": 0,
        "status": [],
        "active_tasks": None, "standby_tasks": None, "warmup_tasks": None, "endpoint_information_epoch": 0,
        "partitions_by_user_endpoint": None})


def handle_streams_group_heartbeat(broker: Broker, request: Request) -> Any:
    b = request.body
    coordinator = broker.streams_groups
    try:
        validate(b)
        sources = None if b.topology is None else [t for s in b.topology.subtopologies for t in s.source_topics]
        check_member_acls(broker, b.group_id, sources)
        if broker.log_dir_failure is not None:
            raise GroupError(ec.NOT_COORDINATOR)
        r = coordinator.heartbeat(b, request.client_id or "", "/" + broker.advertised.host, request.api_version)
    except GroupError as e:
        return _error(broker, request, e.code, e.message)
    except KafkalogIOError as e:
        broker.log_dir_failed(TopicPartition("__consumer_offsets", broker.offsets.partition_for(b.group_id)), e)
        return _error(broker, request, ec.NOT_COORDINATOR)
    except KafkalogError as e:
        logger.error("streams group %s: heartbeat failed: %s", b.group_id, e)
        return _error(broker, request, ec.UNKNOWN_SERVER_ERROR)
    except Exception:       # as Kafka answers an unexpected exception, the connection kept
        logger.exception("streams group %s: heartbeat failed", b.group_id)
        return _error(broker, request, ec.UNKNOWN_SERVER_ERROR)
    if r.creatable:
        _create_internal_topics(broker, r.creatable)
    m = r.member
    config = coordinator.config
    left = m.member_epoch < 0          # Kafka's leave answers carry the member and its epoch only
    return broker.response(request, {
        "throttle_time": 0, "error_code": ec.NONE, "error_message": None, "member_id": m.member_id,
        "member_epoch": m.member_epoch,
        "heartbeat_interval": 0 if left else coordinator.heartbeat_interval_ms(b.group_id),
        "acceptable_recovery_lag": _recovery_lag(request, -1 if left else config.acceptable_recovery_lag),
        "task_offset_interval": 0 if left else config.task_offset_interval_ms,
        "status": [{"status_code": c, "status_detail": d} for c, d in r.status],
        "active_tasks": _tasks(m.active) if r.send_assignment else None,
        "standby_tasks": _tasks(m.standby) if r.send_assignment else None,
        "warmup_tasks": _tasks(m.warmup) if r.send_assignment else None,
        "topology_description_required": False,            # (no topology description plugin)
        "endpoint_information_epoch": 0 if left else r.endpoint_information_epoch,
        "partitions_by_user_endpoint": r.endpoints})


def _create_internal_topics(broker: Broker, topics: dict[str, tuple[int, int, dict[str, str]]]) -> None:
    """Create the missing internal topics on a worker thread (each once at a time); the groups see
    them at their next heartbeat."""
    creating: set[str] = broker.streams_groups_creating
    todo = {}
    for name, spec in topics.items():
        if name in creating:
            continue
        if not 1 <= spec[0] <= MAX_ADDITIONAL_PARTITIONS:      # (a member's topology names the count)
            logger.warning("not creating the streams internal topic %s: %d partitions is outside 1..%d",
                           name, spec[0], MAX_ADDITIONAL_PARTITIONS)
            continue
        todo[name] = spec
    if not todo:
        return
    creating.update(todo)

    async def create() -> None:
        try:
            for name, (partitions, _rf, configs) in sorted(todo.items()):
                try:
                    await asyncio.to_thread(broker.create_topic_partitions, name, partitions, configs)
                except KafkalogError as e:
                    logger.warning("cannot create the streams internal topic %s: %s", name, e)
            broker.consumer_groups.topics_changed(todo)
        finally:
            creating.difference_update(todo)
    task = asyncio.get_running_loop().create_task(create())
    broker.streams_groups_tasks.add(task)
    task.add_done_callback(broker.streams_groups_tasks.discard)


def handle_streams_group_describe(broker: Broker, request: Request) -> Any:
    coordinator = broker.streams_groups
    include_description = request.api_version >= 1 and request.body.include_topology_description     # v1+
    # an empty group id is INVALID_GROUP_ID, answered first (Kafka answers it before it asks the
    # coordinator about the others)
    ids = list(request.body.group_ids)
    groups: list[dict[str, Any]] = [{
        "group_id": "", "error_code": ec.INVALID_GROUP_ID, "error_message": None, "group_state": "",
        "group_epoch": 0, "assignment_epoch": 0, "topology": None, "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED} for gid in ids if not gid]
    for gid in ids:
        if not gid:
            continue
        empty = {"group_id": gid, "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "topology": None,
                 "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        if broker.authorizer is not None and not broker.authorize(DESCRIBE, GROUP, gid):
            groups.append({**empty, "error_code": ec.GROUP_AUTHORIZATION_FAILED, "error_message": None})
            continue
        g = coordinator.groups.get(gid)
        if g is None:
            exists = broker.group_exists(gid)
            groups.append({**empty, "error_code": ec.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {gid} is not a streams group." if exists
                           else f"Group {gid} not found."})
            continue
        members = []
        for m in g.members.values():
            target = g.target.get(m.member_id, ({}, {}, {}))
            members.append({
                "member_id": m.member_id, "member_epoch": m.member_epoch, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
                "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                "user_endpoint": None if m.user_endpoint is None else
                {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in m.client_tags],
                "task_offsets": _offsets(g.task_offsets.get(m.member_id, ({}, {}))[0]),
                "task_end_offsets": _offsets(g.task_offsets.get(m.member_id, ({}, {}))[1]),
                "assignment": {"active_tasks": _tasks(m.active), "standby_tasks": _tasks(m.standby),
                               "warmup_tasks": _tasks(m.warmup)},
                "target_assignment": {"active_tasks": _tasks(target[0]), "standby_tasks": _tasks(target[1]),
                                      "warmup_tasks": _tasks(target[2])},
                "is_classic": False})
        topology = None if g.topology is None else {"epoch": g.topology["epoch"], "subtopologies": [{
            "subtopology_id": s["subtopology_id"], "source_topics": s["source_topics"],
            "repartition_sink_topics": s["repartition_sink_topics"],
            "state_changelog_topics": s["state_changelog_topics"],
            "repartition_source_topics": s["repartition_source_topics"]} for s in g.topology["subtopologies"]]}
        groups.append({"error_code": ec.NONE, "error_message": None, "group_id": gid, "group_state": g.state,
                       # v1: the assignor's name; a description asked for is NOT_STORED (1): no plugin
                       "assignor_name": "sticky", "topology_description": None,
                       "topology_description_status": 1 if include_description else 0,
                       "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
                       "topology": topology, "members": members,
                       "authorized_operations": broker.operations(
                           GROUP, gid, bool(request.body.include_authorized_operations))})
    return broker.response(request, {"throttle_time": 0, "groups": groups})
