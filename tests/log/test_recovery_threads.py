"""``num.recovery.threads.per.data.dir`` (Kafka's key, issue 35): the partitions of a data directory
are loaded by that many threads. kafkalog's default is 1, not Kafka 4's 2: with the GIL a second
thread made a warm restart of 100,000 partitions slower (55.5 s against 30.8 s), a cold one a
little faster (68.7 against 76.4 s; docs/kafka-compatibility.md). Whatever the count, a load
hands out the same logs in the same order with the same recovery reports, and a partition that
cannot be loaded fails the load with its typed error and leaves no descriptor open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log.manager import LogManager

PARTITIONS = 30


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


@pytest.mark.parametrize("threads", [1, 3])
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
    bad.write_bytes(b"0\n0\n")                    # repaired: the directory loads
    m = LogManager(data, {"num.recovery.threads.per.data.dir": threads}, background=False)
    try:
        assert len(m.partitions()) == PARTITIONS
    finally:
        m.close()
