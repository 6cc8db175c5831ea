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


def _file_entries(path, n):
    with open(path, "rb") as f:
        data = f.read(n * 12)
    return [(int.from_bytes(data[i:i + 8], "big"), int.from_bytes(data[i + 8:i + 12], "big"))
            for i in range(0, len(data), 12)]


def test_last_entry_is_written_without_a_mapping(tmp_path):
    """A segment's last time-index entry (its recovery's end, its roll, its close: the appends with
    ``skip_full_check``) is written with ``pwrite`` when the index is not mapped, and the index
    stays unmapped; the next ordinary append maps the file, which holds both entries; the trimmed
    file holds them after the close. A file trimmed to its entries grows by the one entry."""
    import mmap
    path = tmp_path / "00000000000000000045.timeindex"
    i = TimeIndex(path, BASE, MAX_ENTRIES * 12)
    i.maybe_append(10, BASE + 1)
    i.close()                                           # trimmed to its one entry
    assert path.stat().st_size == 12
    i = TimeIndex(path, BASE, MAX_ENTRIES * 12)
    i.resize_before_first_entry(MAX_ENTRIES * 12)      # (as a log's load leaves its active segment)
    i.maybe_append(20, BASE + 2, skip_full_check=True)
    assert not isinstance(i._mm, mmap.mmap)
    assert path.stat().st_size == 24 and i.entries == 2     # (not grown for it)
    assert _file_entries(path, 2) == [(10, 1), (20, 2)]
    assert i.lookup(25) == (20, BASE + 2)
    i.flush()                                           # (forced: fdatasync of the file)
    i.close()
    assert _file_entries(path, 3) == [(10, 1), (20, 2)]

    i = TimeIndex(path, BASE, MAX_ENTRIES * 12)
    i.resize(MAX_ENTRIES * 12)
    i.maybe_append(30, BASE + 3, skip_full_check=True)
    i.maybe_append(40, BASE + 4)                        # an ordinary append: through a mapping
    assert isinstance(i._mm, mmap.mmap)
    assert [tuple(e) for e in i] == [(10, BASE + 1), (20, BASE + 2), (30, BASE + 3), (40, BASE + 4)]
    i.close()
    assert path.stat().st_size == 48
    assert _file_entries(path, 4) == [(10, 1), (20, 2), (30, 3), (40, 4)]


def test_last_entry_on_a_full_file_system(tmp_path):
    """The last entry written with ``pwrite`` on a full file system (a small tmpfs): a typed error
    carrying ENOSPC, the index and the file as they were (no partial entry kept past the file's
    end); once there is room the same append works."""
    import errno
    import os

    from kafkalog.errors import KafkalogIOError
    from tests.tmpfs import fill_tmpfs, grow_tmpfs, mounted_tmpfs
    with mounted_tmpfs(tmp_path / "mnt", "1m") as mnt:
        path = mnt / "00000000000000000000.timeindex"
        n = 4092 // 12                                  # its entries end 4 bytes before a page
        i = TimeIndex(path, 0, 8192)
        for k in range(n):
            i.maybe_append(k + 1, k)
        i.close()
        assert path.stat().st_size == 4092
        filler = fill_tmpfs(mnt)
        i = TimeIndex(path, 0, 8192)
        i.resize_before_first_entry(8192)
        with pytest.raises(KafkalogIOError) as e:
            i.maybe_append(n + 1, n, skip_full_check=True)
        assert getattr(e.value, "errno", None) == errno.ENOSPC and str(path) in str(e.value)
        assert i.entries == n and path.stat().st_size == 4092
        os.unlink(filler)
        grow_tmpfs(mnt, "2m")
        i.maybe_append(n + 1, n, skip_full_check=True)
        assert i.entries == n + 1 and path.stat().st_size == 4104
        i.close()
        assert _file_entries(path, n + 1)[-2:] == [(n, n - 1), (n + 1, n)]
