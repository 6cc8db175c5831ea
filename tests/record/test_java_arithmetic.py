"""Derived header fields follow Kafka's Java arithmetic for every value a header can hold
(``DefaultRecordBatch``/``DefaultRecord``): 64-bit long and 32-bit int wraparound, compared with a
direct model of the Java code written here (every int operation wraps, as in the JVM)."""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.record import _kernel_py, constants
from kafkalog.record.batch import DefaultRecordBatch
from kafkalog.record.header_walk import F_LAST_OFFSET, walk

from ..kernel_fixtures import KERNEL_MODULES

INT = st.integers(-(2**31), 2**31 - 1)
LONG = st.integers(-(2**63), 2**63 - 1)


def i32(v: int) -> int:          # the JVM's int: keep the low 32 bits, two's complement
    v &= 0xFFFFFFFF
    return v - 2**32 if v & 0x80000000 else v


def i64(v: int) -> int:          # the JVM's long
    v &= 0xFFFFFFFFFFFFFFFF
    return v - 2**64 if v & 0x8000000000000000 else v


def java_increment_sequence(sequence: int, increment: int) -> int:
    # if (sequence > Integer.MAX_VALUE - increment)
    #     return increment - (Integer.MAX_VALUE - sequence) - 1;
    # return sequence + increment;
    if sequence > i32(2147483647 - increment):
        return i32(i32(increment - i32(2147483647 - sequence)) - 1)
    return i32(sequence + increment)


def java_decrement_sequence(sequence: int, decrement: int) -> int:
    # if (sequence < decrement) return Integer.MAX_VALUE - (decrement - sequence) + 1;
    # return sequence - decrement;
    if sequence < decrement:
        return i32(i32(2147483647 - i32(decrement - sequence)) + 1)
    return i32(sequence - decrement)


def java_last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    # int baseSequence = baseSequence(); if (baseSequence == NO_SEQUENCE) return NO_SEQUENCE;
    # return incrementSequence(baseSequence, lastOffsetDelta());
    return -1 if base_sequence == -1 else java_increment_sequence(base_sequence, last_offset_delta)


def header(base_offset: int, lod: int, base_seq: int, count: int) -> bytearray:
    b = bytearray(61)
    struct.pack_into(">qiib", b, 0, base_offset, 49, -1, 2)
    struct.pack_into(">hiqqqhii", b, 21, 0, lod, 0, 0, 7, 0, base_seq, count)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return b


@settings(max_examples=400, deadline=None)
@given(seq=INT, inc=INT)
def test_increment_and_decrement_sequence(seq, inc):
    assert constants.increment_sequence(seq, inc) == java_increment_sequence(seq, inc)
    assert constants.decrement_sequence(seq, inc) == java_decrement_sequence(seq, inc)


@settings(max_examples=400, deadline=None)
@given(base=LONG, lod=INT, seq=INT, count=INT)
def test_batch_derived_fields(base, lod, seq, count):
    b = DefaultRecordBatch(header(base, lod, seq, count), 0, 61)
    assert b.last_offset == i64(base + lod)            # baseOffset() + lastOffsetDelta()
    assert b.next_offset == i64(i64(base + lod) + 1)   # lastOffset() + 1
    assert b.last_sequence == java_last_sequence(seq, lod)
    assert b.count == count                            # recordsCount as stored
    w = walk(header(base, lod, seq, count))
    assert w.batch(0)[F_LAST_OFFSET] == i64(base + lod)


@settings(max_examples=200, deadline=None)
@given(base=LONG, base_ts=LONG, seq=INT, deltas=st.lists(INT, min_size=1, max_size=4))
def test_record_offsets_and_sequences(base, base_ts, seq, deltas):
    """DefaultRecord: offset = baseOffset + offsetDelta (long), timestamp = baseTimestamp +
    timestampDelta (long), sequence = incrementSequence(baseSequence, offsetDelta)."""
    body = _kernel_py.encode_records_v2([(None, b"v", base_ts, [])] * len(deltas), base_ts,
                                        offset_deltas=deltas)
    for mod in KERNEL_MODULES:
        recs = mod.decode_records_v2(body, len(deltas), base, base_ts, seq, -1)
        assert [r.offset for r in recs] == [i64(base + d) for d in deltas], mod.IMPLEMENTATION
        assert [r.timestamp for r in recs] == [base_ts] * len(deltas)
        assert [r.sequence for r in recs] == [java_last_sequence(seq, d) for d in deltas], \
            mod.IMPLEMENTATION
