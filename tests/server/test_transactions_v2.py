"""Transactions v2 (KIP-890) request by request, against ``kafkalog serve`` and Kafka 4.4 in the same
test: the same InitProducerId, Produce, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and
EndTxn sequences of a v2 client (EndTxn v5, Produce v12, TxnOffsetCommit v5) and of a v1 client
(AddPartitionsToTxn, Produce v9-v11, EndTxn v3-v4); the answers (errors, producer ids as labels,
epochs) and the batches each partition holds (producer, epoch, COMMIT/ABORT) must be equal:
the epoch bumped by every end, retries of an end whose answer was lost, an end with nothing
written, a late write of an old epoch refused (the hanging transaction of KIP-890), writes of a v1
client verified (part 1), a zombie fenced, KIP-360's re-initialisation, a transaction timed out
and its producer going on after an abort, transactional offsets added by TxnOffsetCommit v5."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.java_client import JavaUnavailable, classpath
from tests.server.side_by_side import assert_same, run_side_by_side
from tests.server.txn_raw import TxnClient

#: both brokers: timed-out transactions aborted within a second
SETTINGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def kafka44_txn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka44.KafkaBroker]:
    kafka44.require()
    b = kafka44.KafkaBroker(tmp_path_factory.mktemp("kafka44-txn"), SETTINGS)
    b.format()
    b.start()
    try:
        yield b
    finally:
        if b.alive():
            b.stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("kafkalog-txn") / "data"),
                      [f"{k}={v}" for k, v in SETTINGS.items()]).start()
    try:
        yield b
    finally:
        if b.alive():
            assert b.stop() == 0, b.stderr()


Scenario = Callable[[TxnClient, str], None]


def both(kafka: kafka44.KafkaBroker, ours: BrokerProcess, scenario: Scenario) -> list[list[Any]]:
    """Run ``scenario`` against both brokers at once; the two transcripts, Kafka's first."""
    suffix = uuid.uuid4().hex[:6]
    return run_side_by_side(kafka.port, ours.port, lambda port: (TxnClient(port, suffix), suffix), scenario)


def v2_commit_abort_and_retries(c: TxnClient, sfx: str) -> None:
    t, tid = "t" + sfx, "x" + sfx
    c.create_topic(t, 2)
    c.find_coordinator(tid)
    _e, pid, e0 = c.init_producer_id(tid)
    c.produce(tid, pid, e0, t, 0, b"a")                # partitions join by being written to
    c.produce(tid, pid, e0, t, 1, b"b")
    _e, pid, e1 = c.end_txn(tid, pid, e0, True)        # bumped
    c.stable(t, 0)                                     # Kafka's markers written (else its answer
    c.stable(t, 1)                                     # races: CONCURRENT_TRANSACTIONS meanwhile)
    c.produce(tid, pid, e1, t, 0, b"c")
    _e, pid, e2 = c.end_txn(tid, pid, e1, False)
    c.stable(t, 0)
    c.end_txn(tid, pid, e1, False)                     # a retry of the abort: same answer
    c.end_txn(tid, pid, e1, True)                      # the other way: INVALID_TXN_STATE
    c.end_txn(tid, pid, e2, True)                      # nothing to commit
    c.end_txn(tid, pid, e2, False)                     # an abort with nothing written bumps
    c.produce(tid, pid, e1, t, 0, b"late", seq=1)      # a late write of an old epoch
    c.end_txn(tid, pid, 0, True)                       # a stale end
    c.end_txn(tid, pid + 1000, e2, True)               # another producer id
    c.produce(tid, pid, e2 + 1, t, 0, b"d")
    c.end_txn(tid, pid, e2 + 1, True, version=4)       # a v1 end of the transaction: no bump
    c.stable(t, 0)
    c.end_txn(tid, pid, e2 + 1, True, version=4)       # and its retry
    c.batches(t, 0)
    c.batches(t, 1)


