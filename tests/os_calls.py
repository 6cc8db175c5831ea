"""Counting the calls of ``os`` functions (``os.fsync``, ``os.unlink``...) made on every thread while
a block runs: the real functions are called, each call counted by name (for the tests that guard
what an operation costs the disk by counting, not timing)."""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any


def count_os_calls(monkeypatch: Any, names: tuple[str, ...]) -> Counter[str]:
    """Replace each ``os.<name>`` (for the life of ``monkeypatch``, or of its ``context()``) by a
    wrapper counting its calls into the returned counter, which starts at 0 for every name.
    Counting ``fsync`` pins the fsyncs of every :func:`fsutil.deferred_syncs` block but a
    shutdown's to fsyncs (:func:`fsync_each`): whether a block syncs its file system whole
    instead follows what the whole machine holds dirty, which a test does not control."""
    if "fsync" in names:
        fsync_each(monkeypatch)
    counts: Counter[str] = Counter(dict.fromkeys(names, 0))
    lock = threading.Lock()

    def counting(name: str) -> Any:
        real = getattr(os, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                counts[name] += 1
            return real(*args, **kwargs)
        return call
    for name in names:
        monkeypatch.setattr(os, name, counting(name))
    return counts


def fsync_each(monkeypatch: Any) -> None:
    """Every :func:`fsutil.deferred_syncs` block (a shutdown's of at least
    ``SYNCFS_MIN_PATHS`` aside) fsyncs each path it noted, however little the machine holds dirty
    (:func:`fsutil.syncfs_is_cheaper` is never true)."""
    from kafkalog.log import fsutil
    monkeypatch.setattr(fsutil, "SYNCFS_DIRTY_BYTES_PER_PATH", -1)
