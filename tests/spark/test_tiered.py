"""The Spark source over Kafka's tiered storage: a broker directory whose older segments are in an
S3-compatible server (moto on 127.0.0.1), read with a real local session through the
``remoteStorage`` options; offsets continuous; ``failOnDataLoss`` telling "in remote storage"
(read) from "deleted" (error naming the offsets, or skipped)."""

from __future__ import annotations

import os
import shutil

import pytest

import kafkalog
from tests.objectstore.s3_server import s3_server  # noqa: F401 - a pytest fixture
from tests.objectstore.tiered_layouts import (
    AivenWriter,
    kafka_uuid,
    put_object,
    segment_bases,
    write_partition_metadata,
)

RECORDS = 8000
TOPIC = "events"


def _broker_dir(tmp_path):
    d = tmp_path / "broker"
    with kafkalog.open(d, {"log.segment.bytes": 25_000}, background=False) as dl:
        dl.create_topic(TOPIC, partitions=1)
        dl.produce_many(TOPIC, [b"event-%06d" % i for i in range(RECORDS)], partition=0,
                        batch_size=250)
    return d


def _tier(broker, tmp_path, moved):
    local = tmp_path / "local"
    shutil.copytree(broker, local)
    pdir = local / f"{TOPIC}-0"
    bases = segment_bases(pdir)
    assert len(bases) > moved
    for base in bases[:moved]:
        for name in os.listdir(pdir):
            if name.startswith(f"{base:020d}."):
                os.unlink(pdir / name)
    return local, bases


def _read(spark, local, options, **extra):
    r = spark.read.format("kafkalog").option("subscribe", TOPIC)
    for k, v in {**options, **extra}.items():
        r = r.option(k, v)
    return r.load(str(local))


def test_kafka_layout_through_spark(spark, s3_server, tmp_path):  # noqa: F811
    broker = _broker_dir(tmp_path)
    local, bases = _tier(broker, tmp_path, moved=3)
    s3_server.filesystem().create_dir("sparktier")
    for base in bases[:3]:
        if base == bases[1]:
            continue                              # deleted from remote storage
        for ext in ("log", "index", "timeindex"):
            name = f"{base:020d}.{ext}"
            put_object(s3_server, f"sparktier/plain/{TOPIC}-0/{name}",
                       (broker / f"{TOPIC}-0" / name).read_bytes())
    opts = {**s3_server.options, "remoteStorage": "s3://sparktier/plain"}
    # without remote storage: the local segments only
    assert _read(spark, local, {}).count() == RECORDS - bases[3]
    # the gap: failOnDataLoss=true names the offsets
    with pytest.raises(Exception, match=f"offsets {bases[1]}..{bases[2] - 1} are neither"):
        _read(spark, local, opts).count()
    # failOnDataLoss=false: skipped, everything else read, offsets continuous around it
    rows = _read(spark, local, opts, failOnDataLoss="false").select("offset", "value").collect()
    want = [i for i in range(RECORDS) if not bases[1] <= i < bases[2]]
    assert sorted(r.offset for r in rows) == want
    assert all(bytes(r.value) == b"event-%06d" % r.offset for r in rows)
    # a range entirely before the gap reads fine with failOnDataLoss=true
    got = _read(spark, local, opts, endingOffsets=f'{{"{TOPIC}":{{"0":{bases[1]}}}}}').count()
    assert got == bases[1]


def test_aiven_layout_through_spark(spark, s3_server, tmp_path):  # noqa: F811
    broker = _broker_dir(tmp_path)
    local, bases = _tier(broker, tmp_path, moved=4)
    topic_id = kafka_uuid()
    write_partition_metadata(local / f"{TOPIC}-0", topic_id)
    s3_server.filesystem().create_dir("sparkaiven")
    w = AivenWriter(s3_server, "sparkaiven/rsm/", chunk_size=2048, compression=True)
    for base in bases[:4]:
        w.upload(broker / f"{TOPIC}-0", TOPIC, topic_id, 0, base)
    opts = {**s3_server.options, "remoteStorage": "s3://sparkaiven/rsm",
            "remoteStorage.layout": "aiven"}
    rows = _read(spark, local, opts).select("offset", "value").collect()
    assert sorted(r.offset for r in rows) == list(range(RECORDS))
    assert all(bytes(r.value) == b"event-%06d" % r.offset for r in rows)
    # an unknown remoteStorage option is refused
    with pytest.raises(Exception, match="remotestorage.chunksize"):
        _read(spark, local, {**opts, "remoteStorage.chunkSize": "10"}).count()
