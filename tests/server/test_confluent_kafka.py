"""confluent-kafka (librdkafka 2.x) against ``kafkalog serve``: admin, idempotent produce with every
codec, assign-and-seek consume, ListOffsets."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.server.broker_process import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 300


def _create(admin: AdminClient, topic: NewTopic) -> None:
    for f in admin.create_topics([topic], operation_timeout=30).values():
        f.result(60)


def test_admin_create_describe_delete(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, NewTopic("ck-admin", 4, 1, config={"cleanup.policy": "compact"}))
    with pytest.raises(KafkaException) as e:
        _create(admin, NewTopic("ck-admin", 1, 1))
    assert "TOPIC_ALREADY_EXISTS" in str(e.value) or "already exists" in str(e.value)
    md = admin.list_topics(timeout=30)
    assert len(md.topics["ck-admin"].partitions) == 4
    res = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "ck-admin")])
    configs = next(iter(res.values())).result(60)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == str(1024 ** 3)
    # validate-only creates nothing
    for f in admin.create_topics([NewTopic("ck-validate", 1, 1)], validate_only=True).values():
        f.result(60)
    assert "ck-validate" not in admin.list_topics(timeout=30).topics
    for f in admin.delete_topics(["ck-admin"], operation_timeout=30).values():
        f.result(60)
    assert "ck-admin" not in admin.list_topics(timeout=30).topics


def _produce(broker: BrokerProcess, topic: str, codec: str) -> dict[tuple[int, int], tuple]:
    acked: dict[tuple[int, int], tuple] = {}
    errors = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            # (a delivery report carries no headers: they follow from the key)
            acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value(),
                                                      [("n", msg.key()[1:])])

    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                  "compression.type": codec, "linger.ms": 5, "acks": "all"})
    for i in range(N):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i * (1 + i % 7), partition=i % 3,
                  headers=[("n", b"%d" % i)], on_delivery=on_delivery)
    assert p.flush(60) == 0
    assert errors == []
    return acked


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_assign_seek_consume(broker: BrokerProcess, codec: str) -> None:
    topic = f"ck-codec-{codec}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, NewTopic(topic, 3, 1))
    acked = _produce(broker, topic, codec)
    assert len(acked) == N
    for p in range(3):
        assert sorted(o for (pp, o) in acked if pp == p) == list(range(N // 3))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 41), TopicPartition(topic, 2, 0)])
    expected = {k: v for k, v in acked.items() if k[0] != 1 or k[1] >= 41}
    got = {}
    deadline = time.monotonic() + 60
    while len(got) < len(expected) and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            assert m.error() is None, m.error()
            got[(m.partition(), m.offset())] = (m.key(), m.value(), m.headers())
    c.close()
    assert got == expected


def test_watermarks_and_offsets_for_times(broker: BrokerProcess) -> None:
    topic = "ck-times"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i, ts in enumerate([10_000, 20_000, 30_000]):
        p.produce(topic, value=b"%d" % i, partition=0, timestamp=ts)   # auto-created
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 3)
    found = c.offsets_for_times([TopicPartition(topic, 0, 15_000)], timeout=30)
    assert found[0].offset == 1
    found = c.offsets_for_times([TopicPartition(topic, 0, 40_000)], timeout=30)
    assert found[0].offset == -1     # none at or after: OFFSET_END
    c.close()
