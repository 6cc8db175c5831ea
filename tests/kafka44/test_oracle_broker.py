"""The oracle itself: a Kafka 4.4 broker starts, serves a real client, and its DumpLogSegments reads
what it wrote, the same text ``kafkalog dump`` prints for that segment."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka44


def test_kafka44_serves_a_client_and_dumps_its_segment_as_kafkalog_does(kafka44_broker: kafka44.KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kafka44_broker.bootstrap})
    for f in admin.create_topics([NewTopic("smoke", 1, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": kafka44_broker.bootstrap, "compression.type": "gzip",
                  "linger.ms": 50, "enable.idempotence": True})
    for i in range(100):
        p.produce("smoke", key=b"k%d" % (i % 7), value=b"v%d" % i, headers=[("h", b"x")])
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka44_broker.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.subscribe(["smoke"])
    got: list[bytes | None] = []
    while len(got) < 100:
        m = c.poll(30)
        assert m is not None, f"consumed {len(got)} of 100"
        assert m.error() is None, m.error()
        got.append(m.value())
    c.close()
    assert got == [b"v%d" % i for i in range(100)]

    segment = kafka44_broker.log_dir / "smoke-0" / ("0" * 20 + ".log")
    flags = ["--deep-iteration", "--print-data-log"]
    theirs = kafka44.dump_log_segments([segment], *flags)
    assert "baseOffset: 0" in theirs and "compresscodec: gzip" in theirs, theirs
    ours = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", str(segment), *flags],
                          capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == theirs
