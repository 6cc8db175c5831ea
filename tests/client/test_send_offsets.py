"""``send_offsets_to_transaction``: a consumer group's offsets committed with a transaction, as Kafka
does (written in the transaction to the group's ``__consumer_offsets`` partition; they count once
the COMMIT marker is written, and an abort, or a producer killed mid-transaction, leaves the
previously committed offsets in place): consume-transform-produce exactly once with the embedded
client and with the asyncio producer."""

from __future__ import annotations

import asyncio
import textwrap
import time

import pytest

import kafkalog
from kafkalog.aio import AIOKafkaProducer
from kafkalog.client.producer import IllegalStateError
from kafkalog.coordinator.group_metadata import (
    CONSUMER_OFFSETS_TOPIC,
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from kafkalog.log.naming import TopicPartition
from kafkalog.record.control import ControlRecordType, control_record_type
from tests.client.test_transactions import kill_when_ready

BROKER = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 5}
IN0 = TopicPartition("in", 0)


def _fill(dl: kafkalog.DataLog, n: int = 10) -> None:
    dl.create_topic("in", 1, exist_ok=True)
    for i in range(n):
        dl.produce("in", b"%d" % i, partition=0)


def _committed(d, group: str) -> dict:
    """What a fresh reader of the directory sees (replayed from disk)."""
    with kafkalog.open(d, read_only=True) as ro:
        return {tp: o.offset for tp, o in ro.offsets_store().fetch(group).items()}


def _offsets_markers(dl: kafkalog.DataLog) -> list:
    out = []
    for p in dl.manager.partitions_of(CONSUMER_OFFSETS_TOPIC):
        for b in dl.manager.get_log(CONSUMER_OFFSETS_TOPIC, p).batches():
            if b.is_control:
                out.append(control_record_type(bytes(b.records()[0].key)))
    return out


def test_consume_transform_produce_exactly_once(tmp_path):
    d = tmp_path / "d"
    with kafkalog.open(d, BROKER, background=False) as dl:
        _fill(dl)
        consumer = dl.consumer("in", group_id="ctp", auto_offset_reset="earliest", enable_auto_commit=False,
                               isolation_level="read_committed")
        producer = dl.producer(transactional_id="ctp-tx")
        producer.init_transactions()
        done = 0
        while done < 10:
            recs = consumer.poll(timeout_ms=1000, max_records=4).get(IN0, [])
            assert recs
            producer.begin_transaction()
            for r in recs:
                producer.send("out", b"x" + r.value, partition=0)
            producer.send_offsets_to_transaction({IN0: recs[-1].offset + 1}, consumer.group_metadata())
            assert consumer.committed(IN0) == (done or None)        # pending until the commit
            producer.commit_transaction()
            done = recs[-1].offset + 1
            assert consumer.committed(IN0) == done
        producer.close()
        consumer.close()
        assert [r.value for r in dl.consume("out", isolation="read_committed")] == [b"x%d" % i for i in range(10)]
        assert set(_offsets_markers(dl)) == {ControlRecordType.COMMIT}
        # the records are Kafka's OffsetCommitKey/Value in the group's partition, in transactional batches
        p = dl.offsets_store().offsets_partition("ctp").partition
        batches = [b for b in dl.manager.get_log(CONSUMER_OFFSETS_TOPIC, p).batches() if not b.is_control]
        assert batches and all(b.is_transactional and b.producer_id == producer.producer_id for b in batches)
        last = batches[-1].records()[-1]
        assert decode_key(bytes(last.key)) == OffsetCommitKey("ctp", "in", 0)
        assert decode_offset_commit_value(bytes(last.value)).offset == 10
    assert _committed(d, "ctp") == {IN0: 10}
    with kafkalog.open(d, BROKER, background=False) as dl:            # a restarted consumer resumes at 10
        c = dl.consumer("in", group_id="ctp", enable_auto_commit=False)
        assert c.committed(IN0) == 10
        c.close()


def test_abort_discards_the_offsets(tmp_path):
    d = tmp_path / "d"
    with kafkalog.open(d, BROKER, background=False) as dl:
        _fill(dl)
        consumer = dl.consumer("in", group_id="g", enable_auto_commit=False)
        p = dl.producer(transactional_id="tx-a")
        p.init_transactions()
        with pytest.raises(IllegalStateError):
            p.send_offsets_to_transaction({IN0: 1}, "g")              # no transaction begun
        p.begin_transaction()
        p.send_offsets_to_transaction({IN0: 5}, "g")
        p.commit_transaction()
        p.begin_transaction()
        p.send("out", b"dropped")
        p.send_offsets_to_transaction({IN0: (8, "meta")}, consumer.group_metadata())
        p.abort_transaction()
        assert consumer.committed(IN0) == 5
        p.close()
        consumer.close()
        assert _offsets_markers(dl) == [ControlRecordType.COMMIT, ControlRecordType.ABORT]
    assert _committed(d, "g") == {IN0: 5}


def test_writer_killed_mid_transaction_commits_no_offsets(tmp_path):
    d = tmp_path / "d"
    with kafkalog.open(d, BROKER, background=False) as dl:
        _fill(dl)
    script = textwrap.dedent(f"""
        import time, kafkalog
        from kafkalog.log.naming import TopicPartition
        dl = kafkalog.open({str(d)!r}, {BROKER!r})
        p = dl.producer(transactional_id="tx-k", transaction_timeout_ms=1000)
        p.init_transactions()
        p.begin_transaction()
        p.send("out", b"half")
        p.send_offsets_to_transaction({{TopicPartition("in", 0): 7}}, "killed")
        p.flush()
        print("ready", flush=True)
        time.sleep(600)
    """)
    kill_when_ready(script)
    assert _committed(d, "killed") == {}                             # written, but pending
    time.sleep(1.2)                                                   # past transaction.timeout.ms
    with kafkalog.open(d, BROKER, background=False) as dl:           # the coordinator aborts it
        assert _offsets_markers(dl) == [ControlRecordType.ABORT]
        assert dl.offsets_store().fetch("killed") == {}
    assert _committed(d, "killed") == {}


def test_aio_producer_sends_offsets_to_transaction(tmp_path):
    d = tmp_path / "d"
    with kafkalog.open(d, BROKER, background=False) as dl:
        _fill(dl, 3)

        async def run() -> None:
            async with AIOKafkaProducer(dl, transactional_id="tx-aio") as p:
                async with p.transaction():
                    await p.send("out", b"a", partition=0)
                    await p.send_offsets_to_transaction({IN0: 3}, "aio-g")
                with pytest.raises(RuntimeError):
                    async with p.transaction():
                        await p.send_offsets_to_transaction({IN0: 1}, "aio-g")
                        raise RuntimeError("aborts")

        asyncio.run(run())
        assert dl.consumer(group_id="aio-g").committed(IN0) == 3
    assert _committed(d, "aio-g") == {IN0: 3}
