"""Spark's own Kafka source and sink (``format("kafka")``, spark-sql-kafka-0-10) through ``kafkalog serve``.

An existing Spark job written for Kafka, pointed at ``kafkalog serve``, runs unchanged: it writes with
Spark's Kafka sink, reads in batch with ``read_committed`` and ``read_uncommitted`` and headers over a
topic holding committed, aborted and one still open transaction (confluent-kafka's transactional
producer), and copies the topic with a streaming query (Spark's source into Spark's sink, a checkpoint;
the query stopped after its first micro-batch, restarted, restarted again after more transactions).
Every read equals what the ``kafkalog`` data source reads from the broker's data directory with the
same options (every column: topic, partition, offset, timestamp, timestampType, key, value, headers),
the streaming copy made with the kafkalog source on that directory has the same micro-batches and
records, and the same job against Apache Kafka 4.4 gives the same rows (the records Spark's sink
wrote carry the producer's clock: there their timestamps are checked to lie within the job's run).
"""

from __future__ import annotations

import gc
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_process import BrokerProcess
from tests.spark import kafka_connector

TS = 1_700_000_000_000  # timestamps the transactional producer gives its records
SRC, COPY = "orders", "orders-copy"
#: the same streaming copy with the kafkalog source on the broker's directory (one word changed)
COPY_FROM_DIRECTORY = "orders-copy-kafkalog"
STREAM_TIMEOUT_S = 600


