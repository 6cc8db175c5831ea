"""A read-only view of a data directory (one ``log.dirs`` entry): its partitions, its offset
checkpoints and its topic configs, read through :class:`~kafkalog.log.read.view_files.ViewFiles`.

Used by the Python client's read-only mode (``kafkalog.open(dir, read_only=True)``) and by the
Spark source. It never takes the ``.lock``, never recovers, never creates or changes a file.
Partitions are snapshotted on first use (:class:`~kafkalog.log.read.partition_view.PartitionView`).
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional

from kafkalog.errors import InvalidTopicError, KafkalogError, LogDirError
from kafkalog.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from kafkalog.log.config import BrokerConfig, LogConfig, parse_properties
from kafkalog.log.naming import (
    TopicPartition,
    parse_partition_dir_name,
    topic_config_file,
)
from kafkalog.log.read.partition_view import PartitionView, RemoteSegmentsSource, open_partition_view
from kafkalog.log.read.view_files import LocalFiles, ViewFiles

__all__ = ["PartitionDir", "DataDirView", "list_partition_dirs", "read_offset_checkpoint",
           "parse_topic_config"]

#: topic config files larger than this are refused
MAX_TOPIC_CONFIG_BYTES = 1 << 20


class PartitionDir(NamedTuple):
    """One ``<topic>-<partition>`` directory of a data directory."""
    topic: str
    partition: int
    path: str


def list_partition_dirs(files: ViewFiles, data_dir: str) -> List[PartitionDir]:
    """Partition directories of ``data_dir`` sorted by topic then partition; ``-delete`` /
    ``-future`` / ``-stray`` directories, hidden entries and anything that is not
    ``<topic>-<partition>`` are skipped (as Kafka's LogManager loads them)."""
    if not files.is_dir(data_dir):
        raise LogDirError("data directory does not exist or is not a directory", file=data_dir)
    found = []
    for name in files.list_dir(data_dir):
        path = files.join(data_dir, name)
        if name.startswith(".") or not files.is_dir(path):
            continue
        try:
            parsed = parse_partition_dir_name(name)
        except KafkalogError:
            continue
        if not parsed.kind:
            found.append(PartitionDir(parsed.topic, parsed.partition, path))
    found.sort(key=lambda p: (p.topic, p.partition))
    return found


def read_offset_checkpoint(files: ViewFiles, data_dir: str, name: str) -> Dict[TopicPartition, int]:
    """An offset checkpoint file of ``data_dir`` (``log-start-offset-checkpoint``,
    ``cleaner-offset-checkpoint``, ...) as ``{(topic, partition): offset}``; empty when missing
    or unreadable (as Kafka does at startup: the first segment's base offset is used then)."""
    raw = files.read_small(files.join(data_dir, name))
    if raw is None:
        return {}
    try:
        parsed = OffsetCheckpointFile.parse(raw, files.join(data_dir, name))
    except KafkalogError:
        return {}
    return {TopicPartition(tp[0], tp[1]): off for tp, off in parsed.items()}


def parse_topic_config(raw: bytes, path: str, broker_config: Optional[BrokerConfig] = None) -> LogConfig:
    """The :class:`LogConfig` of a topic config file's bytes (:class:`InvalidConfigError` naming
    the file when it is not a properties file of valid topic configs)."""
    if len(raw) > MAX_TOPIC_CONFIG_BYTES:
        raise LogDirError(f"topic config file of {len(raw)} bytes is larger than "
                          f"{MAX_TOPIC_CONFIG_BYTES}", file=path)
    return LogConfig(parse_properties(raw.decode("utf-8"), file=path), broker_config)


class DataDirView:
    """A read-only data directory: partition listing, log-start-offset checkpoint, topic
    configs, and a :class:`PartitionView` per partition (snapshotted on first use, kept until
    :meth:`close`)."""

    read_only = True

    def __init__(self, data_dir: str, *, files: Optional[ViewFiles] = None,
                 remote: Optional[RemoteSegmentsSource] = None, fail_on_data_loss: bool = True) -> None:
        self.files: ViewFiles = files if files is not None else LocalFiles()
        self.data_dir = data_dir
        #: Kafka's tiered storage: where the partitions' older segments were moved to
        self.remote = remote
        #: offsets deleted from remote storage fail a read (DataLossError), or are skipped
        self.fail_on_data_loss = fail_on_data_loss
        self._dirs: Dict[TopicPartition, str] = {
            TopicPartition(p.topic, p.partition): p.path
            for p in list_partition_dirs(self.files, data_dir)}
        #: topic -> its partitions, ascending (the listing is sorted): a look-up costs the topic's
        #: partitions, not the directory's
        self._by_topic: Dict[str, List[int]] = {}
        for tp in self._dirs:
            self._by_topic.setdefault(tp.topic, []).append(tp.partition)
        self._logs: Dict[TopicPartition, PartitionView] = {}
        self._start_offsets: Optional[Dict[TopicPartition, int]] = None
        self._closed = False

    # --- listing ---------------------------------------------------------------------------------

    def partition_dirs(self) -> List[PartitionDir]:
        return [PartitionDir(tp.topic, tp.partition, path) for tp, path in sorted(self._dirs.items())]

    def topics(self) -> List[str]:
        return sorted(self._by_topic)

    def partitions_of(self, topic: str) -> List[int]:
        return list(self._by_topic.get(topic, ()))

    def partitions(self) -> List[TopicPartition]:
        return sorted(self._dirs)

    def has_topic(self, topic: str) -> bool:
        return topic in self._by_topic

    # --- checkpoints and configs -----------------------------------------------------------------

    def log_start_offsets(self) -> Dict[TopicPartition, int]:
        """``log-start-offset-checkpoint`` (read once)."""
        if self._start_offsets is None:
            self._start_offsets = read_offset_checkpoint(self.files, self.data_dir,
                                                         LOG_START_OFFSET_CHECKPOINT_FILE)
        return self._start_offsets

    def cleaner_offsets(self) -> Dict[TopicPartition, int]:
        """``cleaner-offset-checkpoint``: the first dirty offset of each compacted partition."""
        return read_offset_checkpoint(self.files, self.data_dir, CLEANER_OFFSET_CHECKPOINT_FILE)

    def topic_config(self, topic: str) -> LogConfig:
        """The topic's config overrides on top of Kafka's defaults."""
        path = topic_config_file(self.data_dir, topic)
        raw = self.files.read_small(path)
        return LogConfig({}) if raw is None else parse_topic_config(raw, path)

    # --- partitions ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionView:
        """The snapshot of one partition (taken on first use)."""
        if self._closed:
            raise LogDirError("the data directory is closed", file=self.data_dir)
        tp = TopicPartition(topic, partition)
        log = self._logs.get(tp)
        if log is None:
            path = self._dirs.get(tp)
            if path is None:
                raise InvalidTopicError(f"Unknown topic or partition: {topic}-{partition}",
                                        file=self.data_dir)
            log = self._logs[tp] = open_partition_view(
                path, topic, partition, files=self.files,
                log_start_checkpoint=self.log_start_offsets().get(tp), remote=self.remote,
                fail_on_data_loss=self.fail_on_data_loss)
        return log

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> DataDirView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
