"""A SIGKILL right after CreateTopics is answered (issue 35): the broker answers once the topics
are committed (``kafkalog-creating-<topic>.json``) and makes their partitions afterwards, so the
kill comes while most partitions are not made. The restarted broker has every topic it answered,
every partition with the topic id it answered, and serves them; the partitions the kill left
half-made (a directory with nothing in it but a ``partition.metadata.tmp``, one with an empty
``.log`` only) are repaired. Without the completion at load the restart lists the topics with
the partitions the kill left, and the test fails there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafkalog.log.checkpoint import PartitionMetadataFile
from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, recv_frame, request_frame, response_of

TOPICS = {"crash-a": 1500, "crash-b": 700}


def _create_topics(correlation_id: int) -> bytes:
    return request_frame(19, 7, correlation_id, {
        "topics": [{"name": t, "num_partitions": n, "replication_factor": 1, "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "3600000"}] if t == "crash-b" else []}
                   for t, n in TOPICS.items()],
        "timeout": 60000, "validate_only": False})


def _metadata(correlation_id: int) -> bytes:
    return request_frame(3, 12, correlation_id, {
        "topics": [{"topic_id": None, "name": t} for t in TOPICS], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})


@pytest.mark.slow
def test_sigkill_right_after_create_topics_answered(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    b = BrokerProcess(data).start()
    try:
        with connect(b.port, timeout=120) as s:
            s.sendall(_create_topics(1))
            created: Any = response_of(recv_frame(s) or b"", 19, 7)
            b.kill()
    finally:
        b.kill()
    assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == \
        [(t, 0, n) for t, n in TOPICS.items()]
    ids = {t.name: t.topic_id for t in created.topics}
    made = {name for name in os.listdir(data) if name.startswith("crash-")}
    assert len(made) < sum(TOPICS.values()), "every partition was made before the kill: nothing tested"
    # what a kill while making a partition leaves: a directory without its files, a lone empty .log
    missing = [f"crash-a-{p}" for p in range(TOPICS["crash-a"]) if f"crash-a-{p}" not in made]
    os.makedirs(os.path.join(data, missing[0]))
    Path(data, missing[0], "partition.metadata.tmp").write_bytes(b"version: 0\ntopic_")
    os.makedirs(os.path.join(data, missing[1]))
    Path(data, missing[1], "00000000000000000000.log").write_bytes(b"")

    with BrokerProcess(data).running() as again:
        with connect(again.port, timeout=120) as s:
            s.sendall(_metadata(2))
            meta: Any = response_of(recv_frame(s) or b"", 3, 12)
        assert {t.name: (t.error_code, t.topic_id, len(t.partitions)) for t in meta.topics} == \
            {t: (0, ids[t], n) for t, n in TOPICS.items()}
        for t, n in TOPICS.items():
            for p in range(n):
                meta_file = PartitionMetadataFile(os.path.join(data, f"{t}-{p}", "partition.metadata"))
                assert meta_file.read().topic_id == ids[t], (t, p)
        assert not [n for n in os.listdir(data) if n.startswith("kafkalog-creating-")]
        # produce to and consume from the repaired partitions, the last ones and the first
        tps = [("crash-a", int(missing[0].rsplit("-", 1)[1])), ("crash-a", int(missing[1].rsplit("-", 1)[1])),
               ("crash-a", TOPICS["crash-a"] - 1), ("crash-b", TOPICS["crash-b"] - 1), ("crash-b", 0)]
        producer = Producer({"bootstrap.servers": again.bootstrap, "acks": "all"})
        for t, p in tps:
            producer.produce(t, f"{t}/{p}".encode(), partition=p)
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": again.bootstrap, "group.id": "g", "enable.auto.commit": False})
        consumer.assign([TopicPartition(t, p, 0) for t, p in tps])
        got: set[bytes] = set()
        for _ in range(60):
            for m in consumer.consume(10, 1.0):
                if m.error() is None:
                    got.add(m.value())
            if len(got) == len(tps):
                break
        consumer.close()
        assert got == {f"{t}/{p}".encode() for t, p in tps}
    # the topic config committed with the topic is there
    props = Path(data, "kafkalog-topic-crash-b.properties").read_text()
    assert "retention.ms=3600000" in props
