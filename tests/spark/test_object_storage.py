"""The Spark source, and the client's read-only mode, over object storage: a data directory in
S3 (moto's server on 127.0.0.1, reached through pyarrow.fs with the fs.s3a.* options, as a cluster
would): full reads, pushdown reads that fetch only what they need (counted by the server), a
streaming read over a growing remote layout; and the clear refusal of writes to object storage."""

from __future__ import annotations

import os
import shutil

import pytest

import kafkalog
from kafkalog.errors import LogDirError
from tests.objectstore.s3_server import s3_server  # noqa: F401 - a pytest fixture

RECORDS = 30_000
CONFIG = {"log.segment.bytes": 1_000_000, "log.index.interval.bytes": 4096}
PAD = b"." * 90


def _value(i: int) -> bytes:
    return b"order-%06d" % i + PAD


def _fill(local, lo: int, hi: int) -> None:
    with kafkalog.open(local, CONFIG, background=False) as dl:
        if "orders" not in dl.topics():
            dl.create_topic("orders", partitions=2)
        for p in range(2):
            dl.produce_many("orders", [_value(i) for i in range(lo, hi)], partition=p,
                            batch_size=4000)


def _log_bytes(local) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(local) for f in fs
               if f.endswith(".log"))


def _read(spark, uri, options, **extra):
    r = spark.read.format("kafkalog").option("subscribe", "orders")
    for k, v in {**options, **extra}.items():
        r = r.option(k, v)
    return r.load(uri)


def test_full_and_pushdown_reads_from_s3(spark, s3_server, tmp_path):  # noqa: F811
    local = tmp_path / "logs"
    _fill(local, 0, RECORDS)
    uri = s3_server.upload(local, "kafka", "prod/logs")
    expected = sorted((p, i, _value(i)) for p in range(2) for i in range(RECORDS))

    s3_server.counts.reset()
    rows = _read(spark, uri, s3_server.options).select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == expected
    assert s3_server.counts.get_bytes >= _log_bytes(local)  # every .log byte (+ indexes)

    # a point read: the planner lists, reads indexes whole and the tail of the last segment; the
    # task reads from the .index position of the offset; far less than the data
    s3_server.counts.reset()
    df = _read(spark, uri, s3_server.options).where(
        "partition = 1 AND offset >= 12000 AND offset < 12010")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(12000, 12010))
    log_gets = [r for r in s3_server.counts.gets() if r[1].endswith(".log")]
    assert log_gets and all(r[2] for r in log_gets)  # ranged GETs only, never a whole .log
    assert s3_server.counts.get_bytes < _log_bytes(local) / 10

    # the client's read-only mode over the same URI
    with kafkalog.open(uri, s3_server.options, read_only=True) as dl:
        got = [(r.offset, r.value) for r in dl.consume("orders", 0, offset=RECORDS - 3)]
        assert got == [(i, _value(i)) for i in range(RECORDS - 3, RECORDS)]


def test_a_full_read_fetches_each_segment_in_one_request(spark, s3_server, tmp_path):  # noqa: F811
    # one segment per partition, smaller than a request: the planner walks the tail of each from
    # its last .index entry to find the log end offset; each task then asks for its segment
    # whole, once, and does not look for the log end offset again
    local = tmp_path / "logs"
    with kafkalog.open(local, background=False) as dl:
        dl.create_topic("orders", partitions=2)
        for p in range(2):
            dl.produce_many("orders", [_value(i) for i in range(20_000)], partition=p,
                            batch_size=500)
    uri = s3_server.upload(local, "kafka", "onereq/logs")
    s3_server.counts.reset()
    n = _read(spark, uri, s3_server.options).count()
    assert n == 40_000
    for p in range(2):
        size = os.path.getsize(local / f"orders-{p}" / "00000000000000000000.log")
        ranges = sorted(r[2] for r in s3_server.counts.gets(f"orders-{p}/00000000000000000000.log"))
        whole = f"bytes=0-{size - 1}"
        assert whole in ranges, ranges
        tails = [r for r in ranges if r != whole]
        assert len(tails) == 1 and tails[0].endswith(f"-{size - 1}"), ranges   # the planner's


def test_streaming_over_a_growing_remote_layout(spark, s3_server, tmp_path):  # noqa: F811
    local = tmp_path / "logs"
    _fill(local, 0, 5000)
    uri = s3_server.upload(local, "kafka", "growing/logs")
    q = (spark.readStream.format("kafkalog").option("subscribe", "orders")
         .option("startingOffsets", "earliest").options(**s3_server.options).load(uri)
         .selectExpr("partition", "offset").writeStream.format("memory").queryName("remote_stream")
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        q.processAllAvailable()
        assert spark.sql("select count(*) c from remote_stream").first().c == 10_000
        before = {p: set(os.listdir(local / p)) for p in ("orders-0", "orders-1")}
        _fill(local, 5000, 20_000)                      # new segments, the active one grown
        # publish as a segment uploader must: the grown segments first, then the new ones (a
        # listing that shows a new segment before the grown one has a gap of offsets; the
        # query is running while this uploads)
        grown = tmp_path / "grown"
        for p, names in before.items():
            (grown / p).mkdir(parents=True)
            for name in names:
                shutil.copy(local / p / name, grown / p / name)
        s3_server.upload(grown, "kafka", "growing/logs")
        s3_server.upload(local, "kafka", "growing/logs")
        q.processAllAvailable()
        rows = spark.sql("select partition, offset from remote_stream").collect()
        assert sorted((r.partition, r.offset) for r in rows) == \
            sorted((p, i) for p in range(2) for i in range(20_000))
    finally:
        q.stop()


def test_writes_to_object_storage_are_refused_clearly(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LogDirError, match="needs a POSIX file system.*read_only=True"):
        kafkalog.open("s3://bucket/logs")
    assert os.listdir(tmp_path) == []          # no ./s3:/bucket/logs created by mistake
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="kafkalog sink .* needs a POSIX file system"):
        df.write.format("kafkalog").option("topic", "t").mode("append").save("s3a://bucket/x")
    assert os.listdir(tmp_path) == []
    # file:// is a local path
    with kafkalog.open("file://" + str(tmp_path / "d"), background=False) as dl:
        dl.create_topic("t")
    assert (tmp_path / "d" / "t-0").is_dir()
