"""Encoding sink rows into Kafka v2 record batches (the bytes of staging files), and Kafka's
default partitioner for keyed rows.

Batches are encoded with base offset 0 (offset deltas 0..n-1), producer id -1 and partition leader
epoch -1, exactly as a non-idempotent producer sends them; committing a write only rewrites the
base offset, which the CRC does not cover (spec §1.5), so nothing is re-encoded.
"""

from __future__ import annotations

import struct
from typing import List, Optional, Sequence, Tuple

import crc32c as _crc32c

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count (the CRC-covered header part)
RECORD_BATCH_OVERHEAD = 61

Record = Tuple[Optional[bytes], Optional[bytes], int, Optional[Sequence[Tuple[str, Optional[bytes]]]]]


def murmur2(data: bytes) -> int:
    """Kafka ``Utils.murmur2`` as a signed 32-bit int."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
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
    return h - (1 << 32) if h & 0x80000000 else h


def _partitioner():
    try:
        from kafkalog.log.partitioner import partition_for_key as fn  # type: ignore
        return fn
    except ImportError:
        return lambda key, n: (murmur2(key) & 0x7FFFFFFF) % n


partition_for_key = _partitioner()


def _zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def encode_records_v2_py(records: Sequence[Record], base_timestamp: int) -> bytes:
    """Pure-Python fallback of the kernel's ``encode_records_v2`` (offset delta = index)."""
    out = bytearray()
    for i, (key, value, ts, headers) in enumerate(records):
        body = bytearray(b"\x00")
        body += _zigzag(ts - base_timestamp)
        body += _zigzag(i)
        for field in (key, value):
            if field is None:
                body += _zigzag(-1)
            else:
                body += _zigzag(len(field))
                body += field
        headers = headers or ()
        body += _zigzag(len(headers))
        for hk, hv in headers:
            hkb = hk.encode("utf-8") if isinstance(hk, str) else bytes(hk)
            body += _zigzag(len(hkb))
            body += hkb
            if hv is None:
                body += _zigzag(-1)
            else:
                body += _zigzag(len(hv))
                body += hv
        out += _zigzag(len(body))
        out += body
    return bytes(out)


def _encoder():
    try:
        from kafkalog.record import kernel  # type: ignore[attr-defined]
        return kernel.encode_records_v2
    except (ImportError, AttributeError):
        return encode_records_v2_py


encode_records_v2 = _encoder()


def build_v2_batch(records: Sequence[Record], codec: str = "none",
                   level: Optional[int] = None) -> bytes:
    """One v2 batch (base offset 0, CreateTime, no producer) holding ``records``."""
    count = len(records)
    timestamps = [r[2] for r in records]
    base_ts = timestamps[0]
    max_ts = max(timestamps)
    body = encode_records_v2(records, base_ts)
    codec_id = CODEC_IDS[codec]
    if codec_id:
        from kafkalog.record.compression import compress
        body = compress(codec_id, body, magic=2, level=level)
    tail = _TAIL.pack(codec_id, count - 1, base_ts, max_ts, -1, -1, -1, count)
    crc = _crc32c.crc32c(body, _crc32c.crc32c(tail))
    length = RECORD_BATCH_OVERHEAD - 12 + len(body)
    return struct.pack(">qiibI", 0, length, -1, 2, crc) + tail + body


def rebase_batch(buf: bytearray, position: int, base_offset: int) -> int:
    """Set the base offset of the v2 batch at ``position`` in place; returns its last offset."""
    struct.pack_into(">q", buf, position, base_offset)
    last_delta = struct.unpack_from(">i", buf, position + 23)[0]
    return base_offset + last_delta


def split_batches(records: List[Record], batch_size: int) -> List[List[Record]]:
    """Group records into producer-style batches of about ``batch_size`` bytes of key+value."""
    groups: List[List[Record]] = []
    current: List[Record] = []
    size = 0
    for r in records:
        rsize = (len(r[0]) if r[0] is not None else 0) + (len(r[1]) if r[1] is not None else 0) + 16
        if current and size + rsize > batch_size:
            groups.append(current)
            current, size = [], 0
        current.append(r)
        size += rsize
    if current:
        groups.append(current)
    return groups
