"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets (KIP-932): a share
group's start offsets (SPSO) per partition as the share coordinator holds them
(``__share_group_state``), with the lag (v1: the high watermark less the start offset and the
records already settled above it); set for an empty group (its partitions' states initialized
again at the given offsets) or deleted, as Kafka 4.4 answers them.

With an authorizer, Kafka 4.4's checks: Describe needs DESCRIBE on the group (else the group's
GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each topic (a named topic refused: its partitions'
TOPIC_AUTHORIZATION_FAILED, after the others; all the group's topics: the refused ones left out); Alter
needs READ on the group (else the whole request's GROUP_AUTHORIZATION_FAILED) and READ on each topic
(its partitions' TOPIC_AUTHORIZATION_FAILED); Delete needs DELETE on the group and READ on each topic
(the topic's TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.group import GroupError
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import DELETE, DESCRIBE, GROUP, READ, TOPIC

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

_UNKNOWN = "This server does not host this topic-partition."


def _partition(broker: Broker, group: str, name: str, topic_id: uuid.UUID, p: int, with_lag: bool) -> dict[str, Any]:
    stored = broker.share_state.read(group, topic_id, p)
    start = -1 if stored is None else stored.start_offset
    lag = -1
    if with_lag and start >= 0:
        log = broker.log(name, p)
        if log is not None:
            hw = log.fetch_offset_snapshot()[1]
            done = max(stored.delivery_complete_count, 0) if stored is not None else 0
            lag = max(hw - start - done, 0)
    return {"partition_index": p, "start_offset": start,
            "leader_epoch": 0 if stored is None else max(stored.leader_epoch, 0),      # as Kafka answers
            "lag": lag, "error_code": ec.NONE, "error_message": None}


def _allowed(broker: Broker, op: int, rtype: int, name: str) -> bool:
    return broker.authorizer is None or broker.authorize(op, rtype, name)


def _refused_topic(name: str, parts: list[int]) -> dict[str, Any]:
    return {"topic_name": name, "topic_id": uuid.UUID(int=0), "partitions": [
        {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
         "error_code": ec.TOPIC_AUTHORIZATION_FAILED, "error_message": ec.message(ec.TOPIC_AUTHORIZATION_FAILED)}
        for p in parts]}


def handle_describe_share_group_offsets(broker: Broker, request: Request) -> Any:
    with_lag = request.api_version >= 1
    groups = []
    for g in request.body.groups:
        if not _allowed(broker, DESCRIBE, GROUP, g.group_id):
            groups.append({"group_id": g.group_id, "topics": [], "error_code": ec.GROUP_AUTHORIZATION_FAILED,
                           "error_message": None})
            continue
        topics = []
        refused: list[dict[str, Any]] = []
        if g.topics is None:                          # every initialized partition of the group
            sg = broker.share_groups.groups.get(g.group_id)
            wanted = [] if sg is None else [(name, sorted(ps)) for _t, (name, ps) in sorted(sg.initialized.items())
                                            if _allowed(broker, DESCRIBE, TOPIC, name)]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics
                      if _allowed(broker, DESCRIBE, TOPIC, t.topic_name)]
            refused = [_refused_topic(t.topic_name, list(t.partitions)) for t in g.topics
                       if not _allowed(broker, DESCRIBE, TOPIC, t.topic_name)]
        for name, parts in wanted:
            if not broker.manager.has_topic(name):
                topics.append({"topic_name": name, "topic_id": uuid.UUID(int=0), "partitions": [   # as Kafka
                    {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                     "error_code": ec.NONE, "error_message": None} for p in parts]})
                continue
            topic_id = broker.topic_ids.of(name)
            topics.append({"topic_name": name, "topic_id": topic_id,
                           "partitions": [_partition(broker, g.group_id, name, topic_id, p, with_lag) for p in parts]})
        groups.append({"group_id": g.group_id, "topics": topics + refused, "error_code": ec.NONE,
                       "error_message": None})
    return broker.response(request, {"throttle_time": 0, "groups": groups})


def _answer(broker: Broker, request: Request, code: int, message: str | None,
            responses: list[dict[str, Any]] | None = None) -> Any:
    """Alter/DeleteShareGroupOffsets' response: the group's error and the topics' answers."""
    return broker.response(request, {"throttle_time": 0, "error_code": code, "error_message": message,
                                     "responses": responses or []})


def _topic_refusal(broker: Broker, name: str) -> tuple[int, str | None] | None:
    """Why a topic of Alter/DeleteShareGroupOffsets is refused: its READ, or it does not exist."""
    if not _allowed(broker, READ, TOPIC, name):
        return ec.TOPIC_AUTHORIZATION_FAILED, ec.message(ec.TOPIC_AUTHORIZATION_FAILED)
    if not broker.manager.has_topic(name):
        return ec.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN
    return None


def handle_alter_share_group_offsets(broker: Broker, request: Request) -> Any:
    b = request.body
    if not _allowed(broker, READ, GROUP, b.group_id):
        return _answer(broker, request, ec.GROUP_AUTHORIZATION_FAILED,
                       ec.message(ec.GROUP_AUTHORIZATION_FAILED))
    responses = []
    starts: dict[tuple[uuid.UUID, str], dict[int, int]] = {}
    for t in b.topics:
        refused = _topic_refusal(broker, t.topic_name)
        if refused is not None:
            responses.append({"topic_name": t.topic_name, "topic_id": uuid.UUID(int=0), "partitions": [
                {"partition_index": p.partition_index, "error_code": refused[0], "error_message": refused[1]}
                for p in t.partitions]})
            continue
        topic_id = broker.topic_ids.of(t.topic_name)
        count = len(broker.manager.partitions_of(t.topic_name))
        parts = []
        for p in t.partitions:
            if p.partition_index < count:
                starts.setdefault((topic_id, t.topic_name), {})[p.partition_index] = int(p.start_offset)
                parts.append({"partition_index": p.partition_index, "error_code": ec.NONE, "error_message": None})
            else:
                parts.append({"partition_index": p.partition_index, "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION,
                              "error_message": _UNKNOWN})
        responses.append({"topic_name": t.topic_name, "topic_id": topic_id, "partitions": parts})
    try:
        g = broker.share_groups.alter_offsets(b.group_id, starts)
    except GroupError as e:
        return _answer(broker, request, e.code, e.message)
    broker.share_state.initialize([(b.group_id, t, p, g.epoch, start) for (t, _n), ps in starts.items()
                                   for p, start in ps.items()])
    broker.share_partitions.forget(b.group_id, [(n, p) for (_t, n), ps in starts.items() for p in ps])
    return _answer(broker, request, ec.NONE, None, responses)


def handle_delete_share_group_offsets(broker: Broker, request: Request) -> Any:
    b = request.body
    if not _allowed(broker, DELETE, GROUP, b.group_id):
        return _answer(broker, request, ec.GROUP_AUTHORIZATION_FAILED,
                       ec.message(ec.GROUP_AUTHORIZATION_FAILED))
    sg = broker.share_groups.groups.get(b.group_id)
    responses = []
    delete: dict[uuid.UUID, str] = {}
    for t in b.topics:
        refused = _topic_refusal(broker, t.topic_name)
        if refused is not None:
            responses.append({"topic_name": t.topic_name, "topic_id": uuid.UUID(int=0),
                              "error_code": refused[0], "error_message": refused[1]})
            continue
        topic_id = broker.topic_ids.of(t.topic_name)
        if sg is not None and topic_id in sg.initialized:
            delete[topic_id] = t.topic_name
        else:
            responses.append({"topic_name": t.topic_name, "topic_id": uuid.UUID(int=0),
                              "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION,
                              "error_message": "There is no offset information to delete."})
    try:
        g = broker.share_groups.delete_offsets(b.group_id, set(delete))
    except GroupError as e:
        return _answer(broker, request, e.code, e.message)
    del g
    broker.share_state.delete([(b.group_id, t, p) for (t, p) in broker.share_state.partitions_of_group(b.group_id)
                               if t in delete])
    broker.share_partitions.forget(b.group_id, [(n, p) for t, n in delete.items()
                                                for p in broker.manager.partitions_of(n)])
    responses += [{"topic_name": n, "topic_id": t, "error_code": ec.NONE, "error_message": None}
                  for t, n in delete.items()]
    return _answer(broker, request, ec.NONE, None, responses)
