"""What a Kafka data directory (a ``log.dirs`` entry) is, recognised before anything is opened,
locked or written (issue 24).

A directory is a data directory when it holds ``meta.properties`` (what every Kafka broker since
0.9 and every kafkalog open writes first), or, without one (an older broker's directory, partition
directories copied together), when it holds Kafka's files: offset checkpoint files or
``<topic>-<partition>`` directories of segment, index, snapshot and checkpoint files, and no
subdirectory that is anything else (a Kafka broker refuses a log directory with a subdirectory it
cannot parse). A directory is *new* when it does not exist or is empty (``lost+found`` of a fresh
file system, a ``.lock`` left by an interrupted first open and the staging files of a Spark write
creating the directory do not count): only such a path
becomes a data directory, by an explicit open. Anything else is refused with a
:class:`~kafkalog.errors.LogDirError` naming the directory and what was found in it, so no
command ever writes ``meta.properties``, a ``.lock`` or checkpoints into ``/etc`` because it holds a
``dbus-1`` directory.
"""

from __future__ import annotations

import os
import re
from typing import List, Tuple

from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.naming import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT_FILE,
    IGNORED_DIRS,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    STAGING_FILE_PREFIX,
    parse_partition_dir_name,
)

__all__ = ["NEW", "EMPTY", "DATA_DIR", "is_kafka_file", "holds_kafka_files", "data_dir_state",
           "check_data_dir", "describe_foreign"]

NEW = "new"                 # does not exist yet
EMPTY = "empty"             # exists, nothing in it (but lost+found or a stale .lock)
DATA_DIR = "data-dir"       # a Kafka data directory

#: top-level files only a Kafka data directory holds (besides meta.properties)
DATA_DIR_FILES = (RECOVERY_POINT_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
                  REPLICATION_OFFSET_CHECKPOINT_FILE, CLEANER_OFFSET_CHECKPOINT_FILE,
                  CLEAN_SHUTDOWN_FILE)
#: what an empty directory may hold (and kafkalog's Spark sink's staging files, while the job that
#: creates the directory runs)
_NOTHING = frozenset({"lost+found", LOCK_FILE})


def _nothing(name: str) -> bool:
    return name in _NOTHING or name.startswith(STAGING_FILE_PREFIX)
#: a partition directory's files: segments, indexes, producer snapshots (and their .deleted,
#: .cleaned, .swap states), a KRaft metadata snapshot, and the partition's checkpoints
_KAFKA_FILE = re.compile(r"^\d{20}(-\d{10})?\.(log|index|timeindex|txnindex|snapshot|checkpoint)"
                         r"(\.deleted|\.cleaned|\.swap|\.tmp|\.part)?$")
_PARTITION_FILES = frozenset({PARTITION_METADATA_FILE, LEADER_EPOCH_CHECKPOINT_FILE,
                              "quorum-state"})
_SHOWN = 4                  # names quoted in an error before "..."


def is_kafka_file(name: str) -> bool:
    """A file name Kafka writes in a partition directory."""
    return name in _PARTITION_FILES or bool(_KAFKA_FILE.match(name))


def holds_kafka_files(path: str) -> bool:
    """``path`` is a directory with at least one of Kafka's partition files in it."""
    try:
        return any(is_kafka_file(n) for n in os.listdir(path))
    except OSError:
        return False


def _partition_name(name: str) -> bool:
    try:
        parse_partition_dir_name(name)
    except KafkalogError:
        return False
    return True


def _survey(path: str, names: List[str]) -> Tuple[List[str], List[str], List[str]]:
    """``(partition directories with Kafka's files, partition-named directories without any,
    other subdirectories)`` of a directory's entries."""
    kafka: List[str] = []
    empty_parts: List[str] = []
    others: List[str] = []
    for name in sorted(names):
        sub = os.path.join(path, name)
        if _nothing(name) or name in IGNORED_DIRS or not os.path.isdir(sub):
            continue
        if _partition_name(name):
            (kafka if holds_kafka_files(sub) else empty_parts).append(name)
        elif not name.startswith("."):
            others.append(name)
    return kafka, empty_parts, others


def _listing(names: List[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def describe_foreign(path: str, names: List[str]) -> str:
    """Why a non-empty directory without ``meta.properties`` is not a data directory (or "" when
    it is one, of an older broker or of copied partition directories)."""
    kafka, empty_parts, others = _survey(path, names)
    has_files = any(n in DATA_DIR_FILES for n in names)
    if (kafka or has_files) and not empty_parts and not others:
        return ""
    found = []
    if empty_parts:
        found.append(f"{_listing([n + '/' for n in empty_parts])} "
                     f"{'holds' if len(empty_parts) == 1 else 'hold'} no Kafka files")
    if others:
        found.append(f"{_listing([n + '/' for n in others])} "
                     f"{'is' if len(others) == 1 else 'are'} not <topic>-<partition> directories")
    if not found:
        files = [n for n in names if not _nothing(n)]
        found.append(f"it holds {_listing(files)} and no <topic>-<partition> directory")
    return "no meta.properties; " + "; ".join(found)


def data_dir_state(path: str) -> str:
    """:data:`NEW`, :data:`EMPTY` or :data:`DATA_DIR`; a :class:`LogDirError` naming ``path`` and
    what was found when it is something else (a file, a partition directory, any other directory)."""
    if not os.path.lexists(path):
        return NEW
    if not os.path.isdir(path):
        raise LogDirError("not a directory", file=path)
    try:
        names = os.listdir(path)
    except OSError as e:
        raise LogDirError(f"cannot list the directory: {e.strerror}", file=path) from None
    if META_PROPERTIES_FILE in names:
        return DATA_DIR
    if all(_nothing(n) for n in names):
        return EMPTY
    if any(is_kafka_file(n) for n in names):
        parent = os.path.dirname(os.path.abspath(path))
        raise LogDirError(f"this is a partition directory; the data directory is its parent {parent}",
                          file=path)
    why = describe_foreign(path, names)
    if why:
        raise LogDirError(f"not a Kafka data directory ({why}); a data directory is created only "
                          f"in a new or empty directory", file=path)
    return DATA_DIR


def check_data_dir(path: str, *, may_create: bool) -> str:
    """:func:`data_dir_state` of ``path``, refusing a new or empty one unless ``may_create``."""
    state = data_dir_state(path)
    if state == NEW and not may_create:
        raise LogDirError("no such directory", file=path)
    if state == EMPTY and not may_create:
        raise LogDirError("not a Kafka data directory (it is empty)", file=path)
    if state == NEW:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise LogDirError(f"its parent directory {parent} does not exist", file=path)
    return state
