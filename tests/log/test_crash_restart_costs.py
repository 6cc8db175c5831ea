"""A restart after a crash waits on the disk a number of times that does not grow with the
partitions (issue 35: after SIGKILL, each partition's recovery wrote its producer snapshot with two
fsyncs, file and directory, one partition after the other: 10,000 partitions, 20,000 waits on the
disk before the first client was served). The fsyncs made while a ``LogManager`` loads a data
directory left by a crash are counted (``sys.setprofile``'s C calls of ``posix.fsync``, not timed),
for 10 and for 60 partitions that each hold a record; the snapshots are still written (a lost one is
rebuilt from the log, found by its CRC, as the snapshots the rebuild of the producer state takes)."""

from __future__ import annotations

import glob
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log.manager import LogManager


def one_record_partitions(path: Path, partitions: int) -> str:
    """A data directory under ``path`` with topic ``t`` of ``partitions`` partitions holding one
    record each, closed cleanly."""
    path.mkdir(exist_ok=True)
    data = str(path / "data")
    m = LogManager(data, {}, background=False)
    m.create_topic("t", partitions)
    for p in range(partitions):
        m.get_log("t", p).append_records([b"one record"])
    m.close()
    return data


def _crashed_dir(path: Path, partitions: int) -> str:
    data = one_record_partitions(path, partitions)
    LogManager(data, {}, background=False).abandon()       # restarted, then a crash
    for snap in glob.glob(os.path.join(data, "t-*", "*.snapshot")):
        os.unlink(snap)                                     # the recovery writes them again
    return data


def load_counting_c_calls(data: str) -> tuple[LogManager, Counter[str]]:
    """A ``LogManager`` opened on ``data`` and the C functions it called while loading, by name."""
    calls: Counter[str] = Counter()

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            calls[getattr(arg, "__name__", "")] += 1
    sys.setprofile(prof)
    try:
        m = LogManager(data, {}, background=False)
    finally:
        sys.setprofile(None)
    return m, calls


def _fsyncs_loading(data: str) -> int:
    m, calls = load_counting_c_calls(data)
    n = calls["fsync"]
    try:
        assert not m.load_result.recovery_reports or all(
            r.log_end_offset == 1 for r in m.load_result.recovery_reports.values())
        assert len(glob.glob(os.path.join(data, "t-*", "*.snapshot"))) == len(m.partitions_of("t"))
    finally:
        m.abandon()
    return n


def test_fsyncs_of_a_restart_after_a_crash_do_not_grow_with_partitions(tmp_path: Path) -> None:
    few = _fsyncs_loading(_crashed_dir(tmp_path / "few", 10))
    many = _fsyncs_loading(_crashed_dir(tmp_path / "many", 60))
    assert many == few, f"loading after a crash: {few} fsyncs for 10 partitions, {many} for 60"


if __name__ == "__main__":          # pragma: no cover
    sys.exit(pytest.main([__file__]))
