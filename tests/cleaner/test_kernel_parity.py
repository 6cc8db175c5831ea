"""The cleaner kernel functions agree between the compiled and the pure-Python kernel."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.cleaner import _kernel_py
from kafkalog.record.builder import build_batch
from kafkalog.record.records import batch_at

try:
    from kafkalog.cleaner import _kernel as _kc
    HAVE_C = True
except ImportError:  # pragma: no cover
    HAVE_C = False

pytestmark = pytest.mark.skipif(not HAVE_C, reason="compiled kernel not built")

recs = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=6)),
                          st.one_of(st.none(), st.binary(max_size=20)),
                          st.integers(0, 2**40)), min_size=1, max_size=40)


def test_uses_openssl_md5():
    assert _kc.CLEANER_MD5 in ("openssl", "hashlib")


@settings(max_examples=60, deadline=None)
@given(recs, st.integers(1, 64), st.integers(0, 40), st.booleans(),
       st.one_of(st.none(), st.integers(0, 2**41)))
def test_put_and_filter_parity(records, slots, start, retain, new_base):
    data = build_batch(records, base_offset=100)
    b = batch_at(data)
    body = bytes(b.records_body())
    tables = []
    res_put = []
    for k in (_kernel_py, _kc):
        t = bytearray(slots * 24)
        res_put.append(k.offset_map_put_v2(t, slots, 0, max(1, slots * 3 // 4), body, b.count, 100,
                                           100 + start))
        tables.append(t)
    assert res_put[0] == res_put[1]
    assert tables[0] == tables[1]
    latest = 100 + len(records) // 2
    outs = [k.offset_map_filter_v2(tables[0], slots, body, b.count, 100, b.base_timestamp, -1,
                                   latest, retain, new_base, True) for k in (_kernel_py, _kc)]
    assert outs[0] == outs[1]


def test_filter_reencodes_timestamps_relative_to_new_base():
    data = build_batch([(b"a", b"1", 1000), (b"b", None, 2000), (b"a", b"2", 3000)])
    b = batch_at(data)
    for k in (_kernel_py, _kc):
        t = bytearray(24 * 8)
        k.offset_map_put_v2(t, 8, 0, 7, b.records_body(), 3, 0, 0)
        out, kept, keyless, tdrop, nbase, max_ts, max_off, tkept = k.offset_map_filter_v2(
            t, 8, b.records_body(), 3, 0, 1000, -1, 2, True, 5000, False)
        assert kept == 2 and nbase == 5000 and max_ts == 3000 and tkept
        from kafkalog.record import kernel
        decoded = kernel.decode_records_v2(out, 2, 0, 5000, -1, -1)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in decoded] == \
            [(1, b"b", None, 2000), (2, b"a", b"2", 3000)]


# --- offset_map_build_v2 / offset_map_clean_v2 (superseded bitmap, whole-batch rewrite) ---------

from kafkalog.record.crc import crc32c  # noqa: E402

keyed = st.lists(st.tuples(st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"c", b"k" * 55,
                                                                    b"z" * 56, b"q" * 70])),
                           st.one_of(st.none(), st.binary(max_size=12)),
                           st.integers(0, 2**40)), min_size=1, max_size=60)


def test_md5_x4_matches_hashlib():
    assert _kc.CLEANER_MD5_X4 in (True, False)
    import hashlib
    keys = [b"", b"a", b"k" * 55, b"z" * 56, bytes(range(64)), b"key-%012d" % 7]
    recs = [(k, b"v", 0) for k in keys] * 3
    data = build_batch(recs)
    b = batch_at(data)
    for k in (_kernel_py, _kc):
        t = bytearray(24 * 64)
        k.offset_map_build_v2(t, 64, 0, 60, b.records_body(), b.count, 0, 0, None, 0)
        for i, key in enumerate(keys):
            assert k.offset_map_get_hash(t, 64, hashlib.md5(key).digest()) == 2 * len(keys) + i


@settings(max_examples=150, deadline=None)
@given(keyed, st.integers(8, 64), st.integers(0, 8), st.integers(0, 50), st.integers(0, 3),
       st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.sampled_from([0, 1, 4]),
       st.sampled_from(["create", "lat", "horizon_past", "horizon_future"]))
def test_build_and_clean_parity(records, slots, start, max_entries, pre, use_bitmap, retain_empty,
                                discard, marker, codec, ts_mode):
    """Both kernels agree, and the superseded bitmap gives the answers of the map lookup."""
    now = 2**41
    kw = {}
    if ts_mode == "lat":
        from kafkalog.record.constants import TimestampType
        kw = {"timestamp_type": TimestampType.LOG_APPEND_TIME, "log_append_time": 12345}
    elif ts_mode.startswith("horizon"):
        kw = {"delete_horizon_ms": now - 5 if ts_mode == "horizon_past" else now + 5}
    data = build_batch(records, base_offset=100, compression=codec, **kw)
    b = batch_at(data)
    body = bytes(b.records_body())
    max_entries = max(1, min(slots, max_entries))
    results = []
    for k in (_kernel_py, _kc):
        t = bytearray(slots * 24)
        bm = bytearray(8) if use_bitmap else None
        r1 = k.offset_map_build_v2(t, slots, min(pre, max_entries), max_entries, body, b.count, 100,
                                   100 + start, bm, 100)
        outs = []
        for bitmap in ((bm, None) if use_bitmap else (None,)):
            outs.append(k.offset_map_clean_v2(
                t, slots, bitmap, 100, b"xyz" + data, 3, len(data), body if codec else None,
                100 + len(records) // 2, now, 1000, retain_empty, discard, marker, crc32c))
        assert all(o == outs[0] for o in outs), "bitmap and map lookup disagree"
        results.append((r1, bytes(t), bytes(bm) if bm is not None else None, outs[0]))
    assert results[0] == results[1]
    kind, out, kept = results[0][3][:3]
    if kind in (2, 3):
        nb = batch_at(out)
        nb.ensure_valid()
        assert nb.count == kept and nb.base_offset == 100 and nb.last_offset == b.last_offset
        assert nb.producer_id == b.producer_id and nb.partition_leader_epoch == b.partition_leader_epoch
        if kind == 2:
            assert [r.offset for r in nb.records()] == sorted(r.offset for r in nb.records())


def test_clean_v2_rewrites_header_and_crc():
    data = build_batch([(b"a", b"1", 1000), (b"b", None, 2000), (b"a", b"2", 3000), (None, b"x", 4000)],
                       base_offset=50, producer_id=7, producer_epoch=2, base_sequence=11,
                       partition_leader_epoch=9)
    b = batch_at(data)
    for k in (_kernel_py, _kc):
        t = bytearray(24 * 8)
        bm = bytearray(1)
        k.offset_map_build_v2(t, 8, 0, 7, b.records_body(), 4, 50, 50, bm, 50)
        assert bm[0] == 1                                  # offset 50 superseded by 52
        kind, out, kept, keyless, tdrop, max_ts, max_off, nbase, attrs = k.offset_map_clean_v2(
            t, 8, bm, 50, data, 0, len(data), None, 53, 10_000, 500, False, False, False, crc32c)
        assert (kind, kept, keyless, tdrop) == (2, 2, 1, 0)
        assert nbase == 10_500 and attrs & 0x40 and max_ts == 3000
        nb = batch_at(out)
        nb.ensure_valid()
        assert nb.delete_horizon_ms == 10_500 and nb.base_sequence == 11 and nb.producer_epoch == 2
        assert nb.last_offset == 53 and nb.partition_leader_epoch == 9
        assert [(r.offset, r.key, r.value, r.timestamp) for r in nb.records()] == \
            [(51, b"b", None, 2000), (52, b"a", b"2", 3000)]
        # past the horizon the tombstone goes; a corrupt body names its position in the buffer
        kind, out, kept, *_ = k.offset_map_clean_v2(t, 8, bm, 50, out, 0, len(out), None, 53,
                                                    20_000, 500, True, False, False, crc32c)
        assert kind == 2 and kept == 1
        bad = bytearray(data)
        bad[61] = 0x7F                                     # first record's length
        with pytest.raises(Exception) as ei:
            k.offset_map_clean_v2(t, 8, None, 50, bytes(bad), 0, len(bad), None, 53, 0, 0, False,
                                  False, False, crc32c)
        assert getattr(ei.value, "position", None) is not None and ei.value.position >= 61
