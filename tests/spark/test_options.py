"""Every option of the kafkalog source and sink honoured or refused, through a real local Spark
session: maxRecordsPerPartition, minOffsetsPerTrigger/maxTriggerDelay, maxBytesPerTrigger,
Spark's refusals (forbidden Kafka options, offset ranges), unknown options, the save mode, and the
source Spark registers on its own (``pyspark_kafkalog``) in a fresh session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import kafkalog
from kafkalog.record.records import iter_batches
from kafkalog.spark.admission import TriggerDelay


def _produce(data_dir, topic: str, lo: int, hi: int, *, batch_size: int = 1 << 20) -> None:
    with kafkalog.open(data_dir, background=False) as dl:
        if topic not in dl.topics():
            dl.create_topic(topic, partitions=1)
        dl.produce_many(topic, [b"value-%06d" % i for i in range(lo, hi)], partition=0,
                        batch_size=batch_size)


def _error(action) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_batch_options_and_refusals(spark, tmp_path):
    data = tmp_path / "data"
    _produce(data, "t", 0, 100)

    def read(**opts):
        r = spark.read.format("kafkalog").option("subscribe", "t")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load(str(data))

    # maxRecordsPerPartition: Spark's KafkaOffsetRangeCalculator cuts the range into pieces
    df = read(maxRecordsPerPartition="30")
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100))
    assert read(maxRecordsPerPartition="30", minPartitions="8").rdd.getNumPartitions() >= 8
    # broker-only options are accepted (a job moved from a broker keeps them)
    assert read(**{"kafka.bootstrap.servers": "b:9092", "kafka.group.id": "g",
                   "kafka.ssl.truststore.location": "/x"}).rdd.getNumPartitions() == 1

    refusals = {
        "kafka.auto.offset.reset": ("earliest", ("Kafka option 'auto.offset.reset' is not "
                                                 "supported.\nInstead set the source option "
                                                 "'startingoffsets'")),
        "kafka.key.deserializer": ("x", ("Kafka option 'key.deserializer' is not supported as "
                                         "keys are deserialized as byte arrays")),
        "kafka.value.deserializer": ("x", "Kafka option 'value.deserializer' is not supported"),
        "kafka.enable.auto.commit": ("true", "Kafka option 'enable.auto.commit' is not supported"),
        "kafka.interceptor.classes": ("x", "Kafka option 'interceptor.classes' is not supported"),
        "startingOffset": ("earliest", "unknown option 'startingoffset' for the kafkalog source"),
        "kafka.max.block.ms": ("1", "unknown option 'kafka.max.block.ms'"),
        "maxRecordsPerPartition": ("0", "option 'maxRecordsPerPartition' must be >= 1"),
    }
    for name, (value, message) in refusals.items():
        assert message in _error(lambda n=name, v=value: read(**{n: v}).count()), name
    # Spark's offset-range checks (checkOffsetLimitValidity, then the resolved offsets)
    msg = _error(lambda: read(startingOffsets='{"t":{"0":50}}',
                              endingOffsets='{"t":{"0":10}}').count())
    assert "[UNRESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] The specified start offset 50 is " \
           "greater than the end offset 10 for topic t partition 0." in msg
    msg = _error(lambda: read(startingOffsets='{"t":{"0":5}}',
                              endingOffsets='{"t":{"0":10,"1":20}}').count())
    assert "[MISMATCHED_TOPIC_PARTITIONS_BETWEEN_START_OFFSET_AND_END_OFFSET]" in msg
    assert "start offset: [t-0], topic-partitions for end offset: [t-0, t-1]" in msg
    msg = _error(lambda: read(startingOffsets='{"t":{"0":150}}', failOnDataLoss="false").count())
    assert "[RESOLVED_START_OFFSET_GREATER_THAN_END_OFFSET] The resolved start offset 150 is " \
           "greater than the resolved end offset 100 for topic t partition 0" in msg
    assert "minOffsetPerTrigger(9) is higher than the maxOffsetsPerTrigger(3)" in _error(
        lambda: read(minOffsetsPerTrigger="9", maxOffsetsPerTrigger="3").count())
    assert "option 'maxTriggerDelay' must be a duration" in _error(
        lambda: read(maxTriggerDelay="soon").count())

    # the sink: Spark's refusals, unknown options, and the save mode
    df = spark.createDataFrame([("k", "v")], "key string, value string")

    def w():  # a new writer each time: DataFrameWriter.option changes the writer
        return df.write.format("kafkalog").option("topic", "out")

    assert "Kafka option 'key.serializer' is not supported as keys are serialized with " \
           "ByteArraySerializer." in _error(
               lambda: w().option("kafka.key.serializer", "x").mode("append").save(str(data)))
    assert "unknown option 'partition' for the kafkalog sink" in _error(
        lambda: w().option("partition", "3").mode("append").save(str(data)))
    # Spark refuses ErrorIfExists (the default) for Python sources before kafkalog is called,
    # and says to use Append; Overwrite reaches the sink, which says to use append
    assert "Append" in _error(lambda: w().save(str(data)))
    assert "use .mode('append')" in _error(lambda: w().mode("overwrite").save(str(data)))
    assert not os.path.exists(data / "out-0")


def test_trigger_delay_waits_for_min_offsets_until_the_delay_passes():
    now = [0.0]
    delay = TriggerDelay(min_offsets=5, max_delay_ms=1000, clock_ms=lambda: now[0])
    assert delay.skip(1) is False          # the first trigger of a query always runs
    now[0] = 10
    assert delay.skip(4) is True           # too few offsets, delay not over
    assert delay.skip(5) is False          # enough offsets: runs, restarts the delay
    now[0] = 500
    assert delay.skip(2) is True
    now[0] = 1010
    assert delay.skip(2) is False          # the delay passed: runs with what there is
    now[0] = 1020
    assert delay.skip(0) is True


def _batch_ends(partition_dir: str) -> list:
    """(last offset + 1, end byte position) of every batch of a one-segment partition."""
    with open(os.path.join(partition_dir, "0" * 20 + ".log"), "rb") as f:
        buf = f.read()
    return [(b.last_offset + 1, b.position + b.size_in_bytes)  # type: ignore[attr-defined]
            for b in iter_batches(buf)]


def _progress_offset(value) -> int:
    """Offset of big-0 in a progress report's start/end offset (JSON text, None before any)."""
    parsed = json.loads(value) if isinstance(value, str) else value
    return 0 if not parsed else parsed["big"]["0"]


