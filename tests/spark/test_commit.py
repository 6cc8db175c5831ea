"""Crash safety of the Spark commit protocol (kafkalog.spark.commit): real processes killed
mid-commit with os._exit, then recovery and readers checked on the files they left."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from kafkalog.spark.commit import pending_bounds, read_committed_batch, read_intent, recover_data_dir, sink_commit_path
from kafkalog.spark.log_view import PartitionDir, partition_bounds
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.planning import plan_ranges

_SCRIPT = textwrap.dedent("""
    import os, sys, pyarrow as pa
    from kafkalog.spark import commit, writer
    from kafkalog.spark.options import parse_write_options
    data, tag, crash = sys.argv[1], sys.argv[2], sys.argv[3]
    if os.environ.get("KAFKALOG_TEST_MOVE") == "1":
        commit.MOVE_MIN_BYTES = 0       # every staging file is moved into the log
    opts = parse_write_options({"path": data, "topic": "t", "partitions": "2"})
    stager = writer.ArrowStager(opts, writer.staging_prefix(data, tag), tag)
    n = 1000
    stager.add_batch(pa.record_batch({"key": pa.array([b"k%d" % i for i in range(n)]),
                                      "value": pa.array([tag.encode()] * n)}))
    staged = writer.staged_by_partition([stager.finish()])
    if crash == "append":
        commit._after_partition_append = lambda i: os._exit(17) if i == 1 else None
    elif crash == "commit-point":
        commit._after_commit_point = lambda: os._exit(17)
    commit.commit_staged(data, staged, job_id=tag, new_topic_partitions=2,
                         sink="s1" if crash != "none" or tag.startswith("s") else None,
                         batch_id=int(sys.argv[4]) if len(sys.argv) > 4 else None)
