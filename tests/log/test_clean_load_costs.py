"""What opening a data directory after a clean shutdown costs per partition, counted in system calls
(issue 35: a restart at 100,000 partitions is bounded by this work; not timed). Each partition's
directory is listed once by the loader, whose listing the later steps reuse (the producer state's
snapshots, the index files' presence), and one record's segment is read once for its next offset,
not once per step that asks. Counted with ``sys.setprofile``'s C calls (``posix.listdir``,
``posix.stat``, ``posix.pread``) over a ``LogManager``'s load of 40 partitions; the same load after a
crash (every step lists again) is checked to still find every record."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kafkalog.log.manager import LogManager
from tests.log.test_crash_restart_costs import load_counting_c_calls, one_record_partitions

PARTITIONS = 40


def _made(path: Path) -> str:
    return one_record_partitions(path, PARTITIONS)


def _calls_loading(data: str) -> Counter[str]:
    m, calls = load_counting_c_calls(data)
    try:
        assert m.had_clean_shutdown
        assert [m.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == [1] * PARTITIONS
    finally:
        m.close()
    return calls


def test_a_clean_load_lists_each_partition_once_and_reads_its_segment_once(tmp_path: Path) -> None:
    calls = _calls_loading(_made(tmp_path))
    n = PARTITIONS
    # one listing by the loader, one by the producer state's construction (the manager's); a few
    # of the data directory itself
    assert calls["listdir"] <= 2 * n + 8, calls["listdir"]
    # one read of the segment's last batch for its next offset (there were three: the overflow
    # check, the first batch's magic and the log end offset again) and one of its time index's
    # last entry
    assert calls["pread"] <= 2 * n + 2, calls["pread"]
    assert calls["stat"] <= 10 * n + 20, calls["stat"]


def test_a_load_after_a_crash_still_lists_again(tmp_path: Path) -> None:
    data = _made(tmp_path)
    m = LogManager(data, {}, background=False)
    m.get_log("t", 0).append_records([b"two"])
    m.abandon()                                    # no clean shutdown marker: recovery runs
    m = LogManager(data, {}, background=False)
    try:
        assert not m.had_clean_shutdown
        assert m.get_log("t", 0).log_end_offset == 2
        assert [m.get_log("t", p).log_end_offset for p in range(1, PARTITIONS)] == [1] * (PARTITIONS - 1)
    finally:
        m.close()
