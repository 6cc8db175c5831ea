"""Small value types of a read shared by the segment, the partition log and the broker: the byte
slice of a segment a fetch answers with, offset metadata and the read result (Kafka's
``FileRecords`` slice, ``LogOffsetMetadata``, ``FetchDataInfo``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional, Protocol

from kafkalog.errors import KafkalogIOError
from kafkalog.log.index.txn_index import AbortedTxn

UNKNOWN_OFFSET = -1


class LogOffsetMetadata(NamedTuple):
    """An offset plus, when known, the base offset of its segment and its byte position there
    (immutable; a tuple, made on every read)."""

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset == UNKNOWN_OFFSET


class _Source(Protocol):
    """The file a slice reads (:class:`~kafkalog.log.file_records.FileRecords`): its descriptor
    may be evicted and reopened between two uses, so a slice never keeps it."""

    def read_at(self, position: int, n: int) -> bytes: ...
    def send_to(self, out_fd: int, position: int, size: int) -> int: ...
    def dup(self) -> int: ...


class FileSlice:
    """A zero-copy view of ``size`` bytes at ``position`` of a segment's ``.log`` file.

    The bytes are only read when asked for (:meth:`read`) or sent with ``os.sendfile``
    (:meth:`send_to`). The slice may end inside a batch (Kafka's fetch semantics, spec §4.6).
    A slice of a segment (``source``) reads through it; :meth:`duplicate` makes a slice that
    owns a descriptor of its own (``fd``, closed by its holder), which outlives the segment's.
    """

    __slots__ = ("path", "fd", "position", "size", "source")

    def __init__(self, path: str, fd: int, position: int, size: int,
                 source: Optional[_Source] = None) -> None:
        self.path = path
        self.fd = fd
        self.position = position
        self.size = size
        self.source = source

    def __len__(self) -> int:
        return self.size

    def duplicate(self) -> FileSlice:
        """The same bytes through a descriptor of the caller's own (``os.dup``)."""
        src = self.source
        fd = os.dup(self.fd) if src is None else src.dup()
        return FileSlice(self.path, fd, self.position, self.size)

    def read(self) -> bytes:
        """The slice's bytes (``os.pread``; short when the file was truncated meanwhile)."""
        if self.size <= 0:
            return b""
        try:
            if self.source is not None:
                return self.source.read_at(self.position, self.size)
            return os.pread(self.fd, self.size, self.position)
        except OSError as e:
            raise KafkalogIOError(f"read failed: {e.strerror}", file=self.path,
                                  position=self.position) from e

    def send_to(self, out_fd: int) -> int:
        """Send the slice to ``out_fd`` (a socket or file descriptor) with ``os.sendfile``; returns the
        bytes sent."""
        if self.source is not None:
            return self.source.send_to(out_fd, self.position, self.size)
        sent = 0
        while sent < self.size:
            n = os.sendfile(out_fd, self.fd, self.position + sent, self.size - sent)
            if n == 0:
                break
            sent += n
        return sent


EMPTY_SLICE = FileSlice("", -1, 0, 0)


@dataclass
class FetchDataInfo:
    """The result of a read: where it starts and the raw file bytes (possibly empty)."""

    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice = field(default_factory=lambda: EMPTY_SLICE)
    first_entry_incomplete: bool = False
    # read_committed only: aborted transactions overlapping the fetch (spec §4.6 step 7)
    aborted_transactions: Optional[List[AbortedTxn]] = None

    def read(self) -> bytes:
        return self.records.read()
