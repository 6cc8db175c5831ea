"""Batch-level access to a segment's ``.log`` file (Kafka's ``FileRecords`` + ``FileLogInputStream``).

Everything here works on batch headers only (spec §1.2, §1.10): a walk reads the 17-byte entry prefix
(offset, length, crc-or-leader-epoch, magic) and, for v2, the fixed header fields it needs, with
``struct.unpack_from`` on a buffer filled by ``os.pread`` (or an mmap during recovery). No record is
ever decoded on these paths.

The file handle keeps a *logical* size separately from the file length, so a preallocated file
(``preallocate=true``: length = ``segment.bytes``) reads and appends exactly like a plain one and is
trimmed to its logical size when the segment becomes inactive or is closed.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Iterator, NamedTuple, Optional

from crc32c import crc32c

from kafkalog.errors import CorruptRecordError, KafkalogIOError
from kafkalog.log.kernel import find_v2_batch
from kafkalog.record.crc import Buffer
from kafkalog.record.header_walk import (
    _ROW,
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    F_PARTITION_LEADER_EPOCH,
    F_POSITION,
    F_SIZE,
    NF,
    FindingKind,
    header_window,
    walk,
)

# entry prefix shared by every magic: offset, length, crc (v0/v1) or leader epoch (v2), magic
PREFIX = struct.Struct(">qiib")
PREFIX_SIZE = 17
LOG_OVERHEAD = 12
RECORD_OVERHEAD_V0 = 14          # smallest legal legacy message (length field value)
RECORD_BATCH_OVERHEAD = 61       # v2 header size
# v2 header fields from byte 17: crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
V2_FIELDS = struct.Struct(">Ihiqq")
V2_COUNT = struct.Struct(">i")   # recordsCount at byte 57
V2_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
V1_TIMESTAMP = struct.Struct(">q")   # at byte 18 of a v1 entry
INT64 = struct.Struct(">q")
UINT32 = struct.Struct(">I")

_READ_BLOCK = 64 * 1024
#: The first window of a header walk: an offset-index lookup lands within ``index.interval.bytes``
#: (4 KiB) of its target, so a search mostly needs one small read, not a whole block; later windows
#: double up to :data:`_READ_BLOCK`.
_FIRST_READ_BLOCK = 8 * 1024
_WRITE_CHUNK = 256 * 1024
_NEED_MORE = FindingKind.NEED_MORE.value


class BatchHeader(NamedTuple):
    """The header facts of one entry, as the log layer needs them (spec §1.10)."""

    position: int          # byte position of the entry in the file
    size: int              # whole entry size incl. the 12-byte log overhead
    magic: int
    base_offset: int       # v2: header baseOffset; v0/v1: the shallow offset (= last offset)
    last_offset: int
    max_timestamp: int     # v2 header, v1 message timestamp, v0 -1
    partition_leader_epoch: int  # v2 only, else -1
    attributes: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x20)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x10)


def parse_header(buf: Buffer, off: int, position: int, size: int, offset: int, ple_or_crc: int,
                 magic: int) -> BatchHeader:
    """Build a :class:`BatchHeader` from an entry starting at ``buf[off]`` (at least the fixed header
    of its magic must be in ``buf``)."""
    if magic >= 2:
        if size < RECORD_BATCH_OVERHEAD:
            return BatchHeader(position, size, magic, offset, offset, -1, ple_or_crc, 0)
        _crc, attrs, lod, _bts, mts = V2_FIELDS.unpack_from(buf, off + 17)
        return BatchHeader(position, size, magic, offset, offset + lod, mts, ple_or_crc, attrs & 0xFF)
    attrs = buf[off + 17] if size > 17 else 0
    ts = -1
    if magic == 1 and size >= 26:
        ts = V1_TIMESTAMP.unpack_from(buf, off + 18)[0]
    return BatchHeader(position, size, magic, offset, offset, ts, -1, attrs)


def header_of_row(row: tuple[int, ...]) -> BatchHeader:
    """The :class:`BatchHeader` of one row of the walker's facts (v2 attributes as one byte, as
    :func:`parse_header` gives them)."""
    magic = row[F_MAGIC]
    return BatchHeader(row[F_POSITION], row[F_SIZE], magic, row[F_BASE_OFFSET], row[F_LAST_OFFSET],
                       row[F_MAX_TIMESTAMP], row[F_PARTITION_LEADER_EPOCH] if magic >= 2 else -1,
                       row[F_ATTRIBUTES] & 0xFF)


def entry_is_valid(buf: Buffer, off: int, size: int, magic: int) -> Optional[str]:
    """Check one entry's integrity (``isValid()``: size and checksum). Returns None when valid, else
    the reason. ``buf[off:off+size]`` must hold the whole entry."""
    if magic >= 2:
        if size < RECORD_BATCH_OVERHEAD:
            return (f"Record batch size {size} is smaller than the minimum allowed overhead "
                    f"{RECORD_BATCH_OVERHEAD}")
        stored = UINT32.unpack_from(buf, off + 17)[0]
        computed = crc32c(memoryview(buf)[off + 21: off + size])
        if stored != computed:
            return f"Record is corrupt (stored crc = {stored}, computed crc = {computed})"
        return None
    if size - LOG_OVERHEAD < RECORD_OVERHEAD_V0:
        return f"Record size {size - LOG_OVERHEAD} is less than the minimum record overhead (14)"
    stored = UINT32.unpack_from(buf, off + 12)[0]
    computed = zlib.crc32(memoryview(buf)[off + 16: off + size])
    if stored != computed:
        return f"Record is corrupt (stored crc = {stored}, computed crc = {computed})"
    return None


class FileRecords:
    """One ``.log`` file: append by ``os.pwrite`` at the logical end, read slices by ``os.pread``.

    ``size`` is the logical size (bytes of data); the file may be longer when preallocated.
    """

    def __init__(self, path: str, fd: int, size: int, preallocated: bool) -> None:
        self.path = path
        self.fd = fd
        self.size = size
        self.preallocated = preallocated

    # --- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str, *, file_already_exists: bool = True, init_file_size: int = 0,
             preallocate: bool = False) -> FileRecords:
        """Open (or create) ``path``. A new preallocated file gets length ``init_file_size`` and
        logical size 0. An existing preallocated file's logical size is found by walking its headers
        up to the first zero/partial entry (Kafka does the same via recovery)."""
        try:
            if not file_already_exists or not os.path.exists(path):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                if preallocate and init_file_size > 0:
                    try:
                        os.posix_fallocate(fd, 0, init_file_size)
                    except OSError:
                        os.ftruncate(fd, init_file_size)
                    return cls(path, fd, 0, True)
                return cls(path, fd, os.fstat(fd).st_size, False)
            fd = os.open(path, os.O_RDWR)
            length = os.fstat(fd).st_size
            if preallocate:
                return cls(path, fd, length, True)
            return cls(path, fd, length, False)
        except OSError as e:
            raise KafkalogIOError(f"cannot open log file: {e.strerror}", file=path) from e

    def close(self) -> None:
        """Trim to the logical size (when preallocated) and close the descriptor."""
        if self.fd < 0:
            return
        try:
            self.trim()
        finally:
            os.close(self.fd)
            self.fd = -1

    def trim(self) -> None:
        """Cut the file to its logical size (no-op when it already is)."""
        if self.fd >= 0 and os.fstat(self.fd).st_size != self.size:
            os.ftruncate(self.fd, self.size)
        self.preallocated = False

    def flush(self) -> None:
        """fsync the data (``FileChannel.force(true)``)."""
        if self.fd >= 0:
            os.fsync(self.fd)

    def rename_to(self, new_path: str) -> None:
        os.rename(self.path, new_path)
        self.path = new_path

    # --- writes ----------------------------------------------------------------------------------

    def append(self, data: Buffer) -> int:
        """Write ``data`` at the logical end; returns the number of bytes written."""
        pos = self.size
        n = len(data)
        if n <= _WRITE_CHUNK:
            # common case (one produce batch): one pwrite, no memoryview
            try:
                done = os.pwrite(self.fd, data, pos)
            except OSError as e:
                raise KafkalogIOError(f"write failed: {e.strerror}", file=self.path, position=pos) from e
            if done == n:
                self.size = pos + n
                return n
        else:
            done = 0
        mv = memoryview(data)
        n = len(mv)
        try:
            while done < n:
                # bounded chunks: one huge pwrite is markedly slower than cache-sized ones
                done += os.pwrite(self.fd, mv[done:done + _WRITE_CHUNK], pos + done)
        except OSError as e:
            # never leave a half-written entry counted: the logical size stays where it was
            raise KafkalogIOError(f"write failed: {e.strerror}", file=self.path, position=pos) from e
        self.size = pos + n
        return n

    def truncate_to(self, target_size: int) -> int:
        """Truncate to ``target_size`` bytes; returns the bytes removed. Truncating beyond the size
        is an error (Kafka: KafkaException)."""
        if target_size > self.size or target_size < 0:
            raise KafkalogIOError(f"attempt to truncate log segment to {target_size} bytes failed, "
                                  f"size of this log segment is {self.size} bytes", file=self.path)
        removed = self.size - target_size
        if target_size < os.fstat(self.fd).st_size:
            os.ftruncate(self.fd, target_size)
        self.size = target_size
        return removed

    # --- reads -----------------------------------------------------------------------------------

    def pread(self, position: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``position``, never beyond the logical size."""
        n = min(n, self.size - position)
        if n <= 0:
            return b""
        return os.pread(self.fd, n, position)

    def iter_headers(self, start: int = 0, end: Optional[int] = None) -> Iterator[BatchHeader]:
        """Walk entries from ``start`` to ``end`` (default: logical size) with the file iteration rules
        of spec §1.2 (the header walker over windows read by ``pread``, headers only): stop when
        fewer than 18 bytes remain or the entry is partial; an entry length below 14 raises
        :class:`CorruptRecordError` (file + position)."""
        if end is None:
            end = self.size
        pos = start
        block = _FIRST_READ_BLOCK
        while pos < end - PREFIX_SIZE:
            n = min(block, end - pos)
            buf = os.pread(self.fd, n, pos)
            w = walk(buf, pos, end, verify_crc=False, base=pos)
            cols = w.facts
            for i in range(w.count):
                yield header_of_row(_ROW.unpack_from(cols, i * _ROW.size))
            f = w.finding
            if f is None or f.kind is not FindingKind.NEED_MORE:
                if f is not None and f.kind is FindingKind.BAD_SIZE:
                    raise CorruptRecordError(f"Found record size {f.a} smaller than minimum record "
                                             f"overhead ({RECORD_OVERHEAD_V0})", file=self.path,
                                             position=f.position)
                if f is not None and f.kind in (FindingKind.BAD_MAGIC, FindingKind.SMALL_BATCH):
                    yield self._damaged_header(f.position, end)
                    pos = f.position + PREFIX.unpack_from(self.pread(f.position, PREFIX_SIZE))[1] \
                        + LOG_OVERHEAD
                    continue
                return
            if f.position == pos and end - pos <= n:     # pragma: no cover - defensive
                return
            block = min(block * 2, _READ_BLOCK)
            pos = f.position

    def _damaged_header(self, position: int, end: int) -> BatchHeader:
        """A :class:`BatchHeader` for an entry the walker refuses (impossible magic, v2 batch smaller
        than its header): readers still step over it by its length, as they always did."""
        head = self.pread(position, RECORD_BATCH_OVERHEAD)
        offset, length, ple, magic = PREFIX.unpack_from(head)
        return parse_header(head + bytes(RECORD_BATCH_OVERHEAD), 0, position, length + LOG_OVERHEAD,
                            offset, ple, magic)

    def read_entry(self, position: int, size: int) -> bytes:
        """The bytes of one whole entry."""
        return os.pread(self.fd, size, position)

    def batch_holding(self, position: int, offset: int) -> Optional[BatchHeader]:
        """The v2 batch at ``position`` when it is whole in the file and holds ``offset`` (its base
        offset <= ``offset`` <= its last offset); None otherwise (any other entry, or none)."""
        found = find_v2_batch(os.pread(self.fd, RECORD_BATCH_OVERHEAD, position), position,
                              self.size, offset)
        if len(found) == 8 and found[0] == position and found[3] <= offset:
            return BatchHeader(*found)
        return None

    def search_for_offset_with_size(self, target_offset: int, start_position: int
                                    ) -> Optional[BatchHeader]:
        """The first entry at or after ``start_position`` whose last offset is >= ``target_offset``
        (Kafka's ``searchForOffsetWithSize``), or None.

        The fetch path, in three tiers with the same rules: well-formed v2 batches stepped over in
        windows by the log kernel (:func:`~kafkalog.log.kernel.find_v2_batch`; an offset-index
        entry usually lands on the batch before the target, whose successor is in the second
        window when batches are large); from the first entry that is anything else, windows
        walked by the header walker, no generator nor a header per entry passed by; anything but
        whole entries and "read the next window" (a tail, damage) is left to :meth:`iter_headers`
        from where it was found."""
        end = self.size
        pos = start_position
        block = _FIRST_READ_BLOCK
        fd = self.fd
        while pos < end - PREFIX_SIZE:
            found = find_v2_batch(os.pread(fd, min(block, end - pos), pos), pos, end, target_offset)
            if len(found) == 8:
                return BatchHeader(*found)
            nxt, general = found
            if general or nxt == pos:
                pos = nxt
                break
            block = min(block * 2, _READ_BLOCK)
            pos = nxt
        block = _FIRST_READ_BLOCK
        while pos < end - PREFIX_SIZE:
            facts, count, stop, stop_pos = header_window(os.pread(fd, min(block, end - pos), pos),
                                                         pos, end)
            if count:
                lasts = memoryview(facts).cast("q")
                for i in range(F_LAST_OFFSET, count * NF, NF):
                    if lasts[i] >= target_offset:
                        return header_of_row(_ROW.unpack_from(facts, (i - F_LAST_OFFSET) * 8))
            if not stop:
                return None
            if stop != _NEED_MORE or stop_pos == pos:
                pos = stop_pos
                break
            block = min(block * 2, _READ_BLOCK)
            pos = stop_pos
        for h in self.iter_headers(pos):
            if h.last_offset >= target_offset:
                return h
        return None
