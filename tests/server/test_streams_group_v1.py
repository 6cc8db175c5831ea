"""StreamsGroupHeartbeat and StreamsGroupDescribe v1 (issue 40) request by request against Kafka 4.4
and ``kafkalog serve``: the versions advertised; v1's fields (the 64-bit acceptable recovery lag,
no topology description required, the describe's assignor name and description status); the
MISSING_CLIENT_TAGS status of ``group.streams.rack.aware.assignment.tags``; the task offsets members
report (kept per member, shown by the describe, a duplicate refused) and what Kafka 4.4 does with
them: no warm-up tasks, an active task moved to the member whose reported state is the largest
while the others follow the sticky rules."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from tests.server.raw import connect, recv_frame, request_frame, response_of
from tests.server.test_streams_group_protocol import _create, find_coordinator, topology

pytestmark = pytest.mark.kafka

RETRIABLE = (14, 15, 16)
PAIR_CONFIGS = {"group.streams.initial.rebalance.delay.ms": "0", "group.streams.assignment.interval.ms": "0",
                "group.streams.num.standby.replicas": "1", "group.streams.rack.aware.assignment.tags": "zone"}


def _call(port: int, key: int, version: int, values: dict[str, Any]) -> Any:
    for _ in range(100):        # as a client: retried while the coordinator loads its partition
        s = connect(port)
        try:
            s.sendall(request_frame(key, version, 1, values))
            frame = recv_frame(s)
            assert frame is not None
            r = response_of(frame, key, version)
        finally:
            s.close()
        if key != 88 or int(r.error_code) not in RETRIABLE:      # type: ignore[attr-defined]
            return r
        time.sleep(0.2)
    return r


def _tasks(ts: Any) -> list[tuple[str, list[int]]] | None:
    return None if ts is None else sorted((t.subtopology_id, list(t.partitions)) for t in ts)


def _offsets(offsets: dict[int, int] | None) -> list[dict[str, Any]] | None:
    return None if offsets is None else [{"subtopology_id": "0", "partition": p, "offset": o}
                                         for p, o in sorted(offsets.items())]


#: the group epoch the compared epochs count from: how many times a broker bumps it while the
#: topics the topology names appear is its own pace (Kafka's group coordinator sees a new topic in
#: its metadata image later than kafkalog does), what follows is compared from there
BASE = {"epoch": 0}


def _rel(epoch: int) -> int:
    return epoch - BASE["epoch"] if epoch > 0 else epoch


class Member:
    """One streams group member driven by raw heartbeats: it owns what the answers give it."""

    def __init__(self, port: int, group: str, member_id: str, version: int = 1,
                 tags: list[tuple[str, str]] | None = None) -> None:
        self.port, self.group, self.member_id, self.version, self.tags = port, group, member_id, version, tags
        self.epoch = 0
        self.owned: dict[str, list[tuple[str, list[int]]]] = {"active": [], "standby": [], "warmup": []}

    def heartbeat(self, topo: dict[str, Any] | None = None, offsets: dict[int, int] | None = None,
                  end_offsets: dict[int, int] | None = None, raw_offsets: list[dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
        joining = self.epoch == 0

        def owned(kind: str) -> list[dict[str, Any]]:
            return [{"subtopology_id": s, "partitions": ps} for s, ps in self.owned[kind]]
        r = _call(self.port, 88, self.version, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
            "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000 if joining else -1, "topology": topo,
            "active_tasks": owned("active"), "standby_tasks": owned("standby"), "warmup_tasks": owned("warmup"),
            "process_id": "p-" + self.member_id if joining else None, "user_endpoint": None,
            "client_tags": None if self.tags is None or not joining else [{"key": k, "value": v} for k, v in self.tags],
            "task_offsets": raw_offsets if raw_offsets is not None else _offsets(offsets),
            "task_end_offsets": _offsets(end_offsets), "shutdown_application": False})
        out = {"member": self.member_id, "error_code": int(r.error_code), "error_message": r.error_message,
               "member_epoch": _rel(r.member_epoch), "acceptable_recovery_lag": r.acceptable_recovery_lag,
               "heartbeat_interval": r.heartbeat_interval, "task_offset_interval": r.task_offset_interval,
               "endpoint_information_epoch": r.endpoint_information_epoch,
               # (the missing source and internal topics' statuses come and go at each broker's pace:
               # tests/server/test_streams_group_protocol.py compares them)
               "status": None if r.status is None else [(s.status_code, s.status_detail) for s in r.status
                                                        if s.status_code not in (1, 3)],
               "active": _tasks(r.active_tasks), "standby": _tasks(r.standby_tasks),
               "warmup": _tasks(r.warmup_tasks)}
        if self.version >= 1:
            out["topology_description_required"] = r.topology_description_required
        if int(r.error_code) == 0:
            self.epoch = r.member_epoch
            for kind in ("active", "standby", "warmup"):
                if out[kind] is not None:
                    self.owned[kind] = out[kind]
        return out


def _describe(port: int, group: str, version: int, include: bool = False) -> Any:
    values: dict[str, Any] = {"group_ids": [group], "include_authorized_operations": False}
    if version >= 1:
        values["include_topology_description"] = include
    g = _call(port, 89, version, values).groups[0]
    out = {"error_code": int(g.error_code), "state": g.group_state, "group_epoch": _rel(g.group_epoch),
           "assignment_epoch": _rel(g.assignment_epoch), "members": sorted(
               (m.member_id, _rel(m.member_epoch), [(kv.key, kv.value) for kv in m.client_tags],
                [(t.subtopology_id, t.partition, t.offset) for t in m.task_offsets],
                [(t.subtopology_id, t.partition, t.offset) for t in m.task_end_offsets],
                _tasks(m.assignment.active_tasks), _tasks(m.assignment.standby_tasks),
                _tasks(m.assignment.warmup_tasks), _tasks(m.target_assignment.active_tasks),
                _tasks(m.target_assignment.standby_tasks), _tasks(m.target_assignment.warmup_tasks))
               for m in g.members)}
    if version >= 1:
        out.update(assignor=g.assignor_name, description=g.topology_description,
                   description_status=g.topology_description_status)
    return out


def _api_versions(port: int) -> dict[int, tuple[int, int]]:
    r = _call(port, 18, 3, {"client_software_name": "raw", "client_software_version": "1"})
    return {k.api_key: (k.min_version, k.max_version) for k in r.api_keys if k.api_key in (88, 89)}


def scenario(port: int, bootstrap: str, sfx: str) -> list[Any]:
    out: list[Any] = [_api_versions(port)]
    g = f"sg1-{sfx}"
    find_coordinator(port, g)
    src, changelog = f"src1-{sfx}", f"sg1-{sfx}-store-changelog"
    _create(bootstrap, src, 3)
    topo = topology(src, changelog)
    # m1 joins at v1 without the required client tag: MISSING_CLIENT_TAGS (after the statuses of
    # the missing changelog, which the broker creates); the tasks follow
    BASE["epoch"] = 0
    m1 = Member(port, g, f"m1-{sfx}")
    out.append({k: v for k, v in m1.heartbeat(topo).items() if k != "member_epoch"})
    deadline, same = time.monotonic() + 30, 0
    while same < 4 and time.monotonic() < deadline:     # the tasks, at an epoch that stays (Kafka
        time.sleep(0.3)                                 # bumps it once more as its metadata settles)
        epoch = m1.epoch
        r = m1.heartbeat()
        same = same + 1 if m1.owned["active"] and r["member_epoch"] == epoch else 0
    out.append({k: v for k, v in r.items() if k != "member_epoch"})
    BASE["epoch"] = m1.epoch
    # a duplicate task offset is an invalid request; then m1 reports the state of its three tasks
    out.append(m1.heartbeat())
    out.append(m1.heartbeat(raw_offsets=_offsets({0: 5}) + _offsets({0: 6})))       # type: ignore[operator]
    out.append(m1.heartbeat())
    out.append(m1.heartbeat(offsets={0: 100, 1: 100, 2: 100}, end_offsets={0: 120, 1: 120, 2: 120}))
    # m2 (with the tag: no status) and m3 join; m3 reports state for task 1 and none of the tasks
    # that move are warm-up tasks: in Kafka 4.4 an active task moves at once, to the member with the
    # largest state when one is under its share
    m2 = Member(port, g, f"m2-{sfx}", tags=[("zone", "a")])
    out.append(m2.heartbeat(topo))
    m3 = Member(port, g, f"m3-{sfx}", tags=[("zone", "b")])
    out.append(m3.heartbeat(topo, offsets={1: 90}, end_offsets={1: 120}))
    for _ in range(4):
        for m in (m1, m2, m3):
            out.append(m.heartbeat())
    out.append({m.member_id: m.owned for m in (m1, m2, m3)})
    # the describe at v1 (assignor, no description stored) and v0; heartbeats at v0 (legacy lag 0)
    out.append(_describe(port, g, 1))
    out.append(_describe(port, g, 1, include=True))
    out.append(_describe(port, g, 0))
    m2.version = 0
    out.append(m2.heartbeat())
    for m in (m1, m2, m3):
        m.epoch = -1
        out.append(m.heartbeat())
    return out


def test_streams_group_v1_request_by_request_as_kafka(kafka_pair: Any) -> None:
    kafka, ours = kafka_pair
    sfx = uuid.uuid4().hex[:6]
    want = scenario(kafka.port, kafka.bootstrap, sfx)
    got = scenario(ours.port, ours.bootstrap, sfx)
    if os.environ.get("STREAMS_V1_DUMP"):
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            print(i, "K", w, "\n", i, "O", g)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, (i, "\n", g, "\n", w)
    assert want[0] == {88: (0, 1), 89: (0, 1)}
    assert any(s[0] == 6 for s in want[1]["status"] or ())          # MISSING_CLIENT_TAGS seen
    assert all(not r.get("warmup") for r in want if isinstance(r, dict) and "warmup" in r)
