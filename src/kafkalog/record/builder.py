"""Building record sets (Kafka's ``MemoryRecordsBuilder``; spec §1.3-§1.7, §1.9).

* :func:`build_batch` / :class:`BatchBuilder`: a v2 batch (any codec and level, producer id /
  epoch / base sequence, transactional, control, delete horizon (KIP-534), LogAppendTime,
  partition leader epoch) or, for magic 0/1, legacy messages (one entry per record uncompressed,
  one wrapper message when compressed).
* :func:`build_end_txn_marker`: a COMMIT/ABORT control batch (78 bytes).
* :func:`build_empty_batch`: the cleaner's 61-byte header-only batch.

Records are given as ``(key, value)``, ``(key, value, timestamp)`` or ``(key, value, timestamp,
headers)`` tuples, or objects with ``key``/``value``/``timestamp``/``headers`` attributes (e.g.
decoded records). A timestamp of -1 means "no timestamp".
"""
from __future__ import annotations

import struct
from typing import Any, Iterable, List, Optional, Sequence, Tuple

from kafkalog.record import _kernel_py, kernel
from kafkalog.record import compression as _compression
from kafkalog.record.batch import InvalidArgumentError
from kafkalog.record.constants import (
    CONTROL_FLAG_MASK,
    CRC_START,
    DELETE_HORIZON_FLAG_MASK,
    INT32_MAX,
    LEGACY_TIMESTAMP_TYPE_MASK,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    V2_HEADER,
    CompressionType,
    ControlRecordType,
    TimestampType,
)
from kafkalog.record.control import EndTransactionMarker, control_key
from kafkalog.record.crc import Buffer, crc32c
from kafkalog.record.legacy import encode_legacy_message

__all__ = ["BatchBuilder", "build_batch", "build_end_txn_marker", "build_control_batch",
           "build_empty_batch", "build_legacy_records", "write_v2_header"]

_U32 = struct.Struct(">I")


def write_v2_header(body: bytes, *, base_offset: int, attributes: int, last_offset_delta: int,
                    base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
                    base_sequence: int, count: int, partition_leader_epoch: int) -> bytes:
    """A complete v2 batch: the 61-byte header (CRC computed) followed by ``body``."""
    length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)
    header = bytearray(V2_HEADER.pack(base_offset, length, partition_leader_epoch, 2, 0, attributes,
                                      last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                      producer_epoch, base_sequence, count))
    crc = crc32c(body, crc32c(memoryview(header)[CRC_START:]))
    _U32.pack_into(header, 17, crc)
    return bytes(header) + bytes(body)


def v2_header(body: Buffer, *, base_offset: int, attributes: int, last_offset_delta: int,
              base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
              base_sequence: int, count: int, partition_leader_epoch: int) -> bytes:
    """Only the 61-byte header of :func:`write_v2_header` (CRC computed over header and ``body``),
    for writers that write header and body without concatenating them (``os.writev``)."""
    length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)
    header = bytearray(V2_HEADER.pack(base_offset, length, partition_leader_epoch, 2, 0, attributes,
                                      last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                      producer_epoch, base_sequence, count))
    _U32.pack_into(header, 17, crc32c(body, crc32c(memoryview(header)[CRC_START:])))
    return bytes(header)


#: ``(key, value, timestamp, headers)``
_Unpacked = Tuple[Any, Any, int, Any]


def _unpack(rec: Any) -> _Unpacked:
    if isinstance(rec, tuple):
        n = len(rec)
        if n == 4:
            return rec[0], rec[1], rec[2], rec[3]
        if n == 3:
            return rec[0], rec[1], rec[2], None
        if n == 2:
            return rec[0], rec[1], -1, None
        raise InvalidArgumentError(f"A record tuple has 2-4 items, not {n}")
    # a record object of the caller's: duck-typed (key and value required)
    headers, ts = (getattr(rec, n, d) for n, d in (("headers", None), ("timestamp", -1)))    # optional ones
    return rec.key, rec.value, -1 if ts is None else ts, headers


