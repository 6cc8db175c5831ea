"""Pure-Python twin of the compiled log kernel ``_kernel.pyx`` (same API, same results);
:mod:`kafkalog.log.kernel` picks one of the two, with every other layer's kernels
(:mod:`kafkalog._kernels`).

* :func:`index_slot`: the offset index's search (Kafka's ``OffsetIndex.largestLowerBoundSlotFor``):
  entries are 8 bytes, a big-endian ``int32`` relative offset then a big-endian ``int32`` position,
  offsets increasing;
* :func:`find_v2_batch`: the fetch path's step from an index entry to the batch holding an offset,
  over a window of a segment's bytes, for well-formed v2 batches only (anything else is left to
  the general walk, :mod:`kafkalog.record.header_walk`, from where it was met);
* :func:`producer_rows`: the producer batches a recovery's producer-state rebuild applies;
* :func:`read_ahead`: a load's read-ahead, the files of partition directories brought into the
  page cache (:mod:`kafkalog.log.read_ahead`);
* :func:`make_dirs`: new partition directories and their files, made for a topic's creation
  (:meth:`kafkalog.log.manager.LogManager.open_new_logs`)."""

from __future__ import annotations

import os
import stat
import struct
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from kafkalog.record.constants import HEADER_SIZE_UP_TO_MAGIC, RECORD_BATCH_OVERHEAD

IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "find_v2_batch", "index_slot", "make_dirs", "producer_rows", "read_ahead"]

_REL = struct.Struct(">i").unpack_from
#: baseOffset, length, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
#: baseTimestamp, maxTimestamp: the first 43 bytes of a v2 batch
_V2_HEAD = struct.Struct(">qiibIhiqq").unpack_from
_PREFIX = HEADER_SIZE_UP_TO_MAGIC
_V2_HEADER = RECORD_BATCH_OVERHEAD


def index_slot(buf: Any, entries: int, rel: int) -> int:
    """The slot of the largest relative offset <= ``rel`` among the first ``entries`` entries of
    ``buf``, or -1 (no entry, or the first one is above ``rel``)."""
    if entries <= 0 or rel < _REL(buf, 0)[0]:
        return -1
    lo, hi = 0, entries - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _REL(buf, mid << 3)[0] <= rel:
            lo = mid
        else:
            hi = mid - 1
    return lo


def find_v2_batch(buf: Any, base: int, end: int, target: int) -> tuple[int, ...]:
    """Walk the v2 batches of ``buf`` (a segment's bytes from file position ``base``; ``end`` is the
    segment's size) for the first one whose last offset is >= ``target``.

    Found: its ``(position, size, magic, base_offset, last_offset, max_timestamp,
    partition_leader_epoch, attributes)`` (a ``BatchHeader``'s fields; attributes as one byte).
    Else ``(position, general)``: every batch before ``position`` ends below ``target``; with
    ``general`` 0 the next batch's header lies past ``buf`` (read on from ``position``), with 1 the
    entry there is not a whole well-formed v2 batch (legacy magic, a size too small, an entry past
    ``end``, a tail shorter than a prefix) and the general walk decides."""
    blen = base + len(buf)
    pos = base
    while True:
        left = end - pos
        if left <= _PREFIX:
            return pos, 1
        if pos + _PREFIX > blen:
            return pos, 0
        offset, length, ple, magic = struct.unpack_from(">qiib", buf, pos - base)
        size = length + 12
        if magic != 2 or size < _V2_HEADER or size > left:
            return pos, 1
        if pos + _V2_HEADER > blen:
            return pos, 0
        _o, _l, _p, _m, _crc, attrs, lod, _bts, mts = _V2_HEAD(buf, pos - base)
        last = ((offset + lod + 2**63) % 2**64) - 2**63       # Java long arithmetic
        if last >= target:
            return pos, size, 2, offset, last, mts, ple, attrs & 0xFF
        pos += size


# --- recovery: the producer batches a producer-state rebuild must apply -------------------------

_NF = 16                          # the header walker's facts: int64 rows of 16 fields
_F_MAGIC, _F_ATTRIBUTES, _F_PRODUCER_ID = 4, 5, 9
_TXN_OR_CONTROL = 0x30            # the transactional and control attribute bits


