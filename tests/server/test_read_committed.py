"""Fetch with isolation_level=read_committed: the last stable offset and the aborted transactions
from the ``.txnindex``. The transactions are written into the data directory through kafkalog's
own log (the broker has no transaction coordinator yet); librdkafka's read_committed consumer must
skip the aborted records and stop before the open transaction, read_uncommitted must see all."""

from __future__ import annotations

import os
import time

from confluent_kafka import Consumer, TopicPartition

from kafkalog.log.manager import LogManager
from kafkalog.record.builder import BatchBuilder, build_end_txn_marker
from kafkalog.record.control import ControlRecordType
from tests.server.broker_process import BrokerProcess

#: now, not a fixed past: the broker's retention check (7 days by default) deletes older records
#: while the module's broker runs
TS = int(time.time() * 1000)


def _txn_batch(pid: int, seq: int, values: list, transactional: bool = True) -> bytearray:
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=transactional)
    for i, v in enumerate(values):
        b.append(None, v, TS + i)
    return bytearray(b.build())


def _plain(values: list) -> bytearray:
    b = BatchBuilder()
    for i, v in enumerate(values):
        b.append(None, v, TS + i)
    return bytearray(b.build())


def _marker(kind: ControlRecordType, pid: int) -> bytearray:
    return bytearray(build_end_txn_marker(kind, producer_id=pid, producer_epoch=0, timestamp=TS))


def _consume(b: BrokerProcess, isolation: str, expect: int) -> list:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition("txn", 0, 0)])
    out: list = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(out) < expect:
        out += [m.value() for m in c.consume(100, 0.3) if m.error() is None]
    # a little longer: nothing more may arrive
    out += [m.value() for m in c.consume(100, 1.0) if m.error() is None]
    c.close()
    return out


def test_read_committed_skips_aborted_and_stops_at_the_open_transaction(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "data")
    with LogManager(data, background=False) as m:
        log = m.create_topic("txn", 1)[0]
        log.append(_plain([b"plain-1"]))
        log.append(_txn_batch(1000, 0, [b"aborted-1", b"aborted-2"]))
        log.append(_txn_batch(2000, 0, [b"committed-1"]))
        log.append(_marker(ControlRecordType.ABORT, 1000), origin="coordinator")
        log.append(_plain([b"plain-2"]))
        log.append(_marker(ControlRecordType.COMMIT, 2000), origin="coordinator")
        log.append(_txn_batch(3000, 0, [b"open-1"]))
        log.append(_plain([b"plain-3"]))
    b = BrokerProcess(data).start()
    try:
        committed = _consume(b, "read_committed", 3)
        assert committed == [b"plain-1", b"committed-1", b"plain-2"]
        uncommitted = _consume(b, "read_uncommitted", 7)
        assert uncommitted == [b"plain-1", b"aborted-1", b"aborted-2", b"committed-1", b"plain-2",
                               b"open-1", b"plain-3"]
    finally:
        assert b.stop() == 0, b.stderr()
