"""The compiled record kernel (_kernel.pyx) against the pure-Python reference (_kernel_py.py).

Every behavioural test runs against each kernel that is available; the parity tests check that
hypothesis-generated record lists encode to identical bytes and decode identically, and that
malformed bodies fail the same way in both.
"""

from __future__ import annotations

import importlib
import json
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import InvalidRecordError, KafkalogError


def _load(name):
    try:
        return importlib.import_module(f"kafkalog.record.{name}")
    except ImportError:
        return None


CY = _load("_kernel")
PY = _load("_kernel_py")
if CY is not None and not hasattr(CY, "decode_records_v2"):
    CY = None  # placeholder module, not built
KERNELS = [k for k in (CY, PY) if k is not None]
IDS = [k.__name__.rsplit(".", 1)[1] for k in KERNELS]

both = pytest.mark.skipif(CY is None or PY is None, reason="needs both kernels")
kernels = pytest.mark.parametrize("K", KERNELS, ids=IDS)

TS = 1_700_000_000_000


def view(r):
    return (r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers], r.sequence,
            r.size_in_bytes)


# --- varints ---------------------------------------------------------------------------------------

VARINT_VECTORS = [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"),
                  (-65, "8101"), (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"),
                  (-8193, "818001"), (1048575, "feff7f"), (-1048576, "ffff7f"),
                  (1048576, "80808001"), (134217727, "feffff7f"), (134217728, "8080808001"),
                  (2**31 - 1, "feffffff0f"), (-2**31, "ffffffff0f")]


@kernels
def test_varint_vectors(K):
    for value, hexs in VARINT_VECTORS:
        assert K.write_varint(value).hex() == hexs
        assert K.read_varint(bytes.fromhex("aa" + hexs), 1) == (value, 1 + len(hexs) // 2)
        assert K.write_varlong(value).hex() == hexs
        assert K.read_varlong(bytes.fromhex(hexs), 0) == (value, len(hexs) // 2)
    assert K.write_varlong(2**63 - 1).hex() == "feffffffffffffffff01"
    assert K.write_varlong(-2**63).hex() == "ffffffffffffffffff01"
    assert K.read_varlong(bytes.fromhex("ffffffffffffffffff01"), 0) == (-2**63, 10)


@kernels
def test_varint_non_minimal_accepted_overlong_rejected(K):
    assert K.read_varint(bytes.fromhex("8000"), 0) == (0, 2)
    assert K.read_varint(bytes.fromhex("8180808000"), 0) == (-1, 5)
    with pytest.raises(InvalidRecordError):
        K.read_varint(bytes.fromhex("8080808080"), 0)
    with pytest.raises(InvalidRecordError):
        K.read_varlong(bytes.fromhex("80808080808080808080"), 0)
    for trunc in ("", "80", "ffff"):
        with pytest.raises(InvalidRecordError):
            K.read_varint(bytes.fromhex(trunc), 0)
        with pytest.raises(InvalidRecordError):
            K.read_varlong(bytes.fromhex(trunc), 0)


# --- records ---------------------------------------------------------------------------------------

SAMPLE = [
    (b"k", b"v", TS, None),
    (None, b"v2", TS + 5, [("h", b"x"), ("n", None)]),
    (b"key", None, TS - 3, []),
    (b"", b"", TS, [("", b""), ("\u00e9t\u00e9", b"\x00\xff")]),
]


@kernels
def test_round_trip_sample(K):
    body = K.encode_records_v2(SAMPLE, TS)
    recs = K.decode_records_v2(body, len(SAMPLE), 100, TS, -1, -1)
    assert [r.offset for r in recs] == [100, 101, 102, 103]
    assert [r.timestamp for r in recs] == [TS, TS + 5, TS - 3, TS]
    assert [r.key for r in recs] == [b"k", None, b"key", b""]
    assert [r.value for r in recs] == [b"v", b"v2", None, b""]
    assert [list(map(tuple, r.headers)) for r in recs] == [
        [], [("h", b"x"), ("n", None)], [], [("", b""), ("\u00e9t\u00e9", b"\x00\xff")]]
    assert [r.sequence for r in recs] == [-1] * 4
    assert sum(r.size_in_bytes for r in recs) == len(body)


@kernels
def test_exact_golden_bytes(K):
    body = K.encode_records_v2([(b"k", b"v", 1000, None)], 1000)
    # spec §1.9 vector 1: the two record bodies of the golden batch
    body = K.encode_records_v2([(b"k", b"v", 1000, None),
                                (None, b"v2", 1005, [("h", b"x"), ("n", None)])], 1000)
    assert body == bytes.fromhex("10 00 00 00 02 6b 02 76 00"
                                 "1e 00 0a 02 01 04 7632 04 02 68 02 78 02 6e 01".replace(" ", ""))


@kernels
def test_offset_deltas_log_append_time_and_sequences(K):
    body = K.encode_records_v2(SAMPLE[:3], TS, [0, 5, 7])
    recs = K.decode_records_v2(body, 3, 1000, TS, 10, TS + 99)
    assert [r.offset for r in recs] == [1000, 1005, 1007]
    assert [r.timestamp for r in recs] == [TS + 99] * 3
    assert [r.sequence for r in recs] == [10, 15, 17]
    # sequences wrap past Integer.MAX_VALUE to 0 (DefaultRecordBatch.incrementSequence)
    recs = K.decode_records_v2(body, 3, 0, TS, 2**31 - 3, -1)
    assert [r.sequence for r in recs] == [2**31 - 3, 2, 4]


@kernels
def test_bytes_like_inputs(K):
    recs = [(bytearray(b"k"), memoryview(b"value"), TS, [(b"bk", bytearray(b"x"))])]
    body = K.encode_records_v2(recs, TS)
    assert body == K.encode_records_v2([(b"k", b"value", TS, [("bk", b"x")])], TS)
    r, = K.decode_records_v2(memoryview(bytearray(body)), 1, 0, TS, -1, -1)
    assert (r.key, r.value, list(map(tuple, r.headers))) == (b"k", b"value", [("bk", b"x")])


@kernels
def test_kafka_written_records_decode(K):
    """Bodies from real Kafka (kafka-clients 3.9.1) decode to what Kafka's own reader saw."""
    from tests.oracle import KAFKA_CLIENTS
    path = os.path.join(KAFKA_CLIENTS, "v2-none.hex")
    if not os.path.exists(path):
        pytest.skip("oracle vectors not available")
    buf = bytes.fromhex(open(path).read().replace("\n", "").strip())
    want = [r for r in map(json.loads, open(os.path.join(KAFKA_CLIENTS, "v2-none.oracle.jsonl")))
            if r.get("type") == "record"]
    got = []
    pos = 0
    while pos < len(buf):
        (base_offset, length) = struct.unpack_from(">qi", buf, pos)
        base_ts = struct.unpack_from(">q", buf, pos + 27)[0]
        base_seq = struct.unpack_from(">i", buf, pos + 53)[0]
        count = struct.unpack_from(">i", buf, pos + 57)[0]
        got += K.decode_records_v2(buf[pos + 61:pos + 12 + length], count, base_offset, base_ts,
                                   base_seq, -1)
        pos += 12 + length
    assert len(got) == len(want)
    for r, w in zip(got, want):
        assert r.offset == w["offset"] and r.timestamp == w["timestamp"]
        assert r.size_in_bytes == w["sizeInBytes"] and r.sequence == w["sequence"]
        assert r.key == (None if w["key"] is None else bytes.fromhex(w["key"]))
        assert r.value == (None if w["value"] is None else bytes.fromhex(w["value"]))
        assert [(k, v) for k, v in r.headers] == [
            (h["key"], None if h["value"] is None else bytes.fromhex(h["value"]))
            for h in w["headers"]]


# --- malformed bodies ------------------------------------------------------------------------------

def _good_body():
    K = KERNELS[0]
    return K.encode_records_v2(SAMPLE, TS)


def _rec(*parts):
    """Hand-assemble one record from hex parts after the length varint (length computed)."""
    payload = bytes.fromhex("".join(parts))
    return KERNELS[0].write_varint(len(payload)) + payload


MALFORMED = {
    "count too high": (lambda: _good_body(), 5),
    "count too low": (lambda: _good_body(), 3),
    "negative count": (lambda: _good_body(), -1),
    "truncated": (lambda: _good_body()[:-1], 4),
    "empty": (lambda: b"", 1),
    "length beyond buffer": (lambda: bytes.fromhex("7e00000000"), 1),
    "negative length": (lambda: bytes.fromhex("01000000"), 1),
    "key beyond record": (lambda: _rec("00", "00", "00", "14", "6b", "02", "76", "00"), 1),
    "value beyond record": (lambda: _rec("00", "00", "00", "02", "6b", "14", "76", "00"), 1),
    "negative header count": (lambda: _rec("00", "00", "00", "01", "01", "01"), 1),
    "header count too large": (lambda: _rec("00", "00", "00", "01", "01", "7e"), 1),
    "header count too small": (lambda: _rec("00", "00", "00", "01", "01", "00", "02", "68", "01"), 1),
    "negative header key": (lambda: _rec("00", "00", "00", "01", "01", "02", "01", "01"), 1),
    "record length too long": (lambda: _rec("00", "00", "00", "01", "01", "00", "00"), 1),
    "overlong ts varlong": (lambda: _rec("00", "80" * 10 + "00", "00", "01", "01", "00"), 1),
    "overlong offset varint": (lambda: _rec("00", "00", "8080808080", "01", "01", "00"), 1),
    "truncated in timestamp": (lambda: bytes.fromhex("0400ff"), 1),
}


@kernels
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bodies_raise_invalid_record(K, case):
    make, count = MALFORMED[case]
    body = make()
    with pytest.raises(InvalidRecordError) as e:
        K.decode_records_v2(body, count, 0, TS, -1, -1)
    assert e.value.position is not None
    assert 0 <= e.value.position <= len(body)


# --- parity ----------------------------------------------------------------------------------------

binary = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))
record = st.tuples(binary, binary, st.integers(TS - 2**40, TS + 2**40),
                   st.one_of(st.none(), st.lists(header, max_size=3)))


@both
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(record, max_size=20), base_ts=st.integers(TS - 2**30, TS + 2**30),
       base_offset=st.integers(0, 2**62), base_seq=st.one_of(st.just(-1), st.integers(0, 2**31 - 1)),
       lat=st.one_of(st.just(-1), st.integers(0, 2**50)), gaps=st.booleans())