class BatchBuilder:
    """Accumulates records and produces one batch (v2) or legacy message set (v0/v1).

    ``append(key, value, timestamp=-1, headers=None, offset=None)`` adds a record (offset defaults
    to the next one; offsets must increase); ``build() -> bytes`` returns the bytes (``b""`` when
    no record was appended). Arguments follow Kafka's ``MemoryRecordsBuilder``.
    """

    def __init__(self, *, magic: int = 2, compression: CompressionType | int = CompressionType.NONE,
                 compression_level: Optional[int] = None, base_offset: int = 0,
                 timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                 log_append_time: Optional[int] = None, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False,
                 is_control: bool = False, partition_leader_epoch: int = -1,
                 delete_horizon_ms: Optional[int] = None) -> None:
        if magic not in (0, 1, 2):
            raise InvalidArgumentError(f"Invalid magic {magic}")
        compression = CompressionType(compression)
        timestamp_type = TimestampType(timestamp_type)
        if magic < 2:
            if compression == CompressionType.ZSTD:
                raise InvalidArgumentError("ZStandard compression is not supported for magic "
                                           f"{magic}")
            if is_transactional or producer_id != -1 or producer_epoch != -1 or base_sequence != -1:
                raise InvalidArgumentError(f"Idempotent/transactional messages are not supported "
                                           f"for magic {magic}")
            if is_control:
                raise InvalidArgumentError(f"Control records are not supported for magic {magic}")
            if delete_horizon_ms is not None:
                raise InvalidArgumentError("A delete horizon needs magic 2")
        if magic == 0:
            timestamp_type = TimestampType.NO_TIMESTAMP_TYPE
        elif timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise InvalidArgumentError("TimestampType must be set for magic >= 1")
        if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time is None:
            raise InvalidArgumentError("LogAppendTime needs log_append_time")
        if is_transactional and producer_id < 0:
            raise InvalidArgumentError("Cannot write transactional messages without a valid "
                                       "producer ID")
        if producer_id >= 0:
            if producer_epoch < 0:
                raise InvalidArgumentError(f"Invalid negative producer epoch {producer_epoch}")
            if base_sequence < 0 and not is_control:
                raise InvalidArgumentError(f"Invalid negative sequence number used {base_sequence}")
        _compression.validate_level(compression, compression_level)
        self.magic = magic
        self.compression = compression
        self.compression_level = compression_level
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        # typed as the pure-Python encoder, whose API the compiled kernel's implements too
        self._encoder: Optional[_kernel_py.RecordsEncoder] = (
            kernel.RecordsEncoder(delete_horizon_ms, base_offset) if magic == 2 else None)
        self._legacy: List[Tuple[int, Any, Any, int]] = []
        self._last_offset: Optional[int] = None
        self._max_timestamp = -1
        self._offset_of_max = -1
        # v2 data batches: the per-record append goes straight to the (compiled) kernel, which
        # makes the same checks as append() below and tracks last offset / max timestamp.
        if self._encoder is not None and not is_control:
            self.append = self._encoder.append_record  # type: ignore[method-assign]

    @property
    def num_records(self) -> int:
        return self._encoder.count if self._encoder is not None else len(self._legacy)

    @property
    def last_offset(self) -> Optional[int]:
        if self._encoder is not None:
            return self._encoder.last_offset
        return self._last_offset

    def next_offset(self) -> int:
        last = self.last_offset
        return self.base_offset if last is None else last + 1

    def append(self, key: Any, value: Any, timestamp: Optional[int] = -1, headers: Any = None,
               offset: Optional[int] = None) -> None:
        """Append one record (``offset`` defaults to the next offset; must increase)."""
        if offset is None:
            offset = self.next_offset()
        elif self._last_offset is not None and offset <= self._last_offset:
            raise InvalidArgumentError(f"Illegal offset {offset} following previous offset "
                                       f"{self._last_offset} (Offsets must increase monotonically).")
        elif offset < self.base_offset:
            raise InvalidArgumentError(f"Illegal offset {offset}: below the base offset "
                                       f"{self.base_offset}")
        if timestamp is None:
            timestamp = -1
        if timestamp < 0 and timestamp != -1:
            raise InvalidArgumentError(f"Invalid negative timestamp {timestamp}")
        if self.is_control and self.magic == 2:
            if key is None or len(key) < 4:
                raise InvalidArgumentError("Control records must have a 4-byte control key")
            if control_key_type(key) == ControlRecordType.UNKNOWN:
                raise InvalidArgumentError("Cannot append a control record of UNKNOWN type")
        if self.magic == 2:
            delta = offset - self.base_offset
            if delta > INT32_MAX:
                raise InvalidArgumentError(f"Offset {offset} is too far from the base offset "
                                           f"{self.base_offset}")
            assert self._encoder is not None            # magic 2 always has one
            self._encoder.append_record(key, value, timestamp, headers, offset)
        else:
            if headers:
                raise InvalidArgumentError("Magic v0/v1 messages do not support record headers")
            self._legacy.append((offset, key, value, timestamp))
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
            self._offset_of_max = offset
        self._last_offset = offset

    def extend(self, records: Iterable[Any]) -> None:
        """Append every record of ``records`` (tuples or record-like objects)."""
        for rec in records:
            key, value, ts, headers = _unpack(rec)
            self.append(key, value, ts, headers)

    @property
    def max_timestamp(self) -> int:
        """The batch max timestamp (the log-append time for LogAppendTime)."""
        if self.log_append_time is not None and self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return self.log_append_time
        if self._encoder is not None:
            return self._encoder.max_timestamp
        return self._max_timestamp

    def build(self) -> bytes:
        """The bytes of the batch (v2) or of the legacy messages; ``b""`` when empty."""
        if self.num_records == 0:
            return b""
        if self.magic == 2:
            return self._build_v2()
        return self._build_legacy()

    def _build_v2(self) -> bytes:
        enc = self._encoder
        last = self.last_offset
        assert enc is not None and last is not None         # magic 2, at least one record
        base_ts = enc.base_timestamp
        assert base_ts is not None                           # set by the first record
        body = enc.finish()
        if self.compression != CompressionType.NONE:
            body = _compression.compress(self.compression, body, magic=2,
                                         level=self.compression_level)
        attrs = int(self.compression)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attrs |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attrs |= CONTROL_FLAG_MASK
        if self.delete_horizon_ms is not None:
            attrs |= DELETE_HORIZON_FLAG_MASK
        return write_v2_header(body, base_offset=self.base_offset, attributes=attrs,
                               last_offset_delta=last - self.base_offset,
                               base_timestamp=base_ts, max_timestamp=self.max_timestamp,
                               producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                               base_sequence=self.base_sequence, count=enc.count,
                               partition_leader_epoch=self.partition_leader_epoch)

    def _build_legacy(self) -> bytes:
        magic = self.magic
        lat_ts = self.log_append_time
        lat = lat_ts is not None and self.timestamp_type == TimestampType.LOG_APPEND_TIME
        ts_attr = LEGACY_TIMESTAMP_TYPE_MASK if (magic == 1 and lat) else 0
        if self.compression == CompressionType.NONE:
            out = bytearray()
            for offset, key, value, ts in self._legacy:
                out += encode_legacy_message(offset, magic, key, value,
                                             timestamp=lat_ts if lat_ts is not None and lat else ts,
                                             attributes=ts_attr)
            return bytes(out)
        first = self._legacy[0][0]
        inner = bytearray()
        for offset, key, value, ts in self._legacy:
            inner += encode_legacy_message(offset - first if magic == 1 else offset, magic, key,
                                           value, timestamp=lat_ts if lat_ts is not None and lat else ts,
                                           attributes=ts_attr)
        payload = _compression.compress(self.compression, bytes(inner), magic=magic,
                                        level=self.compression_level)
        wrapper_ts = lat_ts if lat_ts is not None and lat else self._max_timestamp
        assert self._last_offset is not None
        return encode_legacy_message(self._last_offset, magic, None, payload,
                                     timestamp=wrapper_ts if magic == 1 else -1,
                                     attributes=int(self.compression) | ts_attr)


