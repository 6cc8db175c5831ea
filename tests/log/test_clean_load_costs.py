"""What opening a data directory after a clean shutdown costs per partition, counted in system calls
(issue 35: a restart at 100,000 partitions is bounded by this work; not timed). Each partition's
directory is listed once by the loader, whose listing the later steps reuse (the producer state's
snapshots, the index files' presence), and one record's segment is read once for its next offset,
not once per step that asks. Counted with ``sys.setprofile``'s C calls (``posix.listdir``,
``posix.stat``, ``posix.pread``) over a ``LogManager``'s load of 40 partitions; the same load after a
crash (every step lists again) is checked to still find every record."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kafkalog.log import manager as manager_module
from kafkalog.log._encode import encode_v2_batch
from kafkalog.log.manager import LogManager
from tests.log.test_crash_restart_costs import load_counting_c_calls, one_record_partitions
from tests.os_calls import count_os_calls

PARTITIONS = 40


def _made(path: Path) -> str:
    return one_record_partitions(path, PARTITIONS)


def _calls_loading(data: str) -> Counter[str]:
    m, calls = load_counting_c_calls(data)
    try:
        assert m.had_clean_shutdown
        assert [m.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == [1] * PARTITIONS
    finally:
        m.close()
    return calls


def test_a_clean_load_lists_each_partition_once_and_reads_its_segment_once(tmp_path: Path) -> None:
    calls = _calls_loading(_made(tmp_path))
    n = PARTITIONS
    # one listing by the loader (the producer state's snapshots are found in it: its construction
    # listed the directory again); a few of the data directory itself
    assert calls["listdir"] <= n + 8, calls["listdir"]
    # one read of the segment's last batch for its next offset (there were three: the overflow
    # check, the first batch's magic and the log end offset again) and one of its time index's
    # last entry
    assert calls["pread"] <= 2 * n + 2, calls["pread"]
    assert calls["stat"] <= 8 * n + 20, calls["stat"]


def test_a_load_after_a_crash_still_lists_again(tmp_path: Path) -> None:
    data = _made(tmp_path)
    m = LogManager(data, {}, background=False)
    m.get_log("t", 0).append_records([b"two"])
    m.abandon()                                    # no clean shutdown marker: recovery runs
    m = LogManager(data, {}, background=False)
    try:
        assert not m.had_clean_shutdown
        assert m.get_log("t", 0).log_end_offset == 2
        assert [m.get_log("t", p).log_end_offset for p in range(1, PARTITIONS)] == [1] * (PARTITIONS - 1)
    finally:
        m.close()


def _epoch_files(data: str) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for p in sorted(Path(data).glob("t-*/leader-epoch-checkpoint")):
        st = p.stat()
        out[p.parent.name] = (st.st_ino, st.st_mtime_ns, p.read_bytes())
    return out


def _led(m: LogManager, epoch: int) -> None:
    """What the broker does once a partition is loaded (``Broker.lead``): a partition whose cache
    holds no epoch gets the leader's at its log end offset."""
    for p in m.partitions_of("t"):
        log = m.get_log("t", p)
        if log.leader_epoch_cache.latest_epoch() is None:
            log.leader_epoch_cache.assign(epoch, log.log_end_offset, sync=False)


