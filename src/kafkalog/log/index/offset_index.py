"""The offset index ``.index`` (Kafka's ``OffsetIndex``, spec §2.2, §2.6, §2.7).

Entry = 8 bytes: ``int32 relative_offset`` + ``int32 position``. Sparse: it maps the last offset of
an appended chunk to the byte position where that chunk starts in the ``.log``.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple, Optional, Sequence, Union

from kafkalog.errors import (
    IndexEntryOutOfRangeError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    ReadOnlyIndexError,
)
from kafkalog.log.index._mmap_index import AbstractIndex
from kafkalog.log.kernel import index_slot
from kafkalog.record.constants import INT32_MAX

__all__ = ["OffsetIndex", "OffsetPosition", "IndexEntryOutOfRangeError", "IndexOffsetOverflowError",
           "ReadOnlyIndexError", "ENTRY", "ENTRY_SIZE"]

ENTRY_SIZE = 8
#: an entry: relative offset, position
ENTRY = struct.Struct(">ii")
_pack_into = ENTRY.pack_into
_unpack_from = ENTRY.unpack_from
_REL = struct.Struct(">i")
_rel_from = _REL.unpack_from
_POS_FROM = struct.Struct(">4xi").unpack_from


class OffsetPosition(NamedTuple):
    """An offset-index entry: absolute ``offset`` and byte ``position`` in the ``.log``."""
    offset: int
    position: int


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """A segment's ``.index`` file (see :class:`~kafkalog.log.index._mmap_index.AbstractIndex` for
    opening, lazy creation, resize/trim/close)."""

    entry_size = ENTRY_SIZE

    def __init__(self, path: os.PathLike[str] | str, base_offset: int, max_index_size: int = -1,
                 writable: bool = True) -> None:
        super().__init__(path, base_offset, max_index_size, writable)
        self._last_offset = base_offset
        #: the last entry's position, from :meth:`seed` (read from the entries once loaded)
        self._seeded_position = 0

    def _refresh_last(self) -> None:
        if self._entries:
            self._last_offset = self.base_offset + _rel_from(self._mm, (self._entries - 1) * 8)[0]
        else:
            self._last_offset = self.base_offset

    def _seed_last(self, last: Optional[tuple[int, int]]) -> None:
        rel, self._seeded_position = (0, 0) if last is None else last
        self._last_offset = self.base_offset + rel

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or ``base_offset`` when empty."""
        if not self._known:
            self._load()
        return self._last_offset

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``(base_offset, 0)`` when empty."""
        if not self._known:
            self._load()
        if self._entries == 0:
            return OffsetPosition(self.base_offset, 0)
        if not self._loaded:
            return OffsetPosition(self._last_offset, self._seeded_position)
        return self.entry(self._entries - 1)

    def append(self, offset: int, position: int) -> None:
        """Append ``(offset, position)``.

        Raises :class:`IndexFullError` when full, :class:`InvalidOffsetError` when ``offset`` is
        not larger than the last offset, :class:`IndexOffsetOverflowError` when it cannot be
        stored relative to ``base_offset``.
        """
        if not self._loaded:
            self._load()
        if not self.writable:
            self._check_writable()
        n = self._entries
        if n >= self._capacity():
            raise self._full(n)
        if n and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset ({offset}) to position {n} no larger than the last "
                f"offset appended ({self._last_offset}) to {self._path}.",
                file=self._path, position=n * 8)
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise self._overflow(offset, n)
        if position < 0 or position > INT32_MAX:
            raise InvalidOffsetError(f"Invalid position {position} for offset {offset}",
                                     file=self._path, position=n * 8)
        if n * 8 + 8 > self._reserved:
            self.reserve(1)
        _pack_into(self._mm, n * 8, rel, position)
        self._entries = n + 1
        self._last_offset = offset

    def append_entries(self, offsets: Sequence[int], positions: Sequence[int]) -> None:
        """Append many entries in order (a recovery's index rebuild): the checks of :meth:`append`
        for the run, written with one ``struct.pack``."""
        k = len(offsets)
        if k == 0:
            return
        self.append(offsets[0], positions[0])            # every check against the existing entries
        n = self._entries
        if k == 1:
            return
        if n + k - 1 > self._capacity():
            raise self._full(n)
        prev = offsets[0]
        for i in range(1, k):
            o = offsets[i]
            if o <= prev:
                raise InvalidOffsetError(f"Attempt to append an offset ({o}) no larger than the last "
                                         f"offset appended ({prev}) to {self._path}.",
                                         file=self._path, position=(n + i - 1) * 8)
            prev = o
        base = self.base_offset
        if prev - base > INT32_MAX or min(positions) < 0 or max(positions) > INT32_MAX:
            raise IndexOffsetOverflowError(f"Integer overflow for offset {prev} or a position "
                                           f"({self._path})", file=self._path, position=n * 8)
        flat = [v for i in range(1, k) for v in (offsets[i] - base, positions[i])]
        self.reserve(k - 1)
        mm = self._mm
        assert not isinstance(mm, bytes), "appending to a read-only index"
        mm[n * 8:(n + k - 1) * 8] = struct.pack(f">{len(flat)}i", *flat)
        self._entries = n + k - 1
        self._last_offset = prev

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry; :class:`IndexEntryOutOfRangeError` if ``n >= entries``."""
        self._check_entry(n)
        rel, pos = _unpack_from(self._mm, n * 8)
        return OffsetPosition(self.base_offset + rel, pos)

    def _entries_below_position(self, max_position: int) -> int:
        """The number of leading entries whose position is below ``max_position`` (positions
        increase)."""
        mm = self._mm
        if mm is None:
            return 0
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if _POS_FROM(mm, mid << 3)[0] < max_position:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # --- search ---------------------------------------------------------------------------------

    def _largest_lower_bound_slot(self, target: int) -> int:
        """Slot of the largest relative offset <= target - base, or -1."""
        n = self._entries          # (before the buffer: the first write maps the file, then counts)
        slot: int = index_slot(self._mm, n, target - self.base_offset)
        return slot

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``, or ``(base_offset, 0)``."""
        return self.lookup_with_next(target_offset)[0]

    def lookup_with_next(self, target_offset: int) -> tuple[OffsetPosition, Optional[int]]:
        """:meth:`lookup`, and the position of the entry after it (None when it is the last)."""
        if not self._loaded:
            self._load()
        slot = self._largest_lower_bound_slot(target_offset)
        following = None
        if slot + 1 < self._entries:
            following = _POS_FROM(self._mm, (slot + 1) << 3)[0]
        if slot < 0:
            return OffsetPosition(self.base_offset, 0), following
        rel, pos = _unpack_from(self._mm, slot << 3)
        return OffsetPosition(self.base_offset + rel, pos), following

    def end_position(self, end_offset: int) -> Optional[int]:
        """A byte position from which every batch holds only offsets >= ``end_offset``: that of
        the entry after the first one with an offset >= ``end_offset - 1`` (the chunk at an
        entry ends with the entry's offset, so the next chunk starts above it); None when there is
        none (the batches up to the end of the segment may hold offsets below ``end_offset``)."""
        if not self._loaded:
            self._load()
        slot = self._largest_lower_bound_slot(end_offset - 2) + 2
        if slot >= self._entries:
            return None
        return int(_POS_FROM(self._mm, slot << 3)[0])

    def fetch_upper_bound_offset(self, fetch_offset: Union[OffsetPosition, int],
                                 fetch_size: int) -> Optional[OffsetPosition]:
        """The entry with the smallest position >= ``start_position + fetch_size``, or ``None``.

        ``fetch_offset`` is the :class:`OffsetPosition` of the fetch start (or just its position).
        """
        if not self._loaded:
            self._load()
        start = fetch_offset.position if isinstance(fetch_offset, OffsetPosition) else fetch_offset
        target = start + fetch_size
        n = self._entries
        mm = self._mm
        if n == 0 or _POS_FROM(mm, (n - 1) << 3)[0] < target:
            return None
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if _POS_FROM(mm, mid << 3)[0] >= target:
                hi = mid
            else:
                lo = mid + 1
        rel, pos = _unpack_from(mm, lo << 3)
        return OffsetPosition(self.base_offset + rel, pos)

    def truncate_to(self, offset: int) -> None:
        """Remove all entries with offset >= ``offset``."""
        if not self._loaded:
            self._load()
        slot = self._largest_lower_bound_slot(offset)
        if slot < 0:
            new_entries = 0
        elif _rel_from(self._mm, slot << 3)[0] + self.base_offset == offset:
            new_entries = slot
        else:
            new_entries = slot + 1
        self._truncate_to_entries(new_entries)

    # --- checks ---------------------------------------------------------------------------------

    def _last_entry_corruption(self) -> Optional[str]:
        """Kafka's ``OffsetIndex.sanityCheck``: the last offset must not be below the base offset."""
        if self._last_offset < self.base_offset:
            return (f"Corrupt index found, index file ({self._path}) has non-zero size but the last "
                    f"offset is {self._last_offset} which is less than the base offset {self.base_offset}.")
        return None

    def verify_entries(self) -> Optional[int]:
        """Slot of the first entry whose offset is not strictly larger than the previous one's, or
        whose relative offset is negative; ``None`` when all entries are ordered (a deeper check
        than :meth:`sanity_check`, for ``verify`` and tools)."""
        if not self._loaded:
            self._load()
        prev = -1
        mm = self._mm
        for i in range(self._entries):
            rel = _rel_from(mm, i << 3)[0]
            if rel <= prev or rel < 0:
                return i
            prev = rel
        return None
