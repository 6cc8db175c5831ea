"""A load's read-ahead: while the log manager opens partition directories one after the other on
its thread, other threads bring the next ones' files into the page cache.

Opening a partition is mostly interpreter work (a few hundred microseconds of Python between some
twenty system calls), so two threads opening partitions at once run no faster than one: they
take turns on the interpreter lock, handing it over at each system call, and that hand-over cost
more than the load itself (10,000 partitions, page cache warm: 2.5-3.3 s on one thread, 4.6-5.3 s
on two). What another thread can do while the loader runs is the disk's part: the directories'
listings and their files' reads, each batch of :data:`BATCH` directories in one call of the log
kernel (:func:`kafkalog.log.kernel.read_ahead`) that holds no interpreter lock, at most
:data:`WINDOW` directories ahead of the loader."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import List, Optional, Sequence, Type

from kafkalog.log import kernel

#: directories read ahead in one call of the kernel
BATCH = 64
#: how far ahead of the loader the read-ahead may be, in directories
WINDOW = 2048


class ReadAhead:
    """Read ahead ``dirs`` (in the order the loader opens them) on ``threads`` threads; the loader
    says where it is with :meth:`reached`. A context manager: leaving it stops and joins the
    threads (a failed load leaves none behind). The read-ahead only reads, never raises into the
    load, and skips what the loader has passed."""

    def __init__(self, dirs: Sequence[str], threads: int, *, batch: Optional[int] = None,
                 window: Optional[int] = None) -> None:
        self._dirs = dirs
        self._batch = max(1, BATCH if batch is None else batch)
        self._window = max(self._batch, WINDOW if window is None else window)
        self._cv = threading.Condition()
        self._next = 0            # the first directory no thread has taken
        self._reached = 0         # the loader's position, as last said
        self._stopped = False
        #: files read ahead, and batches a thread took (what the tests count)
        self.files = 0
        self.batches = 0
        self._threads: List[threading.Thread] = [
            threading.Thread(target=self._run, name=f"kafkalog-log-read-ahead-{i}", daemon=True)
            for i in range(threads if len(dirs) > self._batch else 0)]

    def __enter__(self) -> ReadAhead:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()

    def reached(self, i: int) -> None:
        """The loader is at directory ``i``: the read-ahead may go on to ``i + window`` (said at
        batch boundaries only: a test of an integer for the other directories)."""
        if i % self._batch == 0 and self._threads:
            with self._cv:
                self._reached = i
                self._cv.notify_all()

    def _take(self) -> Optional[range]:
        with self._cv:
            while True:
                if self._stopped:
                    return None
                start = max(self._next, self._reached)         # never what the loader passed
                if start >= len(self._dirs):
                    return None
                if start < self._reached + self._window:
                    self._next = start + self._batch
                    self.batches += 1
                    return range(start, min(start + self._batch, len(self._dirs)))
                self._cv.wait()

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            try:
                read = kernel.read_ahead(self._dirs[taken.start:taken.stop])
            except Exception:      # (a MemoryError making the batch): the loader reads it itself
                read = 0
            with self._cv:
                self.files += read