def test_a_restart_does_not_rewrite_the_leader_epoch_checkpoints(tmp_path: Path) -> None:
    """Each load cut every empty partition's epoch entry (it starts at the log end offset) and
    wrote the file, and the broker's lead assigned the same entry again and wrote it again: two
    atomic writes per partition per restart. The load's cuts now change the memory only (each load
    makes them again), so neither a clean restart nor one after a crash replaces a file (same
    inode, same bytes); the caches still answer the epochs."""
    data = str(tmp_path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", 6)
    _led(m, 4)
    for p in range(3):                              # three with a record, three empty
        m.get_log("t", p).append_records([b"one record"])
    m.close()
    before = _epoch_files(data)
    assert len(before) == 6 and all(b"\n4 0\n" in v[2] for v in before.values()), before
    for crash in (False, True):
        m = LogManager(data, {}, background=False)
        try:
            assert m.had_clean_shutdown is not crash
            # empty partitions: the entry at their end offset was cut (as Kafka's load does)
            assert [m.get_log("t", p).leader_epoch_cache.latest_epoch() for p in range(6)] == \
                [4, 4, 4, None, None, None]
            _led(m, 4)
            assert [m.get_log("t", p).leader_epoch_cache.latest_epoch() for p in range(6)] == [4] * 6
            assert _epoch_files(data) == before
        finally:
            if crash:
                m.close()
            else:
                m.get_log("t", 0).append_records([b"two"])    # a move: the restart recovers it
                m.abandon()


def test_a_load_writes_the_leader_epoch_checkpoint_when_it_would_be_wrong(tmp_path: Path) -> None:
    """The file is written when the entries the load arrived at are not the file's or the first of
    them: here a crash's recovery finds epoch 4 in the log's batches while the file was lost."""
    data = str(tmp_path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", 1)
    _led(m, 4)
    m.get_log("t", 0).append(encode_v2_batch([b"one record"], default_timestamp=1), leader_epoch=4)
    m.abandon()                                     # a crash: recovery reads the batches
    epochs = Path(data) / "t-0" / "leader-epoch-checkpoint"
    epochs.unlink()
    m = LogManager(data, {}, background=False)
    try:
        assert m.get_log("t", 0).leader_epoch_cache.epoch_entries() == [(4, 0)]
        assert epochs.read_bytes() == b"0\n1\n4 0\n"
    finally:
        m.close()


def _opens_recorded(monkeypatch: Any) -> list[tuple[str, int]]:
    """``os.open`` recording each file's name and flags (for the life of ``monkeypatch``)."""
    opened: list[tuple[str, int]] = []
    real = os.open

    def recording(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append((os.path.basename(os.fspath(path)), flags))
        return real(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", recording)
    return opened


def test_a_clean_load_leaves_the_indexes_of_idle_partitions_unopened(tmp_path: Path,
                                                                      monkeypatch: Any) -> None:
    """The active segment's indexes grow to ``segment.index.bytes`` when first loaded, not at the
    log's load (100,000 partitions: 400,000 opens and ftruncates a restart and a shutdown made
    for partitions nothing touched): a clean load and close of idle partitions truncate no file
    and fsync none of theirs; a partition appended to grows its indexes (sparse), and its close
    trims them again; one only read loads them as they are."""
    data = _made(tmp_path)
    offset_index = Path(data) / "t-0" / "00000000000000000000.index"
    time_index = Path(data) / "t-0" / "00000000000000000000.timeindex"
    trimmed = (offset_index.stat().st_size, time_index.stat().st_size)
    with monkeypatch.context() as mp:
        counts = count_os_calls(mp, ("ftruncate", "open", "fsync"))
        opened = _opens_recorded(mp)
        m = LogManager(data, {}, background=False)
        assert counts["ftruncate"] == 0
        opened_loading = counts["open"]
        # a .log, the leader-epoch checkpoint, the producer snapshot and the time index's tail
        # (read only) per partition; no index file opened to write (to grow or map it)
        assert opened_loading <= 4 * PARTITIONS + 20, opened_loading
        index_opens = [(name, flags) for name, flags in opened if name.endswith("index")]
        assert index_opens, opened
        assert all(not flags & (os.O_RDWR | os.O_WRONLY) for _, flags in index_opens), index_opens
        m.close()
        assert counts["ftruncate"] == 0, counts
        # nothing written since the clean load: no partition's .log nor directory is fsynced
        # again (the checkpoints and the clean-shutdown marker are)
        assert counts["fsync"] <= 12, counts
    assert (offset_index.stat().st_size, time_index.stat().st_size) == trimmed
    m = LogManager(data, {}, background=False)
    try:
        log = m.get_log("t", 0)
        for _ in range(3):                          # past index.interval.bytes: an index entry
            log.append_records([b"two"] * 1000)
        assert offset_index.stat().st_size == 10 * 1024 * 1024
        assert time_index.stat().st_size == 10 * 1024 * 1024 // 12 * 12
        assert offset_index.stat().st_blocks * 512 < 1024 * 1024        # sparse
        # a partition only read loads its indexes as they are: not grown, not flushed, not trimmed
        other = m.get_log("t", 1)
        assert b"one record" in other.read(0, 1 << 20).read()
        assert b"one record" in other.read(0, 1 << 20, isolation="read_committed").read()
        other.active_segment.offset_index.lookup(0)
        other.active_segment.time_index.lookup(0)
        assert other.active_segment.offset_index.is_loaded and other.active_segment.time_index.is_loaded
        assert (Path(data) / "t-1" / "00000000000000000000.index").stat().st_size == 0
        # a partition appended to without a new index entry (a first Produce of one record to
        # each partition after a restart) does not grow them either
        m.get_log("t", 2).append_records([b"three"])
        assert (Path(data) / "t-2" / "00000000000000000000.index").stat().st_size == 0
        with monkeypatch.context() as mp:
            counts = count_os_calls(mp, ("ftruncate", "fsync"))
            m.close()
            # t-0's and t-2's .log, directory and producer snapshot; t-0's two index trims; the
            # entry a close appends to t-2's time index (as Kafka's) is written where the file
            # ends, which is neither grown for it nor trimmed after it, before the close's flush,
            # which forces it with the records (one fsync)
            assert counts == {"ftruncate": 2, "fsync": 8 + 3 + 3 + 1}, counts
        assert (Path(data) / "t-2" / "00000000000000000000.timeindex").stat().st_size == 24
    finally:
        m.close()
    assert offset_index.stat().st_size in (8, 16) and time_index.stat().st_size in (12, 24, 36)
    m = LogManager(data, {}, background=False)
    try:
        log = m.get_log("t", 0)
        assert log.log_end_offset == 3001
        data_at = log.read(2500, 1 << 20).read()         # found through the trimmed index
        assert int.from_bytes(data_at[:8], "big") == 2001 and b"two" in data_at
    finally:
        m.close()


def test_a_first_append_after_a_clean_load_opens_no_index_and_reads_no_batch(tmp_path: Path,
                                                                            monkeypatch: Any) -> None:
    """What the load read of each active segment (its index files' lengths and last entries, its
    first batch's timestamp) is what a first append without an index entry asks: a first Produce
    of a record to each of 100,000 partitions after a restart loaded 200,000 index files (two opens
    each) and read 100,000 first batches again (~5-7 s in process). Counted here: no open of an
    index file and no read while one record is appended to each partition; then the indexes work
    as loaded ones (an index entry, lookups, a time-based roll, the records after a restart)."""
    data = _made(tmp_path)
    m = LogManager(data, {}, background=False)
    opened: list[str] = []
    real_open = os.open

    def recording_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)
    try:
        with monkeypatch.context() as mp:
            counts = count_os_calls(mp, ("pread",))
            mp.setattr(os, "open", recording_open)
            for p in range(PARTITIONS):
                m.get_log("t", p).append_records([b"two"])
            assert [o for o in opened if o.endswith((".index", ".timeindex"))] == []
            assert counts["pread"] == 0, counts
        seg = m.get_log("t", 0).active_segment
        assert not seg.offset_index.is_loaded and not seg.time_index.is_loaded
        assert seg.rolling_based_timestamp is not None
        log = m.get_log("t", 0)
        for _ in range(3):                          # past index.interval.bytes: index entries
            log.append_records([b"three"] * 1000)
        assert seg.offset_index.is_loaded and seg.offset_index.entries >= 1
        assert int.from_bytes(log.read(2500, 1 << 20).read()[:8], "big") == 2002
        ts = log.offset_for_timestamp(0)
        assert ts is not None and ts.offset == 0
    finally:
        m.close()
    m = LogManager(data, {}, background=False)
    try:
        assert [m.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == [3002] + [2] * (PARTITIONS - 1)
        first = m.get_log("t", 1).active_segment
        # the time-based roll reads the first batch's timestamp the load kept: a segment.ms of
        # 1 ms rolls at the next append, as with a loaded segment
        m.alter_topic_config("t", {"segment.ms": "1"})
        m.get_log("t", 1).append_records([b"four"])
        assert m.get_log("t", 1).active_segment is not first
        assert m.get_log("t", 1).log_end_offset == 3
    finally:
        m.close()


def _snapshots(data: str, partition: int) -> list[str]:
    return sorted(n for n in os.listdir(Path(data) / f"t-{partition}") if n.endswith(".snapshot"))


def test_a_clean_load_leaves_the_stray_snapshots_to_the_background(tmp_path: Path,
                                                                   monkeypatch: Any) -> None:
    """After a clean shutdown every partition that took data holds the snapshot of the shutdown
    before (a stray: no segment starts there) beside the one at its log end. Kafka's load deletes
    it; at 100,000 partitions those unlinks were a quarter of a restart. The load now deletes no
    file: the producer state forgets the stray at once, and the manager's scheduler deletes it,
    a step of logs at a time, once started; each log's close deletes what is left (here: a step
    of 7 logs, so a close finds most of them left)."""
    monkeypatch.setattr(manager_module, "SNAPSHOT_FILE_LOGS_PER_STEP", 7)
    data = _made(tmp_path)

    def name(offset: int) -> str:
        return f"{offset:020d}.snapshot"
    for end, background in ((2, False), (3, True)):
        m = LogManager(data, {}, background=False)
        for p in range(PARTITIONS):                     # one more record: a snapshot at `end`
            m.get_log("t", p).append_records([b"more"])
        m.close()
        assert _snapshots(data, 0) == [name(end - 1), name(end)]
        with monkeypatch.context() as mp:
            counts = count_os_calls(mp, ("unlink", "remove", "rename"))
            m = LogManager(data, {}, background=False)
            # (one: the data directory's .kafka_cleanshutdown, as Kafka's load deletes it)
            assert dict(counts) == {"unlink": 1, "remove": 0, "rename": 0}
            assert not os.path.exists(os.path.join(data, ".kafka_cleanshutdown"))
        try:
            assert list(m.get_log("t", 0).producer_state_manager.snapshots) == [end]
            assert [_snapshots(data, p) for p in range(PARTITIONS)] == \
                [[name(end - 1), name(end)]] * PARTITIONS
            if background:
                m.start_background()
                deadline = time.monotonic() + 60
                while any(len(_snapshots(data, p)) > 1 for p in range(PARTITIONS)):
                    assert time.monotonic() < deadline, "stray snapshots not deleted in 60 s"
                    time.sleep(0.05)
            else:                                       # never started: the close deletes them
                pending = len(m._snapshot_file_logs)
                m.close()
                assert pending == PARTITIONS
            assert [_snapshots(data, p) for p in range(PARTITIONS)] == [[name(end)]] * PARTITIONS
        finally:
            m.close()
    m = LogManager(data, {}, background=False)
    try:
        assert [m.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == [3] * PARTITIONS
        assert not m._snapshot_file_logs
    finally:
        m.close()


def test_a_crash_before_the_strays_are_deleted_loses_nothing(tmp_path: Path) -> None:
    """A process killed after the load and before the background deleted the strays (``abandon``:
    no close, no marker) leaves them on disk; the next load, a recovery, finds them stray again
    and every record is still there, and a clean close then deletes them."""
    data = _made(tmp_path)
    m = LogManager(data, {}, background=False)
    for p in range(PARTITIONS):
        m.get_log("t", p).append_records([b"two"])
    m.close()
    m = LogManager(data, {}, background=False)
    assert len(m._snapshot_file_logs) == PARTITIONS
    m.abandon()
    assert _snapshots(data, 0) == [f"{1:020d}.snapshot", f"{2:020d}.snapshot"]
    m = LogManager(data, {}, background=False)
    try:
        assert not m.had_clean_shutdown
        assert [m.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == [2] * PARTITIONS
        assert b"two" in m.get_log("t", 0).read(1, 1 << 20).read()
    finally:
        m.close()
    assert [_snapshots(data, p) for p in range(PARTITIONS)] == [[f"{2:020d}.snapshot"]] * PARTITIONS
