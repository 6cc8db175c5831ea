"""A restart after a crash waits on the disk a number of times that does not grow with the
partitions (issue 35: after SIGKILL, each partition's recovery wrote its producer snapshot with two
fsyncs, file and directory, one partition after the other: 10,000 partitions, 20,000 waits on the
disk before the first client was served). The fsyncs made while a ``LogManager`` loads a data
directory left by a crash are counted (``sys.setprofile``'s C calls of ``posix.fsync``, not timed),
for 10 and for 60 partitions that each hold a record; the snapshots are still written (a lost one is
rebuilt from the log, found by its CRC, as the snapshots the rebuild of the producer state takes)."""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log.manager import LogManager
from tests.os_calls import count_os_calls, fsync_each


def one_record_partitions(path: Path, partitions: int) -> str:
    """A data directory under ``path`` with topic ``t`` of ``partitions`` partitions holding one
    record each, closed cleanly."""
    path.mkdir(exist_ok=True)
    data = str(path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", partitions)
    for p in range(partitions):
        m.get_log("t", p).append_records([b"one record"])
    m.close()
    return data


def _crashed_dir(path: Path, partitions: int) -> str:
    data = one_record_partitions(path, partitions)
    m = LogManager(data, {}, background=False)              # restarted,
    for p in range(partitions):
        # its indexes grown to segment.index.bytes, as the room for an append's index entry grows them
        seg = m.get_log("t", p).active_segment
        seg.offset_index.reserve(1)
        seg.time_index.reserve(1)
    m.abandon()                                             # then a crash
    for snap in glob.glob(os.path.join(data, "t-*", "*.snapshot")):
        os.unlink(snap)                                     # the recovery writes them again
    return data


def load_counting_c_calls(data: str) -> tuple[LogManager, Counter[str]]:
    """A ``LogManager`` opened on ``data`` and the C functions it called while loading, by name."""
    calls: Counter[str] = Counter()

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            calls[getattr(arg, "__name__", "")] += 1
    sys.setprofile(prof)
    try:
        m = LogManager(data, {}, background=False)
    finally:
        sys.setprofile(None)
    return m, calls


def _fsyncs_loading(data: str) -> int:
    m, calls = load_counting_c_calls(data)
    n = calls["fsync"]
    try:
        assert not m.load_result.recovery_reports or all(
            r.log_end_offset == 1 for r in m.load_result.recovery_reports.values())
        # the snapshots at the log end are taken, and written by the background (here: the close)
        assert glob.glob(os.path.join(data, "t-*", "*.snapshot")) == []
        assert all(len(m.get_log("t", p).producer_state_manager.unwritten) == 1
                   for p in m.partitions_of("t"))
    finally:
        m.close()
    assert len(glob.glob(os.path.join(data, "t-*", "*.snapshot"))) == len(m.partitions_of("t"))
    return n


def test_fsyncs_of_a_restart_after_a_crash_do_not_grow_with_partitions(tmp_path: Path) -> None:
    few = _fsyncs_loading(_crashed_dir(tmp_path / "few", 10))
    many = _fsyncs_loading(_crashed_dir(tmp_path / "many", 60))
    assert many == few, f"loading after a crash: {few} fsyncs for 10 partitions, {many} for 60"


def test_a_restart_after_a_crash_maps_no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash leaves every active index at its preallocated length (10 MiB of ``.index``); the
    recovery of each partition opened both to read the segment's next offset and to cut them,
    mapping them whole: three mappings a partition (59 s for a restart of 100,000 partitions after
    SIGKILL, 44-45 s now). A segment of one record is walked from its start and an index not open
    yet is reset without being read; the time index's last entry is written by the close (with
    ``pwrite``, not through a mapping made for it): no mapping at all. The real ``_map_shared``,
    counted; the records and the time index's entry are all there."""
    from kafkalog.log.index import _mmap_index
    data = _crashed_dir(tmp_path, 10)
    assert all(os.path.getsize(p) == 10 * 1024 * 1024 // 8 * 8
               for p in glob.glob(os.path.join(data, "t-*", "*.index")))     # (as a crash leaves them)
    maps = 0
    real = _mmap_index._map_shared

    def counted(*args: Any) -> Any:
        nonlocal maps
        maps += 1
        return real(*args)
    monkeypatch.setattr(_mmap_index, "_map_shared", counted)
    m = LogManager(data, {}, background=False)
    try:
        assert not m.had_clean_shutdown and len(m.load_result.recovery_reports) == 10
        assert maps == 0, maps
        assert [m.get_log("t", p).log_end_offset for p in range(10)] == [1] * 10
        stamps = {}
        for p in range(10):
            # the max timestamp in memory, its time-index entry written by the close (below)
            seg = m.get_log("t", p).active_segment
            assert seg.time_index.entries == 0 and seg.shallow_offset_of_max_timestamp_so_far == 0
            stamps[p] = seg.max_timestamp_so_far
            assert stamps[p] > 0
        m.get_log("t", 3).append_records([b"two"])                   # the indexes work after it
        assert m.get_log("t", 3).read(1, 1 << 20).records.size > 0
    finally:
        m.close()
    for p in range(10):
        with open(os.path.join(data, f"t-{p}", "00000000000000000000.timeindex"), "rb") as f:
            entry = f.read()
        assert entry[:8] >= stamps[p].to_bytes(8, "big") and len(entry) == 12, (p, entry)
        assert p == 3 or entry == stamps[p].to_bytes(8, "big") + bytes(4)


