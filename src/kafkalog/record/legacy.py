"""Legacy messages (magic 0 and 1) and compressed wrapper messages (spec §1.3, §1.4).

:class:`LegacyRecordBatch` is the view of one shallow legacy entry (Kafka's
``AbstractLegacyRecordBatch``): an uncompressed message holds one record, a compressed wrapper
holds an inner message set (inner offsets absolute in v0, relative in v1, wrapper offset = last
inner offset, wrapper offset 0 tolerated). :class:`LegacyRecord` is one decoded message.
:func:`encode_legacy_message` writes one entry (offset, size, CRC-32, message).
"""
from __future__ import annotations

import struct
from typing import Any, List, Optional, Tuple

from kafkalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkalogError,
    UnsupportedCompressionTypeError,
    UnsupportedMagicError,
)
from kafkalog.record.batch import DEFAULT_MAX_DECOMPRESSED_SIZE, InvalidArgumentError, RecordBatch
from kafkalog.record.constants import (
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_COMPRESSION_CODEC_MASK,
    LEGACY_CRC_OFFSET,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LEGACY_TIMESTAMP_TYPE_MASK,
    LOG_OVERHEAD,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    CompressionType,
    TimestampType,
)
from kafkalog.record.crc import Buffer, crc32

__all__ = ["LegacyRecordBatch", "LegacyRecord", "encode_legacy_message", "legacy_record_size"]

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_HDR = struct.Struct(">qiIbb")   # offset, size, crc, magic, attributes
_I64_AT = struct.Struct(">q")


class LegacyRecord:
    """One v0/v1 message: the attributes of the kernel ``Record`` plus ``checksum`` (stored CRC),
    ``magic`` and ``attributes``. ``size_in_bytes`` is the entry size incl. the log overhead."""

    __slots__ = ("offset", "timestamp", "key", "value", "sequence", "size_in_bytes", "checksum",
                 "magic", "attributes", "_valid")

    def __init__(self, offset: int, timestamp: int, key: Optional[bytes], value: Optional[bytes],
                 size_in_bytes: int, checksum: int, magic: int, attributes: int,
                 valid: Optional[bool] = None) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.sequence = -1
        self.size_in_bytes = size_in_bytes
        self.checksum = checksum
        self.magic = magic
        self.attributes = attributes
        self._valid = valid

    @property
    def headers(self) -> List[Any]:
        """Legacy messages have no headers."""
        return []

    @property
    def has_key(self) -> bool:
        return self.key is not None

    @property
    def has_value(self) -> bool:
        return self.value is not None

    def is_valid(self) -> bool:
        return bool(self._valid)

    def __repr__(self) -> str:
        return (f"LegacyRecord(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, magic={self.magic}, checksum={self.checksum})")

    def __eq__(self, other: object) -> bool:
        o: Any = other            # any record (v2 records compare equal on the same fields)
        try:
            return bool(self.offset == o.offset and self.timestamp == o.timestamp
                        and self.key == o.key and self.value == o.value)
        except AttributeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def legacy_record_size(magic: int, key: Optional[bytes], value: Optional[bytes]) -> int:
    """Message size (without the 12-byte log overhead) of a v0/v1 message."""
    return ((RECORD_OVERHEAD_V0 if magic == 0 else RECORD_OVERHEAD_V1)
            + (len(key) if key is not None else 0) + (len(value) if value is not None else 0))


def encode_legacy_message(offset: int, magic: int, key: Optional[Buffer], value: Optional[Buffer], *,
                          timestamp: int = -1,
                          attributes: int = 0) -> bytes:
    """One legacy entry: offset, size, CRC-32 over magic..end, magic, attributes, [timestamp],
    key and value (length -1 for None)."""
    if magic not in (0, 1):
        raise UnsupportedMagicError(f"Invalid magic {magic} for a legacy message")
    key = None if key is None else bytes(key)
    value = None if value is None else bytes(value)
    body = bytearray()
    body += struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += _I64.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(part))
            body += part
    crc = crc32(body)
    return _I64.pack(offset) + _I32.pack(len(body) + 4) + _U32.pack(crc) + bytes(body)


def _parse_message(buf: Buffer, p: int, size: int, where: int
                   ) -> Tuple[int, int, int, int, int, Optional[bytes], Optional[bytes]]:
    """Parse the legacy entry at ``p`` (entry size ``size``); returns ``(offset, crc, magic,
    attributes, timestamp, key, value)``. ``where`` is the position reported in errors."""
    if size < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
        raise CorruptRecordError(f"Record is corrupt (crc could not be retrieved as the record is "
                                 f"too small, size = {size - LOG_OVERHEAD})", position=where)
    offset, _length, crc, magic, attributes = _HDR.unpack_from(buf, p)
    end = p + size
    q = p + 18
    if magic == 0:
        timestamp = -1
    else:
        if size < LOG_OVERHEAD + RECORD_OVERHEAD_V1:
            raise InvalidRecordError(f"Message of magic {magic} is too small ({size - LOG_OVERHEAD}"
                                     f" bytes) for its header", position=where)
        timestamp = _I64_AT.unpack_from(buf, q)[0]
        q += 8
    klen = _I32.unpack_from(buf, q)[0]
    q += 4
    if klen >= 0:
        if klen > end - q - 4:
            raise InvalidRecordError(f"Invalid key size {klen}: only {end - q} bytes remain in the "
                                     f"message", position=where + (q - p) - 4)
        key = bytes(buf[q:q + klen])
        q += klen
    else:
        key = None
    vlen = _I32.unpack_from(buf, q)[0]
    q += 4
    if vlen >= 0:
        if vlen > end - q:
            raise InvalidRecordError(f"Invalid value size {vlen}: only {end - q} bytes remain in "
                                     f"the message", position=where + (q - p) - 4)
        value = bytes(buf[q:q + vlen])
    else:
        value = None
    return offset, crc, magic, attributes, timestamp, key, value


