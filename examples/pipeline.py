"""kafkalog's main job: a Spark pipeline over a local Kafka data directory.

    python3 examples/pipeline.py [DATA_DIR] [--events N]
    spark-submit --master spark://HOST:7077 examples/pipeline.py DATA_DIR   # on a Spark cluster

1. generate a realistic keyed event stream (user profile updates: many updates per user, a few
   deletions as tombstones) and write it through Spark into a compacted Kafka topic;
2. compact it with the real log cleaner, partitions cleaned in parallel as one Spark job;
3. read it back with Spark and show the per-partition statistics before and after, plus a small
   aggregation over the compacted topic (the latest state of every user).

The directory it writes is a Kafka data directory: a Kafka broker (or ``kafka-dump-log``) opens
it as it is.

Spark runs where it is told to, ``local[*]`` when nobody says: ``spark-submit --master``,
``--conf spark.master=...`` or ``spark-defaults.conf``, else ``$MASTER`` (Spark's variable) or
``$SPARK_MASTER``. On a cluster every executor must see DATA_DIR at the same path (a shared file
system, or one machine) and import kafkalog (docs/spark.md, "On a cluster").
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

import kafkalog.spark
from kafkalog.spark import jobs
from kafkalog.spark.log_view import segment_bases

TOPIC = "user-profiles"


def generate_events(spark, n: int, users: int):
    """n profile updates of ``users`` users over one day; about 1% of updates delete the user
    (a tombstone: null value). Keys are user ids, values small JSON documents."""
    plans = ["free", "pro", "team", "enterprise"]
    countries = ["DE", "FR", "US", "BR", "IN", "JP", "NG", "GB"]
    return (spark.range(n)
            .withColumn("user", (F.hash("id") % users + users) % users)
            .withColumn("deleted", F.rand(seed=1) < 0.01)
            .select(
                F.format_string("user-%06d", "user").cast("binary").alias("key"),
                F.when(F.col("deleted"), F.lit(None).cast("binary")).otherwise(
                    F.to_json(F.struct(
                        F.col("user"),
                        F.element_at(F.array(*map(F.lit, plans)), (F.col("id") % 4 + 1).cast("int")).alias("plan"),
                        F.element_at(F.array(*map(F.lit, countries)),
                                     (F.col("user") % 8 + 1).cast("int")).alias("country"),
                        (F.col("id") % 1000).alias("logins"))).cast("binary")).alias("value"),
                F.timestamp_millis(F.lit(1_700_000_000_000) + (F.col("id") * (86_400_000 / n)).cast("long"))
                .alias("timestamp")))


def step(text: str) -> None:
    """Say what the next (Spark) phase does before it starts: long work shows progress."""
    print(f"\n{text} ...", flush=True)


def show_stats(spark, data_dir: str, title: str) -> dict:
    rows = jobs.stats(spark, data_dir, [TOPIC]).collect()
    print(f"\n{title}")
    print(f"  {'partition':>9} {'records':>9} {'bytes':>11} {'keys':>7} {'dirty':>6}")
    for r in rows:
        print(f"  {r.partition:>9} {r.records:>9,} {r.bytes:>11,} {r.keys:>7,} {r.dirty_ratio:>6.0%}")
    total = {"records": sum(r.records for r in rows), "bytes": sum(r.bytes for r in rows),
             "keys": sum(r.keys for r in rows),
             "active": sum(r.log_end_offset - segment_bases(os.path.join(data_dir, f"{TOPIC}-{r.partition}"))[-1]
                           for r in rows)}
    print(f"  {'total':>9} {total['records']:>9,} {total['bytes']:>11,} {total['keys']:>7,}", flush=True)
    return total


def why_more_records_than_keys(after: dict) -> None:
    """A compacted topic keeps more records than keys: say why, as Kafka's rules have it."""
    extra = after["records"] - after["keys"]
    if extra <= 0:
        return
    print(f"\n{after['records']:,} records remain for {after['keys']:,} keys: the cleaner never "
          f"touches a partition's active segment\n(the last one, still being written: "
          f"{after['active']:,} records here, as in Kafka), and keeps tombstones for "
          f"delete.retention.ms.")


def kafka_layout_check(data_dir: str) -> str:
    """What a Kafka broker's load of this directory checks, checked: ``kafkalog verify`` (read-only)
    reads every partition directory (named ``<topic>-<partition>``, Kafka's rule), every batch (size,
    magic, CRC, offsets) and every index entry against the data, with Kafka's DumpLogSegments
    rules. ``ok: ...`` or ``BROKEN: <the first error>``."""
    import json
    import subprocess
    res = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", "--format", "json",
                          "--no-progress", data_dir], capture_output=True, text=True, check=False)
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    summary = next((x for x in lines if x.get("type") == "summary"), None)
    if res.returncode == 0 and summary is not None:
        return (f"ok: {summary.get('segments', 0)} segment(s), every batch and index entry verified "
                f"(kafkalog verify)")
    first = next((x for x in lines if x.get("type") in ("finding", "error") and x.get("level", "error") == "error"),
                 None)
    why = f"{first.get('file')}: {first.get('message')}" if first else (res.stderr.strip() or f"exit {res.returncode}")
    return f"BROKEN: {why}"


