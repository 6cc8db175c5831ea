"""The crash-safe swap of cleaned segments into a live log (Kafka's ``LocalLog.replaceSegments``;
spec §4.11 "Crash-safe swap protocol", §4.8 load-time rules), through the log layer's
:meth:`kafkalog.log.log.Log.replace_segments`:

1. The new segments were written as ``<base>.*.cleaned`` and fsynced (by the caller).
2. They are renamed ``.cleaned`` -> ``.swap`` in descending base-offset order; directory fsynced.
3. Under the log's writer lock the segment list is republished copy-on-write with the new segments
   in place of the old ones; the old segments are renamed ``.deleted``; directory fsynced.
4. The ``.swap`` suffix is removed; directory fsynced. The old segments' files are deleted after
   ``file.delete.delay.ms`` through the log's scheduler, so a reader holding a snapshot with the
   old segments keeps reading them.

The abort check (truncation, partition deletion, shutdown) runs under the same writer lock as the
swap, and truncation marks the cleaning aborted under that lock too: either the truncation sees
the swapped segments, or the swap is abandoned - a cleaning never resurrects truncated data.

A crash anywhere leaves files the loader turns into either the old or the new segments. For
tests, ``KAFKALOG_CLEANER_CRASH_AT=<step>`` kills the process with SIGKILL at a named step (see
:data:`CRASH_STEPS`).
"""
from __future__ import annotations

import os
import signal
from typing import Callable, Optional, Sequence

from kafkalog.errors import CleaningAbortedError
from kafkalog.log.log import Log
from kafkalog.log.segment import LogSegment

__all__ = ["replace_segments", "CRASH_STEPS", "CRASH_ENV", "crash_point", "CleaningAbortedError"]

CRASH_ENV = "KAFKALOG_CLEANER_CRASH_AT"
CRASH_STEPS = ("cleaned-written", "swap-partial", "swap-renamed", "deleted-partial",
               "old-deleted", "unswap-partial", "swapped")


def crash_point(step: str) -> None:
    """Test hook: SIGKILL this process when ``KAFKALOG_CLEANER_CRASH_AT`` names ``step``."""
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def replace_segments(log: Log, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment],
                     check: Optional[Callable[[], None]] = None) -> None:
    """Swap ``new_segments`` (suffix ``.cleaned`` or ``.swap``, flushed) in for ``old_segments``.

    ``check`` runs under the log's writer lock right before the swap and raises
    :class:`CleaningAbortedError` to abandon it. Raises :class:`CleaningAbortedError` (after
    deleting the new files) when an old segment is no longer part of the log (removed
    concurrently by retention or truncation) or the log is closed.
    """
    if not log.replace_segments(new_segments, old_segments, abort_if_missing=True,
                                step_hook=crash_point, check=check):
        raise CleaningAbortedError("segments changed while cleaning; cleaning aborted",
                                   file=log.dir)
