"""``Log.append_file(path, move=True)``: a staged file of whole batches becomes a segment of its
own (offsets rewritten in place, no copy), with exactly the bytes, indexes and result that
rolling and appending the same batches would give; everything else falls back to the copy."""

from __future__ import annotations

import os

import pytest

from kafkalog.errors import CorruptRecordError, InvalidRecordError, KafkalogError
from kafkalog.log._encode import encode_v2_batch
from kafkalog.log.log import Log

CFG = {"segment.bytes": 1_000_000, "index.interval.bytes": 4096}


def _batches(n: int, start: int = 0, size: int = 300, records: int = 20) -> bytes:
    return b"".join(encode_v2_batch([(b"k%d" % (start + i), b"v" * size)] * records,
                                    default_timestamp=1000 + start + i) for i in range(n))


def _files(log_dir) -> dict:
    return {name: open(os.path.join(log_dir, name), "rb").read()
            for name in sorted(os.listdir(log_dir)) if name.endswith((".log", ".index", ".timeindex"))}


def _records(log):
    return [(r.offset, r.key, r.value, r.timestamp) for r in log.records()]


def test_moved_file_is_the_segment_a_roll_and_append_would_build(tmp_path):
    data = _batches(100, start=10)
    staged = tmp_path / "staged"
    staged.write_bytes(data)
    moved, ref = Log.open(str(tmp_path / "moved-0"), CFG), Log.open(str(tmp_path / "ref-0"), CFG)
    for log in (moved, ref):
        log.append(_batches(3))
    ref.roll()
    info_ref = ref.append(data)
    info = moved.append_file(str(staged), move=True)
    assert info == info_ref and info.first_offset == 60 and info.num_records == 2000
    assert not staged.exists()                                    # moved, not copied
    assert [s.base_offset for s in moved.segments] == [0, 60]
    assert _records(moved) == _records(ref)
    moved.append(_batches(2, start=500))                          # the moved segment is active
    ref.append(_batches(2, start=500))
    assert [s.base_offset for s in moved.segments] == [0, 60]
    moved.close()
    ref.close()
    assert _files(moved.dir) == _files(ref.dir)                   # same .log and index bytes
    for recovery_point in (None, 0):                              # clean open, full recovery
        kwargs = {} if recovery_point is None else {"recovery_point": recovery_point}
        with Log.open(str(tmp_path / "moved-0"), CFG, **kwargs) as again:
            assert again.log_end_offset == 60 + 2000 + 40
            assert _records(again)[-1][0] == 2099


def test_move_into_a_new_log_replaces_its_empty_segment(tmp_path):
    staged = tmp_path / "staged"
    staged.write_bytes(_batches(10))
    log = Log.open(str(tmp_path / "t-0"), CFG)
    info = log.append_file(str(staged), move=True)
    assert (info.first_offset, info.last_offset) == (0, 199)
    assert [s.base_offset for s in log.segments] == [0] and log.active_segment.size == len(_batches(10))
    assert [r.offset for r in log.records()] == list(range(200))
    log.close()
    assert sorted(n for n in os.listdir(log.dir) if ".log" in n or "index" in n) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]


def test_move_falls_back_to_copy_when_the_file_is_not_one_segment(tmp_path):
    """Bigger than segment.bytes: copied in segment-sized chunks exactly as append() would."""
    data = _batches(300)
    assert len(data) > 2 * 100_000
    cfg = dict(CFG, **{"segment.bytes": 100_000})
    staged = tmp_path / "staged"
    staged.write_bytes(data)
    a, b = Log.open(str(tmp_path / "a-0"), cfg), Log.open(str(tmp_path / "b-0"), cfg)
    assert b.append_file(str(staged), move=True) == a.append(data)
    a.close()
    b.close()
    assert _files(a.dir) == _files(b.dir)


def test_move_keeps_nothing_of_a_torn_or_corrupt_file(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), CFG)
    log.append(_batches(2))
    torn = tmp_path / "torn"
    torn.write_bytes(_batches(5) + _batches(1)[:30])
    info = log.append_file(str(torn), move=True)
    # whole batches are appended (copied), the torn tail is not: valid_bytes says where it ends
    assert info.valid_bytes == len(_batches(5)) and log.log_end_offset == 140
    assert [s.base_offset for s in log.segments] == [0]           # not moved
    bad = bytearray(_batches(5))
    bad[-3] ^= 0x01
    corrupt = tmp_path / "corrupt"
    corrupt.write_bytes(bytes(bad))
    with pytest.raises(CorruptRecordError) as err:
        log.append_file(str(corrupt), move=True)
    assert err.value.file == str(corrupt) and err.value.position == len(_batches(4))
    assert log.log_end_offset == 140 and [s.base_offset for s in log.segments] == [0]
    with pytest.raises(KafkalogError, match="cannot open"):
        log.append_file(str(tmp_path / "missing"), move=True)
    log.close()