def producer_rows(facts: Any, first: int, end: int, retain: int,
                  open_producers: Iterable[int]) -> list[int]:
    """The rows ``first``..``end - 1`` of a header walk's facts (int64 rows of ``F_*`` fields)
    whose v2 producer batches a producer-state rebuild (replication origin: no sequence checks)
    must apply, in order, to end in the state that applying every one of them gives: every batch
    of a producer with a transactional or control batch among these rows or with a transaction
    open (``open_producers``), and of every other producer only its last ``retain`` batches (a
    producer's state keeps its last ``retain`` batches, epoch and timestamp: the earlier ones
    leave no trace). Batches without a producer id and v0/v1 entries are never listed."""
    cols = memoryview(facts).cast("q")
    n_rows = len(cols) // _NF
    if first < 0 or end > n_rows or first > end:
        raise ValueError(f"producer_rows: rows {first}..{end} of {n_rows}")
    whole = set(open_producers)
    for i in range(first, end):
        r = i * _NF
        if cols[r + _F_PRODUCER_ID] >= 0 and cols[r + _F_MAGIC] == 2 \
                and cols[r + _F_ATTRIBUTES] & _TXN_OR_CONTROL:
            whole.add(cols[r + _F_PRODUCER_ID])
    kept: dict[int, int] = {}
    out: list[int] = []
    for i in range(end - 1, first - 1, -1):
        r = i * _NF
        pid = cols[r + _F_PRODUCER_ID]
        if pid < 0 or cols[r + _F_MAGIC] != 2:
            continue
        if pid in whole:
            out.append(i)
        else:
            seen = kept.get(pid, 0)
            if seen < retain:
                kept[pid] = seen + 1
                out.append(i)
    out.reverse()
    return out


#: a file of at most this many bytes is read whole by :func:`read_ahead`; of a larger one its first
#: :data:`_RA_HEAD` bytes (not kept) and last :data:`_RA_TAIL`
_RA_WHOLE = 65536
_RA_HEAD = 4096
_RA_TAIL = 65536
_RA_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY

#: what :func:`read_ahead` found of one directory: its names, and of each regular file read its
#: size and bytes (the whole file up to 64 KiB, else its last 64 KiB)
DirRead = Tuple[List[str], Dict[str, Tuple[int, bytes]]]


def read_ahead(dirs: Sequence[str]) -> List[Optional[DirRead]]:
    """Read what a clean load of each partition directory of ``dirs`` reads: the directory's
    names, and each regular file (neither followed through a link nor, being a FIFO or device,
    opened to wait) read whole up to 64 KiB, else its first 4 KiB (a time index's head, a log's
    first batch: read into the page cache, not kept) and last 64 KiB (an index's last entries, a
    log's last batches), a larger producer snapshot advised whole. For each directory, None when
    it could not be listed whole, else its names (every entry but ``.`` and ``..``, in the
    directory's order) and the files read, by name (a file that could not be read whole or changed
    size meanwhile is named only). Reads only: nothing is written, no ``OSError`` raised (the load
    that follows meets and reports what could not be read)."""
    out: List[Optional[DirRead]] = []
    for d in dirs:
        names: List[str] = []
        files: Dict[str, Tuple[int, bytes]] = {}
        try:
            with os.scandir(d) as listing:
                for entry in listing:
                    names.append(entry.name)
                    got = _read_one(entry)
                    if got is not None:
                        files[entry.name] = got
        except OSError:
            out.append(None)
            continue
        out.append((names, files))
    return out


def _read_one(entry: os.DirEntry[str]) -> Optional[Tuple[int, bytes]]:
    try:
        if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
            return None
        fd = os.open(entry.path, _RA_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        start = 0 if size <= _RA_WHOLE else size - _RA_TAIL
        if size > _RA_WHOLE:
            if entry.name.endswith(".snapshot"):
                os.posix_fadvise(fd, 0, size, os.POSIX_FADV_WILLNEED)
            os.pread(fd, _RA_HEAD, 0)
        data = os.pread(fd, size - start, start)
        return (size, data) if len(data) == size - start else None
    except OSError:
        return None
    finally:
        os.close(fd)


def make_dirs(dirs: Sequence[str], files: Sequence[Tuple[str, bytes]]
              ) -> Tuple[int, Optional[Tuple[int, str]]]:
    """Make each directory of ``dirs`` in turn (mode 0o777 less the umask) and in it each file of
    ``files``, ``(name, bytes)`` (created exclusively, mode 0o644, its bytes written; nothing
    fsynced), stopping at the first failure. Returns how many directories were made whole, and for
    the one that failed ``(errno, name)`` (name ``""``: the directory itself), else None; a failed
    directory may hold the files made before its failure. No ``OSError`` is raised: the caller
    reports the failure (the compiled twin makes a chunk of directories without the interpreter
    lock: a topic's thousands of partitions, made on a thread beside a busy event loop)."""
    for i, d in enumerate(dirs):
        name = ""
        try:
            os.mkdir(d)
            for name, data in files:
                fd = os.open(f"{d}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
        except OSError as e:
            return i, (e.errno or 0, name)
    return len(dirs), None