def test_a_recovery_keeps_the_producer_snapshot_it_would_write_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each partition's recovery rebuilt its producer state from the segment's start: it deleted
    the snapshot at the log end offset (a clean shutdown's) and wrote the same bytes back, an
    unlink, a create and a rename a partition (100,000 partitions after SIGKILL: 11% and 7% of the
    restart). The recovery's own producer-state manager now deletes nothing (the load's manager
    removes what is stale as it ends), the load writes no snapshot (the log manager's background
    does, :meth:`LogManager._finish_snapshot_files`), and that write keeps a file that holds what
    it would write: no unlink, no rename, the same inode. A snapshot that differs is written."""
    data = one_record_partitions(tmp_path, 20)
    LogManager(data, {}, background=False).abandon()        # restarted, then a crash
    snaps = sorted(glob.glob(os.path.join(data, "t-*", "*.snapshot")))
    assert len(snaps) == 20
    inodes = {p: os.stat(p).st_ino for p in snaps}
    with open(snaps[0], "r+b") as f:                         # one holds other bytes (a CRC off)
        f.seek(3)
        f.write(b"\xff")
    counts = count_os_calls(monkeypatch, ("unlink", "replace", "rename"))
    m = LogManager(data, {}, background=False)
    try:
        assert not m.had_clean_shutdown and len(m.load_result.recovery_reports) == 20
        assert dict(counts) == {"unlink": 0, "replace": 0, "rename": 0}, counts
        m._finish_snapshot_files()                           # (the background's step)
        monkeypatch.undo()
        assert counts["unlink"] == 0 and counts["replace"] + counts["rename"] == 1, counts
        assert sorted(glob.glob(os.path.join(data, "t-*", "*.snapshot"))) == snaps
        assert [p for p in snaps if os.stat(p).st_ino != inodes[p]] == [snaps[0]]
        assert all(m.get_log("t", p).log_end_offset == 1 for p in range(20))
        assert not m._snapshot_file_logs
    finally:
        m.close()


def test_a_restart_after_a_crash_makes_no_file_before_it_is_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crash each partition's recovery takes a producer snapshot at its log end, a new
    file (one create a partition: 36-700 us each on this machine's disk, up to a third of a
    restart of 100,000 partitions after SIGKILL). The load now makes no file: the snapshots wait
    in each producer state's ``unwritten`` (read from there: the idempotent producers' state is
    whole) and the manager's background writes them once started, a step of logs at a time
    (``SNAPSHOT_FILE_LOGS_PER_STEP``, 4 here). What the log did meanwhile counts: a roll at that
    offset writes it, a truncation below it drops it (and takes its own), and a second crash before the background
    wrote them loses nothing (the next load recovers again)."""
    import time

    from kafkalog.log import manager as manager_module
    from kafkalog.record.builder import build_batch
    monkeypatch.setattr(manager_module, "SNAPSHOT_FILE_LOGS_PER_STEP", 4)
    now = int(time.time() * 1000)
    data = str(tmp_path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", 10)
    for p in range(10):
        for i in range(3):
            m.get_log("t", p).append(build_batch([(None, b"v%d" % i, now)], producer_id=1000 + p,
                                                 producer_epoch=0, base_sequence=i))
    m.abandon()                                              # a crash: no snapshot at all yet
    assert glob.glob(os.path.join(data, "t-*", "*.snapshot")) == []

    def snapshots(p: int) -> list[str]:
        return sorted(n for n in os.listdir(os.path.join(data, f"t-{p}")) if n.endswith(".snapshot"))
    made: list[str] = []
    real = os.open

    def recording(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            made.append(os.path.basename(os.fspath(path)))
        return real(path, flags, *args, **kwargs)
    for second_crash in (True, False):
        made.clear()
        with monkeypatch.context() as mp:
            mp.setattr(os, "open", recording)
            m = LogManager(data, {}, background=False)
        assert not m.had_clean_shutdown and len(m.load_result.recovery_reports) == 10
        assert [n for n in made if n.endswith((".snapshot", ".tmp"))] == [], made
        for p in range(10):
            psm = m.get_log("t", p).producer_state_manager
            assert list(psm.snapshots) == [3] and len(psm.unwritten) == 1
            assert psm.is_next_in_sequence(1000 + p, 0, 3)
        if second_crash:
            m.abandon()
            assert glob.glob(os.path.join(data, "t-*", "*.snapshot")) == []
            continue
        try:
            m.get_log("t", 0).roll()                         # a roll at offset 3 writes it
            assert snapshots(0) == ["00000000000000000003.snapshot"]
            assert m.get_log("t", 1).truncate_to(1)          # below it: dropped (one at 1 taken)
            m.start_background()
            deadline = time.monotonic() + 60
            while m._snapshot_file_logs:
                assert time.monotonic() < deadline, "snapshots not written in 60 s"
                time.sleep(0.05)
            assert snapshots(1) == ["00000000000000000001.snapshot"]
            assert [snapshots(p) for p in range(2, 10)] == [["00000000000000000003.snapshot"]] * 8
            assert all(not m.get_log("t", p).producer_state_manager.unwritten for p in range(10))
        finally:
            m.close()
    m = LogManager(data, {}, background=False)
    try:
        assert m.had_clean_shutdown
        assert [m.get_log("t", p).log_end_offset for p in range(10)] == [3, 1] + [3] * 8
        assert m.get_log("t", 5).producer_state_manager.is_next_in_sequence(1005, 0, 3)
    finally:
        m.close()


if __name__ == "__main__":          # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_a_recovery_reads_each_producer_snapshot_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crash, each partition's recovery checks the producer snapshot at its log end offset
    (a clean shutdown's) and the load's own producer-state manager then loaded the same file again:
    now it parses the bytes the recovery took, and the check is the background's (its write keeps
    a file that holds them). During the load no open of a ``.snapshot``, then one a partition by the
    background; the producers' state as the file holds it (the next sequence of each idempotent
    producer)."""
    import time

    from kafkalog.record.builder import build_batch
    now = int(time.time() * 1000)                           # (older producers expire at the load)
    data = str(tmp_path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", 6)
    for p in range(6):
        m.get_log("t", p).append(build_batch([(None, b"v%d" % i, now) for i in range(3)],
                                             producer_id=1000 + p, producer_epoch=0, base_sequence=0))
    m.close()
    LogManager(data, {}, background=False).abandon()        # restarted, then a crash
    opened: list[str] = []
    real = os.open

    def recording(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append(os.path.basename(os.fspath(path)))
        return real(path, flags, *args, **kwargs)
    with monkeypatch.context() as mp:
        mp.setattr(os, "open", recording)
        m = LogManager(data, {}, background=False)
    try:
        assert not m.had_clean_shutdown and len(m.load_result.recovery_reports) == 6
        assert Counter(n for n in opened if n.endswith(".snapshot")) == {}
        with monkeypatch.context() as mp:
            mp.setattr(os, "open", recording)
            m._finish_snapshot_files()                      # (the background's step)
        assert Counter(n for n in opened if n.endswith(".snapshot")) == {"00000000000000000003.snapshot": 6}
        for p in range(6):
            log = m.get_log("t", p)
            assert log.log_end_offset == 3
            assert log.producer_state_manager.is_next_in_sequence(1000 + p, 0, 3)
            assert not log.producer_state_manager.is_next_in_sequence(1000 + p, 0, 0)
    finally:
        m.close()


def test_a_shutdown_after_a_crash_waits_for_no_index_sync_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recovery after a crash writes each partition's last time-index entry without a mapping;
    the clean shutdown that follows forced each of those files with an ``fdatasync`` of its own,
    one after the other on the closing thread (40% of that thread's time at 100,000 partitions).
    They are now among the fsyncs of the shutdown's ``deferred_syncs`` block, run together at its
    end: no ``fdatasync``, and every partition's time index is among the files fsynced."""
    from kafkalog.log import fsutil
    data = _crashed_dir(tmp_path, 12)
    m = LogManager(data, {}, background=False)
    assert not m.had_clean_shutdown
    synced: list[str] = []
    real = fsutil.fsync_file

    def noting(path: Any) -> None:
        if fsutil._deferred.paths is None:          # (the block's own calls, at its end)
            synced.append(os.fspath(path))
        real(path)
    monkeypatch.setattr(fsutil, "fsync_file", noting)
    fsync_each(monkeypatch)         # (not one syncfs for a quiet machine: the files are named)
    counts = count_os_calls(monkeypatch, ("fdatasync",))
    m.close()
    assert counts["fdatasync"] == 0
    for p in range(12):
        assert os.path.join(data, f"t-{p}", "00000000000000000000.timeindex") in synced
    again = LogManager(data, {}, background=False)
    try:
        assert again.had_clean_shutdown
        ti = again.get_log("t", 5).active_segment.time_index
        assert ti.entries == 1 and ti.entry(0).offset == 0
    finally:
        again.close()


def test_a_shutdown_of_many_files_syncs_their_file_system_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shutdown that noted at least ``SYNCFS_MIN_PATHS`` files to sync (a crash's recovery of
    100,000 partitions: 300,000) syncs the file system holding them with one ``syncfs`` (~45 us a
    partition here, ~300 us for an fsync of each file and directory on 16 threads). Below it, each
    file is fsynced as before. Either way the shutdown is clean and the records are there."""
    from kafkalog.log import fsutil
    if not fsutil.syncfs_reports_errors():
        pytest.skip("this kernel does not report write-back errors to syncfs (Linux < 5.8)")
    calls: list[int] = []
    real = fsutil._syncfs

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)
    monkeypatch.setattr(fsutil, "_syncfs", counted)
    fsync_each(monkeypatch)         # (no block synced whole for being made on a quiet machine)
    data = _crashed_dir(tmp_path, 12)
    m = LogManager(data, {}, background=False)
    fsyncs = count_os_calls(monkeypatch, ("fsync",))
    m.close()                                   # 12 partitions: below the default bound
    assert calls == [] and fsyncs["fsync"] > 12
    monkeypatch.setattr(fsutil, "SYNCFS_MIN_PATHS", 12)
    for p in range(12):
        m = LogManager(data, {}, background=False)
        m.get_log("t", p).append_records([b"more"])
        m.abandon()                             # a crash after each append: 12 recoveries
    m = LogManager(data, {}, background=False)
    assert not m.had_clean_shutdown
    fsyncs.clear()
    m.close()
    assert len(calls) == 1
    assert fsyncs["fsync"] < 12     # (fewer than a partition's: the checkpoints and the clean
    #                                   shutdown's file, written after the sync, and their directory)
    again = LogManager(data, {}, background=False)
    try:
        assert again.had_clean_shutdown
        assert [again.get_log("t", p).log_end_offset for p in range(12)] == [2] * 12
    finally:
        again.close()


def test_a_recovery_sets_no_index_length_and_reads_no_log_a_read_ahead_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a crash every partition's active segment is recovered: its two index files were set to
    ``segment.index.bytes`` (a ``truncate`` each, ~30 us here: 6 s of a restart of 100,000
    partitions after SIGKILL) and its ``.log`` opened and read again, though they had that length
    and the load's read-ahead had read the ``.log`` whole. Handed the directory as the read-ahead
    reads it (:func:`kafkalog.log.kernel.read_ahead`, :func:`kafkalog.log.fsutil.preread`), the
    recovery sets no length and opens no ``.log``; without it, as before (the control). Either way
    the records, the index files' lengths and the segment's max timestamp are the same."""
    from kafkalog.log import fsutil, kernel
    from kafkalog.log.loader import load_log
    data = _crashed_dir(tmp_path, 1)
    d = os.path.join(data, "t-0")
    seg_log = os.path.join(d, "00000000000000000000.log")
    calls: list[tuple[str, str]] = []
    for name in ("open", "truncate"):
        real = getattr(os, name)

        def call(path: Any, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append((_name, os.fspath(path) if isinstance(path, (str, os.PathLike)) else ""))
            return _real(path, *args, **kwargs)
        monkeypatch.setattr(os, name, call)

    def load(read_ahead: bool) -> tuple[list[tuple[str, str]], tuple[Any, ...]]:
        got = kernel.read_ahead([d])[0] if read_ahead else None    # (its own opens not counted)
        calls.clear()
        if got is not None:
            with fsutil.preread(d, *got):
                loaded = load_log(d, {}, had_clean_shutdown=False)
        else:
            loaded = load_log(d, {}, had_clean_shutdown=False)
        made = list(calls)
        seg = loaded.segments[-1]
        try:
            assert loaded.report.recovered_segments and loaded.next_offset == 1
            facts = (os.path.getsize(seg.offset_index_path), os.path.getsize(seg.time_index_path),
                     seg.max_timestamp_so_far, seg.shallow_offset_of_max_timestamp_so_far,
                     seg.read(0, 1 << 20).records.read())
        finally:
            seg.close_handlers()
        return made, facts

    before, control = load(read_ahead=False)
    assert [p for n, p in before if n == "truncate"] == [os.path.join(d, f"00000000000000000000.{s}")
                                                         for s in ("index", "timeindex")]
    assert ("open", seg_log) in before
    after, facts = load(read_ahead=True)
    assert [c for c in after if c[0] == "truncate"] == [] and ("open", seg_log) not in after, after
    assert facts == control and facts[0] == 10 * 1024 * 1024 and b"one record" in facts[4]


@pytest.mark.parametrize("shape", ["one small record", "records with index entries"])
def test_a_recovery_keeps_the_index_lengths_it_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    shape: str) -> None:
    """The common crash: a restart (its active segment's indexes as the clean close trimmed them,
    not grown until an entry is written) appended records, then SIGKILL. The recovery resets each
    index to no entry; it sets no length a file has (a ``truncate`` of each index of every
    partition to ``segment.index.bytes``, ~1 s of a 20,000-partition load after a crash here)
    when the read-ahead gave it the length: the growth waits for the first entry written through a
    mapping, as after a clean load, and the old bytes past the entries are trimmed by the close.
    The index files after the recovery and a clean close are byte for byte those of a recovery
    that set the lengths (the control: no read-ahead), and a restart (no clean shutdown was
    marked: it recovers again) finds the same entries and max timestamp."""
    from kafkalog.log import fsutil, kernel
    from kafkalog.log.loader import load_log
    big = shape != "one small record"

    def crashed(name: str) -> str:
        path = tmp_path / name
        path.mkdir()
        data = str(path / "data")
        m = LogManager(data, {}, background=False)
        m.create_topic("t", 1)
        for _ in range(5 if big else 1):          # 5 KiB records: an index entry each after the first
            m.get_log("t", 0).append_records([b"x" * 5000 if big else b"one record"])
        m.close()
        m = LogManager(data, {}, background=False)             # restarted, one more record,
        m.get_log("t", 0).append_records([b"after the restart"])
        m.abandon()                                             # then a crash
        return os.path.join(data, "t-0")

    def recover(d: str, read_ahead: bool) -> tuple[int, dict[str, bytes]]:
        got = kernel.read_ahead([d])[0] if read_ahead else None
        with monkeypatch.context() as mp:
            calls = count_os_calls(mp, ("truncate", "ftruncate"))
            if got is not None:
                with fsutil.preread(d, *got):
                    loaded = load_log(d, {}, had_clean_shutdown=False)
            else:
                loaded = load_log(d, {}, had_clean_shutdown=False)
        assert loaded.report.recovered_segments and loaded.next_offset == (6 if big else 2)
        for seg in loaded.segments:
            seg.close()
        files = {n: Path(d, n).read_bytes() for n in ("00000000000000000000.index",
                                                      "00000000000000000000.timeindex")}
        return calls["truncate"] + calls["ftruncate"], files

    d = crashed("read-ahead")
    control_d = str(tmp_path / "control")
    shutil.copytree(os.path.dirname(d), control_d)
    control_d = os.path.join(control_d, "t-0")
    before = {n: os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if "index" in n}
    # as the clean close trimmed it: the restart's load grows no index before an entry is written
    assert before["00000000000000000000.index"] == (32 if big else 0), before
    set_lengths, control = recover(control_d, read_ahead=False)
    kept, files = recover(d, read_ahead=True)
    # the control grows both (one system call each); kept: none without an entry to write, and
    # with entries the growth the first of them makes anyway
    assert (set_lengths, kept) == ((2, 2) if big else (2, 0))
    assert files == control
    assert len(files["00000000000000000000.index"]) == (40 if big else 0)      # + the new record's
    assert big or len(files["00000000000000000000.timeindex"]) == 12
    m = LogManager(os.path.dirname(d), {}, background=False)   # a restart reads them
    try:
        seg = m.get_log("t", 0).active_segment
        assert seg.offset_index.entries == (5 if big else 0)
        assert seg.shallow_offset_of_max_timestamp_so_far == (5 if big else 1)
        assert b"after the restart" in m.get_log("t", 0).read(0, 1 << 20).records.read()
    finally:
        m.close()
