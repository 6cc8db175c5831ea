"""Port of Kafka's OffsetIndexTest plus oracle/property tests."""

import os
import random
from bisect import bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError, KafkalogError
from kafkalog.log.index.offset_index import (
    IndexEntryOutOfRangeError,
    IndexOffsetOverflowError,
    OffsetIndex,
    OffsetPosition,
    ReadOnlyIndexError,
)
from tests.descriptors import descriptors_under, needs_proc_fd

BASE = 45


@pytest.fixture
def idx(tmp_path):
    i = OffsetIndex(tmp_path / "00000000000000000045.index", BASE, 30 * 8)
    yield i
    i.close_handler()


def test_lazy_creation_and_preallocation(tmp_path):
    p = tmp_path / "00000000000000000000.index"
    i = OffsetIndex(p, 0, 1001)
    assert not p.exists()
    assert i.entries == 0
    assert p.stat().st_size == 1000  # rounded down to a multiple of 8
    assert i.max_entries == 125
    i.close()
    assert p.stat().st_size == 0


def test_lookup_empty(idx):
    assert idx.lookup(92) == OffsetPosition(BASE, 0)


def test_lookup_random_entries(idx):
    rnd = random.Random(1)
    offsets = sorted(rnd.sample(range(BASE, BASE + 1000), idx.max_entries))
    positions = sorted(rnd.sample(range(100000), idx.max_entries))
    for o, p in zip(offsets, positions):
        idx.append(o, p)
    for i, (o, p) in enumerate(zip(offsets, positions)):
        assert idx.lookup(o) == (o, p)
        assert idx.entry(i) == (o, p)
    for target in range(BASE - 5, BASE + 1010):
        k = bisect_right(offsets, target)
        expected = (BASE, 0) if k == 0 else (offsets[k - 1], positions[k - 1])
        assert idx.lookup(target) == expected
    assert idx.is_full()


def test_entry_out_of_range(idx):
    idx.append(BASE + 1, 10)
    with pytest.raises(IndexEntryOutOfRangeError):
        idx.entry(1)
    with pytest.raises(IndexError):
        idx.entry(5)


def test_append_too_many(idx):
    for i in range(idx.max_entries):
        idx.append(BASE + i + 1, i)
    with pytest.raises(IndexFullError):
        idx.append(BASE + 1000, 1000)


def test_append_out_of_order(idx):
    idx.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(51, 10)
    with pytest.raises(InvalidOffsetError):
        idx.append(50, 20)
    assert idx.entries == 1


def test_offset_overflow(idx):
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE + 2**31, 0)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE - 1, 0)


def test_fetch_upper_bound_offset(idx):
    first, second = OffsetPosition(BASE, 0), OffsetPosition(BASE + 1, 1000)
    idx.append(second.offset, second.position)
    third = OffsetPosition(BASE + 2, 2000)
    idx.append(third.offset, third.position)
    assert idx.fetch_upper_bound_offset(first, 5) == second
    assert idx.fetch_upper_bound_offset(first, 1000) == second
    assert idx.fetch_upper_bound_offset(first, 1001) == third
    assert idx.fetch_upper_bound_offset(second, 1000) == third
    assert idx.fetch_upper_bound_offset(third, 1) is None
    assert idx.fetch_upper_bound_offset(0, 2001) is None


def test_reopen(tmp_path):
    p = tmp_path / "00000000000000000045.index"
    i = OffsetIndex(p, BASE, 30 * 8)
    for n in range(1, 6):
        i.append(BASE + n * 3, n * 100)
    i.close()
    assert p.stat().st_size == 5 * 8
    j = OffsetIndex(p, BASE, 30 * 8)
    assert j.entries == 5
    assert j.last_offset == BASE + 15
    assert j.lookup(BASE + 7) == (BASE + 6, 200)
    j.close_handler()
    ro = OffsetIndex.open_read_only(p)
    assert ro.base_offset == BASE and ro.entries == 5
    with pytest.raises(ReadOnlyIndexError):
        ro.append(BASE + 100, 1000)
    ro.close()
    assert p.stat().st_size == 5 * 8


def test_truncate(idx):
    for n in range(10):
        idx.append(BASE + n + 1, n)
    idx.truncate_to(BASE + 100)  # past the end: no-op
    assert idx.entries == 10
    idx.truncate_to(BASE + 9)  # at an entry: removes it and later
    assert idx.entries == 8 and idx.last_offset == BASE + 8
    idx.append(BASE + 9, 100)
    idx.truncate_to(BASE + 5)
    assert idx.entries == 4 and idx.last_offset == BASE + 4
    idx.truncate()
    assert idx.entries == 0 and idx.last_offset == BASE
    idx.append(BASE + 1, 5)
    assert idx.lookup(BASE + 3) == (BASE + 1, 5)


def test_truncate_between_entries_keeps_lower(idx):
    idx.append(BASE + 10, 10)
    idx.append(BASE + 20, 20)
    idx.truncate_to(BASE + 15)
    assert idx.entries == 1 and idx.last_offset == BASE + 10


