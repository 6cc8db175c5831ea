"""File-system helpers with Kafka's crash-safety rules (``Utils.atomicMoveWithFallback``,
``Utils.flushDir``): fsync of files and directories, atomic replace through ``<name>.tmp``,
renames followed by a directory fsync, mtime helpers.

Every ``OSError`` is re-raised as :class:`kafkalog.errors.KafkalogIOError` naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple
from urllib.parse import unquote, urlsplit

from kafkalog.errors import InvalidConfigError, KafkalogIOError, LogDirError
from kafkalog.log.naming import TMP_FILE_SUFFIX


def io_error(err: OSError, path: os.PathLike[str] | str, action: str) -> KafkalogIOError:
    """Wrap an ``OSError`` as :class:`KafkalogIOError` naming ``path`` and what was attempted."""
    e = KafkalogIOError(f"{action} failed: {err.strerror or err}", file=path)
    e.errno = err.errno  # type: ignore[attr-defined]
    return e


READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_FIRST_READ = 1 << 16


class _PreRead(threading.local):
    """What this thread's load of one directory was handed of it (:func:`preread`)."""
    dir: Optional[str] = None
    names: Optional[list[str]] = None
    files: dict[str, Tuple[int, bytes]] = {}


_PRE = _PreRead()


@contextlib.contextmanager
def preread(directory: str, names: list[str], files: dict[str, Tuple[int, bytes]]) -> Iterator[None]:
    """On this thread, while the context lasts: the listing of ``directory`` is ``names`` and its
    files' sizes and bytes (each file's whole, or its end) are ``files``, as a read-ahead found them
    before this thread came to the directory (:mod:`kafkalog.log.read_ahead`). Each is handed out
    once (:func:`preread_names`, :func:`preread_file`, and :func:`read_file` of a whole file);
    the next asks the disk. A load that changes the directory (deletes, renames, recovers) calls
    :func:`forget_preread` first."""
    _PRE.dir, _PRE.names, _PRE.files = directory, names, files
    try:
        yield
    finally:
        forget_preread()


def forget_preread() -> None:
    """Nothing of this thread's :func:`preread` is handed out any more."""
    _PRE.dir, _PRE.names, _PRE.files = None, None, {}


def preread_names(directory: str) -> Optional[list[str]]:
    """The listing of ``directory`` a read-ahead handed over, once; None: list it."""
    if _PRE.dir != directory or _PRE.names is None:
        return None
    names, _PRE.names = _PRE.names, None
    return names


def preread_file(path: str) -> Optional[Tuple[int, bytes]]:
    """``(size, bytes)`` of the file ``path`` as a read-ahead read it (the whole file when its
    length is ``size``, else the file's last bytes), once; None: read it."""
    if _PRE.dir is None:
        return None
    directory, _sep, name = path.rpartition("/")
    if directory != _PRE.dir:
        return None
    return _PRE.files.pop(name, None)


def preread_length(path: str) -> Optional[int]:
    """The length of the file ``path`` as a read-ahead found it (the directory as its load began),
    without taking its bytes; None when unknown (nothing handed over, or already taken)."""
    if _PRE.dir is None:
        return None
    directory, _sep, name = path.rpartition("/")
    if directory != _PRE.dir:
        return None
    got = _PRE.files.get(name)
    return got[0] if got is not None else None


def read_file(path: str, limit: Optional[int] = None) -> bytes:
    """The whole of the file ``path`` (or its first ``limit`` bytes) in as few system calls as a
    file allows: an open, a read (and more when the first filled :data:`_FIRST_READ`), a close.
    ``open(path, "rb").read()`` takes eight (``fstat`` twice, ``ioctl``, ``lseek`` twice, a read
    to the end), and a restart reads two small files a partition (its leader-epoch checkpoint and
    producer snapshot): none when a read-ahead read the whole file (:func:`preread`). An
    ``OSError`` is raised as is (a directory's ``EISDIR`` from the read)."""
    if _PRE.dir is not None and limit is None:
        got = preread_file(path)
        if got is not None and len(got[1]) == got[0]:
            return got[1]
    fd = os.open(path, READ_FLAGS)
    try:
        first = _FIRST_READ if limit is None else limit
        data = os.read(fd, first)
        if len(data) < first or limit is not None:
            return data
        chunks = [data]
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_bytes(path: str, action: str | Callable[[OSError], Exception]) -> bytes:
    """The whole of the file ``path`` (:func:`read_file`); an ``OSError`` becomes
    :func:`io_error` naming ``action`` (or what ``action`` makes of it)."""
    try:
        return read_file(path)
    except OSError as err:
        raise (io_error(err, path, action) if isinstance(action, str) else action(err)) from err