def records_already_there(data_dir: str) -> int:
    """Records the topic held before this run (a data directory given twice keeps the first run's)."""
    if not os.path.isdir(os.path.join(data_dir, f"{TOPIC}-0")):
        return 0
    with kafkalog.open(data_dir, read_only=True) as dl:
        return sum(1 for _ in dl.consume(TOPIC))


def print_summary(args, data_dir: str, before: dict, after: dict, users: int, took: dict,
                  prior: int) -> None:
    print("\nsummary")
    print(f"  spark            {args.master} (application {args.app_id})")
    print(f"  data directory   {data_dir}" + ("" if args.data_dir else " (temporary, removed at exit)"))
    print(f"  topic            {TOPIC}: {args.partitions} partitions, lz4, cleanup.policy=compact")
    print(f"  before this run  {prior:,} records in the topic")
    print(f"  written          {args.events:,} events of {args.users:,} users this run "
          f"in {took['write']:.1f} s; {before['records']:,} records ({before['bytes']:,} bytes) in all")
    print(f"  compacted        {after['records']:,} records left ({after['bytes']:,} bytes, "
          f"{after['bytes'] / before['bytes']:.1%}) in {took['compact']:.1f} s")
    print(f"  read back        {users:,} active users (latest state) in {took['read']:.1f} s")
    print(f"  Kafka layout     {kafka_layout_check(data_dir)}")


def spark_session(args) -> SparkSession:
    """The session on the master Spark was given (no ``.master()`` here: it would override
    spark-submit's), ``local[*]`` when none was."""
    wanted = os.environ.get("SPARK_MASTER")
    if wanted and not os.environ.get("MASTER"):
        os.environ["MASTER"] = wanted                 # the variable Spark's launcher reads
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ   # its JVM is already up
    if not os.environ.get("MASTER") and not under_spark_submit:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")    # local[*]: nothing to reach from outside
    spark = (SparkSession.builder.appName("kafkalog-pipeline")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", str(args.partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    args.master, args.app_id = spark.sparkContext.master, spark.sparkContext.applicationId
    if wanted and under_spark_submit and wanted != args.master:
        print(f"note: SPARK_MASTER={wanted} is not used under spark-submit, which runs this on "
              f"{args.master}: give spark-submit --master", file=sys.stderr)
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", nargs="?", help="data directory (default: a new temp dir)")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kafkalog-pipeline-")
    spark = spark_session(args)
    kafkalog.spark.register(spark)  # the "kafkalog" format + filter pushdown
    took = {}
    prior = records_already_there(data_dir)
    try:
        t0 = time.perf_counter()
        # 1. write: keyed records go where Kafka's producer would put them (murmur2 of the key)
        step(f"1/3 writing {args.events:,} events of {args.users:,} users through Spark into "
             f"{TOPIC} ({args.partitions} partitions)")
        (generate_events(spark, args.events, args.users)
         .write.format("kafkalog").option("topic", TOPIC).option("partitions", args.partitions)
         .option("kafka.compression.type", "lz4")
         .option("topic.cleanup.policy", "compact")       # topic configs, persisted
         .option("topic.segment.bytes", 1 << 18)
         .option("topic.min.cleanable.dirty.ratio", "0.01")
         .mode("append").save(data_dir))
        took["write"] = time.perf_counter() - t0
        before = show_stats(spark, data_dir, f"before compaction ({data_dir})")

        # 2. compact: the real cleaner, partitions in parallel on the executors
        step(f"2/3 compacting {TOPIC} with kafkalog's cleaner, one Spark task per partition")
        t0 = time.perf_counter()
        results = jobs.compact(spark, data_dir, [TOPIC])
        took["compact"] = time.perf_counter() - t0
        for r in results:
            if r["error"]:
                raise SystemExit(f"compaction of {r['topic']}-{r['partition']} failed: {r['error']}")
        after = show_stats(spark, data_dir, "after compaction")
        print(f"\ncompaction kept {after['records'] / before['records']:.1%} of the records and "
              f"{after['bytes'] / before['bytes']:.1%} of the bytes")
        why_more_records_than_keys(after)

        # 3. read back: the latest profile of every user; count users per plan and country
        profiles = (spark.read.format("kafkalog").option("subscribe", TOPIC).load(data_dir)
                    .withColumn("rank", F.row_number().over(
                        Window.partitionBy("key").orderBy(F.col("offset").desc())))
                    .where("rank = 1 AND value IS NOT NULL")
                    .select(F.from_json(F.col("value").cast("string"),
                                        "user int, plan string, country string, logins int")
                            .alias("p")).select("p.*"))
        step("3/3 reading the compacted topic back with Spark: the latest state of every user")
        print("\nactive users per plan (latest state after compaction):")
        t0 = time.perf_counter()
        per_plan = (profiles.groupBy("plan").agg(F.count("*").alias("users"),
                                                 F.round(F.avg("logins"), 1).alias("avg_logins"))
                    .orderBy("plan").collect())
        took["read"] = time.perf_counter() - t0
        for r in per_plan:
            print(f"  {r.plan:<11} {r.users:>6,} users, {r.avg_logins:>6} logins on average")
        print_summary(args, data_dir, before, after, sum(r.users for r in per_plan), took, prior)
    finally:
        spark.stop()
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
