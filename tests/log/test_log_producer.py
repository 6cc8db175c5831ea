"""Producer state on the append path, at load, read_committed, truncation hooks (spec §4.1 step 4,
§4.2, §4.6 step 7, §4.8 steps 6-8, §4.9), with batches built by ``kafkalog.record``."""

from __future__ import annotations

import os

import pytest

from kafkalog.errors import InvalidRecordError, ProducerStateError
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.producer_state import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from kafkalog.record.builder import build_batch, build_end_txn_marker
from kafkalog.record.constants import ControlRecordType
from tests.racing import race

NOW = 1_700_000_000_000


def open_log(d, **cfg):
    base = {"segment.bytes": 1024, "index.interval.bytes": 1, "file.delete.delay.ms": 0}
    base.update(cfg)
    return Log.open(d, LogConfig(base), clock=lambda: NOW)


def data(pid, epoch, seq, n=1, txn=False, tag=b"v"):
    return build_batch([(b"k%d" % i, tag + b"%d" % (seq + i), NOW) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def marker(log, pid, epoch, commit):
    m = build_end_txn_marker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                             producer_id=pid, producer_epoch=epoch, timestamp=NOW)
    return log.append(m, origin="coordinator")


def values(log, **kw):
    return [r.value for r in log.records(**kw)]


def test_idempotent_duplicate_returns_original_offsets(seg_dir):
    log = open_log(seg_dir)
    log.append(data(1, 0, 0, n=2))
    log.append(build_batch([(None, b"plain", NOW)]))
    third = log.append(data(1, 0, 2, n=3))
    leo = log.log_end_offset
    retry = log.append(data(1, 0, 2, n=3))          # a retried produce of the last batch
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (third.first_offset, third.last_offset)
    older = log.append(data(1, 0, 0, n=2))          # still among the last 5 batches
    assert older.duplicate and (older.first_offset, older.last_offset) == (0, 1)
    assert log.log_end_offset == leo
    log.close()


def test_sequence_epoch_and_txn_state_errors(seg_dir):
    log = open_log(seg_dir)
    log.append(data(1, 0, 0))
    with pytest.raises(OutOfOrderSequenceError) as e:
        log.append(data(1, 0, 5))                   # gap
    assert isinstance(e.value, ProducerStateError) and e.value.position == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(1, 1, 3))                   # new epoch must start at 0
    log.append(data(1, 1, 0))                       # epoch bump with sequence 0
    with pytest.raises(InvalidProducerEpochError):
        log.append(data(1, 0, 1))                   # fenced epoch
    with pytest.raises(InvalidRecordError):
        log.append(data(1, 1, -1))                  # producer id without a sequence
    log.append(data(2, 0, 0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        log.append(data(2, 0, 1))                   # non-transactional inside an open txn
    leo = log.log_end_offset
    assert leo == 3
    # a failed multi-batch append writes nothing and leaves the state unchanged
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(3, 0, 0) + data(3, 0, 7))
    assert log.log_end_offset == leo
    log.append(data(3, 0, 0) + data(3, 0, 1))
    # the replication origin keeps offsets and skips sequence checks
    follower = bytearray(data(1, 1, 40))
    follower[0:8] = log.log_end_offset.to_bytes(8, "big")
    log.append_as_follower(follower)
    log.close()


def test_read_committed_skips_aborted_and_markers_across_segments(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 300})
    log.append(data(7, 0, 0, n=2, txn=True, tag=b"c"))        # committed txn of pid 7
    log.append(data(8, 0, 0, n=2, txn=True, tag=b"a"))        # aborted txn of pid 8 ...
    log.append(build_batch([(None, b"plain", NOW)]))
    log.append(data(8, 0, 2, n=2, txn=True, tag=b"a"))        # ... spanning segments
    assert log.last_stable_offset == 0                        # two open transactions
    assert log.fetch_offset_snapshot() == (0, log.log_end_offset, 0)
    assert values(log, isolation="read_committed") == []
    marker(log, 7, 0, commit=True)
    assert log.last_stable_offset == 2                        # pid 8's txn still open
    assert log.fetch_offset_snapshot() == (0, log.log_end_offset, 2)
    marker(log, 8, 0, commit=False)
    assert log.last_stable_offset == log.log_end_offset
    assert log.fetch_offset_snapshot() == (0, log.log_end_offset, log.log_end_offset)
    log.append(data(9, 0, 0, n=1, txn=True, tag=b"o"))        # open at the end
    assert len(log.segments) >= 3
    assert values(log, isolation="read_committed") == [b"c0", b"c1", b"plain"]
    assert b"a0" in values(log)                               # read_uncommitted sees everything
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(8, 2)]
    info = log.read(0, 1 << 20, isolation="read_committed")
    assert [(a.producer_id, a.first_offset) for a in info.aborted_transactions] == [(8, 2)]
    assert log.read(log.last_stable_offset, 100, isolation="read_committed").records.size == 0
    # the txn index entry is in the segment holding the ABORT marker, and survives a reload
    log.close()
    log = open_log(seg_dir, **{"segment.bytes": 300})
    assert values(log, isolation="read_committed") == [b"c0", b"c1", b"plain"]
    assert log.last_stable_offset == log.log_end_offset - 1   # pid 9's txn restored from the snapshot
    assert log.fetch_offset_snapshot() == (0, log.log_end_offset, log.log_end_offset - 1)
    log.close()