@contextlib.contextmanager
def wrap_os_errors(path: os.PathLike[str] | str, action: str) -> Iterator[None]:
    """Context manager re-raising ``OSError`` as :class:`KafkalogIOError` for ``path``."""
    try:
        yield
    except OSError as err:
        raise io_error(err, path, action) from err


class _Deferred(threading.local):
    #: the paths the running :func:`deferred_syncs` block of this thread notes (None: no block)
    paths: dict[str, bool] | None = None


_deferred = _Deferred()
#: threads fsyncing what a :func:`deferred_syncs` block wrote (the fsyncs overlap: the file system
#: commits them together)
_SYNC_THREADS = 16


@contextlib.contextmanager
def deferred_syncs(whole_file_systems: bool = False, paths_to_come: int = 0) -> Iterator[None]:
    """Within the block, this thread's :func:`atomic_write`, :func:`atomic_rename`,
    :func:`fsync_file` and :func:`fsync_dir` note what they would fsync instead of waiting for it;
    at the end of the block every noted file, then every noted directory, is fsynced (each once,
    on a few threads) before the block returns. For work that is acknowledged only as a whole
    (a topic's thousands of new partitions): its fsyncs cost about one disk commit, not one each.
    A crash inside the block may leave a file renamed into place before its bytes were synced;
    nothing the block's caller acknowledged depends on it yet.

    ``whole_file_systems`` (a shutdown, which syncs every partition): when the block noted at
    least :data:`SYNCFS_MIN_PATHS`, each file system holding them is synced whole instead
    (:func:`syncfs_of`), where the kernel reports a write-back error to ``syncfs``. Any block that
    noted at least :data:`QUIET_SYNCFS_MIN_PATHS` is synced so too when the dirty data the
    ``syncfs`` would write costs less than the fsyncs it replaces (:func:`syncfs_is_cheaper`):
    those of the block and the ``paths_to_come`` of the same job's next blocks (the rest of a
    topic's chunks), which then find only what was written since."""
    if _deferred.paths is not None:
        yield                                       # nested: the outer block syncs
        return
    paths: dict[str, bool] = {}
    _deferred.paths = paths
    try:
        yield
    except BaseException:
        _deferred.paths = None
        with contextlib.suppress(Exception):
            _sync_all(paths)
        raise
    _deferred.paths = None
    whole = (whole_file_systems and len(paths) >= SYNCFS_MIN_PATHS) or \
        (len(paths) >= QUIET_SYNCFS_MIN_PATHS and syncfs_is_cheaper(len(paths) + paths_to_come))
    if whole and syncfs_reports_errors():
        syncfs_of(paths)
    else:
        _sync_all(paths)


#: the noted paths from which a shutdown's :func:`deferred_syncs` syncs their file systems whole:
#: at 100,000 partitions after a crash's recovery, 300,000 fsyncs (a partition's ``.log``, time
#: index, snapshot and directory) took ~300 us a partition on 16 threads here, one ``syncfs`` of
#: the same dirty files ~45 us a partition
SYNCFS_MIN_PATHS = 1024


#: the noted paths from which any :func:`deferred_syncs` block may sync their file systems whole
#: (:func:`syncfs_is_cheaper`): a chunk of a topic's new partitions notes 129 (each partition's
#: ``partition.metadata`` and directory, and the data directory)
QUIET_SYNCFS_MIN_PATHS = 32
#: the dirty bytes whose write costs about an fsync: an fsync is a disk commit (~0.1 ms here on
#: 16 threads: a chunk of 64 new partitions' 129 fsyncs took ~13 ms), a ``syncfs`` one commit and
#: the write of every dirty page of the file system (~0.5-2 GB/s here: 32 MiB ~17 ms; a chunk's
#: own ~1 MiB, a new partition dirtying 7-15 KiB of inodes, directory blocks and files, ~3 ms)
SYNCFS_DIRTY_BYTES_PER_PATH = 64 << 10
_MEMINFO = "/proc/meminfo"


