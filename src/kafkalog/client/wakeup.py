"""Wake-ups: a waiting consumer ``poll`` returns as soon as new data lands.

Two sources, one interface (:class:`Wakeup`): ``arm()`` before looking for data (it returns True when
something changed since the last ``arm``/``wait``), then ``wait(timeout)`` returns True as soon as
something changed since ``arm()`` (or ``wake()`` was called), False on timeout.

* :class:`AppendNotifier`: the logs are written by this process (a writable data directory): the
  partition log calls its publish listeners whenever the log end offset moves
  (:meth:`kafkalog.log.log.Log.add_publish_listener`), which sets an event.
* :class:`FileWatcher`: the logs are written by another process (a directory another kafkalog process
  or a Kafka broker owns, opened read-only): the partition directories are watched with Linux's inotify
  (through ``ctypes``, no dependency) and, where inotify is not available, by polling the size and
  modification time of their files every ``poll_interval_ms``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import os
import select
import threading
import time
import weakref
from typing import Any, Protocol

__all__ = ["AppendNotifier", "FileWatcher", "Wakeup", "inotify_available"]


class Wakeup(Protocol):
    def arm(self) -> bool: ...
    def wait(self, timeout: float) -> bool: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...


class _PublishingLog(Protocol):
    def add_publish_listener(self, listener: Any) -> None: ...
    def remove_publish_listener(self, listener: Any) -> None: ...


class _Listener:
    """The publish listener of one :class:`AppendNotifier`, holding it weakly: a consumer dropped
    without ``close()`` leaves no waiter behind, and its listener removes itself."""

    __slots__ = ("_ref",)

    def __init__(self, notifier: AppendNotifier) -> None:
        self._ref = weakref.ref(notifier)

    def __call__(self, log: _PublishingLog) -> None:
        notifier = self._ref()
        if notifier is None:
            log.remove_publish_listener(self)
        else:
            notifier.wake()


class AppendNotifier:
    """Woken by the publish listener of in-process :class:`~kafkalog.log.log.Log` objects."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._logs: list[_PublishingLog] = []
        self._listener = _Listener(self)

    def watch(self, log: _PublishingLog) -> None:
        if any(x is log for x in self._logs):
            return
        log.add_publish_listener(self._listener)
        self._logs.append(log)

    def unwatch_all(self) -> None:
        for log in self._logs:
            log.remove_publish_listener(self._listener)
        self._logs = []

    def arm(self) -> bool:
        was = self._event.is_set()
        self._event.clear()
        return was

    def wait(self, timeout: float) -> bool:
        return self._event.wait(max(0.0, timeout))

    def wake(self) -> None:
        self._event.set()

    def close(self) -> None:
        self.unwatch_all()
        self._event.set()


# --- inotify through ctypes -------------------------------------------------------------------------

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_WATCH_MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE

_libc: Any | None = None
_libc_loaded = False


def _load_libc() -> Any | None:
    global _libc, _libc_loaded
    if not _libc_loaded:
        _libc_loaded = True
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            _libc = lib
        except (OSError, AttributeError):
            _libc = None
    return _libc


def inotify_available() -> bool:
    return _load_libc() is not None and os.environ.get("KAFKALOG_NO_INOTIFY") != "1"


def _readable(fds: tuple[int, ...], timeout: float) -> set[int]:
    """The descriptors of ``fds`` readable (or closed) within ``timeout`` seconds: ``poll``, which
    has no FD_SETSIZE limit (``select`` refuses descriptors past 1,023, and an application holding
    many segments open reaches them)."""
    p = select.poll()
    for fd in fds:
        p.register(fd, select.POLLIN)
    return {fd for fd, _events in p.poll(math.ceil(max(0.0, timeout) * 1000))}


class FileWatcher:
    """Woken by changes to files of watched directories made by any process."""

    def __init__(self, *, poll_interval_ms: int = 100, use_inotify: bool | None = None) -> None:
        self._poll_interval = max(1, poll_interval_ms) / 1000.0
        self._dirs: list[str] = []
        self._lock = threading.Lock()
        self._changed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._fd = -1
        if use_inotify is None:
            use_inotify = inotify_available()
        if use_inotify:
            lib = _load_libc()
            fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC) if lib is not None else -1
            self._fd = fd if fd >= 0 else -1
        self._stamps: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self._closed = False

    @property
    def uses_inotify(self) -> bool:
        return self._fd >= 0

    def watch(self, directory: str) -> None:
        directory = os.fspath(directory)
        if directory in self._dirs:
            return
        self._dirs.append(directory)
        if self._fd >= 0:
            lib = _load_libc()
            assert lib is not None
            wd = lib.inotify_add_watch(self._fd, os.fsencode(directory), _WATCH_MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err not in (errno.ENOENT, errno.ENOTDIR):
                    raise OSError(err, os.strerror(err), directory)
        else:
            self._stamps[directory] = self._stamp(directory)

    @staticmethod
    def _stamp(directory: str) -> tuple[tuple[str, int, int], ...]:
        out = []
        try:
            with os.scandir(directory) as it:
                for e in it:
                    if e.name.endswith((".log", ".txnindex")):
                        try:
                            st = e.stat()
                        except FileNotFoundError:
                            continue
                        out.append((e.name, st.st_size, st.st_mtime_ns))
        except OSError:
            return ()
        return tuple(sorted(out))

    @staticmethod
    def _drain_fd(fd: int) -> bool:
        """Consume what is pending on a non-blocking descriptor; True when there was anything."""
        got = False
        while True:
            try:
                if not os.read(fd, 65536):
                    break
                got = True
            except OSError:             # nothing pending (or closed by close())
                break
        return got

    def _drain(self) -> bool:
        return self._drain_fd(self._fd)

    def _drain_wake(self) -> bool:
        return self._drain_fd(self._wake_r)

    def _polled_change(self) -> bool:
        changed = False
        for d in self._dirs:
            s = self._stamp(d)
            if s != self._stamps.get(d):
                self._stamps[d] = s
                changed = True
        return changed

    def arm(self) -> bool:
        """Take the changes seen so far (the caller is about to look at the files): True when
        there were any."""
        changed = self._drain() if self._fd >= 0 else self._polled_change()
        self._drain_wake()
        return changed

    def wait(self, timeout: float) -> bool:
        if self._closed:
            return True
        deadline = time.monotonic() + max(0.0, timeout)
        if self._fd >= 0:
            while True:
                left = deadline - time.monotonic()
                if left < 0:
                    return False
                if self._closed:
                    return True
                r = _readable((self._fd, self._wake_r), left)
                if not r:
                    return False
                woken = self._wake_r in r and self._drain_wake()
                if (self._fd in r and self._drain()) or woken:
                    return True
        while True:
            if self._polled_change():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._closed:
                return True
            r = _readable((self._wake_r,), min(left, self._poll_interval))
            if r and self._drain_wake():
                return True

    def wake(self) -> None:
        if not self._closed:
            self.wake_unchecked()

    def wake_unchecked(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.wake_unchecked()
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = -1