def v1_client_verified(c: TxnClient, sfx: str) -> None:
    t, tid = "u" + sfx, "y" + sfx
    c.create_topic(t, 2)
    c.find_coordinator(tid)
    _e, pid, ep = c.init_producer_id(tid, version=4)
    c.produce(tid, pid, ep, t, 0, b"a", version=9)      # not added: INVALID_TXN_STATE
    c.produce(tid, pid, ep, t, 0, b"a", version=11)     # TRANSACTION_ABORTABLE from v11
    c.produce(None, pid, ep, t, 0, b"a", version=9)     # no transactional id
    c.produce("nope" + sfx, pid, ep, t, 0, b"a", version=9)
    c.add_partitions(tid, pid, ep, [(t, 0)])
    c.produce(tid, pid, ep, t, 0, b"a", version=9)
    c.end_txn(tid, pid, ep, True, version=4)
    c.end_txn(tid, pid, ep, True, version=4)            # a retry
    c.end_txn(tid, pid, ep, False, version=4)           # the other way
    c.stable(t, 0)                                      # the commit's marker written (see below)
    c.produce(tid, pid, ep, t, 0, b"late", version=9)   # after the commit: refused (KIP-890 part 1)
    c.add_partitions(tid, pid, ep, [(t, 1)])
    c.produce(tid, pid, ep, t, 1, b"b", version=10)
    c.end_txn(tid, pid, ep, False, version=3)
    # after the abort's markers (Kafka writes them after it answers EndTxn, and until the marker is
    # in the partition its leader still sees the transaction open there and appends a late write
    # unverified: Kafka's answer raced; kafkalog writes its markers before it answers)
    c.stable(t, 1)
    c.produce(tid, pid, ep, t, 1, b"late", version=10)  # no hanging transaction
    c.end_txn(tid, pid, ep, False, version=3)
    c.end_txn(tid, pid, ep, False, version=5)           # a v2 end after v1 ones bumps
    c.batches(t, 0)
    c.batches(t, 1)


def zombie_fenced_and_kip360(c: TxnClient, sfx: str) -> None:
    t, tid = "f" + sfx, "z" + sfx
    c.create_topic(t, 1)
    c.find_coordinator(tid)
    _e, pid, ep = c.init_producer_id(tid)
    c.produce(tid, pid, ep, t, 0, b"open")
    _e, pid2, ep2 = c.init_producer_id(tid)             # a new producer: the open one is aborted
    c.produce(tid, pid, ep, t, 0, b"zombie")
    c.end_txn(tid, pid, ep, True)
    c.init_producer_id(tid, expected=(pid, ep))
    c.produce(tid, pid2, ep2, t, 0, b"new")
    c.init_producer_id(tid, expected=(pid2, ep2))       # KIP-360 with a transaction open
    c.init_producer_id(tid, expected=(pid2, ep2))       # its retry
    c.init_producer_id(tid, expected=(pid2, ep2 + 1))
    c.init_producer_id(tid, version=3, expected=(pid2, 0))
    c.init_producer_id("new" + sfx, expected=(pid2, 7))
    c.batches(t, 0)


def offsets_in_transactions(c: TxnClient, sfx: str) -> None:
    t, tid, g = "o" + sfx, "w" + sfx, "g" + sfx
    c.create_topic(t, 1)
    c.find_coordinator(tid)
    c.find_coordinator(g, 0)
    _e, pid, ep = c.init_producer_id(tid)
    c.txn_offset_commit(tid, pid, ep, g, t, {0: 5}, version=3)   # not added: INVALID_TXN_STATE
    c.txn_offset_commit(tid, pid, ep, g, t, {0: 5}, version=4)   # TRANSACTION_ABORTABLE
    c.txn_offset_commit(tid, pid, ep, g, t, {0: 5}, version=5)   # v2: added by the commit
    c.committed_offsets(g, t, 1, wait_stable=False)              # UNSTABLE_OFFSET_COMMIT
    _e, pid, ep = c.end_txn(tid, pid, ep, True)
    c.committed_offsets(g, t, 1)
    c.txn_offset_commit(tid, pid, ep - 1, g, t, {0: 6}, version=5)
    c.add_offsets(tid, pid, ep, g, version=3)
    c.txn_offset_commit(tid, pid, ep, g, t, {0: 7}, version=3)
    c.end_txn(tid, pid, ep, False, version=4)
    c.committed_offsets(g, t, 1)


def timed_out_then_aborted_by_its_producer(c: TxnClient, sfx: str) -> None:
    t, tid = "m" + sfx, "v" + sfx
    c.create_topic(t, 1)
    c.find_coordinator(tid)
    _e, pid, ep = c.init_producer_id(tid, timeout_ms=1000)
    c.produce(tid, pid, ep, t, 0, b"slow")
    time.sleep(4)                                       # the broker aborts it (epoch bumped)
    c.stable(t, 0)                                      # and has written the abort's marker
    c.produce(tid, pid, ep, t, 0, b"late")
    c.end_txn(tid, pid, ep, True)
    _e, pid, ep = c.end_txn(tid, pid, ep, False)        # a v2 producer aborts and goes on
    c.produce(tid, pid, ep, t, 0, b"again")
    c.end_txn(tid, pid, ep, True)
    c.batches(t, 0)


