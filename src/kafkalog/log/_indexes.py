"""The segment's view of the three index types and of the producer-state / leader-epoch helpers.

``segment.py`` talks to indexes only through the functions here, so the index modules
(``offset_index``, ``time_index``, ``txn_index``) are used when present; a minimal mmap-based
fallback with Kafka's semantics (spec §2.1-2.4) keeps the segment usable on its own.
"""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right
from typing import Tuple

from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError

try:  # pragma: no cover - depends on which modules exist
    from kafkalog.log.offset_index import OffsetIndex as _OffsetIndex  # type: ignore
except ImportError:  # pragma: no cover
    _OffsetIndex = None
try:  # pragma: no cover
    from kafkalog.log.time_index import TimeIndex as _TimeIndex  # type: ignore
except ImportError:  # pragma: no cover
    _TimeIndex = None
try:  # pragma: no cover
    from kafkalog.log.txn_index import TransactionIndex as _TxnIndex  # type: ignore
except ImportError:  # pragma: no cover
    _TxnIndex = None


class _MmapIndex:
    """Fallback fixed-entry mmap index (Kafka's AbstractIndex)."""

    entry_size = 8
    fmt = struct.Struct(">ii")

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        new = not os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if new:
            os.ftruncate(self.fd, max_index_size // self.entry_size * self.entry_size)
        self.length = os.fstat(self.fd).st_size
        self.entries = 0 if new else self.length // self.entry_size
        self._map()
        self._keys = None

    def _map(self) -> None:
        self.mm = mmap.mmap(self.fd, self.length) if self.length > 0 else None

    @property
    def max_entries(self) -> int:
        return self.length // self.entry_size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _entry(self, n: int):
        return self.fmt.unpack_from(self.mm, n * self.entry_size)

    def resize(self, new_size: int) -> bool:
        rounded = new_size // self.entry_size * self.entry_size
        if rounded == self.length:
            return False
        if self.mm is not None:
            self.mm.close()
        os.ftruncate(self.fd, rounded)
        self.length = rounded
        self.entries = min(self.entries, rounded // self.entry_size)
        self._map()
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.entries * self.entry_size)

    def reset(self) -> None:
        self._truncate_entries(0)
        self.resize(self.max_index_size)

    def _truncate_entries(self, n: int) -> None:
        self.entries = n
        self._keys = None

    def flush(self) -> None:
        if self.mm is not None:
            self.mm.flush()

    def close(self) -> None:
        if self.fd < 0:
            return
        self.trim_to_valid_size()
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        os.close(self.fd)
        self.fd = -1

    def close_handler(self) -> None:
        if self.fd < 0:
            return
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        os.close(self.fd)
        self.fd = -1

    def rename_to(self, path: str) -> None:
        os.rename(self.path, path)
        self.path = path

    def _key_of(self, n: int) -> int:
        raise NotImplementedError

    def _search(self, target: int) -> int:
        """Slot of the largest key <= target, or -1."""
        lo, hi = 0, self.entries - 1
        res = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._key_of(mid) <= target:
                res = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return res


class FallbackOffsetIndex(_MmapIndex):
    entry_size = 8
    fmt = struct.Struct(">ii")

    def _key_of(self, n: int) -> int:
        return self._entry(n)[0] + self.base_offset

    @property
    def last_offset(self) -> int:
        return self._key_of(self.entries - 1) if self.entries else self.base_offset

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise IndexFullError(f"Attempt to append to a full index (size = {self.entries})", file=self.path)
        if self.entries and offset <= self.last_offset:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) no larger than the last "
                                     f"offset appended ({self.last_offset})", file=self.path)
        self.fmt.pack_into(self.mm, self.entries * 8, offset - self.base_offset, position)
        self.entries += 1

    def lookup(self, target: int) -> Tuple[int, int]:
        slot = self._search(target)
        if slot < 0:
            return (self.base_offset, 0)
        rel, pos = self._entry(slot)
        return (rel + self.base_offset, pos)

    def entry(self, n: int) -> Tuple[int, int]:
        rel, pos = self._entry(n)
        return (rel + self.base_offset, pos)

    def truncate_to(self, offset: int) -> None:
        slot = self._search(offset)
        if slot < 0:
            n = 0
        elif self._key_of(slot) == offset:
            n = slot
        else:
            n = slot + 1
        self._truncate_entries(n)


