"""The asyncio producer (aiokafka's shape) under a running event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

import kafkalog
from kafkalog.aio import AIOKafkaProducer
from kafkalog.client import RecordMetadata
from kafkalog.errors import RecordTooLargeError


def test_aio_producer_send_and_wait(tmp_path):
    async def main() -> list:
        loop_thread = threading.current_thread()
        ticks = 0

        async def ticker() -> None:          # the loop keeps running while records are appended
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        async with AIOKafkaProducer(tmp_path / "d", linger_ms=5) as p:
            md = await p.send_and_wait("t", b"first", key=b"k")
            assert isinstance(md, RecordMetadata) and md.offset == 0
            futs = [await p.send("t", b"v%d" % i) for i in range(200)]
            mds = await asyncio.gather(*futs)
            assert [m.offset for m in mds] == list(range(1, 201))
            big = await p.send("t", b"x" * 2_000_000)
            with pytest.raises(RecordTooLargeError):
                await big
            assert await p.partitions_for("t") == {0}
            await p.flush()
        t.cancel()
        assert threading.current_thread() is loop_thread and ticks > 0
        return mds

    asyncio.run(main())
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        assert [r.value for r in dl.consume("t")] == [b"first"] + [b"v%d" % i for i in range(200)]


def test_aio_producer_on_an_open_data_log_with_a_transaction(tmp_path):
    with kafkalog.open(tmp_path / "d", {"transaction.state.log.num.partitions": 1},
                       background=False) as dl:
        dl.create_topic("t", 1)

        async def main() -> None:
            p = AIOKafkaProducer(dl, transactional_id="aio-tx")
            await p.start()
            async with p.transaction():
                await p.send("t", b"kept")
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send("t", b"dropped")
                    raise RuntimeError("abort it")
            await p.stop()

        asyncio.run(main())
        assert [r.value for r in dl.consume("t", isolation="read_committed")] == [b"kept"]
        assert [r.value for r in dl.consume("t")] == [b"kept", b"dropped"]


def test_aio_producer_not_started(tmp_path):
    async def main() -> None:
        p = AIOKafkaProducer(tmp_path / "d")
        with pytest.raises(kafkalog.client.producer.IllegalStateError):
            await p.send("t", b"x")
    asyncio.run(main())
