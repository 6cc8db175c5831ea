"""Issue 35: segment descriptors are a bounded, least-recently-used set
(:mod:`kafkalog.log.file_handles`), so a process serves more partitions than its open-files limit
allows. Before: every segment kept its ``.log`` descriptor for the life of the log, and the 129th
partition under a limit of 256 failed with EMFILE (``Too many open files``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from kafkalog.log.file_handles import HANDLES
from kafkalog.log.file_records import FileRecords
from kafkalog.log.log import Log
from tests.log.crash_writer_many import config
from tests.racing import race

HERE = os.path.dirname(__file__)
CLIENT = os.path.join(HERE, "fd_limit_client.py")
WRITER = os.path.join(HERE, "crash_writer_many.py")
#: the soft open-files limit of the subprocesses: kafkalog keeps at most half of it for segments
LIMIT = 256


def _run(*args: str) -> str:
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("OK"), (p.stdout, p.stderr[-3000:])
    return p.stdout


def test_embedded_client_more_partitions_than_open_files(tmp_path):
    """1,000 partitions under a limit of 256 descriptors: created, two records produced to each
    (the second round reopens every evicted descriptor to append), consumed back, and again after
    a restart."""
    d = str(tmp_path / "data")
    assert _run(CLIENT, d, str(LIMIT), "1000", "write").split() == ["OK", "2000"]
    assert _run(CLIENT, d, str(LIMIT), "1000", "verify").split() == ["OK", "2000"]


def _kill_writer(path: str, seed: int, delay: float) -> list[tuple[int, int, int, str]]:
    p = subprocess.Popen([sys.executable, WRITER, path, str(seed), "64", "150"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    line = p.stdout.readline()
    assert line.startswith(b"OPEN"), (line, p.stderr.read() if p.poll() is not None else b"")
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    out, err = p.communicate()
    assert p.returncode == -signal.SIGKILL, err.decode()[-2000:]
    acks = []
    for ln in out.split(b"\n"):
        parts = ln.split()
        if len(parts) == 5 and parts[0] == b"ACK":
            acks.append((int(parts[1]), int(parts[2]), int(parts[3]), parts[4].decode()))
    return acks


def test_evicted_descriptors_lose_nothing_acknowledged_across_sigkill(tmp_path):
    """150 partitions (half preallocated, small segments rolled at random) under a limit of 64
    descriptors, appended to at random and killed with SIGKILL, three times over the same
    directories: after recovery every acknowledged record is at its offset, in every partition."""
    path = str(tmp_path)
    expected: dict[int, dict[int, str]] = {}
    for kill in range(3):
        acks = _kill_writer(path, 100 + kill, random.Random(kill).uniform(1.0, 2.5))
        assert len(acks) > 100, "the writer acknowledged too little to test anything"
        for p, first, last, tag in acks:
            for i, off in enumerate(range(first, last + 1)):
                expected.setdefault(p, {})[off] = f"{tag}:{i}"
    for p, want in expected.items():
        log = Log.open(os.path.join(path, f"t-{p}"), config(p), had_clean_shutdown=False,
                       recovery_point=0)
        try:
            got = {r.offset: r.value.split(b"x")[0].decode() for r in log.records(0)}
        finally:
            log.close()
        assert {o: got.get(o) for o in want} == want, f"partition {p}"


@pytest.fixture
def small_bound() -> Iterator[int]:
    """The process's bound at 16 descriptors for one test (the files it opens are its own)."""
    before = HANDLES.limit
    HANDLES.limit = 16
    try:
        _settle()
        yield 16
    finally:
        HANDLES.limit = before


