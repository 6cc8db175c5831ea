"""Columnar decode of Kafka record batches into Arrow ``RecordBatch``es of the Kafka-source schema.

The hot loop is the Spark kernel's ``decode_columns_v2`` (compiled ``spark/_kernel.pyx``, or its
pure-Python twin, see :mod:`kafkalog.spark.kernel`). It appends the records of
one v2 batch body to growing column buffers:

``cols = [offsets, timestamps, key_data, key_ends, key_valid, value_data, value_ends, value_valid]``

* ``offsets``/``timestamps``: bytearrays of native int64 (ms timestamps);
* ``*_data``: concatenated key/value bytes; ``*_ends``: native int32 end position of each row in
  ``*_data`` (cumulative, so ``b"\\0"*4 + ends`` is an Arrow offsets buffer);
* ``*_valid``: one byte per row, 1 = present, 0 = null.

:class:`ColumnBuilder` owns those buffers and turns them into Arrow arrays without copying the key
and value bytes (``pa.Array.from_buffers``). v0/v1 messages (rare, old data) go through
:meth:`ColumnBuilder.add_record` one by one.
"""

from __future__ import annotations

import struct
import sys
from typing import List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.spark import kernel
from kafkalog.spark.schema import ARROW_HEADER_TYPE, source_arrow_schema

_Q = struct.Struct("=q")
_I = struct.Struct("=i")
_LITTLE = sys.byteorder == "little"


decode_columns_v2 = kernel.decode_columns_v2

#: Flush a builder before its key or value data passes this size (int32 Arrow offsets).
MAX_DATA_BYTES = 1 << 30


def _append_binary(data: bytearray, ends: bytearray, valid: bytearray, b: Optional[bytes]) -> None:
    """One row of a key or value column: its bytes, its end position, present (1) or null (0)."""
    if b is None:
        valid.append(0)
    else:
        data += b
        valid.append(1)
    ends += _I.pack(len(data))


class ColumnBuilder:
    """Accumulates decoded records of one topic-partition and emits Arrow record batches."""

    __slots__ = ("topic", "partition", "include_headers", "cols", "ts_types", "headers", "rows",
                 "_schema")

    def __init__(self, topic: str, partition: int, include_headers: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._schema = source_arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.cols: List[bytearray] = [bytearray() for _ in range(8)]
        self.ts_types: List[Tuple[int, int]] = []  # runs of (rows, timestampType)
        self.headers: Optional[list] = [] if self.include_headers else None
        self.rows = 0

    @property
    def data_bytes(self) -> int:
        """Bytes of key plus value data held."""
        return len(self.cols[2]) + len(self.cols[5])

    def add_v2_batch(self, body, count: int, base_offset: int, base_timestamp: int,
                     log_append_time: int, timestamp_type: int, min_offset: int,
                     max_offset: int) -> int:
        """Decode one v2 batch body; returns the rows appended."""
        n = decode_columns_v2(body, count, base_offset, base_timestamp, log_append_time,
                              min_offset, max_offset, self.cols, self.headers)
        if n:
            self._add_ts_type(n, timestamp_type)
            self.rows += n
        return n

    def add_record(self, offset: int, timestamp: int, timestamp_type: int, key, value,
                   headers: Optional[list] = None) -> None:
        """Append one record (the v0/v1 path)."""
        offsets, timestamps, kdata, kends, kvalid, vdata, vends, vvalid = self.cols
        offsets += _Q.pack(offset)
        timestamps += _Q.pack(timestamp)
        _append_binary(kdata, kends, kvalid, key)
        _append_binary(vdata, vends, vvalid, value)
        if self.headers is not None:
            self.headers.append(headers or None)
        self._add_ts_type(1, timestamp_type)
        self.rows += 1

    def _add_ts_type(self, n: int, ts_type: int) -> None:
        if self.ts_types and self.ts_types[-1][1] == ts_type:
            self.ts_types[-1] = (self.ts_types[-1][0] + n, ts_type)
        else:
            self.ts_types.append((n, ts_type))

    def flush(self) -> Optional[pa.RecordBatch]:
        """The accumulated rows as one Arrow batch (None when empty); the builder is reset."""
        if not self.rows:
            return None
        batch = build_record_batch(self.topic, self.partition, self.rows, self.cols,
                                   self.ts_types, self.headers, self._schema)
        self._reset()
        return batch


def _validity(valid: bytearray, n: int) -> Optional[pa.Buffer]:
    if valid.find(0) < 0:
        return None
    flags = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(valid)])
    return pc.not_equal(flags, 0).buffers()[1]


def _binary(n: int, data: bytearray, ends: bytearray, valid: bytearray) -> pa.Array:
    offsets = pa.py_buffer(b"\0\0\0\0" + ends)
    return pa.Array.from_buffers(pa.binary(), n, [_validity(valid, n), offsets, pa.py_buffer(data)])


def _int32_runs(runs: List[Tuple[int, int]]) -> pa.Array:
    if len(runs) == 1:
        return pa.repeat(pa.scalar(runs[0][1], pa.int32()), runs[0][0])
    return pa.concat_arrays([pa.repeat(pa.scalar(v, pa.int32()), n) for n, v in runs])


def build_record_batch(topic: str, partition: int, n: int, cols: Sequence[bytearray],
                       ts_types: List[Tuple[int, int]], headers: Optional[list],
                       schema: pa.Schema) -> pa.RecordBatch:
    """Assemble the Kafka-source Arrow batch from column buffers (key/value without copying)."""
    offsets, timestamps, kdata, kends, kvalid, vdata, vends, vvalid = cols
    if not _LITTLE:  # pragma: no cover - Arrow buffers are little-endian
        raise RuntimeError("kafkalog's Arrow decode needs a little-endian machine")
    off_arr = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)])
    ms = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(timestamps)])
    ts = pc.multiply(ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    arrays = [
        _binary(n, kdata, kends, kvalid),
        _binary(n, vdata, vends, vvalid),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        off_arr,
        ts,
        _int32_runs(ts_types),
    ]
    if headers is not None:
        arrays.append(pa.array(headers, type=ARROW_HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