def test_parity_encode_decode(recs, base_ts, base_offset, base_seq, lat, gaps):
    deltas = [i * 3 for i in range(len(recs))] if gaps else None
    a = CY.encode_records_v2(recs, base_ts, deltas)
    b = PY.encode_records_v2(recs, base_ts, deltas)
    assert a == b
    ra = CY.decode_records_v2(a, len(recs), base_offset, base_ts, base_seq, lat)
    rb = PY.decode_records_v2(a, len(recs), base_offset, base_ts, base_seq, lat)
    assert [view(r) for r in ra] == [view(r) for r in rb]
    assert [r.key for r in ra] == [r[0] for r in recs]
    assert [r.value for r in ra] == [r[1] for r in recs]


def _outcome(K, body, count):
    try:
        return ("ok", [view(r) for r in K.decode_records_v2(body, count, 7, TS, -1, -1)])
    except KafkalogError as e:
        return ("error", type(e))


@both
@settings(max_examples=300, deadline=None)
@given(recs=st.lists(record, min_size=1, max_size=5),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=3),
       cut=st.integers(0, 400), dcount=st.integers(-1, 1))
def test_parity_malformed(recs, flips, cut, dcount):
    body = bytearray(CY.encode_records_v2(recs, TS))
    for pos, x in flips:
        body[pos % len(body)] ^= x
    body = bytes(body[:len(body) - (cut % 3 == 0) * (cut % (len(body) + 1))])
    count = len(recs) + dcount
    assert _outcome(CY, body, count) == _outcome(PY, body, count)