def dirty_bytes() -> Optional[int]:
    """The machine's dirty and under-write-back page-cache bytes (``/proc/meminfo``'s ``Dirty`` and
    ``Writeback``); None where that cannot be read (not Linux)."""
    try:
        text = read_file(_MEMINFO).decode("ascii", "replace")
    except OSError:
        return None
    total, seen = 0, 0
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Dirty", "Writeback"):
            fields = rest.split()
            if not fields or not fields[0].isdigit():
                return None
            total += int(fields[0]) * 1024
            seen += 1
    return total if seen == 2 else None


def syncfs_is_cheaper(paths: int) -> bool:
    """Whether one ``syncfs`` costs less than the fsyncs of ``paths`` files and directories: the
    machine's dirty data (every file system's: an upper bound of the one synced) is at most
    :data:`SYNCFS_DIRTY_BYTES_PER_PATH` a path. A job of many blocks (a topic's 1,563 chunks of
    64 partitions at 100,000) pays once for what the machine held dirty, its next blocks only for
    what was written since; a producer's unflushed appends (written back later anyway), or another
    process's writes, keep a small job's fsyncs the cheaper."""
    dirty = dirty_bytes()
    return dirty is not None and dirty <= paths * SYNCFS_DIRTY_BYTES_PER_PATH


def syncfs_reports_errors() -> bool:
    """Whether this kernel has ``syncfs`` and reports write-back errors to it (Linux 5.8 and
    later: before, ``syncfs`` returned 0 after a failed write-back, and only an fsync of the file
    told)."""
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return False
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


@functools.cache
def _libc_syncfs() -> Callable[[int], int]:
    """libc's ``syncfs`` from the process's own symbols, looked up once (a topic's creation
    calls it for each chunk)."""
    import ctypes
    fn = ctypes.CDLL(None, use_errno=True).syncfs
    fn.argtypes = (ctypes.c_int,)
    fn.restype = ctypes.c_int
    return fn


def _syncfs(fd: int) -> None:
    """``syncfs(2)`` of the file system holding the open ``fd`` (an ``OSError`` when it fails)."""
    if _libc_syncfs()(fd) != 0:
        import ctypes
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def syncfs_of(paths: dict[str, bool]) -> None:
    """Sync whole each file system holding one of ``paths`` (files, or directories when True),
    once, through a directory of it: what an fsync of each would make durable, and the rest of
    the file system's dirty data with it."""
    dirs = {p if is_dir else os.path.dirname(p) for p, is_dir in paths.items()}
    by_device: dict[int, str] = {}
    for d in dirs:
        with wrap_os_errors(d, "syncfs"):
            by_device.setdefault(os.stat(d).st_dev, d)
    for d in by_device.values():
        with wrap_os_errors(d, "syncfs the file system holding"):
            fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                _syncfs(fd)
            finally:
                os.close(fd)


def defer_fsync(path: os.PathLike[str] | str) -> bool:
    """Inside a :func:`deferred_syncs` block of this thread: note the file ``path`` to fsync at
    the block's end and return True; else False (the caller fsyncs now)."""
    return _defer(path, False)


def _defer(path: os.PathLike[str] | str, is_dir: bool) -> bool:
    """Note ``path`` for the running :func:`deferred_syncs` block; False when there is none."""
    paths = _deferred.paths
    if paths is None:
        return False
    paths[os.fspath(path)] = is_dir
    return True


class _SyncPool:
    #: the threads of this process's :func:`deferred_syncs` blocks (made once: a topic of 100,000
    #: partitions is made in 1,563 blocks), with the process that made them (a child forked since
    #: has none of them: it makes its own)
    pool: Optional[ThreadPoolExecutor] = None
    pid = 0
    lock = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    with _SyncPool.lock:
        if _SyncPool.pool is None or _SyncPool.pid != os.getpid():
            _SyncPool.pool = ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="kafkalog-fsync")
            _SyncPool.pid = os.getpid()
        return _SyncPool.pool


