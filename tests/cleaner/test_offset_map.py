"""Port of Kafka's OffsetMapTest plus the memory budget."""
import hashlib
import tracemalloc

import pytest

from kafkalog.cleaner import SkimpyOffsetMap
from kafkalog.errors import CleanerError
from kafkalog.record.builder import build_batch
from kafkalog.record.records import batch_at


def test_basic_put_get():
    m = SkimpyOffsetMap(4096 * 24)
    for i in range(2000):
        m.put(b"key-%d" % i, i)
    for i in range(2000):
        assert m.get(b"key-%d" % i) == i
    assert m.get(b"absent") == -1
    assert m.size == 2000
    assert m.utilization == pytest.approx(2000 / 4096)


def test_overwrite_keeps_size_and_latest_offset():
    m = SkimpyOffsetMap(1024)
    m.put(b"a", 1)
    m.put(b"a", 7)
    assert m.size == 1 and m.get(b"a") == 7 and m.latest_offset == 7
    m.update_latest_offset(100)
    assert m.latest_offset == 100


def test_clear():
    m = SkimpyOffsetMap(240)
    for i in range(5):
        m.put(b"%d" % i, i)
    m.clear()
    assert all(m.get(b"%d" % i) == -1 for i in range(5))
    assert m.size == 0 and m.latest_offset == -1
    assert m.table == bytearray(m.memory)


def test_get_on_full_map_terminates():
    m = SkimpyOffsetMap(24 * 4, load_factor=1.0)
    for i in range(4):
        m.put(b"k%d" % i, i)
    assert m.get(b"not-there") == -1
    with pytest.raises(CleanerError):
        m.put(b"one-more", 9)


def test_probe_matches_kafka_layout():
    """The first probe of a key lands at abs(int32(md5[0:4])) % slots, entry = hash + offset."""
    m = SkimpyOffsetMap(24 * 101)
    m.put(b"hello", 42)
    h = hashlib.md5(b"hello").digest()
    probe = int.from_bytes(h[:4], "big", signed=True)
    pos = (abs(probe) % 101) * 24
    assert bytes(m.table[pos:pos + 16]) == h
    assert int.from_bytes(m.table[pos + 16:pos + 24], "big") == 42


def test_bulk_put_stops_when_full_and_memory_stays_in_budget():
    budget = 24 * 1000
    m = SkimpyOffsetMap(budget, load_factor=0.5)
    data = build_batch([(b"k%d" % i, b"v", 1) for i in range(2000)])
    b = batch_at(data)
    tracemalloc.start()
    read, full = m.put_batch_v2(b.records_body(), b.count, 0, 0)
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert full and m.size == 500 and read == 500 and m.latest_offset == 499
    assert len(m.table) == budget
    assert peak < 64 * 1024          # no per-key allocation beyond the table


def test_needs_one_slot():
    with pytest.raises(CleanerError):
        SkimpyOffsetMap(10)
