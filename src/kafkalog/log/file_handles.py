"""The process-wide bound on open segment descriptors: an LRU of the ``.log`` files' descriptors
(:class:`~kafkalog.log.file_records.FileRecords`), the least recently used closed beyond the bound,
reopened by path on their next use. A kafkalog addition: Kafka keeps every segment's channel open
for the life of the log, so a node's partitions are bounded by its open-files limit.

The bound is :data:`DEFAULT_FRACTION` of the soft ``RLIMIT_NOFILE`` when the module is imported
(the rest is left to sockets, index files being opened and mapped, checkpoints, clients); raise
the open-files limit to keep more descriptors open. No configuration key (Kafka has none).

Rules (each a promise to the callers of ``FileRecords``):

* a descriptor in use is never closed: a user *pins* it (appends itself to the owner's ``users``
  list, then reads the owner's descriptor); the evictor, holding the lock, first sets the owner's
  descriptor to -1, then looks at ``users``: a pinned owner gets its descriptor back and stays.
  Under the GIL list appends and attribute stores are atomic and ordered, so either the user sees
  -1 (and reopens through :meth:`FileHandles.reopen`, which waits for the lock) or the evictor
  sees the pin. One pin costs a list append and pop and an ``OrderedDict.move_to_end``, nothing
  that grows with the number of files;
* nothing acknowledged is lost: a descriptor with appends not yet fsynced (``unflushed``) is
  fsynced before it is closed. Linux reports a writeback error only to the descriptors open when
  it happened (and to the next opener only while the inode stays cached), so closing a descriptor
  with dirty pages could hide the loss of acknowledged data from the next ``flush``. The fsync is
  not the evicting request's cost: the descriptor goes to :data:`SYNC_THREADS` threads that fsync
  and close it (parallel fsyncs share the file system's journal commits: 256 small files in 44 ms
  instead of 700 ms one after the other, measured here); at most :attr:`FileHandles.headroom`
  wait for theirs, beyond that an eviction waits for room. An fsync that fails is kept on the
  owner (``write_error``) and raised by its next ``flush``, which also waits for the evicted
  descriptors of its file to be synced;
* renames happen under the lock (:meth:`FileHandles.rename`), so a reopen never looks for the old
  name; a closed owner is never reopened.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Protocol

from kafkalog.errors import KafkalogIOError

#: the share of the soft open-files limit segment descriptors may hold by default
DEFAULT_FRACTION = 0.5
#: never fewer than this many (a tiny limit still serves one partition's segments)
MIN_HANDLES = 16
#: threads fsyncing (then closing) evicted descriptors that hold unflushed appends
SYNC_THREADS = 8


class HandleOwner(Protocol):
    """What the LRU needs of a file (:class:`~kafkalog.log.file_records.FileRecords`)."""

    path: str
    fd: int
    users: list[None]
    unflushed: bool
    closed: bool
    write_error: Optional[KafkalogIOError]


def default_limit() -> int:
    """:data:`DEFAULT_FRACTION` of the soft ``RLIMIT_NOFILE`` (at least :data:`MIN_HANDLES`)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_HANDLES, int(soft * DEFAULT_FRACTION))


class FileHandles:
    """An LRU of open owners, bounded by ``limit`` descriptors (pinned ones may exceed it for the
    duration of their use)."""

    def __init__(self, limit: Optional[int] = None) -> None:
        self.lock = threading.Lock()
        #: the open owners, least recently used first; ``lru.move_to_end(owner)`` is the touch
        #: (callers on hot paths call it directly; a KeyError means the owner is being evicted)
        self.lru: OrderedDict[HandleOwner, None] = OrderedDict()
        self.limit = default_limit() if limit is None else max(MIN_HANDLES, limit)
        #: evicted descriptors waiting for their fsync, at most (beyond ``limit``)
        self.headroom = max(SYNC_THREADS, self.limit // 8)
        self._room = threading.Semaphore(self.headroom)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._sync_lock = threading.Lock()
        #: owners with evicted descriptors still to fsync: how many
        self._syncing: dict[HandleOwner, int] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.lru)

    def add(self, owner: HandleOwner) -> None:
        """Count the descriptor ``owner`` just opened, evicting others beyond the bound."""
        with self.lock:
            self.lru[owner] = None
            self._evict()

    def reopen(self, owner: HandleOwner) -> int:
        """The descriptor of ``owner`` (pinned by the caller), opened again by path if it was
        evicted."""
        with self.lock:
            fd = owner.fd
            if fd >= 0:
                return fd
            if owner.closed:
                raise KafkalogIOError("read from a closed log file", file=owner.path)
            try:
                fd = os.open(owner.path, os.O_RDWR)
            except OSError as e:
                raise KafkalogIOError(f"cannot reopen log file: {e.strerror}", file=owner.path) from e
            owner.fd = fd
            self.lru[owner] = None
            self._evict()
            return fd

    def discard(self, owner: HandleOwner) -> None:
        """Forget ``owner`` (it closes its descriptor itself)."""
        with self.lock:
            self.lru.pop(owner, None)

    def rename(self, owner: HandleOwner, new_path: str) -> None:
        """Rename the file of ``owner`` with no reopen in between looking for either name."""
        with self.lock:
            os.rename(owner.path, new_path)
            owner.path = new_path

    def _evict(self) -> None:
        """Close least recently used descriptors until at most ``limit`` are open (lock held);
        pinned ones are passed over (moved to the young end)."""
        od = self.lru
        tries = len(od)
        while len(od) > self.limit and tries > 0:
            tries -= 1
            owner = next(iter(od))
            fd = owner.fd
            owner.fd = -1
            if owner.users:                 # in use: give it back (see the module's rules)
                owner.fd = fd
                od.move_to_end(owner)
                continue
            del od[owner]
            self.evictions += 1
            if fd < 0:
                continue
            if not owner.unflushed:
                os.close(fd)
                continue
            owner.unflushed = False
            with self._sync_lock:
                self._syncing[owner] = self._syncing.get(owner, 0) + 1
            self._room.acquire()            # backpressure: at most ``headroom`` wait for an fsync
            if self._pool is None:
                self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="kafkalog-fd-sync")
            self._pool.submit(self._sync_close, owner, fd)

    def _sync_close(self, owner: HandleOwner, fd: int) -> None:
        """fsync then close an evicted descriptor (a sync thread)."""
        try:
            os.fsync(fd)
        except OSError as e:
            owner.write_error = KafkalogIOError(
                f"fsync before closing an idle log file failed: {e.strerror}", file=owner.path)
        finally:
            os.close(fd)
            self._room.release()
            with self._sync_lock:
                left = self._syncing.pop(owner, 1) - 1
                if left:
                    self._syncing[owner] = left

    def wait_synced(self, owner: HandleOwner) -> None:
        """Return once every evicted descriptor of ``owner`` was fsynced (and closed)."""
        while owner in self._syncing:
            time.sleep(0.001)


#: the process's one LRU
HANDLES = FileHandles()
