"""A read-only view of a Kafka data directory for the Spark source.

Executors and the planner only *read* a data directory (possibly a copy of a live broker's), so
this module never takes locks, never recovers and never writes: it lists partition directories,
looks offsets and timestamps up in the ``.index`` / ``.timeindex`` files (spec §2) and walks batch
headers (spec §1.2). Anything malformed raises a :class:`~kafkalog.errors.KafkalogError` naming
the file and byte position.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from kafkalog.errors import CorruptCheckpointError, CorruptRecordError, LogDirError

LOG_SUFFIX = ".log"
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_HEADER = struct.Struct(">qiib")          # baseOffset, length, leaderEpoch/crc, magic
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = 61
LOG_OVERHEAD = 12


@dataclass(frozen=True)
class PartitionDir:
    """One ``<topic>-<partition>`` directory of a data directory."""
    topic: str
    partition: int
    path: str


def list_partitions(data_dir: str) -> List[PartitionDir]:
    """Partition directories of ``data_dir`` (skipping ``-delete``/``-future``/``-stray`` dirs,
    hidden dirs and anything that is not ``<topic>-<n>``), sorted by topic then partition."""
    if not os.path.isdir(data_dir):
        raise LogDirError(f"data directory does not exist or is not a directory", file=data_dir)
    found = []
    for name in os.listdir(data_dir):
        if name.startswith(".") or name.endswith(("-delete", "-future", "-stray")):
            continue
        m = _PARTITION_DIR.match(name)
        path = os.path.join(data_dir, name)
        if m and os.path.isdir(path):
            found.append(PartitionDir(m.group("topic"), int(m.group("partition")), path))
    found.sort(key=lambda p: (p.topic, p.partition))
    return found


def segment_bases(partition_dir: str) -> List[int]:
    """Sorted base offsets of the ``.log`` segments of a partition directory."""
    bases = []
    for name in os.listdir(partition_dir):
        if name.endswith(LOG_SUFFIX) and len(name) == 24 and name[:20].isdigit():
            bases.append(int(name[:20]))
    bases.sort()
    return bases


def segment_path(partition_dir: str, base: int, suffix: str = LOG_SUFFIX) -> str:
    return os.path.join(partition_dir, f"{base:020d}{suffix}")


def _read_entries(path: str, entry_size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b""
    return data[: len(data) - len(data) % entry_size]


def offset_index_position(partition_dir: str, base: int, target: int) -> int:
    """Byte position of the largest ``.index`` entry <= ``target`` (0 if none) (spec §2.2).

    Trailing all-zero slots of a preallocated index are ignored.
    """
    data = _read_entries(segment_path(partition_dir, base, ".index"), 8)
    n = len(data) // 8
    if not n:
        return 0
    entries = struct.unpack(f">{2 * n}i", data)
    rel = entries[0::2]
    pos = entries[1::2]
    # a preallocated (active) index ends in zero slots: keep entries up to the last increasing one
    valid = 1
    while valid < n and rel[valid] > rel[valid - 1]:
        valid += 1
    i = bisect.bisect_right(rel, target - base, 0, valid) - 1
    return pos[i] if i >= 0 else 0


def time_index_entries(partition_dir: str, base: int) -> List[Tuple[int, int]]:
    """``(timestamp, offset)`` entries of a segment's ``.timeindex`` (spec §2.3)."""
    data = _read_entries(segment_path(partition_dir, base, ".timeindex"), 12)
    out: List[Tuple[int, int]] = []
    for ts, rel in struct.iter_unpack(">qi", data):
        if out and ts <= out[-1][0]:
            break  # zero slots of a preallocated index
        out.append((ts, base + rel))
    return out


@dataclass(frozen=True)
class BatchHeader:
    """The fields of one batch header that planning and reading need."""
    position: int
    size: int            # whole entry, including the 12-byte log overhead
    magic: int
    base_offset: int     # v0/v1: the wrapper (last) offset: first offset unknown without decompression
    last_offset: int
    attributes: int
    max_timestamp: int
    producer_id: int
    count: int

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x20)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x10)


