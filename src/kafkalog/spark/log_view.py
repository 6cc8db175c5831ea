"""The Spark source's calls into the log layer's read-only view.

Planners and executors only *read* a data directory, which may be live (a broker or a kafkalog
writer has it open) or a copy: they never take the ``.lock``, never recover, never write. All of
that is :mod:`kafkalog.log.read.data_dir_view` / :mod:`kafkalog.log.read.partition_view` (partition listing,
checkpoints, snapshots of a partition, index lookups, offsets by timestamp); this module names
the few calls the planner, the streaming reader and the jobs make, over local files or a URI
(:func:`kafkalog.tiered.filesystem.files_for`: object stores and HDFS through ``pyarrow.fs``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from kafkalog.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
)
from kafkalog.log.naming import log_file
from kafkalog.log.read.data_dir_view import (
    PartitionDir,
    list_partition_dirs,
    read_offset_checkpoint,
)
from kafkalog.log.read.partition_view import PartitionView, open_partition_view
from kafkalog.log.read.partition_view import segment_bases as _segment_bases
from kafkalog.tiered.filesystem import files_for
from kafkalog.tiered.remote_segments import RemoteStorage

__all__ = ["PartitionDir", "PartitionBounds", "list_partitions", "segment_bases", "segment_path",
           "read_log_start_checkpoint", "read_cleaner_checkpoint", "partition_bounds",
           "offset_for_timestamp", "open_partition", "configure_tiered"]

def list_partitions(data_dir: str) -> List[PartitionDir]:
    """Partition directories of ``data_dir`` sorted by topic then partition."""
    return list_partition_dirs(files_for(data_dir), data_dir)


def segment_bases(partition_dir: str) -> List[int]:
    """Sorted base offsets of the ``.log`` segments of a partition directory."""
    return _segment_bases(files_for(partition_dir), partition_dir)


def segment_path(partition_dir: str, base: int) -> str:
    return log_file(partition_dir, base)


#: data directory -> (its tiered storage, failOnDataLoss), set by each process of a read
_TIERED: Dict[str, Tuple[Optional[RemoteStorage], bool]] = {}
_TIERED_LOCK = threading.Lock()


def configure_tiered(data_dir: str, remote: Optional[RemoteStorage], fail_on_data_loss: bool
                     ) -> None:
    """Where the older segments of ``data_dir``'s partitions are (Kafka's tiered storage), and
    whether offsets deleted from there fail a read (``failOnDataLoss``) or are skipped."""
    with _TIERED_LOCK:
        _TIERED[data_dir.rstrip("/")] = (remote, fail_on_data_loss)


def open_partition(pdir: PartitionDir, log_start_checkpoint: Optional[int] = None, *,
                   log_end_offset: Optional[int] = None) -> PartitionView:
    """A read-only snapshot of one partition directory, with its segments in remote storage
    when the read configured them (close it, or use it as a context). ``log_end_offset``: one
    the caller already knows and reads below (the view then does not look for it)."""
    remote, fail = _TIERED.get(pdir.path.rstrip("/").rsplit("/", 1)[0], (None, True))
    return open_partition_view(pdir.path, pdir.topic, pdir.partition, files=files_for(pdir.path),
                               log_start_checkpoint=log_start_checkpoint, open_all=False,
                               remote=remote, fail_on_data_loss=fail,
                               log_end_offset=log_end_offset)


def _checkpoint(data_dir: str, name: str) -> Dict[Tuple[str, int], int]:
    return {(tp.topic, tp.partition): off
            for tp, off in read_offset_checkpoint(files_for(data_dir), data_dir, name).items()}


def read_log_start_checkpoint(data_dir: str) -> Dict[Tuple[str, int], int]:
    return _checkpoint(data_dir, LOG_START_OFFSET_CHECKPOINT_FILE)


def read_cleaner_checkpoint(data_dir: str) -> Dict[Tuple[str, int], int]:
    """``cleaner-offset-checkpoint``: the first dirty offset of each compacted partition."""
    return _checkpoint(data_dir, CLEANER_OFFSET_CHECKPOINT_FILE)


@dataclass(frozen=True)
class PartitionBounds:
    """Log start offset and log end offset of one partition as found on disk."""
    log_start_offset: int
    log_end_offset: int


def partition_bounds(pdir: PartitionDir, checkpoint: Optional[Dict[Tuple[str, int], int]] = None
                     ) -> PartitionBounds:
    """Log start offset (first segment base, raised by ``log-start-offset-checkpoint``) and log
    end offset."""
    cp = (checkpoint or {}).get((pdir.topic, pdir.partition))
    with open_partition(pdir, cp) as view:
        return PartitionBounds(view.log_start_offset, view.log_end_offset)


def offset_for_timestamp(pdir: PartitionDir, timestamp: int, start_offset: int) -> Optional[int]:
    """Kafka's ListOffsets for ``timestamp`` (spec §4.7): the first offset >= ``start_offset``
    of a record with a timestamp >= ``timestamp``; None when there is none."""
    with open_partition(pdir) as view:
        found = view.offset_for_timestamp_from(timestamp, start_offset)
    return None if found is None else found.offset
