"""Parity of the Spark kernels (compiled ``kafkalog.spark._kernel`` vs its pure-Python twin):
``decode_columns_v2``, ``encode_columns_v2``, ``murmur2_partitions``."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest

from kafkalog.client.partitioner import partition_for_key
from kafkalog.errors import InvalidRecordError
from kafkalog.record import _kernel_py as _record_py
from kafkalog.record.builder import build_batch
from kafkalog.record.records import iter_batches
from kafkalog.spark import _kernel_py
from kafkalog.spark.arrow_batches import ColumnBuilder

try:
    from kafkalog.spark import _kernel as _compiled
except ImportError:  # pragma: no cover - the compiled kernel is not built
    _compiled = None

KERNELS = [_kernel_py] + ([_compiled] if _compiled is not None else [])
ids = [k.IMPLEMENTATION for k in KERNELS]


def _col(arr):
    validity, offsets, data = arr.buffers()
    return (validity, offsets, data, arr.offset)


def _records(n=60, seed=7):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20)))
        value = None if i % 11 == 0 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        headers = [("h%d" % i, b"x" * (i % 3)), ("n", None)] if i % 4 == 0 else None
        out.append((key, value, 1_700_000_000_000 + rng.randrange(-5000, 5000), headers))
    return out


def test_api_is_exported_by_both_kernels():
    for k in KERNELS:
        for name in ("decode_columns_v2", "encode_columns_v2", "murmur2_partitions",
                     "partition_groups"):
            assert callable(getattr(k, name)), (k, name)


@pytest.mark.parametrize("kern", KERNELS, ids=ids)
def test_decode_columns_matches_record_decode(kern):
    records = _records()
    batch = next(iter_batches(build_batch(records, base_offset=100)))
    body = bytes(batch.records_body())
    b = ColumnBuilder("t", 0, include_headers=True)
    n = kern.decode_columns_v2(body, len(records), 100, batch.base_timestamp, -1, 110, 150, b.cols,
                               b.headers)
    assert n == 40
    b.rows, b.ts_types = n, [(n, 0)]
    rows = b.flush().to_pylist()
    expected = batch.records()[10:50]
    assert [r["offset"] for r in rows] == [r.offset for r in expected]
    assert [r["key"] for r in rows] == [r.key for r in expected]
    assert [r["value"] for r in rows] == [r.value for r in expected]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [r.timestamp for r in expected]
    assert [r["headers"] for r in rows] == [
        [{"key": k, "value": v} for k, v in r.headers] or None for r in expected]


@pytest.mark.parametrize("kern", KERNELS, ids=ids)
def test_decode_columns_rejects_bad_bodies(kern):
    body = bytes(next(iter_batches(build_batch(_records(5)))).records_body())
    cols = [bytearray() for _ in range(8)]
    with pytest.raises(InvalidRecordError):
        kern.decode_columns_v2(body[:-3], 5, 0, 0, -1, 0, 1 << 62, cols, None)
    with pytest.raises(InvalidRecordError):
        kern.decode_columns_v2(body, 6, 0, 0, -1, 0, 1 << 62, [bytearray() for _ in range(8)], None)
    with pytest.raises(InvalidRecordError):
        kern.decode_columns_v2(body + b"\x00", 5, 0, 0, -1, 0, 1 << 62,
                               [bytearray() for _ in range(8)], None)


def test_decode_columns_parity():
    if _compiled is None:
        pytest.skip("compiled kernel not built")
    body = bytes(next(iter_batches(build_batch(_records(200), base_offset=5))).records_body())
    out = []
    for k in KERNELS:
        cols, headers = [bytearray() for _ in range(8)], []
        n = k.decode_columns_v2(body, 200, 5, 123, 999, 7, 190, cols, headers)
        out.append((n, cols, headers))
    assert out[0] == out[1]


@pytest.mark.parametrize("kern", KERNELS, ids=ids)
def test_encode_columns_round_trips_and_splits(kern):
    records = _records(80)
    keys = pa.array([r[0] for r in records], pa.binary())
    values = pa.array([r[1] for r in records], pa.binary())
    micros = [None if i % 9 == 0 else r[2] * 1000 + 999 for i, r in enumerate(records)]
    ts = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    headers = [r[3] for r in records]
    order = list(range(79, -1, -2))  # every other row, reversed
    rows = pa.array(order, pa.int64()).buffers()[1]
    chunks = kern.encode_columns_v2(rows, len(order), _col(keys), _col(values),
                                    (ts.buffers()[0], ts.buffers()[1], 0), 42, headers, 600)
    assert len(chunks) > 2 and sum(c[1] for c in chunks) == len(order)
    decoded = []
    for body, count, base_ts, max_ts in chunks:
        recs = _record_py.decode_records_v2(body, count, 0, base_ts, -1, -1)
        assert [r.offset for r in recs] == list(range(count))
        assert max_ts == max(r.timestamp for r in recs) and base_ts == recs[0].timestamp
        assert len(body) <= 600 or count == 1
        decoded += recs
    for r, i in zip(decoded, order):
        assert (r.key, r.value) == (records[i][0], records[i][1])
        assert r.timestamp == (42 if i % 9 == 0 else records[i][2])
        assert [tuple(h) for h in r.headers] == list(records[i][3] or [])


def test_encode_columns_parity_with_sliced_arrays():
    if _compiled is None:
        pytest.skip("compiled kernel not built")
    records = _records(50)
    keys = pa.array([r[0] for r in records], pa.binary()).slice(5)
    values = pa.array([r[1] for r in records], pa.binary()).slice(5)
    ts = pa.array([r[2] * 1000 - 1 for r in records], pa.int64()).cast(
        pa.timestamp("us", tz="UTC")).slice(5)
    args = (None, 45, _col(keys), _col(values), (None, ts.buffers()[1], ts.offset), 0, None, 1 << 20)
    assert _kernel_py.encode_columns_v2(*args) == _compiled.encode_columns_v2(*args)
    body, count, base_ts, _ = _compiled.encode_columns_v2(*args)[0]
    first = _record_py.decode_records_v2(body, count, 0, base_ts, -1, -1)[0]
    assert first.key == records[5][0] and first.timestamp == records[5][2] - 1  # floor of -1 us


@pytest.mark.parametrize("kern", KERNELS, ids=ids)
def test_murmur2_partitions_match_kafka(kern):
    keys = [b"21", b"foobar", b"a-little-bit-long-string", b"abc", b"", b"key", b"hello", None]
    arr = pa.array(keys * 3, pa.binary()).slice(2)
    for n in (1, 7, 12, 50):
        got = struct.unpack(f"={len(arr)}i", kern.murmur2_partitions(_col(arr), len(arr), n))
        want = [-1 if k is None else partition_for_key(k, n) for k in arr.to_pylist()]
        assert list(got) == want
    # vectors from Kafka's UtilsTest / the Java client (partitionForKey(k, 12))
    got = struct.unpack("=5i", kern.murmur2_partitions(_col(pa.array(
        [b"21", b"foobar", b"abc", b"key", b""], pa.binary())), 5, 12))
    assert list(got) == [0, 6, 3, 1, 9]


@pytest.mark.parametrize("kern", KERNELS, ids=ids)
def test_encode_columns_into_a_reused_buffer(kern):
    """``out``: the same bodies as without it, as views of the one buffer, which grows only."""
    records = _records(300)
    keys = pa.array([r[0] for r in records], pa.binary())
    values = pa.array([r[1] for r in records], pa.binary())
    args = (None, 300, _col(keys), _col(values), None, 7, None, 2000)
    want = kern.encode_columns_v2(*args)
    out = bytearray()
    got = kern.encode_columns_v2(*args, out)
    assert [(bytes(b), c, t, m) for b, c, t, m in got] == want and len(want) > 3
    assert all(isinstance(b, memoryview) and b.obj is out for b, _, _, _ in got)
    size = len(out)
    del got
    small = kern.encode_columns_v2(None, 2, _col(keys), _col(values), None, 7, None, 2000, out)
    assert [bytes(b) for b, _, _, _ in small] == [want[0][0][:len(small[0][0])]]
    assert len(out) == size          # not shrunk
    del small
    with pytest.raises(TypeError):
        kern.encode_columns_v2(*args, b"not a bytearray")


@pytest.mark.parametrize("kern", KERNELS, ids=ids)
def test_partition_groups_is_a_stable_counting_sort(kern):
    rng = random.Random(5)
    parts = [rng.randrange(5) for _ in range(1000)] + [4, 0]
    order, bounds = kern.partition_groups(struct.pack(f"={len(parts)}i", *parts), len(parts), 6)
    rows = struct.unpack(f"={len(parts)}q", order)
    assert bounds == [0] + [sum(1 for q in parts if q <= p) for p in range(6)]
    for p in range(6):
        assert list(rows[bounds[p]:bounds[p + 1]]) == [i for i, q in enumerate(parts) if q == p]
    for bad in ([0, 6], [-1]):
        with pytest.raises(ValueError, match="not in"):
            kern.partition_groups(struct.pack(f"={len(bad)}i", *bad), len(bad), 6)
    with pytest.raises(ValueError):
        kern.partition_groups(b"\0" * 4, 2, 6)
