"""Pure-Python twin of the record codec kernel: the per-record loops of v2 records (spec §1.6).

Same API and behaviour as the compiled ``_kernel.pyx`` (docs/design.md "Kernels");
:mod:`kafkalog.record.kernel` selects one of the two for the whole process. Written for clarity first, with a fast path
for the common one-byte varints.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, SupportsInt

from kafkalog.errors import InvalidArgumentError, InvalidRecordError
from kafkalog.record.constants import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, increment_sequence
from kafkalog.record.crc import Buffer
from kafkalog.record.varint import (
    read_varint,
    read_varlong,
    write_varint,
    write_varlong,
)

__all__ = [
    "IMPLEMENTATION",
    "Record",
    "RecordsEncoder",
    "decode_records_v2",
    "encode_records_v2",
    "murmur2",
    "partition_for_key",
    "read_varint",
    "read_varlong",
    "write_varint",
    "write_varlong",
]

IMPLEMENTATION = "python"

_M64 = 0xFFFFFFFFFFFFFFFF

#: a decoded record header: ``(key, value)``, the value None for a null header value
Header = tuple[str, bytes | None]
#: a record header to encode: the key as str (UTF-8) or bytes, the value bytes or None
HeaderIn = tuple[str | Buffer, Buffer | None]
#: a record to encode: ``(key, value, timestamp, headers)``
RecordIn = tuple[Buffer | None, Buffer | None, SupportsInt, Iterable[HeaderIn] | None]


def _to_int64(v: int) -> int:
    v &= _M64
    return v - (1 << 64) if v >= (1 << 63) else v


class Record:
    """One record of a batch (v2; the legacy layer fills the same attributes for v0/v1).

    ``offset``, ``timestamp``, ``key`` (bytes or None), ``value`` (bytes or None), ``headers``
    (list of ``(str, bytes | None)``), ``sequence`` (-1 without producer sequence), ``size_in_bytes``
    (encoded size incl. the length varint for v2; message size for v0/v1).
    """

    __slots__ = ("_headers", "key", "offset", "sequence", "size_in_bytes", "timestamp", "value")

    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: list[Header] | None = None, sequence: int = -1,
                 size_in_bytes: int = 0) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self._headers = headers
        self.sequence = sequence
        self.size_in_bytes = size_in_bytes

    @property
    def headers(self) -> list[Header]:
        if self._headers is None:
            self._headers = []
        return self._headers

    @headers.setter
    def headers(self, value: list[Header]) -> None:
        self._headers = value

    @property
    def has_key(self) -> bool:
        return self.key is not None

    @property
    def has_value(self) -> bool:
        return self.value is not None

    def __repr__(self) -> str:
        return (f"Record(offset={self.offset!r}, timestamp={self.timestamp!r}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}, sequence={self.sequence!r}, "
                f"size_in_bytes={self.size_in_bytes!r})")

    def __eq__(self, other: object) -> bool:
        o: Any = other          # any object with the record attributes (e.g. the compiled Record)
        try:
            return (self.offset == o.offset and self.timestamp == o.timestamp
                    and self.key == o.key and self.value == o.value
                    and list(self.headers) == list(o.headers)
                    and self.sequence == o.sequence
                    and self.size_in_bytes == o.size_in_bytes)
        except AttributeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[Record], tuple[int, int, bytes | None, bytes | None,
                                                      list[Header], int, int]]:
        return (Record, (self.offset, self.timestamp, self.key, self.value, self.headers,
                         self.sequence, self.size_in_bytes))


def _next_sequence(base: int, delta: int) -> int:
    """A record's sequence: DefaultRecordBatch.incrementSequence(baseSequence, offsetDelta)."""
    if base == -1:
        return -1
    return increment_sequence(base, delta)


def _int32(v: SupportsInt, what: str) -> int:
    v = int(v)
    if not INT32_MIN <= v <= INT32_MAX:
        raise InvalidRecordError(f"{what} {v} does not fit in a 32-bit varint")
    return v


def _int64(v: SupportsInt, what: str) -> int:
    v = int(v)
    if not INT64_MIN <= v <= INT64_MAX:
        raise InvalidRecordError(f"{what} {v} does not fit in a 64-bit varlong")
    return v


def _varint_at(buf: Buffer, pos: int, end: int, what: str) -> tuple[int, int]:
    """``read_varint`` with the one-byte form inline (the common case)."""
    if pos < end and buf[pos] < 0x80:
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    return read_varint(buf, pos, end, what)


