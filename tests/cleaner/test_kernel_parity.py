"""The cleaner kernel functions agree between the compiled and the pure-Python kernel."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from kafkalog.record import _kernel_py
from kafkalog.record.builder import build_batch
from kafkalog.record.batch import batch_at

try:
    from kafkalog.record import _kernel as _kc
    HAVE_C = hasattr(_kc, "offset_map_filter_v2")
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
