"""Streams groups (KIP-1071) survive restarts, in Kafka 4.4's own records (issue 40): a group kept by
``kafkalog serve`` resumes after the broker is killed and restarted (same epochs, tasks, topology,
endpoints; the members heartbeat on without a rebalance); a Kafka 4.4 broker started on the same
directory resumes it too (its StreamsGroupDescribe equal to kafkalog's); a member Kafka adds is in
the records kafkalog reads when it takes the directory back."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.server.group_handover import Kafkalog, assert_offsets_read_as_kafka, groups_cli, new_kafka, serving
from tests.server.raw import connect, recv_frame, request_frame, response_of
from tests.server.test_streams_group_protocol import RETRIABLE, _create, find_coordinator, heartbeat, topology

SETTINGS = {"group.streams.initial.rebalance.delay.ms": "0", "group.streams.assignment.interval.ms": "0",
            "group.streams.session.timeout.ms": "60000", "group.streams.num.standby.replicas": "1"}


def describe(port: int, group: str) -> Any:
    for _ in range(100):          # (retried while the coordinator loads the group's partition and,
        # in Kafka, until its metadata image configures the group's topology: NotReady before)
        s = connect(port)
        try:
            s.sendall(request_frame(89, 0, 1, {"group_ids": [group], "include_authorized_operations": False}))
            frame = recv_frame(s)
            assert frame is not None
            g = response_of(frame, 89, 0).groups[0]         # type: ignore[attr-defined]
        finally:
            s.close()
        if g.error_code not in RETRIABLE and g.group_state != "NotReady":
            break
        time.sleep(0.2)
    assert g.error_code == 0, g
    # members in a stable order (Kafka lists them in its hash map's order); the internal topics'
    # partition counts as the members sent them (Kafka 4.4 shows its configured counts only after
    # some heartbeats: docs/kafka-compatibility.md)
    return (g.group_state, g.group_epoch, g.assignment_epoch, as_sent(g.topology),
            sorted(g.members, key=lambda m: m.member_id))


def as_sent(topology: Any) -> Any:
    def zero(infos: Any) -> Any:
        return tuple(replace(i, partitions=0) for i in infos)
    return replace(topology, subtopologies=tuple(
        replace(s, state_changelog_topics=zero(s.state_changelog_topics)) for s in topology.subtopologies))


def _tasks(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"subtopology_id": sid, "partitions": ps} for sid, ps in r["active"] or []]


def settle(port: int, group: str, members: dict[str, dict[str, Any]]) -> None:
    """Heartbeat every member with the tasks it owns until the group is Stable."""
    for _ in range(60):
        for mid, st in members.items():
            r = heartbeat(port, group, mid, st["epoch"], tasks=st["owned"])
            assert r["error_code"] == 0, r
            st["epoch"] = r["member_epoch"]
            if r["active"] is not None:
                st["owned"] = _tasks(r)
        if describe(port, group)[0] == "Stable":
            return
    raise AssertionError(describe(port, group))


def join(port: int, group: str, member: str, source: str, endpoint_port: int) -> dict[str, Any]:
    r = heartbeat(port, group, member, 0, topology(source, f"{group}-store-changelog"),
                  user_endpoint={"host": "localhost", "port": endpoint_port})
    assert r["error_code"] == 0, r
    return {"epoch": r["member_epoch"], "owned": _tasks(r)}


def resumes(port: int, group: str, members: dict[str, dict[str, Any]]) -> None:
    for mid, st in members.items():                   # heartbeats go on: no rebalance
        r = heartbeat(port, group, mid, st["epoch"], tasks=st["owned"])
        assert r["error_code"] == 0 and r["member_epoch"] == st["epoch"], r


def _check_groups_cli(data: Path, group: str, source: str, members: dict[str, dict[str, Any]]) -> None:
    """``kafkalog groups`` reads the running broker's directory: the streams group, its state,
    epochs, members and the source partitions of their active tasks."""
    listed = [json.loads(line) for line in groups_cli(data, "--list").stdout.splitlines()]
    assert {"group": group, "state": "Stable", "type": "streams"} in listed, listed
    r = groups_cli(data, "--describe", "--group", group)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[0])
    assert summary["groupType"] == "streams" and summary["state"] == "Stable", summary
    assert {m["memberId"]: m["memberEpoch"] for m in summary["members"]} == {
        mid: st["epoch"] for mid, st in members.items()}
    owned = sorted((a["topic"], a["partition"]) for m in summary["members"] for a in m["assignment"])
    assert owned == [(source, p) for p in range(4)]
    text = groups_cli(data, "--describe", "--group", group, "--format", "text").stdout
    assert f"Streams group '{group}': state Stable, type streams" in text, text


@pytest.mark.slow            # Kafka 4.4 started three times, kafkalog three times (~30-50 s)
def test_streams_groups_survive_restarts_and_move_between_kafka_and_kafkalog(tmp_path: Path) -> None:
    group, source = f"sg-{uuid.uuid4().hex[:6]}", f"src-{uuid.uuid4().hex[:6]}"
    with new_kafka(tmp_path, SETTINGS) as kafka:    # Kafka creates the topics (its metadata log must know them)
        find_coordinator(kafka.port, group)         # and __consumer_offsets
        _create(kafka.bootstrap, source, 4)
        _create(kafka.bootstrap, f"{group}-store-changelog", 4)
    data = kafka.log_dir
    with Kafkalog(data, SETTINGS) as ours:
        find_coordinator(ours.port, group)
        members = {"m1": join(ours.port, group, "m1", source, 7001)}
        settle(ours.port, group, members)
        members["m2"] = join(ours.port, group, "m2", source, 7002)
        settle(ours.port, group, members)
        before = describe(ours.port, group)
        assert before[0] == "Stable" and len(before[4]) == 2, before
        assert sorted(m.user_endpoint.port for m in before[4]) == [7001, 7002]
        assert all(m.assignment.standby_tasks for m in before[4]), before      # one standby per task
        ours.crash_and_restart()
        find_coordinator(ours.port, group)
        assert describe(ours.port, group) == before
        resumes(ours.port, group, members)
        assert describe(ours.port, group) == before
        _check_groups_cli(data, group, source, members)

    with serving(kafka):                           # Kafka 4.4 takes the directory kafkalog wrote
        find_coordinator(kafka.port, group)
        assert describe(kafka.port, group) == before
        resumes(kafka.port, group, members)
        assert describe(kafka.port, group) == before   # Kafka's metadata hash is kafkalog's: no new epoch
        members["m3"] = join(kafka.port, group, "m3", source, 7003)
        settle(kafka.port, group, members)
        after = describe(kafka.port, group)

    with Kafkalog(data, SETTINGS) as ours:         # and kafkalog takes Kafka's records back
        find_coordinator(ours.port, group)
        assert describe(ours.port, group) == after
        resumes(ours.port, group, members)
        assert describe(ours.port, group) == after

    # the __consumer_offsets segment both wrote reads as Kafka's DumpLogSegments reads it
    assert_offsets_read_as_kafka(data, group, 22, "StreamsGroup")
