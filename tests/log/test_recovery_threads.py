"""``num.recovery.threads.per.data.dir`` (Kafka's key and default 2, issue 35): that many threads
work on a data directory's load, one opening the partitions one after the other, the others
reading the next directories' files ahead of it (``kafkalog.log.read_ahead``: two threads opening
partitions at once only took turns on the GIL, slower than one; docs/kafka-compatibility.md).
Whatever the count, a load hands out the same logs in the same order with the same recovery
reports, every partition opened on the loading thread; a partition that cannot be loaded fails
the load with its typed error and leaves no descriptor open and no read-ahead thread running.
The read-ahead's batch and window are made small here so that 30 partitions use them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log import kernel as log_kernel
from kafkalog.log import log as log_module
from kafkalog.log import read_ahead
from kafkalog.log.manager import LogManager
from kafkalog.log.read_ahead import ReadAhead

PARTITIONS = 30


@pytest.fixture(autouse=True)
def _small_read_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_ahead, "BATCH", 4)
    monkeypatch.setattr(read_ahead, "WINDOW", 8)


def _read_ahead_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kafkalog-log-read-ahead")]


def _crashed(path: Path) -> str:
    data = str(path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", PARTITIONS)
    for p in range(PARTITIONS):
        m.get_log("t", p).append_records([b"record %d" % p] * (p % 4 + 1))
    m.abandon()                                 # a crash: every partition is recovered
    return data


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _loaded(data: str, threads: int) -> tuple[list[str], list[tuple[int, int, str]], dict[str, int]]:
    seen: list[tuple[int, int, str]] = []
    m = LogManager(data, {"num.recovery.threads.per.data.dir": threads}, background=False,
                   progress=lambda i, n, name: seen.append((i, n, name)))
    try:
        ends = {f"t-{p}": m.get_log("t", p).log_end_offset for p in range(PARTITIONS)}
        reports = {name: r.log_end_offset for name, r in m.load_result.recovery_reports.items()}
        assert reports == ends
        return list(m.load_result.loaded), seen, ends
    finally:
        m.abandon()                             # (each load recovers again)


def test_the_threads_load_the_same_logs_in_the_same_order(tmp_path: Path) -> None:
    data = _crashed(tmp_path)
    one = _loaded(data, 1)
    assert one[2] == {f"t-{p}": p % 4 + 1 for p in range(PARTITIONS)}
    assert [i for i, _n, _name in one[1]] == list(range(1, PARTITIONS + 1))
    for threads in (2, 5):
        assert _loaded(data, threads) == one
    assert _read_ahead_threads() == []


def test_every_partition_is_opened_on_the_loading_thread(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = _crashed(tmp_path)
    opened_on: list[int] = []
    real_open = log_module.Log.open.__func__          # type: ignore[attr-defined]

    def counting_open(cls: type, *args: object, **kwargs: object) -> log_module.Log:
        opened_on.append(threading.get_ident())
        return real_open(cls, *args, **kwargs)

    monkeypatch.setattr(log_module.Log, "open", classmethod(counting_open))
    m = LogManager(data, {"num.recovery.threads.per.data.dir": 3}, background=False)
    m.abandon()
    assert opened_on == [threading.get_ident()] * PARTITIONS


def test_a_load_reads_ahead_on_the_other_threads_with_the_compiled_kernel_only() -> None:
    want = {1: 0, 2: 1, 5: 4} if log_kernel.IMPLEMENTATION != "python" else {1: 0, 2: 0, 5: 0}
    assert {n: read_ahead.threads_for(n) for n in want} == want


def test_the_read_ahead_reads_every_directory_within_its_window(tmp_path: Path) -> None:
    data = _crashed(tmp_path)
    dirs = sorted(str(p) for p in Path(data).iterdir() if p.is_dir())
    assert len(dirs) == PARTITIONS
    with ReadAhead(dirs, 2, batch=4, window=8) as ahead:
        for i in range(len(dirs)):
            ahead.reached(i)
            time.sleep(0.002)                        # (a loader's pace: the threads keep ahead)
    # each partition holds a .log, two indexes, a leader-epoch-checkpoint, partition.metadata
    assert ahead.files >= 5 * 8                      # (at least the window's before it could stop)
    assert ahead.batches <= -(-PARTITIONS // 4)
    assert _read_ahead_threads() == []


def test_the_read_ahead_stops_at_its_window_and_skips_what_the_loader_passed(tmp_path: Path) -> None:
    dirs = [str(tmp_path / f"t-{p}") for p in range(100)]      # (missing: nothing to read)
    ahead = ReadAhead(dirs, 1, batch=4, window=8)
    with ahead:
        deadline = threading.Event()
        for _ in range(200):                 # the window's two batches taken, then it waits
            if ahead.batches == 2:
                break
            deadline.wait(0.01)
        deadline.wait(0.1)
        assert ahead.batches == 2
        ahead.reached(80)                     # the loader jumped ahead: 8..79 never read
        for _ in range(200):
            if ahead.batches == 4:
                break
            deadline.wait(0.01)
        deadline.wait(0.1)
        assert ahead.batches == 4             # 80..83, 84..87: the window from 80, then it waits
    assert ahead.files == 0
    assert _read_ahead_threads() == []


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_partition_that_cannot_be_loaded_fails_the_load_and_leaves_nothing_open(
        tmp_path: Path, threads: int) -> None:
    data = _crashed(tmp_path)
    bad = Path(data) / "t-17" / "leader-epoch-checkpoint"
    bad.write_bytes(b"0\n1\nnot an entry\n")
    before = _fds()
    with pytest.raises(KafkalogError) as e:
        LogManager(data, {"num.recovery.threads.per.data.dir": threads}, background=False)
    assert str(bad) in str(e.value)
    assert _fds() == before
    assert _read_ahead_threads() == []
    bad.write_bytes(b"0\n0\n")                    # repaired: the directory loads
    m = LogManager(data, {"num.recovery.threads.per.data.dir": threads}, background=False)
    try:
        assert len(m.partitions()) == PARTITIONS
    finally:
        m.close()


@pytest.fixture
def unhurried_load(monkeypatch: pytest.MonkeyPatch) -> list[ReadAhead]:
    """The read-ahead of each load from now on (appended as made), and a loader slowed by 3 ms a
    partition, as a busy machine's: the read-ahead gets ahead of it."""
    made: list[ReadAhead] = []

    class Counted(ReadAhead):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    real_open = log_module.Log.open.__func__          # type: ignore[attr-defined]

    def unhurried_open(cls: type, *args: object, **kwargs: object) -> log_module.Log:
        time.sleep(0.003)
        return real_open(cls, *args, **kwargs)

    monkeypatch.setattr(log_module.Log, "open", classmethod(unhurried_open))
    monkeypatch.setattr("kafkalog.log.manager.ReadAhead", Counted)
    return made


