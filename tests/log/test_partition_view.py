"""The read-only view of a partition / data directory (kafkalog.log.read.partition_view,
kafkalog.log.read.data_dir_view): on a directory written by kafkalog, on a Kafka-layout directory holding
genuine Kafka bytes (oracle vectors), while a writer appends, with aborted transactions, with
preallocated index tails; and the three read paths (the writable Log, the client's read-only mode,
the Spark reader's calls) give the same last stable offset, aborted transactions and offsets for
timestamps on the same directory."""

from __future__ import annotations

import os
import shutil

import pytest

import kafkalog
from kafkalog.errors import CorruptRecordError, LogDirError
from kafkalog.log.log import Log
from kafkalog.log.naming import log_file, offset_index_file, time_index_file
from kafkalog.log.read.data_dir_view import DataDirView
from kafkalog.log.read.partition_view import PartitionView
from kafkalog.record.builder import build_batch
from tests.oracle import KAFKA_CLIENTS
from tests.test_client_readonly import _txn_log  # plain, aborted (pid 7), committed (8), open (9)

try:  # the Spark reader's calls: kafkalog.spark imports pyspark (the spark extra)
    from kafkalog.spark import log_view as spark_view
    from kafkalog.spark.segment_reader import last_stable_offset as spark_lso
    from kafkalog.spark.segment_reader import read_range
except ImportError:
    spark_view = spark_lso = read_range = None
needs_spark = pytest.mark.skipif(spark_view is None, reason="needs the spark extra (pip install "
                                 "'kafkalog[spark]'): kafkalog.spark imports pyspark")

SMALL = {"segment.bytes": 1024, "index.interval.bytes": 1}


def _values(view: PartitionView, start: int, end: int) -> list:
    return [r.value for b in view.batches(start, end) if not b.is_control for r in b.records()
            if start <= r.offset < end]


def test_view_of_a_directory_written_by_kafkalog(tmp_path):
    d = str(tmp_path / "data")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 2, config=SMALL)
        for i in range(200):
            dl.produce("t", value=b"v%d" % i, partition=0, timestamp=1000 + i)
        dl.alter_topic_config("t", {"retention.ms": 12345})
    with DataDirView(d) as view:
        assert view.topics() == ["t"] and view.partitions_of("t") == [0, 1]
        assert view.topic_config("t").retention_ms == 12345
        p0 = view.get_log("t", 0)
        assert len(p0.segments) > 3                       # several segments: floor lookups
        assert (p0.log_start_offset, p0.log_end_offset) == (0, 200)
        assert p0.last_stable_offset == 200
        assert _values(p0, 150, 153) == [b"v150", b"v151", b"v152"]
        found = p0.offset_for_timestamp(1150)
        assert (found.offset, found.timestamp) == (150, 1150)
        assert p0.offset_for_timestamp(5000) is None
        p1 = view.get_log("t", 1)
        assert (p1.log_start_offset, p1.log_end_offset) == (0, 0)
        with pytest.raises(kafkalog.errors.InvalidTopicError):
            view.get_log("t", 2)


def test_missing_data_dir_is_a_typed_error(tmp_path):
    with pytest.raises(LogDirError):
        DataDirView(str(tmp_path / "nope"))
    assert not os.path.exists(tmp_path / "nope")


def _kafka_partition(tmp_path, vector: str) -> str:
    """A Kafka-layout data directory with one partition whose only segment holds the bytes of a
    genuine kafka-clients vector (no indexes, no .txnindex: as copied from a broker's segment)."""
    with open(os.path.join(KAFKA_CLIENTS, vector + ".hex")) as f:
        data = bytes.fromhex(f.read())
    pdir = tmp_path / "kafka" / "t-0"
    pdir.mkdir(parents=True)
    with open(log_file(str(pdir), 0), "wb") as f:
        f.write(data)
    return str(tmp_path / "kafka")


