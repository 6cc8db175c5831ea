"""kafka-python 3.0 against ``kafkalog serve``: admin, idempotent produce with every codec,
assign-and-seek consume, ListOffsets."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import TopicAlreadyExistsError

from tests.server.broker_process import BrokerProcess

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
N = 200


def _admin(broker: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)


def test_admin_create_describe_delete(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    try:
        admin.create_topics([NewTopic("kp-admin", 3, 1, topic_configs={"retention.ms": "123456"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("kp-admin", 1, 1)], raise_errors=True)
        assert "kp-admin" in admin.list_topics()
        desc = admin.describe_topics(["kp-admin"])
        parts = sorted(desc[0]["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in parts] == [0, 1, 2]
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        text = repr(configs)
        assert "retention.ms" in text and "123456" in text
        admin.delete_topics(["kp-admin"])
        assert "kp-admin" not in admin.list_topics()
    finally:
        admin.close()


def _produce(broker: BrokerProcess, topic: str, codec: object) -> dict[tuple[int, int], tuple]:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all",
                             compression_type=codec, linger_ms=5)
    sent = {}
    futures = []
    for i in range(N):
        key, value = b"key-%d" % i, b"value-%d-" % i + bytes(i % 50)
        headers = [("h", b"%d" % i)]
        futures.append((producer.send(topic, key=key, value=value, headers=headers, partition=i % 2),
                        (key, value, headers)))
    producer.flush(60)
    for fut, rec in futures:
        md = fut.get(60)
        sent[(md.partition, md.offset)] = rec
    producer.close()
    return sent


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_idempotent_produce_assign_seek_consume(broker: BrokerProcess, codec: object) -> None:
    topic = f"kp-codec-{codec or 'none'}"
    admin = _admin(broker)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    sent = _produce(broker, topic, codec)
    assert len(sent) == N
    # offsets are dense per partition
    for p in (0, 1):
        assert sorted(o for (pp, o) in sent if pp == p) == list(range(N // 2))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000,
                             enable_auto_commit=False)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(tps)
    consumer.seek(tps[0], 0)
    consumer.seek(tps[1], 37)          # inside a batch: the broker returns the whole batch
    got = {}
    for m in consumer:
        got[(m.partition, m.offset)] = (m.key, m.value, [(k, v) for k, v in m.headers])
        if len(got) == N - 37:
            break
    consumer.close()
    expected = {k: v for k, v in sent.items() if k[0] == 0 or k[1] >= 37}
    assert got == expected


def test_list_offsets_by_time(broker: BrokerProcess) -> None:
    topic = "kp-times"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for i, ts in enumerate([1000, 2000, 3000]):
        producer.send(topic, value=b"%d" % i, partition=0, timestamp_ms=ts).get(60)   # auto-created
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition(topic, 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 3}
    found = consumer.offsets_for_times({tp: 1500})[tp]
    assert (found.offset, found.timestamp) == (1, 2000)
    assert consumer.offsets_for_times({tp: 3001})[tp] is None
    consumer.close()
