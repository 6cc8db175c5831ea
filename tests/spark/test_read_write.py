"""Batch reads and writes through a real SparkSession."""

from __future__ import annotations

import json
import os

import pytest
from pyspark.sql import functions as F

from .helpers import VECTORS, make_partition, vector_bytes

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _read(spark, path, **opts):
    r = spark.read.format("kafkalog")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load(str(path))


def test_schema_matches_spark_kafka_source(spark, tmp_path):
    make_partition(str(tmp_path), "orders", 0, vector_bytes("v2-none"))
    df = _read(spark, tmp_path, subscribe="orders", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")


@pytest.mark.parametrize("name", ["v0-gzip", "v1-lz4", "v1-gzip-logappendtime", "v2-snappy",
                                  "v2-zstd", "v2-mixed-segment", "v2-transactional"])
def test_reads_kafka_written_vectors(spark, tmp_path, name):
    make_partition(str(tmp_path), "t", 0, vector_bytes(name))
    rows = _read(spark, tmp_path, subscribe="t").orderBy("offset").collect()
    lines = [json.loads(line) for line in open(os.path.join(VECTORS, name + ".oracle.jsonl"))]
    expected, control = [], False
    for e in lines:
        if e["type"] == "batch":
            control = e.get("isControl")
        elif e["type"] == "record" and not control:
            expected.append(e)
    assert [(r.offset, r.value.hex() if r.value is not None else None) for r in rows] == \
        [(e["offset"], e.get("value")) for e in expected]
    epoch_ms = [round(r.timestamp.timestamp() * 1000) for r in rows]
    assert epoch_ms == [e["timestamp"] for e in expected]


def test_read_committed_skips_aborted_and_control(spark, tmp_path):
    make_partition(str(tmp_path), "tx", 0, vector_bytes("v2-transactional"))
    uncommitted = _read(spark, tmp_path, subscribe="tx").collect()
    committed = _read(spark, tmp_path, subscribe="tx",
                      **{"kafka.isolation.level": "read_committed"}).collect()
    assert [r.value for r in uncommitted] == [b"committed-1", b"committed-2", b"aborted-1"]
    assert [r.value for r in committed] == [b"committed-1", b"committed-2"]


def test_read_committed_reads_a_producers_transaction_after_its_abort(spark, tmp_path):
    """One producer aborts a transaction, then commits the next: its ABORT marker ends the aborted
    one (Kafka's consumer rule), so the committed records after it are read (they were skipped when
    the read dropped control batches before the filter saw the marker)."""
    from kafkalog.log.manager import LogManager
    from kafkalog.record.builder import BatchBuilder, build_end_txn_marker
    from kafkalog.record.control import ControlRecordType

    def txn(seq, *values):
        b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=seq, is_transactional=True)
        for v in values:
            b.append(None, v, 1_700_000_000_000)
        return bytearray(b.build())

    def marker(kind):
        return bytearray(build_end_txn_marker(kind, producer_id=7, producer_epoch=0,
                                              timestamp=1_700_000_000_000))

    with LogManager(str(tmp_path), background=False) as m:
        log = m.create_topic("tx", 1)[0]
        log.append(txn(0, b"aborted-1", b"aborted-2"))
        log.append(marker(ControlRecordType.ABORT), origin="coordinator")
        log.append(txn(2, b"committed-1"))
        log.append(marker(ControlRecordType.COMMIT), origin="coordinator")
        log.append(txn(3, b"aborted-3"))
        log.append(marker(ControlRecordType.ABORT), origin="coordinator")
    committed = _read(spark, tmp_path, subscribe="tx",
                      **{"kafka.isolation.level": "read_committed"}).collect()
    assert [(r.offset, r.value) for r in committed] == [(3, b"committed-1")]


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory):
    """One topic per codec, 3 partitions, written through the Spark sink."""
    path = tmp_path_factory.mktemp("written")
    df = spark.range(3000).selectExpr(
        "cast(concat('k', id % 37) as binary) as key", "cast(concat('value-', id) as binary) as value",
        "array(named_struct('key', 'n', 'value', cast(id as string))) as headers",
        "timestamp_millis(1700000000000 + id) as timestamp")
    for codec in CODECS:
        (df.write.format("kafkalog").option("topic", f"t-{codec}").option("partitions", 3)
         .option("kafka.compression.type", codec).mode("append").save(str(path)))
    return path


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(spark, written, codec):
    from kafkalog.client.partitioner import partition_for_key
    rows = _read(spark, written, subscribe=f"t-{codec}", includeHeaders="true").collect()
    assert len(rows) == 3000
    assert sorted(r.value for r in rows) == sorted(b"value-%d" % i for i in range(3000))
    for r in rows[:200]:
        assert r.partition == partition_for_key(r.key, 3)  # where Kafka's producer puts it
        n = int(r.value.split(b"-")[1])
        assert r.headers[0]["value"] == str(n).encode()
        assert round(r.timestamp.timestamp() * 1000) == 1700000000000 + n
    offsets = {}
    for r in rows:
        offsets.setdefault(r.partition, []).append(r.offset)
    for offs in offsets.values():
        assert sorted(offs) == list(range(len(offs)))


def test_pushdown_matches_unfiltered_read(spark, written):
    df = _read(spark, written, subscribe="t-none")
    everything = df.collect()
    ts_cut = 1700000000000 + 2000
    queries = {
        "offset >= 100 AND offset < 120 AND partition = 1":
            lambda r: 100 <= r.offset < 120 and r.partition == 1,
        "partition IN (0, 2) AND offset > 900": lambda r: r.partition in (0, 2) and r.offset > 900,
        f"timestamp >= timestamp_millis({ts_cut})":
            lambda r: round(r.timestamp.timestamp() * 1000) >= ts_cut,
        "offset IN (3, 7, 11) AND topic = 't-none'": lambda r: r.offset in (3, 7, 11),
    }
    for where, pred in queries.items():
        got = sorted((r.partition, r.offset) for r in df.filter(where).collect())
        assert got == sorted((r.partition, r.offset) for r in everything if pred(r)), where
    plan = df.filter("offset >= 100 AND partition = 1")._jdf.queryExecution().executedPlan().toString()
    assert "Filter" not in plan.replace("RuntimeFilters", "")  # pushed exactly: no Spark filter