def control_key_type(key: Buffer) -> ControlRecordType:
    from kafkalog.record.control import control_record_type
    return control_record_type(bytes(key))


def build_batch(records: Iterable[Any], *, magic: int = 2,
                compression: CompressionType | int = CompressionType.NONE,
                compression_level: Optional[int] = None, base_offset: int = 0,
                offsets: Optional[Sequence[int]] = None,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                log_append_time: Optional[int] = None, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, is_transactional: bool = False,
                is_control: bool = False, partition_leader_epoch: int = -1,
                delete_horizon_ms: Optional[int] = None) -> bytes:
    """Build one v2 batch (or v0/v1 messages) from ``records``; ``offsets`` gives each record's
    absolute offset (default ``base_offset + i``). Returns ``b""`` for no records."""
    b = BatchBuilder(magic=magic, compression=compression, compression_level=compression_level,
                     base_offset=base_offset, timestamp_type=timestamp_type,
                     log_append_time=log_append_time, producer_id=producer_id,
                     producer_epoch=producer_epoch, base_sequence=base_sequence,
                     is_transactional=is_transactional, is_control=is_control,
                     partition_leader_epoch=partition_leader_epoch,
                     delete_horizon_ms=delete_horizon_ms)
    for i, rec in enumerate(records):
        key, value, ts, headers = _unpack(rec)
        b.append(key, value, ts, headers, None if offsets is None else offsets[i])
    return b.build()


