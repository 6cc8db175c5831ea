"""A kafkalog data directory stays one a Kafka broker opens: Kafka's LogManager.loadLogs parses
EVERY subdirectory of a log dir as ``<topic>-<partition>`` (or ``...-delete|-future|-stray``) and
refuses to start otherwise; it ignores regular files. After a Spark batch write, a stream write
with checkpoints, a compaction job and an aborted job, every subdirectory must parse (same rule
as Kafka: kafkalog.log.naming.parse_partition_dir_name) and no staging file may remain."""

from __future__ import annotations

import glob
import os

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from kafkalog.log.manager import LogManager
from kafkalog.log.naming import parse_partition_dir_name
from kafkalog.spark import jobs
from kafkalog.spark.commit import STAGING_PREFIX


def _subdirs(data):
    return sorted(e.name for e in os.scandir(data) if e.is_dir())


def _assert_kafka_layout(data):
    for name in _subdirs(data):
        parsed = parse_partition_dir_name(name)  # raises like Kafka's parseTopicPartitionName
        assert parsed.kind == "" or parsed.kind == "delete", name
        # nothing but files inside a partition directory either
        assert not [e.name for e in os.scandir(os.path.join(data, name)) if e.is_dir()], name
    assert glob.glob(os.path.join(glob.escape(str(data)), STAGING_PREFIX + "*")) == []
    assert not os.path.exists(os.path.join(data, ".kafkalog-staging"))


def test_data_dir_stays_a_kafka_log_dir(spark, tmp_path):
    data, ckpt = tmp_path / "data", tmp_path / "ckpt"
    # 1. batch write into a compacted topic (several tasks, several partitions)
    (spark.range(3000, numPartitions=3)
     .selectExpr("cast(concat('key-', id % 50) as binary) key", "cast(concat('v-', id) as binary) value")
     .write.format("kafkalog").option("topic", "users").option("partitions", 3)
     .option("topic.cleanup.policy", "compact").option("topic.segment.bytes", 8192)
     .option("topic.min.cleanable.dirty.ratio", "0.01").mode("append").save(str(data)))
    _assert_kafka_layout(data)
    assert _subdirs(data) == ["users-0", "users-1", "users-2"]

    # 2. stream write with a checkpoint (exactly-once sink: sink file + commit intent protocol)
    q = (spark.readStream.format("kafkalog").option("subscribe", "users")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
         .load(str(data)).selectExpr("key", "value").writeStream.format("kafkalog")
         .option("topic", "copy").option("partitions", 2)
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(str(data)))
    q.awaitTermination()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 3000
    _assert_kafka_layout(data)
    assert _subdirs(data) == ["copy-0", "copy-1", "users-0", "users-1", "users-2"]
    sink_files = glob.glob(str(data / ".kafkalog-sink-*"))
    assert len(sink_files) == 1 and os.path.isfile(sink_files[0])

    # 3. distributed compaction (cleaner swap files, checkpoints)
    results = jobs.compact(spark, str(data), ["users"])
    assert results and all(r["error"] is None for r in results)
    assert sum(r["bytes_after"] for r in results) < sum(r["bytes_before"] for r in results)
    _assert_kafka_layout(data)

    # 4. an aborted job: a task fails after other tasks staged their files
    def boom(v):
        if v == b"value-4321":
            raise RuntimeError("task failure on purpose")
        return v

    bad = F.udf(boom, BinaryType())
    failing = spark.range(6000, numPartitions=3) \
        .selectExpr("cast(concat('value-', id) as binary) v").select(bad("v").alias("value"))
    with pytest.raises(Exception, match="task failure on purpose"):
        failing.write.format("kafkalog").option("topic", "users").mode("append").save(str(data))
    _assert_kafka_layout(data)
    assert _subdirs(data) == ["copy-0", "copy-1", "users-0", "users-1", "users-2"]

    # the log layer's manager (Kafka's loading rule) loads every directory and skips none
    with LogManager(str(data), background=False) as mgr:
        assert mgr.load_result.skipped_dirs == []
        assert sorted(f"{t}-{p}" for t, p in mgr.partitions()) == _subdirs(data)
    rows = spark.read.format("kafkalog").option("subscribe", "copy").load(str(data)).count()
    assert rows == 3000


def test_staged_but_uncommitted_files_are_not_directories(tmp_path):
    """Between the tasks and the commit (when a broker could be started on the directory) the
    staged data of batch and streaming writers is regular files only."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from kafkalog.spark.stream_writer import KafkalogStreamWriter
    from kafkalog.spark.writer import KafkalogArrowWriter

    data = tmp_path / "data"
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    batch = pa.record_batch({"key": pa.array([b"k%d" % i for i in range(500)], pa.binary()),
                             "value": pa.array([b"v"] * 500, pa.binary())})
    opts = {"path": str(data), "topic": "t", "partitions": "3"}
    w = KafkalogArrowWriter(opts, schema)
    msgs = [w.write(iter([batch])), w.write(iter([batch]))]
    s = KafkalogStreamWriter({**opts, "checkpointLocation": str(tmp_path / "ckpt")}, schema)
    smsg = s.write(iter([batch]))
    staged = glob.glob(os.path.join(glob.escape(str(data)), STAGING_PREFIX + "*"))
    assert len(staged) == 9 and all(os.path.isfile(p) for p in staged)
    assert _subdirs(data) == []  # nothing a broker would try to parse
    w.commit(msgs)
    s.commit([smsg], 0)
    _assert_kafka_layout(data)
    assert _subdirs(data) == ["t-0", "t-1", "t-2"]
    w2 = KafkalogArrowWriter(opts, schema)
    failed = [w2.write(iter([batch])), None]
    w2.abort(failed)
    _assert_kafka_layout(data)
