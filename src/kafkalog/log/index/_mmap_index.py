"""Shared mechanics of the memory-mapped ``.index`` and ``.timeindex`` files (Kafka's
``AbstractIndex``, spec §2.1, §2.5, §2.6, §2.8).

Fixed-size big-endian entries from byte 0, no header and no checksum. A new file is preallocated to
``segment.index.bytes`` rounded down to the entry size as Kafka does (the length set, a sparse file:
no blocks are used until entries are written); an existing file holds
``length // entry_size`` entries (zero-filled preallocated tails included -- see
:meth:`AbstractIndex.zero_filled_tail_entries`). The file is created lazily, on first use (Kafka's
``LazyIndex``), and mapped only once it holds entries: at the first entry written (:meth:`reserve`),
or at a load that finds more entries than :data:`READ_LIMIT` bytes (fewer are read, not mapped), so
a partition without index entries (less than ``index.interval.bytes`` of data) holds no mapping of
its own and the node's mappings (the kernel's ``vm.max_map_count``, 65,530 by default) are bounded
by the partitions that have index entries, not by all of them.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import platform
import struct
import sys
import threading
from typing import Any, Callable, Generic, Iterator, Optional, Self, TypeVar

from kafkalog.errors import (
    CorruptIndexError,
    IndexEntryOutOfRangeError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidConfigError,
    KafkalogIOError,
    ReadOnlyIndexError,
)
from kafkalog.log.fsutil import defer_fsync, io_error
from kafkalog.log.index._index_file import IndexFile
from kafkalog.record.constants import INT32_MAX

_ZERO_CHUNK = 1 << 16
#: the locks of the indexes' loads, resizes and closes, an index taking one by its identity: two
#: threads (the broker's loop appending, the retention pass on its thread) may first use the same
#: index at once, and those steps keep the file's descriptor in the index while they run. Shared
#: by stripes rather than one per index (200,000 at 100,000 partitions)
_FILE_LOCKS = tuple(threading.RLock() for _ in range(64))
#: Linux's ``MAP_FIXED`` on the machines :func:`_map_shared` uses it on (alpha and parisc differ)
_MAP_FIXED = 0x10
_MAP_FIXED_MACHINES = frozenset({"x86_64", "aarch64"})


def _pread_all(fd: int, length: int) -> bytes:
    """Up to ``length`` bytes of ``fd`` from byte 0 (fewer when the file is shorter now)."""
    parts = []
    got = 0
    while got < length:
        chunk = os.pread(fd, length - got, got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def first_zero_slot(read_slot: Callable[[int], bytes], slots: int, entry_size: int) -> int:
    """The first of ``slots`` entry slots that is all zero (or no longer in the file), found by
    binary search through ``read_slot(n)`` (the bytes of slot ``n``): a preallocated index holds
    its entries, then zeros only (Kafka never writes an all-zero entry, KAFKA-10207). Lets a reader
    of a live index read its entries without reading the preallocated tail."""
    zero = bytes(entry_size)
    lo, hi = 0, slots
    while lo < hi:
        mid = (lo + hi) >> 1
        raw = read_slot(mid)
        if len(raw) < entry_size or raw == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo


@functools.cache
def _libc_mmap() -> Optional[Any]:
    """libc's ``mmap`` through ctypes where :func:`_map_shared` can use it (64-bit Linux on the
    machines whose ``MAP_FIXED`` is known), else None."""
    if sys.platform != "linux" or platform.machine() not in _MAP_FIXED_MACHINES:
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).mmap
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_long]
    return fn


def _map_shared(fd: int, length: int) -> mmap.mmap:
    """A shared read-write mapping of the first ``length`` bytes of ``fd`` that keeps no
    descriptor of its own, as a Java mapping (Kafka's ``AbstractIndex`` closes the file once it
    is mapped): Python's ``mmap`` keeps a duplicate of the descriptor until it is closed (until
    3.13's ``trackfd=False``), which made a segment with both indexes mapped cost three
    descriptors instead of one. Before 3.13, on Linux: an anonymous mapping (which holds no
    descriptor) whose pages are replaced in place by the file's with ``MAP_FIXED``; the object
    behaves as any mapping (slicing, ``flush`` is ``msync``, ``close`` or the last reference
    unmaps). Elsewhere Python's own mapping."""
    if sys.version_info >= (3, 13):
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE, trackfd=False)
    libc_mmap = _libc_mmap()
    if libc_mmap is None:
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE)
    m = mmap.mmap(-1, length, access=mmap.ACCESS_WRITE)       # MAP_SHARED | MAP_ANONYMOUS
    view = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(view)
    del view                                                    # the buffer export ends here
    got = libc_mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED,
                    fd, 0)
    if got != addr:
        err = ctypes.get_errno()
        m.close()
        raise OSError(err, os.strerror(err))
    return m