def _record_head(buf: Buffer, pos: int, n: int
                 ) -> tuple[int, int, int, int, int, int, int, int, int, int, int]:
    """Parse the v2 record at ``pos`` up to its header count (Kafka's DefaultRecord.readFrom
    checks; the twin of ``_rd_record_head`` in ``_wire.pxd``). Returns ``(rend, length, ts_pos,
    ts_delta, after_ts, offset_delta, kstart, klen, vstart, vlen, hpos)``; raises
    :class:`InvalidRecordError` positioned in ``buf``."""
    rstart = pos
    length, pos = _varint_at(buf, pos, n, "record length")
    if length < 0 or length > n - pos:
        raise InvalidRecordError(
            f"Invalid record size: expected {length} bytes in record payload, but instead "
            f"the buffer has only {n - pos} remaining bytes.", position=rstart)
    rend = pos + length
    if pos >= rend:
        raise InvalidRecordError("Found invalid record structure: buffer underflow reading "
                                 "attributes", position=pos)
    ts_pos = pos + 1
    if ts_pos < rend and buf[ts_pos] < 0x80:
        b = buf[ts_pos]
        ts_delta, pos = (b >> 1) ^ -(b & 1), ts_pos + 1
    else:
        ts_delta, pos = read_varlong(buf, ts_pos, rend, "timestamp delta")
    after_ts = pos
    offset_delta, pos = _varint_at(buf, pos, rend, "offset delta")
    klen, pos = _varint_at(buf, pos, rend, "key length")
    kstart = pos
    if klen >= 0:
        if klen > rend - pos:
            raise InvalidRecordError(
                f"Found invalid record structure: key length {klen} exceeds the "
                f"{rend - pos} bytes left in the record", position=pos)
        pos += klen
    vlen, pos = _varint_at(buf, pos, rend, "value length")
    vstart = pos
    if vlen >= 0:
        if vlen > rend - pos:
            raise InvalidRecordError(
                f"Found invalid record structure: value length {vlen} exceeds the "
                f"{rend - pos} bytes left in the record", position=pos)
        pos += vlen
    return (rend, length, ts_pos, ts_delta, after_ts, offset_delta, kstart, klen, vstart, vlen,
            pos)


def _record_headers(buf: Buffer, pos: int, rend: int) -> tuple[list[Header] | None, int]:
    """The header section at ``pos``: ``(None or [(str, bytes | None)], end position)`` (the twin
    of ``_rd_headers`` in ``_wire.pxd``)."""
    nheaders, pos = _varint_at(buf, pos, rend, "header count")
    if nheaders == 0:
        return None, pos
    if nheaders < 0:
        raise InvalidRecordError(f"Found invalid number of record headers {nheaders}",
                                 position=pos)
    if nheaders > rend - pos:
        raise InvalidRecordError(
            f"Found invalid number of record headers. {nheaders} is larger than the "
            f"remaining size of the buffer", position=pos)
    headers: list[Header] = []
    for _ in range(nheaders):
        hklen, pos = read_varint(buf, pos, rend, "header key length")
        if hklen < 0:
            raise InvalidRecordError(f"Invalid negative header key size {hklen}", position=pos)
        if hklen > rend - pos:
            raise InvalidRecordError(
                f"Found invalid record structure: header key length {hklen} exceeds the "
                f"{rend - pos} bytes left in the record", position=pos)
        hkey = bytes(buf[pos:pos + hklen]).decode("utf-8", "replace")
        pos += hklen
        hvlen, pos = read_varint(buf, pos, rend, "header value length")
        if hvlen >= 0:
            if hvlen > rend - pos:
                raise InvalidRecordError(
                    f"Found invalid record structure: header value length {hvlen} exceeds "
                    f"the {rend - pos} bytes left in the record", position=pos)
            hvalue: bytes | None = bytes(buf[pos:pos + hvlen])
            pos += hvlen
        else:
            hvalue = None
        headers.append((hkey, hvalue))
    return headers, pos


