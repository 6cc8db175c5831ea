"""The file access of the read-only view (:mod:`kafkalog.log.read.partition_view`,
:mod:`kafkalog.log.read.data_dir_view`): every byte the view reads goes through one small interface,
:class:`ViewFiles` (list a directory, size, read a small file whole, read a byte range, open a
``.log`` as a buffer), so the same view reads a local data directory today and an object store
(``pyarrow.fs``: listing, whole small files, ranged reads of ``.log`` files) later.

:class:`LocalFiles` is the POSIX implementation: listings with ``os.listdir``, small files read
whole, ``.log`` files memory-mapped read-only up to the size seen when opened (a snapshot: bytes a
writer appends later are never seen, and a file deleted later stays readable through the map).
"""

from __future__ import annotations

import mmap
import os
from typing import List, Optional, Protocol, Union

from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.fsutil import io_error

__all__ = ["ViewFiles", "LocalFiles", "Buffer", "SegmentBytes", "RangeSource"]

#: what a view reads batches from: a read-only memory map or bytes
Buffer = Union[mmap.mmap, bytes]

#: small files (indexes, checkpoints, topic configs) larger than this are refused
MAX_SMALL_FILE_BYTES = 1 << 30


class RangeSource(Protocol):
    """Reads ``length`` bytes at ``position`` of one file (fewer at its end)."""

    def __call__(self, position: int, length: int) -> bytes: ...

    def close(self) -> None: ...


class SegmentBytes:
    """The first :attr:`size` bytes of one ``.log`` file, released by :meth:`close`: a buffer
    (local files: a read-only map), or, with ``ranges``, a reader of byte ranges of a file of
    ``size`` bytes (object stores: ranged GETs; ``buf`` is then empty)."""

    def __init__(self, path: str, buf: Buffer, *, size: Optional[int] = None,
                 ranges: Optional[RangeSource] = None) -> None:
        self.path = path
        self.buf = buf
        self.ranges = ranges
        self._size = len(buf) if size is None else size

    @property
    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self.ranges is not None:
            self.ranges.close()
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:          # a batch view still references it; the GC unmaps it
                pass


class ViewFiles(Protocol):
    """What the read-only view needs from a file system. Paths are strings joined with
    :meth:`join` (object stores use ``/``)."""

    def join(self, directory: str, name: str) -> str:
        """``directory/name``."""
        ...

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory (a prefix holding objects, on object stores)."""
        ...

    def list_dir(self, path: str) -> List[str]:
        """Names of the entries of directory ``path`` (:class:`LogDirError` when it is none)."""
        ...

    def read_small(self, path: str) -> Optional[bytes]:
        """The whole content of a small file (index, checkpoint, config); None when missing."""
        ...

    def size(self, path: str) -> Optional[int]:
        """The size of a file in bytes; None when it does not exist."""
        ...

    def read_range(self, path: str, position: int, length: int) -> bytes:
        """Up to ``length`` bytes of a file from ``position`` (fewer at its end): a ranged GET on
        object stores."""
        ...

    def open_segment(self, path: str) -> Optional[SegmentBytes]:
        """The bytes of a ``.log`` file as of now; None when it no longer exists."""
        ...


class LocalFiles:
    """:class:`ViewFiles` over the local file system (read-only memory maps of ``.log`` files)."""

    def join(self, directory: str, name: str) -> str:
        return os.path.join(directory, name)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def list_dir(self, path: str) -> List[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            raise LogDirError("directory does not exist", file=path) from None
        except OSError as err:
            raise io_error(err, path, "list directory") from err

    def read_small(self, path: str) -> Optional[bytes]:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_SMALL_FILE_BYTES:
                    raise KafkalogError(f"file of {size} bytes is too large to read whole",
                                        file=path)
                return f.read(size)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise io_error(err, path, "read") from err

    def size(self, path: str) -> Optional[int]:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None
        except OSError as err:
            raise io_error(err, path, "stat") from err

    def read_range(self, path: str, position: int, length: int) -> bytes:
        try:
            with open(path, "rb") as f:
                return os.pread(f.fileno(), length, position)
        except OSError as err:
            raise io_error(err, path, "read") from err

    def open_segment(self, path: str) -> Optional[SegmentBytes]:
        try:
            f = open(path, "rb")
        except FileNotFoundError:                  # deleted by a writer since the listing
            return None
        except OSError as err:
            raise io_error(err, path, "open segment") from err
        with f:
            size = os.fstat(f.fileno()).st_size
            buf: Buffer = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b""
        return SegmentBytes(path, buf)
