"""Record-level helpers the log needs off its hot path: encoding Python records into a v2 batch
(``Log.append_records``) and reading the inner offsets of a compressed legacy wrapper (offset
assignment of v0/v1 compressed data, spec §4.1 (c))."""

from __future__ import annotations

import struct
from typing import Iterable, List

from kafkalog.errors import InvalidRecordError

_CODECS = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_I32 = struct.Struct(">i")
_QI = struct.Struct(">qi")
# inner sets may expand this much; bounded so a bomb cannot allocate without limit
MAX_INNER_EXPANSION = 64 * 1024 * 1024


def _normalise(rec, default_ts: int):
    if isinstance(rec, (bytes, bytearray, memoryview)) or rec is None:
        return (None, rec, default_ts, None)
    if isinstance(rec, tuple):
        if len(rec) == 2:
            return (rec[0], rec[1], default_ts, None)
        if len(rec) == 3:
            return (rec[0], rec[1], default_ts, rec[2])
        return (rec[0], rec[1], rec[3] if rec[3] is not None and rec[3] >= 0 else default_ts, rec[2])
    ts = getattr(rec, "timestamp", None)
    return (getattr(rec, "key", None), getattr(rec, "value", None),
            default_ts if ts is None or ts < 0 else ts, getattr(rec, "headers", None))


def encode_v2_batch(records: Iterable, *, compression="none", default_timestamp: int,
                    producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                    transactional: bool = False) -> bytes:
    """One v2 batch (base offset 0) from Python records, via ``kafkalog.record.builder``."""
    from kafkalog.record.builder import build_batch
    codec = _CODECS[compression.lower()] if isinstance(compression, str) else int(compression)
    recs = [_normalise(r, default_timestamp) for r in records]
    if not recs:
        return b""
    return build_batch(recs, compression=codec, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence,
                       is_transactional=transactional)


def legacy_wrapper_inner_offsets(entry: bytes) -> List[int]:
    """The raw inner offsets of a compressed v0/v1 wrapper entry (positions relative to ``entry``)."""
    from kafkalog.record.compression import decompress
    magic = entry[16]
    codec = entry[17] & 0x07
    p = 18 + (8 if magic == 1 else 0)
    if p + 4 > len(entry):
        raise InvalidRecordError("legacy wrapper too short", position=p)
    klen = _I32.unpack_from(entry, p)[0]
    p += 4 + max(klen, 0)
    if p + 4 > len(entry):
        raise InvalidRecordError("legacy wrapper too short", position=p)
    vlen = _I32.unpack_from(entry, p)[0]
    p += 4
    if vlen < 0 or p + vlen > len(entry):
        raise InvalidRecordError("Found invalid compressed record set with a null or truncated value",
                                 position=p)
    inner = decompress(codec, memoryview(entry)[p:p + vlen], magic=magic,
                       max_size=max(MAX_INNER_EXPANSION, vlen * 255))
    offsets = []
    q = 0
    while q + 12 <= len(inner):
        off, length = _QI.unpack_from(inner, q)
        if length < 14 or q + 12 + length > len(inner):
            break
        offsets.append(off)
        q += 12 + length
    if not offsets:
        raise InvalidRecordError("Found invalid compressed record set with no inner records", position=p)
    return offsets


def convert_legacy_wrappers(buf) -> bytes:
    """Re-encode every compressed legacy wrapper as a v2 batch with the same codec and records
    (Kafka's leader converts to the log's record version, spec §4.1 (b)/(c)); other entries are
    copied as they are. Offsets are relative (assigned by the caller)."""
    from kafkalog.record.builder import build_batch
    from kafkalog.record.records import iter_batches
    out = bytearray()
    for b in iter_batches(buf, strict=True):
        if b.magic < 2 and b.compression_id:
            recs = [(r.key, r.value, r.timestamp if r.timestamp is not None else -1, None)
                    for r in b.records()]
            out += build_batch(recs, compression=b.compression_id)
        else:
            out += b.buffer()
    return bytes(out)
