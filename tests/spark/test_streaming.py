"""Streaming reads (offsets, admission control, restarts) and exactly-once stream writes."""

from __future__ import annotations

import os

from kafkalog.spark.stream_writer import KafkalogStreamWriter, read_committed_batch


def _produce(spark, path, topic, lo, hi, partitions=2):
    (spark.range(lo, hi).selectExpr("cast(concat('k', id) as binary) key",
                                    "cast(cast(id as string) as binary) value")
     .write.format("kafkalog").option("topic", topic).option("partitions", partitions)
     .mode("append").save(str(path)))


def _run_available_now(spark, data, out, ckpt, **opts):
    reader = spark.readStream.format("kafkalog").option("subscribe", "ev") \
        .option("startingOffsets", "earliest")
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (reader.load(str(data)).selectExpr("cast(value as string) v", "partition", "offset")
         .writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()
    return [p["numInputRows"] for p in q.recentProgress]


def test_stream_restart_no_loss_no_duplicates_and_rate_limit(spark, tmp_path):
    data, out, ckpt = tmp_path / "data", tmp_path / "out", tmp_path / "ckpt"
    _produce(spark, data, "ev", 0, 1000)
    batches = _run_available_now(spark, data, out, ckpt, maxOffsetsPerTrigger="400")
    assert sum(batches) == 1000 and max(batches) <= 400 and len(batches) >= 3
    _produce(spark, data, "ev", 1000, 1500)
    _run_available_now(spark, data, out, ckpt, maxOffsetsPerTrigger="400")
    values = [int(r.v) for r in spark.read.parquet(str(out)).collect()]
    assert sorted(values) == list(range(1500))  # no loss, no duplicates across the restart


def test_stream_writer_drops_replayed_batch(spark, tmp_path):
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType
    schema = StructType([StructField("value", BinaryType())])
    opts = {"path": str(tmp_path), "topic": "sink", "checkpointLocation": str(tmp_path / "c")}
    writer = KafkalogStreamWriter(opts, schema)
    batch = pa.record_batch([pa.array([b"a", b"b"], pa.binary())], names=["value"])
    msg = writer.write(iter([batch]))
    writer.commit([msg], 0)
    replay = writer.write(iter([batch]))  # the same batch id after a restart
    writer.commit([replay], 0)
    msg2 = writer.write(iter([batch]))
    writer.commit([msg2], 1)
    assert read_committed_batch(writer.commit_file) == 1
    rows = spark.read.format("kafkalog").option("subscribe", "sink").load(str(tmp_path)).collect()
    assert sorted(r.value for r in rows) == [b"a", b"a", b"b", b"b"]


def test_write_stream_end_to_end(spark, tmp_path):
    data, ckpt = tmp_path / "data", tmp_path / "ckpt"
    _produce(spark, data, "ev", 0, 300)
    q = (spark.readStream.format("kafkalog").option("subscribe", "ev")
         .option("startingOffsets", "earliest").load(str(data))
         .selectExpr("key", "value").writeStream.format("kafkalog").option("topic", "copy")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start(str(data)))
    q.awaitTermination()
    rows = spark.read.format("kafkalog").option("subscribe", "copy").load(str(data)).collect()
    assert sorted(int(r.value) for r in rows) == list(range(300))
    assert not [n for n in os.listdir(data) if n.startswith(".kafkalog-staging")]
