"""The leader-epoch cache of a partition (Kafka's ``LeaderEpochFileCache``, spec §3.4), persisted
in ``leader-epoch-checkpoint`` through :class:`~kafkalog.log.checkpoint.LeaderEpochCheckpointFile`.

Entries ``(epoch, start_offset)`` are kept with both columns strictly increasing, as two lists
published together in one tuple and never changed once published: a change (under the cache's
lock) publishes new lists, so the readers, who take no lock (a fetch, Metadata, on threads other
than a truncation's: retention moving the log start offset), read both columns of one state.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left, bisect_right
from typing import Callable, ContextManager, List, Optional, Tuple

from kafkalog.errors import CorruptCheckpointError, InvalidEpochError
from kafkalog.log.checkpoint import LEADER_EPOCH_CHECKPOINT_FILE, EpochEntry, LeaderEpochCheckpointFile

__all__ = ["LeaderEpochFileCache", "EpochEntry", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET",
           "InvalidEpochError"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Epoch -> start offset of a partition.

    Args:
        checkpoint: the checkpoint file object, or a path (of the file, or of the partition dir,
            in which case ``leader-epoch-checkpoint`` inside it is used), or ``None`` for an
            in-memory cache.
        topic_partition: for messages only.
        read: False for a new partition's cache (:meth:`Log.create`): the file is not read (there
            is none yet).
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | os.PathLike[str] | str | None,
                 topic_partition: Optional[object] = None, *, read: bool = True) -> None:
        if checkpoint is not None and not isinstance(checkpoint, LeaderEpochCheckpointFile):
            p = os.fspath(checkpoint)
            if os.path.isdir(p):
                p = os.path.join(p, LEADER_EPOCH_CHECKPOINT_FILE)
            checkpoint = LeaderEpochCheckpointFile(p)
        self.checkpoint = checkpoint
        self.topic_partition = topic_partition
        self._lock = threading.RLock()
        #: (epochs, start offsets): replaced, never changed in place (see the module's docstring)
        self._cols: Tuple[List[int], List[int]] = ([], [])
        #: the entries the file holds (as read or last written; None: no file) and whether they
        #: were synced: a write of the same entries is skipped (a restart's truncate-and-assign of
        #: the same epoch rewrote every partition's file)
        self._on_disk: Optional[List[EpochEntry]] = None
        self._on_disk_synced = True
        #: writes held back while a load runs (:meth:`deferred_writes`)
        self._deferred = False
        if checkpoint is not None and read:
            entries = checkpoint.read_if_exists()
            for e in entries or ():
                if e.epoch < 0 or e.start_offset < 0:
                    raise CorruptCheckpointError(
                        f"Negative epoch or offset in leader epoch checkpoint: {e}", file=checkpoint.path)
            if entries and all(a.epoch < b.epoch and a.start_offset < b.start_offset
                               for a, b in zip(entries, entries[1:])):
                # (each assign of a file in order appends it: the columns as read)
                self._cols = ([e.epoch for e in entries], [e.start_offset for e in entries])
                self._on_disk = entries
            else:
                for e in entries or ():
                    self._assign(e.epoch, e.start_offset)
                if entries is not None:
                    self._on_disk = self.epoch_entries()

    #: called after a change of :meth:`latest_epoch` (the partition's leader epoch as Metadata
    #: answers it): the log manager keeps each topic's metadata stamp with it
    on_latest_epoch_changed: Optional[Callable[[], None]] = None

    def _latest_changed(self, before: Optional[int]) -> None:
        hook = self.on_latest_epoch_changed
        if hook is not None and self.latest_epoch() != before:
            hook()

    # --- mutation -------------------------------------------------------------------------------

    def _needs_update(self, epoch: int, start_offset: int) -> bool:
        epochs, offsets = self._cols
        if not epochs:
            return True
        return epoch != epochs[-1] or start_offset < offsets[-1]

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise InvalidEpochError(f"Received invalid partition leader epoch entry "
                                    f"EpochEntry(epoch={epoch}, startOffset={start_offset})")
        if not self._needs_update(epoch, start_offset):
            return False
        # remove (from the end) entries with epoch >= new epoch or start offset >= new offset
        epochs, offsets = self._cols
        n = len(epochs)
        while n and (epochs[n - 1] >= epoch or offsets[n - 1] >= start_offset):
            n -= 1
        self._cols = (epochs[:n] + [epoch], offsets[:n] + [start_offset])
        return True

    def assign(self, epoch: int, start_offset: int, sync: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed
        (then the checkpoint is written, fsynced unless ``sync`` is False: such a write is
        fsynced by :meth:`flush_if_unsynced`, which the log's flush calls)."""
        epochs, offsets = self._cols
        if epochs and epoch == epochs[-1] and start_offset >= offsets[-1] \
                and epoch >= 0 and start_offset >= 0:
            return False  # hot path: same epoch again
        with self._lock:
            before = self.latest_epoch()
            changed = self._assign(epoch, start_offset)
            if changed:
                self._latest_changed(before)
                self._flush(sync=sync)
            return changed

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries with ``start_offset >= end_offset``."""
        with self._lock:
            epochs, offsets = self._cols
            if end_offset >= 0 and offsets and offsets[-1] >= end_offset:
                before = self.latest_epoch()
                i = bisect_left(offsets, end_offset)
                self._cols = (epochs[:i], offsets[:i])
                self._latest_changed(before)
                self._flush(sync=False)

    def truncate_from_start(self, start_offset: int) -> None:
        """Remove entries with ``start_offset <= start_offset`` and re-insert the last removed
        epoch at ``start_offset``."""
        with self._lock:
            epochs, offsets = self._cols
            i = bisect_right(offsets, start_offset)
            if i == 0 or (i == 1 and offsets[0] == start_offset):
                return          # nothing before start_offset: the checkpoint stays as it is
            self._cols = ([epochs[i - 1]] + epochs[i:], [start_offset] + offsets[i:])
            self._flush(sync=False)

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint (a v0/v1 batch was appended)."""
        with self._lock:
            before = self.latest_epoch()
            self._cols = ([], [])
            self._latest_changed(before)
            self._flush(sync=True)

    def clear(self) -> None:
        """Remove every entry (in memory only)."""
        with self._lock:
            before = self.latest_epoch()
            self._cols = ([], [])
            self._latest_changed(before)

    def deferred_writes(self) -> ContextManager[None]:
        """Hold the checkpoint's writes back while the log is loaded (Kafka's loader truncates
        the cache with an asynchronous flush): the load's truncations to the log's offsets (and a
        recovery's truncate-and-assign of the same epochs) change the memory only. At the end the
        file is written (not fsynced: the log's flush does) only when it would be wrong: when the
        entries now held are not the file's entries or the first of them, which every load cuts
        again to the same offsets. So a restart does not rewrite every partition's checkpoint
        twice (cut to the log end offset by the load, the same epoch assigned again once led)."""
        return _DeferredWrites(self)     # (an object, not a generator's: a load enters one a partition)

    def _end_deferred(self, ok: bool) -> None:
        self._deferred = False
        if ok:
            entries = self.epoch_entries()
            disk = self._on_disk
            if disk is None or entries != disk[:len(entries)]:
                self._flush(sync=False)

    def _flush(self, sync: bool) -> None:
        if self.checkpoint is not None and not self._deferred:
            entries = self.epoch_entries()
            if entries == self._on_disk:
                if self._on_disk_synced or not sync:
                    return
                if self.checkpoint.sync_if_exists():    # (written without fsync: not written again)
                    self._on_disk_synced = True
                    return
            self.checkpoint.write_if_dir_exists(entries, sync=sync)
            self._on_disk = entries
            self._on_disk_synced = sync

    def made_with(self, entries: List[EpochEntry]) -> None:
        """The checkpoint file was just made holding ``entries`` (a new partition's files made at
        once, :meth:`Log.create`): as after :meth:`assign` without fsync (fsynced by the log's
        flush, :meth:`flush_if_unsynced`), or :meth:`ensure_file` when there are none."""
        with self._lock:
            self._cols = ([e.epoch for e in entries], [e.start_offset for e in entries])
            self._on_disk = list(entries)
            self._on_disk_synced = not entries

    def ensure_file(self) -> None:
        """Make the checkpoint file, empty, when nothing was written to it (a new partition no
        epoch was assigned to: Kafka's checkpoint file makes itself when it is constructed)."""
        if self.checkpoint is not None and self._on_disk is None:
            self.checkpoint.create_if_missing()
            self._on_disk = []

    def flush(self) -> None:
        """Write the checkpoint now."""
        with self._lock:
            self._flush(sync=True)

    def flush_if_unsynced(self) -> None:
        """Write and fsync the checkpoint if its last write was not fsynced (a truncation's, a new
        partition's first epoch): the log's flush makes it durable with the records it covers."""
        if not self._on_disk_synced:
            with self._lock:
                self._flush(sync=True)

    # --- queries --------------------------------------------------------------------------------

    def epoch_entries(self) -> List[EpochEntry]:
        epochs, offsets = self._cols
        return [EpochEntry(e, o) for e, o in zip(epochs, offsets)]

    def non_empty(self) -> bool:
        return bool(self._cols[0])

    def __len__(self) -> int:
        return len(self._cols[0])

    def latest_entry(self) -> Optional[EpochEntry]:
        epochs, offsets = self._cols
        return EpochEntry(epochs[-1], offsets[-1]) if epochs else None

    def latest_epoch(self) -> Optional[int]:
        """The latest epoch, or ``None``."""
        epochs = self._cols[0]
        return epochs[-1] if epochs else None

    def earliest_entry(self) -> Optional[EpochEntry]:
        epochs, offsets = self._cols
        return EpochEntry(epochs[0], offsets[0]) if epochs else None

    def previous_epoch(self) -> Optional[int]:
        """The epoch before the latest one, or ``None``."""
        epochs = self._cols[0]
        return epochs[-2] if len(epochs) >= 2 else None

    def previous_epoch_of(self, epoch: int) -> Optional[int]:
        """The largest epoch < ``epoch``."""
        epochs = self._cols[0]
        i = bisect_left(epochs, epoch)
        return epochs[i - 1] if i > 0 else None

    def next_epoch(self, epoch: int) -> Optional[int]:
        """The smallest epoch > ``epoch``."""
        epochs = self._cols[0]
        i = bisect_right(epochs, epoch)
        return epochs[i] if i < len(epochs) else None

    def epoch_entry(self, epoch: int) -> Optional[EpochEntry]:
        epochs, offsets = self._cols
        i = bisect_left(epochs, epoch)
        if i < len(epochs) and epochs[i] == epoch:
            return EpochEntry(epoch, offsets[i])
        return None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> Tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end_offset)`` for a follower's OffsetForLeaderEpoch."""
        epochs, offsets = self._cols
        if requested_epoch == UNDEFINED_EPOCH:
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if epochs and epochs[-1] == requested_epoch:
            return (requested_epoch, log_end_offset)
        hi = bisect_right(epochs, requested_epoch)
        if hi >= len(epochs):
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if hi == 0:
            return (requested_epoch, offsets[hi])
        return (epochs[hi - 1], offsets[hi])

    def epoch_for_offset(self, offset: int) -> Optional[int]:
        """The epoch whose start offset == ``offset``, else the last epoch starting before it."""
        epochs, offsets = self._cols
        i = bisect_right(offsets, offset)
        return epochs[i - 1] if i > 0 else None

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.epoch_entries()!r})"


class _DeferredWrites:
    """:meth:`LeaderEpochFileCache.deferred_writes`: the cache's lock held and its writes held
    back inside; at the end the file written only when it would be wrong (not after an error)."""

    __slots__ = ("_cache",)

    def __init__(self, cache: LeaderEpochFileCache) -> None:
        self._cache = cache

    def __enter__(self) -> None:
        self._cache._lock.acquire()
        self._cache._deferred = True

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        try:
            self._cache._end_deferred(exc_type is None)
        finally:
            self._cache._lock.release()
