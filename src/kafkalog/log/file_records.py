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
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple, Optional, Protocol, Tuple

from kafkalog.errors import CorruptRecordError, KafkalogIOError
from kafkalog.log.file_handles import HANDLES
from kafkalog.log.fsutil import defer_fsync, preread_file
from kafkalog.log.kernel import find_v2_batch
from kafkalog.record.batch import RecordBatch
from kafkalog.record.constants import (
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    RECORD_OVERHEAD_V0,
)
from kafkalog.record.crc import Buffer
from kafkalog.record.header_walk import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    F_PARTITION_LEADER_EPOCH,
    F_POSITION,
    F_SIZE,
    FindingKind,
    HeaderWalk,
    walk,
)
from kafkalog.record.records import batch_views

# entry prefix shared by every magic: offset, length, crc (v0/v1) or leader epoch (v2), magic
PREFIX = struct.Struct(">qiib")
PREFIX_SIZE = HEADER_SIZE_UP_TO_MAGIC
# v2 header fields from byte 17: crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
V2_FIELDS = struct.Struct(">Ihiqq")
V1_TIMESTAMP = struct.Struct(">q")   # at byte 18 of a v1 entry

_READ_BLOCK = 64 * 1024
#: The first window of a header walk: an offset-index lookup lands within ``index.interval.bytes``
#: (4 KiB) of its target, so a search mostly needs one small read, not a whole block; later windows
#: double up to :data:`_READ_BLOCK`.
_FIRST_READ_BLOCK = 8 * 1024
_WRITE_CHUNK = 256 * 1024
#: the windows of :meth:`FileRecords.batches`: readers read on, so larger ones (one ``pread`` and
#: one header walk each, no copy per batch)
_FIRST_BATCHES_READ = 64 * 1024
_MAX_BATCHES_READ = 1024 * 1024
#: the LRU touch of an open descriptor (:mod:`kafkalog.log.file_handles`), called directly by
#: :meth:`FileRecords.pin`: a KeyError means it is being evicted (the pin keeps it open)
_touch = HANDLES.lru.move_to_end
#: findings that end a walk without an error: more to read, a batch being written, the end
_ENDS = (FindingKind.NEED_MORE, FindingKind.SHORT_TAIL, FindingKind.PARTIAL_TAIL)


@dataclass(frozen=True)
class TimestampAndOffset:
    """A ListOffsets answer (Kafka's ``FileRecords.TimestampAndOffset``): record timestamp, offset
    and the batch's leader epoch (None if < 0)."""

    timestamp: int
    offset: int
    leader_epoch: Optional[int] = None


def first_record_with_timestamp(batches: Iterable[object], timestamp: int,
                                start_offset: int) -> Optional[TimestampAndOffset]:
    """The first record (control records included, as Kafka) with offset >= ``start_offset`` and
    timestamp >= ``timestamp`` among ``batches`` (batch views in offset order; only the batch
    holding the answer is decoded): Kafka's ``FileRecords.searchForTimestamp``."""
    for batch in batches:
        b = batch  # (any batch view: RecordBatch, legacy or v2)
        if b.last_offset < start_offset or b.max_timestamp < timestamp:  # type: ignore[attr-defined]
            continue
        for rec in b.records():  # type: ignore[attr-defined]
            if rec.timestamp >= timestamp and rec.offset >= start_offset:
                epoch = b.partition_leader_epoch  # type: ignore[attr-defined]
                return TimestampAndOffset(rec.timestamp, rec.offset, epoch if epoch >= 0 else None)
    return None


class _Entry(Protocol):
    @property
    def last_offset(self) -> int: ...


def segment_next_offset(entries_from: Callable[[int], Iterable[_Entry]], index_position: int,
                        base_offset: int) -> int:
    """Kafka's ``LogSegment.readNextOffset``: the offset after the last entry of a segment whose
    entries ``entries_from(position)`` walks, from its last offset-index entry's position
    (``index_position``; from the start when the walk from there finds nothing); the base offset
    when the segment holds no entry."""
    last: Optional[_Entry] = None
    for last in entries_from(index_position):  # noqa: B007 (the last entry is what is wanted)
        pass
    if last is None and index_position:
        for last in entries_from(0):  # noqa: B007
            pass
    return base_offset if last is None else max(last.last_offset + 1, base_offset)


