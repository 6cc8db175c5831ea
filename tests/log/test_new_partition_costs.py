"""Issue 35: making a new partition. 100,000 partitions were made at 110-190 a second, each one
through the loader (a listing of the empty directory, its producer snapshots, a read of the
leader-epoch file it had just made empty) and a new thread pool for each chunk's fsyncs. A new
partition is now made by :meth:`Log.create` (the files Kafka makes, nothing read), its fsyncs on
threads kept for the process. Counted here, not timed: the system calls a
partition costs, and what a new partition's directory holds."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from kafkalog.log import fsutil, kernel
from kafkalog.log.checkpoint import LeaderEpochCheckpointFile, PartitionMetadataFile
from kafkalog.log.leader_epoch import LeaderEpochFileCache
from kafkalog.log.log import Log
from kafkalog.log.manager import LogManager
from kafkalog.log.topic_creation import CHUNK
from kafkalog.record.builder import build_batch
from tests.os_calls import count_os_calls


def _files(d: Path) -> Dict[str, int]:
    return {n: os.path.getsize(d / n) for n in sorted(os.listdir(d))}


def test_a_new_partition_is_what_opening_an_empty_directory_makes(tmp_path: Path) -> None:
    """The same files, of the same lengths, and the same offsets, as the loader leaves an empty
    directory; the leader-epoch file is made empty once nothing wrote it (Kafka's checkpoint file
    makes itself). The index files are made empty, as a clean shutdown leaves an index without
    entries, and grow to ``segment.index.bytes`` (sparse, as Kafka's) at their first entry; a
    partition closed with none keeps them empty (they were made at their full length and trimmed
    again by the close)."""
    cfg = {"segment.index.bytes": 4096, "index.interval.bytes": 100}
    opened = Log.open(tmp_path / "opened", cfg)
    created = Log.create(tmp_path / "created", cfg)
    try:
        assert created.leader_epoch_cache is not None
        assert "leader-epoch-checkpoint" not in os.listdir(tmp_path / "created")
        created.leader_epoch_cache.ensure_file()
        assert _files(tmp_path / "created") == _files(tmp_path / "opened")
        files = _files(tmp_path / "created")
        assert files["00000000000000000000.index"] == files["00000000000000000000.timeindex"] == 0
        for log in (opened, created):
            assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (0, 0, 0)
        for i in range(3):              # each batch over index.interval.bytes: entries from the second
            created.append(build_batch([(b"k", b"v" * 200, 1_700_000_000_000 + i)]))
        assert created.log_end_offset == 3
        files = _files(tmp_path / "created")
        assert files["00000000000000000000.index"] == 4096
        assert files["00000000000000000000.timeindex"] == 4092
    finally:
        opened.close()
        created.close()
    assert _files(tmp_path / "opened")["00000000000000000000.index"] == 0
    files = _files(tmp_path / "created")
    assert (files["00000000000000000000.index"], files["00000000000000000000.timeindex"]) == (16, 24)
    with Log.open(tmp_path / "created") as again:
        assert again.log_end_offset == 3
        assert again.read(1, 1 << 20).records.size > 0


def test_log_create_refuses_a_directory_that_is_there(tmp_path: Path) -> None:
    """:meth:`Log.create` makes the directory itself; one that is there is refused (nothing in it
    touched), and the manager opens it as it is instead of making it anew, in a committed
    topic's chunk too (the chunk's other directories made by the log kernel's ``make_dirs``)."""
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "keep").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        Log.create(tmp_path / "t-0")
    assert os.listdir(tmp_path / "t-0") == ["keep"]
    data = tmp_path / "data"
    with LogManager(data, background=False) as m:
        with Log.open(data / "t-0") as stray:        # made after the manager's load
            stray.append(build_batch([(b"k", b"there", 1_700_000_000_000)]))
        (log,) = m.create_topic("t", 1)
        assert log.log_end_offset == 1
        with Log.open(data / "c-70") as stray:       # in a committed topic's second chunk
            stray.append(build_batch([(b"k", b"there", 1_700_000_000_000)]))
        m.commit_topics([("c", 130, None)], leader_epoch=0)
        m.wait_created("c")
        assert m.get_log("c", 70).log_end_offset == 1
        assert [m.get_log("c", p).log_end_offset for p in (69, 71, 129)] == [0, 0, 0]


