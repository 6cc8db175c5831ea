"""What the commands accept as a path, checked before anything is opened, locked or created.

A *data directory* is what a Kafka broker's ``log.dirs`` names, recognised as Kafka recognises one
(:mod:`kafkalog.log.data_dir`: ``meta.properties``, or partition directories holding Kafka's
files). A *partition directory* is one ``<topic>-<partition>`` directory with segment files. A
typo, an ordinary directory (``/etc``, whose ``dbus-1`` looks like a partition name) or a partition
directory given where a data directory is needed is refused with a clear error naming what was
found, so no command ever writes ``meta.properties``, ``.lock`` or checkpoints into a directory by
mistake; only a new or empty path becomes a data directory, and the commands that create one
(``produce``, ``serve``) say so.
"""

from __future__ import annotations

import os

from kafkalog.errors import LogDirError
from kafkalog.log.data_dir import DATA_DIR, EMPTY, NEW, check_data_dir, data_dir_state

__all__ = ["is_data_dir", "is_partition_dir", "existing_data_dir", "data_dir_or_partition_dir",
           "new_or_existing_data_dir"]


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
    """A Kafka data directory (:func:`kafkalog.log.data_dir.data_dir_state`)."""
    try:
        return data_dir_state(path) == DATA_DIR
    except LogDirError:
        return False


def existing_data_dir(path: str) -> str:
    """``path`` if it is an existing data directory, else a :class:`LogDirError` saying what it is."""
    check_data_dir(path, may_create=False)
    return path


def data_dir_or_partition_dir(path: str) -> str:
    """``path`` if it is a data directory or a partition directory."""
    if is_partition_dir(path):
        return path
    state = data_dir_state(path)
    if state == NEW:
        raise LogDirError("no such directory", file=path)
    if state == EMPTY:
        raise LogDirError("neither a Kafka data directory nor a partition directory (it is empty)",
                          file=path)
    return path


def new_or_existing_data_dir(path: str) -> bool:
    """For commands that create topics: a data directory, or a new or empty path (True: the command
    creates the data directory when it has something to write)."""
    return check_data_dir(path, may_create=True) in (NEW, EMPTY)
