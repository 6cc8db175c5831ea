"""Write benchmark: python benchmarks/spark_write.py [--records N]

Writes N records (16-byte keys, 100-byte values) through Spark into a kafkalog topic
(``DataSourceArrowWriter`` -> kernel murmur2 + columnar encode -> staging -> atomic commit through
the log layer) and, in the same session, into an Arrow writer that discards its input; prints both
times and the ratio (goal >= 80%), with the time of each phase of the kafkalog write (from
``$KAFKALOG_SPARK_PROFILE``: per task the wait for Spark's input, the kernel encode, the staging
write and, part of it, the final sync; in the driver's commit the append into the logs, the fsync,
the whole commit) and the ratio of each alternating pair of runs (the machine is noisy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
PROFILE = tempfile.mktemp(prefix="kafkalog-wprof-")
os.environ["KAFKALOG_SPARK_PROFILE"] = PROFILE  # inherited by the executors' Python workers

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage  # noqa: E402

import kafkalog.spark  # noqa: E402


class _Discard(DataSourceArrowWriter):
    def write(self, iterator):
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return WriterCommitMessage()


class DiscardSink(DataSource):
    @classmethod
    def name(cls):
        return "kafkalog_bench_discard"

    def writer(self, schema, overwrite):
        return _Discard()


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def read_profile() -> dict:
    """Phase -> (sum, count) of the profile lines written since the last call."""
    phases = defaultdict(lambda: [0.0, 0])
    if os.path.exists(PROFILE):
        with open(PROFILE) as f:
            for line in f:
                name, secs = line.split()
                phases[name][0] += float(secs)
                phases[name][1] += 1
        os.unlink(PROFILE)
    return phases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=2, help="Spark tasks and topic partitions")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=None, help="kafka.batch.size (default: the sink's)")
    args = ap.parse_args()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)
    spark.dataSource.register(DiscardSink)
    data = tempfile.mkdtemp(prefix="kafkalog-wbench-")
    n = args.records
    df = spark.range(n, numPartitions=args.partitions).selectExpr(
        "unhex(lpad(hex(id), 32, '0')) key", "cast(repeat('x', 100) as binary) value")
    try:
        df.limit(10).write.format("kafkalog_bench_discard").mode("append").save()  # warm up
        # reference and kafkalog runs alternate, best of each (the box is shared: load varies)
        refs, times, profiles = [], [], []
        read_profile()
        for i in range(args.repeat):
            refs.append(timed(lambda: df.write.format("kafkalog_bench_discard").mode("append")
                              .save()))
            target = os.path.join(data, f"run{i}")
            times.append(timed(lambda: df.write.format("kafkalog").option("topic", "bench")
                               .option("partitions", args.partitions)
                               .option("kafka.compression.type", args.compression)
                               .options(**({"kafka.batch.size": str(args.batch_size)}
                                           if args.batch_size else {}))
                               .mode("append").save(target)))  # noqa: B023 (called at once)
            profiles.append(read_profile())
            if i:
                shutil.rmtree(target, ignore_errors=True)
        t_ref = min(refs)
        best = min(range(args.repeat), key=lambda i: times[i])
        t_kl, prof = times[best], profiles[best]
        print(f"runs: reference {', '.join(f'{t:.2f}' for t in refs)} s; kafkalog "
              f"{', '.join(f'{t:.2f}' for t in times)} s")
        print("phases of the best kafkalog write (task phases: mean per task, "
              f"{args.partitions} tasks in parallel; commit phases: per partition, in parallel):")
        for name in ("task.input", "task.encode", "task.staging_write", "task.final_sync",
                     "commit.append",
                     "commit.flush", "commit.append+flush", "commit.total"):
            total, count = prof.get(name, (0.0, 0))
            print(f"  {name:<20} {total / max(count, 1):6.2f} s")
        count = spark.read.format("kafkalog").option("subscribe", "bench") \
            .load(os.path.join(data, "run0")).count()
        assert count == n, count
        print(f"write {n:,} records: kafkalog {t_kl:.2f} s ({n / t_kl / 1e6:.2f} M rec/s), "
              f"discarding Arrow writer {t_ref:.2f} s, ratio {t_ref / t_kl:.0%} (target >= 80%)")
        pairs = sorted(r / k for r, k in zip(refs, times))
        print(f"ratio of each reference run to the kafkalog run after it: "
              f"{', '.join(f'{p:.0%}' for p in pairs)}; median {statistics.median(pairs):.0%}")
    finally:
        shutil.rmtree(data, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