def _settle() -> None:
    """Evict what earlier tests in this process left open under the new bound, and wait for the
    fsyncs of their dirty descriptors: a test's counts are then of its own files (a left-over dirty
    descriptor, parked and fsynced while the test ran, was over the bound for a moment)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with HANDLES.lock:
            HANDLES._evict()
        if len(HANDLES) <= HANDLES.limit and not HANDLES._syncing:
            return
        time.sleep(0.01)


def _files(tmp_path, n: int) -> list[FileRecords]:
    out = []
    for i in range(n):
        fr = FileRecords.open(str(tmp_path / f"{i:05d}.log"), file_already_exists=False)
        fr.append(bytes([i % 251]) * 4096 + str(i).encode())
        out.append(fr)
    return out


def test_pinned_descriptor_is_not_closed_by_eviction(tmp_path, small_bound):
    """A reader's pin keeps its descriptor open while 40 other files push it out of the LRU; once
    unpinned it is evicted, and the next read reopens the file by path."""
    first = _files(tmp_path, 1)[0]
    first.flush()                   # clean (a dirty descriptor goes after every clean one)
    fd = first.pin()
    try:
        others = [FileRecords.open(str(tmp_path / f"o{i}.log"), file_already_exists=False)
                  for i in range(40)]
        # this test's own descriptors: one another test left in this process may be pinned or
        # parked meanwhile (3.12's unit-test step once counted 18 in all)
        assert sum(f.fd >= 0 for f in [first, *others]) <= small_bound + 1
        assert first.fd == fd                              # still ours, still open
        assert os.fstat(fd).st_ino == os.stat(first.path).st_ino
        assert os.pread(fd, 5, 0) == bytes(5)
    finally:
        first.unpin()
    for o in others[:20]:
        o.read_at(0, 1)                                  # touch: the pinned one is the oldest now
    more = [FileRecords.open(str(tmp_path / f"m{i}.log"), file_already_exists=False) for i in range(20)]
    assert first.fd == -1                                # evicted once unpinned
    assert first.read_at(4096, 1) == b"0"               # reopened on use
    assert first.fd >= 0
    for fr in [first, *others, *more]:
        fr.close()
    assert first.fd == -1
    with pytest.raises(Exception, match="closed log file"):
        first.read_at(0, 1)


def test_concurrent_readers_and_writers_under_eviction(tmp_path, small_bound):
    """Four threads read (``pread``, ``sendfile``, a duplicated descriptor) and append to 200
    files under a bound of 16 descriptors: every read returns the bytes of its own file (a
    descriptor closed or reused under a reader would fail or return another file's bytes)."""
    files = _files(tmp_path, 200)
    errors: list[BaseException] = []
    stop = time.monotonic() + 3.0

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        r, w = os.pipe()
        try:
            while time.monotonic() < stop:
                i = rnd.randrange(len(files))
                fr = files[i]
                want = bytes([i % 251]) * 64
                how = rnd.randrange(4)
                if how == 0:
                    assert fr.read_at(100, 64) == want
                elif how == 1:
                    assert fr.send_to(w, 100, 64) == 64
                    assert os.read(r, 64) == want
                elif how == 2:
                    dup = fr.dup()
                    try:
                        assert os.pread(dup, 64, 100) == want
                    finally:
                        os.close(dup)
                else:
                    fr.append(want)
        except BaseException as e:          # reported by the main thread
            errors.append(e)
        finally:
            os.close(r)
            os.close(w)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(reader, range(4)))
    assert not errors, errors[0]
    assert HANDLES.evictions > 0
    for i, fr in enumerate(files):
        data = fr.read_at(0, fr.size)
        assert data[:4096] == bytes([i % 251]) * 4096
        assert set(data[4096 + len(str(i)):]) <= {i % 251}
        fr.close()


