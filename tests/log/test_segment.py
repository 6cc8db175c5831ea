"""LogSegment on real files (intent of Kafka's LogSegmentTest / FileRecordsTest, spec §5.6, §5.10)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptRecordError, LogSegmentOffsetOverflowError
from kafkalog.log.segment import LogSegment, RollParams

from .conftest import BASE_TS, legacy_batch, v2_batch


def seg(d, base=0, **kw):
    kw.setdefault("index_interval_bytes", 10)
    kw.setdefault("max_index_size", 1000)
    return LogSegment(str(d), base, **kw)


def put(s, base, n=1, ts=None, val=b"hello"):
    b = v2_batch([val] * n, base_offset=base, timestamps=[ts if ts is not None else BASE_TS + base + i
                                                          for i in range(n)])
    s.append(base + n - 1, (ts if ts is not None else BASE_TS + base + n - 1), base + n - 1, b)
    return b


def test_append_offset_overflow(seg_dir):
    s = seg(seg_dir, 40)
    with pytest.raises(LogSegmentOffsetOverflowError):
        put(s, 39)
    with pytest.raises(LogSegmentOffsetOverflowError):
        s.append(40 + 2**31, BASE_TS, 40 + 2**31, v2_batch([b"x"], base_offset=40 + 2**31))


def test_read_empty_before_after_and_gap(seg_dir):
    s = seg(seg_dir, 40)
    assert s.read(40, 300) is None
    put(s, 50)
    put(s, 52)
    r = s.read(41, 300)
    assert r.fetch_offset_metadata.relative_position_in_segment == 0
    assert r.read()[:8] == (50).to_bytes(8, "big")
    assert s.read(53, 300) is None
    r = s.read(51, 300)  # gap -> next batch
    assert int.from_bytes(r.read()[:8], "big") == 52


def test_read_without_max_position_gives_metadata_only(seg_dir):
    s = seg(seg_dir, 40)
    b1 = put(s, 40)
    put(s, 41)
    r = s.read(41, 200, max_position=None)
    assert r.read() == b""
    assert r.fetch_offset_metadata.segment_base_offset == 40
    assert r.fetch_offset_metadata.relative_position_in_segment == len(b1)


def test_min_one_message_and_incomplete(seg_dir):
    s = seg(seg_dir)
    b = put(s, 0, 3)
    r = s.read(0, 1, min_one_message=False)
    assert len(r.read()) == 1 and r.first_entry_incomplete
    r = s.read(0, 1, min_one_message=True)
    assert r.read() == bytes(b) and not r.first_entry_incomplete
    assert s.read(0, 0).read() == b""


def test_truncate_repeatedly_and_in_gap(seg_dir):
    s = seg(seg_dir)
    for i in range(0, 20, 2):
        put(s, i)
    assert s.read_next_offset() == 19
    s.truncate_to(11)                  # gap: removes batch 12.. and nothing of 10
    assert s.read_next_offset() == 11
    s.truncate_to(10)                  # removes the batch holding 10
    assert s.read_next_offset() == 9
    assert s.max_timestamp_so_far == BASE_TS + 8
    s.truncate_to(0)
    assert s.size == 0 and s.read_next_offset() == 0
    put(s, 0)                          # same offsets again after full truncation
    assert s.read_next_offset() == 1


def test_truncate_removes_whole_batch_holding_target(seg_dir):
    s = seg(seg_dir)
    put(s, 0, 5)
    put(s, 5, 5)
    s.truncate_to(7)
    assert s.read_next_offset() == 5


def test_truncate_resizes_indexes_of_reopened_segment(seg_dir):
    s = seg(seg_dir)
    for i in range(30):
        put(s, i)
    s.on_become_inactive_segment()
    s.close()
    s2 = seg(seg_dir, file_already_exists=True)
    assert s2.offset_index.is_full()
    s2.truncate_to(0)
    assert not s2.offset_index.is_full()
    assert not s2.should_roll(RollParams(10**9, 10**9, BASE_TS, 0, 10, BASE_TS))


def test_should_roll_rules(seg_dir):
    s = seg(seg_dir, 100)
    now = BASE_TS
    # empty segment: no time roll even if old
    assert not s.should_roll(RollParams(10, 10**9, now + 10**6, 100, 10, now + 10**6))
    put(s, 100, ts=now)
    assert s.should_roll(RollParams(10, 10**9, now + 11, 101, 10, now))     # time
    assert not s.should_roll(RollParams(10, 10**9, now + 10, 101, 10, now))
    assert s.should_roll(RollParams(10**9, s.size + 9, now, 101, 10, now))   # size
    assert not s.should_roll(RollParams(10**9, s.size + 10, now, 101, 10, now))
    assert s.should_roll(RollParams(10**9, 10**9, now, 100 + 2**31, 10, now))  # offset overflow
    assert s.get_first_batch_timestamp() == now


def test_roll_jitter_lowers_threshold(seg_dir):
    s = seg(seg_dir, 0, roll_jitter_ms=5)
    put(s, 0, ts=BASE_TS)
    assert s.should_roll(RollParams(10, 10**9, BASE_TS + 6, 1, 10, BASE_TS))


def test_find_offset_by_timestamp(seg_dir):
    s = seg(seg_dir, 40)
    for i in range(10):
        put(s, 40 + 2 * i, n=2)
    r = s.find_offset_by_timestamp(BASE_TS + 45)
    assert (r.timestamp, r.offset) == (BASE_TS + 45, 45)
    assert s.find_offset_by_timestamp(0).offset == 40
    assert s.find_offset_by_timestamp(BASE_TS + 1000) is None
    assert s.find_offset_by_timestamp(BASE_TS + 40, starting_offset=47).offset == 47


def test_change_file_suffixes_renames_all(seg_dir):
    s = seg(seg_dir, 40)
    put(s, 40)
    s.flush()
    s.change_file_suffixes("", ".deleted")
    names = sorted(os.listdir(seg_dir))
    assert names == ["00000000000000000040.index.deleted", "00000000000000000040.log.deleted",
                     "00000000000000000040.timeindex.deleted"]
    assert s.read(40, 100).read()  # still readable through the open fd
    s.delete()
    assert os.listdir(seg_dir) == []


def test_recover_rebuilds_garbage_indexes(seg_dir):
    s = seg(seg_dir)
    for i in range(50):
        put(s, i)
    n_entries = s.offset_index.entries
    s.close()
    for suffix in (".index", ".timeindex"):
        p = seg_dir / f"{0:020d}{suffix}"
        p.write_bytes(os.urandom(p.stat().st_size))
    s = seg(seg_dir, file_already_exists=True)
    assert s.recover() == 0
    assert s.offset_index.entries == n_entries
    for i in range(50):
        assert s.read(i, 1).fetch_offset_metadata.message_offset == i
        assert int.from_bytes(s.read(i, 10).read()[:8], "big") == i
    assert s.last_recovery.kind == "clean"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10**6), st.binary(min_size=1, max_size=200))
def test_recover_truncates_at_random_garbage(seg_dir, where_seed, garbage):
    for f in os.listdir(seg_dir):
        os.unlink(seg_dir / f)
    s = seg(seg_dir)
    positions = []
    for i in range(20):
        positions.append(s.size)
        put(s, i)
    total = s.size
    pos = where_seed % total
    with open(s.log_path, "r+b") as f:
        f.seek(pos)
        f.write(garbage)
    s.log.size = max(total, pos + len(garbage))
    s.recover()
    # everything in whole batches before the damage survives
    keep = max([i for i, p in enumerate(positions) if p <= pos] + [0])
    assert s.read_next_offset() >= keep
    for i in range(keep):
        assert int.from_bytes(s.read(i, 10).read()[:8], "big") == i
    s.close()


def test_recover_reports_zero_filled_tail_and_mid_segment_corruption(seg_dir):
    s = seg(seg_dir)
    for i in range(10):
        put(s, i)
    size = s.size
    s.close()
    with open(seg_dir / f"{0:020d}.log", "ab") as f:
        f.write(b"\0" * 4096)
    s = seg(seg_dir, file_already_exists=True)
    assert s.recover() == 4096
    assert s.last_recovery.kind == "zero-filled-tail" and s.last_recovery.position == size
    # flip a byte inside the 3rd batch: corruption with valid data following
    third = next(h for i, h in enumerate(s.log.iter_headers(0)) if i == 2)
    s.close()
    with open(seg_dir / f"{0:020d}.log", "r+b") as f:
        f.seek(third.position + 40)
        b = f.read(1)
        f.seek(third.position + 40)
        f.write(bytes([b[0] ^ 0xFF]))
    s = seg(seg_dir, file_already_exists=True)
    s.recover()
    r = s.last_recovery
    assert r.kind == "corruption" and r.position == third.position
    assert r.valid_data_follows and r.next_valid_position == third.position + third.size
    assert s.read_next_offset() == 2


def test_preallocated_segment_trimmed_on_close(seg_dir):
    s = seg(seg_dir, preallocate=True, init_file_size=64 * 1024)
    assert os.path.getsize(s.log_path) == 64 * 1024 and s.size == 0
    put(s, 0)
    put(s, 1)
    size = s.size
    assert s.read(1, 100).read()
    s.close()
    assert os.path.getsize(seg_dir / f"{0:020d}.log") == size
    s = seg(seg_dir, file_already_exists=True)
    assert s.size == size and s.read_next_offset() == 2


def test_file_iteration_ignores_partial_tail_and_rejects_small_length(seg_dir):
    s = seg(seg_dir)
    put(s, 0)
    for n in (2, 4, 5, 6):
        s.log.append(b"\0" * n)
        assert [h.last_offset for h in s.log.iter_headers()] == [0]
        s.log.truncate_to(s.size - n)
    s.log.append(b"\0" * 8 + (3).to_bytes(4, "big") + b"\0" * 10)
    with pytest.raises(CorruptRecordError) as e:
        list(s.log.iter_headers())
    assert e.value.position is not None and e.value.file == s.log_path


def test_legacy_batches_in_segment(seg_dir):
    s = seg(seg_dir)
    b0 = legacy_batch([b"a"], magic=0)
    b1 = legacy_batch([b"b"], magic=1)
    b1[0:8] = (1).to_bytes(8, "big")
    s.append(0, -1, 0, b0)
    s.append(1, BASE_TS, 1, b1)
    assert s.read_next_offset() == 2
    assert s.recover() == 0
    assert s.max_timestamp_so_far == BASE_TS


@pytest.mark.parametrize("batches", [1, 2, 3, 40, 3000])
def test_header_edges_are_the_walks_first_and_last(seg_dir, batches):
    """``iter_headers(edges=True)`` (a segment's next offset, read at every load) yields, in order,
    a subset of the full walk that starts with its first header and ends with its last, also when
    the walk spans several windows (3,000 batches: past the first read's block), and the next
    offset and first timestamp it gives are the full walk's."""
    s = seg(seg_dir, index_interval_bytes=1 << 30)
    for i in range(batches):
        put(s, 2 * i, ts=BASE_TS + 7 * i)
    full = list(s.log.iter_headers(0))
    edges = list(s.log.iter_headers(0, edges=True))
    assert len(full) == batches
    assert edges[0] == full[0] and edges[-1] == full[-1]
    assert all(h in full for h in edges) and edges == sorted(edges, key=full.index)
    if batches > 2:
        assert len(edges) < batches
    start = full[len(full) // 2].position
    assert list(s.log.iter_headers(start, edges=True))[-1] == full[-1]
    s.rolling_based_timestamp = None
    assert s.read_next_offset() == 2 * (batches - 1) + 1
    assert s.rolling_based_timestamp == BASE_TS
