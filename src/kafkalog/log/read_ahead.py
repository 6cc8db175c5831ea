"""A load's read-ahead: while the log manager opens partition directories one after the other on
its thread, other threads read the next ones (their listings and files) and hand the loader what
they read.

Opening a partition is mostly interpreter work (a few hundred microseconds of Python between some
sixteen system calls), so two threads opening partitions at once run no faster than one: they
take turns on the interpreter lock, handing it over at each system call, and that hand-over cost
more than the load itself (10,000 partitions, page cache warm: 2.5-3.3 s on one thread, 4.6-5.3 s
on two). What another thread can do while the loader runs is the system calls: the directories'
listings and their files' reads (a cold disk's waits among them), each batch of :data:`BATCH`
directories in one call of the log kernel (:func:`kafkalog.log.kernel.read_ahead`) that holds no
interpreter lock, at most :data:`WINDOW` directories ahead of the loader. What it read is handed to
the loader
(:meth:`ReadAhead.take`), which then lists and reads none of it again
(:func:`kafkalog.log.fsutil.preread`): a directory's read is handed over only when it was whole
before the loader came to the directory, so it is what the directory held when its load began."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Dict, List, Optional, Sequence, Type

from kafkalog.log import kernel
from kafkalog.log._kernel_py import DirRead

#: directories read ahead in one call of the kernel
BATCH = 32
#: how far ahead of the loader the read-ahead may be, in directories (what it read and the loader
#: has not taken is held: up to ~130 KiB a directory of large segments, a few KiB of idle ones)
WINDOW = 512


def threads_for(recovery_threads: int) -> int:
    """The read-ahead threads of a load by ``recovery_threads`` threads: the others than the
    loader's, with the compiled kernel; none with its pure-Python twin, which holds the interpreter
    lock between its system calls, so that a thread running it only takes turns with the loader
    (10,000 partitions: 4.2-4.8 s with one, 3.4-4.0 s without)."""
    return max(0, recovery_threads - 1) if kernel.IMPLEMENTATION != "python" else 0


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
        #: what was read of each directory the loader has not taken, by its index in ``dirs``
        self._read: Dict[int, DirRead] = {}
        #: files read ahead, batches a thread took, and reads the loader took (what tests count)
        self.files = 0
        self.batches = 0
        self.taken = 0
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
        """The loader is at directory ``i``: the read-ahead may go on to ``i + window`` (the
        threads woken at batch boundaries only)."""
        if i % self._batch == 0 and self._threads:
            with self._cv:
                self._reached = i
                self._cv.notify_all()
        else:
            self._reached = i

    def take(self, i: int) -> Optional[DirRead]:
        """What was read of directory ``i`` before the loader reached it, or None (not read yet,
        or it could not be listed whole): the loader's own reads then."""
        got = self._read.pop(i, None)
        if got is not None:
            self.taken += 1
        return got

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
                found = kernel.read_ahead(self._dirs[taken.start:taken.stop])
            except Exception:      # (a MemoryError making the batch): the loader reads it itself
                continue
            files = 0
            for i, got in zip(taken, found):
                if got is not None:
                    files += len(got[1])
                    if i > self._reached:          # (one the loader is at or passed: never)
                        self._read[i] = got
            with self._cv:
                self.files += files
