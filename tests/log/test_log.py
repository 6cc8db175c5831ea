"""The partition log on real files (intent of Kafka's UnifiedLogTest / LocalLogTest, spec §5.18-5.19)."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from tests.descriptors import descriptors_under, needs_proc_fd

from .conftest import BASE_TS, legacy_batch, v2_batch


def open_log(d, **cfg):
    return Log.open(str(d), LogConfig(cfg) if cfg else None)


def test_append_assigns_offsets_many_batches_in_one_call(seg_dir):
    log = open_log(seg_dir)
    buf = v2_batch([b"a", b"b"], base_offset=0) + v2_batch([b"c"], base_offset=0) + b"\0\0\0"  # partial tail
    info = log.append(buf)
    assert (info.first_offset, info.last_offset, info.num_records, info.num_batches) == (0, 2, 3, 2)
    assert info.valid_bytes == len(buf) - 3
    assert [(r.offset, r.value) for r in log.records()] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert log.log_end_offset == 3


def test_validation_errors_name_position(seg_dir):
    log = open_log(seg_dir, **{"max.message.bytes": 200})
    good = v2_batch([b"x"])
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError) as e:
        log.append(good + bad)
    assert e.value.position == len(good)
    with pytest.raises(RecordTooLargeError):
        log.append(v2_batch([b"x" * 300]))
    wrong_count = bytearray(v2_batch([b"x", b"y"]))
    struct.pack_into(">i", wrong_count, 57, 3)
    from crc32c import crc32c
    struct.pack_into(">I", wrong_count, 17, crc32c(bytes(wrong_count[21:])))
    with pytest.raises(InvalidRecordError):
        log.append(wrong_count)
    assert log.log_end_offset == 0          # nothing of a failed append is written
    assert log.segments[0].size == 0


def test_oversized_buffer_is_split_but_single_batch_too_large_rejected(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 1000})
    one = v2_batch([b"v" * 100])
    log.append(one * 30)
    assert log.log_end_offset == 30 and len(log.segments) > 3
    assert all(s.size <= 1000 for s in log.segments)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(v2_batch([b"v" * 2000]))


def test_roll_by_size_and_time(seg_dir):
    now = [BASE_TS]
    log = Log.open(str(seg_dir), LogConfig({"segment.bytes": 510, "segment.ms": 100}),
                   clock=lambda: now[0])
    b = v2_batch([b"x" * 100])
    log.append(b)
    log.append(b)
    log.append(b)
    assert len(log.segments) == 1
    log.append(b)
    assert len(log.segments) == 2 and log.active_segment.base_offset == 3
    log.append(v2_batch([b"y"], timestamps=[BASE_TS + 1000]))
    assert log.active_segment.base_offset == 5 or len(log.segments) == 3


def test_read_rules(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 400})
    for i in range(10):
        log.append(v2_batch([b"v%d" % i * 20]))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)
    assert log.read(10, 100).read() == b""
    r = log.read(3, 1, min_one_message=True)
    assert int.from_bytes(r.read()[:8], "big") == 3
    r = log.read(3, 1, min_one_message=False)
    assert len(r.read()) == 1
    assert log.read(3, 0, min_one_message=False).read() == b""
    r = log.read(0, 10**6, max_offset=2)
    offs = [struct.unpack_from(">q", r.read(), p)[0] for p in range(0, len(r.read()), len(r.read()) // 2)]
    assert offs == [0, 1]
    log.maybe_increment_log_start_offset(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)


def test_send_to_socket(seg_dir):
    log = open_log(seg_dir)
    log.append(v2_batch([b"hello"]))
    a, b = socket.socketpair()
    n = log.send_to(a, 0, 1000)
    assert b.recv(n) == log.read(0, 1000).read()
    a.close(), b.close()


def test_offset_for_timestamp(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 300})
    for i in range(10):
        log.append(v2_batch([b"a", b"b"], timestamps=[BASE_TS + 10 * i, BASE_TS + 10 * i + 5]))
    assert log.offset_for_timestamp(BASE_TS + 31).offset == 7
    assert log.offset_for_timestamp(BASE_TS + 30).offset == 6
    assert log.offset_for_timestamp(-2).offset == 0
    assert log.offset_for_timestamp(-1).offset == 20
    m = log.offset_for_timestamp(-3)
    assert (m.timestamp, m.offset) == (BASE_TS + 95, 19)
    assert log.offset_for_timestamp(BASE_TS + 10**6) is None


def test_truncate_to_and_fully(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 300, "file.delete.delay.ms": 0})
    for _i in range(20):
        log.append(v2_batch([b"v" * 40]))
    log.truncate_to(7)
    assert log.log_end_offset == 7
    assert [r.offset for r in log.records()] == list(range(7))
    assert not any(f.endswith(".deleted") for f in os.listdir(seg_dir))
    assert log.append(v2_batch([b"z"])).first_offset == 7
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (100, 100, 1)
    assert log.append(v2_batch([b"z"])).first_offset == 100


def test_delete_segments_async_with_scheduler_and_roll_when_all(seg_dir):
    tasks = []
    log = Log.open(str(seg_dir), LogConfig({"segment.bytes": 300}),
                   scheduler=lambda delay, fn: tasks.append((delay, fn)))
    for _i in range(10):
        log.append(v2_batch([b"v" * 40]))
    segs = log.segments
    log.delete_segments(segs, "retention")
    assert len(log.segments) == 1 and log.segments[0].size == 0
    assert log.log_start_offset == 10
    assert any(f.endswith(".log.deleted") for f in os.listdir(seg_dir))
    for delay, fn in tasks:
        if delay > 0:
            fn()
    assert not any(f.endswith(".deleted") for f in os.listdir(seg_dir))
    assert log.append(v2_batch([b"n"])).first_offset == 10


def test_follower_append_keeps_offsets(seg_dir):
    log = open_log(seg_dir)
    log.append_as_follower(v2_batch([b"a"], base_offset=5))
    assert log.log_end_offset == 6 and log.active_segment.base_offset == 0
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(v2_batch([b"a"], base_offset=3))


def test_log_append_time(seg_dir):
    log = Log.open(str(seg_dir), LogConfig({"message.timestamp.type": "LogAppendTime"}),
                   clock=lambda: BASE_TS + 777)
    info = log.append(v2_batch([b"a", b"b"]))
    assert info.log_append_time == BASE_TS + 777
    assert [r.timestamp for r in log.records()] == [BASE_TS + 777] * 2


def test_legacy_appends(seg_dir):
    log = open_log(seg_dir)
    log.append(legacy_batch([b"a"], magic=0))
    log.append(legacy_batch([b"b", b"c"], magic=1, compression=1))
    log.append(legacy_batch([b"d", b"e"], magic=0, compression=2))
    assert [(r.offset, r.value) for r in log.records()] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"),
                                                             (4, b"e")]


def test_append_records_python_objects(seg_dir):
    log = open_log(seg_dir)
    log.append_records([b"v1", (b"k", b"v2"), (b"k", b"v3", [("h", b"x")], BASE_TS)], compression="zstd")
    recs = list(log.records())
    assert [(r.offset, r.key, r.value) for r in recs] == [(0, None, b"v1"), (1, b"k", b"v2"), (2, b"k", b"v3")]
    assert recs[2].headers == [("h", b"x")]


def test_flush_moves_recovery_point(seg_dir):
    log = open_log(seg_dir, **{"flush.messages": 3})
    log.append(v2_batch([b"a"]))
    assert log.recovery_point == 0
    log.append(v2_batch([b"a", b"b"]))
    assert log.recovery_point == 3
    log.flush(1)
    assert log.recovery_point == 3


def test_close_is_idempotent_and_reopen_clean_scans_nothing(seg_dir):
    log = open_log(seg_dir, **{"segment.bytes": 300})
    for _i in range(10):
        log.append(v2_batch([b"v" * 40]))
    log.close()
    log.close()
    log2 = Log.open(str(seg_dir), LogConfig({"segment.bytes": 300}), had_clean_shutdown=True)
    assert log2.log_end_offset == 10 and log2.recovery_report.recovered_segments == []
    assert [r.offset for r in log2.records()] == list(range(10))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.binary(max_size=80), min_size=1, max_size=4), min_size=1, max_size=30),
       st.integers(200, 2000))
def test_property_append_read_roundtrip_and_recover(seg_dir, appends, seg_bytes):
    for f in os.listdir(seg_dir):
        os.unlink(seg_dir / f)
    log = open_log(seg_dir, **{"segment.bytes": seg_bytes, "index.interval.bytes": 64,
                               "file.delete.delay.ms": 0})
    expected = []
    for vals in appends:
        log.append(v2_batch(vals))
        expected.extend(vals)
    assert [r.value for r in log.records()] == expected
    for o in range(0, len(expected), 3):
        r = log.read(o, 1)
        first = struct.unpack_from(">q", r.read(), 0)[0]
        assert first <= o
    log.close()
    log = Log.open(str(seg_dir), LogConfig({"segment.bytes": seg_bytes, "index.interval.bytes": 64}))
    assert [r.value for r in log.records()] == expected
    assert log.recovery_report.truncations == []
    log.close()


def test_flush_fails_and_keeps_recovery_point_when_directory_fsync_fails(tmp_path):
    """Kafka's ``flushDir`` raises: a directory that cannot be fsynced (here: the partition directory
    was moved away under the open log, so opening it for fsync fails for real) fails the flush, and
    the recovery point does not move past data whose directory entry is not durable."""
    from kafkalog.errors import KafkalogIOError
    d = tmp_path / "t-0"
    d.mkdir()
    log = open_log(d, **{"segment.bytes": 300})
    for _ in range(5):
        log.append(v2_batch([b"v" * 40]))       # rolls: new segments wait for a directory fsync
    before = log.recovery_point
    assert len(log.segments) > 1 and before < log.log_end_offset
    assert log.active_segment.base_offset >= before   # the active segment is new since the last flush
    os.rename(d, tmp_path / "moved")
    with pytest.raises(KafkalogIOError) as e:
        log.flush()
    assert str(d) in str(e.value)
    assert log.recovery_point == before
    os.rename(tmp_path / "moved", d)
    log.flush()
    assert log.recovery_point == log.log_end_offset == 5
    log.close()


@needs_proc_fd
def test_a_segment_holds_one_descriptor_per_file_in_use(seg_dir):
    """As in Kafka, a segment holds its ``.log``'s descriptor, no more: an index closes its own
    descriptor once mapped and the mapping keeps none, also after a roll trims it and after
    recovery rebuilds it; closing the log releases them all. (At three per segment a recovered
    log of 7,000 small segments ran out of a 20,000-descriptor limit.)"""
    d = str(seg_dir)
    log = open_log(seg_dir, **{"segment.bytes": 600, "index.interval.bytes": 100})
    for i in range(60):
        log.append(v2_batch([b"v%03d" % i], timestamps=[BASE_TS + i]))
    n = len(log.segments)
    assert n > 5
    for seg in log.segments:                            # load every index
        assert seg.offset_index.entries >= 0 and seg.time_index.entries >= 0
    assert descriptors_under(d) == {".log": n}
    log.close()
    assert descriptors_under(d) == {}
    log = Log.open(d, LogConfig({"segment.bytes": 600, "index.interval.bytes": 100}),
                   had_clean_shutdown=False, recovery_point=0)          # recovery rebuilds the indexes
    for seg in log.segments:
        assert seg.offset_index.entries >= 0 and seg.time_index.entries >= 0
    assert descriptors_under(d) == {".log": n}
    assert [r.value for r in log.records(0)] == [b"v%03d" % i for i in range(60)]
    log.close()
    assert descriptors_under(d) == {}
