"""The time index ``.timeindex`` (Kafka's ``TimeIndex``, spec §2.3, §2.5-2.7).

Entry = 12 bytes: ``int64 timestamp`` + ``int32 relative_offset``; timestamps strictly increasing.
The last slot is reserved for the entry added when the segment is rolled or closed, so the index is
full at ``max_entries - 1`` entries.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Callable, NamedTuple, Optional, Sequence

from kafkalog.errors import (
    IndexEntryOutOfRangeError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    ReadOnlyIndexError,
    TimestampOrderError,
)
from kafkalog.log.index._mmap_index import AbstractIndex
from kafkalog.record.constants import INT32_MAX

__all__ = ["TimeIndex", "TimestampOffset", "TimestampOrderError", "ENTRY", "ENTRY_SIZE",
           "IndexEntryOutOfRangeError", "IndexOffsetOverflowError", "ReadOnlyIndexError"]

ENTRY_SIZE = 12
#: an entry: timestamp, relative offset
ENTRY = struct.Struct(">qi")
_pack_into = ENTRY.pack_into
_pack = ENTRY.pack
_unpack_from = ENTRY.unpack_from
_ts_from = struct.Struct(">q").unpack_from
_rel_from = struct.Struct(">8xi").unpack_from


def _last_at_most(mm: Any, n: int, column: Callable[[Any, int], tuple[int, ...]], target: int) -> int:
    """The last of the ``n`` entries (the first at or below ``target`` holds) whose ``column`` is
    <= ``target`` (binary search)."""
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if column(mm, mid * 12)[0] <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


class TimestampOffset(NamedTuple):
    """A time-index entry: ``timestamp`` and absolute ``offset``."""
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex[TimestampOffset]):
    """A segment's ``.timeindex`` file."""

    entry_size = ENTRY_SIZE
    kind = "Time index"

    def __init__(self, path: os.PathLike[str] | str, base_offset: int, max_index_size: int = -1,
                 writable: bool = True) -> None:
        super().__init__(path, base_offset, max_index_size, writable)
        self._last_ts = -1
        self._last_off = base_offset

    def _refresh_last(self) -> None:
        if self._entries:
            ts, rel = _unpack_from(self._mm, (self._entries - 1) * 12)
            self._last_ts, self._last_off = ts, self.base_offset + rel
        else:
            self._last_ts, self._last_off = -1, self.base_offset

    def _seed_last(self, last: Optional[tuple[int, int]]) -> None:
        if last is None:
            self._last_ts, self._last_off = -1, self.base_offset
        else:
            self._last_ts, self._last_off = last[0], self.base_offset + last[1]

    def is_full(self) -> bool:
        """``entries >= max_entries - 1`` (the last slot is reserved)."""
        if not self._known:
            self._load()
        return self._entries >= self._capacity() - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty."""
        if not self._known:
            self._load()
        return TimestampOffset(self._last_ts, self._last_off)

    @property
    def last_timestamp(self) -> int:
        return self.last_entry.timestamp

    @property
    def last_offset(self) -> int:
        return self.last_entry.offset

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` exceeds the last entry's timestamp.

        Raises :class:`IndexFullError` when full (unless ``skip_full_check``, which may use the
        reserved last slot), :class:`InvalidOffsetError` when ``offset`` is below the last
        offset, :class:`TimestampOrderError` when ``timestamp`` is below the last timestamp.
        """
        if not self._loaded:
            self._load()
        if not self.writable:
            self._check_writable()
        n = self._entries
        if not skip_full_check and n >= self._capacity() - 1:
            raise self._full(n)
        if n:
            if offset < self._last_off:
                raise InvalidOffsetError(
                    f"Attempt to append an offset ({offset}) to slot {n} no larger than the last "
                    f"offset appended ({self._last_off}) to {self._path}.",
                    file=self._path, position=n * 12)
            if timestamp < self._last_ts:
                raise TimestampOrderError(
                    f"Attempt to append a timestamp ({timestamp}) to slot {n} no larger than the "
                    f"last timestamp appended ({self._last_ts}) to {self._path}.",
                    file=self._path, position=n * 12)
        if timestamp > self._last_ts:
            if n >= self._capacity():
                raise self._full(n)
            rel = offset - self.base_offset
            if rel < 0 or rel > INT32_MAX:
                raise self._overflow(offset, n)
            if n * 12 + 12 <= self._reserved:
                _pack_into(self._mm, n * 12, timestamp, rel)
            elif not (skip_full_check and self.write_unmapped(n, _pack(timestamp, rel))):
                self.reserve(1)
                _pack_into(self._mm, n * 12, timestamp, rel)
            self._entries = n + 1
            self._last_ts = timestamp
            self._last_off = offset

    append = maybe_append

    def maybe_append_entries(self, timestamps: Sequence[int], offsets: Sequence[int]) -> None:
        """:meth:`maybe_append` for many entries in order (a recovery's index rebuild; timestamps
        and offsets non-decreasing): the entries whose timestamp grows, written with one pack."""
        k = len(timestamps)
        if k == 0:
            return
        self.maybe_append(timestamps[0], offsets[0])       # every check against the existing entries
        last_ts, last_off = self._last_ts, self._last_off
        flat: list[int] = []
        base = self.base_offset
        for i in range(1, k):
            ts, off = timestamps[i], offsets[i]
            if off < last_off or ts < last_ts:
                raise InvalidOffsetError(f"Attempt to append ({ts}, {off}) after ({last_ts}, "
                                         f"{last_off}) to {self._path}.", file=self._path,
                                         position=self._entries * 12)
            if ts > last_ts:
                flat += (ts, off - base)
                last_ts, last_off = ts, off
        m = len(flat) // 2
        if m == 0:
            return
        n = self._entries
        if n + m > self._capacity() - 1:
            raise self._full(n)
        if last_off - base > INT32_MAX:
            raise self._overflow(last_off, n)
        self.reserve(m)
        mm = self._mm
        assert not isinstance(mm, bytes), "appending to a read-only index"
        mm[n * 12:(n + m) * 12] = struct.pack(">" + "qi" * m, *flat)
        self._entries = n + m
        self._last_ts, self._last_off = last_ts, last_off

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry; :class:`IndexEntryOutOfRangeError` if ``n >= entries``."""
        self._check_entry(n)
        ts, rel = _unpack_from(self._mm, n * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``, or ``(-1, base_offset)``."""
        if not self._loaded:
            self._load()
        n = self._entries
        mm = self._mm
        if n == 0 or _ts_from(mm, 0)[0] > target_timestamp:
            return TimestampOffset(-1, self.base_offset)
        lo = _last_at_most(mm, n, _ts_from, target_timestamp)
        ts, rel = _unpack_from(mm, lo * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def truncate_to(self, offset: int) -> None:
        """Remove all entries with offset >= ``offset`` (search on the offset column)."""
        if not self._loaded:
            self._load()
        rel = offset - self.base_offset
        n = self._entries
        mm = self._mm
        if n == 0 or _rel_from(mm, 0)[0] > rel:
            self._truncate_to_entries(0)
            return
        lo = _last_at_most(mm, n, _rel_from, rel)
        self._truncate_to_entries(lo if _rel_from(mm, lo * 12)[0] == rel else lo + 1)

    def _last_entry_corruption(self) -> Optional[str]:
        """Kafka's ``TimeIndex.sanityCheck``: the last timestamp must not be below the first, nor
        the last offset below the base offset."""
        first_ts = _ts_from(self._mm, 0)[0]
        if self._last_ts < first_ts:
            return (f"Corrupt time index found, time index file ({self._path}) has non-zero size "
                    f"but the last timestamp is {self._last_ts} which is less than the first "
                    f"timestamp {first_ts}")
        if self._last_off < self.base_offset:
            return (f"Corrupt time index found, time index file ({self._path}) has non-zero size "
                    f"but the last offset is {self._last_off} which is less than the first offset "
                    f"{self.base_offset}")
        return None

    def verify_entries(self) -> Optional[int]:
        """Slot of the first entry that breaks strictly increasing timestamps / non-decreasing,
        non-negative relative offsets, or ``None``."""
        if not self._loaded:
            self._load()
        prev_ts, prev_rel = -1, 0
        for i in range(self._entries):
            ts, rel = _unpack_from(self._mm, i * 12)
            if ts <= prev_ts or rel < prev_rel or rel < 0:
                return i
            prev_ts, prev_rel = ts, rel
        return None
