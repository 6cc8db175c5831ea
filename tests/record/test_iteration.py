"""iter_batches: file rules vs in-memory rules (spec §1.2), bad input, and fuzzing."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptRecordError, KafkalogError
from kafkalog.record import CompressionType, build_batch, iter_batches, scan_batches

A = build_batch([(b"a", b"1", 1), (b"b", b"2", 2)])
B = build_batch([(b"c", b"3", 3)], base_offset=2, compression=CompressionType.GZIP)
L = build_batch([(b"d", b"4", 4)], magic=1, base_offset=3)


def test_mixed_magics_and_positions():
    buf = A + L + B
    bs = list(iter_batches(buf))
    assert [b.magic for b in bs] == [2, 1, 2]
    assert [b.position for b in bs] == [0, len(A), len(A) + len(L)]
    assert [b.last_offset for b in bs] == [1, 3, 2]


@pytest.mark.parametrize("cut", [1, 5, 17, 30, len(B) - 1])
def test_partial_trailing_batch_stops(cut):
    buf = A + B[:cut]
    scan = scan_batches(buf)
    assert len(scan.batches) == 1 and scan.valid_end == len(A) and scan.trailing_bytes == cut


def test_start_end_window():
    buf = A + B + A
    assert [b.position for b in iter_batches(buf, len(A), len(A) + len(B))] == [len(A)]


def test_length_below_14_is_corrupt():
    bad = struct.pack(">qi", 0, 13) + b"\x00" * 20
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches(A + bad))
    assert e.value.position == len(A)


def test_length_2_pow_31_stops_without_allocating():
    bad = struct.pack(">qI", 0, 2**31 - 1) + b"\x02" * 20
    assert list(iter_batches(bad)) == []
    bad_neg = struct.pack(">qI", 0, 2**31) + b"\x02" * 20  # reads as negative
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bad_neg))


def test_unknown_magic_file_vs_strict():
    buf = bytearray(A)
    buf[16] = 7
    (b,) = list(iter_batches(bytes(buf)))
    # file rules read any magic >= 2 as v2; the magic byte is outside the CRC (as in Kafka)
    assert b.magic == 7 and b.is_valid()
    with pytest.raises(CorruptRecordError, match="Invalid magic"):
        list(iter_batches(bytes(buf), strict=True))


def test_max_message_size():
    with pytest.raises(CorruptRecordError):
        list(iter_batches(A, strict=True, max_message_size=len(A) - 1))
    assert len(list(iter_batches(A, strict=True, max_message_size=len(A)))) == 1


def test_mmap_buffer(tmp_path):
    import mmap
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(A + B)
    with open(p, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        bs = list(iter_batches(mm))
        assert [b.is_valid() for b in bs] == [True, True]
        assert [r.value for b in bs for r in b.records()] == [b"1", b"2", b"3"]
        bs[0].set_partition_leader_epoch(42)
        del bs
    assert struct.unpack_from(">i", p.read_bytes(), 12)[0] == 42


def _exercise(buf: bytes, strict: bool) -> None:
    try:
        for b in iter_batches(buf, strict=strict):
            b.is_valid()
            try:
                b.ensure_valid()
            except KafkalogError:
                pass
            for r in b.records(max_decompressed_size=1 << 20):
                r.offset, r.key, r.value, list(r.headers)
            b.last_offset, b.max_timestamp, b.timestamp_type
    except KafkalogError:
        pass


SEED = A + L + B + build_batch([(b"z", b"y" * 40, 9)], magic=0, compression=CompressionType.SNAPPY,
                               base_offset=4)


@settings(max_examples=150, deadline=2000,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), strict=st.booleans())
def test_fuzz_random_bytes(data, strict, any_kernel):
    _exercise(data, strict)


@settings(max_examples=300, deadline=2000,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(1, 255)), min_size=1,
                      max_size=4), cut=st.integers(0, len(SEED)), strict=st.booleans())
def test_fuzz_mutated_batches(flips, cut, strict, any_kernel):
    buf = bytearray(SEED)
    for pos, x in flips:
        buf[pos] ^= x
    _exercise(bytes(buf[:cut] if cut % 2 else buf), strict)
