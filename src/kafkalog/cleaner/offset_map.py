"""The dedupe buffer: Kafka's ``SkimpyOffsetMap`` (spec §4.11 "Offset map").

A flat ``bytearray`` of ``memory`` bytes (allocated by the first cleaning that uses it: a broker
with nothing to clean holds none of it) holding ``slots = memory // 24`` entries of 16-byte MD5
key hash + 8-byte big-endian offset, open addressing with Kafka's probe sequence. The
table is the only per-key memory, so the cleaner stays inside ``log.cleaner.dedupe.buffer.size``
whatever the key count. Bulk operations (hash + put / hash + get for every record of a batch) run
in the cleaner kernel (:mod:`kafkalog.cleaner.kernel`: ``offset_map_build_v2`` /
``offset_map_clean_v2``); single-key operations here are used for legacy (v0/v1) batches and
tests.

Beyond Kafka's map: while the map is built, a bitmap remembers which offsets of the cleaned range
were superseded by a later record with the same key hash (:meth:`SkimpyOffsetMap.track_superseded`),
so the recopy pass hashes only the records that may be the latest of their key - the same
answers as ``offset >= get(key)``, with about half the MD5 work.

Hash collisions between different keys are treated as equal keys, as in Kafka (an accepted,
astronomically small risk).
"""
from __future__ import annotations

import hashlib
from typing import Optional

from kafkalog._kernels import load_kernel
from kafkalog.errors import CleanerError

__all__ = ["SkimpyOffsetMap", "ENTRY_SIZE", "HASH_SIZE", "cleaner_kernel"]

ENTRY_SIZE = 24
HASH_SIZE = 16

def cleaner_kernel():
    """The kernel module providing the cleaner loops (:mod:`kafkalog.cleaner.kernel`: compiled or
    pure Python, as selected for the whole process)."""
    return load_kernel("kafkalog.cleaner._kernel")


