"""The kafkalog Spark pipeline, end to end: python examples/pipeline.py [DATA_DIR] [RECORDS]

1. generate a realistic keyed event stream (orders changing status);
2. write it through Spark into a Kafka data directory (6 partitions, keys placed by Kafka's
   partitioner, zstd batches);
3. compact it (latest status per order);
4. read it back with Spark; print records/bytes before and after compaction and an aggregation.
"""

from __future__ import annotations

import os
import shutil
import sys

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession, functions as F  # noqa: E402

import kafkalog.spark  # noqa: E402

DATA_DIR = sys.argv[1] if len(sys.argv) > 1 else "/tmp/kafkalog-pipeline"
RECORDS = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
TOPIC = "orders"


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
               if f.endswith(".log"))


def compact(spark: SparkSession, data_dir: str, topic: str) -> None:
    """Compact the topic. HOOK: use kafkalog.cleaner once it exists; until then, keep the
    latest record per key by rewriting the topic through Spark into a fresh directory."""
    try:
        from kafkalog.cleaner import clean_data_dir  # type: ignore[attr-defined]
    except ImportError:
        clean_data_dir = None
    if clean_data_dir is not None:
        clean_data_dir(data_dir, topics=[topic])
        return
    df = spark.read.format("kafkalog").option("subscribe", topic).load(data_dir)
    latest = (df.withColumn("rn", F.row_number().over(
        __import__("pyspark.sql.window", fromlist=["Window"]).Window
        .partitionBy("key").orderBy(F.col("offset").desc())))
        .filter("rn = 1").orderBy("partition", "offset")
        .select("key", "value", "partition", "timestamp"))
    tmp = data_dir + ".compacting"
    shutil.rmtree(tmp, ignore_errors=True)
    latest.write.format("kafkalog").option("topic", topic).option("partitions", 6) \
        .option("kafka.compression.type", "zstd").mode("append").save(tmp)
    for name in os.listdir(data_dir):
        if name.startswith(topic + "-"):
            shutil.rmtree(os.path.join(data_dir, name))
    for name in os.listdir(tmp):
        shutil.move(os.path.join(tmp, name), os.path.join(data_dir, name))
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    spark = (SparkSession.builder.master("local[*]").appName("kafkalog-pipeline")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)

    events = spark.range(RECORDS).selectExpr(
        "format_string('order-%06d', cast(id % 20000 as int)) as order_id",
        "element_at(array('created','paid','packed','shipped','delivered'), "
        "cast(id div 20000 % 5 + 1 as int)) as status",
        "cast(rand(7) * 500 as decimal(8,2)) as amount",
        "timestamp_millis(1700000000000 + id * 10) as timestamp")
    (events.selectExpr("cast(order_id as binary) as key",
                       "cast(to_json(struct(order_id, status, amount)) as binary) as value",
                       "timestamp")
     .write.format("kafkalog").option("topic", TOPIC).option("partitions", 6)
     .option("kafka.compression.type", "zstd").mode("append").save(DATA_DIR))

    def read():
        return spark.read.format("kafkalog").option("subscribe", TOPIC).load(DATA_DIR)

    before = read().count(), dir_bytes(DATA_DIR)
    compact(spark, DATA_DIR, TOPIC)
    after_df = read()
    after = after_df.count(), dir_bytes(DATA_DIR)
    print(f"before compaction: {before[0]:>9,} records {before[1]:>12,} bytes")
    print(f"after compaction:  {after[0]:>9,} records {after[1]:>12,} bytes")
    (after_df.select(F.from_json(F.col("value").cast("string"),
                                 "order_id string, status string, amount decimal(8,2)").alias("o"))
     .groupBy("o.status").agg(F.count("*").alias("orders"), F.sum("o.amount").alias("amount"))
     .orderBy("status").show())
    spark.stop()


if __name__ == "__main__":
    main()
