"""Full disks and I/O errors: a writer process whose writes start failing -- EFBIG from
RLIMIT_FSIZE, ENOSPC from a small tmpfs mounted for the test -- gets a typed KafkalogIOError (never
a crash, a signal or an untyped OSError), and the directory stays readable and recoverable with
every acknowledged record."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch
from tests.tmpfs import fill_tmpfs, grow_tmpfs, mounted_tmpfs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_writer(data_dir, limit, seed, interval=4096):
    p = subprocess.run([sys.executable, "-m", "tests.reliability.diskfull_writer", str(data_dir), str(limit),
                        str(seed), str(interval)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, f"writer died (status {p.returncode}): {p.stderr[-3000:]}"
    acks = {}
    errors = []
    for ln in p.stdout.splitlines():
        if ln.startswith("ACK "):
            _, off, val = ln.split(" ", 2)
            acks[int(off)] = val
        elif ln.startswith(("ERR", "CLOSE-ERR")):
            errors.append(ln)
    return acks, errors, p.stdout


def _check_reopen(data_dir, acks):
    m = LogManager(str(data_dir), {}, background=False)
    try:
        log = m.get_log("t", 0)
        got = {r.offset: r.value.decode() for r in log.records()}
        lost = [o for o in acks if got.get(o) != acks[o]]
        assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"
        assert sorted(got) == list(range(log.log_start_offset, log.log_end_offset))
        return m, log
    except BaseException:
        m.close()
        raise


def _assert_typed(errors, out):
    assert errors, f"the writes never failed:\n{out[-500:]}"
    for e in errors:
        assert e.split(" ")[1].startswith("kafkalog.errors."), f"untyped error: {e}"


def test_file_size_limit_efbig(tmp_path):
    """RLIMIT_FSIZE (1 MiB) on the writer: EFBIG -> KafkalogIOError; nothing acknowledged lost."""
    d = tmp_path / "data"
    acks, errors, out = _run_writer(d, 1 << 20, seed=1)
    _assert_typed(errors, out)
    assert "KafkalogIOError" in errors[0]
    assert len(acks) > 100
    m, log = _check_reopen(d, acks)
    try:
        info = log.append(build_batch([(None, b"after", 1_700_000_000_000, None)]))
        assert info.first_offset == log.log_end_offset - 1
    finally:
        m.close()


@pytest.fixture
def small_tmpfs(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "3m") as mnt:
        yield mnt


@pytest.mark.parametrize("interval", [4096])
def test_disk_full_enospc(small_tmpfs, interval):
    """A 3 MiB tmpfs fills up (with a small index interval the mmap-ed index grows into new
    pages while the disk is full): typed errors only, the process survives, and the directory
    reopens with everything once space is back (reopening *on* the full disk: next test)."""
    d = small_tmpfs / "data"
    acks, errors, out = _run_writer(d, 0, seed=2, interval=interval)
    _assert_typed(errors, out)
    assert len(acks) > 100
    grow_tmpfs(small_tmpfs, "16m")
    m, log = _check_reopen(d, acks)
    try:
        log.append(build_batch([(None, b"after", 1_700_000_000_000, None)]))
        log.flush()
    finally:
        m.close()


REOPEN = r"""
import sys
from kafkalog.errors import KafkalogError
from kafkalog.log.manager import LogManager
try:
    m = LogManager(sys.argv[1], {}, background=False)
    n = sum(1 for _ in m.get_log("t", 0).records())
    m.close()
    print("OPENED", n)
except KafkalogError as e:
    print("TYPED", type(e).__name__, e)
"""


def test_reopen_on_full_disk_rebuilding_an_index(small_tmpfs):
    """Deterministic: a flushed log whose .index is missing, on a completely full file system.
    Opening it must either work or fail with a typed error -- never kill the process."""
    d = small_tmpfs / "data"
    m = LogManager(str(d), {}, background=False)
    m.create_topic("t", 1, {"index.interval.bytes": 64, "segment.index.bytes": 65536})
    log = m.get_log("t", 0)
    for i in range(3000):
        log.append(build_batch([(None, b"x" * 200, 1_700_000_000_000 + i, None)]))
    m.close()
    for name in os.listdir(d / "t-0"):
        if name.endswith(".index"):
            os.unlink(d / "t-0" / name)
    fill_tmpfs(small_tmpfs)
    p = subprocess.run([sys.executable, "-c", REOPEN, str(d)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, f"the process died (status {p.returncode}) opening a log on a full disk"
    assert p.stdout.startswith(("OPENED 3000", "TYPED")), p.stdout + p.stderr[-2000:]
