"""What ``kafkalog top DATA_DIR`` reads, once per refresh, without writing or locking anything (so it
runs beside ``kafkalog serve`` or a Kafka broker on the same directory): the partitions' log end
offsets and sizes from read-only snapshots (:class:`~kafkalog.log.read.partition_view.PartitionView`),
and the committed offsets of ``__consumer_offsets`` replayed from where the previous refresh stopped
(each refresh reads only the records appended since).

A refresh costs two stats per partition: its directory (a segment rolled, deleted or swapped changes
it) and its last segment's ``.log`` (an append changes its size and time). Only a partition where
either changed is opened again, and its snapshot is closed at once: with 100,000 idle partitions a
refresh opens no file (it held every partition open before, and failed there for want of file
descriptors). The data directory is listed again only when its own time changed. A time less than
:data:`SETTLED_NS` old is not trusted (file times are coarser than the writes: two appends to a
preallocated segment can leave one time and one size), so what changed in the last seconds is read
again at the next refresh."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, NamedTuple

from kafkalog.cli.top_view import Partition, Sample
from kafkalog.errors import KafkalogError

if TYPE_CHECKING:
    from kafkalog.log.read.data_dir_view import PartitionDir
    from kafkalog.log.read.view_files import ViewFiles

#: a file time younger than this (at the refresh) may still change without changing
SETTLED_NS = 2_000_000_000


class _Seen(NamedTuple):
    """A partition as its last snapshot found it; a ``None`` stamp matches nothing (read it again)."""
    directory: int | None               #: the directory's st_mtime_ns
    active: str | None                  #: its last segment's ``.log``
    stamp: tuple[int, int] | None       #: that file's (st_size, st_mtime_ns)
    log_end_offset: int
    size: int


def _stamp(path: str | None) -> tuple[int, int] | None:
    if path is None:
        return (0, 0)                   # no segment: the directory's time says when one comes
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class DataDirSource:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        #: __consumer_offsets partition -> the next offset to replay
        self._next: dict[int, int] = {}
        self._committed: dict[str, dict[Partition, int]] = {}
        self._seen: dict[Partition, _Seen] = {}
        self._listing: list[PartitionDir] = []
        #: the data directory's st_mtime_ns when it was listed (None: list it again)
        self._listed_at: int | None = None

    def close(self) -> None:
        pass

    def sample(self) -> Sample:
        from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
        from kafkalog.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
        from kafkalog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
        from kafkalog.log.checkpoint import LOG_START_OFFSET_CHECKPOINT_FILE
        from kafkalog.log.read.data_dir_view import read_offset_checkpoint
        from kafkalog.log.read.partition_view import open_partition_view
        from kafkalog.log.read.view_files import LocalFiles
        internal = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC)
        files = LocalFiles()
        settled = time.time_ns() - SETTLED_NS
        starts: dict[Partition, int] | None = None
        seen: dict[Partition, _Seen] = {}
        for d in self._partition_dirs(files, settled):
            tp = (d.topic, d.partition)
            try:
                directory: int | None = os.stat(d.path).st_mtime_ns
            except OSError:
                continue                # deleted since the listing
            was = self._seen.get(tp)
            if was is not None and was.directory == directory and was.stamp is not None \
                    and _stamp(was.active) == was.stamp:
                seen[tp] = was
                continue
            if starts is None:
                starts = {(t.topic, t.partition): o for t, o in read_offset_checkpoint(
                    files, self.data_dir, LOG_START_OFFSET_CHECKPOINT_FILE).items()}
            with open_partition_view(d.path, d.topic, d.partition, files=files,
                                     log_start_checkpoint=starts.get(tp)) as log:
                last = log.segments[-1] if log.segments else None
                active = last.log_path if last is not None else None
                stamp = _stamp(active)
                # trusted only when settled, and when it is the size the snapshot read (not an
                # append made after it)
                if stamp is not None and (stamp[1] > settled or (last is not None and stamp[0] != last.size)):
                    stamp = None
                if directory is not None and directory > settled:
                    directory = None
                seen[tp] = _Seen(directory, active, stamp, log.log_end_offset, log.size)
                if d.topic == CONSUMER_OFFSETS_TOPIC:
                    self._replay(d.partition, log)
        self._seen = seen
        partitions: dict[str, list[int]] = {}
        ends: dict[Partition, int] = {}
        sizes: dict[Partition, int] = {}
        for tp, s in seen.items():
            if tp[0] not in internal:   # as Metadata marks them: is_internal
                partitions.setdefault(tp[0], []).append(tp[1])
                ends[tp] = s.log_end_offset
                sizes[tp] = s.size
        committed = {g: offs for g, offs in self._committed.items() if offs}
        return Sample.of(partitions, ends, sizes, committed)

    def _partition_dirs(self, files: ViewFiles, settled: int) -> list[PartitionDir]:
        """The partition directories, listed again only when the data directory changed (a
        partition made or deleted changes its time; so does a checkpoint written)."""
        from kafkalog.log.read.data_dir_view import list_partition_dirs
        try:
            stamp: int | None = os.stat(self.data_dir).st_mtime_ns
        except OSError:
            stamp = None                # list_partition_dirs says what is wrong with it
        if stamp is None or stamp != self._listed_at:
            self._listing = list_partition_dirs(files, self.data_dir)
            self._listed_at = stamp if stamp is not None and stamp <= settled else None
        return self._listing

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