""")


_MOVE = {"value": "0"}


def _run(data, tag, crash, batch_id=None):
    args = [sys.executable, "-c", _SCRIPT, str(data), tag, crash]
    if batch_id is not None:
        args.append(str(batch_id))
    env = dict(os.environ, KAFKALOG_TEST_MOVE=_MOVE["value"])
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env).returncode


@pytest.fixture(params=["copy", "move"])
def staging_mode(request):
    """The crash tests run with staging files copied into the logs and moved into them."""
    _MOVE["value"] = "1" if request.param == "move" else "0"
    yield request.param
    _MOVE["value"] = "0"


def _leo(data, p):
    return partition_bounds(PartitionDir("t", p, str(data / f"t-{p}"))).log_end_offset


def test_crash_mid_append_is_invisible_then_rolled_back(tmp_path, staging_mode):
    assert _run(tmp_path, "first", "none") == 0
    before = {p: _leo(tmp_path, p) for p in (0, 1)}
    assert sum(before.values()) == 1000
    assert _run(tmp_path, "second", "append", batch_id=0) == 17  # died after one partition
    assert read_intent(str(tmp_path))["state"] == "appending"
    # the partitions are appended in parallel: whichever finished first holds half-published data
    assert any(_leo(tmp_path, p) > before[p] for p in (0, 1))  # ...
    ranges = plan_ranges(parse_read_options({"path": str(tmp_path), "subscribe": "t"}))
    assert {r.partition: r.end for r in ranges} == before  # ... which readers do not see
    assert recover_data_dir(str(tmp_path)) == "rolled back"
    assert {p: _leo(tmp_path, p) for p in (0, 1)} == before and read_intent(str(tmp_path)) is None
    assert pending_bounds(str(tmp_path)) == {}
    assert read_committed_batch(sink_commit_path(str(tmp_path), "s1")) == -1
    assert _run(tmp_path, "third", "none") == 0  # the next commit works and appends once
    assert sum(_leo(tmp_path, p) for p in (0, 1)) == 2000
    # moved: each successful commit's staging file became a segment of its own (the rolled-back
    # one is gone); copied: both went into the one segment
    logs = [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")]
    assert len(logs) == (2 if staging_mode == "move" else 1), logs


def test_stream_batch_id_survives_crash_after_commit_point(tmp_path, staging_mode):
    assert _run(tmp_path, "s-0", "commit-point", batch_id=0) == 17
    assert read_intent(str(tmp_path))["state"] == "committed"
    assert sum(_leo(tmp_path, p) for p in (0, 1)) == 1000  # the data is complete and visible
    # Spark replays batch 0 after the restart: recovery records it first, so it is dropped
    assert _run(tmp_path, "s-0", "none", batch_id=0) == 0
    assert read_committed_batch(sink_commit_path(str(tmp_path), "s1")) == 0
    assert sum(_leo(tmp_path, p) for p in (0, 1)) == 1000
    assert _run(tmp_path, "s-1", "none", batch_id=1) == 0
    assert sum(_leo(tmp_path, p) for p in (0, 1)) == 2000


def _batches(n, size=300):
    from kafkalog.log._encode import encode_v2_batch
    return b"".join(encode_v2_batch([(b"k%d" % i, b"v" * size)] * 20, default_timestamp=1000 + i)
                    for i in range(n))


def test_append_file_writes_what_append_writes(tmp_path):
    """Log.append_file (the commit's copy from a private mapping) leaves the same segments,
    indexes and offsets as Log.append of the same bytes, across segment rolls, and never
    modifies the staged file."""
    from kafkalog.log.log import Log
    data = _batches(300)
    staged = tmp_path / "staged"
    staged.write_bytes(data + data[:40])  # + a torn batch, ignored by both
    cfg = {"segment.bytes": 100_000, "index.interval.bytes": 4096}
    a, b = Log.open(str(tmp_path / "a-0"), cfg), Log.open(str(tmp_path / "b-0"), cfg)
    a.append(_batches(3))
    b.append(_batches(3))
    info_a = a.append(data + data[:40])
    info_b = b.append_file(str(staged))
    assert info_a == info_b and info_b.valid_bytes == len(data)
    assert len(b.segments) > 3 and b.log_end_offset == 303 * 20
    a.close()
    b.close()
    names = sorted(os.listdir(a.dir))
    assert names == sorted(os.listdir(b.dir))
    for name in names:
        if name.endswith((".log", ".index", ".timeindex")):
            assert (tmp_path / "a-0" / name).read_bytes() == (tmp_path / "b-0" / name).read_bytes(), name
    assert staged.read_bytes() == data + data[:40]


def test_corrupt_staging_file_rolls_the_commit_back(tmp_path):
    from kafkalog.errors import CorruptRecordError
    from kafkalog.spark.commit import commit_staged
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_bytes(_batches(10))
    data = bytearray(_batches(10))
    data[-5] ^= 0xFF  # payload of the last batch: its CRC no longer matches
    bad.write_bytes(bytes(data))
    import pytest
    with pytest.raises(CorruptRecordError):
        commit_staged(str(tmp_path / "d"), {("t", 0): [str(good)], ("t", 1): [str(bad)]},
                      job_id="j", new_topic_partitions=2)
    assert read_intent(str(tmp_path / "d")) is None
    assert _leo(tmp_path / "d", 0) == 0 and _leo(tmp_path / "d", 1) == 0
    torn = tmp_path / "torn"
    torn.write_bytes(_batches(2)[:-7])
    with pytest.raises(Exception, match="partial batch"):
        commit_staged(str(tmp_path / "d"), {("t", 0): [str(torn)]}, job_id="k")
    assert _leo(tmp_path / "d", 0) == 0


def test_staging_files_are_rolled_at_segment_bytes(tmp_path):
    """Every staging file fits one segment (so the commit can move it), offsets count from 0 in
    each file, and the files hold every row once, in order."""
    from kafkalog.record.records import iter_batches
    from kafkalog.spark import writer
    from kafkalog.spark.options import parse_write_options
    opts = parse_write_options({"path": str(tmp_path), "topic": "t", "partitions": "1",
                                "topic.segment.bytes": "65536"})
    stager = writer.ArrowStager(opts, writer.staging_prefix(str(tmp_path), "job"), "task")
    for lo in range(0, 20000, 7000):   # input batches bigger than a segment
        n = min(7000, 20000 - lo)
        stager.add_batch(pa.record_batch({"value": pa.array([b"v%06d" % i + b"x" * 40
                                                             for i in range(lo, lo + n)])}))
    staged = stager.finish()
    assert len(staged.files) > 10 and sum(f.records for f in staged.files) == 20000
    values = []
    for f in staged.files:
        data = open(f.path, "rb").read()
        assert len(data) <= 65536
        batches = list(iter_batches(data))
        assert batches[0].base_offset == 0
        assert all(b.base_offset == a.last_offset + 1 for a, b in zip(batches, batches[1:]))
        values += [r.value[:7] for b in batches for r in b]
    assert values == [b"v%06d" % i for i in range(20000)]


_FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys, pyarrow as pa
    from kafkalog.errors import KafkalogIOError
    from kafkalog.spark import writer
    from kafkalog.spark.options import parse_write_options
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # writes past the limit fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
    data = sys.argv[1]
    opts = parse_write_options({"path": data, "topic": "t"})
    stager = writer.ArrowStager(opts, writer.staging_prefix(data, "job"), "task")
    try:
        for _ in range(20):
            stager.add_batch(pa.record_batch({"value": pa.array([b"x" * 1000] * 10)}))
        stager.finish()
    except KafkalogIOError as err:
        stager.discard()
        print("typed", err.file)
""")


def test_staging_write_on_a_full_disk_is_a_typed_error(tmp_path):
    """A staging write that the file system refuses (EFBIG from RLIMIT_FSIZE, as ENOSPC would be)
    raises KafkalogIOError naming the staging file, and the failed task leaves no staging file."""
    p = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    kind, path = p.stdout.split()
    assert kind == "typed" and os.path.basename(path).startswith(".kafkalog-staging.job.task")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".kafkalog-staging")]
