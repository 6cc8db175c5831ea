"""Transactions through the embedded producer, from the outside: COMMIT/ABORT markers, aborted data
invisible to read_committed readers and visible to read_uncommitted ones, the last stable offset
held by an open transaction, fencing, ``__transaction_state`` in Kafka's format, and the abort of a
transaction left open by a writer killed with SIGKILL once ``transaction.timeout.ms`` passed."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import kafkalog
from kafkalog.client.producer import IllegalStateError
from kafkalog.coordinator.transaction_coordinator import ProducerFencedError
from kafkalog.coordinator.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionState,
    key_from_bytes,
    partition_for,
    value_from_bytes,
)
from kafkalog.record.control import ControlRecordType, control_record_type

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
BROKER = {"transaction.state.log.num.partitions": 3}


def kill_when_ready(script: str) -> None:
    """Run ``script`` in a real Python process until it prints ``ready``, then SIGKILL it."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.path.abspath(SRC)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _values(dl, topic, isolation):
    return [r.value for r in dl.consume(topic, isolation=isolation)]


def _markers(log):
    return [control_record_type(bytes(b.records()[0].key)) for b in log.batches() if b.is_control]


def _txn_state(dl, tid):
    """The latest __transaction_state value of ``tid``, decoded from the topic's records."""
    latest = None
    for p in dl.manager.partitions_of(TRANSACTION_STATE_TOPIC):
        for r in dl.manager.get_log(TRANSACTION_STATE_TOPIC, p).records():
            if key_from_bytes(bytes(r.key)) == tid:
                assert p == partition_for(tid, len(dl.manager.partitions_of(TRANSACTION_STATE_TOPIC)))
                latest = value_from_bytes(tid, bytes(r.value))
    return latest