class Window(NamedTuple):
    """One window of a ``.log`` (:meth:`FileRecords.windows`): the file's bytes from position
    ``base`` and the header walk of the entries starting in them (file positions)."""

    base: int
    buf: bytes
    walk: HeaderWalk


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
        _crc, attrs, lod, _bts, mts = V2_FIELDS.unpack_from(buf, off + CRC_OFFSET)
        return BatchHeader(position, size, magic, offset, offset + lod, mts, ple_or_crc, attrs & 0xFF)
    attrs = buf[off + LEGACY_ATTRIBUTES_OFFSET] if size > LEGACY_ATTRIBUTES_OFFSET else 0
    ts = -1
    if magic == 1 and size >= 26:
        ts = V1_TIMESTAMP.unpack_from(buf, off + LEGACY_TIMESTAMP_OFFSET)[0]
    return BatchHeader(position, size, magic, offset, offset, ts, -1, attrs)


def header_of_row(row: tuple[int, ...]) -> BatchHeader:
    """The :class:`BatchHeader` of one row of the walker's facts (v2 attributes as one byte, as
    :func:`parse_header` gives them)."""
    magic = row[F_MAGIC]
    return BatchHeader(row[F_POSITION], row[F_SIZE], magic, row[F_BASE_OFFSET], row[F_LAST_OFFSET],
                       row[F_MAX_TIMESTAMP], row[F_PARTITION_LEADER_EPOCH] if magic >= 2 else -1,
                       row[F_ATTRIBUTES] & 0xFF)


