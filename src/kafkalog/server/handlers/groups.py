"""The classic group protocol's requests: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ListGroups, DescribeGroups, DeleteGroups. The state lives in
:class:`kafkalog.server.coordinator.classic_group.GroupCoordinator` (``broker.groups``); committed offsets in
``broker.offsets`` (:mod:`kafkalog.server.handlers.offset_commit`)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import TYPE_CHECKING, Any

from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.classic_group import DEAD, EMPTY, STABLE, JoinResult, SyncResult
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER,
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TRANSACTIONAL_ID,
)
from kafkalog.server.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
#: KIP-932: a share partition's share coordinator ("group:topicId:partition")
SHARE_KEY_TYPE = 2


def ms(value: Any) -> int:
    """A kio duration (``timedelta``) or an int, in milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


# --- FindCoordinator ------------------------------------------------------------------------------

def handle_find_coordinator(broker: Broker, request: Request) -> Any:
    body = request.body
    host, port = broker.advertised.host, broker.advertised.port

    # Kafka's messages: its default message of the error ("NONE" before v4, "" per key from v4)
    batched = request.api_version >= 4

    def one(key: str, key_type: int) -> dict[str, Any]:
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, SHARE_KEY_TYPE):
            return {"key": key, "node_id": -1, "host": "", "port": -1,
                    "error_code": ec.INVALID_REQUEST, "error_message": ec.message(ec.INVALID_REQUEST)}
        if broker.authorizer is not None:
            # Kafka: DESCRIBE on the group (a share key "group:topicId:partition": its group) or transactional id
            rtype, name = (TRANSACTIONAL_ID, key) if key_type == TRANSACTION_KEY_TYPE else \
                (GROUP, key.split(":", 1)[0] if key_type == SHARE_KEY_TYPE else key)
            if not broker.authorize(DESCRIBE, rtype, name):
                code = ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if rtype == TRANSACTIONAL_ID else \
                    ec.GROUP_AUTHORIZATION_FAILED
                return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code,
                        "error_message": "" if batched else ec.message(code)}
        if _internal_topic_unavailable(broker, key_type):
            return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ec.COORDINATOR_NOT_AVAILABLE,
                    "error_message": "" if batched else ec.message(ec.COORDINATOR_NOT_AVAILABLE)}
        return {"key": key, "node_id": broker.node_id, "host": host, "port": port, "error_code": 0,
                "error_message": "" if batched else ec.message(ec.NONE)}

    if request.api_version >= 4:
        return broker.response(request, {"throttle_time": 0, "coordinators": [
            one(k, body.key_type) for k in body.coordinator_keys]})
    key_type = body.key_type if request.api_version >= 1 else GROUP_KEY_TYPE
    values = one(body.key, key_type)
    values["throttle_time"] = 0
    return broker.response(request, values)


#: a coordinator key type -> its internal topic and the broker key of that topic's replication factor
_INTERNAL_TOPIC_OF = {GROUP_KEY_TYPE: ("__consumer_offsets", "offsets.topic.replication.factor"),
                      TRANSACTION_KEY_TYPE: ("__transaction_state", "transaction.state.log.replication.factor"),
                      SHARE_KEY_TYPE: ("__share_group_state", "share.coordinator.state.topic.replication.factor")}


def _internal_topic_unavailable(broker: Broker, key_type: int) -> bool:
    """Kafka on one node cannot create an internal topic with more replicas than brokers: its
    coordinators stay unavailable (COORDINATOR_NOT_AVAILABLE) until the topic exists."""
    topic, key = _INTERNAL_TOPIC_OF[key_type]
    return broker.config.values[key] > 1 and not broker.manager.has_topic(topic)


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

def _join_values(request: Request, r: JoinResult) -> dict[str, Any]:
    legacy = request.api_version < 7       # protocol_name not nullable before v7
    return {"throttle_time": 0, "error_code": r.error_code, "generation_id": r.generation_id,
            "protocol_type": r.protocol_type,
            "protocol_name": (r.protocol_name or "") if legacy else r.protocol_name,
            "leader": r.leader, "skip_assignment": False, "member_id": r.member_id,
            "members": [{"member_id": m, "group_instance_id": i, "metadata": meta}
                        for m, i, meta in r.members]}


def _group_denied(broker: Broker, group: str, op: int = READ) -> bool:
    """With an authorizer: the session may not do ``op`` (READ: join, sync, heartbeat, leave) on the group."""
    return broker.authorizer is not None and not broker.authorize(op, GROUP, group)


