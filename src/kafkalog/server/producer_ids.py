"""Producer ID allocation, crash-safe (Kafka's ``ProducerIdManager`` on one node).

IDs are handed out from blocks of :data:`BLOCK_SIZE`; the end of the current block is written to
``kafkalog-producer-ids`` in the data directory (atomic rename, fsync) *before* any ID of the block
is used, so a restart, even after SIGKILL, continues after every ID that may have been returned.

Temporary home: helper "producer" is writing ``kafkalog/coordinator/producer_ids.py`` for the
embedded client; the broker will use that one once it lands (this module stays this small so the
swap is one import).
"""

from __future__ import annotations

import os
import threading

from kafkalog.errors import CorruptCheckpointError
from kafkalog.log.fsutil import atomic_write

PRODUCER_IDS_FILE = "kafkalog-producer-ids"
BLOCK_SIZE = 1000


class ProducerIdAllocator:
    """Allocate producer IDs that are never reused across restarts of the data directory."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, PRODUCER_IDS_FILE)
        self._lock = threading.Lock()
        self._next = self._read()
        self._block_end = self._next

    def _read(self) -> int:
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode("ascii", "replace").strip()
        except FileNotFoundError:
            return 0
        if not text.startswith("next.producer.id="):
            raise CorruptCheckpointError("expected next.producer.id=<n>", file=self.path, position=0)
        try:
            value = int(text.split("=", 1)[1])
        except ValueError:
            raise CorruptCheckpointError("next.producer.id is not an integer", file=self.path,
                                         position=len("next.producer.id=")) from None
        if value < 0:
            raise CorruptCheckpointError("next.producer.id is negative", file=self.path, position=0)
        return value

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + BLOCK_SIZE
                atomic_write(self.path, f"next.producer.id={end}\n".encode("ascii"))
                self._block_end = end
            pid = self._next
            self._next += 1
            return pid