class FileRecords:
    """One ``.log`` file: append by ``os.pwrite`` at the logical end, read slices by ``os.pread``.

    ``size`` is the logical size (bytes of data); the file may be longer when preallocated.

    The descriptor is one of the process's bounded set (:mod:`kafkalog.log.file_handles`): it may
    be closed while the file is idle and is reopened by path on the next use. ``fd`` is only valid
    while pinned (:meth:`pin` ... :meth:`unpin`); every method here pins around its system calls,
    never across a ``yield``.
    """

    def __init__(self, path: str, fd: int, size: int, preallocated: bool) -> None:
        self.path = path
        self.fd = fd
        self.size = size
        self.preallocated = preallocated
        #: the pins of the users in the middle of a system call on ``fd`` (one entry each)
        self.users: list[None] = []
        #: appends (or a truncation) not fsynced yet: fsynced before an eviction closes ``fd``
        self.unflushed = False
        self.closed = False
        #: an fsync that failed when the descriptor was evicted, raised by the next :meth:`flush`
        self.write_error: Optional[KafkalogIOError] = None
        if fd >= 0:                     # (-1: not opened yet, as if evicted: opened on first use)
            HANDLES.add(self)

    #: ``(position, bytes)``: the file's end as a load's read-ahead read it (``open``), which
    #: :meth:`read_at` serves while the load lasts (``forget_tail``, and any truncation, drop it)
    _tail: Optional[Tuple[int, bytes]] = None

    def forget_tail(self) -> None:
        self._tail = None

    # --- the descriptor --------------------------------------------------------------------------

    def pin(self) -> int:
        """The open descriptor, kept open until :meth:`unpin` (reopened if it was evicted)."""
        self.users.append(None)
        fd = self.fd
        if fd >= 0:
            try:
                _touch(self)
            except KeyError:
                HANDLES.touch(self)             # parked (dirty, waiting for its fsync) or evicted
            return fd
        try:
            return HANDLES.reopen(self)
        except BaseException:
            self.users.pop()
            raise

    def unpin(self) -> None:
        self.users.pop()

    def dup(self) -> int:
        """A descriptor of this file of the caller's own (``os.dup``; close it when done): it
        stays valid whatever happens to this one (eviction, close, rename, deletion)."""
        fd = self.pin()
        try:
            return os.dup(fd)
        finally:
            self.users.pop()

    # --- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def made_empty(cls, path: str) -> FileRecords:
        """A file the caller has just made empty (a new partition's files made at once): opened
        on first use, as one a read-ahead found."""
        return cls(path, -1, 0, False)

    @classmethod
    def open(cls, path: str, *, file_already_exists: bool = True, init_file_size: int = 0,
             preallocate: bool = False) -> FileRecords:
        """Open (or create) ``path``. A new preallocated file gets length ``init_file_size`` and
        logical size 0. An existing preallocated file's logical size is found by walking its headers
        up to the first zero/partial entry (Kafka does the same via recovery)."""
        if file_already_exists and not preallocate:
            pre = preread_file(path)
            if pre is not None:                  # a read-ahead found it: opened on first use
                size, end = pre
                records = cls(path, -1, size, False)
                records._tail = (size - len(end), end)
                return records
        try:
            fd = -1
            if file_already_exists:              # (no stat before: a missing file is made below)
                try:
                    fd = os.open(path, os.O_RDWR)
                except FileNotFoundError:
                    pass
            if fd < 0:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                if preallocate and init_file_size > 0:
                    try:
                        os.posix_fallocate(fd, 0, init_file_size)
                    except OSError:
                        os.ftruncate(fd, init_file_size)
                    return cls(path, fd, 0, True)
                return cls(path, fd, os.fstat(fd).st_size, False)
            length = os.fstat(fd).st_size
            if preallocate:
                return cls(path, fd, length, True)
            return cls(path, fd, length, False)
        except OSError as e:
            raise KafkalogIOError(f"cannot open log file: {e.strerror}", file=path) from e

    def _take_fd(self) -> int:
        """Mark closed and take the descriptor out of the LRU (-1 if it was evicted), once the
        reads in flight on it are done (each is one system call)."""
        with HANDLES.lock:
            self.closed = True
            fd, self.fd = self.fd, -1
        HANDLES.discard(self)
        deadline = time.monotonic() + 1.0
        while self.users and time.monotonic() < deadline:
            time.sleep(0)
        return fd

    def close(self) -> None:
        """Trim to the logical size (when preallocated) and close the descriptor."""
        if self.closed:
            return
        fd = self._take_fd()
        try:
            if fd >= 0:
                if os.fstat(fd).st_size != self.size:
                    os.ftruncate(fd, self.size)
            elif self.preallocated and os.stat(self.path).st_size != self.size:
                os.truncate(self.path, self.size)
            self.preallocated = False
        finally:
            if fd >= 0:
                os.close(fd)

    def close_handle(self) -> None:
        """Close the descriptor without trimming (before the file is deleted)."""
        if self.closed:
            return
        fd = self._take_fd()
        if fd >= 0:
            os.close(fd)

    def trim(self) -> None:
        """Cut the file to its logical size (no-op when it already is)."""
        if self.closed:
            return
        fd = self.pin()
        try:
            if os.fstat(fd).st_size != self.size:
                os.ftruncate(fd, self.size)
        finally:
            self.users.pop()
        self.preallocated = False

    def flush(self) -> None:
        """fsync the data (``FileChannel.force(true)``); an fsync that failed when the descriptor
        was evicted is raised here (and at every later flush: the data it held may be lost)."""
        if self.write_error is not None:
            raise self.write_error
        if self.closed or defer_fsync(self.path):
            return
        fd = self.pin()
        try:
            self.unflushed = False
            os.fsync(fd)
        except BaseException:
            self.unflushed = True
            raise
        finally:
            self.users.pop()
        HANDLES.wait_synced(self)
        if self.write_error is not None:
            raise self.write_error

    def holds_unflushed_writes(self) -> bool:
        """Whether an append or a truncation since the file was opened may not be on disk yet
        (an fsync of the sync threads under way is waited for; one that failed counts)."""
        HANDLES.wait_synced(self)
        return self.unflushed or self.write_error is not None

    def rename_to(self, new_path: str) -> None:
        HANDLES.rename(self, new_path)

    # --- writes ----------------------------------------------------------------------------------

    def append(self, data: Buffer) -> int:
        """Write ``data`` at the logical end; returns the number of bytes written."""
        pos = self.size
        n = len(data)
        fd = self.pin()
        try:
            self.unflushed = True
            if n <= _WRITE_CHUNK:
                # common case (one produce batch): one pwrite, no memoryview
                try:
                    done = os.pwrite(fd, data, pos)
                except OSError as e:
                    raise KafkalogIOError(f"write failed: {e.strerror}", file=self.path,
                                          position=pos) from e
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
                    done += os.pwrite(fd, mv[done:done + _WRITE_CHUNK], pos + done)
            except OSError as e:
                # never leave a half-written entry counted: the logical size stays where it was
                raise KafkalogIOError(f"write failed: {e.strerror}", file=self.path,
                                      position=pos) from e
            self.size = pos + n
            return n
        finally:
            self.users.pop()

    def truncate_to(self, target_size: int) -> int:
        """Truncate to ``target_size`` bytes; returns the bytes removed. Truncating beyond the size
        is an error (Kafka: KafkaException)."""
        if target_size > self.size or target_size < 0:
            raise KafkalogIOError(f"attempt to truncate log segment to {target_size} bytes failed, "
                                  f"size of this log segment is {self.size} bytes", file=self.path)
        removed = self.size - target_size
        self._tail = None
        fd = self.pin()
        try:
            if target_size < os.fstat(fd).st_size:
                self.unflushed = True
                os.ftruncate(fd, target_size)
        finally:
            self.users.pop()
        self.size = target_size
        return removed

    # --- reads -----------------------------------------------------------------------------------

    def read_at(self, position: int, n: int) -> bytes:
        """``os.pread`` of ``n`` bytes at ``position`` (not limited to the logical size)."""
        tail = self._tail
        if tail is not None and position >= tail[0] and position + n <= tail[0] + len(tail[1]):
            return tail[1][position - tail[0]:position - tail[0] + n]
        fd = self.pin()
        try:
            return os.pread(fd, n, position)
        finally:
            self.users.pop()

    def send_to(self, out_fd: int, position: int, size: int) -> int:
        """``os.sendfile`` ``size`` bytes from ``position`` to ``out_fd``; returns the bytes sent."""
        sent = 0
        fd = self.pin()
        try:
            while sent < size:
                n = os.sendfile(out_fd, fd, position + sent, size - sent)
                if n == 0:
                    break
                sent += n
        finally:
            self.users.pop()
        return sent

    def pread(self, position: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``position``, never beyond the logical size."""
        n = min(n, self.size - position)
        if n <= 0:
            return b""
        return self.read_at(position, n)

    def windows(self, start: int = 0, end: Optional[int] = None, *, whole: bool = False,
                first: int = _FIRST_READ_BLOCK, largest: int = _READ_BLOCK) -> Iterator[Window]:
        """The one windowed reader of a ``.log``: windows of the file from ``start`` to ``end``
        (default: the logical size), each one ``pread`` walked by the header walker (no CRC check),
        the first of ``first`` bytes and the next ones doubling up to ``largest``.

        A window's walk holds the entries whose fixed header is in it; with ``whole``, only the
        entries wholly in it, and a window grows to hold an entry larger than itself. The next
        window starts where this one's walk needs more bytes; the last window's walk carries the
        finding that ended the walk (None: the end was reached)."""
        if end is None:
            end = self.size
        pos = start
        want = first
        read_at = self.read_at
        while pos < end - PREFIX_SIZE:
            n = min(want, end - pos)
            buf = read_at(pos, n)
            if not buf:
                return                      # the file is shorter than its logical size
            w = walk(buf, pos, end, verify_crc=False, base=pos)
            f = w.finding
            nxt = f.position if f is not None and f.kind is FindingKind.NEED_MORE else None
            size = 0
            if whole and w.count:
                last = w.batch(w.count - 1)
                size = last[F_SIZE]
                if last[F_POSITION] + size > pos + len(buf):     # only the last can run past it
                    w = w.cut(w.count - 1)
                    nxt = last[F_POSITION]
            yield Window(pos, buf, w)
            if nxt is None:
                return
            if nxt == pos:                  # one entry larger than the window: read it whole
                want = max(want, size)
            else:
                want = min(want * 2, max(largest, want))
            pos = nxt

    def batches(self, start: int = 0, end: Optional[int] = None) -> Iterator[RecordBatch]:
        """The batch views (any magic; positions are the file's; CRCs not checked) from byte
        ``start`` to ``end`` (default: the logical size), read by :meth:`windows` of whole
        batches (Kafka's ``FileRecords.batchesFrom``). A partial batch at the end ends them;
        damage raises :class:`CorruptRecordError` naming the file and position."""
        for win in self.windows(start, end, whole=True, first=_FIRST_BATCHES_READ,
                                largest=_MAX_BATCHES_READ):
            yield from batch_views(win.buf, win.walk, win.base)
            f = win.walk.finding
            if f is not None and f.kind not in _ENDS:
                raise CorruptRecordError(f.message, file=self.path, position=f.position)

    def search_for_timestamp(self, timestamp: int, start_position: int,
                             starting_offset: int) -> Optional[TimestampAndOffset]:
        """Kafka's ``FileRecords.searchForTimestamp``: the first record at or after byte
        ``start_position`` with timestamp >= ``timestamp`` and offset >= ``starting_offset``."""
        return first_record_with_timestamp(self.batches(start_position), timestamp,
                                           starting_offset)

    def iter_headers(self, start: int = 0, end: Optional[int] = None, *,
                     edges: bool = False) -> Iterator[BatchHeader]:
        """Walk entries from ``start`` to ``end`` (default: logical size) with the file iteration rules
        of spec §1.2 (:meth:`windows`, headers only): stop when fewer than 18 bytes remain or the
        entry is partial; an entry length below 14 raises :class:`CorruptRecordError` (file +
        position); an entry with an impossible magic or a v2 batch smaller than its header is
        yielded (readers step over it by its length and refuse it when they read it). ``edges``:
        only the first and the last entry of each window read (and every damaged one): the walk's
        first and last entries are still the first and the last yielded, without a header made for
        each entry between (a segment's next offset)."""
        if end is None:
            end = self.size
        pos: Optional[int] = start
        while pos is not None:
            at, pos = pos, None
            for win in self.windows(at, end):
                w = win.walk
                n = w.count
                if edges and n > 2:
                    yield header_of_row(w.batch(0))
                    yield header_of_row(w.batch(n - 1))
                else:
                    for i in range(n):
                        yield header_of_row(w.batch(i))
                f = w.finding
                if f is None or f.kind in (FindingKind.NEED_MORE, FindingKind.SHORT_TAIL,
                                           FindingKind.PARTIAL_TAIL):
                    continue
                if f.kind is FindingKind.BAD_SIZE:
                    raise CorruptRecordError(f"Found record size {f.a} smaller than minimum record "
                                             f"overhead ({RECORD_OVERHEAD_V0})", file=self.path,
                                             position=f.position)
                if f.kind in (FindingKind.BAD_MAGIC, FindingKind.SMALL_BATCH):
                    damaged = self._damaged_header(f.position, end)
                    yield damaged
                    pos = f.position + damaged.size
    def _damaged_header(self, position: int, end: int) -> BatchHeader:
        """A :class:`BatchHeader` for an entry the walker refuses (impossible magic, v2 batch smaller
        than its header): readers still step over it by its length, as they always did."""
        head = self.pread(position, RECORD_BATCH_OVERHEAD)
        offset, length, ple, magic = PREFIX.unpack_from(head)
        return parse_header(head + bytes(RECORD_BATCH_OVERHEAD), 0, position, length + LOG_OVERHEAD,
                            offset, ple, magic)

    def read_entry(self, position: int, size: int) -> bytes:
        """The bytes of one whole entry."""
        return self.read_at(position, size)

    def batch_holding(self, position: int, offset: int) -> Optional[BatchHeader]:
        """The v2 batch at ``position`` when it is whole in the file and holds ``offset`` (its base
        offset <= ``offset`` <= its last offset); None otherwise (any other entry, or none)."""
        found = find_v2_batch(self.read_at(position, RECORD_BATCH_OVERHEAD), position,
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
        window when batches are large); from the first entry that is anything else, the windows of
        :meth:`windows`, no header per entry passed by built; anything but
        whole entries and "read the next window" (damage) is left to :meth:`iter_headers` from
        where it was found."""
        end = self.size
        pos = start_position
        block = _FIRST_READ_BLOCK
        read_at = self.read_at
        while pos < end - PREFIX_SIZE:
            found = find_v2_batch(read_at(pos, min(block, end - pos)), pos, end, target_offset)
            if len(found) == 8:
                return BatchHeader(*found)
            nxt, general = found
            if general or nxt == pos:
                pos = nxt
                break
            block = min(block * 2, _READ_BLOCK)
            pos = nxt
        damaged = None
        for win in self.windows(pos, end):
            w = win.walk
            for i, last in enumerate(w.column(F_LAST_OFFSET)):
                if last >= target_offset:
                    return header_of_row(w.batch(i))
            f = w.finding
            if f is not None and f.kind not in (FindingKind.NEED_MORE, FindingKind.SHORT_TAIL,
                                                FindingKind.PARTIAL_TAIL):
                damaged = f.position
        if damaged is None:
            return None
        pos = damaged
        for h in self.iter_headers(pos):
            if h.last_offset >= target_offset:
                return h
        return None