class SkimpyOffsetMap:
    """A fixed-memory map from key (by MD5) to its latest offset.

    Args:
        memory: bytes of the table (``slots = memory // 24``; at least one slot).
        load_factor: ``log.cleaner.io.buffer.load.factor``; the map counts as full at
            ``entries >= floor(slots * load_factor)``.
    """

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        slots = int(memory) // ENTRY_SIZE
        if slots < 1:
            raise CleanerError(f"Offset map of {memory} bytes has no slot (an entry takes "
                               f"{ENTRY_SIZE} bytes)")
        if not 0 < load_factor <= 1:
            raise CleanerError(f"Invalid load factor {load_factor}")
        self.memory = slots * ENTRY_SIZE
        self.slots = slots
        self.load_factor = load_factor
        #: the table, allocated by the first cleaning that uses it (:attr:`table`)
        self._table: Optional[bytearray] = None
        self.entries = 0
        self.latest_offset = -1
        self.lookups = 0
        self.kernel = cleaner_kernel()
        #: bitmap of superseded offsets (see :meth:`track_superseded`), or None
        self.superseded: Optional[bytearray] = None
        self.superseded_base = 0

    @property
    def table(self) -> bytearray:
        """The ``memory`` bytes of the map, allocated (and so zeroed and resident) on first use:
        a cleaner thread whose broker has nothing to clean holds none of its dedupe buffer."""
        if self._table is None:
            self._table = bytearray(self.memory)
        return self._table

    @property
    def allocated(self) -> bool:
        return self._table is not None

    # --- Kafka's OffsetMap API ---------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of entries."""
        return self.entries

    @property
    def max_entries(self) -> int:
        """``floor(slots * load_factor)``: the map is full at this many entries."""
        return max(0, int(self.slots * self.load_factor))

    @property
    def utilization(self) -> float:
        return self.entries / self.slots

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @staticmethod
    def hash_key(key: bytes) -> bytes:
        return hashlib.md5(key).digest()

    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset`` (overwrites an equal hash). Raises :class:`CleanerError` when
        every slot is taken."""
        if self.entries >= self.slots:
            raise CleanerError("Attempt to add a new entry to a full offset map.")
        self.lookups += 1
        h = self.hash_key(key)
        if self.superseded is not None:
            self._mark_superseded(self.kernel.offset_map_get_hash(self.table, self.slots, h))
        self.entries += self.kernel.offset_map_put_hash(self.table, self.slots, h, offset)
        self.latest_offset = offset

    def _mark_superseded(self, old: int) -> None:
        bm = self.superseded
        rel = old - self.superseded_base
        if old >= 0 and bm is not None and 0 <= rel < len(bm) * 8:
            bm[rel >> 3] |= 1 << (rel & 7)

    def track_superseded(self, start_offset: int, end_offset: int) -> None:
        """Keep a bitmap of the offsets in ``[start_offset, end_offset)`` whose entry a later put
        replaced (one bit per offset, at most ``memory / 64`` bytes: offsets beyond that are not
        tracked). The recopy pass then knows without hashing that such a record is not the latest
        of its key; every other record is still looked up by MD5. The bitmap is a calloc'ed
        ``bytearray``, so untouched pages cost no memory."""
        span = max(0, int(end_offset) - int(start_offset))
        nbytes = min((span + 7) // 8, max(self.memory // 64, 4096))
        self.superseded = bytearray(nbytes) if nbytes else None
        self.superseded_base = int(start_offset)

    def is_superseded(self, offset: int) -> bool:
        """True when the bitmap shows a later put of the same key hash than ``offset``."""
        bm = self.superseded
        rel = offset - self.superseded_base
        return bm is not None and 0 <= rel < len(bm) * 8 and bool(bm[rel >> 3] >> (rel & 7) & 1)

    def get(self, key: bytes) -> int:
        """The offset of ``key``, or -1."""
        self.lookups += 1
        return self.kernel.offset_map_get_hash(self.table, self.slots, self.hash_key(key))

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        """Forget every entry (the table, once allocated, is zeroed in place in 1 MiB steps, never
        reallocated)."""
        step = 1 << 20
        if self._table is not None:
            zero = bytes(min(step, self.memory))
            mv = memoryview(self._table)
            try:
                for i in range(0, self.memory, step):
                    n = min(step, self.memory - i)
                    mv[i:i + n] = zero[:n]
            finally:
                mv.release()
        self.entries = 0
        self.latest_offset = -1
        self.lookups = 0
        self.superseded = None
        self.superseded_base = 0

    def __repr__(self) -> str:
        return (f"SkimpyOffsetMap(slots={self.slots}, entries={self.entries}, "
                f"latestOffset={self.latest_offset})")

    # --- bulk (kernel) ----------------------------------------------------------------------------
    def put_batch_v2(self, body, count: int, base_offset: int, start_offset: int) -> tuple:
        """Put every keyed record of a v2 batch body with offset >= ``start_offset``; stops when
        full. Returns ``(records_read, full)``; updates ``latest_offset`` to the last offset put."""
        entries, last, read, full = self.kernel.offset_map_build_v2(
            self.table, self.slots, self.entries, self.max_entries, body, count, base_offset,
            start_offset, self.superseded, self.superseded_base)
        self.entries = entries
        if last >= 0:
            self.latest_offset = last
        return read, full

    def filter_batch_v2(self, body, count: int, base_offset: int, base_timestamp: int,
                        log_append_time: int, retain_deletes: bool,
                        new_base_timestamp: Optional[int] = None,
                        always_encode: bool = False) -> tuple:
        """The kernel's record filter against this map (see ``offset_map_filter_v2``)."""
        return self.kernel.offset_map_filter_v2(self.table, self.slots, body, count, base_offset,
                                                base_timestamp, log_append_time,
                                                self.latest_offset, retain_deletes,
                                                new_base_timestamp, always_encode)