def test_starting_ending_offsets_and_timestamp(spark, written):
    df = _read(spark, written, subscribe="t-none",
               startingOffsets='{"t-none":{"0":10,"1":-2}}',
               endingOffsets='{"t-none":{"0":15,"1":-1}}')  # Spark: the same partitions
    rows = df.filter("partition = 0").collect()
    assert sorted(r.offset for r in rows) == list(range(10, 15))
    ts_rows = _read(spark, written, subscribe="t-none", startingTimestamp=str(1700000000000 + 2990))
    assert sorted(int(r.value.split(b"-")[1]) for r in ts_rows.collect()) == list(range(2990, 3000))
    assert _read(spark, written, assign='{"t-none":[2]}', minPartitions=3) \
        .select("partition").distinct().collect() == [(2,)]


def test_invalid_options_fail_clearly(spark, written):
    with pytest.raises(Exception, match="exactly one of the options"):
        _read(spark, written).collect()
    with pytest.raises(Exception, match="failOnDataLoss"):
        _read(spark, written, subscribe="t-none",
              startingOffsets='{"t-none":{"0":999999}}').collect()


def test_failed_job_leaves_nothing_behind(spark, tmp_path):
    from pyspark.sql.types import BinaryType

    def boom(v):
        if v == b"value-4321":
            raise RuntimeError("task failure on purpose")
        return v

    bad = F.udf(boom, BinaryType())
    df = spark.range(6000, numPartitions=3).selectExpr("cast(concat('value-', id) as binary) v") \
        .select(bad("v").alias("value"))
    with pytest.raises(Exception, match="task failure on purpose"):
        df.write.format("kafkalog").option("topic", "x").mode("append").save(str(tmp_path))
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert not any(f.endswith(".log") and os.path.getsize(f) for f in leftovers)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".kafkalog-staging")]


def test_a_partition_column_places_rows_as_sparks_kafka_sink(spark, tmp_path):
    """Spark's Kafka sink hands a ``partition`` column to Kafka's producer; a topic the write
    creates gets ``partitions`` partitions (Kafka's num.partitions, default 1). A row for a
    partition the new topic lacks fails the job with Kafka's words, and the job leaves no data
    directory behind (it left an empty one, after a Python worker traceback naming an option);
    with ``partitions`` given, every row lands in its partition (issue 24, item 1)."""
    df = spark.range(300, numPartitions=3).selectExpr(
        "cast(concat('k', id) as binary) key", "cast(concat('v', id) as binary) value",
        "cast(id % 3 as int) partition")
    target = tmp_path / "new"
    with pytest.raises(Exception) as e:
        df.write.format("kafkalog").option("topic", "copy").mode("append").save(str(target))
    text = str(e.value)
    assert "Partition 2 of topic copy with partition count 1 is not present" in text or \
        "Partition 1 of topic copy with partition count 1 is not present" in text, text[-3000:]
    assert "option('partitions', N)" in text
    assert not target.exists()
    df.write.format("kafkalog").option("topic", "copy").option("partitions", 3).mode("append").save(str(target))
    import kafkalog
    with kafkalog.open(target, read_only=True) as dl:
        for p in range(3):
            assert sorted(int(r.key[1:]) % 3 for r in dl.consume("copy", partition=p)) == [p] * 100


def test_a_write_into_a_directory_of_other_things_is_refused(spark, tmp_path):
    other = tmp_path / "etc"
    (other / "dbus-1" / "system.d").mkdir(parents=True)
    df = spark.range(3).selectExpr("cast(id as string) value")
    with pytest.raises(Exception, match="not a Kafka data directory"):
        df.write.format("kafkalog").option("topic", "t").mode("append").save(str(other))
    assert sorted(os.listdir(other)) == ["dbus-1"]


def test_big_staging_files_are_moved_into_the_logs(spark, tmp_path):
    """Staging files of at least half a segment become segments of their own at commit (offsets
    rewritten in place); smaller ones are copied. Two jobs into the same small-segment topic:
    every row back once, offsets contiguous, segments that a full recovery keeps whole."""
    from kafkalog.log.log import Log
    for job in range(2):
        (spark.range(job * 20000, (job + 1) * 20000, numPartitions=2)
         .selectExpr("cast(concat('k', id) as binary) as key",
                     "cast(concat('value-', id, repeat('x', 50)) as binary) as value")
         .write.format("kafkalog").option("topic", "moved").option("partitions", 3)
         .option("topic.segment.bytes", 65536).mode("append").save(str(tmp_path)))
    rows = _read(spark, tmp_path, subscribe="moved").collect()
    assert sorted(int(r.value[6:].rstrip(b"x")) for r in rows) == list(range(40000))
    for p in range(3):
        offs = sorted(r.offset for r in rows if r.partition == p)
        assert offs == list(range(len(offs)))
        pdir = tmp_path / f"moved-{p}"
        segments = sorted(n for n in os.listdir(pdir) if n.endswith(".log"))
        assert len(segments) > 4
        with Log.open(str(pdir), {"segment.bytes": 65536}, recovery_point=0) as log:
            assert log.log_end_offset == len(offs)      # a full recovery keeps everything
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".kafkalog-staging")]
