"""Kafka's file and directory names (spec §3.1, §3.2, §3.9; Kafka's ``LogFileUtils``, ``LocalLog``,
``Topic``).

Segment files are named after their base offset formatted as ``%020d``; partition directories are
``<topic>-<partition>`` (plus ``.<uuid>-delete|-future|-stray`` variants). Every name parsed here is
checked so that it cannot escape the data directory (no path separators, no ``.``/``..``).
"""

from __future__ import annotations

import os
import re
import uuid as _uuid
from typing import NamedTuple, Optional

from kafkalog.errors import InvalidTopicError, LogDirError
from kafkalog.record.constants import INT32_MAX, INT64_MAX

__all__ = [
    "LOG_FILE_SUFFIX", "INDEX_FILE_SUFFIX", "TIME_INDEX_FILE_SUFFIX", "TXN_INDEX_FILE_SUFFIX",
    "PRODUCER_SNAPSHOT_FILE_SUFFIX", "DELETED_FILE_SUFFIX", "CLEANED_FILE_SUFFIX", "SWAP_FILE_SUFFIX",
    "TMP_FILE_SUFFIX", "CHECKPOINT_DELETED_SUFFIX", "DELETE_DIR_SUFFIX", "FUTURE_DIR_SUFFIX",
    "STRAY_DIR_SUFFIX", "SEGMENT_SUFFIXES", "INDEX_SUFFIXES", "MAX_TOPIC_NAME_LENGTH",
    "MAX_DIR_NAME_LENGTH", "LOCK_FILE", "CLEAN_SHUTDOWN_FILE", "META_PROPERTIES_FILE",
    "PARTITION_METADATA_FILE", "RECOVERY_POINT_CHECKPOINT_FILE", "LOG_START_OFFSET_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE", "CLEANER_OFFSET_CHECKPOINT_FILE",
    "LEADER_EPOCH_CHECKPOINT_FILE", "TOPIC_CONFIG_PREFIX", "TOPIC_CONFIG_SUFFIX", "IGNORED_DIRS",
    "STAGING_FILE_PREFIX",
    "topic_config_file_name", "parse_topic_config_file_name", "topic_config_file",
    "filename_prefix_from_offset", "offset_from_file_name", "log_file", "offset_index_file",
    "time_index_file", "transaction_index_file", "producer_snapshot_file", "is_log_file",
    "is_index_file", "is_snapshot_file", "strip_suffix", "validate_topic", "has_collision_chars",
    "TopicPartition", "PartitionDirName", "partition_dir_name", "log_delete_dir_name",
    "log_stray_dir_name", "log_future_dir_name", "parse_partition_dir_name", "parse_topic_partition",
]

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
TMP_FILE_SUFFIX = ".tmp"
CHECKPOINT_DELETED_SUFFIX = ".checkpoint.deleted"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

#: Segment-related suffixes (what a ``%020d`` prefix may carry).
SEGMENT_SUFFIXES = (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
                    TXN_INDEX_FILE_SUFFIX)
INDEX_SUFFIXES = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)

MAX_TOPIC_NAME_LENGTH = 249
MAX_DIR_NAME_LENGTH = 255
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_FUTURE_DELETE_STRAY = re.compile(r"^(\S+)-(\S+)\.(\S+)-(delete|future|stray)$")

# --- files of a data directory (spec §3.1, §3.3, §3.7) ----------------------------------------------
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES_FILE = "meta.properties"
PARTITION_METADATA_FILE = "partition.metadata"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
#: kafkalog's topic config file ``kafkalog-topic-<topic>.properties`` (Kafka keeps topic configs in
#: its metadata log; a file, not a subdirectory, so a Kafka broker still accepts the directory)
TOPIC_CONFIG_PREFIX = "kafkalog-topic-"
TOPIC_CONFIG_SUFFIX = ".properties"
#: kafkalog's Spark sink stages a job's batches in regular files of the data directory named so
#: (kafkalog.spark.commit), until the job commits or aborts
STAGING_FILE_PREFIX = ".kafkalog-staging."
#: directories Kafka's LogManager does not load as partitions
IGNORED_DIRS = ("remote-log-index-cache", "__cluster_metadata-0")


def topic_config_file_name(topic: str) -> str:
    """``kafkalog-topic-<topic>.properties`` after validating the topic."""
    return f"{TOPIC_CONFIG_PREFIX}{validate_topic(topic)}{TOPIC_CONFIG_SUFFIX}"