def test_commit_and_abort(tmp_path):
    with kafkalog.open(tmp_path / "d", BROKER, background=False) as dl:
        dl.create_topic("t", 2)
        p = dl.producer(transactional_id="tx-1")
        with pytest.raises(IllegalStateError):
            p.send("t", b"too early")
        p.init_transactions()
        assert p.producer_id >= 0 and p.producer_epoch == 0
        p.begin_transaction()
        for i in range(5):
            p.send("t", b"committed-%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send("t", b"aborted-%d" % i, partition=0)
        p.abort_transaction()
        p.begin_transaction()
        p.send("t", b"last", partition=1)
        p.commit_transaction()
        p.close()
        committed = sorted(_values(dl, "t", "read_committed"))
        assert committed == sorted([b"committed-%d" % i for i in range(5)] + [b"last"])
        assert sorted(_values(dl, "t", "read_uncommitted")) == sorted(committed + [b"aborted-%d" % i
                                                                                 for i in range(3)])
        log0 = dl.manager.get_log("t", 0)
        assert _markers(log0) == [ControlRecordType.COMMIT, ControlRecordType.ABORT]
        assert _markers(dl.manager.get_log("t", 1)) == [ControlRecordType.COMMIT, ControlRecordType.COMMIT]
        # the aborted transaction is in the .txnindex of partition 0
        txn_files = glob.glob(os.path.join(log0.dir, "*.txnindex"))
        assert txn_files and sum(os.path.getsize(f) for f in txn_files) == 34
        assert dl.end_offsets("t", "read_committed") == dl.end_offsets("t")
        st = _txn_state(dl, "tx-1")
        assert st.state == TransactionState.COMPLETE_COMMIT and st.producer_id == p.producer_id
    # after a reopen: the same view (state from the files)
    with kafkalog.open(tmp_path / "d", BROKER, background=False) as dl:
        assert sorted(_values(dl, "t", "read_committed")) == committed


def test_open_transaction_holds_the_last_stable_offset(tmp_path):
    with kafkalog.open(tmp_path / "d", BROKER, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b"before")
        tx = dl.producer(transactional_id="tx-lso")
        tx.init_transactions()
        tx.begin_transaction()
        tx.send("t", b"in-txn")
        tx.flush()
        with dl.producer() as plain:
            plain.send("t", b"plain-after")
        assert dl.end_offsets("t") == {0: 3}
        assert dl.end_offsets("t", "read_committed") == {0: 1}      # held at the transaction's start
        assert _values(dl, "t", "read_committed") == [b"before"]
        assert _values(dl, "t", "read_uncommitted") == [b"before", b"in-txn", b"plain-after"]
        assert _txn_state(dl, "tx-lso").state == TransactionState.ONGOING
        assert _txn_state(dl, "tx-lso").partitions == {("t", 0)}
        tx.commit_transaction()
        assert dl.end_offsets("t", "read_committed") == {0: 4}
        assert _values(dl, "t", "read_committed") == [b"before", b"in-txn", b"plain-after"]
        tx.close()


def test_new_producer_fences_the_old_one(tmp_path):
    with kafkalog.open(tmp_path / "d", BROKER, background=False) as dl:
        dl.create_topic("t", 1)
        old = dl.producer(transactional_id="tx-f")
        old.init_transactions()
        old.begin_transaction()
        old.send("t", b"zombie")
        old.flush()
        new = dl.producer(transactional_id="tx-f")
        new.init_transactions()                 # aborts the open transaction, bumps the epoch
        assert new.producer_id == old.producer_id and new.producer_epoch > old.producer_epoch
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
        new.begin_transaction()
        new.send("t", b"fresh")
        new.commit_transaction()
        assert _values(dl, "t", "read_committed") == [b"fresh"]
        assert _markers(dl.manager.get_log("t", 0)) == [ControlRecordType.ABORT, ControlRecordType.COMMIT]
        new.close()


def test_transaction_of_a_killed_writer_is_aborted_after_its_timeout(tmp_path):
    """A real writer process opens a transaction, appends to it and is killed with SIGKILL; the
    next open of the directory after ``transaction.timeout.ms`` aborts it (ABORT marker, LSO
    released, read_committed readers skip the data), as Kafka's coordinator does."""
    d = tmp_path / "d"
    script = textwrap.dedent(f"""
        import sys, time, kafkalog
        dl = kafkalog.open({str(d)!r}, {BROKER!r})
        dl.create_topic("t", 1, exist_ok=True)
        dl.produce("t", b"committed-before")
        p = dl.producer(transactional_id="tx-k", transaction_timeout_ms=1000)
        p.init_transactions()
        p.begin_transaction()
        for i in range(20):
            p.send("t", b"open-%d" % i)
        p.flush()
        print("ready", flush=True)
        time.sleep(600)
    """)
    kill_when_ready(script)
    with kafkalog.open(d, BROKER, background=False, read_only=True) as ro:
        assert ro.end_offsets("t", "read_committed") == {0: 1}       # still held by the open transaction
    time.sleep(1.2)                                                   # past transaction.timeout.ms
    with kafkalog.open(d, BROKER, background=False) as dl:
        assert _values(dl, "t", "read_committed") == [b"committed-before"]
        assert len(_values(dl, "t", "read_uncommitted")) == 21
        assert dl.end_offsets("t", "read_committed") == dl.end_offsets("t") == {0: 22}
        assert _markers(dl.manager.get_log("t", 0)) == [ControlRecordType.ABORT]
        st = _txn_state(dl, "tx-k")
        assert st.state == TransactionState.COMPLETE_ABORT and st.producer_epoch == 1
        # the id is usable again: a new producer gets the next epoch
        p = dl.producer(transactional_id="tx-k")
        p.init_transactions()
        assert p.producer_epoch == 2
        p.close()


def test_timed_out_transaction_aborted_by_the_scheduler(tmp_path):
    """In the open process: the directory's scheduler aborts a transaction once it timed out."""
    cfg = dict(BROKER, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
                          "log.initial.task.delay.ms": 0})
    with kafkalog.open(tmp_path / "d", cfg) as dl:
        dl.create_topic("t", 1)
        p = dl.producer(transactional_id="tx-s", transaction_timeout_ms=300)
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"forgotten")
        p.flush()
        assert dl.end_offsets("t", "read_committed") == {0: 0}
        deadline = time.monotonic() + 30
        while dl.end_offsets("t", "read_committed") != {0: 2} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dl.end_offsets("t", "read_committed") == {0: 2}
        assert _values(dl, "t", "read_committed") == []
        fut = p.send("t", b"zombie write")         # the old epoch is refused by the log
        with pytest.raises(kafkalog.errors.ProducerStateError):
            fut.get(timeout=10)
        with pytest.raises(kafkalog.errors.ProducerStateError):
            p.commit_transaction()
        p.close()


