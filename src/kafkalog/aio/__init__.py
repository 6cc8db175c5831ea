"""kafkalog for asyncio: an async producer and consumer in the shape aiokafka users know
(``await producer.send(...)``, ``async for record in consumer``, ``await consumer.getmany(...)``), over the
embedded log, without blocking the event loop on file I/O."""

from __future__ import annotations

from typing import Any, List

__all__: List[str] = ["AIOKafkaProducer", "AIOKafkaConsumer"]


def __getattr__(name: str) -> Any:
    if name == "AIOKafkaProducer":
        from kafkalog.aio.producer import AIOKafkaProducer
        return AIOKafkaProducer
    if name == "AIOKafkaConsumer":
        from kafkalog.aio.consumer import AIOKafkaConsumer
        return AIOKafkaConsumer
    raise AttributeError(f"module 'kafkalog.aio' has no attribute {name!r}")