CALLS = ("listdir", "scandir", "stat", "fstat", "open", "mkdir", "makedirs", "fsync", "replace", "unlink",
         "ftruncate", "truncate")


def test_system_calls_per_new_partition(tmp_path: Path, monkeypatch: Any) -> None:
    """A committed topic's new partition, on every thread: its directory and its five files (the
    ``.log`` and the two indexes empty, ``partition.metadata`` and the ``leader-epoch-checkpoint``
    with its first epoch written in place), made a chunk at a time by the log kernel's
    ``make_dirs`` (the compiled one's calls are not ``os`` calls: it holds no interpreter lock,
    which the creating thread gave back to a busy event loop and waited for again at each of ~17
    calls a partition), two fsyncs (``partition.metadata``, the directory), and no listing, no
    stat, no rename, no length set, no deletion. Before: the loader listed each directory and
    stat'ed ~6 paths; then each index was set to ``segment.index.bytes`` (an ftruncate and an
    fstat) when made, and trimmed again at the close of a partition nothing wrote to; then each
    file was made by an ``os`` call, ``partition.metadata`` and the checkpoint written aside and
    renamed, the ``.log`` opened for good (an fstat)."""
    m = LogManager(tmp_path / "data", background=False)
    try:
        m.commit_topics([("warm", 300, None)], leader_epoch=0)
        m.wait_created()

        def made(topic: str, n: int) -> Dict[str, int]:
            with monkeypatch.context() as mp:
                counts = count_os_calls(mp, CALLS)
                m.commit_topics([(topic, n, None)], leader_epoch=0)
                m.wait_created(topic)
            return counts
        few, many = made("few", 128), made("many", 384)
        # 256 partitions more, in 4 chunks more (each chunk fsyncs the data directory once and
        # reads the machine's dirty bytes, fsutil.syncfs_is_cheaper)
        chunks = (384 - 128) // CHUNK
        per_chunk = {"open": 2, "fsync": 1}
        per = {k: (many[k] - few[k] - chunks * per_chunk.get(k, 0)) / 256 for k in CALLS}
        # the fsyncs' own opens (a file, a directory); the twin's five files and directory
        made_here = {"open": 0, "mkdir": 0} if kernel.IMPLEMENTATION == "cython" else {"open": 5, "mkdir": 1}
        assert per == {"listdir": 0, "scandir": 0, "stat": 0, "fstat": 0, "open": 2 + made_here["open"],
                       "mkdir": made_here["mkdir"], "makedirs": 0, "fsync": 2, "replace": 0, "unlink": 0,
                       "ftruncate": 0, "truncate": 0}, (few, many)
        d = tmp_path / "data" / "many-383"
        assert sorted(os.listdir(d)) == [
            "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
            "leader-epoch-checkpoint", "partition.metadata"]
        assert (d / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
        assert PartitionMetadataFile(d / "partition.metadata").read().topic_id == m.topic_id("many")
        assert _files(d)["00000000000000000000.log"] == 0
        with monkeypatch.context() as mp:
            closed = count_os_calls(mp, CALLS)
            m.close()
        # nothing written: no index loaded, grown or trimmed (the close's fsyncs and checkpoint
        # files are the data directory's, not a partition's)
        assert closed["ftruncate"] == closed["truncate"] == 0, closed
        assert closed["open"] < 100, closed
    finally:
        m.close()


def test_a_chunk_made_on_a_quiet_machine_syncs_its_file_system_once(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A chunk of a committed topic's partitions (129 paths to make durable: each partition's
    ``partition.metadata`` and directory, and the data directory) is synced by one ``syncfs`` of
    its file system (a disk commit, ~3 ms here, where its fsyncs took ~13 ms on 16 threads) when
    the machine holds at most ``SYNCFS_DIRTY_BYTES_PER_PATH`` dirty for each path of the chunk
    and of the topic's chunks to come (a syncfs writes what the machine held dirty once, the next
    chunks only what was written since); a block of fewer than ``QUIET_SYNCFS_MIN_PATHS`` (a topic
    of 10), or a machine holding more, fsyncs each path. The bound is set here to every reading
    or none: what the machine holds dirty is not the test's."""
    if not fsutil.syncfs_reports_errors():
        pytest.skip("this kernel does not report write-back errors to syncfs (Linux < 5.8)")
    got = fsutil.dirty_bytes()
    assert isinstance(got, int) and got >= 0
    syncfs: list[int] = []
    asked: list[int] = []
    real, real_cheaper = fsutil._syncfs, fsutil.syncfs_is_cheaper

    def counted(fd: int) -> None:
        syncfs.append(fd)
        real(fd)

    def cheaper(paths: int) -> bool:
        asked.append(paths)
        return real_cheaper(paths)
    monkeypatch.setattr(fsutil, "_syncfs", counted)
    monkeypatch.setattr(fsutil, "syncfs_is_cheaper", cheaper)
    m = LogManager(tmp_path / "data", background=False)
    try:
        def made(topic: str, n: int, per_path: int, *more: Tuple[str, int]) -> int:
            syncfs.clear()
            asked.clear()
            with monkeypatch.context() as mp:
                fsyncs = count_os_calls(mp, ("fsync",))
                mp.setattr(fsutil, "SYNCFS_DIRTY_BYTES_PER_PATH", per_path)
                m.commit_topics([(t, k, None) for t, k in ((topic, n), *more)], leader_epoch=0)
                m.wait_created()
            return fsyncs["fsync"]
        fsyncs = made("quiet", 4 * CHUNK, 1 << 40)
        assert len(syncfs) == 4, syncfs                 # a syncfs a chunk
        assert fsyncs <= 3, fsyncs                      # the record's (its file and directory)
        # each chunk's 129 paths and the 2 a partition of the chunks after it
        assert asked == [129 + 2 * 3 * CHUNK, 129 + 2 * 2 * CHUNK, 129 + 2 * CHUNK, 129]
        assert m._creator.to_make == 0
        # two topics committed together: the second's partitions are to come for the first's
        made("first", CHUNK, 1 << 40, ("second", 40))
        assert asked == [129 + 2 * 40, 2 * 40 + 1] and len(syncfs) == 2
        assert m._creator.to_make == 0
        assert made("few", 10, 1 << 40) >= 2 * 10 and syncfs == [] and asked == []
        assert made("busy", 2 * CHUNK, -1) >= 2 * 2 * CHUNK and syncfs == []
    finally:
        m.close()
    with LogManager(tmp_path / "data", background=False) as again:
        assert again.load_result.completed_topics == []
        assert again.partitions_of("quiet") == list(range(4 * CHUNK))
        d = tmp_path / "data" / f"quiet-{4 * CHUNK - 1}"
        assert PartitionMetadataFile(d / "partition.metadata").read().topic_id == again.topic_id("quiet")


