"""The batch-header walker: one walk over the entries of a buffer or mmap for every layer that needs
batch facts without decoding records (append validation, segment recovery, ``FileRecords``' header
iteration, ``verify``/``dump``, the readers).

:func:`walk` reads entries (v0/v1 messages and v2 batches, spec §1.2, §1.10) from ``start`` to
``end`` and returns a :class:`HeaderWalk`: the facts of every whole, valid entry as rows of int64
(``F_*`` field numbers; :meth:`HeaderWalk.batch` gives one row as a tuple, :meth:`HeaderWalk.column`
one field of every row) and, when it stopped before ``end``, a typed :class:`Finding` with the byte
position. The rules are Kafka's ``FileLogInputStream`` / ``DefaultRecordBatch.ensureValid``:

* fewer than 18 bytes left: :attr:`FindingKind.SHORT_TAIL`; an entry running past ``end``:
  :attr:`FindingKind.PARTIAL_TAIL`; a length below 14: :attr:`FindingKind.BAD_SIZE`; a magic other
  than 0, 1, 2: :attr:`FindingKind.BAD_MAGIC`; a v2 batch smaller than 61 bytes:
  :attr:`FindingKind.SMALL_BATCH`; ``max_size`` exceeded: :attr:`FindingKind.TOO_LARGE`;
* ``verify_crc``: CRC-32C of a v2 batch (attributes..end), CRC-32 of a v0/v1 message;
  :attr:`FindingKind.CRC_MISMATCH`;
* ``segment_base``: offsets must be storable relative to the segment's base offset (int32) and
  ``lastOffsetDelta`` >= 0: :attr:`FindingKind.OFFSET_RANGE`;
* ``expect_next``: a v2 batch must start at or after it (a v0/v1 entry end at or after it),
  ``contiguous`` exactly at it: :attr:`FindingKind.OFFSET_OVERLAP`.

Whether a stop is an error is the caller's business (a torn tail is normal after a crash). Zero
fill is classified by :func:`all_zero`. Derived fields follow Java's long arithmetic: the last
offset is ``baseOffset + lastOffsetDelta`` wrapped at 64 bits.

Implementation: the compiled ``_header_walk`` unless ``KAFKALOG_PURE_PYTHON=1`` (or it is not
built), else the pure-Python twin ``_header_walk_py``.
"""

from __future__ import annotations

import copy
import enum
import struct
import zlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from crc32c import crc32c

from kafkalog._kernels import load_kernel

#: the module in use (``kafkalog.record._header_walk`` or ``kafkalog.record._header_walk_py``)
implementation_module: ModuleType = load_kernel("kafkalog.record._header_walk")
_impl = implementation_module
IMPLEMENTATION: str = _impl.IMPLEMENTATION
_walk = _impl.walk
#: True when ``buf[start:end]`` holds only zero bytes
all_zero = _impl.all_zero
#: ``(lastOffsetDelta, maxTimestamp, producerId, partitionLeaderEpoch)`` of a buffer that is exactly
#: one valid v2 data batch as a producer sends it (within ``max_size``), else None: the walk of
#: ``Log.append``'s one-batch path (the general :func:`walk` says what is wrong otherwise)
one_v2_data_batch = _impl.one_v2_data_batch

NF = 16
(F_POSITION, F_SIZE, F_BASE_OFFSET, F_LAST_OFFSET, F_MAGIC, F_ATTRIBUTES, F_MAX_TIMESTAMP,
 F_FIRST_TIMESTAMP, F_PARTITION_LEADER_EPOCH, F_PRODUCER_ID, F_PRODUCER_EPOCH, F_BASE_SEQUENCE,
 F_RECORD_COUNT, F_CRC_OK, F_MAX_TIMESTAMP_SO_FAR, F_OFFSET_OF_MAX_TIMESTAMP_SO_FAR) = range(NF)
_ROW = struct.Struct(f"={NF}q")
_NO_LIMIT = -(2**63)


class FindingKind(enum.Enum):
    """Why a walk stopped before its end."""

    SHORT_TAIL = 1        # fewer than 18 bytes left: no room for an entry
    PARTIAL_TAIL = 2      # the entry's length runs past the end
    BAD_SIZE = 3          # length field below the minimum record overhead (14)
    BAD_MAGIC = 4
    SMALL_BATCH = 5       # v2 batch below the 61-byte header
    CRC_MISMATCH = 6
    OFFSET_OVERLAP = 7    # offsets do not follow the previous batch's
    OFFSET_RANGE = 8      # offsets not storable relative to the segment base, or lastOffsetDelta < 0
    TOO_LARGE = 9         # entry larger than max_size
    NEED_MORE = 10        # the buffer (a window of a file, ``base``) ends inside the next header


_KINDS = {k.value: k for k in FindingKind}


@dataclass(frozen=True)
class Finding:
    """Where and why a walk stopped. ``a``/``b``/``c`` by kind: SHORT_TAIL (bytes left), PARTIAL_TAIL
    (entry size, magic, offset), BAD_SIZE (length), BAD_MAGIC (magic), SMALL_BATCH / TOO_LARGE (entry
    size), CRC_MISMATCH (stored, computed, offset), OFFSET_OVERLAP (base offset, last offset,
    expected next offset), OFFSET_RANGE (base offset, last offset)."""

    kind: FindingKind
    position: int
    a: int = 0
    b: int = 0
    c: int = 0

    @property
    def message(self) -> str:
        return _MESSAGES[self.kind].format(a=self.a, b=self.b, c=self.c)