@both
@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=60), count=st.integers(-1, 4))
def test_parity_garbage(body, count):
    assert _outcome(CY, body, count) == _outcome(PY, body, count)


@both
def test_parity_sample_and_malformed_cases():
    assert CY.encode_records_v2(SAMPLE, TS) == PY.encode_records_v2(SAMPLE, TS)
    for case, (make, count) in MALFORMED.items():
        body = make()
        assert _outcome(CY, body, count) == _outcome(PY, body, count), case


# --- columnar decode for Arrow (reference: _kernel_py.decode_columns_v2) ----------------------------

def _spark_kernel(name):
    try:
        return importlib.import_module(f"kafkalog.spark.{name}")
    except ImportError:
        return None


#: the columnar decode lives in the Spark kernel; its pure twin is the reference (kafkalog.spark
#: imports pyspark: without the spark extra these tests skip, saying so)
CY_COLS = _spark_kernel("_kernel")
COLS_PY = _spark_kernel("_kernel_py")
COLS_REF = COLS_PY.decode_columns_v2 if COLS_PY is not None else None


def cols_both(test):
    needs_spark = pytest.mark.skipif(COLS_PY is None, reason="needs the spark extra (pip install "
                                     "'kafkalog[spark]'): kafkalog.spark imports pyspark")
    needs_kernels = pytest.mark.skipif(COLS_PY is not None and (CY_COLS is None or CY is None),
                                       reason="needs the compiled kernels")
    return needs_spark(needs_kernels(test))


