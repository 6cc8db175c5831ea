"""The kafkalog data source through Spark Connect (issue 28): pyspark's own Connect server on a free
loopback port, a client session ``SparkSession.builder.remote("sc://127.0.0.1:PORT")`` in its own
process (pyspark refuses a remote session in a process that runs a classic one). The client reads a
data directory with ``format("kafkalog")``, found on the server without any registration and again
after ``kafkalog.spark.register`` (filter pushdown on), and writes through the sink; the rows are
what kafkalog's own reader finds in the directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import kafkalog
from tests.spark.spark_processes import ConnectServer

pytest.importorskip("grpc", reason="the Spark Connect client needs pyspark[connect] (grpcio, pandas)")

CLIENT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    url, data = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.remote(url).getOrCreate()
    out = {"session": type(spark).__module__}

    def rows(df):
        return sorted([r.topic, r.partition, r.offset, round(r.timestamp.timestamp() * 1000), r.timestampType,
                       r.key and r.key.hex(), r.value and r.value.hex(),
                       r.headers and [[h.key, h.value and h.value.hex()] for h in r.headers]] for r in df.collect())

    read = lambda: spark.read.format("kafkalog").option("subscribe", "events").option("includeHeaders", "true")
    out["auto"] = rows(read().load(data))                     # pyspark_kafkalog, found by the server
    import kafkalog.spark
    kafkalog.spark.register(spark)                            # through the client: pushdown on
    out["pushdown"] = spark.conf.get("spark.sql.python.filterPushdown.enabled")
    out["filtered"] = rows(read().load(data).where("partition = 1 AND offset >= 10"))
    (spark.range(5).selectExpr("cast(id as string) as key", "concat('copy ', id) as value",
                               "cast(id % 2 as int) as partition")
     .write.format("kafkalog").option("topic", "copies").option("partitions", 2).mode("append").save(data))
    out["copies"] = spark.read.format("kafkalog").option("subscribe", "copies").load(data).count()
    spark.stop()
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    try:
        yield server
    finally:
        server.stop()


TIMESTAMP_TYPES = {"NoTimestampType": -1, "CreateTime": 0, "LogAppendTime": 1}


def _expected(data: Path) -> list[list]:
    with kafkalog.open(str(data), read_only=True) as dl:
        # (a record's timestamp_type is Kafka's TimestampType: its name is str() of it)
        return sorted([r.topic, r.partition, r.offset, r.timestamp, TIMESTAMP_TYPES[str(r.timestamp_type)],
                       r.key and r.key.hex(), r.value and r.value.hex(),
                       [[k, v and v.hex()] for k, v in r.headers] if r.headers else None]
                      for r in dl.consume("events"))


def test_the_kafkalog_source_through_spark_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafkalog.open(str(data)) as dl:
        dl.create_topic("events", partitions=2)
        with dl.producer() as producer:
            for i in range(40):
                producer.send("events", key=None if i % 7 == 0 else b"k%d" % i,
                              value=None if i % 9 == 0 else b"event %d" % i, partition=i % 2,
                              timestamp_ms=1_700_000_000_000 + i,
                              headers=[("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else None)
    expected = _expected(data)
    assert len(expected) == 40
    r = subprocess.run([sys.executable, "-c", CLIENT, connect_server.url, str(data)], capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore::FutureWarning"))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr[-5000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert out["session"] == "pyspark.sql.connect.session"
    assert out["auto"] == expected
    assert out["pushdown"] == "true"
    assert out["filtered"] == [row for row in expected if row[1] == 1 and row[2] >= 10]
    assert out["copies"] == 5
    with kafkalog.open(str(data), read_only=True) as dl:
        assert sorted(r.value for r in dl.consume("copies")) == [b"copy %d" % i for i in range(5)]


def test_the_readmes_connect_snippet_runs_as_printed(connect_server: ConnectServer, tmp_path: Path) -> None:
    """README's Spark Connect snippet, its server address and data directory replaced, then the rows
    it loaded counted."""
    from tests.test_readme import snippet
    data = tmp_path / "data"
    with kafkalog.open(str(data)) as dl:
        dl.create_topic("orders", partitions=2)
        with dl.producer() as producer:
            for i in range(12):
                producer.send("orders", value=b"order %d" % i, partition=i % 2)
    code = snippet("Spark on a cluster and through Spark Connect", "python").code
    assert '"sc://host:15002"' in code and '"/data/kafka"' in code
    code = code.replace('"sc://host:15002"', repr(connect_server.url)).replace('"/data/kafka"', repr(str(data)))
    r = subprocess.run([sys.executable, "-c", code + "print('COUNT', df.count())\nspark.stop()\n"],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONWARNINGS="ignore::FutureWarning"))
    assert r.returncode == 0, r.stderr[-5000:]
    assert "COUNT 12" in r.stdout.splitlines(), r.stdout[-2000:]
