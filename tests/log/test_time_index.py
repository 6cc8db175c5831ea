"""Port of Kafka's TimeIndexTest."""

from bisect import bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kafkalog.log.index.time_index import IndexEntryOutOfRangeError, TimeIndex, TimestampOffset, TimestampOrderError

BASE = 45
MAX_ENTRIES = 30


@pytest.fixture
def idx(tmp_path):
    i = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, MAX_ENTRIES * 12)
    yield i
    i.close_handler()


def append_entries(idx, n):
    for i in range(1, n):
        idx.maybe_append(i * 10, i * 10 + BASE)


def test_lookup(idx):
    assert idx.lookup(100) == TimestampOffset(-1, BASE)
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.lookup(9) == (-1, BASE)
    assert idx.lookup(10) == (10, BASE + 10)
    assert idx.lookup(15) == (10, BASE + 10)
    assert idx.lookup(280) == (280, BASE + 280)
    assert idx.lookup(10**9) == (280, BASE + 280)


def test_entry(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.entry(0) == (10, BASE + 10)
    assert idx.entry(27) == (280, BASE + 280)
    with pytest.raises(IndexEntryOutOfRangeError):
        idx.entry(28)


def test_truncate(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate()
    assert idx.entries == 0
    assert idx.last_entry == (-1, BASE)
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate_to(10 + BASE)
    assert idx.entries == 0
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate_to(25 + BASE)  # between entries: keeps the entry at offset 20
    assert idx.entries == 2 and idx.last_entry == (20, BASE + 20)


def test_append_rules(idx):
    append_entries(idx, MAX_ENTRIES)  # 29 entries = maxEntries - 1
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.maybe_append(10000, 1000)
    idx.maybe_append(10000, 1000, skip_full_check=True)
    assert idx.entries == MAX_ENTRIES and idx.last_entry == (10000, 1000)
    with pytest.raises(IndexFullError):
        idx.maybe_append(20000, 2000, skip_full_check=True)


def test_append_out_of_order(idx):
    idx.maybe_append(10, BASE + 10)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(20, BASE + 5)
    with pytest.raises(TimestampOrderError):
        idx.maybe_append(5, BASE + 20)
    idx.maybe_append(10, BASE + 20)  # duplicate timestamp: ignored
    assert idx.entries == 1
    with pytest.raises(TimestampOrderError):
        idx.maybe_append(-1, BASE + 30)
    assert idx.entries == 1


def test_no_entry_for_minus_one_timestamp(tmp_path):
    i = TimeIndex(tmp_path / "x.timeindex", 0, 120)
    i.maybe_append(-1, 5)
    assert i.entries == 0
    i.close_handler()


def test_sanity_check(tmp_path, idx):
    idx.maybe_append(5, BASE + 1)
    idx.sanity_check()
    p = tmp_path / "a.timeindex"
    p.write_bytes(bytes.fromhex("0000000000000010 00000000 0000000000000005 00000001".replace(" ", "")))
    a = TimeIndex(p, 0, 120)
    with pytest.raises(CorruptIndexError):
        a.sanity_check()  # last timestamp < first
    a.close_handler()
    p2 = tmp_path / "b.timeindex"
    p2.write_bytes(bytes.fromhex("0000000000000010ffffffff"))
    b = TimeIndex(p2, 10, 120)
    with pytest.raises(CorruptIndexError):
        b.sanity_check()  # last offset < base offset
    b.close_handler()
    p3 = tmp_path / "c.timeindex"
    p3.write_bytes(b"\0" * 13)
    c = TimeIndex(p3, 0, 120)
    with pytest.raises(CorruptIndexError):
        c.sanity_check()
    c.close_handler()


def test_resize_and_golden_bytes(tmp_path):
    p = tmp_path / "00000000000000000100.timeindex"
    i = TimeIndex(p, 100, 10485760)
    assert i.max_entries == 873813 and i.length == 10485756
    assert i.resize(i.length) is False
    assert i.resize(120) is True
    assert i.resize(240) is True
    assert i.entry_size == 12
    i.maybe_append(1_700_000_000_000, 150)
    assert i.entry(0) == (1_700_000_000_000, 150)
    i.close()
    assert p.read_bytes() == bytes.fromhex("0000018bcfe5680000000032")
    j = TimeIndex(p, 100, 120)
    assert j.last_entry == (1_700_000_000_000, 150)
    j.close_handler()


def test_zero_tail(tmp_path):
    p = tmp_path / "00000000000000000000.timeindex"
    i = TimeIndex(p, 0, 120)
    i.maybe_append(100, 3)
    i.flush()
    i.close_handler()
    j = TimeIndex(p, 0, 120)
    assert j.entries == 10 and j.zero_filled_tail_entries() == 9
    assert j.verify_entries() == 1
    j.close_handler()


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 50), st.integers(0, 20)), max_size=40),
       targets=st.lists(st.integers(-5, 3000), max_size=30))
def test_lookup_oracle(tmp_path_factory, steps, targets):
    d = tmp_path_factory.mktemp("ti")
    i = TimeIndex(d / "t.timeindex", 7, 64 * 12)
    ts, off, tss, offs = 0, 7, [], []
    for dt, do in steps:
        ts += dt
        off += do
        i.maybe_append(ts, off)
        tss.append(ts)
        offs.append(off)
    for t in targets + tss:
        k = bisect_right(tss, t)
        assert i.lookup(t) == ((-1, 7) if k == 0 else (tss[k - 1], offs[k - 1]))
    i.close_handler()
