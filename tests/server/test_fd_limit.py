"""Issue 35: ``kafkalog serve`` with more partitions than its open-files limit allows segment
descriptors (:mod:`kafkalog.log.file_handles`), through confluent-kafka: 1,000 partitions under a
soft ``RLIMIT_NOFILE`` of 256 are created, produced to and fetched back (large records through the
zero-copy ``sendfile`` path), and again after a restart. Before: CreateTopics failed with EMFILE
(``Too many open files``) from the 129th partition on."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_process import BrokerProcess

PARTITIONS = 1000
LIMIT = 256
#: partitions whose record is large enough for the broker's sendfile path (>= 64 KiB slices)
BIG_EVERY = 100
BIG = 100 * 1024


def _value(p: int) -> bytes:
    head = f"v{p}".encode()
    return head + b"x" * (BIG - len(head)) if p % BIG_EVERY == 0 else head


def _consume_all(bootstrap: str) -> dict[int, bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fd-limit", "enable.auto.commit": False,
                  "fetch.max.bytes": 8 << 20})
    try:
        c.assign([TopicPartition("many", p, 0) for p in range(PARTITIONS)])
        got: dict[int, bytes] = {}
        misses = 0
        while len(got) < PARTITIONS and misses < 20:
            msgs = c.consume(1000, timeout=2.0)
            misses = misses + 1 if not msgs else 0
            for m in msgs:
                assert m.error() is None, m.error()
                got[m.partition()] = m.value()
        return got
    finally:
        c.close()


def test_serve_more_partitions_than_open_files(tmp_path):
    data = str(tmp_path / "data")
    want = {p: _value(p) for p in range(PARTITIONS)}
    b = BrokerProcess(data, nofile=LIMIT).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        futures = admin.create_topics([NewTopic("many", PARTITIONS, 1)], request_timeout=60)
        futures["many"].result(90)
        prod = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5,
                         "message.max.bytes": 2 << 20})
        failed: list[object] = []
        for p in range(PARTITIONS):
            prod.produce("many", want[p], partition=p,
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
            prod.poll(0)
        assert prod.flush(60) == 0
        assert not failed, failed[:3]
        assert _consume_all(b.bootstrap) == want
        assert b.stop() == 0, b.stderr()
        b = BrokerProcess(data, nofile=LIMIT).start()
        assert _consume_all(b.bootstrap) == want
        assert b.stop() == 0, b.stderr()
    finally:
        b.kill()
