"""What ``kafkalog top DATA_DIR`` reads, once per refresh, without writing or locking anything (so it
runs beside ``kafkalog serve`` or a Kafka broker on the same directory): a fresh read-only snapshot
of the partitions (:class:`~kafkalog.log.read.data_dir_view.DataDirView`: log end offsets and
sizes), and the committed offsets of ``__consumer_offsets`` replayed from where the previous refresh
stopped (each refresh reads only the records appended since)."""

from __future__ import annotations

from kafkalog.cli.top_view import Partition, Sample
from kafkalog.errors import KafkalogError


class DataDirSource:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        #: __consumer_offsets partition -> the next offset to replay
        self._next: dict[int, int] = {}
        self._committed: dict[str, dict[Partition, int]] = {}

    def close(self) -> None:
        pass

    def sample(self) -> Sample:
        from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
        from kafkalog.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
        from kafkalog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
        from kafkalog.log.read.data_dir_view import DataDirView
        internal = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC)
        partitions: dict[str, list[int]] = {}
        ends: dict[Partition, int] = {}
        sizes: dict[Partition, int] = {}
        with DataDirView(self.data_dir) as view:
            for tp in view.partitions():
                log = view.get_log(tp.topic, tp.partition)
                if tp.topic == CONSUMER_OFFSETS_TOPIC:
                    self._replay(tp.partition, log)
                if tp.topic in internal:        # as Metadata marks them: is_internal
                    continue
                partitions.setdefault(tp.topic, []).append(tp.partition)
                ends[(tp.topic, tp.partition)] = log.log_end_offset
                sizes[(tp.topic, tp.partition)] = log.size
        committed = {g: offs for g, offs in self._committed.items() if offs}
        return Sample.of(partitions, ends, sizes, committed)

    def _replay(self, partition: int, log: object) -> None:
        """The offset commits (and their tombstones) appended to one ``__consumer_offsets`` partition
        since the last refresh (committed transactions only, as the coordinator loads them)."""
        from kafkalog.coordinator.group_metadata import OffsetCommitKey, decode_key, decode_offset_commit_value
        from kafkalog.record.constants import IsolationLevel
        start = max(self._next.get(partition, 0), log.log_start_offset)     # type: ignore[attr-defined]
        nxt = start
        for batch in log.reader().visible_batches(start, isolation=IsolationLevel.READ_COMMITTED):  # type: ignore[attr-defined]
            for rec in batch:
                if rec.key is None:
                    continue
                try:
                    k = decode_key(bytes(rec.key))
                    if not isinstance(k, OffsetCommitKey):
                        continue
                    tp = (k.topic, k.partition)
                    if rec.value is None:
                        self._committed.get(k.group, {}).pop(tp, None)
                    else:
                        self._committed.setdefault(k.group, {})[tp] = \
                            decode_offset_commit_value(bytes(rec.value)).offset
                except KafkalogError:
                    continue        # a record of a kind this view does not follow
            nxt = max(nxt, batch.last_offset + 1)
        self._next[partition] = nxt