BIG = dict(CFG, **{"segment.bytes": 16 << 20})


def _big_batches(n: int, start: int = 0) -> bytes:
    """``n`` batches of ~200 KB: several pages of payload between two batch headers."""
    return _batches(n, start, size=1000, records=200)


def test_trusted_move_builds_the_same_segment_as_a_verified_one(tmp_path):
    data = _big_batches(8)
    logs = {}
    for verify in (True, False):
        staged = tmp_path / f"staged-{verify}"
        staged.write_bytes(data)
        log = Log.open(str(tmp_path / f"v{int(verify)}-0"), BIG)
        log.append(_batches(2))
        logs[verify] = (log.append_file(str(staged), move=True, verify_crc=verify), log)
        assert not staged.exists()
    (info_v, verified), (info_t, trusted) = logs[True], logs[False]
    assert info_t == info_v and info_t.num_records == 1600
    assert _records(trusted) == _records(verified)
    verified.close()
    trusted.close()
    assert _files(verified.dir) == _files(trusted.dir)


def test_trusted_move_still_checks_every_batch_header(tmp_path):
    """Only the payload checksum is trusted: a header that does not add up is refused, with the
    file and a position, before anything is appended; so is anything but whole batches (a damaged
    length field must not pass for a torn tail)."""
    one = len(_big_batches(1))
    log = Log.open(str(tmp_path / "t-0"), BIG)
    log.append(_batches(1))
    cases = {
        "magic": (one + 16, 7, CorruptRecordError, one),          # magic byte of the 2nd batch
        "count": (2 * one + 60, 1, InvalidRecordError, 2 * one),  # record count of the 3rd batch
        "shorter": (11, 0x7F, CorruptRecordError, None),          # 1st batch's length - up to 127
        "longer": (10, 0x01, CorruptRecordError, None),           # 1st batch's length + 256
        "last longer": (3 * one + 10, 0x01, CorruptRecordError, 3 * one),  # past the end
        "torn": (None, None, CorruptRecordError, 4 * one),        # a partial 5th batch
    }
    for name, (at, flip, error, position) in cases.items():
        bad = bytearray(_big_batches(4))
        if at is None:
            bad += _big_batches(1)[:100]
        else:
            bad[at] ^= flip
        path = tmp_path / name
        path.write_bytes(bytes(bad))
        with pytest.raises(error) as err:
            log.append_file(str(path), move=True, verify_crc=False)
        assert err.value.file == str(path), name
        if position is not None:
            assert err.value.position == position, name
        assert log.log_end_offset == 20 and [s.base_offset for s in log.segments] == [0], name
        assert _records(log)[-1][0] == 19
    log.close()


def test_trusted_move_of_a_damaged_payload_is_caught_by_readers(tmp_path):
    """The contract of ``verify_crc=False``: a payload that does not match its checksum is not
    re-checked at append, but it is never served silently - reading it raises."""
    bad = bytearray(_big_batches(4))
    bad[len(_big_batches(2)) + 5000] ^= 0x10               # inside the 3rd batch's records
    staged = tmp_path / "staged"
    staged.write_bytes(bytes(bad))
    log = Log.open(str(tmp_path / "t-0"), BIG)
    assert log.append_file(str(staged), move=True, verify_crc=False).num_records == 800
    with pytest.raises(CorruptRecordError):
        list(log.records())
    log.close()


def test_trusted_move_reads_only_the_header_pages(tmp_path):
    """The staged data is not in the page cache (the Spark tasks drop it behind them); a trusted
    move touches the pages of the batch headers and no other."""
    from tests.pagecache import PAGE, evict, resident
    data = _big_batches(12)
    staged = tmp_path / "staged"
    staged.write_bytes(data)
    evict(str(staged))
    log = Log.open(str(tmp_path / "t-0"), BIG)
    log.append_file(str(staged), move=True, verify_crc=False)
    log.flush(include_active=True)
    pages = resident(log.active_segment.log.path)
    starts = [len(_big_batches(i)) for i in range(12)]        # where each batch header is
    header_pages = {p // PAGE for s in starts for p in (s, s + 60)}
    assert sum(pages) <= len(header_pages) + 2, (sum(pages), len(pages))   # of ~590 pages
    assert sum(pages) >= 1
    log.close()