def test_transaction_log_records_follow_kafkas_schemas():
    """TransactionLogKey v0 / TransactionLogValue v0 written byte for byte as Kafka's schema
    (transaction-coordinator/.../TransactionLogKey.json, TransactionLogValue.json) lays them out;
    the flexible v1 (tagged fields) is read."""
    import struct

    from kafkalog.coordinator.transaction_log import (
        TransactionMetadata,
        key_to_bytes,
        value_to_bytes,
    )
    assert key_to_bytes("tx") == struct.pack(">hh2s", 0, 2, b"tx")
    m = TransactionMetadata("tx", 42, 3, 60000, TransactionState.ONGOING, {("a", 1), ("a", 0), ("b", 7)},
                            1000, 900)
    want = (struct.pack(">hqhib", 0, 42, 3, 60000, 1) + struct.pack(">i", 2)
            + struct.pack(">h1s", 1, b"a") + struct.pack(">iii", 2, 0, 1)
            + struct.pack(">h1s", 1, b"b") + struct.pack(">ii", 1, 7)
            + struct.pack(">qq", 1000, 900))
    assert value_to_bytes(m, 0) == want
    assert value_from_bytes("tx", want) == m
    # v1: compact array/strings (length + 1 as unsigned varints), tagged fields after each struct
    # and at the end (PreviousProducerId tag 0 = 41, ClientTransactionVersion tag 2 = 2)
    v1 = (struct.pack(">hqhib", 1, 42, 3, 60000, 5) + bytes([2]) + bytes([2]) + b"a" + bytes([2])
          + struct.pack(">i", 0) + bytes([0]) + struct.pack(">qq", 1000, 900)
          + bytes([2, 0, 8]) + struct.pack(">q", 41) + bytes([2, 2]) + struct.pack(">h", 2))
    got = value_from_bytes("tx", v1)
    assert (got.producer_id, got.state, got.partitions) == (42, TransactionState.COMPLETE_ABORT, {("a", 0)})
    assert (got.previous_producer_id, got.next_producer_id, got.client_transaction_version) == (41, -1, 2)
    assert value_to_bytes(got) == v1          # what Kafka writes with transaction.version 2 finalized
    # v1 of Empty: null partitions (0), every tag in tag order (NextProducerId 1 = 43)
    empty = TransactionMetadata("tx", 42, 0, 60000, TransactionState.EMPTY, set(), 1000, -1,
                                previous_producer_id=42, next_producer_id=43, client_transaction_version=2)
    assert value_to_bytes(empty) == (struct.pack(">hqhib", 1, 42, 0, 60000, 0) + bytes([0])
                                     + struct.pack(">qq", 1000, -1) + bytes([3, 0, 8]) + struct.pack(">q", 42)
                                     + bytes([1, 8]) + struct.pack(">q", 43) + bytes([2, 2]) + struct.pack(">h", 2))
    assert value_from_bytes("tx", value_to_bytes(empty)) == empty
    assert key_from_bytes(key_to_bytes("tx")) == "tx"
    with pytest.raises(kafkalog.errors.KafkalogError):
        value_from_bytes("tx", want[:20])