def parse_topic_config_file_name(name: str) -> Optional[str]:
    """The topic of a ``kafkalog-topic-<topic>.properties`` file name; None for any other name
    (the topic is not validated: callers report an invalid one with the file)."""
    if name.startswith(TOPIC_CONFIG_PREFIX) and name.endswith(TOPIC_CONFIG_SUFFIX) \
            and len(name) > len(TOPIC_CONFIG_PREFIX) + len(TOPIC_CONFIG_SUFFIX):
        return name[len(TOPIC_CONFIG_PREFIX):-len(TOPIC_CONFIG_SUFFIX)]
    return None


def filename_prefix_from_offset(offset: int) -> str:
    """``%020d`` of ``offset`` (Kafka's ``LogFileUtils.filenamePrefixFromOffset``)."""
    if offset < 0:
        raise ValueError(f"negative offset {offset} has no file name")
    return f"{offset:020d}"


def offset_from_file_name(name: str) -> int:
    """The offset before the first ``.`` of a file name: ``00000000000000000123.log.deleted`` -> 123.

    Raises :class:`LogDirError` naming the file when the prefix is not a non-negative long.
    """
    base = os.fspath(name)
    if "/" in base:             # (a listing's names have none: no split of a path for them)
        base = os.path.basename(base)
    prefix = base.partition(".")[0]
    if not prefix.isdigit() or not prefix.isascii():
        raise LogDirError(f"File name {base!r} does not start with an offset", file=name)
    value = int(prefix)
    if value > INT64_MAX:
        raise LogDirError(f"Offset in file name {base!r} overflows a long", file=name)
    return value


def _file(dir_: os.PathLike[str] | str, offset: int, suffix: str, extra: str = "") -> str:
    return os.path.join(os.fspath(dir_), filename_prefix_from_offset(offset) + suffix + extra)


def log_file(dir_: os.PathLike[str] | str, offset: int, extra: str = "") -> str:
    """``<dir>/<%020d>.log`` (+ ``extra`` suffix such as ``.deleted``)."""
    return _file(dir_, offset, LOG_FILE_SUFFIX, extra)


def offset_index_file(dir_: os.PathLike[str] | str, offset: int, extra: str = "") -> str:
    """``<dir>/<%020d>.index``."""
    return _file(dir_, offset, INDEX_FILE_SUFFIX, extra)


def time_index_file(dir_: os.PathLike[str] | str, offset: int, extra: str = "") -> str:
    """``<dir>/<%020d>.timeindex``."""
    return _file(dir_, offset, TIME_INDEX_FILE_SUFFIX, extra)


def transaction_index_file(dir_: os.PathLike[str] | str, offset: int, extra: str = "") -> str:
    """``<dir>/<%020d>.txnindex``."""
    return _file(dir_, offset, TXN_INDEX_FILE_SUFFIX, extra)


def producer_snapshot_file(dir_: os.PathLike[str] | str, offset: int, extra: str = "") -> str:
    """``<dir>/<%020d>.snapshot``."""
    return _file(dir_, offset, PRODUCER_SNAPSHOT_FILE_SUFFIX, extra)


def topic_config_file(data_dir: os.PathLike[str] | str, topic: str) -> str:
    """``<data_dir>/kafkalog-topic-<topic>.properties``: the config overrides of ``topic``."""
    return os.path.join(os.fspath(data_dir), topic_config_file_name(topic))


def is_log_file(name: str) -> bool:
    return os.fspath(name).endswith(LOG_FILE_SUFFIX)


def is_index_file(name: str) -> bool:
    return os.fspath(name).endswith(INDEX_SUFFIXES)


def is_snapshot_file(name: str) -> bool:
    return os.fspath(name).endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX)


def strip_suffix(name: str, suffix: str) -> str:
    """``name`` without a trailing ``suffix`` (unchanged if it does not end with it)."""
    return name[: -len(suffix)] if suffix and name.endswith(suffix) else name


# --- topics ---------------------------------------------------------------------------------------

