"""Topic IDs: Kafka keeps a topic's UUID in ``partition.metadata`` of each partition directory;
Produce v13 and Fetch v13+ address topics only by it, so Metadata must return the real one.

The log layer keeps the file (:meth:`LogManager.topic_id`); this is the broker's two-way cache of it."""

from __future__ import annotations

import threading
import uuid

from kafkalog.log.manager import LogManager

ZERO = uuid.UUID(int=0)


class TopicIds:
    """Topic name <-> topic ID of an open data directory."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self._by_name: dict[str, uuid.UUID] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._lock = threading.Lock()

    def of(self, topic: str) -> uuid.UUID:
        """The ID of an existing topic (read once from the log layer, which assigns it when the
        topic has none)."""
        with self._lock:
            tid = self._by_name.get(topic)
            if tid is None:
                tid = self.manager.topic_id(topic)
                self._by_name[topic] = tid
                self._by_id[tid] = topic
            return tid

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The topic of ``topic_id`` (None when unknown)."""
        name = self._by_id.get(topic_id)
        if name is not None and self.manager.has_topic(name):
            return name
        return self.manager.topic_by_id(topic_id)     # a look-up, not a walk over every topic

    def forget(self, topic: str) -> None:
        with self._lock:
            tid = self._by_name.pop(topic, None)
            if tid is not None:
                self._by_id.pop(tid, None)