def _sync_all(paths: dict[str, bool]) -> None:
    files = [p for p, is_dir in paths.items() if not is_dir]
    dirs = [p for p, is_dir in paths.items() if is_dir]
    for batch, sync in ((files, fsync_file), (dirs, fsync_dir)):
        if len(batch) <= 1:
            for p in batch:
                sync(p)
            continue
        pool = _sync_pool()
        for f in [pool.submit(sync, p) for p in batch]:
            f.result()


def fsync_file(path: os.PathLike[str] | str) -> None:
    """fsync an existing file by path."""
    if _defer(path, False):
        return
    with wrap_os_errors(path, "fsync"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_fd(fd: int, path: os.PathLike[str] | str = "") -> None:
    """fsync an open file descriptor."""
    with wrap_os_errors(path, "fsync"):
        os.fsync(fd)


def fsync_dir(path: os.PathLike[str] | str) -> None:
    """fsync a directory so that renames/creations inside it are durable (Kafka's ``flushDir``).

    Platforms that cannot open directories (or refuse fsync on them, EINVAL) are tolerated.
    """
    if _defer(path, True):
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))     # a platform probe (POSIX)
    except OSError as err:
        if err.errno in (errno.EISDIR, errno.EACCES) and os.name == "nt":  # pragma: no cover
            return
        raise io_error(err, path, "open directory for fsync") from err
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise io_error(err, path, "fsync directory") from err
    finally:
        os.close(fd)


def parent_dir(path: os.PathLike[str] | str) -> str:
    """The directory holding ``path`` (``.`` for a bare name)."""
    return os.path.dirname(os.path.abspath(os.fspath(path)))


