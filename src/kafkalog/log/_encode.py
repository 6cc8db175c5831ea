"""Record-level helpers the log needs off its hot path, all delegating to ``kafkalog.record``:
encoding Python records into a v2 batch (``Log.append_records``), the inner offsets of a compressed
legacy wrapper (offset assignment of v0/v1 compressed data, spec §4.1 (c)) and the conversion of
legacy wrappers to v2 batches."""

from __future__ import annotations

from typing import Any, Iterable, List, Tuple

from kafkalog.record.builder import build_batch
from kafkalog.record.constants import CompressionType
from kafkalog.record.legacy import LegacyRecordBatch
from kafkalog.record.records import iter_batches

#: ``(key, value, timestamp, headers)`` of one record to encode
_Record = Tuple[Any, Any, int, Any]


def _normalise(rec: Any, default_ts: int) -> _Record:
    """``Log.append_records``'s record forms -> ``(key, value, timestamp, headers)``."""
    if isinstance(rec, (bytes, bytearray, memoryview)) or rec is None:
        return (None, rec, default_ts, None)
    if isinstance(rec, tuple):
        if len(rec) == 2:
            return (rec[0], rec[1], default_ts, None)
        if len(rec) == 3:
            return (rec[0], rec[1], default_ts, rec[2])
        return (rec[0], rec[1], rec[3] if rec[3] is not None and rec[3] >= 0 else default_ts, rec[2])
    # a record object of the caller's (kafkalog's ConsumerRecord, kafka-python's ...): duck-typed,
    # every attribute optional
    key, value, ts, headers = (getattr(rec, n, None) for n in ("key", "value", "timestamp", "headers"))  # optional
    return (key, value, default_ts if ts is None or ts < 0 else ts, headers)


def codec_id(compression: int | str) -> int:
    """A codec id from an id or a ``compression.type`` name (``uncompressed`` = ``none``)."""
    if isinstance(compression, str):
        return int(CompressionType.for_name(compression))
    return int(compression)


def encode_v2_batch(records: Iterable[Any], *, compression: int | str = "none", default_timestamp: int,
                    producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                    transactional: bool = False) -> bytes:
    """One v2 batch (base offset 0) from Python records, via ``kafkalog.record.builder``."""
    recs = [_normalise(r, default_timestamp) for r in records]
    if not recs:
        return b""
    return build_batch(recs, compression=codec_id(compression), producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence,
                       is_transactional=transactional)


def legacy_wrapper_inner_offsets(entry: bytes | bytearray | memoryview) -> List[int]:
    """The raw inner offsets of a compressed v0/v1 wrapper entry (errors positioned relative to
    ``entry``): the record layer's deep iteration of a copy whose wrapper offset is 0, so that v1
    relative offsets are not made absolute."""
    buf = bytearray(entry)
    buf[0:8] = bytes(8)
    return [r.offset for r in LegacyRecordBatch(buf, 0, len(buf), buf[16]).records()]


def convert_legacy_wrappers(buf: bytes | bytearray | memoryview) -> bytes:
    """Re-encode every compressed legacy wrapper as a v2 batch with the same codec and records
    (Kafka's leader converts to the log's record version, spec §4.1 (b)/(c)); other entries are
    copied as they are. Offsets are relative (assigned by the caller)."""
    out = bytearray()
    for b in iter_batches(buf, strict=True):
        if isinstance(b, LegacyRecordBatch) and b.compression_id:
            recs = [(r.key, r.value, r.timestamp if r.timestamp is not None else -1, None)
                    for r in b.records()]
            out += build_batch(recs, compression=b.compression_id)
        else:
            out += b.buffer()
    return bytes(out)
