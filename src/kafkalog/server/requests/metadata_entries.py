"""The topics of Metadata answers kept encoded (issue 35). A Metadata request for every topic of a
node with 10,000 partitions looked up each partition's log and leader epoch and packed its entry,
every time (13 ms of the event loop at low load, ~100 ms under load). Now each topic's entry up to
its partitions (:func:`~kafkalog.server.requests.metadata_wire.topic_head`) is kept by (topic,
version) with the topic's metadata stamp (:meth:`~kafkalog.log.manager.LogManager.metadata_stamp`,
which moves when a partition is seen or removed, the topic committed, a leader epoch changed) and
its ID, and answered again while both are the same: a Metadata request for all topics costs a
look-up per topic and a join of bytes. Who may see a topic, and its authorized operations, are
decided per request as before: the operations are written after the kept bytes
(:func:`~kafkalog.server.requests.metadata_wire.topic_tail`), never kept in them.

Entries of topics deleted or changed since are dropped once the entries have doubled since the
last such sweep (the sweep costs what they hold, paid once per as many new entries): at most the
versions asked for times the topics that exist, plus the stale entries of one doubling."""

from __future__ import annotations

import uuid
from collections.abc import Callable

#: entries kept before the first sweep of stale ones
FIRST_SWEEP = 1024


class MetadataEntries:
    """Encoded topic heads by (topic, version), each with the stamp and topic ID it was built at."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int], tuple[int, uuid.UUID, bytes]] = {}
        self._sweep_at = FIRST_SWEEP

    def head(self, topic: str, version: int, stamp: int, topic_id: uuid.UUID,
             build: Callable[[], bytes], stamp_of: Callable[[str], int]) -> bytes:
        """The topic's head as kept for ``stamp`` and ``topic_id``, else ``build()`` (kept unless
        ``stamp`` is 0: a topic that does not exist, or is being removed). ``stamp`` is read
        before what ``build`` reads (a change moves the stamp after it is seen, so bytes kept
        with a stamp never predate it); ``stamp_of`` gives a topic's stamp now (for the sweep)."""
        key = (topic, version)
        kept = self._kept.get(key)
        if kept is not None and kept[0] == stamp and kept[1] == topic_id:
            return kept[2]
        data = build()
        if stamp:
            self._kept[key] = (stamp, topic_id, data)
            if len(self._kept) > self._sweep_at:
                self._sweep(stamp_of)
        return data

    def _sweep(self, stamp_of: Callable[[str], int]) -> None:
        self._kept = {k: v for k, v in self._kept.items() if stamp_of(k[0]) == v[0]}
        self._sweep_at = max(FIRST_SWEEP, 2 * len(self._kept))

    def __len__(self) -> int:
        return len(self._kept)