def atomic_write(path: os.PathLike[str] | str, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to ``<path>.tmp``, fsync it, rename it over ``path`` and fsync the directory.

    With ``sync=False`` the fsyncs are skipped (Kafka writes some snapshots without fsync and
    flushes them later); the rename is still atomic.
    """
    path = os.fspath(path)
    tmp = path + TMP_FILE_SUFFIX
    with wrap_os_errors(tmp, "write"):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if sync and not _defer(path, False):
                os.fsync(fd)
        finally:
            os.close(fd)
    atomic_rename(tmp, path, sync=sync)


def read_json(path: str, what: str) -> Any:
    """The JSON document of ``path`` (None when the file does not exist), the counterpart of
    :func:`atomic_write` for the small stores kept beside the logs; an unreadable or damaged file is
    an :class:`InvalidConfigError` naming it and ``what`` it holds."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise InvalidConfigError(f"cannot read the {what}: {e}", file=path) from None


def atomic_rename(src: os.PathLike[str] | str, dst: os.PathLike[str] | str, *, sync: bool = True) -> None:
    """Rename ``src`` over ``dst`` (atomic on POSIX) and fsync the destination's directory (and
    the source's, when different)."""
    with wrap_os_errors(src, f"rename to {os.fspath(dst)}"):
        os.replace(src, dst)
    if sync:
        d_dst = parent_dir(dst)
        fsync_dir(d_dst)
        d_src = parent_dir(src)
        if d_src != d_dst:
            fsync_dir(d_src)


def rename_with_suffix(path: os.PathLike[str] | str, old_suffix: str, new_suffix: str, *,
                       sync: bool = False) -> str:
    """Rename ``<name><old_suffix>`` to ``<name><new_suffix>``; returns the new path.

    ``old_suffix`` may be ``""`` (append ``new_suffix``), ``new_suffix`` may be ``""`` (strip).
    """
    p = os.fspath(path)
    if old_suffix:
        if not p.endswith(old_suffix):
            raise KafkalogIOError(f"Expected a file ending in {old_suffix!r}", file=p)
        stem = p[: -len(old_suffix)]
    else:
        stem = p
    new = stem + new_suffix
    atomic_rename(p, new, sync=sync)
    return new


def delete_if_exists(path: os.PathLike[str] | str) -> bool:
    """Delete a file if it exists; returns whether it existed."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as err:
        raise io_error(err, path, "delete") from err


def delete_tmp_files(dir_: os.PathLike[str] | str) -> list[str]:
    """Delete stray ``*.tmp`` files left by an interrupted atomic write; returns their paths."""
    out = []
    with wrap_os_errors(dir_, "list directory"):
        names = os.listdir(dir_)
    for n in names:
        if n.endswith(TMP_FILE_SUFFIX):
            p = os.path.join(os.fspath(dir_), n)
            if os.path.isfile(p):
                delete_if_exists(p)
                out.append(p)
    return out


def last_modified_ms(path: os.PathLike[str] | str) -> int:
    """File mtime in milliseconds (Kafka's ``File.lastModified``)."""
    with wrap_os_errors(path, "stat"):
        return os.stat(path).st_mtime_ns // 1_000_000


def set_last_modified_ms(path: os.PathLike[str] | str, ms: Optional[int] = None) -> None:
    """Set a file's mtime (and atime) to ``ms`` milliseconds since the epoch (default: now)."""
    if ms is None:
        ms = int(time.time() * 1000)
    ns = int(ms) * 1_000_000
    with wrap_os_errors(path, "set mtime"):
        os.utime(path, ns=(ns, ns))


def file_size(path: os.PathLike[str] | str) -> int:
    """Size of a file in bytes."""
    with wrap_os_errors(path, "stat"):
        return os.stat(path).st_size


def ensure_dir(path: os.PathLike[str] | str) -> None:
    """Create a directory (and parents) if missing, fsyncing the parent when it was created."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return
    with wrap_os_errors(p, "create directory"):
        os.makedirs(p, exist_ok=True)
    fsync_dir(parent_dir(p))


def _load_sync_file_range() -> Optional[Callable[..., int]]:
    """libc's ``sync_file_range`` (Linux), or None."""
    try:
        import ctypes
        # the symbols the process has loaded (libc among them): no ``ctypes.util.find_library``,
        # which runs ``ldconfig -p`` in a child process at every import of this module
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        try:
            import ctypes.util
            fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).sync_file_range
        except (OSError, AttributeError):
            return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
#: SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER
_SYNC_FILE_RANGE_ALL = 1 | 2 | 4


def write_out_data(fd: int) -> None:
    """Write the file's dirty data pages to disk and wait, without committing metadata (Linux
    ``sync_file_range``; ``fdatasync`` elsewhere). **Not** a durability point: the ``fdatasync``
    that must follow is what makes the data (and the block allocations) durable, but it then has
    almost nothing left to write. Unlike repeated ``fdatasync`` calls, it forces no journal
    commit, so the writer of the file is not held up by one."""
    if _sync_file_range is not None:
        if _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_ALL) == 0:
            return
        import ctypes
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ESPIPE):
            raise OSError(err, os.strerror(err))
    os.fdatasync(fd)


def _advise(fd: int, ranges: Sequence[Tuple[int, int]], advice_name: str) -> None:
    """``posix_fadvise`` over the ``(start, end)`` byte ranges of ``fd``: only advice, so errors
    end it quietly, and it is a no-op where the call does not exist."""
    advise = getattr(os, "posix_fadvise", None)      # a platform probe: Linux has it, macOS not
    if advise is None:
        return
    advice = getattr(os, advice_name)                # the constants come with the call
    for start, end in ranges:
        try:
            advise(fd, start, end - start, advice)
        except OSError:
            return


def drop_cached(fd: int, ranges: Sequence[Tuple[int, int]]) -> None:
    """Evict the ``(start, end)`` byte ranges of ``fd`` from the page cache
    (``POSIX_FADV_DONTNEED``: clean pages are dropped at once, dirty ones are left alone)."""
    _advise(fd, ranges, "POSIX_FADV_DONTNEED")


def read_ahead(fd: int, ranges: Sequence[Tuple[int, int]]) -> None:
    """Start reading the ``(start, end)`` byte ranges of ``fd`` into the page cache without waiting
    (``POSIX_FADV_WILLNEED``)."""
    _advise(fd, ranges, "POSIX_FADV_WILLNEED")


