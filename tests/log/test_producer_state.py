"""Port of the intent of Kafka's ProducerStateManagerTest (sequence/epoch rules, transactions,
LSO, snapshots)."""

import os
import struct

import pytest

from kafkalog.errors import CorruptSnapshotError
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.producer_state import (
    ORIGIN_REPLICATION,
    BatchMetadata,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateEntry,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
    parse_snapshot,
    read_snapshot,
    snapshot_bytes,
)

from .conftest import v2_batch

PID = 1000
INT_MAX = 2**31 - 1


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path, producer_id_expiration_ms=60 * 60 * 1000)


def data(psm, pid, epoch, seq, offset, ts=0, txn=False, n=1, origin="client"):
    return psm.update(pid, epoch, seq, (seq + n - 1) % (INT_MAX + 1), offset, offset + n - 1, ts, txn,
                      origin=origin)


def marker(psm, pid, epoch, offset, abort, coord=0, origin="client"):
    return psm.update(pid, epoch, -1, -1, offset, offset, 0, True, True, 0 if abort else 1, coord,
                      origin=origin)


def test_golden_snapshot_bytes():
    assert snapshot_bytes([]) == bytes.fromhex("000148674bc700000000")
    e = ProducerStateEntry(1000, 5, 3, 1_700_000_000_000)
    e.batch_metadata.append(BatchMetadata(9, 42, 2, 1_700_000_000_000))
    assert snapshot_bytes([e]).hex() == ("0001221916f000000001" "00000000000003e8" "0005" "00000009"
                                         "000000000000002a" "00000002" "0000018bcfe56800"
                                         "00000003" "ffffffffffffffff")
    back = parse_snapshot(snapshot_bytes([e]))[0]
    assert (back.producer_id, back.producer_epoch, back.last_seq, back.last_data_offset,
            back.last_offset_delta, back.last_timestamp, back.coordinator_epoch,
            back.current_txn_first_offset) == (1000, 5, 9, 42, 2, 1_700_000_000_000, 3, None)
    assert back.first_seq == 7


def test_basic_id_mapping(psm):
    data(psm, PID, 0, 0, 0)
    data(psm, PID, 0, 1, 1)
    with pytest.raises(OutOfOrderSequenceError):
        data(psm, PID, 0, 3, 2)
    assert psm.last_entry(PID).last_seq == 1  # untouched by the failed update
    data(psm, PID, 0, 2, 2)
    assert psm.last_entry(PID).last_data_offset == 2


def test_sequence_wrap(psm):
    data(psm, PID, 0, INT_MAX, 0)
    data(psm, PID, 0, 0, 1)
    assert psm.last_entry(PID).last_seq == 0
    with pytest.raises(OutOfOrderSequenceError):
        data(psm, PID, 0, 5, 2)


def test_epoch_rules(psm):
    data(psm, PID, 0, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        data(psm, PID, 1, 5, 1)  # new epoch needs seq 0
    data(psm, PID, 1, 0, 1)
    with pytest.raises(InvalidProducerEpochError):
        data(psm, PID, 0, 1, 2)
    data(psm, PID, 0, 1, 2, origin=ORIGIN_REPLICATION)  # only warned for replication


def test_control_record_bumps_epoch(psm):
    data(psm, PID, 0, 0, 0)
    marker(psm, PID, 1, 1, abort=True)
    e = psm.last_entry(PID)
    assert e.producer_epoch == 1 and e.is_empty


def test_replication_accepts_gaps(psm):
    data(psm, PID, 0, 17, 0, origin=ORIGIN_REPLICATION)
    data(psm, PID, 0, 99, 1, origin=ORIGIN_REPLICATION)
    assert psm.last_entry(PID).last_seq == 99


def test_transactions_and_lso(psm):
    data(psm, 1, 0, 0, 10, txn=True)
    data(psm, 2, 0, 0, 11, txn=True)
    assert psm.first_unstable_offset() == 10
    with pytest.raises(InvalidTxnStateError):
        data(psm, 1, 0, 1, 12, txn=False)
    c = marker(psm, 1, 0, 13, abort=True)
    assert c.first_offset == 10 and c.last_offset == 13 and c.is_aborted
    assert psm.aborted_txn(c) == AbortedTxn(1, 10, 13, 11)  # LSO = other producer's open txn
    psm.complete_txn(c)
    assert psm.first_unstable_offset() == 10  # completed but not yet below the HW
    psm.on_high_watermark_updated(14)
    assert psm.first_unstable_offset() == 11
    c2 = marker(psm, 2, 0, 14, abort=True)
    assert psm.aborted_txn(c2) == AbortedTxn(2, 11, 14, 15)
    psm.complete_txn(c2)
    psm.on_high_watermark_updated(15)
    assert psm.first_unstable_offset() is None
    assert marker(psm, 2, 0, 16, abort=False) is None  # no open txn: nothing completed


def test_coordinator_fencing(psm, tmp_path):
    data(psm, PID, 0, 0, 0, txn=True)
    c = marker(psm, PID, 0, 1, abort=False, coord=5)
    psm.complete_txn(c)
    data(psm, PID, 0, 1, 2, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(psm, PID, 0, 3, abort=False, coord=4)
    psm.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, 60 * 60 * 1000)
    reloaded.load(0, 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(reloaded, PID, 0, 3, abort=False, coord=4)
    assert reloaded.first_unstable_offset() == 2  # open txn restored from the snapshot


def test_take_snapshot_and_reload(psm, tmp_path):
    assert psm.take_snapshot() is None  # offset did not advance
    data(psm, PID, 0, 0, 0, ts=5, n=3)
    path = psm.take_snapshot()
    assert os.path.basename(path) == "00000000000000000003.snapshot"
    assert psm.take_snapshot() is None
    data(psm, PID, 0, 3, 3, ts=6)
    psm.take_snapshot()
    assert list(psm.snapshots) == [3, 4]
    fresh = ProducerStateManager(tmp_path, 60 * 60 * 1000)
    fresh.truncate_and_reload(0, 3, now_ms=10)
    assert list(fresh.snapshots) == [3]
    assert fresh.last_entry(PID).last_seq == 2 and fresh.map_end_offset == 3
    assert not os.path.exists(tmp_path / "00000000000000000004.snapshot")


def test_corrupt_snapshot_falls_back(psm, tmp_path):
    data(psm, PID, 0, 0, 0)
    psm.take_snapshot()
    data(psm, PID, 0, 1, 1)
    p = psm.take_snapshot()
    raw = bytearray(open(p, "rb").read())
    raw[-1] ^= 1
    open(p, "wb").write(raw)
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(p)
    fresh = ProducerStateManager(tmp_path, 60 * 60 * 1000)
    fresh.load(0, 0)
    assert fresh.map_end_offset == 1 and fresh.last_entry(PID).last_seq == 0
    assert not os.path.exists(p)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x01\x00", b"\x00\x02" + b"\0" * 8,
                                  bytes.fromhex("000148674bc700000001"),
                                  bytes.fromhex("0001ffffffff00000000")])
