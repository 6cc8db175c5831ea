"""StreamsGroupHeartbeat (KIP-1071) request by request against Kafka 4.4 and ``kafkalog serve``
(issue 40): the same raw requests to both, the answers compared field by field, error paths
included (invalid requests, an invalid topology, missing source and internal topics, an unknown
member, a fenced member epoch, a topology that differs from the group's)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.server.raw import connect, recv_frame, request_frame, response_of

pytestmark = pytest.mark.kafka

#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRIABLE = (14, 15, 16)
PAIR_CONFIGS = {"group.streams.initial.rebalance.delay.ms": "0", "group.streams.assignment.interval.ms": "0",
                "group.streams.num.standby.replicas": "1"}


def _info(name: str, partitions: int = 0) -> dict[str, Any]:
    return {"name": name, "partitions": partitions, "replication_factor": 0, "topic_configs": []}


def topology(source: str, changelog: str | None = None, epoch: int = 0, changelog_partitions: int = 0
             ) -> dict[str, Any]:
    return {"epoch": epoch, "subtopologies": [{
        "subtopology_id": "0", "source_topics": [source], "source_topic_regex": [],
        "state_changelog_topics": [] if changelog is None else [_info(changelog, changelog_partitions)],
        "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}]}


def heartbeat(port: int, group: str, member: str, epoch: int, topo: dict[str, Any] | None = None,
              tasks: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    if epoch == 0 and topo is not None and tasks is None:
        tasks = []
    values: dict[str, Any] = {
        "group_id": group, "member_id": member, "member_epoch": epoch, "endpoint_information_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout": 30000 if epoch == 0 else -1,
        "topology": topo, "active_tasks": tasks, "standby_tasks": None if tasks is None else [],
        "warmup_tasks": None if tasks is None else [], "process_id": "p-" + member if epoch == 0 else None,
        "user_endpoint": None, "client_tags": None, "task_offsets": None, "task_end_offsets": None,
        "shutdown_application": False, **extra}
    for _ in range(100):      # as a client: retried while the coordinator loads its partition
        s = connect(port)
        try:
            s.sendall(request_frame(88, 0, 1, values))
            frame = recv_frame(s)
            assert frame is not None
            r: Any = response_of(frame, 88, 0)
        finally:
            s.close()
        if int(r.error_code) not in RETRIABLE:
            break
        time.sleep(0.2)
    return {"error_code": int(r.error_code), "error_message": r.error_message, "member_epoch": r.member_epoch,
            "status": None if r.status is None else [(s.status_code, s.status_detail) for s in r.status],
            "active": None if r.active_tasks is None else sorted((t.subtopology_id, list(t.partitions))
                                                                 for t in r.active_tasks),
            "standby": None if r.standby_tasks is None else sorted((t.subtopology_id, list(t.partitions))
                                                                   for t in r.standby_tasks),
            "heartbeat_interval": r.heartbeat_interval}


def _call(port: int, api_key: int, version: int, values: dict[str, Any]) -> Any:
    s = connect(port)
    try:
        s.sendall(request_frame(api_key, version, 1, values))
        frame = recv_frame(s)
        assert frame is not None
        return response_of(frame, api_key, version)
    finally:
        s.close()


def commit(port: int, group: str, member: str, epoch: int, topic: str, partitions: list[int]) -> list[Any]:
    """OffsetCommit v9 by member epoch: each partition's error code."""
    r = _call(port, 8, 9, {"group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member,
                           "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                               {"partition_index": p, "committed_offset": 10 + p, "committed_leader_epoch": -1,
                                "committed_metadata": ""} for p in partitions]}]})
    return [("commit", member, epoch, p.partition_index, int(p.error_code)) for t in r.topics for p in t.partitions]