def _columns(fn, body, count, lat, lo, hi, with_headers, prefix=b""):
    cols = [bytearray(prefix) for _ in range(8)]
    hdrs = [] if with_headers else None
    try:
        n = fn(body, count, 1000, TS, lat, lo, hi, cols, hdrs)
    except KafkalogError as e:
        return ("error", type(e))
    return n, [bytes(c) for c in cols], hdrs


@cols_both
@settings(max_examples=150, deadline=None)
@given(recs=st.lists(record, max_size=15), lat=st.sampled_from([-1, TS + 1]),
       lo=st.integers(990, 1010), span=st.integers(0, 20), with_headers=st.booleans(),
       prefix=st.sampled_from([b"", b"\x01\x02\x03\x04\x05\x06\x07\x08"]))
def test_parity_decode_columns(recs, lat, lo, span, with_headers, prefix):
    body = CY.encode_records_v2(recs, TS)
    a = _columns(CY_COLS.decode_columns_v2, body, len(recs), lat, lo, lo + span, with_headers, prefix)
    b = _columns(COLS_REF, body, len(recs), lat, lo, lo + span, with_headers, prefix)
    assert a == b


@cols_both
@settings(max_examples=150, deadline=None)
@given(recs=st.lists(record, min_size=1, max_size=5),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=3),
       dcount=st.integers(-1, 1))
def test_parity_decode_columns_malformed(recs, flips, dcount):
    body = bytearray(CY.encode_records_v2(recs, TS))
    for pos, x in flips:
        body[pos % len(body)] ^= x
    count = len(recs) + dcount
    a = _columns(CY_COLS.decode_columns_v2, bytes(body), count, -1, 0, 1 << 62, True)
    b = _columns(COLS_REF, bytes(body), count, -1, 0, 1 << 62, True)
    assert (a[0] == "error") == (b[0] == "error")
    if a[0] != "error":
        assert a == b


# --- RecordsEncoder ---------------------------------------------------------------------------------

