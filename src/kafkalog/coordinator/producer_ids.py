"""Producer id allocation (Kafka's ``ProducerIdManager``): ids are handed out from blocks of
:data:`PRODUCER_ID_BLOCK_SIZE`, and the end of the current block is made durable *before* any id of
the block is used, so an id is never handed out twice, even after a crash (a restart continues
after the last block reserved; the unused rest of a block is skipped, as in Kafka). In a Kafka 4
data directory the first block starts after the last block Kafka's controller allocated (its
``ProducerIdsRecord`` in ``__cluster_metadata``).

The reservation is the file :data:`PRODUCER_IDS_FILE` in the data directory: ``version`` (0) and
``nextProducerId`` (the first id of the next block), one per line, written by an atomic replace
(``.tmp`` + fsync + rename + directory fsync), the same shape as Kafka's checkpoint files.
"""

from __future__ import annotations

import os
import threading

from kafkalog.errors import CorruptProducerIdsError, KafkalogError
from kafkalog.log import fsutil
from kafkalog.log.cluster_metadata import read_kafka_metadata
from kafkalog.record.constants import INT64_MAX

__all__ = ["PRODUCER_IDS_FILE", "PRODUCER_ID_BLOCK_SIZE", "CorruptProducerIdsError", "ProducerIdManager"]

PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_IDS_FILE = "producer-ids.checkpoint"
_VERSION = 0
_MAX_PRODUCER_ID = INT64_MAX


class ProducerIdManager:
    """Allocates producer ids for one data directory (one process at a time holds its lock)."""

    def __init__(self, data_dir: os.PathLike | str) -> None:
        self.data_dir = os.fspath(data_dir)
        self.path = os.path.join(self.data_dir, PRODUCER_IDS_FILE)
        self._lock = threading.Lock()
        self._next = 0
        self._block_end = 0          # exclusive; _next == _block_end: reserve a new block first

    def _read_reserved(self) -> int:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0
        except OSError as e:
            raise fsutil.io_error(e, self.path, "read producer ids") from e
        lines = data.decode("ascii", "replace").split("\n")
        try:
            version, nxt = int(lines[0]), int(lines[1])
        except (IndexError, ValueError):
            raise CorruptProducerIdsError("malformed producer id reservation (expected version and "
                                          "nextProducerId lines)", file=self.path, position=0) from None
        if version != _VERSION or not 0 <= nxt <= _MAX_PRODUCER_ID:
            raise CorruptProducerIdsError(f"unsupported producer id reservation: version {version}, "
                                          f"nextProducerId {nxt}", file=self.path, position=0)
        return nxt

    def _reserve_block(self) -> tuple[int, int]:
        # a Kafka 4 data directory: never an id Kafka's controller handed out (its producer state
        # in the partitions would take a new producer for an old one)
        start = max(self._read_reserved(), read_kafka_metadata(self.data_dir).next_producer_id)
        end = start + PRODUCER_ID_BLOCK_SIZE
        if end > _MAX_PRODUCER_ID:
            raise KafkalogError("producer ids exhausted", file=self.path)
        fsutil.atomic_write(self.path, f"{_VERSION}\n{end}\n".encode("ascii"))
        return start, end

    def generate_producer_id(self) -> int:
        """A producer id never handed out before in this data directory."""
        with self._lock:
            if self._next >= self._block_end:
                self._next, self._block_end = self._reserve_block()
            pid = self._next
            self._next += 1
            return pid