SCENARIOS: dict[str, Scenario] = {
    "v2-commit-abort-retries": v2_commit_abort_and_retries,
    "v1-client-verified": v1_client_verified,
    "zombie-fenced-kip360": zombie_fenced_and_kip360,
    "offsets": offsets_in_transactions,
    "timed-out": timed_out_then_aborted_by_its_producer,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_transactions_request_by_request_as_kafka(kafka44_txn: kafka44.KafkaBroker, ours: BrokerProcess,
                                                  name: str) -> None:
    mine = assert_same(both(kafka44_txn, ours, SCENARIOS[name]))
    assert any(step[0] in ("EndTxn", "TxnOffsetCommit") and 0 in step for step in mine), mine


# --- the Java client 4.4 on transactions v2 ------------------------------------------------------

def _java(mode: str, bootstrap: str, topic: str, tid: str, **props: str) -> tuple[int, list[str]]:
    """One step of ``java/KafkalogTxnV2.java`` with kafka-clients 4.4: its exit code and lines."""
    try:
        cp = classpath("4.4.0")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    r = subprocess.run(kafka44.java_command("KafkalogTxnV2", mode, bootstrap, topic, tid,
                                            *[f"{k.replace('_', '.')}={v}" for k, v in props.items()], cp=cp),
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout.splitlines() + ([f"stderr: {r.stderr[-1500:]}"] if r.returncode not in (0, 3) else [])


def java_steps(c: TxnClient, sfx: str) -> None:
    """commit/abort/offsets, a crash left to time out then a resumed producer, a zombie fenced,
    a timeout the producer outlives: each step's printed lines and the partitions' batches."""
    bootstrap = f"127.0.0.1:{c.port}"
    t, tid = "j" + sfx, "jx" + sfx
    c.create_topic(t, 3)
    c.note("java", *_java("commit-abort", bootstrap, t, tid + "-1"))
    c.committed_offsets(tid + "-1-group", t, 3)
    c.note("java", *_java("crash", bootstrap, t, tid + "-2", transaction_timeout_ms="3000"))
    time.sleep(5)                         # the broker aborts the crashed producer's transaction
    c.note("java", *_java("resume", bootstrap, t, tid + "-2"))
    c.note("java", *_java("zombie", bootstrap, t, tid + "-3"))
    c.note("java", *_java("timeout", bootstrap, t, tid + "-4", transaction_timeout_ms="2000"))
    for p in range(3):
        c.batches(t, p)


def test_java_client_on_transactions_v2_as_on_kafka(kafka44_txn: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    try:
        classpath("4.4.0")                # compiled once, before the two runs
    except JavaUnavailable as e:
        pytest.skip(str(e))
    mine = assert_same(both(kafka44_txn, ours, java_steps))
    java = [step for step in mine if step[0] == "java"]
    assert java[0] == ("java", 0, ["committed", "aborted", "committed with offsets"])
    assert java[1] == ("java", 3, ["sent"]) and java[2] == ("java", 0, ["resumed"])
    assert java[3] == ("java", 0, ["b initialized", "b committed", "zombie fenced InvalidProducerEpochException"])
    # KIP-890: a v2 producer whose transaction timed out aborts it and goes on
    assert java[4] == ("java", 0, ["late commit failed InvalidProducerEpochException", "aborted",
                                   "committed after timeout"])
    logs = {step[1]: step[2] for step in mine if step[0] == "Log"}
    # transactions v2: the markers carry the bumped epochs (commit 1, abort 2, commit 3 of one producer)
    first = [b for b in logs["j-0"] if b[1] == "P0"]
    assert [(b[2], b[3]) for b in first] == [(0, 1), (1, "COMMIT"), (1, 1), (2, "ABORT"), (2, 1), (3, "COMMIT")]


def test_transaction_version_2_finalized_as_on_kafka(kafka44_txn: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    """ApiVersions v4: ``transaction.version`` supported 0-2 and finalized at 2, and the transaction
    APIs' ranges a transactions v2 client needs (EndTxn v5, TxnOffsetCommit v5), as Kafka 4.4."""
    def features(port: int) -> tuple[Any, ...]:
        c = TxnClient(port)
        try:
            r = c.call(18, 4, {"client_software_name": "kafkalog-tests", "client_software_version": "1"})
        finally:
            c.close()
        supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
        finalized = {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}
        apis = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        return (supported["transaction.version"], finalized["transaction.version"],
                apis[26], apis[25], min(apis[28][1], 5), apis[22])

    assert features(ours.port) == features(kafka44_txn.port) == ((0, 2), (2, 2), (0, 5), (0, 4), 5, (0, 5))