class FallbackTimeIndex(_MmapIndex):
    entry_size = 12
    fmt = struct.Struct(">qi")

    def _key_of(self, n: int) -> int:
        return self._entry(n)[0]

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> Tuple[int, int]:
        if self.entries == 0:
            return (-1, self.base_offset)
        ts, rel = self._entry(self.entries - 1)
        return (ts, rel + self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if not skip_full_check and self.is_full():
            raise IndexFullError("Attempt to append to a full time index", file=self.path)
        last_ts, last_off = self.last_entry
        if self.entries and offset < last_off:
            raise InvalidOffsetError(f"Attempt to append an offset ({offset}) to slot {self.entries} no "
                                     f"larger than the last offset appended ({last_off})", file=self.path)
        if self.entries and timestamp < last_ts:
            raise InvalidOffsetError("Attempt to append a timestamp smaller than the last one", file=self.path)
        if timestamp > last_ts:
            if self.entries >= self.max_entries:
                return
            self.fmt.pack_into(self.mm, self.entries * 12, timestamp, offset - self.base_offset)
            self.entries += 1

    def lookup(self, target: int) -> Tuple[int, int]:
        slot = self._search(target)
        if slot < 0:
            return (-1, self.base_offset)
        ts, rel = self._entry(slot)
        return (ts, rel + self.base_offset)

    def truncate_to(self, offset: int) -> None:
        # largest slot whose offset <= target (offset column is non-decreasing)
        lo, hi, res = 0, self.entries - 1, -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._entry(mid)[1] + self.base_offset <= offset:
                res = mid
                lo = mid + 1
            else:
                hi = mid - 1
        if res < 0:
            n = 0
        elif self._entry(res)[1] + self.base_offset == offset:
            n = res
        else:
            n = res + 1
        self._truncate_entries(n)


class FallbackTxnIndex:
    """Append-only ``.txnindex`` of 34-byte entries, file created on first append."""

    fmt = struct.Struct(">hqqqq")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.fd = os.open(path, os.O_RDWR) if os.path.exists(path) else -1

    def append(self, txn) -> None:
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        data = txn if isinstance(txn, (bytes, bytearray)) else self.fmt.pack(
            0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
        os.pwrite(self.fd, data, os.fstat(self.fd).st_size)

    def _entries(self):
        if self.fd < 0:
            return []
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, size, 0)
        return [self.fmt.unpack_from(data, p) for p in range(0, size - 33, 34)]

    def truncate_to(self, offset: int) -> None:
        for i, e in enumerate(self._entries()):
            if e[3] >= offset:
                os.ftruncate(self.fd, i * 34)
                return

    def reset(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)

    def flush(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def rename_to(self, path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path

    def sanity_check(self) -> None:
        for e in self._entries():
            if e[3] < self.base_offset:
                raise CorruptIndexError(f"Last offset of aborted transaction {e[3]} is less than start "
                                        f"offset {self.base_offset}", file=self.path)


# --- factories -----------------------------------------------------------------------------------

def open_offset_index(path: str, base_offset: int, max_index_size: int):
    if _OffsetIndex is not None:
        return _OffsetIndex(path, base_offset, max_index_size)
    return FallbackOffsetIndex(path, base_offset, max_index_size)


def open_time_index(path: str, base_offset: int, max_index_size: int):
    if _TimeIndex is not None:
        return _TimeIndex(path, base_offset, max_index_size)
    return FallbackTimeIndex(path, base_offset, max_index_size)


def open_txn_index(path: str, base_offset: int):
    if _TxnIndex is not None:
        return _TxnIndex(base_offset, path)
    return FallbackTxnIndex(path, base_offset)


# --- accessors -----------------------------------------------------------------------------------

def path_of(idx) -> str:
    return os.fspath(getattr(idx, "path", getattr(idx, "file", "")))


def offset_is_full(idx) -> bool:
    return idx.is_full()


def time_is_full(idx) -> bool:
    return idx.is_full()


def offset_lookup(idx, target: int) -> Tuple[int, int]:
    r = idx.lookup(target)
    return (r[0], r[1]) if isinstance(r, tuple) else (r.offset, r.position)


def offset_last(idx) -> int:
    return idx.last_offset


def offset_entries(idx) -> int:
    return idx.entries


def time_lookup(idx, target: int) -> Tuple[int, int]:
    r = idx.lookup(target)
    return (r[0], r[1]) if isinstance(r, tuple) else (r.timestamp, r.offset)


def time_last_entry(idx) -> Tuple[int, int]:
    r = idx.last_entry
    if callable(r):
        r = r()
    return (r[0], r[1]) if isinstance(r, tuple) else (r.timestamp, r.offset)


def time_entries(idx) -> int:
    return idx.entries


def trim(idx) -> None:
    idx.trim_to_valid_size()


def rename(idx, path: str) -> None:
    idx.rename_to(path)


def close_quietly(idx) -> None:
    fn = getattr(idx, "close_handler", None) or getattr(idx, "close")
    try:
        fn()
    except Exception:  # noqa: BLE001 - closing before deletion must not fail the deletion
        pass


def epoch_latest(cache):
    fn = getattr(cache, "latest_epoch", None)
    v = fn() if callable(fn) else fn
    return v if v is None or v >= 0 else None


def epoch_assign(cache, epoch: int, start_offset: int) -> None:
    cache.assign(epoch, start_offset)


def producer_update(psm, batch_bytes) -> list:
    """Feed one v2 batch to a producer-state manager; returns completed aborted txns to index."""
    fn = getattr(psm, "update_from_batch", None)
    if fn is None:
        return []
    return fn(batch_bytes) or []