class LegacyRecordBatch(RecordBatch):
    """A shallow v0/v1 entry: one message, or a compressed wrapper around an inner message set."""

    __slots__ = ("_offset", "_crc", "_attributes", "_timestamp", "_records")
    _offset: int
    _crc: int
    _attributes: int
    _timestamp: int
    _records: Optional[List[LegacyRecord]]

    def __init__(self, buf: Buffer, position: int, size_in_bytes: int, magic: int,
                 base: int = 0) -> None:
        RecordBatch.__init__(self, buf, position, size_in_bytes, magic, base)
        self._load()

    def _load(self) -> None:
        buf, p = self._buf, self._at
        self._offset, _len, self._crc, _m, self._attributes = _HDR.unpack_from(buf, p)
        if self.magic != 0 and self.size_in_bytes >= LOG_OVERHEAD + RECORD_OVERHEAD_V1:
            self._timestamp = _I64_AT.unpack_from(buf, p + LEGACY_TIMESTAMP_OFFSET)[0]
        else:
            self._timestamp = -1
        self._records = None

    # --- header fields (Kafka's AbstractLegacyRecordBatch) -------------------------------------
    @property
    def last_offset(self) -> int:
        return self._offset

    @property
    def next_offset(self) -> int:
        return self._offset + 1

    @property
    def base_offset(self) -> int:
        """The first offset; for a compressed wrapper this decompresses the inner set."""
        if self._attributes & LEGACY_COMPRESSION_CODEC_MASK == 0:
            return self._offset
        return self.records()[0].offset

    @property
    def count(self) -> None:
        """Legacy entries do not store a record count (Kafka's ``countOrNull`` is null)."""
        return None

    @property
    def checksum(self) -> int:
        return self._crc

    @property
    def attributes(self) -> int:
        return self._attributes & 0xFF

    @property
    def compression_id(self) -> int:
        return self._attributes & LEGACY_COMPRESSION_CODEC_MASK

    @property
    def compression(self) -> CompressionType:
        cid = self._attributes & LEGACY_COMPRESSION_CODEC_MASK
        if cid > 4:
            raise UnsupportedCompressionTypeError(f"Unknown compression type id: {cid}",
                                                  position=self.position + LEGACY_ATTRIBUTES_OFFSET)
        return CompressionType(cid)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return (TimestampType.LOG_APPEND_TIME if self._attributes & LEGACY_TIMESTAMP_TYPE_MASK
                else TimestampType.CREATE_TIME)

    @property
    def max_timestamp(self) -> int:
        return self._timestamp

    @property
    def timestamp(self) -> int:
        return self._timestamp

    producer_id = property(lambda self: -1)
    producer_epoch = property(lambda self: -1)
    base_sequence = property(lambda self: -1)
    last_sequence = property(lambda self: -1)
    partition_leader_epoch = property(lambda self: -1)
    is_transactional = property(lambda self: False)
    is_control = property(lambda self: False)
    delete_horizon_ms = property(lambda self: None)
    has_delete_horizon = property(lambda self: False)

    # --- validation ---------------------------------------------------------------------------
    def compute_checksum(self) -> int:
        mv = memoryview(self._buf)
        try:
            return crc32(mv[self._at + LEGACY_MAGIC_OFFSET:self._at + self.size_in_bytes])
        finally:
            mv.release()

    def is_valid(self) -> bool:
        return (self.size_in_bytes >= LOG_OVERHEAD + RECORD_OVERHEAD_V0
                and self._crc == self.compute_checksum())

    def ensure_valid(self) -> None:
        if self.size_in_bytes < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"Record is corrupt (crc could not be retrieved as the record is too small, size = "
                f"{self.size_in_bytes - LOG_OVERHEAD})", position=self.position)
        computed = self.compute_checksum()
        if computed != self._crc:
            raise CorruptRecordError(f"Record is corrupt (stored crc = {self._crc}, computed crc = "
                                     f"{computed})", position=self.position)

    # --- records ------------------------------------------------------------------------------
    def records(self, max_decompressed_size: Optional[int] = None) -> List[LegacyRecord]:
        """The records: the message itself, or the inner messages of a compressed wrapper with
        absolute offsets and (LogAppendTime) the wrapper's timestamp. Cached."""
        if self._records is not None:
            return self._records
        offset, crc, magic, attrs, ts, key, value = _parse_message(self._buf, self._at,
                                                                   self.size_in_bytes, self.position)
        cid = attrs & LEGACY_COMPRESSION_CODEC_MASK
        if cid == 0:
            recs = [LegacyRecord(offset, ts, key, value, self.size_in_bytes, crc, magic, attrs)]
        else:
            recs = self._deep_records(cid, ts, value, max_decompressed_size)
        self._records = recs
        return recs

    def _deep_records(self, cid: int, wrapper_ts: int, value: Optional[bytes],
                      max_decompressed_size: Optional[int]) -> List[LegacyRecord]:
        p = self.position
        if cid == 4 or cid > 4:
            raise UnsupportedCompressionTypeError(
                f"Invalid wrapper compressionType found in legacy deep record iterator {cid}",
                position=p + LEGACY_ATTRIBUTES_OFFSET)
        if value is None:
            raise InvalidRecordError("Found invalid compressed record set with null value",
                                     position=p)
        from kafkalog.record import compression
        limit = DEFAULT_MAX_DECOMPRESSED_SIZE if max_decompressed_size is None else max_decompressed_size
        value_pos = p + self.size_in_bytes - len(value)
        try:
            data = compression.decompress(cid, value, magic=self.magic, max_size=limit)
        except KafkalogError as e:
            raise e.at(None, value_pos) from None
        log_append = self.magic > 0 and bool(self._attributes & LEGACY_TIMESTAMP_TYPE_MASK)
        inner = []
        pos, n = 0, len(data)
        while n - pos >= LOG_OVERHEAD:
            size = _I32.unpack_from(data, pos + 8)[0]
            if size < RECORD_OVERHEAD_V0:
                raise CorruptRecordError(
                    f"Record size {size} is less than the minimum record overhead "
                    f"({RECORD_OVERHEAD_V0}) (at byte {pos} of the decompressed wrapper value)",
                    position=value_pos)
            if pos + LOG_OVERHEAD + size > n:
                break  # partial trailing inner message: DataLogInputStream stops
            try:
                offset, crc, magic, attrs, ts, key, val = _parse_message(data, pos,
                                                                         size + LOG_OVERHEAD, pos)
            except KafkalogError as e:
                raise type(e)(f"{e.message} (at byte {e.position} of the decompressed wrapper "
                              f"value)", position=value_pos) from None
            if attrs & LEGACY_COMPRESSION_CODEC_MASK:
                raise InvalidRecordError("Compressed outer record should not have an inner record "
                                         "with a compression attribute set", position=value_pos)
            if log_append:
                ts = wrapper_ts
            inner.append(LegacyRecord(offset, ts, key, val, size + LOG_OVERHEAD, crc, magic, attrs))
            pos += LOG_OVERHEAD + size
        if not inner:
            raise InvalidRecordError("Found invalid compressed record set with no inner records",
                                     position=p)
        if self.magic > 0:
            wrapper_offset = self._offset
            last_relative = inner[-1].offset
            if wrapper_offset == 0:
                base = 0
            else:
                if wrapper_offset < last_relative:
                    raise InvalidRecordError(
                        f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                        f"'{wrapper_offset}' is less than the last inner message offset "
                        f"'{last_relative}' and it is not zero.", position=p)
                base = wrapper_offset - last_relative
            for r in inner:
                r.offset = base + r.offset
        return inner

    def offset_of_max_timestamp(self) -> Optional[int]:
        if self.magic == 0:
            return None
        for r in self.records():
            if r.timestamp == self._timestamp:
                return r.offset
        return None

    # --- mutation -------------------------------------------------------------------------------
    def set_last_offset(self, offset: int) -> None:
        """Rewrite the (wrapper) offset; v1 inner relative offsets follow."""
        _I64.pack_into(self._buf, self._at, offset)
        self._load()

    def set_partition_leader_epoch(self, epoch: int) -> None:
        raise UnsupportedMagicError(f"Magic versions prior to 2 do not support partition leader "
                                    f"epoch (magic {self.magic})", position=self.position)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """v1 only: rewrite the timestamp-type bit and timestamp and recompute the CRC."""
        if self.magic == 0:
            raise UnsupportedMagicError("Cannot set timestamp for a record with magic = 0",
                                        position=self.position)
        timestamp_type = TimestampType(timestamp_type)
        if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise InvalidArgumentError("Invalid timestamp type NoTimestampType")
        if self.timestamp_type == timestamp_type and self._timestamp == max_timestamp:
            return
        attrs = self._attributes & ~LEGACY_TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= LEGACY_TIMESTAMP_TYPE_MASK
        p = self._at
        struct.pack_into(">b", self._buf, p + LEGACY_ATTRIBUTES_OFFSET, attrs)
        _I64.pack_into(self._buf, p + LEGACY_TIMESTAMP_OFFSET, max_timestamp)
        _U32.pack_into(self._buf, p + LEGACY_CRC_OFFSET, self.compute_checksum())
        self._load()
