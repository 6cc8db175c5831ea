"""The fetch path's batch search (``FileRecords.search_for_offset_with_size``, under
``LogSegment.translate_offset`` and ``Log.read``) gives what the plain header walk gives -- the first
entry at or after the start position whose last offset reaches the target -- for fetch offsets at a
batch base, inside a batch, at the end and beyond, from every start position, on files with large
batches (several read windows), small ones, legacy entries, damage and torn tails."""

from __future__ import annotations

import os
import struct
import tempfile
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptRecordError, KafkalogError
from kafkalog.log.config import LogConfig
from kafkalog.log.file_records import BatchHeader, FileRecords
from kafkalog.log.log import Log

from .conftest import legacy_batch, v2_batch


def _walked(fr: FileRecords, target: int, start: int) -> Optional[BatchHeader]:
    """The reference: the header walk, entry by entry (the search before it walked windows itself)."""
    for h in fr.iter_headers(start):
        if h.last_offset >= target:
            return h
    return None


def _outcome(f, *args):
    try:
        return f(*args)
    except KafkalogError as e:
        return (type(e), e.position)


def _write_file(entries: list[bytes], tail: bytes) -> FileRecords:
    fd, path = tempfile.mkstemp(suffix=".log")
    os.write(fd, b"".join(entries) + tail)
    os.close(fd)
    return FileRecords.open(path)


def _close(fr: FileRecords) -> None:
    path = fr.path
    fr.close()
    os.unlink(path)


# (kind, size): v2 batches of one value (sizes across the 8/16/32/64 KiB windows), legacy messages
ENTRY = st.one_of(
    st.tuples(st.just("v2"), st.integers(0, 70_000)),
    st.tuples(st.just("v2"), st.integers(0, 300)),
    st.tuples(st.just("v1"), st.integers(0, 200)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ENTRY, min_size=0, max_size=14), st.integers(1, 5),
       st.sampled_from([b"", b"\0" * 5, b"\0\0\0\0\0\0\0\0\0\0\x10\0" + b"\0" * 20]),
       st.one_of(st.none(), st.tuples(st.integers(0, 13), st.sampled_from(["magic", "size", "small"]))))