@needs_spark
def test_kafka_transactional_vector(tmp_path):
    """Kafka's own bytes: a committed transaction (offsets 0-1, COMMIT at 2) and an aborted one
    (3, ABORT at 4) of producer 1000. The view follows the markers; the writable Log (which
    recovers a copy and builds its .txnindex) and the Spark reader say the same."""
    d = _kafka_partition(tmp_path, "v2-transactional")
    copy = str(tmp_path / "copy")
    shutil.copytree(d, copy)
    with DataDirView(d) as view:
        p = view.get_log("t", 0)
        assert (p.log_end_offset, p.last_stable_offset) == (5, 5)
        assert p.aborted_transactions(0, 5) == [(1000, 3)]
        assert p.committed_view(0) == (5, [(1000, 3)])
    with kafkalog.open(d, read_only=True) as dl:
        assert [r.offset for r in dl.consume("t", isolation="read_committed")] == [0, 1]
        assert [r.offset for r in dl.consume("t")] == [0, 1, 3]
    with Log.open(os.path.join(copy, "t-0")) as log:
        assert log.last_stable_offset == 5
        assert [(a.producer_id, a.first_offset) for a in log.collect_aborted_transactions(0, 5)] == \
            [(1000, 3)]
        assert [b.base_offset for b in log.batches(0, "read_committed")] == [0]
    pdir = spark_view.list_partitions(d)[0]
    assert spark_lso(pdir, 0, 5) == 5
    rows = [r for b in read_range(pdir, 0, 5, read_committed=True) for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == [0, 1]


def test_kafka_mixed_magic_vector(tmp_path):
    """v0, v1 and v2 batches in one segment (Kafka's bytes): offsets and timestamps."""
    d = _kafka_partition(tmp_path, "v2-mixed-segment")
    with DataDirView(d) as view:
        p = view.get_log("t", 0)
        assert p.log_end_offset == 4
        assert [r.offset for b in p.batches(0, 4) for r in b.records()] == [0, 1, 2, 3]
        assert p.offset_for_timestamp(-1).offset == 0     # v0 records have no timestamp (-1)


def test_transactions_with_aborted_data(tmp_path):
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        _txn_log(dl.manager.get_log("t", 0))
    with DataDirView(d) as view:
        p = view.get_log("t", 0)
        assert p.last_stable_offset == 6                  # the open transaction of producer 9
        assert p.log_end_offset == 8
        assert p.aborted_transactions(0, 6) == [(7, 1)]
        assert p.aborted_transactions(2, 6) == [(7, 1)]   # overlaps: its marker is at 3
        assert p.aborted_transactions(4, 6) == []
        # a scan starting inside the aborted transaction still sees it (from its start)
        assert p.transaction_state(2, 8).aborted == [(7, 2, 3)]


def test_writer_appending_while_the_view_reads(tmp_path):
    """The view is a snapshot: a writer's later appends (and its index entries past the snapshot)
    are never seen, and the active segment's preallocated index is read without its zero tail."""
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, config={"index.interval.bytes": 1})
        for i in range(50):
            dl.produce("t", value=b"a%d" % i, partition=0, timestamp=100 + i)
        log = dl.manager.get_log("t", 0)
        pdir = os.path.join(d, "t-0")
        # the live active segment's index is preallocated: a long all-zero tail
        assert os.path.getsize(offset_index_file(pdir, 0)) > 50 * 8
        view = PartitionView(pdir)
        try:
            assert view.log_end_offset == 50
            for i in range(50, 80):
                dl.produce("t", value=b"b%d" % i, partition=0, timestamp=100 + i)
            log.flush(include_active=True)
            assert view.log_end_offset == 50
            assert _values(view, 45, 10 ** 9)[-1] == b"a49"
            assert view.offset_for_timestamp(100 + 60) is None     # after the snapshot
            assert view.offset_for_timestamp(100 + 20).offset == 20
            later = PartitionView(pdir)
            assert later.log_end_offset == 80
            assert _values(later, 78, 80) == [b"b78", b"b79"]
            later.close()
        finally:
            view.close()


@needs_spark
def test_index_with_a_zero_tail_and_entries_past_the_log(tmp_path):
    """A crash leaves a preallocated index (zero tail) and index entries pointing past a
    truncated .log: lookups ignore both and still find every offset."""
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, config={"index.interval.bytes": 1})
        for i in range(40):
            dl.produce("t", value=b"v%d" % i, partition=0, timestamp=10 + i)
    pdir = os.path.join(d, "t-0")
    for path in (offset_index_file(pdir, 0), time_index_file(pdir, 0)):
        with open(path, "ab") as f:
            f.write(b"\0" * 4096)
    size = os.path.getsize(log_file(pdir, 0))
    with open(log_file(pdir, 0), "r+b") as f:
        f.truncate(size * 3 // 4)                   # entries past the end now
    with PartitionView(pdir) as view:
        leo = view.log_end_offset
        assert 20 < leo < 40
        assert [r.offset for b in view.batches(leo - 3, leo) for r in b.records()] == \
            [leo - 3, leo - 2, leo - 1]
        assert view.offset_for_timestamp(10 + leo - 1).offset == leo - 1
        assert view.offset_for_timestamp(10 + leo) is None
        assert spark_view.offset_for_timestamp(spark_view.list_partitions(d)[0], 15, 0) == 5


def _segmented_partition(tmp_path) -> str:
    """A partition directory of 100 records in several segments."""
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, config=SMALL)
        for _ in range(100):
            dl.produce("t", value=b"x" * 50, partition=0)
    return os.path.join(d, "t-0")


