"""Topics answered by CreateTopics, then a SIGKILL before their partitions were all made (issue 35),
handed to Kafka 4.4: kafkalog's next start makes them whole, and a new Kafka cluster adopts the
directory (``kafkalog bootstrap-topics``, as ``test_kafka_adopts_a_directory_kafkalog_created``)
with every partition, the topic ids kafkalog answered and the records written after the restart;
nothing is set aside as stray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient

from kafkalog.log.checkpoint import uuid_to_kafka_string
from tests import kafka44
from tests.kafka44 import workload
from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, recv_frame, request_frame, response_of

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOPICS = {"committed-a": 400, "committed-b": 150}


def test_kafka_adopts_topics_committed_before_a_crash(tmp_path: Path) -> None:
    kafka44.require()
    data = tmp_path / "data"
    b = BrokerProcess(str(data)).start()
    try:
        with connect(b.port, timeout=120) as s:
            s.sendall(request_frame(19, 7, 1, {
                "topics": [{"name": t, "num_partitions": n, "replication_factor": 1, "assignments": [],
                            "configs": []} for t, n in TOPICS.items()],
                "timeout": 60000, "validate_only": False}))
            created: Any = response_of(recv_frame(s) or b"", 19, 7)
            b.kill()
    finally:
        b.kill()
    assert [t.error_code for t in created.topics] == [0, 0]
    ids = {t.name: t.topic_id for t in created.topics}
    assert len([n for n in os.listdir(data) if n.startswith("committed-")]) < sum(TOPICS.values())
    written = [(t, p) for t, n in TOPICS.items() for p in (0, n - 1)]
    with BrokerProcess(str(data)).running() as again:
        producer = Producer({"bootstrap.servers": again.bootstrap, "acks": "all"})
        for t, p in written:
            producer.produce(t, f"{t}/{p}".encode(), partition=p)
        assert producer.flush(60) == 0

    meta = dict(line.split("=", 1) for line in (data / "meta.properties").read_text().splitlines()
                if "=" in line and not line.startswith("#"))
    broker = kafka44.KafkaBroker(tmp_path / "kafka", {"log.dirs": str(data), "node.id": meta["node.id"],
                                                       "metadata.log.dir": str(tmp_path / "metadata")})
    broker.format(meta["cluster.id"], "--ignore-formatted")
    res = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "bootstrap-topics", str(data),
                          "--metadata-log-dir", str(tmp_path / "metadata")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert sorted((x["topic"], x["partitions"]) for x in lines if x["type"] == "topic") == sorted(TOPICS.items())
    try:
        broker.start(timeout=600)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        described = admin.describe_topics(TopicCollection(list(TOPICS)))
        for t, n in TOPICS.items():
            d = described[t].result(120)
            # (confluent-kafka prints the id in standard base64, Kafka's is URL-safe)
            assert (str(d.topic_id).replace("+", "-").replace("/", "_"), len(d.partitions)) == \
                (uuid_to_kafka_string(ids[t]), n)
        got = workload.read_all(broker.bootstrap, list(TOPICS), "read_uncommitted")
        assert sorted((t, p, row[2]) for (t, p), rows in got.items() for row in rows) == \
            sorted((t, p, f"{t}/{p}".encode()) for t, p in written)
        broker.stop()
        assert not list(data.glob("*-stray"))
    finally:
        if broker.alive():
            broker.kill()