def iter_headers(buf, start: int = 0, end: Optional[int] = None, *,
                 file: Optional[str] = None) -> Iterator[BatchHeader]:
    """Walk the batch headers of a ``.log`` buffer by Kafka's file iteration rules (spec §1.2)."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end - 17:
        base, length, _epoch, magic = _HEADER.unpack_from(buf, pos)
        if length < 14:
            raise CorruptRecordError(f"Record size {length} is less than the minimum record "
                                     "overhead (14)", file=file, position=pos)
        size = length + LOG_OVERHEAD
        if pos + size > end:
            return
        if magic >= 2:
            if size < HEADER_SIZE:
                raise CorruptRecordError(f"Record batch size {size} is smaller than the minimum "
                                         "allowed overhead 61", file=file, position=pos)
            (_b, _l, _e, _m, _crc, attrs, last_delta, _bts, max_ts, pid, _pe, _bs,
             count) = _V2_HEADER.unpack_from(buf, pos)
            yield BatchHeader(pos, size, magic, base, base + last_delta, attrs, max_ts, pid, count)
        else:
            ts = struct.unpack_from(">q", buf, pos + 18)[0] if magic == 1 and size >= 26 else -1
            yield BatchHeader(pos, size, magic, base, base, buf[pos + 17], ts, -1, 1)
        pos += size


class MappedSegment:
    """A read-only memory map of one ``.log`` file (empty files map to ``b""``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "rb")
        size = os.fstat(self._file.fileno()).st_size
        self.buf = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:  # an Arrow array still references it; the GC will unmap
                pass
        self._file.close()

    def __enter__(self) -> "MappedSegment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_log_start_checkpoint(data_dir: str) -> Dict[Tuple[str, int], int]:
    """``log-start-offset-checkpoint`` of a data directory as ``{(topic, partition): offset}``."""
    path = os.path.join(data_dir, "log-start-offset-checkpoint")
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    out: Dict[Tuple[str, int], int] = {}
    try:
        for line in lines[2:]:
            if line.strip():
                topic, part, off = line.split(" ")
                out[(topic, int(part))] = int(off)
    except ValueError:
        raise CorruptCheckpointError("malformed offset checkpoint line", file=path) from None
    return out


@dataclass(frozen=True)
class PartitionBounds:
    """Log start offset and log end offset of one partition as found on disk."""
    log_start_offset: int
    log_end_offset: int


def partition_bounds(pdir: PartitionDir, checkpoint: Optional[Dict[Tuple[str, int], int]] = None
                     ) -> PartitionBounds:
    """The log start offset (first segment base, raised by the checkpoint) and the log end offset
    (last batch's last offset + 1, found from the last index entry of the last segment)."""
    bases = segment_bases(pdir.path)
    if not bases:
        start = (checkpoint or {}).get((pdir.topic, pdir.partition), 0)
        return PartitionBounds(start, start)
    leo = None
    for base in reversed(bases):
        path = segment_path(pdir.path, base)
        with MappedSegment(path) as seg:
            pos = offset_index_position(pdir.path, base, 1 << 62)
            if pos > len(seg.buf):
                pos = 0
            last = None
            for h in iter_headers(seg.buf, pos, file=path):
                last = h
            if last is not None:
                leo = last.last_offset + 1
                break
            if base == bases[-1]:
                leo = base  # empty active segment: LEO is its base offset
                break
    if leo is None:
        leo = bases[-1]
    start = max(bases[0], (checkpoint or {}).get((pdir.topic, pdir.partition), bases[0]))
    return PartitionBounds(min(start, leo), max(leo, bases[-1]))


def offset_for_timestamp(pdir: PartitionDir, timestamp: int, start_offset: int) -> Optional[int]:
    """Kafka's ListOffsets for ``timestamp`` (spec §4.7): the first offset >= ``start_offset`` of a
    record with timestamp >= ``timestamp``; None when there is none."""
    from kafkalog.spark.segment_reader import first_record_at_or_after  # local: avoids a cycle
    for base in segment_bases(pdir.path):
        entries = time_index_entries(pdir.path, base)
        lookup_offset = base
        if entries:
            i = bisect.bisect_right([ts for ts, _ in entries], timestamp) - 1
            if i >= 0:
                lookup_offset = entries[i][1]
            if entries[-1][0] < timestamp and not _segment_may_exceed(pdir, base, entries):
                continue
        path = segment_path(pdir.path, base)
        pos = offset_index_position(pdir.path, base, max(lookup_offset, start_offset))
        with MappedSegment(path) as seg:
            if pos > len(seg.buf):
                pos = 0
            for h in iter_headers(seg.buf, pos, file=path):
                if h.last_offset < start_offset or h.max_timestamp < timestamp:
                    continue
                found = first_record_at_or_after(seg.buf, h, timestamp, start_offset, path)
                if found is not None:
                    return found
    return None


def _segment_may_exceed(pdir: PartitionDir, base: int, entries: List[Tuple[int, int]]) -> bool:
    """True if batches after the last time-index entry may hold larger timestamps (an active
    segment whose final entry is not written yet): the caller must scan it."""
    bases = segment_bases(pdir.path)
    return base == bases[-1]