_MESSAGES = {
    FindingKind.SHORT_TAIL: "{a} trailing bytes too short for a batch header",
    FindingKind.PARTIAL_TAIL: "partial batch of {a} bytes",
    FindingKind.BAD_SIZE: "Record size {a} is less than the minimum record overhead (14)",
    FindingKind.BAD_MAGIC: "Invalid magic found in record: {a}",
    FindingKind.SMALL_BATCH: "Record batch size {a} is smaller than the minimum allowed overhead 61",
    FindingKind.CRC_MISMATCH: "Record is corrupt (stored crc = {a}, computed crc = {b})",
    FindingKind.OFFSET_OVERLAP: "batch offsets {a}..{b} are not above the previous batch's (next offset {c})",
    FindingKind.OFFSET_RANGE: "batch offsets {a}..{b} outside the range of the segment",
    FindingKind.TOO_LARGE: "entry of {a} bytes is larger than allowed",
    FindingKind.NEED_MORE: "the buffer ends inside the next entry's header",
}


class HeaderWalk:
    """The result of :func:`walk`: ``count`` batches, their facts, ``end`` (the position after the
    last whole valid batch), ``finding`` (None when the walk reached its end or ``max_batches``),
    the running maximum timestamp and its offset, ``producer_batches`` (v2 batches with a producer
    id), ``legacy_batches`` (v0/v1 entries) and ``epoch_starts`` (``(epoch, start offset)`` for each
    partition leader epoch above ``latest_epoch``, in order)."""

    __slots__ = (
        "count",
        "end",
        "epoch_starts",
        "facts",
        "finding",
        "legacy_batches",
        "max_timestamp",
        "offset_of_max_timestamp",
        "producer_batches",
    )

    def __init__(self, r: tuple[Any, ...]) -> None:
        (self.facts, self.count, self.end, stop, pos, a, b, c, self.max_timestamp,
         self.offset_of_max_timestamp, self.producer_batches, self.legacy_batches,
         self.epoch_starts) = r
        self.finding: Finding | None = Finding(_KINDS[stop], pos, a, b, c) if stop else None

    def __len__(self) -> int:
        return int(self.count)

    def batch(self, i: int) -> tuple[int, ...]:
        """Row ``i`` as a tuple indexed by the ``F_*`` numbers."""
        if not 0 <= i < self.count:
            raise IndexError(i)
        return _ROW.unpack_from(self.facts, i * _ROW.size)

    def column(self, field: int) -> list[int]:
        """Field ``field`` of every batch."""
        if self.count == 0:
            return []
        return memoryview(self.facts).cast("q")[field::NF].tolist()

    def rows(self) -> list[tuple[int, ...]]:
        return list(_ROW.iter_unpack(memoryview(self.facts)[:self.count * _ROW.size]))

    def cut(self, n: int) -> HeaderWalk:
        """The walk of the first ``n`` batches only, stopped with :attr:`FindingKind.NEED_MORE` at
        batch ``n`` (a window of a file that holds only the header of that batch). The running
        maximum timestamp and the counters stay those of the whole walk."""
        cut = copy.copy(self)
        pos = self.batch(n)[F_POSITION]
        cut.count = n
        cut.facts = self.facts[:n * _ROW.size]
        cut.end = pos
        cut.finding = Finding(FindingKind.NEED_MORE, pos)
        return cut


def walk(buf: Any, start: int = 0, end: int | None = None, *, verify_crc: bool = True,
         expect_next: int | None = None, contiguous: bool = False,
         segment_base: int | None = None, max_batches: int = -1, max_size: int = -1,
         max_timestamp: int = -1, offset_of_max_timestamp: int = -1,
         latest_epoch: int | None = None, base: int = 0,
         kernel: ModuleType | None = None) -> HeaderWalk:
    """Walk the entries of ``buf[start:end]`` (see the module docstring). ``max_timestamp`` /
    ``offset_of_max_timestamp`` seed the running maximum (to continue a walk in windows),
    ``latest_epoch`` the leader-epoch starts.

    Windows of a file: ``buf`` holds the file's bytes from position ``base``; ``start``, ``end``
    (the file's size) and every position are file positions. Without ``verify_crc`` only the fixed
    header of an entry must be in ``buf``; a walk that reaches the end of ``buf`` first stops with
    :attr:`FindingKind.NEED_MORE` (read the next window from its position).

    ``kernel``: one implementation module of the walker (the parity tests run each); default the
    one selected for the process. This is the only caller of the kernels' positional API."""
    return HeaderWalk((_walk if kernel is None else kernel.walk)(
        buf, start, -1 if end is None else end, verify_crc,
        _NO_LIMIT if expect_next is None else expect_next, expect_next is not None, contiguous,
        0 if segment_base is None else segment_base, segment_base is not None, max_batches,
        max_size, max_timestamp, offset_of_max_timestamp,
        -1 if latest_epoch is None else latest_epoch, crc32c, zlib.crc32, base))


__all__ = [
    "F_ATTRIBUTES",
    "F_BASE_OFFSET",
    "F_BASE_SEQUENCE",
    "F_CRC_OK",
    "F_FIRST_TIMESTAMP",
    "F_LAST_OFFSET",
    "F_MAGIC",
    "F_MAX_TIMESTAMP",
    "F_MAX_TIMESTAMP_SO_FAR",
    "F_OFFSET_OF_MAX_TIMESTAMP_SO_FAR",
    "F_PARTITION_LEADER_EPOCH",
    "F_POSITION",
    "F_PRODUCER_EPOCH",
    "F_PRODUCER_ID",
    "F_RECORD_COUNT",
    "F_SIZE",
    "IMPLEMENTATION",
    "NF",
    "Finding",
    "FindingKind",
    "HeaderWalk",
    "all_zero",
    "one_v2_data_batch",
    "walk",
]
