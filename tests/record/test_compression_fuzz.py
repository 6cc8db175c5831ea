"""Fuzzing the decompressors: any input gives bytes within the limit or a CompressionError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CompressionError, UnsupportedCompressionTypeError
from kafkalog.record import compression as C

MAX = 1 << 16
PREFIXES = [b"", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",
            b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
            b"\x04\x22\x4d\x18\x60\x40\x82", b"\x04\x22\x4d\x18\x60\x40\x1a", b"\x28\xb5\x2f\xfd"]


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from([1, 2, 3, 4]), magic=st.sampled_from([0, 1, 2]),
       prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=400))
def test_decompress_never_escapes(codec, magic, prefix, body):
    try:
        out = C.decompress(codec, prefix + body, magic=magic, max_size=MAX)
    except (CompressionError, UnsupportedCompressionTypeError):
        return
    assert isinstance(out, bytes) and len(out) <= MAX


@settings(max_examples=150, deadline=2000)
@given(codec=st.sampled_from([1, 2, 3, 4]), data=st.binary(max_size=3000),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4))
def test_mutated_valid_payloads(codec, data, flips):
    z = bytearray(C.compress(codec, data, magic=2))
    for pos, x in flips:
        z[pos % len(z)] ^= x
    try:
        out = C.decompress(codec, bytes(z), magic=2, max_size=MAX)
    except CompressionError:
        return
    assert len(out) <= MAX
    if not flips:
        assert out == data


@settings(max_examples=100, deadline=2000)
@given(codec=st.sampled_from([0, 1, 2, 3, 4]), data=st.binary(max_size=5000),
       magic=st.sampled_from([0, 1, 2]))
def test_round_trip_property(codec, data, magic):
    if codec == 4 and magic < 2:
        magic = 2
    z = C.compress(codec, data, magic=magic)
    assert C.decompress(codec, z, magic=magic, max_size=len(data)) == data