def test_an_unsynced_checkpoint_is_fsynced_not_written_again(tmp_path: Path, monkeypatch: Any) -> None:
    """A leader epoch written without fsync (a new partition's first) is made durable by the log's
    flush with an fsync of the file and one of its directory; it was written a second time before
    (a create and a rename a partition at a shutdown after making 100,000)."""
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path, create=False), read=False)
    cache.assign(0, 0, sync=False)
    inode = os.stat(path).st_ino
    with monkeypatch.context() as mp:
        counts = count_os_calls(mp, ("fsync", "replace", "open"))
        cache.flush_if_unsynced()
        cache.flush_if_unsynced()                   # synced: nothing more
    assert counts == {"fsync": 2, "replace": 0, "open": 2}
    assert os.stat(path).st_ino == inode and path.read_text() == "0\n1\n0 0\n"
    os.unlink(path)                                 # (a file lost: written again, synced)
    cache.assign(1, 5, sync=False)
    os.unlink(path)
    cache.flush_if_unsynced()
    assert path.read_text() == "0\n2\n0 0\n1 5\n"


def test_committed_topics_are_made_whole_by_the_creator(tmp_path: Path) -> None:
    """Several topics committed at once, their partitions made by the creator's thread through
    :meth:`Log.create`: each topic is seen whole once made, no record left, every partition
    holding the topic's id, after a restart too."""
    d = tmp_path / "data"
    seen_threads = set()

    def prepare(log: Log) -> None:
        seen_threads.add(threading.current_thread().name)
    with LogManager(d, background=False) as m:
        ids = m.commit_topics([(f"t{i}", 700, None) for i in range(3)], prepare=prepare)
        m.wait_created()
        assert not m.creating()
        for i in range(3):
            assert m.partitions_of(f"t{i}") == list(range(700))
            assert not any(m.partition_pending(f"t{i}", p) for p in range(700))
            assert m.topic_id(f"t{i}") == ids[i]
        assert seen_threads == {"kafkalog-topic-creator"}
    assert not [n for n in os.listdir(d) if n.startswith("kafkalog-creating-")]
    with LogManager(d, background=False) as again:
        assert again.load_result.completed_topics == []
        assert again.topic_id("t2") == ids[2] and len(again.partitions_of("t2")) == 700