@kernels
def test_records_encoder_matches_encode_records(K):
    if not hasattr(K, "RecordsEncoder"):
        pytest.skip("no RecordsEncoder")
    e = K.RecordsEncoder()
    assert (e.count, e.size_in_bytes, e.base_timestamp, e.max_timestamp, e.last_offset_delta) == \
        (0, 0, None, -1, -1)
    sizes = [e.append(k, v, ts, h) for k, v, ts, h in SAMPLE]
    body = e.finish()
    assert body == K.encode_records_v2(SAMPLE, SAMPLE[0][2])
    assert sum(sizes) == len(body) == e.size_in_bytes
    assert e.count == 4 and e.base_timestamp == TS and e.max_timestamp == TS + 5
    assert e.last_offset_delta == 3
    e2 = K.RecordsEncoder(base_timestamp=TS - 10)
    e2.append(b"k", b"v", TS, None, 7)
    assert e2.finish() == K.encode_records_v2([(b"k", b"v", TS, None)], TS - 10, [7])
    assert e2.last_offset_delta == 7


@both
@settings(max_examples=100, deadline=None)
@given(recs=st.lists(record, max_size=12), base=st.one_of(st.none(), st.integers(TS - 2**30, TS)))
def test_parity_records_encoder(recs, base):
    a, b = CY.RecordsEncoder(base), PY.RecordsEncoder(base)
    for k, v, ts, h in recs:
        assert a.append(k, v, ts, h) == b.append(k, v, ts, h)
    assert a.finish() == b.finish()
    assert (a.count, a.size_in_bytes, a.base_timestamp, a.max_timestamp, a.last_offset_delta) == \
        (b.count, b.size_in_bytes, b.base_timestamp, b.max_timestamp, b.last_offset_delta)


@kernels
def test_records_encoder_append_record_checks(K):
    from kafkalog.record.batch import InvalidArgumentError
    e = K.RecordsEncoder(None, 100)
    assert e.last_offset is None and e.base_offset == 100 and e.offset_of_max_timestamp == -1
    e.append_record(b"a", b"1", TS)
    e.append_record(b"b", b"2", TS + 9, None, 105)
    e.append_record(b"c", b"3", None)
    e.append_record(b"d", b"4", TS + 9, [("h", b"x")])
    assert e.last_offset == 107 and e.offset_of_max_timestamp == 105 and e.max_timestamp == TS + 9
    assert e.last_offset_delta == 7 and e.count == 4
    recs = K.decode_records_v2(e.finish(), 4, 100, e.base_timestamp, -1, -1)
    assert [r.offset for r in recs] == [100, 105, 106, 107]
    assert [r.timestamp for r in recs] == [TS, TS + 9, -1, TS + 9]
    for bad in ({"offset": 107}, {"offset": 50}, {"timestamp": -2}, {"offset": 100 + 2**31}):
        kw = {"timestamp": TS, "offset": None}
        kw.update(bad)
        with pytest.raises(InvalidArgumentError):
            e.append_record(b"k", b"v", kw["timestamp"], None, kw["offset"])
    assert e.count == 4


@both
@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(binary, st.one_of(st.none(), st.integers(-3, TS + 5)),
                              st.one_of(st.none(), st.integers(95, 130))), max_size=12),
       base_offset=st.sampled_from([0, 100]))
def test_parity_append_record(ops, base_offset):
    a, b = CY.RecordsEncoder(None, base_offset), PY.RecordsEncoder(None, base_offset)
    for value, ts, off in ops:
        ra = rb = None
        try:
            a.append_record(b"k", value, ts, None, off)
        except KafkalogError as e:
            ra = type(e)
        try:
            b.append_record(b"k", value, ts, None, off)
        except KafkalogError as e:
            rb = type(e)
        assert ra == rb
    assert a.finish() == b.finish()
    assert (a.count, a.last_offset, a.offset_of_max_timestamp, a.max_timestamp, a.base_timestamp,
            a.last_offset_delta) == (b.count, b.last_offset, b.offset_of_max_timestamp,
                                     b.max_timestamp, b.base_timestamp, b.last_offset_delta)
