"""Transactions v2 survive restarts, in Kafka 4.4's own ``__transaction_state`` records: from one data
directory (formatted and started by Kafka 4.4, then a transactional id written at epoch 32765 by
kafkalog), Kafka 4.4 and ``kafkalog serve`` run the same requests on two copies: the epoch exhausted
and handed over to a new producer id (KIP-890's ``nextProducerId``, the retry of that end), open
transactions of a v2 and a v1 client; both brokers are killed (SIGKILL) and restarted and the open
transactions go on; every answer and batch equal. ``kafkalog dump --transaction-log-decoder`` prints
the ``__transaction_state`` segments kafkalog wrote, and those Kafka wrote, as DumpLogSegments does;
then Kafka 4.4 started on kafkalog's directory ends the transaction kafkalog left open."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import kafkalog
from kafkalog.coordinator.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TransactionState,
    key_to_bytes,
    partition_for,
    value_to_bytes,
)
from kafkalog.record.builder import build_batch
from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.test_transactions_v2 import SETTINGS
from tests.server.txn_raw import TxnClient

#: the crafted producer id (far from both brokers' first blocks)
CRAFTED_PID = 900_000


def _craft_exhausted(data: Path, tid: str) -> None:
    """Write ``tid`` at epoch 32765 (a completed v2 commit) into ``__transaction_state``, offline."""
    now = int(time.time() * 1000)
    m = TransactionMetadata(tid, CRAFTED_PID, 32765, 60000, TransactionState.COMPLETE_COMMIT, set(), now, now,
                            previous_producer_id=CRAFTED_PID, client_transaction_version=2)
    with kafkalog.open(data, background=False) as dl:
        n = len(dl.manager.partitions_of(TRANSACTION_STATE_TOPIC))
        dl.manager.get_log(TRANSACTION_STATE_TOPIC, partition_for(tid, n)).append(
            build_batch([(key_to_bytes(tid), value_to_bytes(m), now)]))


def _dump(segment: Path) -> tuple[str, str]:
    theirs = kafka44.dump_log_segments([segment], "--transaction-log-decoder")
    ours = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", str(segment),
                           "--transaction-log-decoder"], capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    return theirs, ours.stdout


def _state_segments(data: Path) -> list[Path]:
    return sorted(p for d in data.glob(f"{TRANSACTION_STATE_TOPIC}-*") for p in d.glob("*.log")
                  if p.stat().st_size > 0)


@pytest.mark.slow
def test_transactions_survive_restarts_and_kafka_adopts_them(tmp_path: Path) -> None:
    kafka44.require()
    sfx = uuid.uuid4().hex[:6]
    t, exhausted, v2, v1, left_open = f"p{sfx}", f"e{sfx}", f"a{sfx}", f"b{sfx}", f"c{sfx}"
    kafka = kafka44.KafkaBroker(tmp_path / "kafka", SETTINGS)
    kafka.format()
    kafka.start()
    try:
        setup = TxnClient(kafka.port)
        setup.create_topic(t, 3)
        for tid in (exhausted, v2, v1, left_open):        # creates __transaction_state
            setup.find_coordinator(tid)
        setup.close()
    finally:
        kafka.stop()
    _craft_exhausted(kafka.log_dir, exhausted)
    mine_dir = tmp_path / "kafkalog-data"
    shutil.copytree(kafka.log_dir, mine_dir)
    configs = [f"{k}={v}" for k, v in SETTINGS.items()]
    #: broker -> transactional id -> (producer id, epoch) from InitProducerId
    ids: dict[str, dict[str, tuple[int, int]]] = {"kafka": {}, "kafkalog": {}}

    def ready(c: TxnClient) -> None:
        c.wait_led(t, 3)
        for tid in (exhausted, v2, v1, left_open):
            c.find_coordinator(tid)

    def first(c: TxnClient, who: str) -> None:
        ready(c)
        pid, ep = CRAFTED_PID, 32765
        c.label(pid)
        c.produce(exhausted, pid, ep, t, 0, b"e1")
        _e, pid, ep = c.end_txn(exhausted, pid, ep, True)           # 32766: exhausted
        c.produce(exhausted, pid, ep, t, 0, b"e2")
        _e, pid2, ep2 = c.end_txn(exhausted, pid, ep, True)         # markers at 32767, then a new id
        c.end_txn(exhausted, pid, ep, True)                         # the retry: the new id again
        c.end_txn(exhausted, pid, ep, False)
        c.produce(exhausted, pid2, ep2, t, 1, b"e3")
        c.end_txn(exhausted, pid2, ep2, False)
        c.init_producer_id(exhausted, expected=(pid, ep))
        for tid, version in ((v2, 5), (v1, 4), (left_open, 5)):
            _e, pid, ep = c.init_producer_id(tid, version=version)
            ids[who][tid] = (pid, ep)
        pid, ep = ids[who][v2]
        c.produce(v2, pid, ep, t, 2, b"a-open")
        pid, ep = ids[who][v1]
        c.add_partitions(v1, pid, ep, [(t, 2)])
        c.produce(v1, pid, ep, t, 2, b"b-open", version=9)
        c.batches(t, 0)
        c.batches(t, 1)

    def second(c: TxnClient, who: str) -> None:
        ready(c)
        pid, ep = ids[who][v2]
        c.produce(v2, pid, ep, t, 1, b"a-more")                   # the open transaction goes on
        c.end_txn(v2, pid, ep, True)
        c.end_txn(v2, pid, ep, True)      # its retry: answered once the markers are written (Kafka)
        pid, ep = ids[who][v1]
        c.produce(v1, pid, ep, t, 2, b"b-more", version=9)
        c.produce(v1, pid, ep, t, 0, b"b-not-added", version=9)
        c.end_txn(v1, pid, ep, True, version=4)
        pid, ep = ids[who][left_open]
        c.produce(left_open, pid, ep, t, 0, b"c-open")             # left open for the adoption
        c.batches(t, 1)
        c.batches(t, 2)

    def run(port: int, state: TxnClient | None, steps: Callable[[TxnClient, str], None], who: str) -> TxnClient:
        c = TxnClient(port, sfx)
        if state is not None:                  # the same producers: their labels and sequences
            c.labels, c.sequences = state.labels, state.sequences
        try:
            steps(c, who)
        except BaseException as e:
            raise AssertionError(f"{who}: {e!r}; transcript so far: {c.transcript}") from e
        finally:
            c.close()
        return c

    ours = BrokerProcess(str(mine_dir), configs).start()
    kafka.start()
    try:
        theirs_1 = run(kafka.port, None, first, "kafka")
        ours_1 = run(ours.port, None, first, "kafkalog")
        assert ours_1.transcript == theirs_1.transcript
        ours.stop(sig=signal.SIGKILL)                       # a crash, nothing flushed at shutdown
        kafka.kill()
        ours = BrokerProcess(str(mine_dir), configs).start()
        kafka.start()
        theirs_2 = run(kafka.port, theirs_1, second, "kafka")
        ours_2 = run(ours.port, ours_1, second, "kafkalog")
        assert ours_2.transcript == theirs_2.transcript
        assert ("Produce", 9, "b", "P3", 0, "p-0", 48) in ours_2.transcript   # v1: not added
    finally:
        kafka.stop()
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
    log = {step[1]: step[2] for step in ours_1.transcript if step[0] == "Log"}
    assert [b[1:] for b in log["p-0"][:4]] == [("P0", 32765, 1), ("P0", 32766, "COMMIT"), ("P0", 32766, 1),
                                               ("P0", 32767, "COMMIT")]

    # the __transaction_state segments each broker wrote read as Kafka reads them
    for data in (mine_dir, kafka.log_dir):
        segments = _state_segments(data)
        assert segments
        dumps = [_dump(segment) for segment in segments]
        for theirs, mine in dumps:
            assert mine == theirs
        assert '"clientTransactionVersion":2' in "".join(mine for _t, mine in dumps)

    # Kafka 4.4 adopts kafkalog's directory and ends the transaction kafkalog left open
    shutil.rmtree(kafka.log_dir)
    shutil.move(str(mine_dir), kafka.log_dir)
    kafka.start()
    try:
        pid, ep = ids["kafkalog"][left_open]
        c = TxnClient(kafka.port, sfx)
        c.labels = dict(ours_2.labels)
        c.wait_led(t, 3)
        c.find_coordinator(left_open)
        c.end_txn(left_open, pid, ep, True)
        batches = c.batches(t, 0)
        c.close()
    finally:
        kafka.stop()
    assert c.transcript[0][-3:] == (0, c.label(pid), ep + 1)
    assert batches[-2:] == [(batches[-2][0], c.label(pid), ep, 1), (batches[-1][0], c.label(pid), ep + 1, "COMMIT")]