def _create_topics(bootstrap: str) -> None:
    """The job's topics, each partition's leader answering before the job writes: Kafka answers
    CreateTopics once its controller committed it, and a broker may not lead the partition yet. Its
    first Produce then failed with NOT_LEADER_OR_FOLLOWER and the Java producer's retries with
    OUT_OF_ORDER_SEQUENCE_NUMBER until the batch expired (seen once in a full run). A ListOffsets
    (the watermarks) is answered only by the leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = (SRC, COPY, COPY_FROM_DIRECTORY)
    for f in admin.create_topics([NewTopic(t, 2, 1) for t in names]).values():
        f.result(60)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-connector-leaders"})
    try:
        deadline = time.monotonic() + 60
        for topic in names:
            for partition in (0, 1):
                while True:
                    try:
                        probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
                        break
                    except KafkaException:
                        assert time.monotonic() < deadline, f"no leader answers for {topic}-{partition}"
                        time.sleep(0.1)
    finally:
        probe.close()


def _txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": 600_000, "linger.ms": 0})
    p.init_transactions(60)
    return p


def _transaction(p: Producer, name: str, records: list[tuple[int, int]], end: str | None) -> None:
    """One transaction of ``records`` (partition, n); ``end`` commit / abort / None (left open)."""
    p.begin_transaction()
    for partition, n in records:
        p.produce(SRC, key=f"{name}-{partition}-{n}".encode(), value=f"{name} {n}".encode(),
                  partition=partition, timestamp=TS + n,
                  headers=[("txn", name.encode()), ("n", str(n).encode()), ("none", None)])
    p.flush(60)                                  # on the broker before the end, aborted ones too
    if end == "commit":
        p.commit_transaction(60)
    elif end == "abort":
        p.abort_transaction(60)


# ---------------------------------------------------------------- the existing Spark job, untouched

def sink_write(spark, bootstrap: str, batch: str, n: int) -> None:
    """Spark's Kafka sink: keys (one null), values (one tombstone), headers (some null), partitions."""
    rows = [(None if i == 1 else f"{batch}-{i}".encode(), None if i == 2 else f"{batch} value {i}".encode(),
             None if i % 2 else [("batch", batch.encode()), ("i", str(i).encode()), ("empty", b"")],
             i % 2) for i in range(n)]
    (spark.createDataFrame(rows, "key binary, value binary, headers array<struct<key:string,value:binary>>, "
                                 "partition int")
     .coalesce(1)                                 # one task: the records land in this order
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", SRC).save())


def batch_options(bootstrap: str, topic: str, isolation: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "endingOffsets": "latest", "includeHeaders": "true", "kafka.isolation.level": isolation}


def stream_copy(spark, bootstrap: str, checkpoint: str, *, first_batch_only: bool = False,
                data_dir: str | None = None) -> list[int]:
    """``SRC`` into ``COPY`` (same partition, key, value, headers), read_committed, in micro-batches of
    at most 5 offsets, from ``checkpoint``: ``availableNow``, or (``first_batch_only``) a query stopped
    after its first micro-batch, in the middle of the topic. The rows of each micro-batch. With
    ``data_dir``: the kafkalog source reads the broker's directory, into ``COPY_FROM_DIRECTORY``."""
    source = (spark.readStream.format("kafka" if data_dir is None else "kafkalog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", SRC).option("startingOffsets", "earliest").option("includeHeaders", "true")
              .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", 5))
    writer = ((source.load() if data_dir is None else source.load(data_dir))
              .selectExpr("partition", "key", "value", "headers")
              .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", COPY if data_dir is None else COPY_FROM_DIRECTORY)
              .option("checkpointLocation", checkpoint))
    if first_batch_only:   # the first micro-batch runs at once, the next one an hour later
        q = writer.trigger(processingTime="1 hour").start()
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        while not q.recentProgress and q.exception() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    else:
        q = writer.trigger(availableNow=True).start()
        assert q.awaitTermination(STREAM_TIMEOUT_S), "the streaming query did not finish"
    try:
        assert q.exception() is None, q.exception()
        assert q.recentProgress, "no micro-batch ran"
        return [p["numInputRows"] for p in q.recentProgress]
    finally:
        q.stop()


# ---------------------------------------------------------------- reading and comparing

def _rows(df) -> list[tuple]:
    out = [(r.topic, r.partition, r.offset, r.timestamp, r.timestampType, r.key, r.value,
            None if r.headers is None else tuple((h.key, h.value) for h in r.headers))
           for r in df.collect()]
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def read_both(spark, bootstrap: str, data_dir: str, topic: str, isolation: str) -> list[tuple]:
    """Spark's Kafka source through the broker and the kafkalog source on its directory, the same
    options: the two must give the same rows."""
    opts = batch_options(bootstrap, topic, isolation)
    through_broker = _rows(spark.read.format("kafka").options(**opts).load())
    from_directory = _rows(spark.read.format("kafkalog").options(**opts).load(data_dir))
    assert through_broker == from_directory, (isolation, topic)
    return through_broker


def run_job(spark, bootstrap: str, data_dir: str, work: Path) -> dict[str, Any]:
    """The job and its producers against one broker; what it read, for the comparison with Kafka 4.4."""
    kafka_connector.require(spark)
    out: dict[str, Any] = {"started": time.time()}
    _create_topics(bootstrap)
    sink_write(spark, bootstrap, "a", 6)
    p1, p2 = _txn_producer(bootstrap, "job-1"), _txn_producer(bootstrap, "job-2")
    try:
        _transaction(p1, "t1", [(0, 0), (1, 1), (0, 2), (1, 3)], "commit")
        _transaction(p1, "t2", [(0, 4), (1, 5), (0, 6)], "abort")
        _transaction(p2, "t3", [(0, 7), (1, 8)], None)      # open while the job reads
        _transaction(p1, "t4", [(1, 9), (1, 10)], "commit")
        out["committed"] = read_both(spark, bootstrap, data_dir, SRC, "read_committed")
        out["uncommitted"] = read_both(spark, bootstrap, data_dir, SRC, "read_uncommitted")
        checkpoint, checkpoint_dir = str(work / "checkpoint"), str(work / "checkpoint-kafkalog")
        out["stream_runs"] = [stream_copy(spark, bootstrap, checkpoint, first_batch_only=True),
                              stream_copy(spark, bootstrap, checkpoint)]     # restarted: up to t3
        out["stream_runs_kafkalog"] = [
            stream_copy(spark, bootstrap, checkpoint_dir, first_batch_only=True, data_dir=data_dir),
            stream_copy(spark, bootstrap, checkpoint_dir, data_dir=data_dir)]
        p2.commit_transaction(60)                              # t3 commits after the second run
        sink_write(spark, bootstrap, "b", 3)
        _transaction(p1, "t5", [(0, 11), (1, 12)], "abort")
        out["stream_runs"].append(stream_copy(spark, bootstrap, checkpoint))   # and again: the rest
        out["stream_runs_kafkalog"].append(stream_copy(spark, bootstrap, checkpoint_dir, data_dir=data_dir))
    finally:
        del p1, p2                                 # librdkafka's producers end with their last reference
        gc.collect()
    out["final"] = read_both(spark, bootstrap, data_dir, SRC, "read_committed")
    out["copy"] = read_both(spark, bootstrap, data_dir, COPY, "read_uncommitted")
    out["copy_from_directory"] = read_both(spark, bootstrap, data_dir, COPY_FROM_DIRECTORY, "read_uncommitted")
    last = max((n for n in os.listdir(os.path.join(checkpoint, "offsets")) if n.isdigit()), key=int)
    with open(os.path.join(checkpoint, "offsets", last)) as f:
        out["checkpoint_offsets"] = json.loads(f.read().splitlines()[-1])
    out["ended"] = time.time()
    return out


def _values(rows: list[tuple], partition: int | None = None) -> list[bytes | None]:
    return [r[6] for r in rows if partition is None or r[1] == partition]


@pytest.fixture(scope="module")
def kafkalog_run(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The job against ``kafkalog serve`` (stopped cleanly after it)."""
    work = tmp_path_factory.mktemp("kafka-connector")
    broker = BrokerProcess(str(work / "data")).start()
    try:
        return run_job(spark, broker.bootstrap, broker.data_dir, work)
    finally:
        assert broker.stop() == 0, broker.stderr()


def test_spark_kafka_source_and_sink_through_kafkalog_serve(kafkalog_run: dict[str, Any]) -> None:
    """What the job read is what was written, less what ``read_committed`` must hide; every read
    equal to the kafkalog source's on the same directory (``read_both``)."""
    run = kafkalog_run
    committed, uncommitted, final, copy = run["committed"], run["uncommitted"], run["final"], run["copy"]
    # Spark's sink: one task, rows 0, 2, 4 to partition 0 and 1, 3, 5 to partition 1
    assert _values(committed, 0) == [b"a value 0", None, b"a value 4", b"t1 0", b"t1 2"]
    assert _values(committed, 1) == [b"a value 1", b"a value 3", b"a value 5", b"t1 1", b"t1 3"]
    # offsets are Kafka's: the markers take theirs (t1 committed at 5, t2 aborted at 8 / 7)
    assert [r[2] for r in committed] == [0, 1, 2, 3, 4] * 2
    # read_committed stops at t3, still open: t4, committed after it began, waits with it
    assert [(r[1], r[2], r[6]) for r in uncommitted if r not in committed] == [
        (0, 6, b"t2 4"), (0, 7, b"t2 6"), (0, 9, b"t3 7"),
        (1, 6, b"t2 5"), (1, 8, b"t3 8"), (1, 9, b"t4 9"), (1, 10, b"t4 10")]
    assert all(r in uncommitted for r in committed)
    # keys, headers (Spark's sink: none on odd rows, an empty value; the producer's: a null value)
    assert [r[5] for r in committed[:3]] == [b"a-0", b"a-2", b"a-4"] and committed[5][5] is None
    assert committed[0][7] == (("batch", b"a"), ("i", b"0"), ("empty", b"")) and committed[5][7] is None
    assert committed[3][7] == (("txn", b"t1"), ("n", b"0"), ("none", None))
    assert {r[4] for r in uncommitted} == {0}                                  # CreateTime
    assert [r[3] for r in committed if r[6] == b"t1 2"] == [datetime.fromtimestamp((TS + 2) / 1000, UTC)
                                                             .replace(tzinfo=None)]
    # after t3's commit, more of Spark's sink and t5 aborted: t3 and t4 are read, t5 is not
    assert _values(final, 0) == _values(committed, 0) + [b"t3 7", b"b value 0", None]
    assert _values(final, 1) == _values(committed, 1) + [b"t3 8", b"t4 9", b"t4 10", b"b value 1"]

    # the stream: a query stopped after its first micro-batch, restarted from its checkpoint up to
    # t3 (open), restarted again after t3 committed; micro-batches of at most 5 offsets; the copy
    # holds each committed record once, in order
    first, second, third = run["stream_runs"]
    assert len(first) == 1 and 0 < first[0] < 10 and first[0] + sum(second) == 10, run["stream_runs"]
    assert sum(third) == 7 and len(second) >= 2 and len(third) >= 2, run["stream_runs"]
    for partition in (0, 1):
        assert ([r[5:] for r in copy if r[1] == partition] == [r[5:] for r in final if r[1] == partition])
        assert [r[2] for r in copy if r[1] == partition] == list(range(len(_values(final, partition))))
    # the same streaming job with the kafkalog source on the broker's directory: the same
    # micro-batches (maxOffsetsPerTrigger split as Spark's source splits it), the same copy
    assert run["stream_runs_kafkalog"] == run["stream_runs"]
    assert [r[1:3] + r[5:] for r in run["copy_from_directory"]] == [r[1:3] + r[5:] for r in copy]
    # the checkpoint ends at the log end offsets (past t5's ABORT markers)
    assert run["checkpoint_offsets"] == {SRC: {"0": 15, "1": 16}}


def _portable(rows: list[tuple], run: dict[str, Any]) -> list[tuple]:
    """Rows with the producer's clock (Spark's sink sets no timestamp) checked to lie within the
    run and replaced by a marker; the transactional producer's are kept."""
    out = []
    for r in rows:
        ts = r[3].replace(tzinfo=UTC).timestamp()
        if ts > TS / 1000 + 3600:
            assert run["started"] - 1 <= ts <= run["ended"] + 1, r
            r = (*r[:3], "producer's clock", *r[4:])
        out.append(r)
    return out


def test_the_same_job_against_kafka44_gives_the_same_rows(spark, kafkalog_run: dict[str, Any],
                                                         kafka44_broker, tmp_path: Path) -> None:
    """The job, unchanged, against Apache Kafka 4.4: the same rows, offsets, micro-batches and
    checkpoint; and the kafkalog source reads Kafka's own log directory as Spark read the broker."""
    kafka = run_job(spark, kafka44_broker.bootstrap, str(kafka44_broker.log_dir), tmp_path)
    for key in ("committed", "uncommitted", "final", "copy", "copy_from_directory"):
        assert _portable(kafka[key], kafka) == _portable(kafkalog_run[key], kafkalog_run), key
    for key in ("stream_runs", "stream_runs_kafkalog", "checkpoint_offsets"):
        assert kafka[key] == kafkalog_run[key], key