def test_bad_snapshot_bytes(data):
    with pytest.raises(CorruptSnapshotError):
        parse_snapshot(data, "x.snapshot")


def test_truncated_snapshot_with_valid_crc():
    from crc32c import crc32c
    body = struct.pack(">i", 1000)
    data = struct.pack(">hI", 1, crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError):
        parse_snapshot(data)


def test_expiration_on_reload(psm, tmp_path):
    data(psm, 1, 0, 0, 0, ts=100)
    data(psm, 2, 0, 0, 1, ts=100, txn=True)
    psm.take_snapshot()
    fresh = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    fresh.load(0, now_ms=5000)
    assert fresh.last_entry(1) is None and fresh.last_entry(2) is not None


def test_snapshot_deletion_helpers(psm, tmp_path):
    for off in (0, 1, 2, 3):
        data(psm, PID, 0, off, off)
        psm.take_snapshot()
    assert list(psm.snapshots) == [1, 2, 3, 4]
    psm.delete_snapshots_before(2)
    assert list(psm.snapshots) == [2, 3, 4]
    new = psm.remove_and_mark_snapshot_for_deletion(2)
    assert new.endswith(".snapshot.deleted") and os.path.exists(new)
    psm.remove_stray_snapshots([0, 3])  # 4 is a stray above the max base: kept
    assert list(psm.snapshots) == [3, 4]
    psm.remove_stray_snapshots([0, 5])
    assert list(psm.snapshots) == []


def test_stray_snapshots_left_for_later(psm, tmp_path):
    """``later``: the strays leave the snapshots at once, their files stay until
    ``delete_stray_files``, which keeps one taken again at the same offset meanwhile."""
    for off in (0, 1, 2, 3):
        data(psm, PID, 0, off, off)
        psm.take_snapshot()
    psm.remove_stray_snapshots([0, 2], later=True)   # 1 and 3 are strays; 4 above the max base
    assert list(psm.snapshots) == [2, 4]
    assert sorted(psm.stray_files) == [1, 3]
    assert all(os.path.exists(p) for p in psm.stray_files.values())
    stray1, stray3 = psm.stray_files[1], psm.stray_files[3]
    psm.update_map_end_offset(3)                     # (as after a truncation to 3)
    psm.last_snap_offset = 0
    assert psm.take_snapshot() == stray3             # taken again at a stray's offset
    assert psm.delete_stray_files() == 1
    assert not os.path.exists(stray1) and os.path.exists(stray3)
    assert psm.stray_files == {} and list(psm.snapshots) == [2, 3, 4]
    assert psm.delete_stray_files() == 0


def test_update_from_batch(psm):
    b = v2_batch([b"a", b"b"], base_offset=5, producer_id=7, producer_epoch=1, base_sequence=0,
                 transactional=True)
    assert psm.update_from_batch(bytes(b)) == []
    assert psm.last_entry(7).last_seq == 1 and psm.first_unstable_offset() == 5


def test_snapshot_listing_from_names(tmp_path):
    """The snapshots a directory listing names, in offset order: Kafka's 20-digit names read
    directly, other digit prefixes parsed, a prefix past a long's range, a name without an offset
    and a ``.deleted`` one skipped."""
    m = ProducerStateManager(str(tmp_path), list_snapshots=False)
    names = ["00000000000000000009.snapshot", "99999999999999999999.snapshot", "abc.snapshot",
             "7.snapshot", "00000000000000000003.snapshot.deleted", "00000000000000000005.snapshot",
             "00000000000000000005.log", "leader-epoch-checkpoint"]
    got = m.load_snapshots(names)
    assert got == {5: f"{tmp_path}/00000000000000000005.snapshot", 7: f"{tmp_path}/7.snapshot",
                   9: f"{tmp_path}/00000000000000000009.snapshot"}
    assert list(got) == [5, 7, 9]
    assert m.load_snapshots(["00000000000000000042.snapshot"]) == {42: f"{tmp_path}/00000000000000000042.snapshot"}
