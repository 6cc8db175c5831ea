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
  that grows with the number of files. That touch takes no lock, so the evictor never iterates
  ``lru``: it takes its oldest owner out with ``popitem`` (one C call) and puts a pinned one back
  (a touch meanwhile raises KeyError and waits for the lock: :meth:`FileHandles.touch`);
* nothing acknowledged is lost: a descriptor with appends not yet fsynced (``unflushed``) is
  fsynced before it is closed. Linux reports a writeback error only to the descriptors open when
  it happened (and to the next opener only while the inode stays cached), so closing a descriptor
  with dirty pages could hide the loss of acknowledged data from the next ``flush``. An fsync that
  fails is kept on the owner (``write_error``) and raised by its next ``flush``, which also waits
  for the fsyncs of its file in flight;
* clean descriptors go first and an eviction never waits for an fsync: the least recently used
  descriptor *without* unflushed appends is closed. A dirty one met at the old end is *parked*
  (still open, still counted) and handed to :data:`SYNC_THREADS` threads that fsync it (parallel
  fsyncs share the file system's journal commits: 256 small files in 44 ms instead of 700 ms one
  after the other, measured here); clean once synced, it is closed by the next eviction (or by the
  sync thread itself). While only dirty descriptors are left the set goes over its bound by the
  parked ones rather than making the opener (the broker's event loop) wait for their fsyncs --
  before, at 30,000 partitions up to 1,250 such waits at a time held the loop and another client
  waited 682 ms. The overshoot comes out of the half of the open-files limit left to sockets and
  index files and is capped at :attr:`FileHandles.headroom` descriptors waiting for their fsync:
  only beyond that (the disk syncs slower than partitions are written) does an eviction wait for
  room, counted in :attr:`FileHandles.waits`;
* renames happen under the lock (:meth:`FileHandles.rename`), so a reopen never looks for the old
  name; a closed owner is never reopened.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import OrderedDict, deque
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
    duration of their use, dirty ones until their fsync is done: see the module's rules)."""

    def __init__(self, limit: Optional[int] = None) -> None:
        self.lock = threading.Lock()
        #: the open owners, least recently used first; ``lru.move_to_end(owner)`` is the touch
        #: (callers on hot paths call it directly; a KeyError means the owner is being evicted or
        #: parked: :meth:`touch`)
        self.lru: OrderedDict[HandleOwner, None] = OrderedDict()
        #: open owners found dirty at the old end of ``lru`` while clean ones were left (in the
        #: order they were found); still open, still counted
        self.parked: OrderedDict[HandleOwner, None] = OrderedDict()
        #: parked owners handed to the sync threads once no clean one was left; closed by an
        #: eviction once synced
        self.cleaning: OrderedDict[HandleOwner, None] = OrderedDict()
        self.limit = default_limit() if limit is None else max(MIN_HANDLES, limit)
        #: parked descriptors waiting for their fsync beyond ``limit``, at most
        self.headroom = max(SYNC_THREADS, self.limit // 4)
        self._room = threading.Semaphore(self.headroom)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._sync_lock = threading.Lock()
        #: owners with fsyncs in flight on the sync threads: how many
        self._syncing: dict[HandleOwner, int] = {}
        #: owners whose fsync by a sync thread ended, in that order (closed by :meth:`_evict`)
        self._synced: deque[HandleOwner] = deque()
        #: descriptors closed by the bound
        self.evictions = 0
        #: fsyncs handed to the sync threads by evictions (dirty descriptors at the old end)
        self.eviction_syncs = 0
        #: evictions that waited for room (more than ``headroom`` fsyncs in flight)
        self.waits = 0

    def __len__(self) -> int:
        return len(self.lru) + len(self.parked) + len(self.cleaning)

    def add(self, owner: HandleOwner) -> None:
        """Count the descriptor ``owner`` just opened, evicting others beyond the bound."""
        with self.lock:
            self.lru[owner] = None
            owner.users.append(None)        # (opened to be used: not the one to close)
            try:
                self._evict()
            finally:
                owner.users.pop()

    def reopen(self, owner: HandleOwner) -> int:
        """The descriptor of ``owner`` (pinned by the caller), opened again by path if it was
        evicted."""
        with self.lock:
            fd = owner.fd
            if fd >= 0:
                self._unpark(owner)
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

    def touch(self, owner: HandleOwner) -> None:
        """The touch of an owner not in ``lru`` (a parked one is used again: back to the young
        end)."""
        with self.lock:
            self._unpark(owner)

    def _unpark(self, owner: HandleOwner) -> None:
        if owner.fd >= 0 and (self.parked.pop(owner, 0) is None or self.cleaning.pop(owner, 0) is None):
            self.lru[owner] = None

    def discard(self, owner: HandleOwner) -> None:
        """Forget ``owner`` (it closes its descriptor itself)."""
        with self.lock:
            self.lru.pop(owner, None)
            self.parked.pop(owner, None)
            self.cleaning.pop(owner, None)

    def rename(self, owner: HandleOwner, new_path: str) -> None:
        """Rename the file of ``owner`` with no reopen in between looking for either name."""
        with self.lock:
            os.rename(owner.path, new_path)
            owner.path = new_path

    def _evict(self) -> None:
        """Close least recently used clean descriptors until at most ``limit`` are open (lock
        held): synced ones first (they are the oldest), then ``lru``'s from its old end, where
        pinned ones are passed over (moved to the young end) and dirty ones parked. Only when no
        clean one is left do parked ones go to the sync threads, as many as the bound is exceeded
        by; the set stays over its bound until they are synced (the sync threads then evict)."""
        od, parked, cleaning = self.lru, self.parked, self.cleaning
        tries = len(od)
        while True:
            over = len(od) + len(parked) + len(cleaning) - self.limit
            if over <= 0:
                return
            if cleaning and self._close_synced():
                continue
            if parked:
                owner = next(iter(parked))
                if not owner.unflushed and self._close(owner):   # flushed since it was parked
                    del parked[owner]
                    continue
            if od and tries > 0:
                tries -= 1
                # (taken out with one C call: users touch ``od`` without the lock, and an
                # iterator over it fails if a touch lands between its creation and its first step)
                owner, _ = od.popitem(last=False)
                if owner.unflushed:
                    parked[owner] = None
                elif not self._close(owner):
                    od[owner] = None                 # pinned: back to the young end
                continue
            if parked and len(cleaning) < over:
                owner = next(iter(parked))
                del parked[owner]
                cleaning[owner] = None
                if owner.unflushed:
                    self._sync_later(owner)
                continue
            return

    def _close_synced(self) -> bool:
        """Close one of the ``cleaning`` owners whose fsync is done, in the order the fsyncs
        ended (``_synced``). Whether one was closed."""
        synced, cleaning = self._synced, self.cleaning
        while synced:
            owner = synced.popleft()
            # (one used meanwhile went back to ``lru``; one in use now goes back when its user
            # touches it)
            if owner in cleaning and not owner.unflushed and owner not in self._syncing \
                    and self._close(owner):
                del cleaning[owner]
                return True
        return False

    def _close(self, owner: HandleOwner) -> bool:
        """Close the descriptor of a clean ``owner`` unless it is in use (see the module's rules:
        the descriptor is taken first, then the pins are looked at)."""
        fd = owner.fd
        owner.fd = -1
        if owner.users:
            owner.fd = fd
            return False
        self.evictions += 1
        if fd >= 0:
            os.close(fd)
        return True

    def _sync_later(self, owner: HandleOwner) -> None:
        """Hand the fsync of a parked ``owner`` to the sync threads (lock held); waits only when
        ``headroom`` are in flight already."""
        if not self._room.acquire(blocking=False):
            self.waits += 1
            self._room.acquire()            # the last resort: the disk syncs slower than written
        with self._sync_lock:
            self._syncing[owner] = self._syncing.get(owner, 0) + 1
        self.eviction_syncs += 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="kafkalog-fd-sync")
        self._pool.submit(self._sync, owner)

    def _sync(self, owner: HandleOwner) -> None:
        """fsync a parked descriptor, pinned (a sync thread), then close what the bound allows."""
        try:
            owner.users.append(None)
            try:
                fd = owner.fd
                if fd >= 0:
                    owner.unflushed = False         # (an append from now on sets it again)
                    try:
                        os.fsync(fd)
                    except OSError as e:
                        owner.write_error = KafkalogIOError(
                            f"fsync before closing an idle log file failed: {e.strerror}",
                            file=owner.path)
            finally:
                owner.users.pop()
        finally:
            self._room.release()
            with self._sync_lock:
                left = self._syncing.pop(owner, 1) - 1
                if left:
                    self._syncing[owner] = left
            self._synced.append(owner)
        if self.lock.acquire(blocking=False):       # (else the next opener evicts)
            try:
                self._evict()
            finally:
                self.lock.release()

    def wait_synced(self, owner: HandleOwner) -> None:
        """Return once every fsync of ``owner`` handed to the sync threads is done."""
        while owner in self._syncing:
            time.sleep(0.001)


#: the process's one LRU
HANDLES = FileHandles()
