"""Offset-overflow split during cleaning (spec §4.12), I/O buffer growth for large batches and the
"Log segment may be corrupt" check (spec §4.11 "Over-large batches"), and truncation aborting a
cleaning in progress (spec §4.9, §4.11 "Cleaner checkpoint maintenance"). Real files only."""
import os

import pytest

from kafkalog.cleaner import Cleaner, SkimpyOffsetMap
from kafkalog.cleaner.manager import cleanable_offsets, log_to_clean, tp_of_log
from kafkalog.cleaner.threads import LogCleaner
from kafkalog.errors import CorruptRecordError
from kafkalog.log.log import Log
from kafkalog.log.segment import LogSegment
from kafkalog.record.builder import build_batch

from .helpers import NOW, append, data_records, latest_per_key, open_log

INT_MAX = 2**31 - 1


def _round(log, **cleaner_kw):
    c = Cleaner(SkimpyOffsetMap(1 << 20), clock=lambda: NOW, **cleaner_kw)
    fd, unc, _ = cleanable_offsets(log, None, NOW)
    return c, c.do_clean(log_to_clean(tp_of_log(log), log, fd, unc), NOW)


# --- §4.12: a legacy segment whose offsets overflow its base offset --------------------------------

def _legacy(log, recs, offset):
    """Append v1 messages with explicit offsets (follower append)."""
    log.append(build_batch([(k, v, NOW) for k, v in recs], magic=1, base_offset=offset,
                           offsets=list(range(offset, offset + len(recs)))),
               assign_offsets=False)


def test_overflowed_legacy_segment_is_split_and_cleaned(tmp_path):
    d = str(tmp_path / "t-0")
    log = open_log(d)
    high = 2**31 + 10                                   # > base + Int.MAX for base 0
    _legacy(log, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")], 0)
    _legacy(log, [(b"a", b"5"), (b"d", b"6")], high)    # rolls a segment at `high`
    log.roll()
    _legacy(log, [(b"e", b"7")], high + 2)              # active segment
    low_seg, high_seg = log.segments[0], log.segments[1]
    assert (low_seg.base_offset, high_seg.base_offset) == (0, high)
    # craft what pre-0.11 brokers left behind: one segment holding both (the loader would split
    # it at load, so it is swapped into the live log through the log layer's protocol)
    data = low_seg.log.pread(0, low_seg.size) + high_seg.log.pread(0, high_seg.size)
    with open(os.path.join(d, "%020d.log.cleaned" % 0), "wb") as f:
        f.write(data)
    crafted = LogSegment.open(d, 0, log.config, file_already_exists=True, file_suffix=".cleaned",
                              preallocate=False)
    assert log.replace_segments([crafted], [low_seg, high_seg], abort_if_missing=True)
    seg0 = log.segments[0]
    assert seg0.read_next_offset() - 1 - seg0.base_offset > INT_MAX      # overflow in the log
    before = latest_per_key(data_records(log))

    c, (end, stats) = _round(log)
    assert stats.segments_split == 1
    assert end == high + 2
    for s in log.segments:                              # no segment overflows any more
        assert not s.size or s.read_next_offset() - 1 - s.base_offset <= INT_MAX
    recs = data_records(log)
    assert latest_per_key(recs) == before
    assert [(r.offset, r.key) for r in recs] == [(1, b"b"), (3, b"c"), (high, b"a"),
                                                 (high + 1, b"d"), (high + 2, b"e")]
    names = sorted(os.listdir(d))
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    log.close()
    # the split and cleaned files load without another split
    log2 = Log.open(d, log.config, had_clean_shutdown=True)
    assert not log2.recovery_report.split_segments
    assert latest_per_key(data_records(log2)) == before
    log2.close()


# --- §4.11: batches larger than the I/O buffers -------------------------------------------------

def test_batch_larger_than_io_buffers_is_cleaned(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"max.message.bytes": 200_000})
    big = os.urandom(60_000)
    append(log, [(b"k", b"old"), (b"x", b"1")])
    append(log, [(b"big", big), (b"k", b"new")])        # ~60 KB batch, buffers are 4 KiB
    append(log, [(b"big", big[:100])])
    log.roll()
    append(log, [(b"tail", b"t")])
    before = latest_per_key(data_records(log))
    c, (end, stats) = _round(log, io_buffer_size=4096, max_io_buffer_size=16384)
    # doubled to the cap (16 KiB), then grown to the batch's declared size
    assert c.peak_buffer_size > 60_000
    assert latest_per_key(data_records(log)) == before
    assert [r.key for r in data_records(log)] == [b"x", b"k", b"big", b"tail"]