def decode_records_v2(body: Buffer, count: int, base_offset: int, base_timestamp: int,
                      base_sequence: int, log_append_time: int) -> list[Record]:
    """Decode ``count`` v2 records from ``body`` (the uncompressed records of one batch).

    ``log_append_time >= 0`` replaces every record's timestamp. Raises :class:`InvalidRecordError`
    (``position`` relative to the start of ``body``) on any structural problem and when ``count``
    disagrees with the data.
    """
    base_offset = _int64(base_offset, "base_offset")
    base_timestamp = _int64(base_timestamp, "base_timestamp")
    log_append_time = _int64(log_append_time, "log_append_time")
    base_sequence = _int32(base_sequence, "base_sequence")
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    if not isinstance(body, bytes):
        body = bytes(body)
    buf = body
    n = len(buf)
    if count > n // 7:
        raise InvalidRecordError(
            f"Found invalid record structure: expected {count} records in {n} bytes", position=n)
    out: list[Record] = []
    append = out.append
    pos = 0
    for i in range(count):
        rstart = pos
        if pos >= n:
            raise InvalidRecordError(
                f"Found invalid record structure: expected {count} records but found only {i}",
                position=pos)
        (rend, length, _ts_pos, ts_delta, _after_ts, offset_delta, kstart, klen, vstart, vlen,
         pos) = _record_head(buf, pos, n)
        key = buf[kstart:kstart + klen] if klen >= 0 else None
        value = buf[vstart:vstart + vlen] if vlen >= 0 else None
        if pos + 1 == rend and buf[pos] == 0:     # no headers: the common case
            headers = None
            pos = rend
        else:
            headers, pos = _record_headers(buf, pos, rend)
        if pos != rend:
            raise InvalidRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, but "
                f"instead read {pos - (rend - length)}", position=pos)
        if log_append_time >= 0:
            ts = log_append_time
        else:
            ts = base_timestamp + ts_delta
            if not INT64_MIN <= ts <= INT64_MAX:
                ts = _to_int64(ts)
        if base_sequence == -1:
            seq = -1
        else:
            seq = _next_sequence(base_sequence, offset_delta)
        off = base_offset + offset_delta            # Java long arithmetic
        if not INT64_MIN <= off <= INT64_MAX:
            off = _to_int64(off)
        append(Record(off, ts, key, value, headers, seq, rend - rstart))
    if pos != n:
        raise InvalidRecordError(
            f"Incorrect declared batch size, records still remaining in file "
            f"({n - pos} bytes after {count} records)", position=pos)
    return out


def _to_bytes(x: Buffer) -> bytes:
    if type(x) is bytes:
        return x
    if isinstance(x, str):
        raise TypeError("record keys and values must be bytes-like or None, not str")
    return bytes(memoryview(x))


def _as_bytes_like(x: Buffer | None) -> bytes | None:
    return None if x is None else _to_bytes(x)


def _normalise_headers(headers: Iterable[HeaderIn] | None) -> list[tuple[bytes, bytes | None]] | None:
    if not headers:
        return None
    out = []
    for hk, hv in headers:
        if hk is None:
            raise InvalidRecordError("Invalid null header key found in headers")
        out.append((hk.encode("utf-8") if isinstance(hk, str) else _to_bytes(hk),
                    _as_bytes_like(hv)))
    return out


