"""Consumer groups (KIP-848) survive restarts, in Kafka 4.4's own records: a group kept by
``kafkalog serve`` resumes after the broker is killed and restarted (same group and member epochs,
same assignments, the members heartbeat on without a rebalance), and then a Kafka 4.4 broker started
on the same data directory resumes it too (its ConsumerGroupDescribe equal to kafkalog's, the members
heartbeat on at their epochs, the committed offsets there); ``kafkalog dump --offsets-decoder`` prints
the ``__consumer_offsets`` segment kafkalog wrote, and one Kafka wrote, as DumpLogSegments does."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.server.consumer_group_raw import FAST_CONSUMER_GROUPS, RawClient
from tests.server.group_handover import (
    Kafkalog,
    assert_offsets_read_as_kafka,
    dump,
    groups_cli,
    new_kafka,
    offsets_segments,
    serving,
)

#: sessions long enough to outlive a JVM start
SETTINGS = dict(FAST_CONSUMER_GROUPS, **{"group.consumer.session.timeout.ms": "30000",
                                         "group.consumer.max.session.timeout.ms": "60000"})


def _client(port: int, group: str, topics: dict[str, uuid.UUID], labels: dict[str, str]) -> RawClient:
    c = RawClient(port, group)
    c.find_coordinator()
    c.topic_ids = dict(topics)
    c.topic_names = {v: k for k, v in topics.items()}
    c.members = dict(labels)
    c.labels = {v: k for k, v in labels.items()}
    return c


def _check_groups_cli(data: Path, group: str, topic: str, c: RawClient) -> None:
    """``kafkalog groups`` reads the running broker's directory: the consumer group, its state,
    epochs and members with their partitions."""
    import json
    listed = [json.loads(line) for line in groups_cli(data, "--list").stdout.splitlines()]
    assert {"group": group, "state": "Stable", "type": "consumer"} in listed, listed
    r = groups_cli(data, "--describe", "--group", group)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    summary = lines[0]
    assert summary["groupType"] == "consumer" and summary["state"] == "Stable"
    assert summary["groupEpoch"] == summary["assignmentEpoch"] == c.describe()["group_epoch"]
    owned = {(m["memberId"], a["partition"]) for m in summary["members"] for a in m["assignment"]}
    assert owned == {(c.members[label], p) for label in ("m1", "m2", "m3") for p in c.owned[label][topic]}
    assert {m["memberEpoch"] for m in summary["members"]} == {c.epochs[label] for label in ("m1", "m2", "m3")}
    offsets = [row for row in lines[1:] if row["type"] == "offset"]
    assert {(row["consumerId"], row["partition"]) for row in offsets} == owned
    text = groups_cli(data, "--describe", "--group", group, "--format", "text").stdout
    assert f"Consumer group '{group}': state Stable, type consumer" in text, text


def test_groups_survive_a_kafkalog_restart_and_kafka_adopts_them(tmp_path: Path) -> None:
    group, topic = f"adopt-{uuid.uuid4().hex[:6]}", f"adopt-t-{uuid.uuid4().hex[:6]}"
    with new_kafka(tmp_path, SETTINGS) as kafka:
        # Kafka creates the topic (its id is in its metadata) and __consumer_offsets
        setup = RawClient(kafka.port, group)
        setup.find_coordinator()
        setup.create_topic(topic, 6)
        topics = dict(setup.topic_ids)
        setup.close()
    data = kafka.log_dir
    with Kafkalog(data, SETTINGS) as ours:
        c = _client(ours.port, group, topics, {})
        c.heartbeat("m1", topics=[topic], instance="i-1")
        c.heartbeat("m2", topics=[topic], assignor="range")
        c.heartbeat("m3", topics=[topic])
        c.settle(["m1", "m2", "m3"])
        for label in ("m1", "m2", "m3"):
            p = c.owned[label][topic][0]
            c.commit(label, c.epochs[label], {topic: {p: 100 + p}})
        before = c.describe()
        assert before["state"] == "Stable" and len(before["members"]) == 3, before
        _check_groups_cli(data, group, topic, c)
        labels, epochs, owned = dict(c.members), dict(c.epochs), dict(c.owned)
        c.close()
        ours.crash_and_restart()
        c = _client(ours.port, group, topics, labels)
        c.epochs, c.owned = dict(epochs), dict(owned)
        assert c.describe() == before
        for label in ("m1", "m2", "m3"):          # heartbeats go on: no rebalance
            got = c.heartbeat(label, owned=owned[label])
            assert got["error"] == 0 and got["epoch"] == epochs[label], got
        c.close()

    # the __consumer_offsets segment kafkalog wrote reads as Kafka reads it
    assert_offsets_read_as_kafka(data, group, 8, "ConsumerGroup")

    with serving(kafka):
        c = _client(kafka.port, group, topics, labels)
        c.epochs, c.owned = dict(epochs), dict(owned)
        assert c.describe() == before
        for label in ("m1", "m2", "m3"):
            got = c.heartbeat(label, owned=owned[label])
            assert got["error"] == 0 and got["epoch"] == epochs[label], got
        assert c.describe() == before          # Kafka's metadata hash is kafkalog's: no new epoch
        c.fetch("m1", epochs["m1"], {topic: list(range(6))})
        assert c.transcript[-1][3] == 0
        assert sorted(o for _t, _p, o, _e in c.transcript[-1][4]) == [-1, -1, -1] + sorted(
            100 + owned[m][topic][0] for m in ("m1", "m2", "m3"))
        c.close()


def test_dump_offsets_decoder_of_kafka_consumer_group_records(tmp_path: Path) -> None:
    """A segment Kafka 4.4 wrote with a group's whole life (joins, revocations, a regex, leaves,
    tombstones) prints as DumpLogSegments --offsets-decoder prints it."""
    group = f"dump-{uuid.uuid4().hex[:6]}"
    with new_kafka(tmp_path, FAST_CONSUMER_GROUPS) as kafka:
        c = RawClient(kafka.port, group)
        c.find_coordinator()
        t = f"dump-t-{uuid.uuid4().hex[:6]}"
        c.create_topic(t, 3)
        c.heartbeat("m1", topics=[t], instance="i-1", assignor="range")
        c.heartbeat("m2", 0, regex="dump-t-.*", topics=None)
        c.settle(["m1", "m2"])
        c.heartbeat("m1", -2, instance="i-1")
        c.heartbeat("m2", -1)
        c.close()
    segments = offsets_segments(kafka.log_dir, group)
    assert segments
    for segment in segments:
        theirs, mine = dump(segment)
        assert '"type":"16"' in theirs and "<DELETE>" in theirs, theirs[:3000]
        assert mine == theirs
