"""aiokafka 0.14 against ``kafkalog serve``: admin, idempotent produce with every codec,
assign-and-seek consume, ListOffsets."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.server.broker_process import BrokerProcess

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
N = 200


def test_admin_create_describe_delete(broker: BrokerProcess) -> None:
    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            resp = await admin.create_topics([NewTopic("ak-admin", 2, 1,
                                                       topic_configs={"max.message.bytes": "2048"})])
            assert all(err == 0 for _t, err, *_ in resp.topic_errors)
            resp = await admin.create_topics([NewTopic("ak-admin", 2, 1)])
            assert [err for _t, err, *_ in resp.topic_errors] == [36]       # TOPIC_ALREADY_EXISTS
            assert "ak-admin" in await admin.list_topics()
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "ak-admin")])
            assert "max.message.bytes" in repr(described) and "'2048'" in repr(described)
            await admin.delete_topics(["ak-admin"])
            assert "ak-admin" not in await admin.list_topics()
        finally:
            await admin.close()
    asyncio.run(run())


async def _produce(broker: BrokerProcess, topic: str, codec: object) -> dict[tuple[int, int], tuple]:
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                         compression_type=codec, linger_ms=5)
    await p.start()
    try:
        futs = []
        for i in range(N):
            rec = (b"k%d" % i, b"v%d" % i * (i % 9 + 1), [("i", b"%d" % i)])
            futs.append((await p.send(topic, key=rec[0], value=rec[1], headers=rec[2],
                                      partition=i % 2), rec))
        out = {}
        for fut, rec in futs:
            md = await fut
            out[(md.partition, md.offset)] = (rec[0], rec[1], tuple(rec[2]))
        return out
    finally:
        await p.stop()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_idempotent_produce_assign_seek_consume(broker: BrokerProcess, codec: object) -> None:
    topic = f"ak-codec-{codec or 'none'}"

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 2, 1)])
        await admin.close()
        sent = await _produce(broker, topic, codec)
        assert len(sent) == N
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            c.assign(tps)
            c.seek(tps[0], 0)
            c.seek(tps[1], 13)
            expected = {k: v for k, v in sent.items() if k[0] == 0 or k[1] >= 13}
            got = {}
            for _ in range(60):
                batch = await c.getmany(timeout_ms=1000)
                for msgs in batch.values():
                    for m in msgs:
                        got[(m.partition, m.offset)] = (m.key, m.value, tuple(m.headers))
                if len(got) >= len(expected):
                    break
            assert got == expected
            assert await c.end_offsets(tps) == {tps[0]: N // 2, tps[1]: N // 2}
            assert await c.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        finally:
            await c.stop()
    asyncio.run(run())