def _encode_one(out: bytearray, key_in: Buffer | None, value_in: Buffer | None, ts_delta: int,
                offset_delta: int, headers: Iterable[HeaderIn] | None) -> int:
    """Append one encoded record to ``out``; returns its encoded size."""
    key = _as_bytes_like(key_in)
    value = _as_bytes_like(value_in)
    hlist = _normalise_headers(headers)
    parts = [b"\x00", write_varlong(ts_delta), write_varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")
    else:
        parts.append(write_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        parts.append(write_varint(len(value)))
        parts.append(value)
    if hlist is None:
        parts.append(b"\x00")
    else:
        parts.append(write_varint(len(hlist)))
        for hk, hv in hlist:
            parts.append(write_varint(len(hk)))
            parts.append(hk)
            if hv is None:
                parts.append(b"\x01")
            else:
                parts.append(write_varint(len(hv)))
                parts.append(hv)
    body = b"".join(parts)
    if len(body) > INT32_MAX:
        raise InvalidRecordError(f"record is too large to encode ({len(body)} bytes)")
    head = write_varint(len(body))
    out += head
    out += body
    return len(head) + len(body)


def encode_records_v2(records: Iterable[RecordIn], base_timestamp: int,
                      offset_deltas: Sequence[int] | None = None) -> bytes:
    """Encode ``records`` (sequence of ``(key, value, timestamp, headers)``) as v2 record bodies.

    Offset delta ``i`` (or ``offset_deltas[i]``); timestamp deltas relative to ``base_timestamp``.
    Returns the concatenated, uncompressed record bytes.
    """
    base_timestamp = _int64(base_timestamp, "base_timestamp")
    if not isinstance(records, (list, tuple)):
        records = list(records)
    n = len(records)
    if offset_deltas is not None and len(offset_deltas) != n:
        raise InvalidRecordError(f"{len(offset_deltas)} offset deltas for {n} records")
    out = bytearray()
    for i, (key, value, ts, headers) in enumerate(records):
        ts_delta = _to_int64(_int64(ts, "timestamp") - base_timestamp)
        od = i if offset_deltas is None else _int32(offset_deltas[i], "offset delta")
        _encode_one(out, key, value, ts_delta, od, headers)
    return bytes(out)


class RecordsEncoder:
    """Appends v2 records one at a time (the batch builder's hot path).

    ``RecordsEncoder(base_timestamp=None)``: timestamp deltas are relative to ``base_timestamp``,
    or to the first appended record's timestamp when None (Kafka's MemoryRecordsBuilder).
    ``append(key, value, timestamp, headers=None, offset_delta=None) -> int`` encodes one record
    and returns its encoded size; ``finish() -> bytes`` returns the concatenated bodies.
    """

    def __init__(self, base_timestamp: int | None = None, base_offset: int = 0) -> None:
        self._buf = bytearray()
        self._count = 0
        self._max_ts = -1
        self._last_delta = -1
        self._base_ts = None if base_timestamp is None else _int64(base_timestamp, "base_timestamp")
        self._base_offset = _int64(base_offset, "base_offset")
        self._last_offset: int | None = None
        self._offset_of_max = -1

    def append_record(self, key: Buffer | None, value: Buffer | None, timestamp: int | None = -1,
                      headers: Iterable[HeaderIn] | None = None, offset: int | None = None) -> None:
        """``BatchBuilder.append`` for v2 data batches, with Kafka's MemoryRecordsBuilder checks
        (offsets increase and are >= ``base_offset``; timestamp None/-1 = none, other negatives
        refused). Tracks ``last_offset`` and ``offset_of_max_timestamp``."""
        if offset is None:
            off = self._base_offset if self._last_offset is None else self._last_offset + 1
        else:
            off = _int64(offset, "offset")
            if self._last_offset is not None and off <= self._last_offset:
                raise InvalidArgumentError(
                    f"Illegal offset {off} following previous offset {self._last_offset} "
                    f"(Offsets must increase monotonically).")
            if off < self._base_offset:
                raise InvalidArgumentError(
                    f"Illegal offset {off}: below the base offset {self._base_offset}")
        ts = -1 if timestamp is None else _int64(timestamp, "timestamp")
        if ts < -1:
            raise InvalidArgumentError(f"Invalid negative timestamp {ts}")
        delta = off - self._base_offset
        if delta > INT32_MAX:
            raise InvalidArgumentError(
                f"Offset {off} is too far from the base offset {self._base_offset}")
        if ts > self._max_ts:
            self._offset_of_max = off
        self.append(key, value, ts, headers, delta)
        self._last_offset = off

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def last_offset(self) -> int | None:
        """The last offset appended with ``append_record`` (None before the first)."""
        return self._last_offset

    @property
    def offset_of_max_timestamp(self) -> int:
        """The offset of the first record with the max timestamp (``append_record``; -1 if none)."""
        return self._offset_of_max

    def append(self, key: Buffer | None, value: Buffer | None, timestamp: int,
               headers: Iterable[HeaderIn] | None = None, offset_delta: int | None = None) -> int:
        ts = _int64(timestamp, "timestamp")
        if offset_delta is None:
            if self._count > INT32_MAX:
                raise InvalidRecordError("too many records for one batch")
            od = self._count
        else:
            od = _int32(offset_delta, "offset delta")
        if self._base_ts is None:
            self._base_ts = ts
        size = _encode_one(self._buf, key, value, _to_int64(ts - self._base_ts), od, headers)
        self._count += 1
        self._max_ts = max(self._max_ts, ts)
        self._last_delta = max(self._last_delta, od)
        return size

    def finish(self) -> bytes:
        return bytes(self._buf)

    @property
    def count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    @property
    def base_timestamp(self) -> int | None:
        return self._base_ts

    @property
    def max_timestamp(self) -> int:
        return self._max_ts

    @property
    def last_offset_delta(self) -> int:
        return self._last_delta


# --------------------------------------------------------------------------------------------------
# Kafka's default partitioner for one key (kafkalog.client.partitioner)

def _murmur2(data: memoryview) -> int:
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rem, tail = length % 4, length & ~3
    if rem == 3:
        h ^= data[tail + 2] << 16
    if rem >= 2:
        h ^= data[tail + 1] << 8
    if rem >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h



def murmur2(data: Buffer) -> int:
    """Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``) of a bytes-like ``data`` as a signed Java
    int. The reference is :func:`kafkalog.client.partitioner.murmur2_py`; this is the per-key kernel
    entry point (``TypeError`` for anything that is not bytes-like)."""
    h = _murmur2(memoryview(data).cast("B"))
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: Buffer, num_partitions: int) -> int:
    """Kafka's default partitioner for a non-null key: ``toPositive(murmur2(key)) %
    num_partitions`` (``ValueError`` when ``num_partitions <= 0``)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return (_murmur2(memoryview(key).cast("B")) & INT32_MAX) % num_partitions   # toPositive
