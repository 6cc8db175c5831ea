"""``LogManager``: one Kafka data directory (one ``log.dirs`` entry) of many partitions (Kafka's
``LogManager``; spec §3.1, §3.3, §3.7, §3.8, §4.8, §4.10).

Opening: lock ``.lock`` (a POSIX record lock, ``lockf``, the one Kafka's ``FileChannel.tryLock``
takes, so another kafkalog process and a Kafka broker are kept out; another ``LogManager`` of this
process by a registry, :func:`locked_in_this_process`, since record locks do not exclude their own
process, and closing any descriptor of ``.lock`` in it would drop the lock), create
``meta.properties`` when missing, delete ``.kafka_cleanshutdown`` (present -> had clean shutdown: no
recovery scan), read ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``
(unreadable -> empty, with a warning, as Kafka does), finish the deletion of ``-delete``
directories, skip ``-future`` and ``-stray`` ones, and open every ``<topic>-<partition>`` directory
with the loader.

Topic configuration: Kafka keeps topic configs in its metadata log (KRaft) or ZooKeeper, not in the
data directory. kafkalog persists each topic's overrides in the data directory, atomically, as a
Java properties file ``kafkalog-topic-<topic>.properties`` at the top level. (A file, not a
subdirectory: a Kafka broker treats every subdirectory of a log dir as a partition directory and
would refuse the whole dir.) A Kafka data directory without these files opens with the broker
defaults.

Background work (a :class:`~kafkalog.log.scheduler.Scheduler` thread): ``flush.ms`` flushes,
retention every ``log.retention.check.interval.ms``, recovery-point checkpoints every
``log.flush.offset.checkpoint.interval.ms`` (periodically, not only at shutdown: after a crash only
the data written since the last checkpoint is scanned), log-start-offset checkpoints every
``log.flush.start.offset.checkpoint.interval.ms``, the ``replication-offset-checkpoint`` (high
watermark = log end offset: an embedded single replica) every
``replica.high.watermark.checkpoint.interval.ms``, producer-id expiry every
``producer.id.expiration.check.interval.ms`` (producers idle for ``producer.id.expiration.ms``
are forgotten, as Kafka's ``PeriodicProducerExpirationCheck`` does), and delayed file deletion. When
``log.cleaner.enable`` is true and a ``cleaner_factory`` was handed in (the layer above passes
:class:`kafkalog.cleaner.LogCleaner`; the log layer never imports the cleaner), the cleaner is
started too.

Closing (:meth:`LogManager.close`): stop the scheduler and the cleaner, flush and close every log,
write the checkpoints, write ``.kafka_cleanshutdown`` (``{"version":0,"brokerEpoch":-1}``), release
the lock.
"""

from __future__ import annotations

import fcntl
import functools
import heapq
import itertools
import logging
import os
import shutil
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from kafkalog.errors import (
    CorruptCheckpointError,
    InvalidConfigError,
    InvalidTopicError,
    KafkalogError,
    LogDirError,
    TopicExistsError,
)
from kafkalog.log import fsutil, kernel
from kafkalog.log.checkpoint import (
    PARTITION_METADATA_FILE,
    CleanShutdownFile,
    EpochEntry,
    MetaProperties,
    OffsetCheckpointFile,
    OffsetCheckpointText,
    PartitionMetadataFile,
    uuid_to_kafka_string,
)
from kafkalog.log.cluster_metadata import read_topic_configs
from kafkalog.log.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    LogConfig,
    format_properties,
    format_value,
    parse_properties,
)
from kafkalog.log.data_dir import DATA_DIR, check_data_dir
from kafkalog.log.loader import RecoveryReport
from kafkalog.log.log import Log
from kafkalog.log.naming import (
    IGNORED_DIRS,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TopicPartition,
    log_delete_dir_name,
    parse_partition_dir_name,
    parse_topic_config_file_name,
    partition_dir_name,
    topic_config_file,
    validate_topic,
)
from kafkalog.log.producer_state import ProducerStateManager
from kafkalog.log.protocols import Cleaner
from kafkalog.log.read_ahead import ReadAhead, threads_for
from kafkalog.log.retention import RetentionResult, delete_old_segments, time_breach_due
from kafkalog.log.scheduler import Scheduler
from kafkalog.log.topic_creation import PendingTopic, TopicCreator, complete, write_record
from kafkalog.record.constants import INT64_MAX

logger = logging.getLogger("kafkalog.manager")


ProgressCallback = Callable[[int, int, str], None]

#: logs one step of the background writes and deletions of the load's producer snapshots visits
#: (the scheduler's other tasks run between two steps)
SNAPSHOT_FILE_LOGS_PER_STEP = 1000

# Directories locked by a LogManager of this process (POSIX locks do not conflict within a process,
# and closing any fd of the file would drop them, so the process keeps its own registry).
_LOCKED: Dict[str, LogManager] = {}
_LOCKED_GUARD = threading.Lock()


def locked_in_this_process(data_dir: str) -> bool:
    """Whether a LogManager of this process holds ``data_dir``'s ``.lock``: a record lock does not
    exclude its own process, so whoever would probe ``.lock`` here asks this first."""
    with _LOCKED_GUARD:
        return os.path.realpath(data_dir) in _LOCKED


# --- offset checkpoint files (spec §3.3; kafkalog.log.checkpoint) ------------------------------------

def read_offset_checkpoint(path: str) -> Dict[TopicPartition, int]:
    """Read an offset checkpoint file (missing or empty -> empty map); malformed content raises
    :class:`CorruptCheckpointError` naming the file and position."""
    return OffsetCheckpointFile(path, create=False).read()


def write_offset_checkpoint(path: str, entries: Mapping[TopicPartition, int]) -> None:
    """Write an offset checkpoint via ``.tmp`` + fsync + atomic rename + directory fsync, entries
    sorted by topic and partition (Kafka's order is unspecified), as the log manager writes its
    three offset files (:class:`~kafkalog.log.checkpoint.OffsetCheckpointText`)."""
    text = OffsetCheckpointText()
    for (topic, partition), offset in entries.items():
        text.set(topic, partition, offset)
    OffsetCheckpointFile(path, create=False).write_text(text)


def _b64_uuid() -> str:
    """A random UUID in Kafka's string form (URL-safe base64, no padding, never starting with
    ``-``, like ``Uuid.randomUuid``)."""
    while True:
        s = uuid_to_kafka_string(uuid.uuid4())
        if not s.startswith("-"):
            return s


# --- data classes ----------------------------------------------------------------------------------

@dataclass
class PartitionInfo:
    """A partition's offsets and sizes (``describe``)."""

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int
    size_in_bytes: int
    num_segments: int
    dir: str

    def to_json(self) -> Dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition,
                "logStartOffset": self.log_start_offset, "logEndOffset": self.log_end_offset,
                "highWatermark": self.high_watermark, "recoveryPoint": self.recovery_point,
                "sizeInBytes": self.size_in_bytes, "numSegments": self.num_segments, "dir": self.dir}


@dataclass
class LoadResult:
    """What opening the data directory found."""

    had_clean_shutdown: bool
    loaded: List[str] = field(default_factory=list)
    skipped_dirs: List[Dict[str, str]] = field(default_factory=list)
    deleted_dirs: List[str] = field(default_factory=list)
    checkpoint_errors: List[Dict[str, Any]] = field(default_factory=list)
    recovery_reports: Dict[str, RecoveryReport] = field(default_factory=dict)
    #: topics committed before a crash whose partitions were made at load (:mod:`.topic_creation`)
    completed_topics: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"hadCleanShutdown": self.had_clean_shutdown, "loaded": self.loaded,
                "skippedDirs": self.skipped_dirs, "deletedDirs": self.deleted_dirs,
                "checkpointErrors": self.checkpoint_errors, "completedTopics": self.completed_topics,
                "recoveryReports": {k: v.to_json() for k, v in self.recovery_reports.items()}}