def test_sanity_check(tmp_path, idx):
    idx.sanity_check()  # empty
    idx.append(BASE, 0)  # last offset == base offset passes
    idx.sanity_check()
    p = tmp_path / "bad.index"
    p.write_bytes(b"\x00" * 12)
    bad = OffsetIndex(p, 0, 80)
    with pytest.raises(CorruptIndexError):
        bad.sanity_check()
    bad.close_handler()
    p2 = tmp_path / "neg.index"
    p2.write_bytes(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    neg = OffsetIndex(p2, 10, 80)
    with pytest.raises(CorruptIndexError) as e:
        neg.sanity_check()
    assert str(p2) in str(e.value)
    neg.close_handler()


def test_resize_trim_reset(idx):
    idx.append(BASE + 1, 1)
    assert idx.resize(idx.length) is False
    assert idx.trim_to_valid_size() is True
    assert idx.length == 8 and idx.is_full()
    idx.reset()
    assert idx.entries == 0 and idx.length == 30 * 8


def test_zero_filled_tail(tmp_path):
    p = tmp_path / "00000000000000000000.index"
    i = OffsetIndex(p, 0, 80)
    i.append(5, 100)
    i.append(9, 200)
    i.flush()
    i.close_handler()  # no trim: simulates an unclean shutdown
    j = OffsetIndex(p, 0, 80)
    assert j.entries == 10  # Kafka counts the whole file
    assert j.zero_filled_tail_entries() == 8
    j.sanity_check()  # zero tail passes Kafka's check (KAFKA-10207)
    assert j.verify_entries() == 2
    j.close_handler()


def test_rename_and_delete(tmp_path, idx):
    idx.append(BASE + 1, 1)
    old = idx.path
    idx.change_file_suffixes("", ".deleted")
    assert not os.path.exists(old) and os.path.exists(old + ".deleted")
    assert idx.lookup(BASE + 1) == (BASE + 1, 1)
    assert idx.delete_if_exists() is True
    assert not os.path.exists(old + ".deleted")


def test_invalid_max_index_size(tmp_path):
    with pytest.raises(KafkalogError):
        OffsetIndex(tmp_path / "x.index", 0, 4).entries


@settings(max_examples=40, deadline=None)
@given(deltas=st.lists(st.integers(1, 1000), max_size=60),
       targets=st.lists(st.integers(-10, 70000), max_size=40))
def test_lookup_matches_oracle(tmp_path_factory, deltas, targets):
    d = tmp_path_factory.mktemp("oi")
    i = OffsetIndex(d / "00000000000000000100.index", 100, 64 * 8)
    offs, poss, o, pos = [], [], 100, 0
    for delta in deltas:
        o += delta
        pos += delta * 3
        i.append(o, pos)
        offs.append(o)
        poss.append(pos)
    for t in targets + offs:
        t += 100
        k = bisect_right(offs, t)
        assert i.lookup(t) == ((100, 0) if k == 0 else (offs[k - 1], poss[k - 1]))
    for t in targets[:5]:
        i.truncate_to(t)
        offs = [x for x in offs if x < t]
        assert i.entries == len(offs)
    i.close_handler()


@needs_proc_fd
def test_index_mapping_keeps_no_descriptor_and_is_the_file(tmp_path):
    """The shared mapping behind a writable index (``_map_shared``) holds no descriptor once the
    index has closed its own, shows the file's bytes, writes through to the file (``flush``), and
    an old mapping a reader still holds after a resize stays readable until released."""
    from kafkalog.log.index._mmap_index import _map_shared

    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 16)
    fd = os.open(path, os.O_RDWR)
    m = _map_shared(fd, 4096)
    os.close(fd)
    assert descriptors_under(tmp_path) == {}
    assert len(m) == 4096 and m[:4] == b"\x00\x01\x02\x03" and m[4095] == 255
    m[10:14] = b"kafk"
    m.flush()
    assert path.read_bytes()[8:16] == bytes([8, 9]) + b"kafk" + bytes([14, 15])
    with open(path, "r+b") as f:                                 # another writer's bytes show
        f.seek(100)
        f.write(b"log!")
    assert m[100:104] == b"log!"
    view = memoryview(m)
    with pytest.raises(BufferError):                            # a reader's view pins the mapping
        m.close()
    assert bytes(view[10:14]) == b"kafk"
    view.release()
    m.close()
    with pytest.raises(ValueError):
        m[0]


def test_index_appends_reach_the_file_through_the_mapping(tmp_path):
    """Entries appended to a writable index are in its file once flushed: another process reading
    the file (here a plain read) sees them, with no descriptor of the index left open."""
    p = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(p, base_offset=100, max_index_size=80)
    for i in range(5):
        idx.append(100 + i * 3, i * 40)
    idx.flush()
    data = p.read_bytes()
    assert len(data) == 80 and data[:16] == bytes.fromhex("00000000 00000000 00000003 00000028")
    assert data[40:] == bytes(40)
    idx.close()