def validate_topic(topic: str) -> str:
    """Kafka's ``Topic.validate``: non-empty, not ``.``/``..``, at most 249 chars of ``[a-zA-Z0-9._-]``.

    Returns the topic; raises :class:`InvalidTopicError` with Kafka 4's message.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("Topic name is invalid: the empty string is not allowed")
    if topic in (".", ".."):
        raise InvalidTopicError(f"Topic name is invalid: '{topic}' is not allowed")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"Topic name is invalid: the length of '{topic}' is longer than the max "
                                f"allowed length {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(f"Topic name is invalid: '{topic}' contains one or more characters other "
                                f"than ASCII alphanumerics, '.', '_' and '-'")
    return topic


def has_collision_chars(topic: str) -> bool:
    """True when the topic contains ``.`` or ``_`` (which collide in metric names)."""
    return "." in topic or "_" in topic


class TopicPartition(NamedTuple):
    """(topic, partition)."""
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class PartitionDirName(NamedTuple):
    """A parsed partition directory name. ``kind`` is ``""`` or ``delete``/``future``/``stray``."""
    topic: str
    partition: int
    kind: str
    unique_id: Optional[str]


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>`` after validating the topic."""
    validate_topic(topic)
    if not isinstance(partition, int) or partition < 0 or partition > INT32_MAX:
        raise LogDirError(f"Invalid partition {partition!r}")
    return f"{topic}-{partition}"


def _suffixed_dir_name(topic: str, partition: int, suffix: str, unique_id: Optional[str],
                       truncate: bool) -> str:
    validate_topic(topic)
    uid = unique_id if unique_id is not None else _uuid.uuid4().hex
    if not re.fullmatch(r"[A-Za-z0-9_-]+", uid):
        raise LogDirError(f"Invalid unique id {uid!r}")
    tail = f"-{partition}.{uid}{suffix}"
    if truncate:
        topic = topic[: max(0, MAX_DIR_NAME_LENGTH - len(tail))]
    return topic + tail


def log_delete_dir_name(topic: str, partition: int, unique_id: Optional[str] = None) -> str:
    """``<topic>-<partition>.<uuid hex>-delete``, topic truncated so the name is <= 255 chars."""
    return _suffixed_dir_name(topic, partition, DELETE_DIR_SUFFIX, unique_id, True)


def log_stray_dir_name(topic: str, partition: int, unique_id: Optional[str] = None) -> str:
    """``<topic>-<partition>.<uuid hex>-stray``, topic truncated so the name is <= 255 chars."""
    return _suffixed_dir_name(topic, partition, STRAY_DIR_SUFFIX, unique_id, True)


def log_future_dir_name(topic: str, partition: int, unique_id: Optional[str] = None) -> str:
    """``<topic>-<partition>.<uuid hex>-future`` (not truncated)."""
    return _suffixed_dir_name(topic, partition, FUTURE_DIR_SUFFIX, unique_id, False)


def parse_partition_dir_name(name: os.PathLike[str] | str) -> PartitionDirName:
    """Kafka's ``LocalLog.parseTopicPartitionName`` on the last path component of ``name``.

    Raises :class:`LogDirError` ("is not in the form of topic-partition or
    topic-partition.uniqueId-delete") for anything else, including names with path separators.
    """
    full = os.fspath(name)
    base = os.path.basename(full.rstrip("/")) if full not in ("", "/") else full

    def bad() -> LogDirError:
        return LogDirError(f"Found directory {full}, '{base}' is not in the form of topic-partition or "
                           f"topic-partition.uniqueId-delete (if marked for deletion).\nKafka's log "
                           f"directories (and children) should only contain Kafka topic data.", file=full)

    if not base or "-" not in base or "/" in base or "\0" in base:
        raise bad()
    kind = ""
    uid = None
    dir_name = base
    for k in ("delete", "future", "stray"):
        if base.endswith("-" + k):
            m = _FUTURE_DELETE_STRAY.match(base)
            if not m:
                raise bad()
            kind = k
            dot = base.rfind(".")
            dir_name = base[:dot]
            uid = base[dot + 1: -len(k) - 1]
            break
    idx = dir_name.rfind("-")
    topic, part = dir_name[:idx], dir_name[idx + 1:]
    if not topic or not part or not part.isascii() or not part.isdigit():
        raise bad()
    partition = int(part)
    if partition > INT32_MAX:
        raise bad()
    try:
        validate_topic(topic)
    except InvalidTopicError:
        # Kafka itself does not validate here, but a name that could not be a topic cannot be
        # trusted to stay inside the data dir; truncated delete/stray names are still legal chars.
        raise bad() from None
    return PartitionDirName(topic, partition, kind, uid)


def parse_topic_partition(name: os.PathLike[str] | str) -> TopicPartition:
    """(topic, partition) of a partition directory name (any kind)."""
    p = parse_partition_dir_name(name)
    return TopicPartition(p.topic, p.partition)