async def handle_join_group(broker: Broker, request: Request) -> Any:
    b = request.body
    v = request.api_version
    denied = _group_denied(broker, b.group_id)
    if denied or b.group_id in broker.streams_groups.groups:     # (a streams group takes no classic member)
        return broker.response(request, {
            "throttle_time": 0,
            "error_code": ec.GROUP_AUTHORIZATION_FAILED if denied else ec.INCONSISTENT_GROUP_PROTOCOL,
            "generation_id": -1, "protocol_type": None, "protocol_name": "" if v < 7 else None, "leader": "",
            "skip_assignment": False, "member_id": "", "members": []})
    consumer_group = broker.consumer_groups.groups.get(b.group_id)
    if consumer_group is not None:
        if consumer_group.members:       # a classic member joining a consumer group (KIP-848)
            r = broker.group_migration.join(
                b.group_id, b.member_id, b.group_instance_id if v >= 5 else None, request.client_id or "",
                "/" + broker.advertised.host, ms(b.session_timeout), ms(b.rebalance_timeout) if v >= 1
                else ms(b.session_timeout), b.protocol_type, [(p.name, bytes(p.metadata)) for p in b.protocols],
                require_known_member_id=v >= 4)
            return broker.response(request, _join_values(request, r))
        broker.group_migration.take_over_empty_consumer_group(b.group_id)
    session = ms(b.session_timeout)
    rebalance = ms(b.rebalance_timeout) if v >= 1 else session
    instance = b.group_instance_id if v >= 5 else None
    result = broker.groups.join(
        b.group_id, b.member_id, instance, request.client_id or "", "/" + broker.advertised.host,
        session, rebalance, b.protocol_type, [(p.name, bytes(p.metadata)) for p in b.protocols],
        require_known_member_id=v >= 4, loop=asyncio.get_running_loop())
    if isinstance(result, asyncio.Future):
        result = await result
    if result.error_code == ec.NONE:
        logger.info("group %s: member %s joined generation %d", b.group_id, result.member_id,
                    result.generation_id)
    return broker.response(request, _join_values(request, result))


async def handle_sync_group(broker: Broker, request: Request) -> Any:
    b = request.body
    v = request.api_version
    instance = b.group_instance_id if v >= 3 else None
    if _group_denied(broker, b.group_id):
        return broker.response(request, {"throttle_time": 0, "error_code": ec.GROUP_AUTHORIZATION_FAILED,
                                         "protocol_type": None, "protocol_name": None, "assignment": b""})
    if b.group_id in broker.consumer_groups.groups:
        r = broker.group_migration.sync(b.group_id, b.generation_id, b.member_id, instance,
                                        b.protocol_type if v >= 5 else None, b.protocol_name if v >= 5 else None)
        return broker.response(request, {"throttle_time": 0, "error_code": r.error_code,
                                         "protocol_type": r.protocol_type, "protocol_name": r.protocol_name,
                                         "assignment": r.assignment})
    result: SyncResult | asyncio.Future[SyncResult] = broker.groups.sync(
        b.group_id, b.generation_id, b.member_id, instance,
        {a.member_id: bytes(a.assignment) for a in b.assignments}, asyncio.get_running_loop())
    if isinstance(result, asyncio.Future):
        result = await result
    return broker.response(request, {"throttle_time": 0, "error_code": result.error_code,
                                     "protocol_type": result.protocol_type,
                                     "protocol_name": result.protocol_name,
                                     "assignment": result.assignment})


def handle_heartbeat(broker: Broker, request: Request) -> Any:
    b = request.body
    instance = b.group_instance_id if request.api_version >= 3 else None
    if _group_denied(broker, b.group_id):
        err = ec.GROUP_AUTHORIZATION_FAILED
    elif b.group_id in broker.consumer_groups.groups:
        err = broker.group_migration.heartbeat(b.group_id, b.generation_id, b.member_id, instance)
    else:
        err = broker.groups.heartbeat(b.group_id, b.generation_id, b.member_id, instance)
    return broker.response(request, {"throttle_time": 0, "error_code": err})


def handle_leave_group(broker: Broker, request: Request) -> Any:
    b = request.body
    if _group_denied(broker, b.group_id):
        return broker.response(request, {"throttle_time": 0, "error_code": ec.GROUP_AUTHORIZATION_FAILED,
                                         "members": []})
    leave = broker.groups.leave
    if b.group_id in broker.consumer_groups.groups:
        leave = broker.group_migration.leave
    if request.api_version < 3:
        err = leave(b.group_id, [(b.member_id, None)])[0]
        return broker.response(request, {"throttle_time": 0, "error_code": err})
    members = [(m.member_id, m.group_instance_id) for m in b.members]
    errs = leave(b.group_id, members)
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "members": [
        {"member_id": m, "group_instance_id": i, "error_code": e}
        for (m, i), e in zip(members, errs, strict=True)]})


# --- ListGroups, DescribeGroups, DeleteGroups -----------------------------------------------------