def test_the_sync_threads_are_made_again_in_a_forked_child(tmp_path: Path) -> None:
    """The threads a :func:`fsutil.deferred_syncs` block hands its fsyncs to are kept for the
    process; a child forked after they were made (Spark's workers, multiprocessing) has none of
    them and makes its own, instead of waiting forever for threads it does not have."""
    code = (
        "import os, sys\n"
        "from kafkalog.log import fsutil\n"
        "def block(d):\n"
        "    os.makedirs(d)\n"
        "    with fsutil.deferred_syncs():\n"
        "        for i in range(4):\n"
        "            fsutil.atomic_write(os.path.join(d, str(i)), b'x')\n"
        "block(os.path.join(sys.argv[1], 'parent'))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    block(os.path.join(sys.argv[1], 'child'))\n"
        "    os._exit(0)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n")
    res = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(tmp_path)], timeout=60)
    assert res.returncode == 0
    assert sorted(os.listdir(tmp_path / "child")) == ["0", "1", "2", "3"]
    assert fsutil._SYNC_THREADS > 1


def test_a_new_segment_whose_index_files_are_there_sets_their_length(tmp_path: Path) -> None:
    """The empty index files are made only where none is there: a file already there (left by
    something else) is set to ``segment.index.bytes`` as before, and an index already read is
    resized, not made again; a new one is made empty, its growth waiting for its first entry."""
    from kafkalog.log.config import as_log_config
    from kafkalog.log.segment import LogSegment
    cfg = as_log_config({"segment.index.bytes": 4096})
    (tmp_path / "00000000000000000000.index").write_bytes(b"")
    seg = LogSegment.open(str(tmp_path), 0, cfg)
    try:
        assert not seg.offset_index.create_empty(4096)          # there: nothing done
        seg.create_indexes_before_first_entry(4096)
        assert _files(tmp_path)["00000000000000000000.index"] == 4096
        assert _files(tmp_path)["00000000000000000000.timeindex"] == 0
        assert not seg.time_index.create_empty(4096)            # already made: nothing done
        assert seg.time_index.max_entries == 4096 // 12
    finally:
        seg.close()


def test_files_made_by_the_caller_are_adopted_as_log_create_makes_them(tmp_path: Path) -> None:
    """``Log.create(files_made=...)`` over the files ``Log.new_files`` names (made here by the log
    kernel's ``make_dirs``): the same directory as ``Log.create`` and a first epoch leaves, the
    same appends and reads, nothing opened until the first append; refused with
    ``preallocate=true`` (those files are made at their full length)."""
    from kafkalog.log.checkpoint import EpochEntry
    epochs = [EpochEntry(0, 0)]
    assert kernel.make_dirs([str(tmp_path / "made")], Log.new_files(epochs)) == (1, None)
    with pytest.raises(ValueError, match="preallocate"):
        Log.create(tmp_path / "made", {"preallocate": "true"}, files_made=epochs)
    made = Log.create(tmp_path / "made", files_made=epochs)
    created = Log.create(tmp_path / "created")
    try:
        assert created.leader_epoch_cache is not None and made.leader_epoch_cache is not None
        created.leader_epoch_cache.assign(0, 0, sync=False)
        assert made.leader_epoch_cache.epoch_entries() == created.leader_epoch_cache.epoch_entries()
        assert _files(tmp_path / "made") == _files(tmp_path / "created")
        assert made.active_segment.log.fd == -1             # opened at its first use
        for log in (made, created):
            for i in range(3):
                log.append(build_batch([(b"k", b"v" * 5000, 1_700_000_000_000 + i)]))
        assert _files(tmp_path / "made") == _files(tmp_path / "created")
        assert made.read(1, 1 << 20).records.size == created.read(1, 1 << 20).records.size > 0
    finally:
        made.close()
        created.close()
    assert _files(tmp_path / "made") == _files(tmp_path / "created")
    with Log.open(tmp_path / "made") as again:
        assert again.log_end_offset == 3
