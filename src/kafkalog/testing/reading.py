"""What a broker's data directory holds, read through the embedded client's read-only view
(``kafkalog.open(data_dir, read_only=True)``: no lock, nothing changed, so it reads the directory
of a running broker, in this process or another): a topic's records and end offsets, the topics,
a group's committed offsets. Each call takes a fresh snapshot."""

from __future__ import annotations

import os
from typing import Any

from kafkalog.client import ConsumerRecord, TopicPartition, open


def topics(data_dir: str | os.PathLike[str]) -> list[str]:
    """The topics, internal ones (``__consumer_offsets``, ``__transaction_state``) left out."""
    with open(data_dir, read_only=True) as log:
        return [t for t in log.topics() if not t.startswith("__")]


def records(data_dir: str | os.PathLike[str], topic: str, partition: int | None = None, *,
            isolation: str = "read_uncommitted") -> list[ConsumerRecord]:
    """Every record of ``topic`` (of one ``partition``), partition after partition in offset
    order; ``isolation="read_committed"`` leaves out aborted and open transactions, as a
    read_committed consumer does. An unknown topic holds nothing."""
    with open(data_dir, read_only=True) as log:
        if topic not in log.topics():
            return []
        return list(log.consume(topic, partition, isolation=isolation))


def end_offsets(data_dir: str | os.PathLike[str], topic: str, *,
                isolation: str = "read_uncommitted") -> dict[int, int]:
    """Per partition, the high watermark (the last stable offset with ``read_committed``)."""
    with open(data_dir, read_only=True) as log:
        if topic not in log.topics():
            return {}
        return log.end_offsets(topic, isolation)


def committed(data_dir: str | os.PathLike[str], group: str) -> dict[TopicPartition, int]:
    """The offsets ``group`` committed, by partition (none: an empty dict)."""
    with open(data_dir, read_only=True) as log:
        store: Any = log.offsets_store()
        return {TopicPartition(tp.topic, tp.partition): int(om.offset) for tp, om in store.fetch(group).items()}


def groups(data_dir: str | os.PathLike[str]) -> list[str]:
    """The groups with committed offsets or stored metadata."""
    with open(data_dir, read_only=True) as log:
        return list(log.offsets_store().groups())


__all__ = ["committed", "end_offsets", "groups", "records", "topics"]
