"""The read-only mode of the Python API: a data directory read without locking or changing it.

The reading itself is the log layer's read-only view (:class:`~kafkalog.log.read.data_dir_view.
DataDirView`, :class:`~kafkalog.log.read.partition_view.PartitionView`, a
:class:`~kafkalog.log.read.reader.PartitionReader` as a live log's); this module adds what the
client needs on top: the writing methods of a :class:`~kafkalog.log.manager.LogManager` refused,
and ``describe``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional

from kafkalog.errors import LogDirError
from kafkalog.log.config import BOOLEAN, BrokerConfig, parse_value
from kafkalog.log.fsutil import is_remote, local_path
from kafkalog.log.manager import PartitionInfo
from kafkalog.log.read.data_dir_view import DataDirView
from kafkalog.tiered.filesystem import FS_OPTIONS, files_for
from kafkalog.tiered.remote_segments import remote_storage_from_options

__all__: List[str] = []

#: the read-only option (case-insensitive, the Spark source's name) that lets a read skip offsets
#: deleted from remote storage (with a warning) instead of raising DataLossError
FAIL_ON_DATA_LOSS = "failondataloss"

class _ReadOnlyManager(DataDirView):
    """The part of :class:`~kafkalog.log.manager.LogManager` a reader needs, over a data
    directory opened read-only (``kafkalog.open(dir, read_only=True)``): no ``.lock``, no
    ``meta.properties``, no checkpoint, no recovery, no file created or changed. Partitions are
    snapshotted on first use. Writing methods raise :class:`LogDirError`."""

    def __init__(self, data_dir: os.PathLike[str] | str,
                 options: Optional[Mapping[str, Any]] = None) -> None:
        self._options: Mapping[str, Any] = dict(options or {})
        path = os.fspath(data_dir)
        if not is_remote(path):
            path = os.path.abspath(local_path(path))
        opts: Dict[str, str] = {}
        broker: Dict[str, Any] = {}     # the writable mode's keys: validated, without effect here
        for k, v in (options or {}).items():
            key = str(k).lower()
            if key in FS_OPTIONS or key.startswith("remotestorage") or key == FAIL_ON_DATA_LOSS:
                opts[key] = str(v)
            else:
                broker[str(k)] = v
        BrokerConfig(broker, strict=True)       # an unknown key is refused, not ignored
        fail = parse_value("failOnDataLoss", BOOLEAN, opts.pop(FAIL_ON_DATA_LOSS, "true"))
        super().__init__(path, files=files_for(path, opts),
                         remote=remote_storage_from_options(opts), fail_on_data_loss=fail)

    def reopened(self) -> _ReadOnlyManager:
        """A new snapshot of the same directory, with the same options (remote storage,
        ``failOnDataLoss``, ``fs.*``)."""
        return _ReadOnlyManager(self.data_dir, self._options)

    def describe(self) -> List[PartitionInfo]:
        out = []
        for tp in self.partitions():
            log = self.get_log(tp.topic, tp.partition)
            out.append(PartitionInfo(tp.topic, tp.partition, log.log_start_offset,
                                     log.log_end_offset, log.high_watermark, -1, log.size,
                                     len(log.segments), log.dir))
        return out

    def _refuse(self, *_a: Any, **_k: Any) -> Any:
        raise LogDirError("the data directory is open read-only", file=self.data_dir)

    create_topic = delete_topic = alter_topic_config = add_partitions = _refuse
    cleanup_logs = flush = write_checkpoints = _refuse

