"""What the commands accept as a path, checked before anything is opened, locked or created.

A *data directory* is what a Kafka broker's ``log.dirs`` names: it holds ``meta.properties``,
checkpoint files or partition directories (``<topic>-<partition>``). A *partition directory* is one
``<topic>-<partition>`` directory with segment files. A typo, an ordinary directory or a partition
directory given where a data directory is needed is refused with a clear error, so no command ever
writes ``meta.properties``, ``.lock`` or checkpoints into a directory by mistake.
"""

from __future__ import annotations

import os

from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.naming import parse_partition_dir_name

__all__ = ["is_data_dir", "is_partition_dir", "existing_data_dir", "data_dir_or_partition_dir",
           "new_or_existing_data_dir"]

_DATA_DIR_FILES = ("meta.properties", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                   "replication-offset-checkpoint", "cleaner-offset-checkpoint", ".kafka_cleanshutdown")


def _is_partition_name(name: str) -> bool:
    try:
        parsed = parse_partition_dir_name(name)
    except KafkalogError:
        return False
    return not parsed.kind


def is_partition_dir(path: str) -> bool:
    """A directory holding segment files or a partition's metadata (normally named
    ``<topic>-<partition>``; a copy of one under another name counts too)."""
    if not os.path.isdir(path):
        return False
    for name in os.listdir(path):
        if name.endswith(".log") and name.split(".")[0].isdigit():
            return True
        if name in ("partition.metadata", "leader-epoch-checkpoint"):
            return True
    return False


def is_data_dir(path: str) -> bool:
    """A directory with ``meta.properties``, a checkpoint file or a partition directory in it."""
    if not os.path.isdir(path):
        return False
    for name in os.listdir(path):
        if name in _DATA_DIR_FILES:
            return True
        if _is_partition_name(name) and os.path.isdir(os.path.join(path, name)):
            return True
    return False


def _must_be_dir(path: str) -> None:
    if not os.path.exists(path):
        raise LogDirError("no such directory", file=path)
    if not os.path.isdir(path):
        raise LogDirError("not a directory", file=path)


def existing_data_dir(path: str) -> str:
    """``path`` if it is an existing data directory, else a :class:`LogDirError` saying what it is."""
    _must_be_dir(path)
    if is_partition_dir(path):
        parent = os.path.dirname(os.path.abspath(path))
        raise LogDirError(f"this is a partition directory; the data directory is its parent {parent}",
                          file=path)
    if not is_data_dir(path):
        raise LogDirError("not a Kafka data directory (no meta.properties, checkpoint files or "
                          "<topic>-<partition> directories)", file=path)
    return path


def data_dir_or_partition_dir(path: str) -> str:
    """``path`` if it is a data directory or a partition directory."""
    _must_be_dir(path)
    if not (is_partition_dir(path) or is_data_dir(path)):
        raise LogDirError("neither a Kafka data directory nor a partition directory", file=path)
    return path


def new_or_existing_data_dir(path: str) -> str:
    """For commands that create topics: a data directory, an empty directory, or a path that does not
    exist yet (created only when the command has something to write)."""
    if not os.path.exists(path):
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise LogDirError("its parent directory does not exist", file=path)
        return path
    if not os.path.isdir(path):
        raise LogDirError("not a directory", file=path)
    if is_partition_dir(path):
        parent = os.path.dirname(os.path.abspath(path))
        raise LogDirError(f"this is a partition directory; the data directory is its parent {parent}",
                          file=path)
    if os.listdir(path) and not is_data_dir(path):
        raise LogDirError("a directory that is neither empty nor a Kafka data directory", file=path)
    return path
