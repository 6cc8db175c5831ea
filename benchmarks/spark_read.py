"""Read benchmark: python benchmarks/spark_read.py [--records N]

Writes N records (16-byte keys, 100-byte values, increasing timestamps) into a kafkalog topic
through Spark, then measures (same run, same session):
* a full read (noop sink) vs a reference source yielding the same rows as pre-built Arrow batches
  (goal >= 80%), best of 2;
* the same full read vs Spark reading the same rows from Parquet (goal >= 50%);
* reading 1,000 records at a known offset with pushdown vs the same read without pushdown
  (goal >= 100x at 10 M records), and the same 1,000 records through the ``startingOffsets`` /
  ``endingOffsets`` options and by timestamp through the ``.timeindex``
  (``startingTimestamp``/``endingTimestamp``, the Kafka source's offsetsForTimes); min and median
  of 15 queries, each on a new DataFrame (as user code builds one per query: re-running a
  DataFrame would reuse Spark's physical plan and skip the source's planning);
* the floors of any such query on this machine, measured the same way: a Python source returning
  the same 1,000 rows pre-built, a Python source returning one row, and ``spark.range(1000)``
  (no Python at all); and the bytes of ``.log`` each read walks (``read.bytes`` of
  ``$KAFKALOG_SPARK_PROFILE``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
PROFILE = tempfile.mktemp(prefix="kafkalog-rprof-")
os.environ["KAFKALOG_SPARK_PROFILE"] = PROFILE  # inherited by the executors' Python workers

import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

import kafkalog  # noqa: E402
import kafkalog.spark  # noqa: E402
from kafkalog.spark.schema import source_arrow_schema, source_schema  # noqa: E402


class _RefReader(DataSourceReader):
    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self):
        step = -(-self.rows // self.parts)
        return [InputPartition((p * step, min(self.rows, (p + 1) * step))) for p in range(self.parts)]

    def read(self, part):
        lo, hi = part.value
        batch = 65536
        kbuf, vbuf = pa.py_buffer(os.urandom(batch * 16)), pa.py_buffer(os.urandom(batch * 100))
        schema = source_arrow_schema(False)
        for s in range(lo, hi, batch):
            n = min(batch, hi - s)
            ko = pa.array(range(0, (n + 1) * 16, 16), pa.int32()).buffers()[1]
            vo = pa.array(range(0, (n + 1) * 100, 100), pa.int32()).buffers()[1]
            offs = pa.array(range(s, s + n), pa.int64())
            yield pa.RecordBatch.from_arrays([
                pa.Array.from_buffers(pa.binary(), n, [None, ko, kbuf]),
                pa.Array.from_buffers(pa.binary(), n, [None, vo, vbuf]),
                pa.repeat(pa.scalar("bench", pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
                offs, offs.cast(pa.timestamp("us", tz="UTC")), pa.repeat(pa.scalar(0, pa.int32()), n)],
                schema=schema)


class ArrowReference(DataSource):
    @classmethod
    def name(cls):
        return "kafkalog_bench_ref"

    def schema(self):
        return source_schema(False)

    def reader(self, schema):
        return _RefReader(int(self.options["rows"]), int(self.options["parts"]))


class _Rows1000Reader(_RefReader):
    """The floor of the point read: 1,000 rows of the same shape as one pre-built Arrow batch from
    one task, with ``pushFilters`` (every filter left to Spark)."""

    def __init__(self) -> None:
        super().__init__(1000, 1)

    def pushFilters(self, filters):
        return list(filters)


class Rows1000Source(DataSource):
    @classmethod
    def name(cls):
        return "kafkalog_bench_rows1000"

    def schema(self):
        return source_schema(False)

    def reader(self, schema):
        return _Rows1000Reader()


class _TrivialReader(DataSourceReader):
    def pushFilters(self, filters):
        return list(filters)

    def partitions(self):
        return [InputPartition(0)]

    def read(self, part):
        yield (1,)


class TrivialSource(DataSource):
    @classmethod
    def name(cls):
        return "kafkalog_bench_trivial"

    def schema(self):
        return "x int"

    def reader(self, schema):
        return _TrivialReader()


#: a point-read variant runs WARM_UPS + QUERIES times (read.bytes is averaged over all of them)
WARM_UPS, QUERIES = 2, 15


def per_query(make):
    """``(min, median)`` seconds of ``make().collect()`` over ``QUERIES`` runs after ``WARM_UPS``:
    a new DataFrame every time, as user code builds one per query (re-running one DataFrame reuses
    Spark's physical plan and skips the source's planning)."""
    for _ in range(WARM_UPS):
        make().collect()
    times = sorted(timed(lambda: make().collect()) for _ in range(QUERIES))
    return times[0], statistics.median(times)


def profile_sum(name: str) -> float:
    """Sum of the ``name`` lines of the profile written since the last call (then cleared)."""
    total = 0.0
    if os.path.exists(PROFILE):
        with open(PROFILE) as f:
            for line in f:
                key, value = line.split()
                if key == name:
                    total += float(value)
        os.unlink(PROFILE)
    return total


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)
    spark.dataSource.register(ArrowReference)
    data = tempfile.mkdtemp(prefix="kafkalog-bench-")
    try:
        n = args.records
        t_write = timed(lambda: spark.range(n, numPartitions=args.partitions).selectExpr(
            "unhex(lpad(hex(id), 32, '0')) key", "cast(repeat('x', 100) as binary) value",
            "timestamp_millis(1700000000000 + id) timestamp")
            .write.format("kafkalog").option("topic", "bench")
            .option("partitions", args.partitions).mode("append").save(data))
        print(f"write {n:,} records: {t_write:.1f} s ({n / t_write / 1e6:.2f} M rec/s)")
        kl = spark.read.format("kafkalog").option("subscribe", "bench").load(data)
        ref = spark.read.format("kafkalog_bench_ref").option("rows", n) \
            .option("parts", args.partitions).load()
        for df in (kl, ref):  # warm up workers
            df.limit(1).collect()
        t_kl = min(timed(lambda: kl.write.format("noop").mode("overwrite").save()) for _ in range(2))
        t_ref = min(timed(lambda: ref.write.format("noop").mode("overwrite").save()) for _ in range(2))
        print(f"full read: kafkalog {t_kl:.2f} s ({n / t_kl / 1e6:.2f} M rec/s), Arrow reference "
              f"{t_ref:.2f} s, ratio {t_ref / t_kl:.0%} (target >= 80%)")
        pq = data + "-parquet"  # not inside the Kafka data directory
        kl.write.parquet(pq)
        parquet = spark.read.parquet(pq)
        parquet.limit(1).collect()
        t_pq = min(timed(lambda: parquet.write.format("noop").mode("overwrite").save())
                   for _ in range(2))
        print(f"full read: kafkalog {t_kl:.2f} s, Parquet {t_pq:.2f} s, ratio {t_pq / t_kl:.0%} "
              f"(target >= 50%)")
        at = n // (2 * args.partitions)
        where = f"partition = 0 AND offset >= {at} AND offset < {at + 1000}"
        assert kl.filter(where).count() == 1000
        spark.dataSource.register(Rows1000Source)
        spark.dataSource.register(TrivialSource)

        def by_offsets():
            return spark.read.format("kafkalog").option("assign", '{"bench":[0]}') \
                .option("startingOffsets", f'{{"bench":{{"0":{at}}}}}') \
                .option("endingOffsets", f'{{"bench":{{"0":{at + 1000}}}}}') \
                .option("pushFilters", "false").load(data)

        # the same records by timestamp through the .timeindex (offsetsForTimes semantics)
        stamps = [r.timestamp for r in kl.filter(f"partition = 0 AND offset IN ({at}, {at + 1000})")
                  .orderBy("offset").select("timestamp").collect()]
        ts0, ts1 = (int(t.replace(tzinfo=datetime.UTC).timestamp() * 1000) for t in stamps)

        def by_timestamps():
            return spark.read.format("kafkalog").option("assign", '{"bench":[0]}') \
                .option("startingTimestamp", ts0).option("endingTimestamp", ts1) \
                .option("pushFilters", "false").load(data)

        assert by_offsets().count() == 1000 and by_timestamps().count() == 1000
        profile_sum("read.bytes")
        push = per_query(lambda: kl.filter(where))
        bytes_push = profile_sum("read.bytes") / (WARM_UPS + QUERIES)
        nopush_df = spark.read.format("kafkalog").option("subscribe", "bench") \
            .option("pushFilters", "false").load(data)
        t_nopush = min(timed(lambda: nopush_df.filter(where).collect()) for _ in range(2))
        bytes_nopush = profile_sum("read.bytes") / 2
        opts = per_query(by_offsets)
        stamp = per_query(by_timestamps)
        floor = per_query(lambda: spark.read.format("kafkalog_bench_rows1000").load()
                          .filter("partition = 0"))
        trivial = per_query(lambda: spark.read.format("kafkalog_bench_trivial").load()
                            .filter("x > 0"))
        jvm = per_query(lambda: spark.range(1000))
        print(f"1,000 records at offset {at} of a {n:,}-record topic (min / median of {QUERIES} queries, "
              f"a new DataFrame each):")
        print(f"  no pushdown (Spark filters a full scan)            {t_nopush:7.3f} s (best of 2)")
        for label, (t_min, t_med) in (
                ("pushdown: filter on partition and offset", push),
                ("startingOffsets/endingOffsets options", opts),
                ("startingTimestamp/endingTimestamp (.timeindex)", stamp)):
            print(f"  {label:<50} {t_min:6.3f} / {t_med:.3f} s   ratio {t_nopush / t_min:4.0f}x "
                  f"/ {t_nopush / t_med:.0f}x (target >= 100x)")
        print(f"  .log bytes walked: pushdown {bytes_push:,.0f}, no pushdown {bytes_nopush:,.0f} "
              f"({bytes_nopush / max(bytes_push, 1):,.0f}x less with pushdown)")
        with kafkalog.open(data, read_only=True) as log_dir:   # the same read without Spark
            def direct():
                got = list(log_dir.consume("bench", 0, offset=at, max_records=1000))
                assert len(got) == 1000 and got[0].offset == at
            direct()
            direct_times = sorted(timed(direct) for _ in range(15))
        print(f"  {'the same read without Spark (kafkalog.open)':<50} {direct_times[0]:6.3f} / "
              f"{statistics.median(direct_times):.3f} s   ratio {t_nopush / direct_times[0]:4.0f}x")
        print("the floors of any query here (min / median), and the highest ratio each allows:")
        for label, (t_min, t_med) in (
                ("the same 1,000 rows pre-built by a Python source", floor),
                ("a Python source returning 1 row", trivial),
                ("spark.range(1000) (no Python at all)", jvm)):
            print(f"  {label:<50} {t_min:6.3f} / {t_med:.3f} s   ceiling {t_nopush / t_min:4.0f}x")
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(data + "-parquet", ignore_errors=True)
        if os.path.exists(PROFILE):
            os.unlink(PROFILE)
        spark.stop()


if __name__ == "__main__":
    main()