def _group_states(broker: Broker) -> dict[str, tuple[str, str]]:
    """classic group -> (state, protocol type) for every classic group known (groups with only
    offsets: Empty), consumer groups (KIP-848) and share groups (KIP-932) left out."""
    consumer, share = broker.consumer_groups.groups, broker.share_groups.groups
    streams = broker.streams_groups.groups
    out = {g: (EMPTY, "consumer") for g in broker.offsets.groups()
           if g not in consumer and g not in share and g not in streams}
    for gid, g in broker.groups.groups.items():
        out[gid] = (g.state, g.protocol_type or (out.get(gid, (EMPTY, ""))[1]))
    return out


def handle_list_groups(broker: Broker, request: Request) -> Any:
    b = request.body
    states = {s.lower() for s in b.states_filter} if request.api_version >= 4 else set()
    types = {t.lower() for t in b.types_filter} if request.api_version >= 5 else set()
    listed = [(gid, state, ptype, "classic") for gid, (state, ptype) in _group_states(broker).items()]
    listed += [(gid, g.state, "consumer", "consumer") for gid, g in broker.consumer_groups.groups.items()]
    listed += [(gid, g.state, "share", "share") for gid, g in broker.share_groups.groups.items()]
    listed += [(gid, g.state, "streams", "streams") for gid, g in broker.streams_groups.groups.items()]
    groups = []
    if broker.authorizer is not None and not broker.authorize(DESCRIBE, CLUSTER, CLUSTER_NAME):
        listed = [g for g in listed if broker.authorize(DESCRIBE, GROUP, g[0])]
    for gid, state, ptype, gtype in sorted(listed):
        if state == DEAD or (states and state.lower() not in states) or (types and gtype not in types):
            continue
        groups.append({"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": gtype})
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "groups": groups})


def handle_describe_groups(broker: Broker, request: Request) -> Any:
    known = _group_states(broker)
    out = []
    for gid in request.body.groups:
        g = broker.groups.groups.get(gid)
        if _group_denied(broker, gid, DESCRIBE):
            out.append({"error_code": ec.GROUP_AUTHORIZATION_FAILED, "error_message": None, "group_id": gid,
                        "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        if (gid in broker.consumer_groups.groups or gid in broker.share_groups.groups
                or gid in broker.streams_groups.groups):                                 # not classic
            out.append({"error_code": ec.GROUP_ID_NOT_FOUND if request.api_version >= 6 else 0,
                        "error_message": f"Group {gid} is not a classic group.",
                        "group_id": gid, "group_state": DEAD, "protocol_type": "",
                        "protocol_data": "", "members": [],
                        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        if gid not in known:
            v6 = request.api_version >= 6
            out.append({"error_code": ec.GROUP_ID_NOT_FOUND if v6 else 0,
                        "error_message": f"Group {gid} not found." if v6 else None, "group_id": gid,
                        "group_state": DEAD, "protocol_type": "", "protocol_data": "", "members": [],
                        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        state, ptype = known[gid]
        members = []
        if g is not None:
            for m in g.members.values():
                stable = g.state == STABLE
                members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "client_id": m.client_id, "client_host": m.client_host,
                                "member_metadata": m.metadata(g.protocol) if stable else b"",
                                "member_assignment": m.assignment if stable else b""})
        out.append({"error_code": 0, "group_id": gid, "group_state": state, "protocol_type": ptype,
                    "protocol_data": (g.protocol or "") if g is not None and g.state == STABLE else "",
                    "members": members, "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
    # as Kafka: the group's operations (when asked) on every answer without an error
    requested = request.api_version >= 3 and request.body.include_authorized_operations     # v3+
    for answer in out:
        if answer["error_code"] == 0:
            answer["authorized_operations"] = broker.operations(GROUP, answer["group_id"], requested)
    return broker.response(request, {"throttle_time": 0, "groups": out})


def handle_delete_groups(broker: Broker, request: Request) -> Any:
    results = []
    known = _group_states(broker)
    for gid in request.body.groups_names:
        if _group_denied(broker, gid, DELETE):
            err = ec.GROUP_AUTHORIZATION_FAILED
        elif gid in broker.consumer_groups.groups:
            err = broker.consumer_groups.delete(gid)
            if err == ec.NONE:
                broker.offsets.delete_group(gid)
                logger.info("deleted group %s", gid)
        elif gid in broker.share_groups.groups:
            err = broker.delete_share_group(gid)
        elif gid in broker.streams_groups.groups:
            err = broker.streams_groups.delete(gid)
            if err == ec.NONE:
                broker.offsets.delete_group(gid)
                logger.info("deleted group %s", gid)
        elif gid not in known:
            err = ec.GROUP_ID_NOT_FOUND
        else:
            err = broker.groups.delete(gid)
            if err == ec.NONE:
                broker.offsets.delete_group(gid)
                logger.info("deleted group %s", gid)
        results.append({"group_id": gid, "error_code": err})
    return broker.response(request, {"throttle_time": 0, "results": results})
