"""Typed seams of the log layer (``typing.Protocol``): what ``Log``, ``LogSegment`` and the loader need
from the objects they are handed, and what the log layer needs from the layers above it (the layer
above hands in an implementation; imports only point downwards)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable, ContextManager, Optional, Protocol

from kafkalog.log.checkpoint import EpochEntry
from kafkalog.log.naming import TopicPartition

__all__ = ["Cleaner", "ProducerStateLike", "LeaderEpochCacheLike", "Scheduler"]


# --- the cleaner (kafkalog.cleaner.LogCleaner implements it) ------------------------------------------

class Cleaner(Protocol):
    """The background log cleaner of a data directory (Kafka's ``LogCleaner`` as its
    ``LogManager`` sees it): started after the logs are loaded, told when a partition goes away,
    stopped before the logs are closed."""

    def startup(self) -> None:
        """Start the cleaner threads."""
        ...

    def shutdown(self) -> None:
        """Stop the cleaner threads (an in-progress cleaning is aborted) and wait for them."""
        ...

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Abort (and forget) any cleaning of ``tp``: the partition is being deleted."""
        ...




# --- producer state and leader-epoch cache (the log's own seams; helper "walker") -----------------


class ProducerStateLike(Protocol):
    """What the log needs from producer state (Kafka's ``ProducerStateManager``;
    :class:`kafkalog.log.producer_state.ProducerStateManager`)."""

    producer_id_expiration_ms: int

    @property
    def producers(self) -> Mapping[int, Any]: ...

    @property
    def snapshots(self) -> Mapping[int, str]: ...

    @property
    def stray_files(self) -> Mapping[int, str]: ...

    def update_from_batch(self, batch: Any, origin: str = ...) -> list[Any]: ...

    def replay_walk(self, buf: Any, found: Any, first: int = ..., end: int | None = ...,
                    base: int = ...) -> list[Any]: ...

    def remove_expired_producers(self, now_ms: int) -> list[int]: ...

    def check_append(self, batches: Iterable[tuple[int, Any]], origin: str = ...) -> Any | None: ...

    def is_next_in_sequence(self, producer_id: int, epoch: int, base_sequence: int) -> bool: ...

    def first_unstable_offset(self) -> int | None: ...

    def on_high_watermark_updated(self, high_watermark: int) -> None: ...

    def update_map_end_offset(self, offset: int) -> None: ...

    @property
    def map_end_offset(self) -> int: ...

    def is_empty(self) -> bool: ...

    def take_snapshot(self, sync: bool = True) -> str | None: ...

    defer_writes: bool
    unwritten: dict[str, bytes]

    def write_unwritten(self, sync: bool = False) -> int: ...

    def know_snapshot_bytes(self, known: dict[str, bytes] | None) -> None: ...

    def load_snapshots(self, names: Optional[Iterable[str]] = None) -> dict[int, str]: ...

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None: ...

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> str | None: ...

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int], *, later: bool = False) -> None: ...

    def delete_stray_files(self) -> int: ...


class LeaderEpochCacheLike(Protocol):
    """What the log needs from the leader-epoch cache (Kafka's ``LeaderEpochFileCache``;
    :class:`kafkalog.log.leader_epoch.LeaderEpochFileCache`)."""

    #: called after :meth:`latest_epoch` changed (set by the log manager, None elsewhere)
    on_latest_epoch_changed: Callable[[], None] | None

    def latest_epoch(self) -> int | None: ...

    def earliest_entry(self) -> EpochEntry | None: ...

    def assign(self, epoch: int, start_offset: int, sync: bool = True) -> bool: ...

    def flush_if_unsynced(self) -> None: ...

    def ensure_file(self) -> None: ...

    def truncate_from_end(self, end_offset: int) -> None: ...

    def truncate_from_start(self, start_offset: int) -> None: ...

    def clear(self) -> None: ...

    def clear_and_flush(self) -> None: ...

    def deferred_writes(self) -> ContextManager[None]: ...


#: runs ``fn`` after ``delay_seconds`` (Kafka's scheduler, as the log's asynchronous deletion uses it)
Scheduler = Callable[[float, Callable[[], None]], object]