# --- the manager -------------------------------------------------------------------------------------

def _known_config(values: Dict[str, str], broker_config: BrokerConfig) -> LogConfig:
    """A :class:`LogConfig` of ``values`` without the keys kafkalog does not take (Kafka's metadata
    may name configs of features kafkalog has not)."""
    try:
        return LogConfig(dict(values), broker_config)
    except InvalidConfigError:
        kept = {}
        for k, v in values.items():
            try:
                LogConfig({k: v}, broker_config)
            except InvalidConfigError:
                logger.warning("topic config %s=%s of Kafka's metadata log ignored", k, v)
                continue
            kept[k] = v
        return LogConfig(kept, broker_config)


#: builds the cleaner of a :class:`LogManager` (``log.cleaner.enable=true``)
CleanerFactory = Callable[["LogManager"], Cleaner]


class LogManager:
    """A Kafka data directory opened for reading and writing.

    Args:
        data_dir: the directory: a data directory, or a new or empty path (made one); anything
            else is refused (:mod:`kafkalog.log.data_dir`).
        broker_config: broker settings (``log.retention.hours``, ``log.cleaner.enable`` ...) as a
            mapping or a :class:`BrokerConfig`; unknown keys are ignored (a ``server.properties``
            may be passed whole).
        background: start the scheduler (and the cleaner) thread; False for offline tools.
        cleaner_factory: builds the cleaner started when ``log.cleaner.enable`` is true and
            ``background`` (:class:`kafkalog.cleaner.LogCleaner`, handed in by the layer above);
            None: no cleaner (compacted topics are then neither cleaned nor retention-deleted).
        progress: called as ``progress(done, total, partition_dir_name)`` while loading.
        clock: milliseconds since the epoch (tests).
        recovery: ``auto`` (Kafka: recover from the recovery points unless the last shutdown was
            clean), ``unclean`` (recover from the recovery points even after a clean shutdown) or
            ``full`` (recover every segment of every partition: ``kafkalog recover``).
    """

    def __init__(self, data_dir: os.PathLike[str] | str, broker_config: Any = None, *,
                 background: bool = True, progress: Optional[ProgressCallback] = None,
                 clock: Optional[Callable[[], int]] = None, recovery: str = "auto",
                 cleaner_factory: Optional[CleanerFactory] = None) -> None:
        if recovery not in ("auto", "unclean", "full"):
            raise InvalidConfigError(f"recovery must be auto, unclean or full, not {recovery!r}")
        self.recovery_mode = recovery
        fsutil.refuse_remote_write(data_dir, "opening a data directory writable")
        self.data_dir = os.path.abspath(fsutil.local_path(data_dir))
        if isinstance(broker_config, BrokerConfig):
            self.broker_config = broker_config
        else:
            self.broker_config = BrokerConfig(dict(broker_config or {}), strict=False)
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        self._logs: Dict[TopicPartition, Log] = {}
        #: the same logs by topic, then partition: lookups by topic cost the topic's partitions only
        self._by_topic: Dict[str, Dict[int, Log]] = {}
        #: topic IDs known so far (both ways) and the topics whose ID has not been read yet
        self._topic_ids: Dict[str, uuid.UUID] = {}
        self._topics_by_id: Dict[uuid.UUID, str] = {}
        self._unresolved_ids: set[str] = set()
        #: topics whose partitions are being made (their names are taken)
        self._creating: set[str] = set()
        #: committed topics whose partitions are made in the background (:meth:`commit_topics`)
        self._creator = TopicCreator(self)
        #: each topic's :meth:`metadata_stamp`, taken from one sequence (never reused)
        self._stamps: Dict[str, int] = {}
        self._stamp_seq = itertools.count(1)
        #: the last stamp given or taken away (:meth:`topics_stamp`)
        self._last_stamp = 0
        #: (due ms, seq, partition, log) of every log with a finite ``flush.ms``: the flusher pops
        #: what is due instead of visiting every log each second
        self._flush_due: List[Tuple[int, int, TopicPartition, Log]] = []
        self._flush_seq = 0
        #: the entries of each offset checkpoint file (its text kept formatted a topic at a time),
        #: and the partitions whose offsets moved since it was written (``Log.offsets_changed``):
        #: a file is rewritten when one changed
        self._checkpointed: Dict[str, OffsetCheckpointText] = {}
        self._offsets_moved: Dict[str, set[TopicPartition]] = {
            RECOVERY_POINT_CHECKPOINT_FILE: set(), LOG_START_OFFSET_CHECKPOINT_FILE: set(),
            REPLICATION_OFFSET_CHECKPOINT_FILE: set()}
        self._moved_lock = threading.Lock()
        #: partitions retention must look at: those whose offsets, segments or configuration
        #: changed since it last looked (an idle, empty partition costs the retention task nothing)
        self._retention_due: set[TopicPartition] = set()
        #: those it looked at and found nothing to delete in, by when their first segment breaches
        #: ``retention.ms`` (``retention.time_breach_due``): a heap of (due ms, partition), each
        #: partition's current entry in ``_retention_later_at`` (an older one is skipped)
        self._retention_later: List[Tuple[int, TopicPartition]] = []
        self._retention_later_at: Dict[TopicPartition, int] = {}
        self._flush_seq_of: Dict[TopicPartition, int] = {}
        #: the loaded logs whose producer snapshots are still to be written (a recovery's) or
        #: deleted (strays): :meth:`_finish_snapshot_files`
        self._snapshot_file_logs: Deque[Log] = deque()
        #: operations of the periodic tasks (tests count them: none may grow with idle partitions)
        self.task_visits = 0
        self._topic_configs: Dict[str, LogConfig] = {}
        self._closed = False
        self._lock_fd = -1
        self.scheduler = Scheduler("kafkalog-scheduler")
        self.cleaner_factory = cleaner_factory
        self.cleaner: Optional[Cleaner] = None
        #: the last retention pass's results that deleted a segment or found one stamped in the
        #: future (keeping every visited partition's result kept 55,568 of them, ~170,000 objects,
        #: for the collector to walk in ``kafkalog serve`` at 100,000 partitions)
        self.last_retention: Dict[str, RetentionResult] = {}
        #: this open makes a new (or empty) directory a data directory; anything that is not
        #: one already is refused, naming what it holds (kafkalog.log.data_dir)
        self.created_data_dir = check_data_dir(self.data_dir, may_create=True) != DATA_DIR
        try:
            fsutil.ensure_dir(self.data_dir)
        except KafkalogError:
            raise
        except OSError as e:
            raise LogDirError(f"cannot create data directory: {e.strerror}", file=self.data_dir) from e
        self._acquire_lock()
        try:
            self._ensure_meta_properties()
            clean_file = CleanShutdownFile(self.data_dir)
            had_clean = clean_file.exists()
            if had_clean:
                clean_file.delete()
                fsutil.fsync_dir(self.data_dir)
            self.had_clean_shutdown = had_clean and recovery == "auto"
            self.load_result = LoadResult(had_clean)
            self._load_topic_configs()
            self._load_logs(progress)
            # topics a crash interrupted after they were committed (answered) are made whole
            self.load_result.completed_topics = complete(self)
        except BaseException:
            self._close_logs_quietly()
            self._release_lock()
            raise
        self._background = background
        if background:
            self._start_background()

    # --- lock and metadata files --------------------------------------------------------------------

    def _acquire_lock(self) -> None:
        key = os.path.realpath(self.data_dir)
        path = os.path.join(self.data_dir, LOCK_FILE)
        with _LOCKED_GUARD:
            if key in _LOCKED:
                raise LogDirError(f"Failed to acquire lock on file .lock in {self.data_dir}. A Kafka "
                                  f"instance in another process or thread is using this directory.",
                                  file=path)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise fsutil.io_error(e, path, "open") from e
            try:
                # A record lock only, as Kafka: it is dropped when its process's descriptor closes,
                # at exit too, before the process can be reaped. An flock beside it outlived a
                # SIGKILLed owner now and then (about one kill in 100 here, its release deferred past
                # waitpid), refusing a restart straight after a crash.
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise LogDirError(f"Failed to acquire lock on file .lock in {self.data_dir}. A Kafka "
                                  f"instance in another process or thread is using this directory.",
                                  file=path) from None
            _LOCKED[key] = self
            self._lock_fd = fd
            self._lock_key = key

    def _release_lock(self) -> None:
        with _LOCKED_GUARD:
            if self._lock_fd >= 0:
                try:
                    fcntl.lockf(self._lock_fd, fcntl.LOCK_UN)
                except OSError:
                    pass
                os.close(self._lock_fd)
                self._lock_fd = -1
                _LOCKED.pop(self._lock_key, None)

    def _ensure_meta_properties(self) -> None:
        path = os.path.join(self.data_dir, META_PROPERTIES_FILE)
        if os.path.exists(path):
            self.meta_properties = MetaProperties.read(path)
            return
        b = self.broker_config
        node_id = b.node_id if b.node_id >= 0 else max(b.broker_id, 0)
        self.meta_properties = MetaProperties(1, _b64_uuid(), node_id, _b64_uuid())
        self.meta_properties.write(path)

    # --- topic configs ------------------------------------------------------------------------------

    def _topic_config_path(self, topic: str) -> str:
        return topic_config_file(self.data_dir, topic)

    def _load_topic_configs(self) -> None:
        for name in os.listdir(self.data_dir):
            topic = parse_topic_config_file_name(name)
            if topic is None:
                continue
            path = os.path.join(self.data_dir, name)
            try:
                validate_topic(topic)
                with open(path, encoding="utf-8") as f:
                    text = f.read(1 << 20)
                self._topic_configs[topic] = LogConfig(parse_properties(text, file=path),
                                                       self.broker_config)
            except (KafkalogError, OSError, UnicodeDecodeError) as e:
                msg = e.message if isinstance(e, KafkalogError) else str(e)
                raise InvalidConfigError(f"cannot load topic config: {msg}", file=path) from None
        # a Kafka 4 data directory: the topic configs Kafka keeps in its metadata log (a compacted
        # topic read as a deleting one would be cut at its first offset gap, then expired)
        for topic, kafka_cfg in read_topic_configs(self.data_dir).items():
            if topic not in self._topic_configs:
                self._topic_configs[topic] = _known_config(kafka_cfg, self.broker_config)

    def topic_config(self, topic: str) -> LogConfig:
        """The effective config of ``topic`` (broker defaults when it has no overrides)."""
        cfg = self._topic_configs.get(topic)
        return cfg if cfg is not None else LogConfig({}, self.broker_config)

    def _persist_topic_config(self, topic: str, cfg: LogConfig) -> None:
        text = format_properties(_properties_of(cfg),
                                 comments=[f" kafkalog topic config of {topic} (Kafka keeps topic "
                                           f"configs in its metadata log)"])
        fsutil.atomic_write(self._topic_config_path(topic), text.encode("utf-8"))

    # --- loading ------------------------------------------------------------------------------------

    def _read_checkpoint_quietly(self, name: str) -> Dict[TopicPartition, int]:
        path = os.path.join(self.data_dir, name)
        try:
            return read_offset_checkpoint(path)
        except KafkalogError as e:
            logger.warning("Error reading %s, treating it as empty: %s", path, e)
            self.load_result.checkpoint_errors.append(e.to_json())
            return {}

    def _load_logs(self, progress: Optional[ProgressCallback]) -> None:
        recovery_points = self._read_checkpoint_quietly(RECOVERY_POINT_CHECKPOINT_FILE)
        if self.recovery_mode == "full":
            recovery_points = {}
        start_offsets = self._read_checkpoint_quietly(LOG_START_OFFSET_CHECKPOINT_FILE)
        to_load: List[Tuple[str, TopicPartition]] = []
        with os.scandir(self.data_dir) as listing:     # (directories known without a stat each)
            dir_names = sorted(e.name for e in listing if e.is_dir() and e.name not in IGNORED_DIRS)
        d = self.data_dir
        sep = "" if d.endswith("/") else "/"
        for name in dir_names:
            path = f"{d}{sep}{name}"
            try:
                parsed = parse_partition_dir_name(name)
            except KafkalogError as e:
                logger.warning("Skipping %s: %s", path, e.message)
                self.load_result.skipped_dirs.append({"dir": path, "reason": e.message})
                continue
            if parsed.kind == "delete":
                shutil.rmtree(path, ignore_errors=True)
                self.load_result.deleted_dirs.append(path)
                continue
            if parsed.kind in ("future", "stray"):
                self.load_result.skipped_dirs.append({"dir": path, "reason": f"{parsed.kind} replica"})
                continue
            to_load.append((path, TopicPartition(parsed.topic, parsed.partition)))
        if self.load_result.deleted_dirs:
            fsutil.fsync_dir(self.data_dir)
        total = len(to_load)
        configs: Dict[str, LogConfig] = {}     # one per topic, not per partition: a topic's share it
        for _path, tp in to_load:
            if tp.topic not in configs:
                configs[tp.topic] = self.topic_config(tp.topic)

        def open_log(item: Tuple[str, TopicPartition]) -> Log:
            path, tp = item
            return Log.open(path, configs[tp.topic],
                            log_start_offset=start_offsets.get(tp, 0),
                            recovery_point=recovery_points.get(tp, 0),
                            had_clean_shutdown=self.had_clean_shutdown, scheduler=self.scheduler,
                            clock=self.clock,
                            producer_state_manager=self._producer_state(path, list_snapshots=False),
                            snapshot_files_later=True, dir_exists=True)

        # the loads on this thread, the others reading the next directories ahead of it and handing
        # over what they read (kafkalog.log.read_ahead: two threads loading at once only take
        # turns on the GIL)
        threads = int(self.broker_config.num_recovery_threads_per_data_dir)
        unfinished = self._snapshot_file_logs
        loaded, reports = self.load_result.loaded, self.load_result.recovery_reports
        with ReadAhead([path for path, _tp in to_load], threads_for(threads)) as ahead:
            for i, item in enumerate(to_load):
                ahead.reached(i)
                path, tp = item
                pre = ahead.take(i)
                if pre is None:
                    log = open_log(item)
                else:                       # its listing and small files read: none read again
                    with fsutil.preread(path, *pre):
                        log = open_log(item)
                self._add_log(tp, log)
                psm = log.producer_state_manager
                if psm is not None and (psm.stray_files or psm.unwritten):
                    unfinished.append(log)
                name = path[len(d) + len(sep):]
                loaded.append(name)
                if log.recovery_report is not None:
                    reports[name] = log.recovery_report
                if progress is not None:
                    progress(i + 1, total, name)
        if unfinished:
            self.scheduler.schedule_once("finish-producer-snapshot-files", self._finish_snapshot_files)

    def _finish_snapshot_files(self) -> None:
        """Write the producer snapshots the load took and delete the stray ones it found,
        :data:`SNAPSHOT_FILE_LOGS_PER_STEP` logs a step, the next step scheduled after the
        scheduler's other due tasks. After every clean shutdown the load finds a stray at each
        partition that took data (the snapshot of the shutdown before), and Kafka's ``LogLoader``
        deletes it during the load: at 100,000 partitions, one unlink each, a quarter of the
        restart. After a crash each recovered partition's snapshot at its log end is a new file,
        which Kafka's load writes: one create each, 36-700 us on this machine's disk, up to a
        third of the restart. A log's close does what is left.
        """
        pending = self._snapshot_file_logs
        for _ in range(min(SNAPSHOT_FILE_LOGS_PER_STEP, len(pending))):
            self._finish_snapshot_files_of(pending.popleft())
        if pending and self.scheduler.is_started:
            self.scheduler.schedule_once("finish-producer-snapshot-files", self._finish_snapshot_files)

    @staticmethod
    def _finish_snapshot_files_of(log: Log) -> None:
        try:
            log.finish_snapshot_files()
        except KafkalogError as e:        # (the next load finds them again)
            logger.warning("Could not write or delete producer snapshots of %s: %s", log.dir, e.message)

    # --- background ---------------------------------------------------------------------------------

    def start_background(self) -> None:
        """Start the background work of a manager opened with ``background=False`` (a broker
        starts it once it listens: the cleaner's import and threads do not delay its first
        answer)."""
        if not self._background:
            self._background = True
            self._start_background()

    def _start_background(self) -> None:
        b = self.broker_config
        initial = int(b.log_initial_task_delay_ms)
        s = self.scheduler
        s.schedule("kafka-log-retention", self.cleanup_logs, initial, int(b.log_retention_check_interval_ms))
        flush_every = b.log_flush_scheduler_interval_ms
        s.schedule("kafka-log-flusher", self.flush_dirty_logs, initial,
                   1000 if flush_every >= INT64_MAX else flush_every)
        s.schedule("kafka-recovery-point-checkpoint", self.checkpoint_recovery_offsets, initial,
                   int(b.log_flush_offset_checkpoint_interval_ms))
        s.schedule("kafka-log-start-offset-checkpoint", self.checkpoint_log_start_offsets, initial,
                   int(b.log_flush_start_offset_checkpoint_interval_ms))
        s.schedule("highwatermark-checkpoint", self.checkpoint_high_watermarks, initial,
                   int(b.replica_high_watermark_checkpoint_interval_ms))
        expiry_check = int(b.producer_id_expiration_check_interval_ms)
        s.schedule("PeriodicProducerExpirationCheck", self.remove_expired_producers, expiry_check,
                   expiry_check)
        s.startup()
        if b.log_cleaner_enable:
            self._start_cleaner()

    def _start_cleaner(self) -> None:
        """Build and start the cleaner handed in as ``cleaner_factory`` (none: nothing to start)."""
        if self.cleaner_factory is None:
            return
        try:
            cleaner = self.cleaner_factory(self)
            cleaner.startup()
            self.cleaner = cleaner
        except Exception:
            logger.error("Could not start the log cleaner", exc_info=True)
            self.cleaner = None

    # --- topics -------------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1,
                     config: Optional[Mapping[str, Any]] = None, *, exist_ok: bool = False,
                     prepare: Optional[Callable[[Log], None]] = None) -> List[Log]:
        """Create ``topic`` with ``partitions`` partitions and topic-level ``config`` overrides
        (Kafka keys, validated). The config is persisted before the partition directories. The
        topic is seen by the look-ups once every partition is ready (``prepare(log)`` run on each
        first: a broker leads it), all at once."""
        validate_topic(topic)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidConfigError(f"Number of partitions must be larger than 0: {partitions!r}")
        if exist_ok:
            self.wait_created(topic)        # (a committed topic: its logs once made)
        with self._lock:
            self._check_open()
            existing = self.partitions_of(topic)
            if existing or topic in self._creating:
                if exist_ok and existing and topic not in self._creator.pending:
                    return [self._logs[TopicPartition(topic, p)] for p in existing]
                raise TopicExistsError(f"Topic '{topic}' already exists.", file=self.data_dir)
            cfg = LogConfig(dict(config or {}), self.broker_config)
            if config:
                self._persist_topic_config(topic, cfg)
                self._topic_configs[topic] = cfg
            self._creating.add(topic)
        # the partitions are made without the manager's lock (thousands take seconds: other
        # topics' look-ups, creations and checkpoints go on); the name is taken meanwhile
        # and their fsyncs overlap, all done before the topic is seen (fsutil.deferred_syncs)
        tid = uuid.uuid4()
        logs: List[Log] = []
        try:
            with fsutil.deferred_syncs():
                for p in range(partitions):
                    logs.append(self._open_new_log(TopicPartition(topic, p), cfg, tid, prepare))
                fsutil.fsync_dir(self.data_dir)
        finally:
            with self._lock:
                self._creating.discard(topic)
                for p, log in enumerate(logs):       # (after a failure: as the next load finds them)
                    self._add_log(TopicPartition(topic, p), log)
                if len(logs) == partitions:
                    self._topic_ids[topic] = tid
                    self._topics_by_id[tid] = topic
                    self._unresolved_ids.discard(topic)
        return logs

    def commit_topics(self, topics: Sequence[Tuple[str, int, Optional[Mapping[str, Any]]]], *,
                      prepare: Optional[Callable[[Log], None]] = None,
                      done: Optional[Callable[[str, Optional[KafkalogError]], None]] = None,
                      leader_epoch: Optional[int] = None
                      ) -> List[Union[uuid.UUID, KafkalogError]]:
        """Commit each ``(topic, partitions, config)`` (a CreateTopics request's topics) and return
        its ID or its error, as Kafka's controller does once its records are in the metadata log:
        each topic's record (:mod:`kafkalog.log.topic_creation`) and config overrides are on disk,
        every topic's fsyncs waited for once; the topic exists from then on. Its partitions are
        made afterwards on a thread (``prepare(log)`` run on each, ``done(topic, error)`` called
        when the last one is made or the creation failed; each ``leader-epoch-checkpoint`` made
        holding ``leader_epoch`` at offset 0 when given, the entry a leader's ``prepare`` writes,
        :meth:`open_new_logs`), each seen by :meth:`get_log` once made;
        a restart completes what a crash interrupted. A failed fsync fails every topic of the call
        with the :class:`KafkalogIOError`."""
        out: List[Union[uuid.UUID, KafkalogError]] = []
        taken: List[Tuple[int, str, int, Optional[LogConfig], uuid.UUID]] = []
        with self._lock:
            self._check_open()
            for i, (topic, partitions, config) in enumerate(topics):
                try:
                    validate_topic(topic)
                    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
                        raise InvalidConfigError(f"Number of partitions must be larger than 0: {partitions!r}")
                    if self.has_topic(topic) or topic in self._creating:
                        raise TopicExistsError(f"Topic '{topic}' already exists.", file=self.data_dir)
                    cfg = LogConfig(dict(config), self.broker_config) if config else None
                except KafkalogError as e:
                    out.append(e)
                    continue
                self._creating.add(topic)
                taken.append((i, topic, partitions, cfg, uuid.uuid4()))
                out.append(taken[-1][4])
        try:
            with fsutil.deferred_syncs():
                for _i, topic, partitions, cfg, tid in taken:
                    if cfg is not None:
                        self._persist_topic_config(topic, cfg)
                    write_record(self.data_dir, topic, tid, partitions)
        except KafkalogError as e:
            with self._lock:
                for _i, topic, _n, _c, _t in taken:
                    self._creating.discard(topic)
            return [e] * len(topics)
        with self._lock:
            for _i, topic, partitions, cfg, tid in taken:
                self._creating.discard(topic)
                if cfg is not None:
                    self._topic_configs[topic] = cfg
                self._known_topic_id(topic, tid)
                self._creator.submit(PendingTopic(topic, tid, partitions, cfg or self.topic_config(topic),
                                                  prepare, done, leader_epoch))
                self._topic_changed(topic)
        return out

    #: called (on the creating thread) after each chunk of a committed topic's partitions is made:
    #: a broker wakes the requests waiting for them
    on_partitions_made: Optional[Callable[[], None]] = None

    def _partitions_made(self) -> None:
        if self.on_partitions_made is not None:
            self.on_partitions_made()

    def creating(self) -> bool:
        """Whether committed topics' partitions are being made (:meth:`partition_pending`)."""
        return bool(self._creator.pending)

    def wait_created(self, topic: Optional[str] = None) -> None:
        """Until the committed ``topic`` (every one: None) has all its partitions made; raises the
        error that stopped its creation."""
        self._creator.wait(topic)

    def _known_topic_id(self, topic: str, tid: uuid.UUID) -> None:
        self._topic_ids[topic] = tid
        self._topics_by_id[tid] = topic
        self._unresolved_ids.discard(topic)

    def _create_log(self, tp: TopicPartition, cfg: LogConfig) -> Log:
        log = self._open_new_log(tp, cfg)
        self._add_log(tp, log)
        return log

    def _open_new_log(self, tp: TopicPartition, cfg: LogConfig, topic_id: Optional[uuid.UUID] = None,
                      prepare: Optional[Callable[[Log], None]] = None) -> Log:
        """A new partition's log (:meth:`Log.create`; a directory that is already there, which
        this manager did not load, is opened as it is), its ``partition.metadata`` written when
        ``topic_id`` is given, ``prepare(log)`` run on it (a broker leads it), then its
        ``leader-epoch-checkpoint`` made empty when nothing wrote it. Closed again on a failure."""
        path = f"{self.data_dir}/{partition_dir_name(tp.topic, tp.partition)}"
        try:
            log = Log.create(path, cfg, scheduler=self.scheduler, clock=self.clock,
                             producer_state_manager=self._producer_state(path, list_snapshots=False))
        except FileExistsError:
            log = Log.open(path, cfg, had_clean_shutdown=True, scheduler=self.scheduler, clock=self.clock,
                           producer_state_manager=self._producer_state(path))
        try:
            if topic_id is not None:    # partition.metadata in every partition, as Kafka writes it
                PartitionMetadataFile(f"{path}/{PARTITION_METADATA_FILE}").write(topic_id)
                log.partition_metadata_listed = True
            if prepare is not None:
                prepare(log)
            if log.leader_epoch_cache is not None:
                log.leader_epoch_cache.ensure_file()
        except BaseException:
            log.close()
            raise
        return log

    def open_new_logs(self, tps: Sequence[TopicPartition], cfg: LogConfig, topic_id: uuid.UUID,
                      prepare: Optional[Callable[[Log], None]] = None,
                      leader_epoch: Optional[int] = None) -> List[Log]:
        """:meth:`_open_new_log` of each of ``tps`` (a chunk of a committed topic's partitions),
        the directories and their files made by one call of :func:`kernel.make_dirs` (without the
        interpreter lock: ~17 system calls a partition that otherwise each hand the lock back to
        a busy event loop and wait for it again), ``partition.metadata`` written in place (a new
        directory has none to replace; a crash before the chunk's fsyncs leaves the topic's
        record, and the next load rewrites the file, :func:`topic_creation.complete`), the
        ``leader-epoch-checkpoint`` holding ``leader_epoch`` at offset 0 when given (the entry a
        broker's ``prepare`` would write). A directory that cannot be made so (there already,
        or a failure) is left to :meth:`_open_new_log`, which opens it or names the error. Each
        partition's ``partition.metadata`` and directory are noted for the caller's fsyncs
        (:func:`fsutil.deferred_syncs`); a failure closes the logs made and raises."""
        if cfg.preallocate:
            return [self._open_new_log(tp, cfg, topic_id, prepare) for tp in tps]
        epochs = [EpochEntry(leader_epoch, 0)] if leader_epoch is not None else []
        files = Log.new_files(epochs) + [(PARTITION_METADATA_FILE, PartitionMetadataFile.encode(topic_id))]
        dirs = [f"{self.data_dir}/{partition_dir_name(tp.topic, tp.partition)}" for tp in tps]
        logs: List[Log] = []
        try:
            pos = 0
            while pos < len(tps):
                made, failed = kernel.make_dirs(dirs[pos:], files)
                for path in dirs[pos:pos + made]:
                    log = Log.create(path, cfg, scheduler=self.scheduler, clock=self.clock,
                                     producer_state_manager=self._producer_state(path, list_snapshots=False),
                                     files_made=epochs)
                    logs.append(log)
                    log.partition_metadata_listed = True
                    fsutil.fsync_file(f"{path}/{PARTITION_METADATA_FILE}")
                    fsutil.fsync_dir(path)
                    if prepare is not None:
                        prepare(log)
                pos += made
                if failed is not None:
                    logs.append(self._open_new_log(tps[pos], cfg, topic_id, prepare))
                    pos += 1
        except BaseException:
            for log in logs:
                log.close()
            raise
        return logs

    def _add_log(self, tp: TopicPartition, log: Log) -> None:
        self._logs[tp] = log
        parts = self._by_topic.get(tp.topic)
        if parts is None:
            parts = self._by_topic[tp.topic] = {}
            if tp.topic not in self._topic_ids:
                self._unresolved_ids.add(tp.topic)
        parts[tp.partition] = log
        self._schedule_flush(tp, log)
        log.offsets_changed = functools.partial(self._offsets_of_changed, tp)
        self._offsets_of_changed(tp, log)
        if log.leader_epoch_cache is not None:
            log.leader_epoch_cache.on_latest_epoch_changed = functools.partial(self._topic_changed, tp.topic)
        self._topic_changed(tp.topic)

    def metadata_stamp(self, topic: str) -> int:
        """A number that changes whenever what a Metadata answer says of ``topic`` may have (a
        partition seen or removed, the topic committed, a partition's latest leader epoch): a
        broker keeps the topic's encoded answer while its stamp stays (a look-up, not a walk over
        its partitions). 0 for a topic that does not exist; a stamp is never given twice, so a
        topic deleted and made again has a new one. Read it before what it stands for: a change
        moves it after the change is seen."""
        return self._stamps.get(topic, 0)

    def topics_stamp(self) -> int:
        """A number that changes whenever any topic's :meth:`metadata_stamp` does or a topic goes:
        what is derived from every topic (a broker's topic image for its consumer groups) is kept
        while it stays. Read it before what it stands for, as a topic's stamp."""
        return self._last_stamp

    def _topic_changed(self, topic: str) -> None:
        self._stamps[topic] = self._last_stamp = next(self._stamp_seq)

    def _offsets_of_changed(self, tp: TopicPartition, _log: Optional[Log] = None) -> None:
        with self._moved_lock:
            for moved in self._offsets_moved.values():
                moved.add(tp)
            self._retention_due.add(tp)

    def _remove_log(self, tp: TopicPartition) -> Log:
        log = self._logs.pop(tp)
        with self._moved_lock:
            self._retention_later_at.pop(tp, None)
        log.offsets_changed = None
        if log.leader_epoch_cache is not None:
            log.leader_epoch_cache.on_latest_epoch_changed = None
        self._offsets_of_changed(tp)
        self._flush_seq_of.pop(tp, None)
        parts = self._by_topic.get(tp.topic)
        if parts is not None:
            parts.pop(tp.partition, None)
            if not parts:
                del self._by_topic[tp.topic]
                self._unresolved_ids.discard(tp.topic)
                tid = self._topic_ids.pop(tp.topic, None)
                if tid is not None:
                    self._topics_by_id.pop(tid, None)
        if self.has_topic(tp.topic):
            self._topic_changed(tp.topic)
        else:
            self._stamps.pop(tp.topic, None)
            self._last_stamp = next(self._stamp_seq)
        return log

    def _schedule_flush(self, tp: TopicPartition, log: Log) -> None:
        """Put ``log`` in the flusher's heap at its next ``flush.ms`` deadline (not at all when
        ``flush.ms`` is unbounded, Kafka's default)."""
        with self._lock:
            if log.flush_ms < INT64_MAX:
                self._flush_seq += 1
                self._flush_seq_of[tp] = self._flush_seq
                heapq.heappush(self._flush_due, (log.last_flush_time + log.flush_ms, self._flush_seq, tp,
                                                 log))
            else:
                self._flush_seq_of.pop(tp, None)

    def _producer_state(self, path: str, list_snapshots: bool = True) -> ProducerStateManager:
        """A partition's producer state, expiring producers after ``producer.id.expiration.ms``
        (``list_snapshots`` False: for a load, which lists them from its listing)."""
        return ProducerStateManager(path, int(self.broker_config.producer_id_expiration_ms),
                                    list_snapshots=list_snapshots)

    def add_partitions(self, topic: str, total_partitions: int) -> List[Log]:
        """Grow ``topic`` to ``total_partitions`` partitions."""
        self.wait_created(topic)
        with self._lock:
            self._check_open()
            current = self.partitions_of(topic)
            if not current:
                raise InvalidTopicError(f"Topic '{topic}' does not exist.", file=self.data_dir)
            if total_partitions <= len(current):
                raise InvalidConfigError(f"Topic currently has {len(current)} partitions, which is "
                                         f"higher than the requested {total_partitions}.")
            cfg = self.topic_config(topic)
            with fsutil.deferred_syncs():
                logs = [self._create_log(TopicPartition(topic, p), cfg)
                        for p in range(len(current), total_partitions)]
                fsutil.fsync_dir(self.data_dir)
            self._forget_topic_id(topic)  # read again: written into the new partitions
            self.topic_id(topic)        # the new partitions carry the topic's ID
            return logs

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic ID of ``topic`` from its partitions' ``partition.metadata``. A partition
        without the file (a topic created by an older tool, or a new partition) gets the topic's
        ID written atomically; a topic with none gets a random one. Unreadable files are skipped
        in the search and left as they are."""
        known = self._topic_ids.get(topic)
        if known is not None:
            return known
        with self._lock:
            parts = self.partitions_of(topic)
            if not parts:
                raise InvalidTopicError(f"Topic '{topic}' does not exist.", file=self.data_dir)
            logs = [self._by_topic[topic][p] for p in parts]
            files = [PartitionMetadataFile(os.path.join(log.dir, PARTITION_METADATA_FILE)) for log in logs]
            # (a partition whose load listed the file needs no stat: a Metadata for every topic
            # after a restart asked one per partition on the event loop)
            there = [log.partition_metadata_listed or f.exists() for log, f in zip(logs, files)]
            tid: Optional[uuid.UUID] = None
            for f, present in zip(files, there):
                if present:
                    try:
                        tid = f.read().topic_id
                        break
                    except CorruptCheckpointError:
                        continue
            if tid is None:
                tid = uuid.uuid4()
            for log, f, present in zip(logs, files, there):
                if not present:
                    f.write(tid)
                log.partition_metadata_listed = True
            self._topic_ids[topic] = tid
            self._topics_by_id[tid] = topic
            self._unresolved_ids.discard(topic)
            return tid

    def _forget_topic_id(self, topic: str) -> None:
        tid = self._topic_ids.pop(topic, None)
        if tid is not None:
            self._topics_by_id.pop(tid, None)
        if topic in self._by_topic:
            self._unresolved_ids.add(topic)

    def topic_by_id(self, topic_id: uuid.UUID) -> Optional[str]:
        """The topic whose ID is ``topic_id``, None when no topic has it: a dictionary look-up
        once every topic's ID has been read (each is read once, the first time one is needed)."""
        name = self._topics_by_id.get(topic_id)
        if name is not None or not self._unresolved_ids:
            return name
        with self._lock:
            for topic in list(self._unresolved_ids):
                try:
                    self.topic_id(topic)
                except KafkalogError:
                    self._unresolved_ids.discard(topic)
            return self._topics_by_id.get(topic_id)

    def delete_topic(self, topic: str) -> int:
        """Delete every partition of ``topic``: close it, rename its directory to
        ``<tp>.<uuid>-delete``, rewrite the checkpoints without it and remove the directory after
        ``file.delete.delay.ms``. Returns the number of partitions deleted (a committed topic's
        once they are all made)."""
        self.wait_created(topic)
        with self._lock:
            self._check_open()
            parts = self.partitions_of(topic)
            if not parts:
                raise InvalidTopicError(f"Topic '{topic}' does not exist.", file=self.data_dir)
            delay = int(self.topic_config(topic).file_delete_delay_ms)
            renamed = []
            for p in parts:
                tp = TopicPartition(topic, p)
                log = self._remove_log(tp)
                log.close()
                target = os.path.join(self.data_dir, log_delete_dir_name(topic, p))
                fsutil.atomic_rename(log.dir, target)
                renamed.append(target)
            cfg_path = self._topic_config_path(topic)
            if fsutil.delete_if_exists(cfg_path):
                fsutil.fsync_dir(self.data_dir)
            self._topic_configs.pop(topic, None)
            self.write_checkpoints()
            if self.cleaner is not None:
                for p in parts:
                    try:
                        self.cleaner.abort_cleaning(TopicPartition(topic, p))
                    except Exception:
                        logger.warning("cleaner abort failed for %s-%d", topic, p, exc_info=True)

            def remove(dirs: Tuple[str, ...] = tuple(renamed)) -> None:
                for d in dirs:
                    shutil.rmtree(d, ignore_errors=True)
            if self._background and delay > 0:
                self.scheduler.schedule_once(f"delete-topic-{topic}", remove, delay)
            else:
                remove()
            return len(parts)

    def alter_topic_config(self, topic: str, updates: Mapping[str, Any],
                           deletes: Tuple[str, ...] = ()) -> LogConfig:
        """Set (``updates``) and remove (``deletes``) topic overrides; persisted and applied to the
        open logs (Kafka's incremental alter configs)."""
        self.wait_created(topic)
        with self._lock:
            self._check_open()
            if not self.partitions_of(topic):
                raise InvalidTopicError(f"Topic '{topic}' does not exist.", file=self.data_dir)
            overrides = self.topic_config(topic).to_dict()
            for k in deletes:
                overrides.pop(k, None)
            overrides.update(updates)
            cfg = LogConfig(overrides, self.broker_config)
            self._persist_topic_config(topic, cfg)
            self._topic_configs[topic] = cfg
            for p, log in self._by_topic[topic].items():
                log.update_config(cfg)
                self._schedule_flush(TopicPartition(topic, p), log)
                with self._moved_lock:
                    self._retention_due.add(TopicPartition(topic, p))
            return cfg

    # --- lookups ------------------------------------------------------------------------------------

    def topics(self) -> List[str]:
        """Topic names, sorted (those committed whose partitions are being made too)."""
        pending = self._creator.pending
        return sorted(self._by_topic.keys() | pending.keys()) if pending else sorted(self._by_topic)

    def partitions_of(self, topic: str) -> List[int]:
        """Partition numbers of ``topic``, sorted (empty when it does not exist); a committed
        topic's every partition, made or not (:meth:`partition_pending`)."""
        pending = self._creator.pending.get(topic)
        if pending is not None:
            return list(range(pending.partitions))
        parts = self._by_topic.get(topic)
        return sorted(parts) if parts else []

    def partition_pending(self, topic: str, partition: int) -> bool:
        """Whether ``topic``-``partition`` is committed and not made yet (Kafka's broker answers
        such a partition NOT_LEADER_OR_FOLLOWER: in the metadata, not a replica yet)."""
        pending = self._creator.pending.get(topic)
        return pending is not None and pending.made <= partition < pending.partitions

    def partitions(self) -> List[TopicPartition]:
        return sorted(self._logs)

    def has_topic(self, topic: str) -> bool:
        return topic in self._by_topic or topic in self._creator.pending

    def get_log(self, topic: str, partition: int) -> Log:
        """The open :class:`Log` of ``topic``-``partition``; :class:`InvalidTopicError` if unknown."""
        parts = self._by_topic.get(topic)
        log = parts.get(partition) if parts is not None else None
        if log is None:
            raise InvalidTopicError(f"Unknown topic or partition: {topic}-{partition}",
                                    file=self.data_dir)
        return log

    def find_log(self, topic: str, partition: int) -> Optional[Log]:
        """The open :class:`Log` of ``topic``-``partition``, None if unknown or not made yet (a
        look-up without an exception: Metadata asks for thousands of partitions being made)."""
        parts = self._by_topic.get(topic)
        return parts.get(partition) if parts is not None else None

    def logs(self) -> Iterator[Tuple[TopicPartition, Log]]:
        """(topic-partition, log) pairs, sorted (a snapshot)."""
        with self._lock:
            items = sorted(self._logs.items())
        yield from items

    def compacted_logs(self) -> List[Tuple[TopicPartition, Log]]:
        """(topic-partition, log) pairs of the topics whose ``cleanup.policy`` holds ``compact``,
        sorted: what the cleaner looks at each pass. Found through the topics' configs, so a pass
        costs nothing per partition of a deleting topic (every log when the broker's default
        policy compacts: every log is then filtered, as Kafka's cleaner does)."""
        if LogConfig({}, self.broker_config).compact:
            return [(tp, log) for tp, log in self.logs() if log.config.compact]
        with self._lock:
            items = [(TopicPartition(topic, p), log)
                     for topic, cfg in self._topic_configs.items() if cfg.compact
                     for p, log in self._by_topic.get(topic, {}).items()]
        items.sort()
        return items

    def describe(self) -> List[PartitionInfo]:
        """Offsets and sizes of every partition."""
        out = []
        for tp, log in self.logs():
            out.append(PartitionInfo(tp.topic, tp.partition, log.log_start_offset, log.log_end_offset,
                                     log.high_watermark, log.recovery_point, log.size,
                                     len(log.segments), log.dir))
        return out

    # --- periodic tasks -----------------------------------------------------------------------------

    def _snapshot(self) -> List[Tuple[TopicPartition, Log]]:
        """Every (partition, log), unsorted (the periodic tasks need no order)."""
        with self._lock:
            return list(self._logs.items())

    def cleanup_logs(self, now: Optional[int] = None) -> Dict[str, RetentionResult]:
        """Kafka's retention task: ``deleteOldSegments`` on every log whose ``cleanup.policy`` does
        not contain ``compact`` (compacted logs get retention from the cleaner after each cleaning,
        as in Kafka). Keyed by due time: a log is visited when its offsets, segments or
        configuration changed since the last visit (``Log.offsets_changed``,
        :meth:`alter_topic_config`), or when its first segment breaches ``retention.ms``; a visit
        that deletes nothing schedules the next (a log of one empty segment: none). So a pass costs
        the partitions that moved or are due, not every partition holding data (at 100,000
        partitions a pass over the 55,000 with data took 1 s of the interpreter lock every 5 min).
        The first pass after a start visits every partition with data (nothing is known of them
        yet). Returns the results by partition."""
        results: Dict[str, RetentionResult] = {}
        at_ms = self.clock() if now is None else now
        with self._moved_lock:
            # the marks taken whole and a new set begun (a copy of 100,000 marks was a young
            # container each of the collector's young walks went through: 15-20 ms a walk, the
            # event loop waiting for the interpreter lock meanwhile); what this pass does not
            # settle is marked again below
            due, self._retention_due = self._retention_due, set()
            later, later_at = self._retention_later, self._retention_later_at
            while later and later[0][0] <= at_ms:
                when, tp = heapq.heappop(later)
                if later_at.get(tp) == when:
                    del later_at[tp]
                    due.add(tp)
        again: List[TopicPartition] = []
        try:
            for tp in due:
                self.task_visits += 1
                log = self._logs.get(tp)
                if log is None:
                    continue
                segs = log.segments
                empty = len(segs) == 1 and segs[0].size == 0
                if log.config.compact and not empty:
                    again.append(tp)            # (the cleaner's; an empty one is put off as any other)
                    continue
                if not empty:
                    try:
                        r = delete_old_segments(log, now=now)
                    except KafkalogError as e:
                        if not (self._closed or log.closed):
                            logger.error("Retention failed for %s: %s", tp, e)
                            again.append(tp)
                        continue
                    results[str(tp)] = r
                    if r.deleted:
                        again.append(tp)        # (its offsets moved: visited again next pass)
                        continue
                self._visited(tp, log, results.get(str(tp)))
        except BaseException:
            again = list(due)                   # (an unexpected failure: the whole pass again)
            raise
        finally:
            if again:
                with self._moved_lock:
                    self._retention_due.update(tp for tp in again if tp in self._logs)
        self.last_retention = {k: r for k, r in results.items() if r.deleted or r.future_timestamp_segments}
        return results

    def _visited(self, tp: TopicPartition, log: Log, result: Optional[RetentionResult]) -> None:
        """``tp`` is not visited again until it changes or its next time breach is due (a log of
        one empty segment: until it changes). The pass took the marks whole, so a change since
        (during the visit too) has marked it again and nothing here removes that mark: a change
        publishes, then reports itself (``Log.offsets_changed`` after the new offsets, the
        configuration swapped before :meth:`alter_topic_config` marks it). A log that must be
        visited at every pass (a segment stamped in the future) is marked again here."""
        segs, end, start, cfg = log.segments, log.log_end_offset, log.log_start_offset, log.config
        when = INT64_MAX if result is None else time_breach_due(log, result)
        with self._moved_lock:
            if when is None:
                self._retention_due.add(tp)
                return
            if not (log.segments is segs and log.log_end_offset == end and log.log_start_offset == start
                    and log.config is cfg and self._logs.get(tp) is log):
                return                      # (changed: its change marked it)
            if when == INT64_MAX:
                return
            self._retention_later_at[tp] = when
            heapq.heappush(self._retention_later, (when, tp))
            if len(self._retention_later) > 2 * len(self._retention_later_at) + 1024:   # old entries
                self._retention_later = [(w, p) for p, w in self._retention_later_at.items()]
                heapq.heapify(self._retention_later)

    def remove_expired_producers(self, now: Optional[int] = None) -> int:
        """Kafka's ``PeriodicProducerExpirationCheck`` (every
        ``producer.id.expiration.check.interval.ms``): forget, in every log, the producers whose
        last batch is older than ``producer.id.expiration.ms`` and that have no open transaction.
        Returns how many were forgotten."""
        now = self.clock() if now is None else now
        gone = 0
        for _tp, log in self._snapshot():
            gone += len(log.remove_expired_producers(now))
        return gone

    def flush_dirty_logs(self) -> None:
        """Kafka's ``kafka-log-flusher``: flush each log whose ``flush.ms`` has elapsed. The logs
        with a finite ``flush.ms`` wait in a heap by due time: a run visits the due ones only."""
        now = self.clock()
        heap = self._flush_due
        while True:
            with self._lock:
                if not heap or heap[0][0] > now:
                    return
                _due, seq, tp, log = heapq.heappop(heap)
                self.task_visits += 1
                if self._flush_seq_of.get(tp) != seq or self._logs.get(tp) is not log:
                    continue                        # replaced (config change) or gone
            try:
                log.flush_if_due(now)
            except KafkalogError:
                logger.error("Flush failed for %s", log.dir, exc_info=True)
            if not log.closed:
                self._schedule_flush(tp, log)

    def _write_offset_checkpoint(self, name: str, value_of: Callable[[Log], Optional[int]]) -> None:
        """Write the offset checkpoint ``name`` (``value_of(log)`` per partition, None: left out)
        if an entry changed since it was last written: only the partitions whose offsets moved are
        looked at (all of them the first time), and only their topics' lines formatted again
        (:class:`~kafkalog.log.checkpoint.OffsetCheckpointText`)."""
        with self._lock:
            with self._moved_lock:
                moved = self._offsets_moved[name]
                self._offsets_moved[name] = set()
            text = self._checkpointed.get(name)
            if text is None:
                text = OffsetCheckpointText()
                moved = set(self._logs)
            logs = self._logs
            try:
                for tp in moved:
                    self.task_visits += 1
                    log = logs.get(tp)
                    value = None if log is None else value_of(log)
                    if value is None:
                        text.discard(tp[0], tp[1])
                    else:
                        text.set(tp[0], tp[1], value)
            except BaseException:
                with self._moved_lock:
                    self._offsets_moved[name] |= moved      # looked at again next time
                raise
            self._checkpointed[name] = text
            if text.dirty:
                # (a failed write leaves the text dirty: the next one tries again)
                OffsetCheckpointFile(os.path.join(self.data_dir, name), create=False).write_text(text)

    def checkpoint_recovery_offsets(self) -> None:
        """Write ``recovery-point-offset-checkpoint`` (every log's recovery point) when one moved."""
        self._write_offset_checkpoint(RECOVERY_POINT_CHECKPOINT_FILE, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint``: only logs whose log start offset is above their
        first segment's base offset (spec §7.23); when one moved."""
        def value_of(log: Log) -> Optional[int]:
            segs = log.segments
            return log.log_start_offset if segs and log.log_start_offset > segs[0].base_offset else None
        self._write_offset_checkpoint(LOG_START_OFFSET_CHECKPOINT_FILE, value_of)

    def checkpoint_high_watermarks(self) -> None:
        """Write ``replication-offset-checkpoint`` with HW = LEO (an embedded single replica) when
        one moved."""
        self._write_offset_checkpoint(REPLICATION_OFFSET_CHECKPOINT_FILE, lambda log: log.high_watermark)

    def write_checkpoints(self) -> None:
        """All three offset checkpoints."""
        self.checkpoint_recovery_offsets()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()

    def flush(self) -> None:
        """Flush every log (data and indexes fsynced, recovery points advanced) and checkpoint."""
        for _tp, log in list(self.logs()):
            log.flush()
        self.write_checkpoints()

    # --- lifecycle ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogDirError("the log manager is closed", file=self.data_dir)

    def _close_logs_quietly(self) -> None:
        for log in list(self._logs.values()):
            try:
                log.close()
            except Exception:
                pass
        self._logs.clear()

    def close(self) -> None:
        """Clean shutdown (spec §4.8): stop the cleaner and the scheduler (pending file deletions
        run now), flush and close every log, write the checkpoints and ``.kafka_cleanshutdown``,
        release ``.lock``. Idempotent."""
        if self._closed:
            return
        try:                    # committed topics are made whole before a clean shutdown
            self.wait_created()
        except KafkalogError as e:
            logger.error("committed topics not made whole at shutdown (made at the next load): %s", e)
        # stop the background threads first, without holding the manager lock: a running task
        # (a checkpoint) may be waiting for it
        if self.cleaner is not None:
            try:
                self.cleaner.shutdown()
            except Exception:
                logger.error("Cleaner shutdown failed", exc_info=True)
        self.scheduler.shutdown(run_pending=True)
        with self._lock:
            if self._closed:
                return
            try:
                self._close_logs_in_parallel()
                self.write_checkpoints()
                CleanShutdownFile(self.data_dir).write(-1)
            finally:
                self._closed = True
                self._release_lock()

    def _close_logs_in_parallel(self) -> None:
        """Close every log (``Log.close`` flushes it: data, indexes, producer snapshot) with its
        fsyncs deferred to the end and run together (:func:`fsutil.deferred_syncs`): the fsyncs of
        thousands of partitions overlap, as Kafka's shutdown closes a directory's logs on a pool,
        instead of waiting one after the other; from :data:`fsutil.SYNCFS_MIN_PATHS` files noted,
        the file system is synced whole instead. Everything is synced before the checkpoints and
        ``.kafka_cleanshutdown`` are written."""
        with fsutil.deferred_syncs(whole_file_systems=True):
            for _tp, log in self._snapshot():
                log.close()

    def abandon(self) -> None:
        """Release everything *without* a clean shutdown (no flush, no checkpoints, no
        ``.kafka_cleanshutdown``), as a crash would; for tests and tools."""
        self._creator.stop()
        self.scheduler.shutdown()
        with self._lock:
            for log in self._logs.values():
                for s in log.segments:
                    s.close_handlers()
            self._closed = True
            self._release_lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogManager({self.data_dir!r}, partitions={len(self._logs)})"


def _properties_of(cfg: LogConfig) -> Dict[str, str]:
    """The explicit overrides of ``cfg`` as property strings."""
    return {k: format_value(TOPIC_CONFIGS[k].type, v) for k, v in cfg.to_dict().items()}