def test_partial_batch_in_an_older_segment_is_corruption(tmp_path):
    pdir = _segmented_partition(tmp_path)
    first = log_file(pdir, 0)
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) - 5)
    with PartitionView(pdir) as view, pytest.raises(CorruptRecordError) as e:
        list(view.batches(0, view.log_end_offset))
    assert e.value.file == first


@needs_spark
def test_three_read_paths_agree(tmp_path):
    """The writable Log, the client's read-only mode and the Spark reader's calls: the same last
    stable offset, aborted transactions and offsets for timestamps on one directory."""
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, config=SMALL)
        log = dl.manager.get_log("t", 0)
        for i in range(30):
            log.append(build_batch([(None, b"p%d" % i, 1000 + i)]))
        _txn_log(log)   # offsets 30..37, timestamps 1..8 (below the ones before: not monotonic)
        for i in range(30):
            log.append(build_batch([(None, b"q%d" % i, 2000 + i)]))
        assert len(log.segments) > 2
        writable = (log.last_stable_offset,
                    [(a.producer_id, a.first_offset) for a in
                     log.collect_aborted_transactions(0, log.last_stable_offset)],
                    [None if (r := log.offset_for_timestamp(ts)) is None else r.offset
                     for ts in (0, 5, 1010, 1500, 2029, 3000)])
    with kafkalog.open(d, read_only=True) as dl:
        ro = dl.manager.get_log("t", 0)
        read_only = (ro.last_stable_offset, ro.aborted_transactions(0, ro.last_stable_offset),
                     [None if (r := ro.offset_for_timestamp(ts)) is None else r.offset
                      for ts in (0, 5, 1010, 1500, 2029, 3000)])
        assert dl.offsets_for_times("t", 1010) == {0: 10}
    pdir = spark_view.list_partitions(d)[0]
    bounds = spark_view.partition_bounds(pdir)
    spark = (spark_lso(pdir, bounds.log_start_offset, bounds.log_end_offset),
             [r["value"] for b in read_range(pdir, 0, bounds.log_end_offset, read_committed=True)
              for r in b.to_pylist()],
             [spark_view.offset_for_timestamp(pdir, ts, bounds.log_start_offset)
              for ts in (0, 5, 1010, 1500, 2029, 3000)])
    assert writable[0] == read_only[0] == spark[0] == 36
    assert writable[1] == read_only[1] == [(7, 31)]
    # the committed records up to the LSO: the aborted transaction's record is not among them
    assert spark[1] == [b"p%d" % i for i in range(30)] + [b"plain", b"committed", b"after"]
    assert writable[2] == read_only[2] == spark[2] == [0, 0, 10, 38, 67, None]


@needs_spark
def test_local_files_interface(tmp_path):
    """The view's file access (what an object-store implementation will provide): sizes, ranged
    reads, small files read whole, a missing file as None, never a file created."""
    from kafkalog.log.read.view_files import LocalFiles
    files = LocalFiles()
    path = str(tmp_path / "f.log")
    with open(path, "wb") as f:
        f.write(bytes(range(100)))
    assert files.size(path) == 100
    assert files.read_range(path, 10, 5) == bytes(range(10, 15))
    assert files.read_range(path, 98, 10) == bytes([98, 99])
    assert files.read_small(path) == bytes(range(100))
    seg = files.open_segment(path)
    assert seg is not None and seg.size == 100 and bytes(seg.buf[:3]) == b"\0\1\2"
    seg.close()
    missing = str(tmp_path / "missing")
    assert files.size(missing) is None and files.read_small(missing) is None
    assert files.open_segment(missing) is None and not os.path.exists(missing)
    with pytest.raises(LogDirError):
        files.list_dir(missing)


def test_segment_deleted_after_the_listing(tmp_path):
    """The default view opens every segment at once: one deleted later stays readable. A range
    reader's view (``open_all=False``, the Spark tasks') opens segments as it reads them and
    says so with a typed error when retention removed one meanwhile."""
    pdir = _segmented_partition(tmp_path)
    eager, lazy = PartitionView(pdir), PartitionView(pdir, open_all=False)
    try:
        os.unlink(log_file(pdir, 0))
        assert sum(1 for _ in eager.batches(0, 100)) == 100
        with pytest.raises(kafkalog.errors.OffsetOutOfRangeError) as e:
            list(lazy.batches(0, 100))
        assert e.value.file == log_file(pdir, 0)
    finally:
        eager.close()
        lazy.close()