#: blocks of a sparse index are reserved this many bytes at a time, as entries reach them (one page)
RESERVE_CHUNK = 4096
#: a writable index whose entries take at most this many bytes when it is loaded reads them instead
#: of mapping the file (one page: a partition's time index after a clean shutdown holds one entry);
#: it is mapped at its first write
READ_LIMIT = 4096


def _reserve(fd: int, start: int, end: int) -> None:
    """Reserve the blocks of bytes ``start..end`` of ``fd`` (``posix_fallocate``, the length
    unchanged as ``end`` is inside the file); file systems without ``fallocate`` are left sparse."""
    try:
        os.posix_fallocate(fd, start, end - start)
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _no_space(err: OSError, path: str, action: str) -> KafkalogIOError:
    """A full file system met while an index grows, reported as what it is."""
    if err.errno != errno.ENOSPC:
        return io_error(err, path, action)
    e = KafkalogIOError(f"no space left for the index's next entries ({action}): {err.strerror}",
                        file=path)
    e.errno = err.errno  # type: ignore[attr-defined]
    return e


#: what one entry of an index reads as
E = TypeVar("E")


class AbstractIndex(IndexFile, Generic[E]):
    """Base of :class:`OffsetIndex` and :class:`TimeIndex` (path, renaming and deletion from
    :class:`~kafkalog.log.index._index_file.IndexFile`).

    Args:
        path: the index file.
        base_offset: the segment's base offset.
        max_index_size: ``segment.index.bytes``; the preallocated length of a new file
            (rounded down to a multiple of the entry size). ``-1`` = keep the file's length.
        writable: ``False`` opens an existing file read-only (tools); appends then fail.
    """

    entry_size: int = 8
    #: how Kafka's sanity-check messages name the file
    kind: str = "Index"
    _rel_struct = struct.Struct(">i")

    def __init__(self, path: os.PathLike[str] | str, base_offset: int, max_index_size: int = -1,
                 writable: bool = True) -> None:
        self._path = os.fspath(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._fd = -1
        #: the mapped file (a writable index), the bytes read at open (a read-only one); an empty
        #: buffer while unmapped (there are no entries to read then)
        self._mm: mmap.mmap | bytearray | bytes = bytearray()
        self._loaded = False
        self._length = 0
        self._entries = 0
        self._max_entries = 0
        self._reserved = 0
        #: entries were written through a mapping since dropped (:meth:`_map`) and not forced
        self._unforced = False
        #: the length :meth:`resize_before_first_entry` asked for, set before the first write
        self._pending_size: Optional[int] = None
        #: the length, entry count and last entry are known without a load (:meth:`seed`)
        self._seeded = False
        #: held by the steps that use :attr:`_fd`: the load, a resize, the close
        self._file_lock = _FILE_LOCKS[(id(self) >> 4) % len(_FILE_LOCKS)]

    @classmethod
    def open_read_only(cls, path: os.PathLike[str] | str, base_offset: Optional[int] = None) -> Self:
        """Open an existing index file read-only (tools); base offset from the file name by default."""
        if base_offset is None:
            from kafkalog.log.naming import offset_from_file_name
            base_offset = offset_from_file_name(os.fspath(path))
        idx = cls(path, base_offset, -1, writable=False)
        idx._load()
        return idx

    # --- lazy loading ---------------------------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        """Whether the file has been opened and mapped (it is created lazily on first use)."""
        return self._loaded

    def _load(self) -> None:
        """Open and read (or map) the file; nothing when another thread loaded it meanwhile."""
        with self._file_lock:
            if not self._loaded:
                self._load_file()

    def _load_file(self) -> None:
        path = self._path
        try:
            if self.writable and self._seeded:      # the loader read it: it exists
                self._fd = os.open(path, os.O_RDWR)
                newly_created = False
            elif self.writable:
                try:
                    self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                    newly_created = True
                except FileExistsError:
                    self._fd = os.open(path, os.O_RDWR)
                    newly_created = False
                if newly_created:
                    if self.max_index_size < self.entry_size:
                        os.close(self._fd)
                        self._fd = -1
                        os.unlink(path)
                        raise InvalidConfigError(
                            f"Invalid max index size: {self.max_index_size} (smaller than the entry "
                            f"size {self.entry_size})", file=path)
                    # Kafka's setLength: a sparse file, blocks reserved as entries reach them
                    os.ftruncate(self._fd, self.max_index_size // self.entry_size * self.entry_size)
            else:
                self._fd = os.open(path, os.O_RDONLY)
                newly_created = False
            self._length = os.fstat(self._fd).st_size
        except (OSError, KafkalogIOError) as err:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if isinstance(err, KafkalogIOError):
                raise
            raise io_error(err, path, "open index") from err
        entries = 0
        try:
            if self.writable:
                # (before the mapping: whether there is one depends on the entries)
                self._entries = entries = 0 if newly_created else self._length // self.entry_size
                self._mm = bytearray()
            self._map()
            # (after the mapping: a read-only index read fewer bytes when the file shrank meanwhile)
            entries = 0 if newly_created else self._length // self.entry_size
            if entries and self.writable and isinstance(self._mm, mmap.mmap):
                # the last slot's page into the page cache (read below): a fault through the
                # mapping into a page the cache lacks took milliseconds (a file a crash left at its
                # preallocated length ends in a hole)
                os.pread(self._fd, self.entry_size, (entries - 1) * self.entry_size)
        except OSError as err:
            raise io_error(err, path, "read index") from err
        finally:
            self._close_fd()
        self._entries = entries
        #: bytes from 0 whose blocks are known reserved (:meth:`reserve`): none after a load, the
        #: first entry written reserves from byte 0 (an existing file's holes included)
        self._reserved = 0
        self._refresh_last()
        self._loaded = True                 # (last: a reader not holding the lock sees it whole)
        self._seeded = False

    def seed(self, length: int, last: Optional[tuple[int, int]]) -> None:
        """What the log's loader read of this existing file, so that what an append asks before
        its first index entry (the entry count, the full checks, the last entry) needs no load:
        its ``length`` and its last entry as stored (``None`` when it has none): ``(relative
        offset, position)`` / ``(timestamp, relative offset)``. A lookup, an entry or a resize
        loads the file as before (100,000 partitions: the first Produce to each after a restart
        made 200,000 index loads, ~5-7 s in process, for appends that wrote no index entry)."""
        if self._loaded or not self.writable:
            return
        self._length = length
        self._entries = self._max_entries = length // self.entry_size
        self._seeded = True
        self._seed_last(last if self._entries else None)

    def _seed_last(self, last: Optional[tuple[int, int]]) -> None:
        """The cached last entry from :meth:`seed` (subclasses)."""

    @property
    def _known(self) -> bool:
        """Whether the sizes (and the last entry) are known: loaded, or :meth:`seed`-ed."""
        return self._loaded or self._seeded

    def _close_fd(self) -> None:
        """Close the index's own descriptor once the file is mapped or read: an open index holds
        no descriptor (nor does its mapping, :func:`_map_shared`), so a segment costs its
        ``.log``'s descriptor only, as in Kafka; :meth:`resize` opens the file again."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _map(self) -> None:
        mapped = self._length - self._length % self.entry_size
        if mapped <= 0:
            self._mm = bytearray()
        elif not self.writable:
            # A read-only index is read, not mapped: a writer may trim the file (roll, close)
            # while it is open here, and a mapping then kills the reader with SIGBUS. Bytes the
            # file no longer has are simply missing (Kafka's readers ignore entries past their
            # snapshot).
            try:
                data = _pread_all(self._fd, mapped)
            except OSError as err:
                raise io_error(err, self._path, "read index") from err
            mapped = len(data) - len(data) % self.entry_size
            self._length = len(data)
            self._mm = data[:mapped] if mapped < len(data) else data
        elif self._entries * self.entry_size > READ_LIMIT:
            self._map_fd(self._fd, mapped)
        elif isinstance(self._mm, mmap.mmap):
            self._drop_mapping(mapped)
        else:
            # No mapping while there is nothing to write through it (module docstring): the
            # entries, if any, are read (they stay as they are until the first write maps the file)
            used = min(self._entries * self.entry_size, mapped)
            if len(self._mm) > used:
                self._mm = self._mm[:used]
            elif len(self._mm) < used:
                self._mm = bytearray(_pread_all(self._fd, used))
        self._max_entries = mapped // self.entry_size

    def _drop_mapping(self, mapped: int) -> None:
        """Few entries left mapped (a trim at roll, the end of a recovery, which appends the time
        index's last entry): their bytes kept, the mapping dropped (not closed: see resize), the
        next write maps again; written pages not forced yet are forced by the next flush."""
        used = min(self._entries * self.entry_size, mapped)
        self._mm = bytearray(self._mm[:used])
        if self._reserved:
            self._unforced = True
        self._reserved = 0

    def release_mapping(self) -> None:
        """Drop the mapping when the entries are few enough to be read (:data:`READ_LIMIT`), the
        file's length unchanged (a recovered active segment's time index: its last entry was
        written through a mapping, and the load keeps the file at ``segment.index.bytes``)."""
        if isinstance(self._mm, mmap.mmap) and self._entries * self.entry_size <= READ_LIMIT:
            self._drop_mapping(len(self._mm))

    def _map_fd(self, fd: int, mapped: int) -> None:
        """Map the first ``mapped`` bytes of the file open as ``fd`` (a writable index)."""
        try:
            self._mm = _map_shared(fd, mapped)
        except (OSError, ValueError) as err:
            raise KafkalogIOError(f"mmap failed: {err}", file=self._path) from err

    @classmethod
    def from_bytes(cls, path: os.PathLike[str] | str, base_offset: int, data: bytes,
                   max_position: Optional[int] = None) -> Self:
        """A read-only index over ``data`` (the bytes of ``path``, read through a read-only view's
        file access): a preallocated all-zero tail is not counted (KAFKA-10207), and with
        ``max_position`` neither are the entries pointing at or past that ``.log`` position (a
        writer's entries beyond a reader's snapshot)."""
        idx = cls(path, base_offset, -1, writable=False)
        usable = len(data) - len(data) % idx.entry_size
        idx._mm = data if usable == len(data) else data[:usable]
        idx._length = len(data)
        idx._max_entries = idx._entries = usable // idx.entry_size
        idx._loaded = True
        idx._entries -= idx.zero_filled_tail_entries()
        if max_position is not None:
            idx._entries = idx._entries_below_position(max_position)
        idx._refresh_last()
        return idx

    def _entries_below_position(self, max_position: int) -> int:
        """The number of leading entries (subclasses that hold positions: all of them)."""
        return self._entries

    def _unmap(self) -> None:
        if isinstance(self._mm, mmap.mmap):
            try:
                self._mm.close()
            except BufferError:  # pragma: no cover - exported views still alive
                pass
            self._mm = bytearray()

    def _refresh_last(self) -> None:
        """Recompute the cached last entry (subclasses)."""

    # --- sizes ----------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        """Number of entries (``length // entry_size`` for an existing file)."""
        if not self._known:
            self._load()
        return self._entries

    @property
    def max_entries(self) -> int:
        """Number of slots in the file (once grown as :meth:`resize_before_first_entry` asked)."""
        if not self._known:
            self._load()
        return self._capacity()

    def _capacity(self) -> int:
        """The slots of the file once grown as :meth:`resize_before_first_entry` asked: what the
        full checks count (the growth itself waits for the first entry written, :meth:`reserve`)."""
        pending = self._pending_size
        if pending is None:
            return self._max_entries
        return max(0, pending) // self.entry_size

    @property
    def length(self) -> int:
        """Current file length in bytes."""
        if not self._known:
            self._load()
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by entries: ``entries * entry_size``."""
        return self.entries * self.entry_size

    def is_full(self) -> bool:
        """``entries >= max_entries`` (the time index overrides this)."""
        if not self._known:
            self._load()
        return self._entries >= self._capacity()

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; :class:`IndexOffsetOverflowError` outside ``0..Int.MAX``."""
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise self._overflow(offset)
        return rel

    def _overflow(self, offset: int, slot: Optional[int] = None) -> IndexOffsetOverflowError:
        """Kafka's error for an ``offset`` the index cannot store relative to its base offset (at
        ``slot``, when appending)."""
        return IndexOffsetOverflowError(f"Integer overflow for offset: {offset} ({self._path})", file=self._path,
                                        position=None if slot is None else slot * self.entry_size)

    def _full(self, n: int) -> IndexFullError:
        """Kafka's error for an append to the index when it holds all the ``n`` entries it can."""
        return IndexFullError(f"Attempt to append to a full {self.kind.lower()} (size = {n}).", file=self._path,
                              position=n * self.entry_size)

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to ``base_offset``."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyIndexError("Index is opened read-only", file=self._path)

    def entry(self, n: int) -> E:
        """The ``n``-th entry; :class:`IndexEntryOutOfRangeError` if ``n >= entries``."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.entries

    def __iter__(self) -> Iterator[E]:
        for i in range(self.entries):
            yield self.entry(i)

    def sanity_check(self) -> None:
        """Kafka's ``sanityCheck``: :class:`CorruptIndexError` at the last entry when the index
        cannot hold it (:meth:`_last_entry_corruption`), or at the end when the file does not hold
        whole entries."""
        if not self._loaded:
            self._load()
        if self._entries:
            why = self._last_entry_corruption()
            if why is not None:
                raise CorruptIndexError(why, file=self._path, position=(self._entries - 1) * self.entry_size)
        if self._length % self.entry_size != 0:
            raise CorruptIndexError(
                f"{self.kind} file {self._path} is corrupt, found {self._length} bytes which is neither "
                f"positive nor a multiple of {self.entry_size}.", file=self._path, position=self._length)

    def _last_entry_corruption(self) -> Optional[str]:
        """Kafka's message for a last entry this index cannot hold; None when it is sound."""
        raise NotImplementedError

    def _check_entry(self, n: int) -> None:
        if not self._loaded:
            self._load()
        if n < 0 or n >= self._entries:
            raise IndexEntryOutOfRangeError(
                f"Attempt to fetch the {n}th entry from index {self._path}, which has size "
                f"{self._entries}.", file=self._path, position=max(n, 0) * self.entry_size)

    def reserve(self, entries: int) -> None:
        """Make sure the blocks under the next ``entries`` entry slots exist before they are
        written through the mapping (a store into a hole of a full file system kills the process
        with SIGBUS): reserved with ``posix_fallocate`` a page at a time as the index grows, so a
        full disk is a :class:`~kafkalog.errors.KafkalogIOError` (ENOSPC) here, before anything is
        written, and an index without entries holds no blocks (Kafka's sparse files)."""
        if not self._loaded or self._pending_size is not None:
            self._load_to_write()
        end = min((self._entries + entries) * self.entry_size, self._max_entries * self.entry_size)
        if end <= self._reserved and isinstance(self._mm, mmap.mmap):
            return
        self._check_writable()
        upto = min(-(-end // RESERVE_CHUNK) * RESERVE_CHUNK, self._length)
        try:
            fd = os.open(self._path, os.O_RDWR)
        except OSError as err:
            raise io_error(err, self._path, "reserve index blocks") from err
        try:
            _reserve(fd, self._reserved, upto)
            # read the pages into the page cache: the first store into a page the cache lacks
            # faults it in through the mapping, which took 6-35 ms a page here (a pread: 0.05)
            os.pread(fd, upto - self._reserved, self._reserved)
        except OSError as err:
            os.close(fd)
            raise _no_space(err, self._path, "reserve index blocks") from err
        try:
            if not isinstance(self._mm, mmap.mmap) and self._max_entries:
                # the first write: the file is mapped now (the entries read at the load, if any,
                # are the file's bytes, nothing was written since)
                self._map_fd(fd, self._max_entries * self.entry_size)
        finally:
            os.close(fd)
        self._reserved = upto

    def write_unmapped(self, n: int, entry: bytes) -> bool:
        """Write entry ``n``, the next one, with ``pwrite`` when the index is not mapped, and keep
        it unmapped: a segment's last time-index entry (the end of its recovery, its roll, its
        close), for which a mapping made and dropped again cost seven system calls (an open, a
        ``fallocate``, the page read, two ``mmap``, a close, a ``munmap``), three here. A full
        disk is an error here as with a mapping (``pwrite`` fails, nothing stored through a hole);
        a later write through a mapping reserves from byte 0 again, and :meth:`flush` forces the
        file. False (nothing written) when the index is mapped, or does not hold exactly ``n``
        entries read; the caller then writes through a mapping."""
        size = self.entry_size
        mm = self._mm
        if isinstance(mm, (mmap.mmap, bytes)) or len(mm) != n * size or self._entries != n:
            return False
        self._check_writable()
        end = (n + 1) * size
        try:
            fd = os.open(self._path, os.O_RDWR)
        except OSError as err:
            raise io_error(err, self._path, "write index entry") from err
        failure: Optional[OSError] = None
        try:
            if os.pwrite(fd, entry, n * size) != size:        # (part of it: the file system is full)
                failure = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as err:
            failure = err
        try:
            if failure is not None and end > self._length:
                os.ftruncate(fd, self._length)    # the length it had (a part past it may be stored)
        except OSError:
            pass
        finally:
            os.close(fd)
        if failure is not None:                   # the entry not counted
            raise _no_space(failure, self._path, "write index entry") from failure
        self._mm = mm + entry           # (a new buffer: a lookup may be reading the old one)
        if end > self._length:          # (a file trimmed to its entries, grown later if it must)
            self._length = end
            self._max_entries = n + 1
        self._unforced = True
        return True

    # --- resizing and truncation ---------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to the entry size and remap; keeps the
        entries that still fit. Returns ``False`` when the length is unchanged."""
        with self._file_lock:
            return self._resize(new_size)

    def _resize(self, new_size: int) -> bool:
        self._pending_size = None
        if not self._loaded:
            self._load()
        rounded = max(0, new_size) // self.entry_size * self.entry_size
        if self._length == rounded:
            return False
        self._check_writable()
        # The old mapping is replaced, not closed: a concurrent reader (lookups take no lock) may
        # still be using it; it is unmapped when its last reference goes. Readers only touch
        # slots below the entry count, which stay inside the file.
        try:
            self._fd = os.open(self._path, os.O_RDWR)
            os.ftruncate(self._fd, rounded)           # sparse when it grows, as Kafka's setLength
            self._length = rounded
            self._reserved = min(self._reserved, rounded)
            self._map()
        except OSError as err:
            raise io_error(err, self._path, "resize index") from err
        finally:
            self._close_fd()
        if self._entries > self._max_entries:
            self._entries = self._max_entries
            self._refresh_last()
        return True

    def resize_before_first_entry(self, new_size: int) -> None:
        """:meth:`resize` of an index not loaded yet before its first entry is written
        (:meth:`reserve`; the full checks count the slots it will have). The active segment's
        indexes grow to ``segment.index.bytes`` at a log's load (Kafka's ``resizeIndexes``); a
        partition nothing appends to after a restart then never grows them, nor trims them at its
        close, and one only read or appended to without a new entry loads them as they are
        (100,000 partitions: 400,000 opens and ftruncates a restart and a shutdown made for
        nothing, and as many a first Fetch, or a first Produce, of every partition). An index
        loaded and not mapped (its entries read, or written without a mapping: a recovery's of
        a few batches) waits the same way; a mapped one (written through it) is resized now."""
        if self._loaded and isinstance(self._mm, mmap.mmap):
            self.resize(new_size)
        else:
            self._pending_size = new_size

    def create_empty(self, new_size: int) -> bool:
        """A new segment's file made empty, its growth to ``new_size`` waiting for the first entry
        written (:meth:`resize_before_first_entry`), nothing mapped or read: the file a clean
        shutdown leaves of an index without entries. A new partition's indexes (``Log.create``)
        were each made at ``segment.index.bytes`` (an ftruncate, a stat and a mapping) and trimmed
        again by its close when nothing was written (an open and an ftruncate); 100,000
        partitions made and closed: 800,000 system calls fewer. False, nothing done, when the
        file is there or the index already opened or read (the caller resizes it instead)."""
        if self._known or not self.writable:
            return False
        if self.max_index_size < self.entry_size:
            raise InvalidConfigError(f"Invalid max index size: {self.max_index_size} (smaller than "
                                     f"the entry size {self.entry_size})", file=self._path)
        with self._file_lock:
            try:
                os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:
                return False
            except OSError as err:
                raise io_error(err, self._path, "create index") from err
        self.made_empty(new_size)
        return True

    def made_empty(self, new_size: int) -> None:
        """The file was made empty by the caller (:meth:`Log.create` of files made at once, as
        :meth:`create_empty` makes it): its growth to ``new_size`` waits for the first entry."""
        self.seed(0, None)
        self._pending_size = new_size

    def _load_to_write(self) -> None:
        """Loaded, and resized as :meth:`resize_before_first_entry` asked."""
        if not self._loaded:
            self._load()
        if self._pending_size is not None:
            self.resize(self._pending_size)       # (clears it)

    @property
    def may_hold_writes(self) -> bool:
        """Whether entries may have been written since the index was opened: one was written
        without a mapping and not forced yet, or it is loaded and not only to be read (a growth
        :meth:`resize_before_first_entry` asked for is still pending)."""
        return self._unforced or (self._loaded and self._pending_size is None)

    def trim_to_valid_size(self) -> bool:
        """``resize(entries * entry_size)`` (on roll, close, end of recovery)."""
        return self.resize(self.entries * self.entry_size)

    def truncate(self) -> None:
        """Remove all entries (the file keeps its length)."""
        self._truncate_to_entries(0)

    def reset(self, file_length: Optional[int] = None) -> None:
        """Truncate to 0 entries and unmap, then ``resize(max_index_size)`` (a segment's recovery,
        before its log is open to readers: a lookup takes no lock, and one that read the entry
        count before a truncation reads the mapping after it; a truncation while the log is open
        keeps the mapping). An index not loaded yet is not read: its entries would be cut; its
        file is not set to the length ``file_length`` says it has (the file's length as the
        caller found it; None: unknown)."""
        if not self._loaded and self.writable and self.max_index_size >= self.entry_size:
            self._load_empty(file_length)
            return
        self.truncate()
        if self.writable and self._loaded:
            self._mm = bytearray()          # (dropped, not closed: see resize)
            self._reserved = 0
        if self.max_index_size >= 0:
            self.resize(self.max_index_size)

    def _load_empty(self, file_length: Optional[int] = None) -> None:
        """Load with no entry, the file at ``max_index_size`` (:meth:`reset` of an index not
        loaded: after a crash its file is at its preallocated length, and a load mapped all of it
        to cut it at once: a mapping and its page faults per index of every partition recovered)."""
        with self._file_lock:
            self._load_empty_file(file_length)

    def _load_empty_file(self, file_length: Optional[int] = None) -> None:
        rounded = self.max_index_size // self.entry_size * self.entry_size
        length = file_length
        if length is None or length % self.entry_size or length > rounded:
            length = rounded
            try:
                try:
                    # the file is there (a recovery's): its length set in one system call, where
                    # an open, a stat, an ftruncate and a close took four (sparse when it grows,
                    # as Kafka's setLength)
                    os.truncate(self._path, rounded)
                except FileNotFoundError:
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
                    os.ftruncate(self._fd, rounded)
            except OSError as err:
                raise io_error(err, self._path, "reset index") from err
            finally:
                self._close_fd()
        # else the file's length is known and whole entries: kept, no system call, its growth to
        # ``rounded`` waiting for the first entry written through a mapping
        # (:meth:`resize_before_first_entry`). Its old bytes are not entries (none counted); a
        # close trims the file to the entries (:meth:`close`), and a crash before that is
        # recovered again. After a crash, a partition's active segment's offset index was mostly
        # empty and its time index one entry: a truncate each grew them for nothing
        self._length = length
        self._entries = 0
        self._mm = bytearray()
        self._max_entries = length // self.entry_size
        self._pending_size = rounded if length != rounded else None
        self._reserved = 0
        self._refresh_last()
        self._loaded = True

    def _truncate_to_entries(self, n: int) -> None:
        if not self._loaded:
            self._load()
        self._entries = max(0, min(n, self._entries))
        self._refresh_last()

    # --- lifecycle ------------------------------------------------------------------------------

    def flush(self) -> None:
        """``mmap.flush()`` (Kafka's ``MappedByteBuffer.force``) of the pages entries were written
        to since the file was mapped; no-op if never loaded or never written. An entry written
        without a mapping (``write_unmapped``) is forced with an ``fdatasync`` of the file, or, in
        a :func:`~kafkalog.log.fsutil.deferred_syncs` block (a shutdown's close of every log),
        with the block's fsyncs at its end: a shutdown after a crash's recovery, whose every
        partition's last time-index entry was so written, waited for them one after the other."""
        if isinstance(self._mm, mmap.mmap) and self.writable and self._reserved:
            try:
                # only the reserved pages can have been written (every store reserves first;
                # from byte 0 again after a dropped mapping: its pages are covered)
                self._mm.flush(0, min(self._reserved, len(self._mm)))
            except OSError as err:
                raise io_error(err, self._path, "flush index") from err
            self._unforced = False
        elif self._unforced:
            if defer_fsync(self._path):
                self._unforced = False              # (synced by the block, or it raises)
                return
            try:
                fd = os.open(self._path, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            except FileNotFoundError:
                pass                                # (deleted: nothing to force)
            except OSError as err:
                raise io_error(err, self._path, "flush index") from err
            self._unforced = False

    def close(self) -> None:
        """Trim to the valid size (writable indexes whose file is still there) and unmap."""
        if self._loaded and self.writable and os.path.exists(self._path):
            self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        """Unmap without trimming (before deletion)."""
        with self._file_lock:
            self._unmap()
            self._close_fd()
            self._loaded = self._seeded = False

    # --- KAFKA-10207 ----------------------------------------------------------------------------

    def zero_filled_tail_entries(self) -> int:
        """Number of trailing entry slots that are entirely zero bytes.

        A preallocated file left untrimmed by an unclean shutdown counts its zero tail as entries
        (``entries = length // entry_size``); those slots decode as ``(base_offset, 0)`` /
        ``(0, base_offset)`` and are garbage. Kafka never writes an all-zero entry (the first
        append to a segment is never indexed and time-index timestamps must exceed -1), so every
        all-zero trailing slot is preallocation. Recovery and ``verify`` use this.
        """
        if not self._loaded:
            self._load()
        mm = self._mm
        if self._entries == 0:
            return 0
        end = self._entries * self.entry_size
        pos = end
        while pos > 0:
            start = max(0, pos - _ZERO_CHUNK)
            chunk = mm[start:pos]
            stripped = chunk.rstrip(b"\0")
            if stripped:
                last_nonzero = start + len(stripped)  # exclusive
                first_zero_slot = -(-last_nonzero // self.entry_size)
                return self._entries - first_zero_slot
            pos = start
        return self._entries

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"entries={self._entries}" if self._loaded else "seeded" if self._seeded else "not loaded"
        return f"{type(self).__name__}({self._path!r}, base_offset={self.base_offset}, {state})"