def build_legacy_records(records: Iterable[Any], *, magic: int = 1, **kwargs: Any) -> bytes:
    """v0/v1 messages (``build_batch`` with ``magic`` 0 or 1)."""
    return build_batch(records, magic=magic, **kwargs)


def build_control_batch(control_type: ControlRecordType, value: Optional[bytes], *, timestamp: int,
                        producer_id: int, producer_epoch: int, base_offset: int = 0,
                        is_transactional: bool = True, partition_leader_epoch: int = -1) -> bytes:
    """A control batch with one control record of ``control_type``."""
    b = BatchBuilder(base_offset=base_offset, producer_id=producer_id,
                     producer_epoch=producer_epoch, base_sequence=-1,
                     is_transactional=is_transactional, is_control=True,
                     partition_leader_epoch=partition_leader_epoch)
    b.append(control_key(control_type), value, timestamp)
    return b.build()


def build_end_txn_marker(marker: EndTransactionMarker | ControlRecordType, *, producer_id: int,
                         producer_epoch: int, timestamp: int, coordinator_epoch: int = 0,
                         base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """A COMMIT/ABORT marker batch: transactional + control (attributes 0x30), baseSequence -1,
    one 17-byte record; 78 bytes in all."""
    if not isinstance(marker, EndTransactionMarker):
        marker = EndTransactionMarker(ControlRecordType(marker), coordinator_epoch)
    if producer_id < 0:
        raise InvalidArgumentError("End transaction marker requires a valid producerId")
    return build_control_batch(marker.control_type, marker.value(), timestamp=timestamp,
                               producer_id=producer_id, producer_epoch=producer_epoch,
                               base_offset=base_offset, is_transactional=True,
                               partition_leader_epoch=partition_leader_epoch)


def build_empty_batch(*, base_offset: int, last_offset: int, producer_id: int = -1,
                      producer_epoch: int = -1, base_sequence: int = -1,
                      timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                      max_timestamp: int = -1, partition_leader_epoch: int = -1,
                      is_transactional: bool = False, is_control: bool = False) -> bytes:
    """The cleaner's empty batch (``DefaultRecordBatch.writeEmptyHeader``): 61 bytes, count 0,
    baseTimestamp -1, no compression, no delete horizon."""
    delta = last_offset - base_offset
    if not 0 <= delta <= INT32_MAX:
        raise InvalidArgumentError(f"Invalid offsets base {base_offset} last {last_offset}")
    attrs = 0
    if TimestampType(timestamp_type) == TimestampType.LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attrs |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attrs |= CONTROL_FLAG_MASK
    return write_v2_header(b"", base_offset=base_offset, attributes=attrs, last_offset_delta=delta,
                           base_timestamp=-1, max_timestamp=max_timestamp, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence, count=0,
                           partition_leader_epoch=partition_leader_epoch)