def test_streaming_min_offsets_and_max_bytes_per_trigger(spark, tmp_path):
    data = tmp_path / "data"
    # one writer open for the whole query: closing a DataLog trims its active index, which a
    # reader mapping it at that moment does not survive (reported; the read path is being redone)
    dl = kafkalog.open(data, background=False)
    dl.create_topic("ev", partitions=1)

    def produce(lo: int, hi: int) -> None:
        dl.produce_many("ev", [b"value-%06d" % i for i in range(lo, hi)], partition=0)

    produce(0, 10)
    q = (spark.readStream.format("kafkalog").option("subscribe", "ev")
         .option("startingOffsets", "earliest").option("minOffsetsPerTrigger", "5")
         .option("maxTriggerDelay", "1h").load(str(data))
         .writeStream.format("memory").queryName("min_offsets")
         .option("checkpointLocation", str(tmp_path / "ckpt1")).start())
    try:
        q.processAllAvailable()

        def count() -> int:
            return spark.sql("select count(*) c from min_offsets").first().c

        assert count() == 10                 # the first trigger runs
        produce(10, 13)
        q.processAllAvailable()
        assert count() == 10                 # 3 < 5 new offsets, an hour not passed: waits
        produce(13, 16)
        q.processAllAvailable()
        assert count() == 16                 # 6 new offsets: runs
    finally:
        q.stop()
        dl.close()

    # maxBytesPerTrigger: every micro-batch reads whole .log batches adding up to the limit
    _produce(data, "big", 0, 400, batch_size=300)
    ends = _batch_ends(str(data / "big-0"))
    limit = ends[-1][1] // 5
    q = (spark.readStream.format("kafkalog").option("subscribe", "big")
         .option("startingOffsets", "earliest").option("maxBytesPerTrigger", str(limit))
         .load(str(data)).writeStream.format("memory").queryName("max_bytes")
         .option("checkpointLocation", str(tmp_path / "ckpt2")).trigger(availableNow=True)
         .start())
    q.awaitTermination()
    position = dict(ends)
    position[0] = 0
    spans = [(_progress_offset(p["sources"][0]["startOffset"]),
              _progress_offset(p["sources"][0]["endOffset"]))
             for p in q.recentProgress if p["numInputRows"]]
    assert len(spans) >= 5 and spans[-1][1] == 400
    for s, e in spans:
        assert position[e] - position[s] <= limit
    offsets = sorted(r.offset for r in spark.sql("select offset from max_bytes").collect())
    assert offsets == list(range(400))


def test_auto_registered_source_without_register(tmp_path):
    """A fresh session that never calls kafkalog.spark.register: Spark finds ``pyspark_kafkalog``
    on its own; reads work with filter pushdown off (the default) and on."""
    data = tmp_path / "data"
    _produce(data, "t", 0, 20)
    script = textwrap.dedent("""
        import json, sys
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .getOrCreate())
        assert "kafkalog.spark" not in sys.modules
        out = {"conf": spark.conf.get("spark.sql.python.filterPushdown.enabled")}
        df = lambda: spark.read.format("kafkalog").option("subscribe", "t").load(sys.argv[1])
        out["plain"] = df().count()
        out["filtered_off"] = df().where("offset >= 15").count()
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        out["filtered_on"] = df().where("offset >= 15").count()
        print("RESULT " + json.dumps(out))
        spark.stop()
    """)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-c", script, str(data)], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    assert json.loads(lines[0][len("RESULT "):]) == {
        "conf": "false", "plain": 20, "filtered_off": 5, "filtered_on": 5}
