"""Topic-level behaviour through confluent-kafka: LogAppendTime, max.message.bytes, DeleteRecords,
IncrementalAlterConfigs, DescribeCluster, topic IDs that survive a restart."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.server.broker_process import BrokerProcess


def _admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap})


def _create(b: BrokerProcess, name: str, partitions: int = 1, **config: str) -> None:
    admin = _admin(b)           # (kept alive until the futures complete)
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        f.result(60)


def _produce(b: BrokerProcess, topic: str, values: list, **kw: object) -> list:
    results = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", **kw})
    for v in values:
        p.produce(topic, value=v, partition=0, timestamp=1000,
                  on_delivery=lambda err, msg: results.append((err, msg)))
    p.flush(60)
    return results


def _consume(b: BrokerProcess, topic: str, n: int, offset: int = 0) -> list:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, offset)])
    out: list = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        out += [m for m in c.consume(100, 0.5) if m.error() is None]
    c.close()
    return out


def test_log_append_time(broker: BrokerProcess) -> None:
    _create(broker, "lat", **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    assert [err for err, _m in _produce(broker, "lat", [b"a", b"b"])] == [None, None]
    msgs = _consume(broker, "lat", 2)
    assert len(msgs) == 2
    for m in msgs:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert ts >= before                      # the broker's clock, not the producer's 1000


def test_max_message_bytes(broker: BrokerProcess) -> None:
    _create(broker, "small", **{"max.message.bytes": "1000"})
    res = _produce(broker, "small", [b"x" * 5000], **{"message.max.bytes": 100000})
    assert res[0][0] is not None and res[0][0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert [err for err, _m in _produce(broker, "small", [b"x" * 100])] == [None]


def test_delete_records_moves_the_log_start_offset(broker: BrokerProcess) -> None:
    _create(broker, "dr")
    _produce(broker, "dr", [b"%d" % i for i in range(10)])
    admin = _admin(broker)
    res = admin.delete_records([TopicPartition("dr", 0, 6)])
    for f in res.values():
        assert f.result(60).low_watermark == 6
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    assert c.get_watermark_offsets(TopicPartition("dr", 0), timeout=30) == (6, 10)
    c.close()
    assert [m.value() for m in _consume(broker, "dr", 4, 6)] == [b"6", b"7", b"8", b"9"]


def test_incremental_alter_configs(broker: BrokerProcess) -> None:
    _create(broker, "alter")
    admin = _admin(broker)
    res = ConfigResource(ConfigResource.Type.TOPIC, "alter", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(60)
    got = _describe(admin, "alter")
    assert got["retention.ms"].value == "3600000"
    bad = ConfigResource(ConfigResource.Type.TOPIC, "alter", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as e:
        for f in admin.incremental_alter_configs([bad]).values():
            f.result(60)
    assert "retention.ms" in str(e.value)
    # reset to the default
    res = ConfigResource(ConfigResource.Type.TOPIC, "alter", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(60)
    got = _describe(admin, "alter")
    assert got["retention.ms"].value == str(7 * 24 * 3600 * 1000)


def _describe(admin: AdminClient, topic: str) -> dict:
    res = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return next(iter(res.values())).result(60)


def test_describe_cluster(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    desc = admin.describe_cluster().result(60)
    assert [n.port for n in desc.nodes] == [broker.port]
    assert desc.controller is not None and desc.cluster_id


def test_topic_ids_survive_a_restart(tmp_path: os.PathLike[str]) -> None:
    """Metadata returns the ID kept in ``partition.metadata``; after a restart librdkafka (which
    fetches by topic ID, Fetch v13+) reads on with the same ID."""
    data = os.path.join(str(tmp_path), "data")
    b = BrokerProcess(data).start()
    try:
        _create(b, "ids", 2)
        _produce(b, "ids", [b"before"])
        admin = _admin(b)
        first = admin.describe_topics(TopicCollection(["ids"]))["ids"].result(60).topic_id
    finally:
        assert b.stop() == 0
    with open(os.path.join(data, "ids-0", "partition.metadata"), encoding="ascii") as f:
        # librdkafka prints IDs in standard base64, Kafka's files use the URL-safe alphabet
        assert f.read().endswith(str(first).replace("+", "-").replace("/", "_"))
    b = BrokerProcess(data).start()
    try:
        admin = _admin(b)
        again = admin.describe_topics(TopicCollection(["ids"]))["ids"].result(60).topic_id
        assert str(again) == str(first)
        _produce(b, "ids", [b"after"])
        assert [m.value() for m in _consume(b, "ids", 2)] == [b"before", b"after"]
    finally:
        assert b.stop() == 0
