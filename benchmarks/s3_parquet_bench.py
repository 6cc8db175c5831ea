"""Full read from object storage, kafkalog vs Parquet:
python benchmarks/s3_parquet_bench.py [--records N] [--runs R] [--partitions P]

Writes N records (100-byte values; default 10 M) into P partitions with kafkalog, uploads the data
directory to a local S3-compatible server (moto's, on 127.0.0.1), and writes the same rows, with
the source's own Arrow schema, as Parquet (one file per partition, snappy, 64 k-row row groups) to
the same server. Then, in one Spark session, R times each (JSON lines, then the medians and the
ratio):

* ``kafkalog``: ``spark.read.format("kafkalog")`` of the topic from ``s3://`` (noop sink); the
  topic's batches compressed as ``--compression`` says (default none: the ``.log`` is then ~7x
  the Parquet bytes for these very compressible values, and moto serves bytes slowly);
* ``parquet``: Spark reading the Parquet files from the same server. Spark's own ``s3a://``
  needs the hadoop-aws and AWS SDK jars, which are not on this machine's Spark classpath (and
  cannot be fetched here), so the Parquet side is a Python data source reading the files through
  ``pyarrow.fs`` (the transport kafkalog uses) with ``pyarrow.parquet``, one task per file,
  yielding Arrow record batches to Spark (noop sink). It measures Parquet decoding + the same
  S3 transport + the same Python-source handoff into Spark, not Spark's JVM Parquet reader.

``ratio`` = parquet seconds / kafkalog seconds (kafkalog's speed as a fraction of Parquet's;
goal >= 0.5).
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
                               access_key="testing", secret_key="testing", region="us-east-1")
        with fs.open_input_file(partition.value) as f:
            pf = pq.ParquetFile(f)
            for rg in range(pf.num_row_groups):
                yield from pf.read_row_group(rg).to_batches()


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--compression", default="none",
                    help="producer compression of the topic (none, lz4, zstd, snappy, gzip); "
                         "the Parquet side is always snappy")
    args = ap.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafkalog.spark.log_view import list_partitions
    from kafkalog.spark.schema import source_schema
    from kafkalog.spark.segment_reader import read_range

    server, s3 = start_server()
    endpoint = s3.endpoint
    local = tempfile.mkdtemp(prefix="kafkalog-s3pq-")
    pq_dir = tempfile.mkdtemp(prefix="kafkalog-s3pq-parquet-")
    per = args.records // args.partitions
    t0 = time.perf_counter()
    with kafkalog.open(local, background=False) as dl:
        dl.create_topic("t", partitions=args.partitions)
        for p in range(args.partitions):
            for lo in range(0, per, 500_000):
                dl.produce_many("t", [b"%012d" % i + b"." * 88
                                      for i in range(lo, min(lo + 500_000, per))], partition=p,
                                compression=None if args.compression == "none" else args.compression)
    # the same rows, the source's own Arrow batches, as Parquet
    files = []
    for pdir in list_partitions(local):
        path = os.path.join(pq_dir, f"{pdir.topic}-{pdir.partition}.parquet")
        writer = None
        for batch in read_range(pdir, 0, per, max_rows=65536):
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, compression="snappy")
            writer.write_table(pa.Table.from_batches([batch]), row_group_size=65536)
        assert writer is not None
        writer.close()
        files.append(f"{BUCKET}/parquet/{os.path.basename(path)}")
    uri = s3.upload(local, BUCKET, "kafka")
    s3.upload(pq_dir, BUCKET, "parquet")
    log_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(local)
                    for f in fs if f.endswith(".log"))
    parquet_bytes = sum(os.path.getsize(os.path.join(pq_dir, f)) for f in os.listdir(pq_dir))
    print(json.dumps({"bench": "s3_parquet.setup", "records": args.records,
                      "partitions": args.partitions, "compression": args.compression,
                      "log_bytes": log_bytes,
                      "parquet_bytes": parquet_bytes,
                      "seconds": round(time.perf_counter() - t0, 1)}), flush=True)

    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    kafkalog.spark.register(spark)
    spark.dataSource.register(_ParquetOverArrowFs)
    schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in source_schema().fields)

    def kafkalog_read() -> int:
        r = spark.read.format("kafkalog").option("subscribe", "t").options(**s3.options)
        r.load(uri).write.format("noop").mode("overwrite").save()
        return 0

    def parquet_read() -> int:
        (spark.read.format("parquet_arrowfs_bench").option("endpoint", endpoint)
         .option("files", json.dumps(files)).option("schema", schema).load()
         .write.format("noop").mode("overwrite").save())
        return 0

    # both sides agree on the rows (a count each)
    n_k = spark.read.format("kafkalog").option("subscribe", "t").options(**s3.options) \
        .load(uri).count()
    n_p = spark.read.format("parquet_arrowfs_bench").option("endpoint", endpoint) \
        .option("files", json.dumps(files)).option("schema", schema).load().count()
    assert n_k == n_p == per * args.partitions, (n_k, n_p)

    times: dict[str, list[float]] = {"kafkalog": [], "parquet": []}
    for run in range(args.runs):
        for name, fn in (("kafkalog", kafkalog_read), ("parquet", parquet_read)):
            server.counts.reset()
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            times[name].append(dt)
            print(json.dumps({"bench": f"s3_parquet.{name}", "run": run, "records": n_k,
                              "seconds": round(dt, 3), "get_bytes": server.counts.get_bytes,
                              "requests": len(server.counts.requests)}), flush=True)
    k, p = _median(times["kafkalog"]), _median(times["parquet"])
    print(json.dumps({"bench": "s3_parquet.full_read", "records": n_k, "runs": args.runs,
                      "compression": args.compression,
                      "kafkalog_s": k, "parquet_s": p, "ratio": round(p / k, 3), "goal": 0.5,
                      "verdict": "ok" if p / k >= 0.5 else "below goal",
                      "parquet_reader": "python data source over pyarrow.fs (no s3a jars)"}),
          flush=True)
    spark.stop()
    server.stop()
    rmtree(local)
    rmtree(pq_dir)


if __name__ == "__main__":
    main()