class BackgroundFlusher:
    """A thread that writes files out while their writer goes on writing them, so that data
    reaches the disk at the pace it is produced instead of in one burst at the end (the page
    cache would otherwise hold it until a final fsync, which then waits for all of it). The
    writer hands over a descriptor with :meth:`submit` after each few megabytes
    (:func:`write_out_data`) and gives it up with :meth:`release` (one ``fdatasync``, then the
    thread closes it, so a descriptor is never reused while a sync of it is pending).
    :meth:`close` returns once every released file is durable, and raises
    :class:`KafkalogIOError` if a sync failed.

    Drop-behind: both calls take byte ranges that nobody will read soon; once they are on disk
    they are evicted from the page cache (:func:`drop_cached`), so a bulk write recycles a few
    megabytes of page cache instead of filling it (and evicting everybody else's data) with
    gigabytes of its own; and ranges to read back in at once (asynchronously: the few bytes that
    a reader will want soon, evicted with the rest because the page cache evicts whole folios,
    which can span megabytes)."""

    def __init__(self) -> None:
        import queue
        import threading
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: Optional[KafkalogIOError] = None
        self._thread = threading.Thread(target=self._run, name="kafkalog-flusher", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fd, path, close, drop, reload = item
            try:
                if self._error is None:
                    if close:
                        os.fdatasync(fd)       # the durability point of the file
                    else:
                        write_out_data(fd)     # data to disk, no journal commit
                    drop_cached(fd, drop)      # (clean now: evicted at once)
                    read_ahead(fd, reload)
            except OSError as err:
                self._error = io_error(err, path, "fdatasync")
            finally:
                if close:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

    def submit(self, fd: int, path: str = "", drop: Sequence[Tuple[int, int]] = (),
               reload: Sequence[Tuple[int, int]] = ()) -> None:
        """Write ``fd`` out soon (what was written to it so far), then evict the ``drop`` ranges
        (``(start, end)`` byte offsets, written before this call) from the page cache and start
        reading the ``reload`` ranges back."""
        self._queue.put((fd, path, False, drop, reload))

    def release(self, fd: int, path: str = "", drop: Sequence[Tuple[int, int]] = (),
                reload: Sequence[Tuple[int, int]] = ()) -> None:
        """Sync ``fd`` a last time, evict ``drop``, read back ``reload``, then close it."""
        self._queue.put((fd, path, True, drop, reload))

    def close(self) -> None:
        """Wait until every submitted sync is done; raise the first sync error, if any."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error


# --- where a data directory lives: a local path, or a URI (read through kafkalog.tiered) ------

def scheme_of(path: str | os.PathLike[str]) -> str | None:
    """The URI scheme of ``path`` (lower case), or None for a plain local path."""
    text = os.fspath(path)
    if "://" not in text:
        return None
    return text.split("://", 1)[0].lower()


def is_remote(path: str | os.PathLike[str]) -> bool:
    """True for a URI of a file system other than the local one (``file://`` is local)."""
    return scheme_of(path) not in (None, "file")


def local_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a local path: ``file:///d`` -> ``/d``; a plain path unchanged."""
    text = os.fspath(path)
    if scheme_of(text) == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise InvalidConfigError(f"{text}: a file:// URI names a local path "
                                     "(file:///path), not a host")
        return unquote(parts.path)
    return text


def refuse_remote_write(path: str | os.PathLike[str], what: str) -> None:
    """Raise :class:`LogDirError` when ``path`` is a remote URI: ``what`` (opening a data directory
    writable, a Spark write) needs atomic renames, appends and fsync."""
    scheme = scheme_of(path)
    if scheme is None or scheme == "file":
        return
    raise LogDirError(
        f"{what} needs a POSIX file system (atomic renames, appends, fsync), which {scheme}:// "
        "object storage does not provide. Read it with kafkalog.open(uri, read_only=True) or "
        "spark.read.format('kafkalog').load(uri); write to a local or shared POSIX directory "
        "(a local disk, NFS, a cluster file system mounted at the same path on every executor) "
        "and copy finished segments to object storage, or let a broker with tiered storage do "
        "it.", file=os.fspath(path))
