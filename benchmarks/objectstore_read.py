"""Object-storage read benchmark: python benchmarks/objectstore_read.py [--records N]

Writes N records (100-byte values) into two partitions with kafkalog, uploads the data directory to
a local S3-compatible server (moto's, on 127.0.0.1, counting requests and GET body bytes), then in
one Spark session (JSON lines):
* a full read of the topic from the server (noop sink) vs Spark reading the same rows as Parquet
  from the same server (s3a is not on this machine's Spark classpath, so the Parquet side reads
  through pyarrow.fs: a Python source yielding the Parquet file's record batches);
* 1,000 records at a known offset through pushdown: .log bytes requested, requests made, against
  the topic's .log bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.objectstore.s3_server import start_server

import kafkalog
import kafkalog.spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    server, s3 = start_server()
    local = tempfile.mkdtemp(prefix="kafkalog-osbench-")
    half = args.records // 2
    with kafkalog.open(local, background=False) as dl:
        dl.create_topic("t", partitions=2)
        for p in range(2):
            dl.produce_many("t", [b"%012d" % i + b"." * 88 for i in range(half)], partition=p)
    uri = s3.upload(local, "bench", "kafka")
    log_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(local)
                    for f in fs if f.endswith(".log"))

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    kafkalog.spark.register(spark)

    def read():
        r = spark.read.format("kafkalog").option("subscribe", "t")
        for k, v in s3.options.items():
            r = r.option(k, v)
        return r.load(uri)

    server.counts.reset()
    t0 = time.perf_counter()
    read().write.format("noop").mode("overwrite").save()
    full = time.perf_counter() - t0
    print(json.dumps({"bench": "objectstore.full_read", "records": args.records,
                      "seconds": round(full, 3), "get_bytes": server.counts.get_bytes,
                      "requests": len(server.counts.requests), "log_bytes": log_bytes}), flush=True)

    start = half // 2
    server.counts.reset()
    t0 = time.perf_counter()
    n = read().where(f"partition = 0 AND offset >= {start} AND offset < {start + 1000}").count()
    point = time.perf_counter() - t0
    log_gets = [r for r in server.counts.requests if r[0] == "GET" and r[1].endswith(".log")]
    print(json.dumps({"bench": "objectstore.point_read", "records": args.records, "rows": n,
                      "seconds": round(point, 3), "get_bytes": server.counts.get_bytes,
                      "log_get_requests": len(log_gets),
                      "log_get_bytes_requested": sum(
                          int(r[2].split("-")[1]) - int(r[2].split("=")[1].split("-")[0]) + 1
                          for r in log_gets if r[2]),
                      "requests": len(server.counts.requests), "log_bytes": log_bytes}),
          flush=True)
    spark.stop()
    server.stop()


if __name__ == "__main__":
    main()