def test_a_directory_read_ahead_is_not_listed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     unhurried_load: list[ReadAhead]) -> None:
    """Each partition the read-ahead read before the loader came to it is not listed by the loader
    (nor its small files read: ``tests/reliability/test_read_ahead_invisible.py`` checks that what
    it is handed gives the same log); the others are."""
    if log_kernel.IMPLEMENTATION == "python":
        pytest.skip("the pure-Python kernels read nothing ahead of a load (read_ahead.threads_for)")
    data = _crashed(tmp_path)
    listed: list[str] = []
    real_listdir = os.listdir
    loading = threading.get_ident()

    def counting_listdir(path: str = ".") -> list[str]:
        if threading.get_ident() == loading and str(path).startswith(data + "/t-"):
            listed.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", counting_listdir)
    m = LogManager(data, {"num.recovery.threads.per.data.dir": 2}, background=False)
    m.abandon()
    ahead = unhurried_load[-1]                      # (the load under test: the last made)
    assert ahead.taken > 0
    assert len(listed) == PARTITIONS - ahead.taken


def test_a_directory_read_ahead_is_not_touched_by_the_loader_after_a_clean_shutdown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unhurried_load: list[ReadAhead]) -> None:
    """After a clean shutdown, a partition the read-ahead read is loaded from what it read: the
    loading thread lists, stats and opens nothing in its directory (its ``.log`` is opened on first
    use); every other partition's directory is read by the loader itself."""
    if log_kernel.IMPLEMENTATION == "python":
        pytest.skip("the pure-Python kernels read nothing ahead of a load (read_ahead.threads_for)")
    data = str(tmp_path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", PARTITIONS)
    for p in range(PARTITIONS):
        m.get_log("t", p).append_records([b"record %d" % p] * (p % 4 + 1))
    m.close()
    touched: set[str] = set()
    loading = threading.get_ident()

    def noting(real: Any) -> Any:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            p = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
            if threading.get_ident() == loading and p.startswith(data + "/t-"):
                touched.add(p[len(data) + 1:].split("/")[0])
            return real(path, *args, **kwargs)
        return call

    for name in ("listdir", "stat", "open", "scandir"):
        monkeypatch.setattr(os, name, noting(getattr(os, name)))
    m = LogManager(data, {"num.recovery.threads.per.data.dir": 2}, background=False)
    try:
        assert m.had_clean_shutdown
        ahead = unhurried_load[-1]                      # (the load under test: the last made)
        assert ahead.taken > PARTITIONS // 2
        assert len(touched) == PARTITIONS - ahead.taken, sorted(touched)
        assert [m.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == \
            [p % 4 + 1 for p in range(PARTITIONS)]
    finally:
        m.close()
