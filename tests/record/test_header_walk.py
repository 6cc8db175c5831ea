"""The batch-header walker (``kafkalog.record.header_walk``): typed findings with byte positions on
batches built by an independent encoder (aiokafka), and the compiled walker agreeing with its
pure-Python twin on arbitrary damage (hypothesis)."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.record import _header_walk_py
from kafkalog.record import header_walk as hw
from kafkalog.record.header_walk import FindingKind, walk

from ..kernel_fixtures import pure_and_compiled
from ..log.conftest import BASE_TS, legacy_batch, v2_batch

IMPLS = pure_and_compiled(_header_walk_py, "kafkalog.record._header_walk")


def _run(mod, buf, **kw):
    """The walk of ``buf`` by the implementation ``mod`` (``check_next`` / ``check_range``: the
    ``expect_next`` / ``segment_base`` given apply)."""
    check_next = kw.pop("check_next", False)
    check_range = kw.pop("check_range", False)
    if not check_next:
        kw.pop("expect_next", None)
    if not check_range:
        kw.pop("segment_base", None)
    return walk(buf, kernel=mod, **kw)


def _fix_crc(b: bytearray, pos: int = 0) -> None:
    size = struct.unpack_from(">i", b, pos + 8)[0] + 12
    struct.pack_into(">I", b, pos + 17, crc32c(bytes(b[pos + 21:pos + size])))


def test_facts_of_v2_and_legacy_entries():
    a = v2_batch([b"a", b"b"], base_offset=5, producer_id=7, producer_epoch=3, base_sequence=11,
                 leader_epoch=4)
    b = legacy_batch([b"x"], magic=1)
    struct.pack_into(">q", b, 0, 9)
    w = walk(a + b)
    assert w.count == 2 and w.finding is None and w.end == len(a) + len(b)
    r0, r1 = w.batch(0), w.batch(1)
    assert r0[hw.F_POSITION] == 0 and r0[hw.F_SIZE] == len(a) and r0[hw.F_BASE_OFFSET] == 5
    assert r0[hw.F_LAST_OFFSET] == 6 and r0[hw.F_MAGIC] == 2 and r0[hw.F_RECORD_COUNT] == 2
    assert (r0[hw.F_PRODUCER_ID], r0[hw.F_PRODUCER_EPOCH], r0[hw.F_BASE_SEQUENCE]) == (7, 3, 11)
    assert r0[hw.F_PARTITION_LEADER_EPOCH] == 4 and r0[hw.F_MAX_TIMESTAMP] == BASE_TS + 1
    assert r1[hw.F_POSITION] == len(a) and r1[hw.F_MAGIC] == 1 and r1[hw.F_LAST_OFFSET] == 9
    assert r1[hw.F_MAX_TIMESTAMP] == BASE_TS and r1[hw.F_PRODUCER_ID] == -1
    assert w.column(hw.F_POSITION) == [0, len(a)]
    assert w.producer_batches == 1 and w.legacy_batches == 1 and w.epoch_starts == [(4, 5)]
    assert (w.max_timestamp, w.offset_of_max_timestamp) == (BASE_TS + 1, 6)


@pytest.mark.parametrize("mod", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_each_finding_carries_its_position(mod):
    one = v2_batch([b"v"])
    n = len(one)
    assert _run(mod, one + one[:10]).finding == hw.Finding(FindingKind.SHORT_TAIL, n, 10)
    f = _run(mod, one + one[:30]).finding
    assert (f.kind, f.position, f.a) == (FindingKind.PARTIAL_TAIL, n, n)
    bad = bytearray(one)
    bad[-1] ^= 1
    f = _run(mod, one + bad).finding
    assert (f.kind, f.position) == (FindingKind.CRC_MISMATCH, n)
    assert f.a == struct.unpack_from(">I", bad, 17)[0] and f.b == crc32c(bytes(bad[21:]))
    assert _run(mod, one + bad, verify_crc=False).finding is None
    magic = bytearray(one)
    magic[16] = 7
    assert _run(mod, one + magic).finding == hw.Finding(FindingKind.BAD_MAGIC, n, 7)
    small = bytearray(one)
    struct.pack_into(">i", small, 8, 30)
    assert _run(mod, one + small).finding == hw.Finding(FindingKind.SMALL_BATCH, n, 42)
    assert _run(mod, one + bytes(40)).finding == hw.Finding(FindingKind.BAD_SIZE, n, 0)
    assert _run(mod, one + one, max_size=n - 1).finding == hw.Finding(FindingKind.TOO_LARGE, 0, n)
    f = _run(mod, one + one, check_next=True, expect_next=0).finding
    assert (f.kind, f.position, f.c) == (FindingKind.OFFSET_OVERLAP, n, 1)
    far = bytearray(one)
    struct.pack_into(">q", far, 0, 2**31)
    f = _run(mod, one + far, check_range=True, segment_base=0).finding
    assert (f.kind, f.position) == (FindingKind.OFFSET_RANGE, n)
    gap = bytearray(one)
    struct.pack_into(">q", gap, 0, 5)
    assert _run(mod, one + gap, check_next=True, expect_next=0).finding is None
    f = _run(mod, one + gap, check_next=True, expect_next=0, contiguous=True).finding
    assert (f.kind, f.position, f.a, f.c) == (FindingKind.OFFSET_OVERLAP, n, 5, 1)


def _java_long(v: int) -> int:
    return ((v + 2**63) % 2**64) - 2**63


@pytest.mark.parametrize("mod", IMPLS, ids=lambda m: m.IMPLEMENTATION)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.integers(-(2**63), 2**63 - 1), lod=st.integers(-(2**31), 2**31 - 1))
def test_last_offset_is_java_long_arithmetic(mod, base, lod):
    """DefaultRecordBatch.lastOffset(): ``baseOffset() + lastOffsetDelta()`` as Java longs."""
    b = v2_batch([b"v"])
    struct.pack_into(">q", b, 0, base)
    struct.pack_into(">i", b, 23, lod)
    _fix_crc(b)
    w = _run(mod, b)
    assert w.batch(0)[hw.F_LAST_OFFSET] == _java_long(base + lod)


def _buffers():
    pieces = [v2_batch([b"a"]), v2_batch([b"bb", b"c"], base_offset=1, producer_id=3, producer_epoch=0,
                                        base_sequence=0, leader_epoch=2),
              v2_batch([b"z" * 300], compression=1, base_offset=3), legacy_batch([b"m"], magic=0),
              legacy_batch([b"n", b"o"], magic=1, compression=1)]
    return st.lists(st.sampled_from(pieces), min_size=0, max_size=6).map(lambda ps: b"".join(ps))


@settings(max_examples=300, deadline=None)
@given(buf=_buffers(), flips=st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 255)), max_size=3),
       cut=st.integers(0, 3000), verify=st.booleans(), check=st.booleans(), contiguous=st.booleans(),
       start=st.integers(0, 40), max_batches=st.integers(-1, 4))
def test_compiled_and_pure_walkers_agree(buf, flips, cut, verify, check, contiguous, start, max_batches):
    if len(IMPLS) < 2:
        pytest.skip("compiled walker not built")
    flipped = bytearray(buf)
    for at, x in flips:
        if at < len(flipped):
            flipped[at] ^= x
    data = bytes(flipped[:cut])
    start = start if start < len(data) and start in (0, 17) else 0
    kw = {"start": start, "verify_crc": verify, "check_next": check, "expect_next": 0, "contiguous": contiguous,
              "check_range": check, "max_batches": max_batches}
    a, b = (_run(m, data, **kw) for m in IMPLS)
    assert (a.count, a.end, a.finding, a.rows(), a.max_timestamp, a.offset_of_max_timestamp,
            a.producer_batches, a.legacy_batches, a.epoch_starts) == \
           (b.count, b.end, b.finding, b.rows(), b.max_timestamp, b.offset_of_max_timestamp,
            b.producer_batches, b.legacy_batches, b.epoch_starts)


@pytest.mark.parametrize("mod", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_large_batches_and_zero_fill(mod):
    big = v2_batch([b"x" * 100_000])
    w = _run(mod, big + big)
    assert w.count == 2 and w.finding is None
    bad = bytearray(big)
    bad[50_000] ^= 1
    assert _run(mod, big + bad).finding.kind is FindingKind.CRC_MISMATCH
    assert mod.all_zero(bytes(100) + b"\1", 0, 100) and not mod.all_zero(bytes(100) + b"\1", 0, 101)
    assert mod.crc32c_of(big, 21, len(big)) == crc32c(bytes(big[21:]))


@pytest.mark.parametrize("mod", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_windows_of_a_file_give_the_rows_of_one_walk(mod):
    """Header-only walks over small windows (``base``), refilled at NEED_MORE, see what one walk
    over the whole buffer sees, with file positions."""
    data = b"".join(v2_batch([b"x" * (7 * i)], base_offset=i) for i in range(40))
    whole = _run(mod, data, verify_crc=False)
    rows, pos = [], 0
    while True:
        window = data[pos:pos + 100]
        w = walk(window, pos, len(data), verify_crc=False, base=pos, kernel=mod)
        rows += w.rows()
        if w.finding is None:
            break
        assert w.finding.kind is FindingKind.NEED_MORE
        pos = w.finding.position
    assert [r[:13] for r in rows] == [r[:13] for r in whole.rows()] and len(rows) == 40


@pytest.mark.parametrize("mod", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_a_small_window_of_a_huge_file(mod):
    """A header-only window of a file far larger than the window (a fetch from a big segment):
    the rows it holds and NEED_MORE at the next entry, without room for rows of the whole rest of
    the file (a 1 TiB file size once asked for a 40 GiB row buffer: MemoryError)."""
    data = b"".join(v2_batch([b"x" * 100], base_offset=i) for i in range(3))
    pos = 1 << 30
    w = walk(data, pos, 1 << 40, verify_crc=False, base=pos, kernel=mod)
    assert w.count == 3 and [r[0] for r in w.rows()] == [pos, pos + len(data) // 3, pos + 2 * len(data) // 3]
    f = w.finding
    assert f is not None and f.kind is FindingKind.NEED_MORE and f.position == pos + len(data)


@pytest.mark.parametrize("mod", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_one_v2_data_batch(mod):
    """The one-batch produce path: facts of exactly one valid v2 data batch, else None."""
    b = v2_batch([b"a", b"b"], producer_id=5, leader_epoch=3)
    assert mod.one_v2_data_batch(b, 1 << 20) == (1, BASE_TS + 1, 5, 3)
    assert mod.one_v2_data_batch(b, len(b) - 1) is None              # max.message.bytes
    assert mod.one_v2_data_batch(b + b, 1 << 20) is None              # two batches
    bad = bytearray(b)
    bad[-1] ^= 1
    assert mod.one_v2_data_batch(bad, 1 << 20) is None                # CRC
    ctl = bytearray(b)
    struct.pack_into(">h", ctl, 21, 0x20)
    _fix_crc(ctl)
    assert mod.one_v2_data_batch(ctl, 1 << 20) is None                # control batch
    cnt = bytearray(b)
    struct.pack_into(">i", cnt, 57, 3)
    _fix_crc(cnt)
    assert mod.one_v2_data_batch(cnt, 1 << 20) is None                # count != lastOffsetDelta + 1