def test_search_matches_the_header_walk(entries, records_per_batch, tail, damage):
    blobs: list[bytes] = []
    offset = 0
    for kind, size in entries:
        if kind == "v2":
            values = [b"x" * (size // records_per_batch)] * records_per_batch
            blobs.append(bytes(v2_batch(values, base_offset=offset)))
            offset += records_per_batch
        else:
            b = bytearray(legacy_batch([b"y" * size]))
            struct.pack_into(">q", b, 0, offset)
            blobs.append(bytes(b))
            offset += 1
    if damage is not None and damage[0] < len(blobs):
        b = bytearray(blobs[damage[0]])
        if damage[1] == "magic":
            b[16] = 7                                   # impossible magic: stepped over by length
        elif damage[1] == "size":
            struct.pack_into(">i", b, 8, 3)             # below the minimum: CorruptRecordError
        elif b[16] == 2:
            struct.pack_into(">i", b, 8, 40)            # a v2 batch smaller than its header
            del b[52:]
        blobs[damage[0]] = bytes(b)
    fr = _write_file(blobs, tail)
    try:
        starts = [0]
        for blob in blobs:
            starts.append(starts[-1] + len(blob))
        for start in starts:
            for target in range(-1, offset + 3):
                assert _outcome(fr.search_for_offset_with_size, target, start) == \
                    _outcome(_walked, fr, target, start), (target, start)
    finally:
        _close(fr)


def test_large_batches_from_the_index_entry_before(tmp_path):
    """Batches larger than the first read window: from the batch before (where an offset-index
    entry points for a batch-aligned fetch offset) the search lands on the next batch, and inside a
    batch on that batch."""
    blobs = [bytes(v2_batch([b"z" * 30_000] * 3, base_offset=3 * i)) for i in range(6)]
    fr = _write_file(blobs, b"")
    try:
        pos = [sum(len(b) for b in blobs[:i]) for i in range(6)]
        for i in range(5):
            h = fr.search_for_offset_with_size(3 * (i + 1), pos[i])
            assert h is not None and (h.position, h.base_offset, h.last_offset) == \
                (pos[i + 1], 3 * (i + 1), 3 * (i + 1) + 2)
            h = fr.search_for_offset_with_size(3 * i + 1, pos[i])
            assert h is not None and h.position == pos[i]
        assert fr.search_for_offset_with_size(18, pos[5]) is None
    finally:
        _close(fr)


@pytest.mark.parametrize("interval", [64, 4096, 1 << 20])
def test_log_read_positions(tmp_path, interval):
    """``Log.read`` from a batch base, inside a batch, at the log end and beyond, over segments
    with large and small batches: the slice starts at the batch holding the offset (the walk's
    answer), ends at ``max_bytes`` or the segment, and offsets beyond the end are refused."""
    d = tmp_path / "t-0"
    d.mkdir()
    log = Log.open(str(d), LogConfig({"segment.bytes": 300_000, "index.interval.bytes": interval}))
    try:
        sizes = [20_000, 50, 90_000, 10, 10, 70_000, 3_000, 120_000, 5]
        for n in sizes:
            log.append(v2_batch([b"v" * n, b"w"]))
        end = log.log_end_offset
        assert end == 2 * len(sizes)
        for start in range(end + 1):
            for max_bytes in (1, 4096, 1 << 20):
                info = log.read(start, max_bytes, min_one_message=True)
                sl = info.records
                if start == end:
                    assert sl.size == 0
                    continue
                data = sl.read()
                base, length = struct.unpack_from(">qi", data, 0)
                assert base == start - start % 2                 # the batch holding the offset
                seg_end = os.stat(sl.path).st_size
                assert sl.size == min(seg_end - sl.position, max(max_bytes, length + 12))
                assert info.fetch_offset_metadata.message_offset == start
        with pytest.raises(KafkalogError):
            log.read(end + 1, 1 << 20)
    finally:
        log.close()


def test_bad_size_is_reported_from_either_window(tmp_path):
    """A length below the minimum in the second window raises with the entry's position, as the
    walk does."""
    good = bytes(v2_batch([b"q" * 20_000], base_offset=0))
    bad = bytearray(v2_batch([b"r"], base_offset=1))
    struct.pack_into(">i", bad, 8, 2)
    fr = _write_file([good, bytes(bad)], b"")
    try:
        with pytest.raises(CorruptRecordError) as e:
            fr.search_for_offset_with_size(1, 0)
        assert e.value.position == len(good)
    finally:
        _close(fr)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 9_000)), min_size=1, max_size=3),
                min_size=1, max_size=10),
       st.sampled_from([1, 64, 4096, 20_000]), st.integers(0, 3))
def test_translate_offset_matches_the_walk_over_chunks_of_batches(tmp_path_factory, chunks, interval,
                                                                 gap):
    """``LogSegment.translate_offset`` (the offset index, then the batch at the next entry or a walk)
    gives the walk's answer from every start, for appends of several batches each (one index entry
    per append, keyed by its last offset: the batch at an entry may then end below an offset the
    entry covers) and offsets with gaps between batches (as compaction leaves them)."""
    from kafkalog.log.segment import LogSegment
    d = tmp_path_factory.mktemp("chunks")
    seg = LogSegment(str(d), 0, index_interval_bytes=interval)
    try:
        offset = 0
        for chunk in chunks:
            blobs = []
            for records, size in chunk:
                blobs.append(bytes(v2_batch([b"c" * (size // records)] * records, base_offset=offset)))
                offset += records + gap
            seg.append(offset - gap - 1, 0, offset - gap - 1, b"".join(blobs))
        positions = [0]
        for h in seg.log.iter_headers(0):
            positions.append(h.position + h.size)
        for target in range(-1, offset + 2):
            for start in positions:
                assert seg.translate_offset(target, start) == _walked(seg.log, target, start), \
                    (target, start)
    finally:
        seg.close()
