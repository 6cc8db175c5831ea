"""Topics committed before their partitions exist (issue 35): Kafka's controller answers
CreateTopics once the topic's records are committed to its metadata log and the broker makes the
partitions' logs afterwards; kafkalog does the same with a file.

:meth:`LogManager.commit_topics` writes, for each topic of a CreateTopics request, the record
``kafkalog-creating-<topic>.json`` (``{"version": 0, "topic", "topicId", "partitions"}``) at the
top of the data directory, atomically, every topic's fsyncs in one round
(:func:`fsutil.deferred_syncs`): from then on the topic exists (its name, ID and partition count
are known to every look-up) and it is answered. A :class:`TopicCreator` thread then makes the
partitions, a chunk of :data:`CHUNK` at a time (each chunk's fsyncs in one round, its logs seen by
the look-ups once they are on disk), in the order they were committed, and removes the record,
durably, once the topic's last partition is made; the manager's ``on_partitions_made`` is called
after each chunk (a broker's Produce waiting for a partition is woken; Fetch and ListOffsets are
told to retry, as Kafka tells them: NOT_LEADER_OR_FOLLOWER, the topic is in the metadata, the
replica not yet).

After a crash, loading the directory completes every topic a record names (:func:`complete`):
the missing partitions are made, a half-made one (its directory without ``partition.metadata``)
gets the record's topic ID, and the record is removed. Nothing a CreateTopics answer acknowledged
is lost. A Kafka broker lists the directory's subdirectories only and ignores the file.

The creation is work proportional to what was asked (it ends when the topics are made); nothing
runs while nothing is pending.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Protocol

from kafkalog.errors import CorruptCheckpointError, InvalidConfigError, KafkalogError
from kafkalog.log import fsutil
from kafkalog.log.checkpoint import (
    PARTITION_METADATA_FILE,
    PartitionMetadataFile,
    uuid_from_kafka_string,
    uuid_to_kafka_string,
)
from kafkalog.log.config import LogConfig
from kafkalog.log.naming import TopicPartition, validate_topic

if TYPE_CHECKING:
    from kafkalog.log.log import Log

logger = logging.getLogger("kafkalog.manager")

CREATING_PREFIX = "kafkalog-creating-"
CREATING_SUFFIX = ".json"
#: partitions made between two looks at the queue: one round of fsyncs each, and the unit in
#: which a topic's partitions become readable
CHUNK = 64


class CreationHost(Protocol):
    """What this module asks of the :class:`~kafkalog.log.manager.LogManager` it works for."""

    data_dir: str
    _lock: Any
    _logs: Dict[TopicPartition, Log]

    def _open_new_log(self, tp: TopicPartition, cfg: LogConfig, topic_id: Optional[uuid.UUID] = None,
                      prepare: Optional[Callable[[Log], None]] = None) -> Log: ...

    def open_new_logs(self, tps: List[TopicPartition], cfg: LogConfig, topic_id: uuid.UUID,
                      prepare: Optional[Callable[[Log], None]] = None,
                      leader_epoch: Optional[int] = None) -> List[Log]: ...

    def _add_log(self, tp: TopicPartition, log: Log) -> None: ...

    def _known_topic_id(self, topic: str, tid: uuid.UUID) -> None: ...

    def topic_config(self, topic: str) -> LogConfig: ...

    def _partitions_made(self) -> None: ...


def record_path(data_dir: str, topic: str) -> str:
    return os.path.join(data_dir, f"{CREATING_PREFIX}{validate_topic(topic)}{CREATING_SUFFIX}")


def parse_record_name(name: str) -> Optional[str]:
    """The topic of a ``kafkalog-creating-<topic>.json`` file name, None for any other name."""
    if name.startswith(CREATING_PREFIX) and name.endswith(CREATING_SUFFIX) \
            and len(name) > len(CREATING_PREFIX) + len(CREATING_SUFFIX):
        return name[len(CREATING_PREFIX):-len(CREATING_SUFFIX)]
    return None


def write_record(data_dir: str, topic: str, topic_id: uuid.UUID, partitions: int) -> None:
    """The topic's record, atomically (its fsyncs deferred inside a caller's block)."""
    doc = {"version": 0, "topic": topic, "topicId": uuid_to_kafka_string(topic_id),
           "partitions": partitions}
    fsutil.atomic_write(record_path(data_dir, topic), json.dumps(doc).encode("utf-8"))


def read_record(path: str, topic: str) -> tuple[uuid.UUID, int]:
    """(topic ID, partition count) of a record; :class:`InvalidConfigError` naming the file when it
    is not one this module wrote."""
    doc = fsutil.read_json(path, "record of a committed topic")
    try:
        validate_topic(topic)
        if not isinstance(doc, dict) or doc.get("version") != 0 or doc.get("topic") != topic:
            raise ValueError("not a version 0 record of this topic")
        partitions = doc["partitions"]
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise ValueError(f"partitions must be a positive integer, not {partitions!r}")
        return uuid_from_kafka_string(doc["topicId"]), partitions
    except (KeyError, ValueError, TypeError, KafkalogError) as e:
        msg = e.message if isinstance(e, KafkalogError) else str(e)
        raise InvalidConfigError(f"cannot read the record of a committed topic: {msg}",
                                 file=path) from None


def remove_record(data_dir: str, topic: str) -> None:
    """Remove the record durably (a record back after a crash would make a deleted topic again)."""
    if fsutil.delete_if_exists(record_path(data_dir, topic)):
        fsutil.fsync_dir(data_dir)


def complete(manager: CreationHost) -> List[str]:
    """At load: make what every record names and the directory lacks (a half-made partition gets
    the record's topic ID), then remove the records; the topics completed."""
    done = []
    named = ((parse_record_name(n), n) for n in sorted(os.listdir(manager.data_dir)))
    for topic, name in [(t, n) for t, n in named if t is not None]:
        topic_id, partitions = read_record(os.path.join(manager.data_dir, name), topic)
        config = manager.topic_config(topic)
        made = 0
        with fsutil.deferred_syncs():
            for p in range(partitions):
                tp = TopicPartition(topic, p)
                log = manager._logs.get(tp)
                if log is None:
                    manager._add_log(tp, manager._open_new_log(tp, config, topic_id))
                    made += 1
                    continue
                meta = PartitionMetadataFile(os.path.join(log.dir, PARTITION_METADATA_FILE))
                if not _readable(meta):
                    meta.write(topic_id)
            fsutil.fsync_dir(manager.data_dir)
        manager._known_topic_id(topic, topic_id)
        remove_record(manager.data_dir, topic)
        logger.info("completed topic %s committed before a restart: %d of its %d partition(s) made "
                    "at load", topic, made, partitions)
        done.append(topic)
    return done


def _readable(meta: PartitionMetadataFile) -> bool:
    """Whether a partition's ``partition.metadata`` is there and names a topic ID: a chunk's
    files are written in place and fsynced together, so a crash before the fsyncs may leave one
    empty or damaged (the topic's record is still there: the file is written again)."""
    if not meta.exists():
        return False
    try:
        meta.read()
    except CorruptCheckpointError:
        return False
    return True


@dataclass
class PendingTopic:
    """A committed topic whose partitions are being made."""

    topic: str
    topic_id: uuid.UUID
    partitions: int
    config: LogConfig
    prepare: Optional[Callable[[Log], None]]
    done: Optional[Callable[[str, Optional[KafkalogError]], None]]
    #: the epoch each partition's ``leader-epoch-checkpoint`` starts with at offset 0 (None: empty)
    leader_epoch: Optional[int] = None
    #: partitions 0 .. made-1 are made and seen
    made: int = 0
    #: the failure that stopped the creation (the topic stays committed: a restart completes it)
    error: Optional[KafkalogError] = None


class TopicCreator:
    """The thread that makes committed topics' partitions, started when there is work and ending
    when there is none (one thread: a second made 100,000 partitions no faster on this machine's
    disk and slower on tmpfs, 36.2 s against 21.6 s, and the event loop waited for the interpreter
    lock up to 205 ms, against 7 ms, while the two took turns with it). Its state is guarded by
    the manager's lock; :attr:`changed` (a condition of that lock) is notified after each chunk."""

    def __init__(self, manager: CreationHost) -> None:
        self.manager = manager
        self.pending: Dict[str, PendingTopic] = {}
        self.queue: Deque[str] = deque()
        #: the partitions of the queued topics not made yet (what a chunk's fsyncs are one part
        #: of, :func:`fsutil.syncfs_is_cheaper`)
        self.to_make = 0
        self.changed = threading.Condition(manager._lock)
        self._thread: Optional[threading.Thread] = None
        self._stopping = False

    def submit(self, pending: PendingTopic) -> None:
        """Queue a committed topic (under the manager's lock)."""
        self.pending[pending.topic] = pending
        self.queue.append(pending.topic)
        self.to_make += pending.partitions - pending.made
        if self._thread is None and not self._stopping:
            self._thread = threading.Thread(target=self._run, name="kafkalog-topic-creator", daemon=True)
            self._thread.start()

    def wait(self, topic: Optional[str] = None) -> None:
        """Until ``topic`` (every topic: None) is made; the error that stopped its creation, if any."""
        with self.changed:
            while True:
                waiting = [self.pending[topic]] if topic in self.pending else \
                    list(self.pending.values()) if topic is None else []
                if not waiting:
                    return
                failed = next((p.error for p in waiting if p.error is not None), None)
                if failed is not None:
                    raise failed
                self.changed.wait(1.0)

    def stop(self) -> None:
        """Stop after the chunk being made (a crash's :meth:`LogManager.abandon`)."""
        with self.changed:
            self._stopping = True
            thread = self._thread
        if thread is not None:
            thread.join()

    def _next(self) -> Optional[PendingTopic]:
        while self.queue:
            p = self.pending.get(self.queue[0])
            if p is not None and p.error is None and p.made < p.partitions:
                return p
            self.queue.popleft()
        return None

    def _run(self) -> None:
        m = self.manager
        while True:
            with self.changed:
                p = None if self._stopping else self._next()
                if p is None:
                    self._thread = None
                    self.changed.notify_all()
                    return
                start, end = p.made, min(p.made + CHUNK, p.partitions)
                after = self.to_make - (end - start)
            logs: List[Log] = []
            error: Optional[KafkalogError] = None
            try:
                # (the fsyncs of the chunks to come counted: a syncfs writing what the machine
                # holds dirty once is paid for by all of them, fsutil.syncfs_is_cheaper)
                with fsutil.deferred_syncs(paths_to_come=2 * after):
                    logs = m.open_new_logs([TopicPartition(p.topic, i) for i in range(start, end)],
                                           p.config, p.topic_id, p.prepare, p.leader_epoch)
                    fsutil.fsync_dir(m.data_dir)
            except KafkalogError as e:
                error = e
            except Exception as e:          # (a bug: the topic is completed at the next load)
                error = KafkalogError(f"creating the partitions of {p.topic} failed: {e!r}")
            finished = False
            with self.changed:
                if error is None:
                    for i, log in zip(range(start, end), logs):
                        m._add_log(TopicPartition(p.topic, i), log)
                    p.made = end
                    self.to_make -= end - start
                    finished = end == p.partitions
                else:
                    self.to_make -= p.partitions - start
                    for log in logs:        # not seen: the next load opens or remakes them
                        log.close()
                    p.error = error
                    logger.error("creating the partitions of committed topic %s stopped at %d of "
                                 "%d: %s (a restart completes it)", p.topic, start, p.partitions, error)
            if finished:
                try:
                    remove_record(m.data_dir, p.topic)
                except KafkalogError as e:
                    logger.error("cannot remove the record of topic %s: %s", p.topic, e)
            with self.changed:
                if finished:
                    self.pending.pop(p.topic, None)
                self.changed.notify_all()
            m._partitions_made()
            if (finished or error is not None) and p.done is not None:
                try:
                    p.done(p.topic, error)
                except Exception:
                    logger.error("callback after creating %s failed", p.topic, exc_info=True)