def _log_with_large_batch(tmp_path):
    log = open_log(str(tmp_path / "t-0"))
    append(log, [(b"a", b"1")])
    append(log, [(b"b", os.urandom(50_000))])
    log.roll()
    append(log, [(b"c", b"3")])
    return log


def test_corrupt_size_header_is_reported_not_skipped(tmp_path):
    log = _log_with_large_batch(tmp_path)
    seg = log.segments[0]
    pos = seg.log.pread(0, 12)
    first = int.from_bytes(pos[8:12], "big") + 12
    # the second batch claims more bytes than the segment has left
    fd = os.open(seg.log_path, os.O_WRONLY)
    try:
        os.pwrite(fd, (10_000_000).to_bytes(4, "big"), first + 8)
    finally:
        os.close(fd)
    with pytest.raises(CorruptRecordError, match="Log segment may be corrupt") as ei:
        _round(log, io_buffer_size=4096, max_io_buffer_size=8192)
    assert ei.value.position == first and seg.log_path in str(ei.value)
    assert not [n for n in os.listdir(log.dir) if n.endswith(".cleaned")]


def test_truncated_segment_file_is_corrupt(tmp_path):
    log = _log_with_large_batch(tmp_path)
    seg = log.segments[0]
    size = seg.size
    os.truncate(seg.log_path, size - 20_000)            # the large batch lost its tail
    with pytest.raises(CorruptRecordError, match="Log segment may be corrupt"):
        _round(log, io_buffer_size=4096, max_io_buffer_size=8192)


# --- §4.9: truncation aborts a cleaning in progress ----------------------------------------------

def _compacted_log_with_checkpoint(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 700})
    for i in range(60):
        append(log, [(b"k%d" % (i % 5), b"v%d" % i)])
    lc = LogCleaner(logs=lambda: [(tp_of_log(log), log)], clock=lambda: NOW)
    cleaner = lc.new_cleaner(1 << 20)
    r = lc.clean_filthiest(cleaner)
    assert r is not None and r.error is None
    for i in range(60, 120):
        append(log, [(b"k%d" % (i % 5), b"v%d" % i)])
    return log, lc, cleaner


def _checkpoint(lc, log):
    return lc.manager.read_checkpoint(os.path.dirname(log.dir)).get(tp_of_log(log))


def test_truncation_during_cleaning_aborts_and_lowers_checkpoint(tmp_path):
    log, lc, cleaner = _compacted_log_with_checkpoint(tmp_path)
    cp = _checkpoint(lc, log)
    target = cp - 3
    expected = [(r.offset, r.key, r.value) for r in data_records(log) if r.offset < target]
    calls = []
    check = cleaner.check_done

    def truncating_check(tp):
        calls.append(tp)
        if len(calls) == 3:                              # mid-way through the round
            assert log.truncate_to(target)
        check(tp)
    cleaner.check_done = truncating_check
    r = lc.clean_filthiest(cleaner)
    assert r is not None and "aborted" in (r.error or "")
    assert [(x.offset, x.key, x.value) for x in data_records(log)] == expected
    assert _checkpoint(lc, log) == log.active_segment.base_offset <= target
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    assert not lc.manager.in_progress
    # the next round cleans the truncated log normally
    cleaner.check_done = check
    for i in range(5):
        append(log, [(b"k%d" % i, b"new%d" % i)])
    log.roll()
    r = lc.clean_filthiest(cleaner)
    assert r is not None and r.error is None
    assert latest_per_key(data_records(log)) == {b"k%d" % i: b"new%d" % i for i in range(5)}


def test_truncation_just_before_swap_abandons_the_swap(tmp_path, monkeypatch):
    import kafkalog.cleaner.cleaner as cleaner_mod
    log, lc, cleaner = _compacted_log_with_checkpoint(tmp_path)
    target = log.segments[-2].base_offset + 1           # inside a segment being cleaned
    expected = [(r.offset, r.key, r.value) for r in data_records(log) if r.offset < target]
    real = cleaner_mod.replace_segments

    def truncate_then_swap(lg, new, old, check=None):
        lg.truncate_to(target)                          # what a follower would do right now
        return real(lg, new, old, check=check)
    monkeypatch.setattr(cleaner_mod, "replace_segments", truncate_then_swap)
    r = lc.clean_filthiest(cleaner)
    assert r is not None and "aborted" in (r.error or "")
    assert [(x.offset, x.key, x.value) for x in data_records(log)] == expected
    assert _checkpoint(lc, log) <= log.active_segment.base_offset
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]


def test_truncation_below_checkpoint_without_cleaning_lowers_it(tmp_path):
    log, lc, cleaner = _compacted_log_with_checkpoint(tmp_path)
    cp = _checkpoint(lc, log)
    log.truncate_to(cp - 10)
    assert _checkpoint(lc, log) == log.active_segment.base_offset < cp
