"""The aborted-transaction index ``.txnindex`` (Kafka's ``TransactionIndex`` / ``AbortedTxn``,
spec §2.4).

A plain append-only file (not mapped, not preallocated) of 34-byte entries, created on the first
append: ``int16 version (0)``, ``int64 producer_id``, ``int64 first_offset``, ``int64 last_offset``
(the ABORT marker), ``int64 last_stable_offset``. A trailing partial entry is ignored.
"""

from __future__ import annotations

import os
import struct
from typing import Iterable, Iterator, List, NamedTuple, Optional, Tuple

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log.fsutil import io_error
from kafkalog.log.index._index_file import IndexFile

__all__ = ["AbortedTxn", "TransactionIndex", "TxnIndexSearchResult", "ENTRY", "ENTRY_SIZE", "CURRENT_VERSION"]

ENTRY_SIZE = 34
CURRENT_VERSION = 0
#: an entry: version, producer id, first offset, last offset, last stable offset
ENTRY = struct.Struct(">hqqqq")
_BODY = struct.Struct(">qqqq")
_READ_CHUNK = ENTRY_SIZE * 4096


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, first offset, ABORT-marker offset and the LSO at the
    time of the abort."""
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """The 34-byte entry (version 0)."""
        return ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, pos: int = 0, file: Optional[str] = None) -> AbortedTxn:
        """Parse the 34-byte entry at ``pos``; :class:`CorruptIndexError` on a version > 0 (the
        version is read from the first byte only, like Kafka) or a short buffer."""
        if len(buf) - pos < ENTRY_SIZE:
            raise CorruptIndexError("Truncated aborted transaction entry", file=file, position=pos)
        version = buf[pos]
        if version > 127:
            version -= 256
        if version > CURRENT_VERSION:
            raise CorruptIndexError(f"Unexpected aborted transaction version {version}",
                                    file=file, position=pos)
        return cls(*_BODY.unpack_from(buf, pos + 2))


class TxnIndexSearchResult(NamedTuple):
    """Result of :meth:`TransactionIndex.collect_aborted_txns`."""
    aborted_transactions: List[AbortedTxn]
    is_complete: bool


def collect_aborted_txns(entries: Iterable[AbortedTxn], fetch_offset: int,
                         upper_bound_offset: int) -> TxnIndexSearchResult:
    """Kafka's ``TransactionIndex.collectAbortedTxns`` over the entries of one ``.txnindex``:
    those with ``last_offset >= fetch_offset and first_offset < upper_bound_offset``, complete
    (stop) at the first entry with ``last_stable_offset >= upper_bound_offset``."""
    out: List[AbortedTxn] = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            out.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(out, True)
    return TxnIndexSearchResult(out, False)


def parse_txn_index(data: bytes, file: Optional[str] = None) -> List[AbortedTxn]:
    """Every complete entry of the bytes of a ``.txnindex`` (a trailing partial entry is
    ignored, as by :class:`TransactionIndex`)."""
    usable = len(data) // ENTRY_SIZE * ENTRY_SIZE
    return [AbortedTxn.from_bytes(data, off, file) for off in range(0, usable, ENTRY_SIZE)]


class TransactionIndex(IndexFile):
    """A segment's ``.txnindex`` (path, renaming and deletion from
    :class:`~kafkalog.log.index._index_file.IndexFile`).

    Args:
        start_offset: the segment's base offset (used by :meth:`sanity_check`).
        path: the file; it need not exist (created on first :meth:`append`).
    """

    def __init__(self, start_offset: int, path: os.PathLike[str] | str, *, absent: bool = False) -> None:
        """``absent``: the caller knows the file does not exist (a log's load, from its listing
        of the directory): it is not looked for (it is made at the first entry, as always)."""
        self.start_offset = start_offset
        self._path = os.fspath(path)
        self._fd = -1
        self._last_offset: Optional[int] = None
        self._size = 0
        #: an entry was appended or the file truncated since it was opened (a flush has work)
        self.written = False
        if not absent and self._open(create=False):   # (one open, no stat first: absent is the common case)
            last = None
            try:
                for txn, _ in self._iterate():
                    last = txn.last_offset
            except BaseException:
                self.close()        # an entry that does not parse: no descriptor outlives the error
                raise
            self._last_offset = last

    _file_kind = "transaction index"

    # --- file handling --------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return self.start_offset

    def _open(self, create: bool = True) -> bool:
        """Open the file (made when ``create``); False when it does not exist and is not made."""
        try:
            self._fd = os.open(self._path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as err:
            self._fd = -1
            if not create and isinstance(err, FileNotFoundError):
                return False
            raise io_error(err, self._path, "open transaction index") from err
        return True

    def exists(self) -> bool:
        return self._fd >= 0 or os.path.exists(self._path)

    def _iterate(self) -> Iterator[Tuple[AbortedTxn, int]]:
        """(entry, byte position) for every complete entry; a trailing partial entry is ignored."""
        if self._fd < 0:
            return
        size = self._size
        pos = 0
        while pos + ENTRY_SIZE <= size:
            want = min(_READ_CHUNK, (size - pos) // ENTRY_SIZE * ENTRY_SIZE)
            try:
                chunk = os.pread(self._fd, want, pos)
            except OSError as err:
                raise io_error(err, self._path, "read transaction index") from err
            if len(chunk) < ENTRY_SIZE:
                return
            usable = len(chunk) // ENTRY_SIZE * ENTRY_SIZE
            for off in range(0, usable, ENTRY_SIZE):
                yield AbortedTxn.from_bytes(chunk, off, self._path) if chunk[off] else \
                    AbortedTxn(*_BODY.unpack_from(chunk, off + 2)), pos + off
            pos += usable

    # --- public API -----------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Append an entry; its ``last_offset`` must exceed the previous entry's
        (:class:`InvalidOffsetError`). Creates the file on first use."""
        if self._last_offset is not None and self._last_offset >= txn.last_offset:
            raise InvalidOffsetError(
                f"The last offset of appended transactions must increase sequentially, but "
                f"{txn.last_offset} is not greater than current last offset {self._last_offset} of "
                f"index {self._path}", file=self._path, position=self._size)
        if self._fd < 0:
            self._open()
        data = txn.to_bytes() if isinstance(txn, AbortedTxn) else AbortedTxn(*txn).to_bytes()
        try:
            os.pwrite(self._fd, data, self._size)
        except OSError as err:
            raise io_error(err, self._path, "append to transaction index") from err
        self._size += ENTRY_SIZE
        self._last_offset = txn.last_offset
        self.written = True

    def all_entries(self) -> List[AbortedTxn]:
        """Every complete entry in file order."""
        return [t for t, _ in self._iterate()]

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries with ``last_offset >= fetch_offset and first_offset < upper_bound_offset``;
        complete (stop) at the first entry with ``last_stable_offset >= upper_bound_offset``."""
        return collect_aborted_txns((t for t, _ in self._iterate()), fetch_offset, upper_bound_offset)

    def truncate_to(self, offset: int) -> None:
        """Truncate the file at the first entry whose ``last_offset >= offset``."""
        new_last = None
        for txn, pos in self._iterate():
            if txn.last_offset >= offset:
                self._truncate_file(pos)
                self._last_offset = new_last
                return
            new_last = txn.last_offset

    def _truncate_file(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError as err:
            raise io_error(err, self._path, "truncate transaction index") from err
        self._size = size
        self.written = True

    def reset(self) -> None:
        """Truncate to 0 bytes (the file stays if it existed)."""
        if self._fd >= 0:
            self._truncate_file(0)
        self._last_offset = None

    def sanity_check(self) -> None:
        """:class:`CorruptIndexError` if an entry's ``last_offset`` is below ``start_offset`` (or
        an entry has an unknown version)."""
        for txn, pos in self._iterate():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index {self._path} is less than "
                    f"start offset {self.start_offset}", file=self._path, position=pos)

    def flush(self) -> None:
        """fsync the file (if it exists)."""
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as err:
                raise io_error(err, self._path, "flush transaction index") from err

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    close_handler = close

    @property
    def is_empty(self) -> bool:
        return self._size < ENTRY_SIZE

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"TransactionIndex({self.start_offset}, {self._path!r})"
