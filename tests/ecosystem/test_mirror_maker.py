"""MirrorMaker 2 between ``kafkalog serve`` (the cluster ``edge``) and Apache Kafka 4.4 (``central``),
both ways (issue 28): ``edge.orders`` on Kafka is ``orders`` of kafkalog, ``central.orders`` on
kafkalog is ``orders`` of Kafka, and the checkpoint connector translates a consumer group's committed
offsets: the group, moved from kafkalog to Kafka, resumes where it was (and back). MirrorMaker 2 in
its dedicated mode (``connect-mirror-maker.sh``), 4.3.1 as Connect (``connect-pom.xml``).
MirrorMaker 2 translates at least once: to the offset sync at or before the group's offset (it keeps
fewer syncs the older they are), so the moved group resumes at or a little before where it was,
never after it, and reads every record from there."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.ecosystem import CONNECT_POM, log4j2_properties
from tests.server.broker_process import BrokerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(60)
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(60) == 0 and not errors, errors


def _consume(bootstrap: str, topic: str, group: str, n: int, commit: bool = True,
             timeout: float = 120) -> list[bytes]:
    """``n`` records of ``topic`` in ``group`` from its committed offset (else the earliest),
    committed."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        if commit and got:
            c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def _committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset)
    finally:
        c.close()


def _wait(what: str, done: Any, mm2: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert mm2.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, f"{what} not seen in {timeout:.0f} s (log: {log})"
        time.sleep(1)


def test_mirror_maker_2_both_ways_with_offset_translation(kafka44_broker: kafka44.KafkaBroker,
                                                          tmp_path: Path) -> None:
    try:
        cp = kafka44.classpath(CONNECT_POM)
    except kafka44.Kafka44Unavailable as e:
        kafka44._unavailable(str(e))
    ours = BrokerProcess(str(tmp_path / "data"), configs=["group.initial.rebalance.delay.ms=0"]).start()
    edge, central = ours.bootstrap, kafka44_broker.bootstrap
    props = {
        "clusters": "edge, central", "edge.bootstrap.servers": edge, "central.bootstrap.servers": central,
        "edge->central.enabled": "true", "central->edge.enabled": "true",
        "topics": "orders", "groups": "app-.*",
        "replication.factor": "1", "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "refresh.topics.interval.seconds": "2", "refresh.groups.interval.seconds": "2",
        "emit.checkpoints.interval.seconds": "1", "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1", "emit.heartbeats.interval.seconds": "1",
        "offset.lag.max": "0", "sync.topic.configs.enabled": "true",
        "offset.flush.interval.ms": "1000",
        # kafkalog serves no ACLs (DescribeAcls): MirrorMaker 2 would log a failed sync every interval
        "sync.topic.acls.enabled": "false",
    }
    (tmp_path / "mm2.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    log = tmp_path / "mm2.log"
    (tmp_path / "log4j2.properties").write_text(log4j2_properties(log))
    values = [b"order-%03d" % i for i in range(100)]
    _produce(edge, "orders", values)
    _produce(central, "orders", [b"c" + v for v in values])
    # a group reads 60 of the edge's orders on kafkalog, and 30 of the central's on Kafka
    assert _consume(edge, "orders", "app-edge", 60) == values[:60]
    assert _consume(central, "orders", "app-central", 30) == [b"c" + v for v in values[:30]]
    cmd = kafka44.java_command("org.apache.kafka.connect.mirror.MirrorMaker", str(tmp_path / "mm2.properties"),
                               cp=cp, heap="512m",
                               jvm_args=[f"-Dlog4j2.configurationFile={tmp_path / 'log4j2.properties'}"])
    with open(tmp_path / "mm2.stdout", "ab") as out:
        mm2 = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        from confluent_kafka import Consumer, TopicPartition

        def end(bootstrap: str, topic: str) -> int:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-check"})
            try:
                return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
            except Exception:
                return -1
            finally:
                c.close()

        # the records, each way
        _wait("edge.orders on Kafka", lambda: end(central, "edge.orders") >= 100, mm2, log)
        _wait("central.orders on kafkalog", lambda: end(edge, "central.orders") >= 100, mm2, log)
        assert _consume(central, "edge.orders", "mm2-read", 100, commit=False) == values
        assert _consume(edge, "central.orders", "mm2-read", 100, commit=False) == [b"c" + v for v in values]
        # the groups' offsets, translated onto the mirrored topics: MirrorMaker 2 translates at least
        # once (to the last offset sync at or before the group's offset), so a group moved resumes at
        # or before where it was, never after it
        _wait("app-edge's offset on Kafka", lambda: _safe_committed(central, "app-edge", "edge.orders") > 0,
              mm2, log, timeout=120)
        _wait("app-central's offset on kafkalog",
              lambda: _safe_committed(edge, "app-central", "central.orders") > 0, mm2, log, timeout=120)
    finally:
        mm2.send_signal(signal.SIGTERM)
        try:
            mm2.wait(60)
        except subprocess.TimeoutExpired:
            mm2.kill()
            mm2.wait()
    # each group moved to the other cluster resumes where it was (or, at least once, a little before)
    at_central = _committed(central, "app-edge", "edge.orders")
    at_edge = _committed(edge, "app-central", "central.orders")
    assert 0 < at_central <= 60 and 0 < at_edge <= 30, (at_central, at_edge)   # translated, never past
    assert _consume(central, "edge.orders", "app-edge", 100 - at_central) == values[at_central:]
    assert _consume(edge, "central.orders", "app-central", 100 - at_edge) == [b"c" + v for v in values[at_edge:]]
    assert ours.stop() == 0, ours.stderr()


def _safe_committed(bootstrap: str, group: str, topic: str) -> int:
    try:
        return _committed(bootstrap, group, topic)
    except Exception:
        return -1
