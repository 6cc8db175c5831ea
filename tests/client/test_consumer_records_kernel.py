"""``decode_consumer_records``: a batch decoded straight into the consumer's records, compiled
kernel against the pure-Python twin, and both against ``decode_records_v2`` (the same records, the
same errors) on Kafka-written bodies (oracle vectors) and generated ones."""

from __future__ import annotations

import gc
import json
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import InvalidRecordError, KafkalogError
from tests.client.kernels import CY, KERNELS, PY, both, kernels
from tests.record.test_kernel_parity import MALFORMED, SAMPLE, TS


def _expected(K, body, count, base_offset, base_ts, lat, start, end, epoch=None):
    tst = 1 if lat >= 0 else 0
    return [K.ConsumerRecord("t", 3, epoch, r.offset, r.timestamp, tst, r.key, r.value, list(r.headers))
            for r in K.decode_records_v2(body, count, base_offset, base_ts, -1, lat)
            if start <= r.offset < end]


def _decode(K, body, count, base_offset, base_ts, lat, start, end, epoch=None):
    got = K.decode_consumer_records(body, count, base_offset, base_ts, lat, "t", 3, epoch,
                                    1 if lat >= 0 else 0, start, end)
    assert all(type(r) is K.ConsumerRecord for r in got)
    return got


@kernels
def test_kafka_written_batches(K):
    """Bodies from real Kafka (kafka-clients 3.9.1): the tuples carry what Kafka's reader saw."""
    from tests.oracle import KAFKA_CLIENTS
    path = os.path.join(KAFKA_CLIENTS, "v2-none.hex")
    if not os.path.exists(path):
        pytest.skip("oracle vectors not available")
    with open(path) as f:
        buf = bytes.fromhex(f.read().replace("\n", "").strip())
    with open(os.path.join(KAFKA_CLIENTS, "v2-none.oracle.jsonl")) as f:
        want = [r for r in map(json.loads, f) if r.get("type") == "record"]
    got: list = []
    pos = 0
    while pos < len(buf):
        (base_offset, length) = struct.unpack_from(">qi", buf, pos)
        base_ts = struct.unpack_from(">q", buf, pos + 27)[0]
        count = struct.unpack_from(">i", buf, pos + 57)[0]
        got += _decode(K, memoryview(buf)[pos + 61:pos + 12 + length], count, base_offset, base_ts,
                       -1, 0, 2**63 - 1, epoch=5)
        pos += 12 + length
    assert len(got) == len(want) > 0
    for r, w in zip(got, want, strict=True):
        assert type(r) is K.ConsumerRecord
        assert (r.topic, r.partition, r.leader_epoch, r.timestamp_type) == ("t", 3, 5, 0)
        assert r.offset == w["offset"] and r.timestamp == w["timestamp"]
        assert r.key == (None if w["key"] is None else bytes.fromhex(w["key"]))
        assert r.value == (None if w["value"] is None else bytes.fromhex(w["value"]))
        assert r.headers == [(h["key"], None if h["value"] is None else bytes.fromhex(h["value"]))
                             for h in w["headers"]]


@kernels
def test_offset_window_log_append_time_and_fresh_header_lists(K):
    body = K.encode_records_v2(SAMPLE, TS)
    n = len(SAMPLE)
    for start, end in ((0, 2**63 - 1), (101, 103), (102, 102), (0, 101), (104, 200)):
        for lat in (-1, TS + 5):
            assert _decode(K, body, n, 100, TS, lat, start, end) == _expected(
                K, body, n, 100, TS, lat, start, end)
    recs = _decode(K, body, n, 100, TS, TS + 5, 0, 2**63 - 1)
    assert {r.timestamp for r in recs} == {TS + 5} and {r.timestamp_type for r in recs} == {1}
    empty = [r.headers for r in recs if not r.headers]
    assert empty and all(type(h) is list for h in empty)
    assert len({id(h) for h in empty}) == len(empty)          # a new list per record
    empty[0].append(("k", b"v"))
    assert all(h == [] for h in empty[1:])
    gc.collect()                                               # untracked records survive a collection
    fresh = _decode(K, body, n, 100, TS, TS + 5, 0, 2**63 - 1)
    assert [r[:8] for r in recs] == [r[:8] for r in fresh]


@kernels
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bodies_fail_as_decode_records_v2(K, case):
    make, count = MALFORMED[case]
    body = make()
    with pytest.raises(InvalidRecordError) as want:
        K.decode_records_v2(body, count, 0, TS, -1, -1)
    with pytest.raises(InvalidRecordError) as got:
        _decode(K, body, count, 0, TS, -1, 0, 2**63 - 1)
    assert (got.value.message, got.value.position) == (want.value.message, want.value.position)


@kernels
def test_offset_and_timestamp_must_be_int64(K):
    body = K.encode_records_v2(SAMPLE, TS)
    with pytest.raises(InvalidRecordError):
        K.decode_consumer_records(body, len(SAMPLE), 0, TS, -1, "t", 0, None, 0, 0, 2**64)
    with pytest.raises(InvalidRecordError):
        K.ConsumerRecord("t", 0, None, 2**63, TS, 0, None, None)
    with pytest.raises(TypeError):
        K.ConsumerRecord("t", 0, None, "0", TS, 0, None, None)


binary = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))
record = st.tuples(binary, binary, st.integers(TS - 2**40, TS + 2**40),
                   st.one_of(st.none(), st.lists(header, max_size=3)))


def _outcome(K, body, count, base_offset, lat, start, end):
    try:
        return ("ok", [tuple(r) for r in _decode(K, body, count, base_offset, TS, lat, start, end)])
    except KafkalogError as e:
        return ("error", type(e), e.position)


@both
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(record, max_size=20), base_offset=st.integers(0, 2**40),
       lat=st.one_of(st.just(-1), st.integers(0, 2**50)), lo=st.integers(0, 25), span=st.integers(0, 25),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=2),
       dcount=st.integers(-1, 1))
def test_parity_compiled_and_pure(recs, base_offset, lat, lo, span, flips, dcount):
    body = bytearray(CY.encode_records_v2(recs, TS))
    for pos, x in flips:
        if body:
            body[pos % len(body)] ^= x
    count = len(recs) + dcount
    start, end = base_offset + lo, base_offset + lo + span
    a = _outcome(CY, bytes(body), count, base_offset, lat, start, end)
    assert a == _outcome(PY, bytes(body), count, base_offset, lat, start, end)
    if not flips and dcount == 0:
        assert a == ("ok", [tuple(r) for r in _expected(PY, bytes(body), count, base_offset, TS, lat, start,
                                                         end)])


def test_exported_by_the_selected_kernel():
    from kafkalog.client import kernel
    assert kernel.decode_consumer_records is kernel.implementation_module.decode_consumer_records
    assert KERNELS
