"""Issue 35: an index without entries holds no memory mapping, so a node's mappings (the kernel's
``vm.max_map_count``, 65,530 by default) are bounded by the partitions that have index entries,
not by all of them. Counted in ``/proc/self/maps``, not timed. Before: every partition's active
``.index`` and ``.timeindex`` mapped their whole preallocated file once loaded (at its first
append), entries or not: 2,000 one-record partitions added ~4,000 mappings and a broker died at
~32,000 partitions."""

from __future__ import annotations

import os

import pytest

from kafkalog.log.manager import LogManager

#: mappings a run may add besides the indexes' (allocator arenas, imported modules' buffers)
SLACK = 100


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _index_maps(data: str) -> list[str]:
    """The lines of /proc/self/maps that map a file under ``data``."""
    with open("/proc/self/maps") as f:
        return [ln for ln in f if data in ln]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_partitions_without_index_entries_hold_no_mapping(tmp_path):
    data = str(tmp_path / "data")
    conf = {"log.flush.interval.ms": 1 << 40}
    before = _maps()
    m = LogManager(data, conf, background=False)
    try:
        for t in range(100):
            m.create_topic(f"t{t}", 20)
        for t in range(50):                     # half of them one record each, half empty
            for p in range(20):
                m.get_log(f"t{t}", p).append_records([(b"k", b"one record")])
        for t in range(100):                    # every active segment's indexes looked up
            for p in range(20):
                log = m.get_log(f"t{t}", p)
                got = [r.value for r in log.records(0)]
                assert got == ([b"one record"] if t < 50 else []), (t, p)
                assert log.active_segment.offset_index.lookup(0).position == 0
                assert log.active_segment.time_index.lookup(0).offset == 0
        # a partition with enough data to index: its indexes are mapped and answer
        m.create_topic("big", 1, {"index.interval.bytes": 4096, "segment.index.bytes": 1 << 20})
        big = m.get_log("big", 0)
        for i in range(200):
            big.append_records([(b"%d" % i, bytes(1024))], timestamp=1_000_000 + i)
        seg = big.active_segment
        assert seg.offset_index.entries > 10 and seg.time_index.entries > 10
        assert len(_index_maps(data)) == 2, _index_maps(data)
        for off in (0, 57, 123, 199):
            assert next(iter(big.records(off))).offset == off
            entry = seg.offset_index.lookup(off)
            assert entry.offset <= off and big.read(entry.offset, 1).records.size > 0
        assert big.offset_for_timestamp(1_000_150).offset == 150
        grown = _maps() - before
        assert grown < SLACK, f"{grown} mappings for 2,001 partitions"
    finally:
        m.close()
    # after a restart (clean shutdown: one-record partitions' time indexes hold one entry, read)
    m = LogManager(data, conf, background=False)
    try:
        for t in range(100):
            for p in range(20):
                log = m.get_log(f"t{t}", p)
                assert log.log_end_offset == (1 if t < 50 else 0)
                assert log.active_segment.time_index.lookup(1 << 62).offset == 0
        for i in range(5):                      # appends after the restart too
            m.get_log(f"t{i}", 0).append_records([b"again"])
            assert [r.value for r in m.get_log(f"t{i}", 0).records(0)] == [b"one record", b"again"]
        big = m.get_log("big", 0)
        assert next(iter(big.records(123))).offset == 123
        assert big.offset_for_timestamp(1_000_150).offset == 150
        big.append_records([(b"x", bytes(8192))], timestamp=2_000_000)   # a new entry, mapped
        assert big.offset_for_timestamp(2_000_000).offset == 200
        grown = _maps() - before
        assert grown < SLACK, f"{grown} mappings for 2,001 partitions after a restart"
    finally:
        m.close()


_KILLED_WRITER = """
import os, signal, sys
from kafkalog.log.manager import LogManager
m = LogManager(sys.argv[1], {"log.flush.interval.ms": 1 << 40}, background=False)
for t in range(50):
    m.create_topic(f"t{t}", 20)
    for p in range(20):
        m.get_log(f"t{t}", p).append_records([(b"k", b"one record")])
m.write_checkpoints()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_recovered_partitions_hold_no_mapping(tmp_path):
    """After a SIGKILL, 1,000 one-record partitions are recovered: the recovery keeps each active
    segment's max timestamp (its time index's last entry, Kafka's, written by the close) and
    leaves the index file to grow with its first entry; the index is not mapped. Before: each
    recovered partition kept its time index mapped (a 100,000-partition broker restarted after
    SIGKILL died at the kernel's 65,530 mappings)."""
    import subprocess
    import sys
    data = str(tmp_path / "data")
    p = subprocess.run([sys.executable, "-c", _KILLED_WRITER, data], capture_output=True, timeout=300)
    assert p.returncode == -9, p.stderr.decode()[-2000:]
    before = _maps()
    m = LogManager(data, {"log.flush.interval.ms": 1 << 40}, background=False)
    try:
        assert not m.had_clean_shutdown
        for t in range(50):
            for part in range(20):
                log = m.get_log(f"t{t}", part)
                assert [r.value for r in log.records(0)] == [b"one record"]
                seg = log.active_segment
                assert seg.time_index.entries == 0 and seg.max_timestamp_so_far > 0
        grown = _maps() - before
        assert grown < SLACK, f"{grown} mappings for 1,000 recovered partitions"
        log = m.get_log("t0", 0)
        log.append_records([b"two"])
        log.flush()
        assert [r.value for r in log.records(0)] == [b"one record", b"two"]
    finally:
        m.close()
