"""Full read from object storage, kafkalog vs Parquet, and a point read:
python benchmarks/s3_parquet_bench.py [--records N] [--runs R] [--partitions P]
                                      [--compression none,lz4]

Writes N records (100-byte values; default 10 M) into P partitions of one topic per compression
(``--compression``, a comma list; default ``none,lz4``: ``t_none``, ``t_lz4``) with kafkalog,
uploads the data directory to a local S3-compatible server (moto's, on 127.0.0.1, counting
requests and GET body bytes), and writes the same rows, with the source's own Arrow schema, as
Parquet (one file per topic-partition, snappy, 64 k-row row groups) to the same server. Then, in
one Spark session, R rounds, each reading every topic both ways one after the other (interleaved,
so a busy machine slows both sides alike; JSON lines, then the medians and the ratio per topic):

* ``kafkalog``: ``spark.read.format("kafkalog")`` of the topic from ``s3://`` (noop sink). For
  uncompressed batches the ``.log`` is ~7x the Parquet bytes (these values compress well);
* ``parquet``: Spark's own Parquet reader (the JVM's, vectorized) over ``s3a://`` reading the
  Parquet files from the same server (noop sink). pyspark ships no ``s3a`` file system; its jars
  (hadoop-aws 3.3.1, the AWS SDK bundle) come from PyPI, fetched once and hash-checked by
  :mod:`benchmarks.s3a_jars` (``--parquet-reader arrow`` skips them);
* ``parquet_arrow`` (``--parquet-reader both`` or ``arrow``): a Python data source reading the same
  files through ``pyarrow.fs`` (the transport kafkalog uses) with ``pyarrow.parquet``, one task per
  file, yielding Arrow record batches to Spark: Parquet decoding + the same transport + the same
  Python-source handoff, the stand-in of the runs before the s3a jars were found.

``ratio`` = parquet seconds / kafkalog seconds (kafkalog's speed as a fraction of Parquet's;
goal >= 0.5), against Spark's reader (``ratio``) and the Python one (``ratio_arrow``). Each run
line has the server's counts: requests, GET body bytes, ``.log`` GETs and
the largest one. ``s3_parquet.in_process`` lines time the same reads without Spark (kafkalog's
``read_range`` / ``pyarrow.parquet`` in this process): the difference is the Spark handoff.

``s3_parquet.point_read``: 1,000 records at a known offset (the middle of partition 0) through
offset pushdown: ``.log`` bytes requested (the sum of the ``Range`` headers of ``.log`` GETs)
and requests made (goal: at most 2 MiB of ``.log``).

moto keeps objects in memory (objects above 5 MiB in a spooled temporary file) and copies the
whole object for every ranged GET, so its cost grows with requests x object size: a segment
(1 GiB ``segment.bytes`` by default) is read in few large requests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import rmtree
from benchmarks.s3a_jars import SPARK_CONF, s3a_jars
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from tests.objectstore.s3_server import start_server

import kafkalog
import kafkalog.spark

BUCKET = "bench"


class _ParquetOverArrowFs(DataSource):
    """Parquet files on S3 read through pyarrow.fs (options: endpoint, files, schema)."""

    @classmethod
    def name(cls) -> str:
        return "parquet_arrowfs_bench"

    def schema(self) -> str:
        return self.options["schema"]

    def reader(self, schema):
        return _ParquetReader(self.options)


class _ParquetReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.endpoint = options["endpoint"]
        self.files = json.loads(options["files"])

    def partitions(self):
        return [InputPartition(f) for f in self.files]

    def read(self, partition):
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq
        fs = pafs.S3FileSystem(endpoint_override=self.endpoint.split("://", 1)[1], scheme="http",
                               access_key="testing", secret_key="testing", region="us-east-1",
                               request_timeout=60)  # as kafkalog (fs.s3a.connection.request.timeout)
        with fs.open_input_file(partition.value) as f:
            pf = pq.ParquetFile(f)
            for rg in range(pf.num_row_groups):
                yield from pf.read_row_group(rg).to_batches()


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def _log_gets(counts) -> tuple[int, int, int]:
    """.log GETs: (count, bytes requested by their Range headers, largest range)."""
    sizes = []
    for _m, _path, rng in counts.gets(".log"):
        if rng:
            lo, hi = rng.split("=", 1)[1].split("-")
            sizes.append(int(hi) - int(lo) + 1)
    return len(sizes), sum(sizes), max(sizes, default=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--compression", default="none,lz4",
                    help="producer compressions, one topic each (none, lz4, zstd, snappy, gzip); "
                         "the Parquet side is always snappy")
    ap.add_argument("--parquet-reader", choices=("spark", "arrow", "both"), default="both",
                    help="Spark's own reader over s3a, the Python data source over pyarrow.fs, or both")
    args = ap.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafkalog.spark.log_view import list_partitions
    from kafkalog.spark.schema import source_schema
    from kafkalog.spark.segment_reader import read_range

    codecs = [c.strip() for c in args.compression.split(",") if c.strip()]
    server, s3 = start_server()
    endpoint = s3.endpoint
    local = tempfile.mkdtemp(prefix="kafkalog-s3pq-")
    pq_dir = tempfile.mkdtemp(prefix="kafkalog-s3pq-parquet-")
    per = args.records // args.partitions
    t0 = time.perf_counter()
    with kafkalog.open(local, background=False) as dl:
        for codec in codecs:
            topic = f"t_{codec}"
            dl.create_topic(topic, partitions=args.partitions)
            for p in range(args.partitions):
                for lo in range(0, per, 500_000):
                    dl.produce_many(topic, [b"%012d" % i + b"." * 88
                                            for i in range(lo, min(lo + 500_000, per))],
                                    partition=p, compression=None if codec == "none" else codec)
                print(json.dumps({"bench": "s3_parquet.progress", "written": f"{topic}-{p}",
                                  "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    # the same rows, the source's own Arrow batches, as Parquet
    files: dict[str, list[str]] = {}
    log_bytes: dict[str, int] = {}
    for pdir in list_partitions(local):
        path = os.path.join(pq_dir, f"{pdir.topic}-{pdir.partition}.parquet")
        writer = None
        for batch in read_range(pdir, 0, per, max_rows=65536):
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, compression="snappy")
            writer.write_table(pa.Table.from_batches([batch]), row_group_size=65536)
        assert writer is not None
        writer.close()
        files.setdefault(pdir.topic, []).append(f"{BUCKET}/parquet/{os.path.basename(path)}")
        log_bytes[pdir.topic] = log_bytes.get(pdir.topic, 0) + sum(
            os.path.getsize(os.path.join(pdir.path, f)) for f in os.listdir(pdir.path)
            if f.endswith(".log"))
    uri = s3.upload(local, BUCKET, "kafka")
    s3.upload(pq_dir, BUCKET, "parquet")
    for topic in files:
        print(json.dumps({"bench": "s3_parquet.setup", "topic": topic, "records": args.records,
                          "partitions": args.partitions, "log_bytes": log_bytes[topic],
                          "parquet_bytes": sum(os.path.getsize(os.path.join(pq_dir, f))
                                               for f in os.listdir(pq_dir)
                                               if f.startswith(topic + "-")),
                          "seconds": round(time.perf_counter() - t0, 1)}), flush=True)

    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    readers = {"spark": ["parquet"], "arrow": ["parquet_arrow"],
               "both": ["parquet", "parquet_arrow"]}[args.parquet_reader]
    if "parquet" in readers:
        builder = builder.config("spark.jars", ",".join(s3a_jars()))
        for key, value in {**SPARK_CONF, "fs.s3a.endpoint": endpoint, "fs.s3a.access.key": "testing",
                           "fs.s3a.secret.key": "testing"}.items():
            builder = builder.config(f"spark.hadoop.{key}", value)
    spark = builder.getOrCreate()
    kafkalog.spark.register(spark)
    spark.dataSource.register(_ParquetOverArrowFs)
    schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in source_schema().fields)

    def kafkalog_df(topic: str):
        return spark.read.format("kafkalog").option("subscribe", topic).options(**s3.options) \
            .load(uri)

    def parquet_arrow_df(topic: str):
        return (spark.read.format("parquet_arrowfs_bench").option("endpoint", endpoint)
                .option("files", json.dumps(files[topic])).option("schema", schema).load())

    def parquet_df(topic: str):
        return spark.read.parquet(*(f"s3a://{f}" for f in files[topic]))

    peers = {"parquet": parquet_df, "parquet_arrow": parquet_arrow_df}
    # every side agrees on the rows (a count each)
    for topic in files:
        counts = [kafkalog_df(topic).count()] + [peers[r](topic).count() for r in readers]
        assert counts == [per * args.partitions] * len(counts), (topic, counts)

    # the same reads without Spark, in this process: what the Spark handoff adds
    from kafkalog.tiered.filesystem import files_for
    files_for(uri, s3.options)
    pfs = _ParquetReader({"endpoint": endpoint, "files": "[]"})
    for topic in files:
        server.counts.reset()
        t = time.perf_counter()
        rows = sum(b.num_rows for pdir in list_partitions(uri) if pdir.topic == topic
                   for b in read_range(pdir, 0, per))
        k_s = time.perf_counter() - t
        n_gets, _req, largest = _log_gets(server.counts)
        t = time.perf_counter()
        prows = sum(b.num_rows for f in files[topic] for b in pfs.read(InputPartition(f)))
        p_s = time.perf_counter() - t
        assert rows == prows == per * args.partitions
        print(json.dumps({"bench": "s3_parquet.in_process", "topic": topic, "records": rows,
                          "kafkalog_s": round(k_s, 3), "parquet_s": round(p_s, 3),
                          "log_gets": n_gets, "largest_log_get": largest}), flush=True)

    times: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        for topic in files:
            for name, df in [("kafkalog", kafkalog_df)] + [(r, peers[r]) for r in readers]:
                server.counts.reset()
                t = time.perf_counter()
                df(topic).write.format("noop").mode("overwrite").save()
                dt = time.perf_counter() - t
                times.setdefault((topic, name), []).append(dt)
                n_gets, _req, largest = _log_gets(server.counts)
                print(json.dumps({"bench": f"s3_parquet.{name}", "topic": topic, "run": run,
                                  "records": per * args.partitions, "seconds": round(dt, 3),
                                  "get_bytes": server.counts.get_bytes,
                                  "requests": len(server.counts.requests),
                                  "log_gets": n_gets, "largest_log_get": largest}), flush=True)
    for topic in files:
        k = _median(times[(topic, "kafkalog")])
        line: dict = {"bench": "s3_parquet.full_read", "topic": topic,
                      "records": per * args.partitions, "runs": args.runs, "kafkalog_s": k}
        for r in readers:
            p = _median(times[(topic, r)])
            suffix = "" if r == "parquet" else "_arrow"
            line.update({f"parquet{suffix}_s": p, f"ratio{suffix}": round(p / k, 3)})
        main_ratio = line.get("ratio", line.get("ratio_arrow"))
        line.update(goal=0.5, verdict="ok" if main_ratio >= 0.5 else "below goal",
                    goal_peer="spark's parquet reader over s3a" if "parquet" in readers
                    else "python data source over pyarrow.fs")
        print(json.dumps(line), flush=True)

    # 1,000 records at a known offset through offset pushdown
    for topic in files:
        start = per // 2
        server.counts.reset()
        t = time.perf_counter()
        n = kafkalog_df(topic).where(f"partition = 0 AND offset >= {start} AND "
                                     f"offset < {start + 1000}").count()
        dt = time.perf_counter() - t
        assert n == 1000, n
        n_gets, requested, largest = _log_gets(server.counts)
        print(json.dumps({"bench": "s3_parquet.point_read", "topic": topic,
                          "records_in_topic": per * args.partitions, "offset": start,
                          "rows": n, "seconds": round(dt, 3), "log_bytes_requested": requested,
                          "log_requests": n_gets, "largest_log_get": largest,
                          "requests": len(server.counts.requests),
                          "get_bytes": server.counts.get_bytes, "goal_log_bytes": 2 << 20,
                          "verdict": "ok" if requested <= 2 << 20 else "above goal"}), flush=True)
    spark.stop()
    server.stop()
    rmtree(local)
    rmtree(pq_dir)


if __name__ == "__main__":
    main()