def test_clean_descriptors_are_evicted_before_dirty_ones(tmp_path, small_bound):
    """Eight files with unflushed appends are the least recently used of 16; opening 8 more
    closes 8 clean ones, fsyncs nothing and leaves the dirty ones open. Once every open one is
    dirty, opening more neither waits nor closes an unsynced descriptor: the fsyncs go to the sync
    threads (as many as the bound is exceeded by) and the set comes back to its bound once they
    are done. Before: the dirty ones were evicted first, each fsynced, and beyond the headroom the
    opener waited for the fsyncs."""
    dirty = _files(tmp_path, 8)                          # appended to: unflushed
    clean = [FileRecords.open(str(tmp_path / f"c{i}.log"), file_already_exists=False) for i in range(8)]
    syncs = HANDLES.eviction_syncs
    more = [FileRecords.open(str(tmp_path / f"m{i}.log"), file_already_exists=False) for i in range(8)]
    assert HANDLES.eviction_syncs == syncs               # no fsync while clean ones were left
    assert [f.fd >= 0 for f in dirty] == [True] * 8      # the dirty ones stay open
    assert [f.fd for f in clean] == [-1] * 8             # the clean ones went, oldest first
    assert len(HANDLES) <= small_bound
    for f in more:
        f.append(b"x" * 100)                             # now every open descriptor is dirty
    waits = HANDLES.waits
    extra = []
    for i in range(4):
        extra.append(FileRecords.open(str(tmp_path / f"e{i}.log"), file_already_exists=False))
        extra[-1].append(b"y" * 100)
    assert HANDLES.waits == waits
    assert HANDLES.eviction_syncs - syncs >= 4           # handed over, not done by the opener
    for f in dirty + more:
        HANDLES.wait_synced(f)
    deadline = time.monotonic() + 10
    while len(HANDLES) > small_bound and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(HANDLES) <= small_bound                   # back to the bound once synced
    assert sum(f.fd == -1 for f in dirty) >= 4           # the oldest dirty ones closed after it
    for i, f in enumerate(dirty):
        assert f.read_at(0, 4096) == bytes([i % 251]) * 4096
        assert not f.unflushed or f.fd >= 0              # never closed unsynced
    for f in dirty + clean + more + extra:
        f.close()


def test_touches_racing_evictions(tmp_path, small_bound):
    """Readers touch the LRU without its lock while their reopens evict: with the interpreter
    switching threads every microsecond (:func:`tests.racing.race`), the evictor never meets a
    touch half-way through its own step (CI once failed on CPython 3.13 with "OrderedDict mutated
    during iteration", when the evictor iterated the LRU for its oldest entry; this loop failed
    that way in 1 of 3 runs)."""
    files = _files(tmp_path, 64)
    for fr in files:
        fr.flush()                              # clean: each eviction closes, none parks
    before = HANDLES.evictions

    def read_all() -> None:
        for i, fr in enumerate(files):
            assert fr.read_at(0, 1) == bytes([i % 251])

    race(read_all, read_all, read_all, seconds=4.0)
    assert HANDLES.evictions - before > 1000
    for fr in files:
        fr.close()


def test_a_log_file_a_read_ahead_read_is_opened_on_first_use_and_serves_its_end_until_changed(tmp_path):
    """``FileRecords.open`` of a file a load's read-ahead read (``fsutil.preread``): no descriptor
    until the first read outside the bytes read (as if evicted), reads inside them served from
    them, and a truncation drops them: an append over the truncated bytes is read back, not the
    bytes read before."""
    from kafkalog.log import fsutil

    path = str(tmp_path / "00000000000000000000.log")
    data = os.urandom(1000)
    with open(path, "wb") as f:
        f.write(data)
    os.unlink(path)                     # (gone from the disk: only the read-ahead's bytes answer)
    with fsutil.preread(str(tmp_path), [os.path.basename(path)], {os.path.basename(path): (1000, data[500:])}):
        records = FileRecords.open(path)
    assert records.fd == -1 and records.size == 1000 and records not in HANDLES.lru
    assert records.read_at(600, 100) == data[600:700]
    assert records.read_at(500, 500) == data[500:]
    with open(path, "wb") as f:         # (the disk again, for what the read-ahead did not read)
        f.write(data)
    assert records.read_at(0, 100) == data[:100]
    assert records.fd >= 0 and records in HANDLES.lru
    records.truncate_to(800)
    records.append(b"N" * 50)
    assert records.read_at(800, 50) == b"N" * 50
    records.close()
    with fsutil.preread(str(tmp_path), [], {}):
        again = FileRecords.open(path)  # (not read ahead: opened now)
    assert again.fd >= 0
    again.close()
