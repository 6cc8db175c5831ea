"""Views of one batch inside a buffer (spec §1.2-§1.5).

:class:`RecordBatch` is the interface every batch shares, whatever its magic:
:class:`DefaultRecordBatch` (magic 2, this module) and
:class:`~kafkalog.record.legacy.LegacyRecordBatch` (magic 0/1, one shallow legacy entry).
:func:`kafkalog.record.records.batch_at` builds the right view for the entry at a position. A
view holds a reference to the buffer (``bytes``, ``bytearray``, ``memoryview`` or ``mmap``) and
never copies the batch; header fields of a v2 batch are read with one ``struct.unpack_from`` of
the 61-byte header.

Record iteration goes through the record kernel (:mod:`kafkalog.record.kernel`); decompression is
bounded by ``max_decompressed_size``.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Iterator, List, Optional

from kafkalog.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    InvalidRecordError,
    KafkalogError,
    UnsupportedCompressionTypeError,
)
from kafkalog.record import kernel
from kafkalog.record.constants import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    ENTRY_HEADER,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    V2_HEADER,
    CompressionType,
    TimestampType,
    increment_sequence,
    java_long,
)
from kafkalog.record.crc import Buffer, crc32c

__all__ = ["RecordBatch", "DefaultRecordBatch", "read_batch_header",
           "read_entry_header", "DEFAULT_MAX_DECOMPRESSED_SIZE", "compute_v2_crc",
           "InvalidArgumentError"]


#: Upper bound of the decompressed size of one batch unless the caller gives another.
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_B = struct.Struct(">b")
_ATTR_TS = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp


def read_entry_header(buf: Buffer, position: int) -> tuple[int, int, int]:
    """``(offset, length, magic)`` of the entry at ``position`` (needs 17 bytes; struct.error
    is the caller's responsibility to avoid: check the remaining size first)."""
    offset, length = ENTRY_HEADER.unpack_from(buf, position)
    return offset, length, _B.unpack_from(buf, position + MAGIC_OFFSET)[0]


def read_batch_header(buf: Buffer, position: int) -> tuple[Any, ...]:
    """The 61-byte v2 header at ``position`` as a tuple, without building an object:

    ``(base_offset, length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
    base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records_count)``.
    Raises :class:`CorruptRecordError` when fewer than 61 bytes remain.
    """
    try:
        return V2_HEADER.unpack_from(buf, position)
    except struct.error:
        raise CorruptRecordError("Record batch header is truncated (fewer than 61 bytes)",
                                 position=position) from None


def compute_v2_crc(buf: Buffer, position: int, size: int) -> int:
    """CRC-32C over the CRC-covered bytes ``[position + 21, position + size)`` of a v2 batch."""
    mv = memoryview(buf)
    try:
        return crc32c(mv[position + ATTRIBUTES_OFFSET:position + size])
    finally:
        mv.release()


class RecordBatch:
    """One entry of a record set: the interface of every batch, any magic.

    Attributes: ``position`` (byte position of the batch: in the buffer, or, when the buffer is
    a window of a file starting at file position ``base``, in the file), ``size_in_bytes`` (incl.
    the 12-byte log overhead), ``magic``. Subclasses add the header fields (``base_offset``,
    ``last_offset``, ``count``, ``compression``, ``timestamp_type``, ``max_timestamp``, producer
    fields, ...). Errors name positions as :attr:`position` does.
    """

    __slots__ = ("_at", "_buf", "magic", "position", "size_in_bytes")

    def __init__(self, buf: Buffer, position: int, size_in_bytes: int, magic: int,
                 base: int = 0) -> None:
        """The batch at index ``position`` of ``buf``, whose first byte is at file position
        ``base`` (0: positions are the buffer's)."""
        self._buf = buf
        self._at = position
        self.position = base + position
        self.size_in_bytes = size_in_bytes
        self.magic = magic

    if TYPE_CHECKING:
        # the header fields and methods every subclass provides (properties there; declared for the checker only)
        @property
        def base_offset(self) -> int: ...
        @property
        def last_offset(self) -> int: ...
        @property
        def count(self) -> Optional[int]: ...
        @property
        def checksum(self) -> int: ...
        @property
        def attributes(self) -> int: ...
        @property
        def compression_id(self) -> int: ...
        @property
        def compression(self) -> CompressionType: ...
        @property
        def timestamp_type(self) -> TimestampType: ...
        @property
        def max_timestamp(self) -> int: ...
        @property
        def producer_id(self) -> int: ...
        @property
        def producer_epoch(self) -> int: ...
        @property
        def base_sequence(self) -> int: ...
        @property
        def is_transactional(self) -> bool: ...
        @property
        def is_control(self) -> bool: ...
        @property
        def has_delete_horizon(self) -> bool: ...
        @property
        def delete_horizon_ms(self) -> Optional[int]: ...

        def records(self, max_decompressed_size: Optional[int] = None) -> List[Any]: ...
        def is_valid(self) -> bool: ...
        def ensure_valid(self) -> None: ...
        def compute_checksum(self) -> int: ...
        def offset_of_max_timestamp(self) -> Optional[int]: ...

    # --- common -------------------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        """``last_offset + 1``."""
        return self.last_offset + 1

    @property
    def end_position(self) -> int:
        """Position of the first byte after this batch."""
        return self.position + self.size_in_bytes

    @property
    def buf(self) -> Buffer:
        """The underlying buffer."""
        return self._buf

    def buffer(self) -> memoryview:
        """A zero-copy memoryview of the whole batch (incl. the log overhead)."""
        return memoryview(self._buf)[self._at:self._at + self.size_in_bytes]

    def to_bytes(self) -> bytes:
        """A copy of the batch bytes."""
        return bytes(self.buffer())

    raw = to_bytes

    def __iter__(self) -> Iterator[Any]:
        return iter(self.records())

    def has_producer_id(self) -> bool:
        return self.producer_id > -1

    def __repr__(self) -> str:
        try:
            return (f"{type(self).__name__}(position={self.position}, magic={self.magic}, "
                    f"base_offset={self.base_offset}, last_offset={self.last_offset}, "
                    f"size_in_bytes={self.size_in_bytes})")
        except KafkalogError:
            return (f"{type(self).__name__}(position={self.position}, magic={self.magic}, "
                    f"size_in_bytes={self.size_in_bytes}, <corrupt>)")


class _ShortHeader(tuple[int, ...]):
    """Stands in for the header of a v2 batch shorter than 61 bytes: any field access raises."""

    position = 0

    def __getitem__(self, i: Any) -> Any:
        raise CorruptRecordError("Record batch is corrupt (the size is smaller than the minimum "
                                 f"allowed overhead {RECORD_BATCH_OVERHEAD})",
                                 position=self.position)


class DefaultRecordBatch(RecordBatch):
    """A magic-2 batch (Kafka's ``DefaultRecordBatch``) inside a buffer.

    Header fields are plain attributes read once; a batch shorter than 61 bytes raises
    :class:`CorruptRecordError` on header access (``base_offset`` excepted).
    """

    __slots__ = ("_h", "_records")

    _h: tuple[int, ...]
    _records: Optional[List[Any]]

    def __init__(self, buf: Buffer, position: int, size_in_bytes: int, magic: int = 2,
                 base: int = 0) -> None:
        RecordBatch.__init__(self, buf, position, size_in_bytes, magic, base)
        self._records = None
        if size_in_bytes >= RECORD_BATCH_OVERHEAD:
            self._h = V2_HEADER.unpack_from(buf, position)
        else:
            h = _ShortHeader()
            h.position = self.position
            self._h = h

    def _reload(self) -> None:
        self._h = V2_HEADER.unpack_from(self._buf, self._at)
        self._records = None

    # --- header fields ------------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        offset: int = _I64.unpack_from(self._buf, self._at)[0]
        return offset

    @property
    def partition_leader_epoch(self) -> int:
        return self._h[2]

    @property
    def checksum(self) -> int:
        """The stored CRC (unsigned)."""
        return self._h[4]

    @property
    def attributes(self) -> int:
        """The attributes (only the low byte is meaningful)."""
        return self._h[5] & 0xFF

    @property
    def last_offset_delta(self) -> int:
        return self._h[6]

    @property
    def last_offset(self) -> int:
        """``baseOffset + lastOffsetDelta`` as Java longs (wraps at 64 bits)."""
        return java_long(self._h[0] + self._h[6])

    @property
    def next_offset(self) -> int:
        """``lastOffset() + 1`` as Java longs."""
        return java_long(self._h[0] + self._h[6] + 1)

    @property
    def base_timestamp(self) -> int:
        """The baseTimestamp field (the delete horizon when ``has_delete_horizon``)."""
        return self._h[7]

    @property
    def max_timestamp(self) -> int:
        return self._h[8]

    @property
    def producer_id(self) -> int:
        return self._h[9]

    @property
    def producer_epoch(self) -> int:
        return self._h[10]

    @property
    def base_sequence(self) -> int:
        return self._h[11]

    @property
    def last_sequence(self) -> int:
        base = self._h[11]
        if base == -1:
            return -1
        return increment_sequence(base, self._h[6])

    @property
    def count(self) -> int:
        """recordsCount as stored."""
        return self._h[12]

    @property
    def compression_id(self) -> int:
        return self._h[5] & COMPRESSION_CODEC_MASK

    @property
    def compression(self) -> CompressionType:
        cid = self._h[5] & COMPRESSION_CODEC_MASK
        if cid > 4:
            raise UnsupportedCompressionTypeError(f"Unknown compression type id: {cid}",
                                                  position=self.position + ATTRIBUTES_OFFSET)
        return CompressionType(cid)

    @property
    def timestamp_type(self) -> TimestampType:
        return (TimestampType.LOG_APPEND_TIME if self._h[5] & TIMESTAMP_TYPE_MASK
                else TimestampType.CREATE_TIME)

    @property
    def is_transactional(self) -> bool:
        return bool(self._h[5] & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self._h[5] & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._h[5] & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> Optional[int]:
        """The delete horizon (KIP-534), or None when the attribute bit is unset."""
        return self._h[7] if self._h[5] & DELETE_HORIZON_FLAG_MASK else None

    # --- validation ---------------------------------------------------------------------------
    def compute_checksum(self) -> int:
        return compute_v2_crc(self._buf, self._at, self.size_in_bytes)

    def is_valid(self) -> bool:
        """Size at least 61 and stored CRC == computed CRC."""
        if self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            return False
        return self._h[4] == self.compute_checksum()

    def ensure_valid(self) -> None:
        """Raise :class:`CorruptRecordError` (naming the position) unless :meth:`is_valid`."""
        if self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"Record batch is corrupt (the size {self.size_in_bytes} is smaller than the "
                f"minimum allowed overhead {RECORD_BATCH_OVERHEAD})", position=self.position)
        computed = self.compute_checksum()
        if self._h[4] != computed:
            raise CorruptRecordError(f"Record is corrupt (stored crc = {self._h[4]}, computed crc = "
                                     f"{computed})", position=self.position)

    # --- records ------------------------------------------------------------------------------
    def records_body(self, max_decompressed_size: Optional[int] = None) -> Buffer:
        """The (decompressed) record bytes of the batch."""
        start = self._at + RECORD_BATCH_OVERHEAD
        end = self._at + self.size_in_bytes
        if not self._h[5] & COMPRESSION_CODEC_MASK:   # uncompressed: no codec lookup
            return memoryview(self._buf)[start:end]
        cid = self.compression.value
        from kafkalog.record import compression
        limit = DEFAULT_MAX_DECOMPRESSED_SIZE if max_decompressed_size is None else max_decompressed_size
        try:
            return compression.decompress(cid, memoryview(self._buf)[start:end], magic=2,
                                          max_size=limit)
        except KafkalogError as e:
            raise e.at(None, self.position + RECORD_BATCH_OVERHEAD) from None

    def records(self, max_decompressed_size: Optional[int] = None) -> List[Any]:
        """The decoded records (kernel ``Record`` objects), cached.

        Raises :class:`InvalidRecordError` (position in the buffer; for compressed batches the
        position of the compressed payload) on a negative or wrong record count, bad record
        structure, or a payload that does not decompress within ``max_decompressed_size``.
        """
        if self._records is not None:
            return self._records
        h = self._h
        count = h[12]
        start = self.position + RECORD_BATCH_OVERHEAD
        if count < 0:
            raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch",
                                     position=self.position + RECORDS_COUNT_OFFSET)
        body = self.records_body(max_decompressed_size)
        lat = h[8] if h[5] & TIMESTAMP_TYPE_MASK else -1
        try:
            recs: List[Any] = kernel.decode_records_v2(body, count, h[0], h[7], h[11], lat)
        except KafkalogError as e:
            if h[5] & COMPRESSION_CODEC_MASK:
                raise type(e)(f"{e.message} (at byte {e.position} of the decompressed records)",
                              position=start) from None
            raise e.at(None, start) from None
        finally:
            if isinstance(body, memoryview):
                body.release()
        self._records = recs
        return recs

    def offset_of_max_timestamp(self) -> Optional[int]:
        """Offset of the first record whose timestamp equals the batch max timestamp."""
        mt = self.max_timestamp
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return self.base_offset
        for r in self.records():
            if r.timestamp == mt:
                offset: int = r.offset
                return offset
        return None

    # --- in-place mutation (MutableRecordBatch) ------------------------------------------------
    def set_last_offset(self, offset: int) -> None:
        """Rewrite baseOffset = ``offset`` - lastOffsetDelta (not covered by the CRC)."""
        _I64.pack_into(self._buf, self._at, offset - self._h[6])
        self._reload()

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Rewrite partitionLeaderEpoch (not covered by the CRC)."""
        _I32.pack_into(self._buf, self._at + PARTITION_LEADER_EPOCH_OFFSET, epoch)
        self._reload()

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Rewrite the timestamp-type bit and maxTimestamp and recompute the CRC (no-op when both
        are unchanged). NoTimestampType is rejected with ValueError."""
        timestamp_type = TimestampType(timestamp_type)
        if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise InvalidArgumentError("Invalid timestamp type NoTimestampType")
        if self.timestamp_type == timestamp_type and self.max_timestamp == max_timestamp:
            return
        attrs = self._h[5]
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= TIMESTAMP_TYPE_MASK
        else:
            attrs &= ~TIMESTAMP_TYPE_MASK
        p = self._at
        struct.pack_into(">h", self._buf, p + ATTRIBUTES_OFFSET, attrs)
        _I64.pack_into(self._buf, p + MAX_TIMESTAMP_OFFSET, max_timestamp)
        _U32.pack_into(self._buf, p + CRC_OFFSET, compute_v2_crc(self._buf, p, self.size_in_bytes))
        self._reload()