def test_producer_state_survives_clean_and_unclean_reload(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 200})
    for seq in range(0, 12, 2):
        log.append(data(5, 0, seq, n=2))
    leo = log.log_end_offset
    log.close()
    snaps = sorted(n for n in os.listdir(seg_dir) if n.endswith(".snapshot"))
    assert f"{leo:020d}.snapshot" in snaps
    log = open_log(seg_dir, **{"segment.bytes": 200})          # clean: snapshot at LEO
    assert log.append(data(5, 0, 10, n=2)).duplicate             # the last batch is remembered
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(5, 0, 20))
    log.append(data(5, 0, 12))
    log.flush()
    leo = log.log_end_offset
    # unclean shutdown: no close, snapshots above the recovery point are stale -> replay
    for n in os.listdir(seg_dir):
        if n.endswith(".snapshot") and int(n.split(".")[0]) >= leo:
            os.unlink(os.path.join(seg_dir, n))
    with open(os.path.join(seg_dir, "00000000000000000000.snapshot"), "wb") as f:
        f.write(b"garbage")                                       # corrupt -> deleted, older tried
    log2 = Log.open(seg_dir, LogConfig({"segment.bytes": 200}), recovery_point=0, clock=lambda: NOW)
    assert log2.log_end_offset == leo
    assert log2.append(data(5, 0, 12)).duplicate
    log2.append(data(5, 0, 13))
    names = os.listdir(seg_dir)
    bases = {s.base_offset for s in log2.segments}
    stray = [n for n in names if n.endswith(".snapshot") and int(n.split(".")[0]) not in bases
             and int(n.split(".")[0]) != leo]
    assert stray == []
    log2.close()


def test_truncation_rebuilds_producer_state_and_calls_hooks(seg_dir):
    log = open_log(seg_dir)
    calls = []
    log.cleaner_abort_hook = lambda lg: calls.append(("abort", lg.log_end_offset))
    log.on_truncate.append(lambda lg, base: calls.append(("truncated", base)))
    for seq in range(4):
        log.append(data(4, 0, seq))
    assert not log.truncate_to(10) and calls == []
    assert log.truncate_to(2)
    assert calls == [("abort", 4), ("truncated", log.active_segment.base_offset)]
    log.append(data(4, 0, 2))                                  # sequence continues after offset 1
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(4, 0, 9))
    log.truncate_fully_and_start_at(100)
    assert calls[-2:] == [("abort", 3), ("truncated", 100)]
    log.append(data(4, 0, 9))                                  # state forgotten
    log.close()


def test_fetch_offset_snapshot_follows_the_log_start_and_an_open_transaction(seg_dir):
    """What a fetch answers with, read together: the log start offset after DeleteRecords moved
    it, the high watermark, and the last stable offset held back by an open transaction."""
    log = open_log(seg_dir)
    for i in range(3):
        log.append(build_batch([(None, b"v%d" % i, NOW)]))
    assert log.fetch_offset_snapshot() == (0, 3, 3)
    assert log.maybe_increment_log_start_offset(2)
    assert log.fetch_offset_snapshot() == (2, 3, 3)
    log.append(data(5, 0, 0, n=2, txn=True))
    assert log.fetch_offset_snapshot() == (2, 5, 3)
    marker(log, 5, 0, commit=True)
    assert log.fetch_offset_snapshot() == (2, 6, 6)
    log.close()


def test_transactions_v2_markers_carry_a_bumped_epoch(seg_dir):
    """Kafka's ``checkProducerEpoch`` for a transactions v2 marker (KIP-890): its epoch must be above
    the producer's, except the same marker written again once its transaction has ended; a v1 marker
    may keep the epoch."""
    from kafkalog.log.producer_state import ORIGIN_COORDINATOR_TV2

    def v2_marker(epoch, commit=True):
        return log.append(build_end_txn_marker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                               producer_id=1, producer_epoch=epoch, timestamp=NOW),
                          origin=ORIGIN_COORDINATOR_TV2)

    log = open_log(seg_dir)
    log.append(data(1, 0, 0, txn=True))
    with pytest.raises(InvalidProducerEpochError) as e:
        v2_marker(0)                                # the end of a v2 transaction bumps the epoch
    assert "<= the last seen epoch 0 (TV2)" in e.value.message
    v2_marker(1)
    v2_marker(1)                                    # written again (a coordinator's retry): accepted
    with pytest.raises(InvalidProducerEpochError):
        log.append(data(1, 0, 1, txn=True))         # a late write of the old epoch
    log.append(data(1, 1, 0, txn=True))
    with pytest.raises(InvalidProducerEpochError):
        v2_marker(1, commit=False)                  # the transaction at epoch 1 is open
    marker(log, 1, 1, False)                        # a v1 marker keeps the epoch
    assert values(log, isolation="read_committed") == [b"v0"]
    log.close()


def test_last_stable_offset_read_while_another_thread_commits(seg_dir):
    """A reader's last stable offset is taken without the log's lock while another thread begins
    and commits transactions: with the interpreter switching threads every microsecond
    (:func:`tests.racing.race`), the reader never fails on the producer state changing under it
    (it did: "dictionary changed size during iteration" on CPython 3.13, in 3 of 3 runs of this
    loop), and what it reads is never past the log end or behind the log start."""
    log = open_log(seg_dir, **{"segment.bytes": 1 << 20})
    seq = 0

    def commit_four() -> None:
        nonlocal seq
        for pid in range(1, 5):
            log.append(data(pid, 0, seq, txn=True))
        for pid in range(1, 5):
            marker(log, pid, 0, commit=True)
        seq += 1

    def read() -> None:
        start, hw, lso = log.fetch_offset_snapshot()
        assert start <= lso <= hw

    commits, *reads = race(commit_four, read, read, seconds=3.0,
                              at_least=(11, 1001, 1001))
    assert commits > 10 and min(reads) > 1000
    assert log.fetch_offset_snapshot()[2] == log.log_end_offset     # every transaction committed
    log.close()