def fetch(port: int, group: str, member: str, epoch: int, topic: str) -> Any:
    """OffsetFetch v9 by member epoch: the group's error and the committed offsets."""
    r = _call(port, 9, 9, {"groups": [{"group_id": group, "member_id": member, "member_epoch": epoch,
                                       "topics": [{"name": topic, "partition_indexes": [0, 1]}]}],
                           "require_stable": False})
    g = r.groups[0]
    return ("fetch", member, epoch, int(g.error_code),
            [(p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions])


def offset_delete(port: int, group: str, topic: str) -> Any:
    r = _call(port, 47, 0, {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]})
    return ("OffsetDelete", int(r.error_code), [(t.name, p.partition_index, int(p.error_code))
                                                for t in r.topics for p in t.partitions])


def other_apis(port: int, group: str) -> list[Any]:
    listed = _call(port, 16, 5, {"states_filter": [], "types_filter": ["streams"]})
    described = _call(port, 15, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
    consumer = _call(port, 68, 1, {
        "group_id": group, "member_id": "c-" + group, "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout": 30000, "subscribed_topic_names": ["x"], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []})
    join = _call(port, 11, 9, {
        "group_id": group, "session_timeout": 30000, "rebalance_timeout": 30000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
        "reason": None})
    return [[(x.group_id, x.group_state, x.group_type, x.protocol_type) for x in listed.groups],
            (int(described.error_code), described.group_state),
            (int(consumer.error_code), consumer.error_message), (int(join.error_code), join.member_id)]


def _create(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(60)


def find_coordinator(port: int, group: str) -> None:
    """FindCoordinator until the group's coordinator answers (Kafka creates __consumer_offsets then)."""
    for _ in range(200):
        s = connect(port)
        try:
            s.sendall(request_frame(10, 4, 1, {"key_type": 0, "coordinator_keys": [group]}))
            frame = recv_frame(s)
        finally:
            s.close()
        assert frame is not None
        if response_of(frame, 10, 4).coordinators[0].error_code == 0:      # type: ignore[attr-defined]
            return
        time.sleep(0.2)
    raise AssertionError("no coordinator")


def owned_of(r: dict[str, Any], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks a member owns after answer ``r`` (its previous ones when the answer has none)."""
    if r["active"] is None:
        return before
    return [{"subtopology_id": sid, "partitions": ps} for sid, ps in r["active"]]


def r_active(owned: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    return [(t["subtopology_id"], t["partitions"]) for t in owned]


def scenario(port: int, bootstrap: str, sfx: str) -> list[Any]:
    out: list[Any] = []
    g, m1, m2 = f"sg-{sfx}", f"m1-{sfx}", f"m2-{sfx}"
    find_coordinator(port, g)
    src, changelog = f"src-{sfx}", f"sg-{sfx}-store-changelog"
    # invalid requests
    out.append(heartbeat(port, g, "", 0, topology(src)))
    out.append(heartbeat(port, g, m1, 0, None))
    out.append(heartbeat(port, g, m1, 0, topology(src, changelog, changelog_partitions=3)))
    out.append(heartbeat(port, g, m1, 3, topology(src)))
    out.append(heartbeat(port, g, m1, -3))
    # an unknown group, then a missing source topic
    out.append(heartbeat(port, g, m1, 1, tasks=[]))
    out.append(heartbeat(port, g, m1, 0, topology(src, changelog)))
    epoch = out[-1]["member_epoch"]
    # the source topic appears: the changelog is missing, the broker creates it, tasks follow
    _create(bootstrap, src, 2)
    # (how soon a heartbeat sees the new topic is the broker's pace: the statuses seen on the way
    # are compared, without the source topics' one)
    seen: list[Any] = []
    deadline = time.monotonic() + 30
    while True:
        r = heartbeat(port, g, m1, epoch, tasks=[])
        epoch = r["member_epoch"]
        if r["status"] and r["status"][0][0] != 1 and r["status"] not in seen:
            seen.append(r["status"])
        if r["active"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    out += [seen, r]
    owned = [{"subtopology_id": sid, "partitions": ps} for sid, ps in r["active"]]
    # the group seen by the other group APIs: listed as a streams group, refused as a consumer or
    # classic group
    out.append(other_apis(port, g))
    # offsets committed and fetched by member epoch
    out.append(commit(port, g, m1, epoch, src, [0, 1]))
    out.append(commit(port, g, m1, epoch + 1, src, [0]))
    out.append(commit(port, g, m1, epoch - 1, src, [0]))
    out.append(commit(port, g, m2, epoch, src, [0]))
    out.append(fetch(port, g, m1, epoch, src))
    out.append(fetch(port, g, m1, epoch + 1, src))
    out.append(fetch(port, g, m2, epoch, src))
    # an unknown member, a fenced epoch, a different topology at the same epoch
    out.append(heartbeat(port, g, m2, 4, tasks=[]))
    out.append(heartbeat(port, g, m1, epoch + 5, tasks=owned))
    out.append(heartbeat(port, g, m2, 0, topology(src + "-other", changelog)))
    # a second member: m1 revokes a task first, then m2 gets it once released
    r2 = heartbeat(port, g, m2, 0, topology(src, changelog))
    out.append(r2)
    r = heartbeat(port, g, m1, epoch, tasks=owned)
    out.append(r)
    kept = [{"subtopology_id": sid, "partitions": ps} for sid, ps in r["active"] or r_active(owned)]
    r = heartbeat(port, g, m1, r["member_epoch"], tasks=kept)
    out.append(r)
    out.append(heartbeat(port, g, m2, r2["member_epoch"], tasks=[]))
    # a member leaves; the other one takes its task over
    out.append(heartbeat(port, g, m2, -1))
    r = heartbeat(port, g, m1, r["member_epoch"], tasks=kept)
    out.append(r)
    # static members: an instance id held by a live member, a fenced one, a temporary leave and the
    # rejoin under a new member id that takes the tasks over
    inst, s1, s2 = f"i-{sfx}", f"s1-{sfx}", f"s2-{sfx}"
    j = heartbeat(port, g, s1, 0, topology(src, changelog), instance_id=inst)
    out.append(j)
    for _ in range(2):           # m1 revokes what s1 gets; s1 then gets it
        r = heartbeat(port, g, m1, r["member_epoch"], tasks=owned_of(r, kept))
        kept = owned_of(r, kept)
        j = heartbeat(port, g, s1, j["member_epoch"], tasks=owned_of(j, []), instance_id=inst)
        out += [r, j]
    s1_tasks = owned_of(j, [])
    out.append(heartbeat(port, g, s2, 0, topology(src, changelog), instance_id=inst))
    out.append(heartbeat(port, g, s2, j["member_epoch"], tasks=[], instance_id=inst))
    out.append(heartbeat(port, g, s1, j["member_epoch"], tasks=s1_tasks, instance_id=f"nosuch-{sfx}"))
    out.append(heartbeat(port, g, s1, -2, instance_id=inst))
    j2 = heartbeat(port, g, s2, 0, topology(src, changelog), instance_id=inst)
    out.append(j2)
    out.append(heartbeat(port, g, s2, j2["member_epoch"], tasks=owned_of(j2, []), instance_id=inst))
    # OffsetDelete of a source topic: refused while the group has members, done once it is empty
    out.append(offset_delete(port, g, src))
    out.append(heartbeat(port, g, s2, -1, instance_id=inst))
    out.append(heartbeat(port, g, m1, -1))
    out.append(offset_delete(port, g, src))
    return out


def test_streams_group_heartbeat_request_by_request_as_kafka(kafka_pair: Any) -> None:
    kafka, ours = kafka_pair
    sfx = uuid.uuid4().hex[:6]
    want = scenario(kafka.port, kafka.bootstrap, "k" + sfx)
    got = scenario(ours.port, ours.bootstrap, "k" + sfx)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, (i, g, w)
