"""``kafkalog produce`` (a real process, records on a stdin pipe) into a data directory whose file
system fills up: one clear error naming the file, exit code 2, a summary of what was written (no
record after the failed batch is written past the hole), and every record the summary reports as
written is there after a reopen, which recovers the directory (``kafkalog verify`` passes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kafkalog
from tests.tmpfs import grow_tmpfs, mounted_tmpfs

RECORDS = 20_000            # ~8 MiB of input for a 3 MiB file system


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "mnt", "3m") as mnt:
        yield mnt


def _input() -> bytes:
    return b"".join(json.dumps({"key": f"k{i}", "value": f"{i:08d}|" + "v" * 400}).encode() + b"\n"
                    for i in range(RECORDS))


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_produce_into_a_file_system_that_fills_up(small_tmpfs: Path, fmt: str) -> None:
    data = small_tmpfs / "data"
    # small indexes (they reserve their blocks): the .log is what fills the file system
    p = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "produce", str(data), "t",
                        "--config", "segment.index.bytes=65536", "--format", fmt],
                       input=_input(), capture_output=True, timeout=300)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 2, out[-2000:] + err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    if fmt == "json":
        lines = [json.loads(x) for x in out.splitlines()]
        assert err == f"kafkalog produce: created the data directory {data}\n"   # (not an error)
        errors = [x for x in lines if x["type"] == "error"]
        assert len(errors) == 1, lines                                  # printed once
        assert errors[0]["error"] == "KafkalogIOError"
        assert errors[0]["file"].startswith(str(data / "t-0")), errors[0]
        assert "No space left on device" in errors[0]["message"]
        summary = [x for x in lines if x["type"] == "summary"]
        assert len(summary) == 1, lines
        written = summary[0]["partitions"]["0"]
        first, last = written["firstOffset"], written["lastOffset"]
        assert summary[0]["records"] == last - first + 1                # what was written, not read
    else:
        assert out == ""
        errors = [ln for ln in err.splitlines() if ln.startswith("Error:")]
        assert len(errors) == 1, err
        assert str(data / "t-0") in errors[0] and "No space left on device" in errors[0], errors
        summary_lines = [ln for ln in err.splitlines() if "record(s) appended to t" in ln]
        assert len(summary_lines) == 1, err
        # "N record(s) appended to t; partition 0: offsets FIRST..LAST"
        first, last = map(int, summary_lines[0].rsplit(" ", 1)[1].split(".."))
        assert summary_lines[0].startswith(f"{last - first + 1} record(s)"), summary_lines
    assert first == 0 and 1000 < last < RECORDS - 1

    grow_tmpfs(small_tmpfs, "64m")
    # the stop after the failure was not a clean shutdown: the reopen recovers the partial tail
    with kafkalog.open(data, background=False) as dl:
        got = {r.offset: r.value for r in dl.consume("t")}
    for o in range(first, last + 1):
        assert (got.get(o) or b"")[:9] == b"%08d|" % o, f"offset {o} reported as written is lost"
    v = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", str(data)],
                       capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]



def test_produce_whose_last_append_fails(small_tmpfs: Path) -> None:
    """A short input (one batch, appended when the input ends) into a file system left with a
    little less room each time: every run either appends all its records and exits 0, or prints
    one error and exits 2 with a summary of what was written; one of them is the last append
    failing (it exited 0 with nothing written and no error, before the fix)."""
    data = small_tmpfs / "data"
    cmd = [sys.executable, "-m", "kafkalog.cli.main", "produce", str(data), "t",
           "--config", "segment.index.bytes=65536"]
    batch = b"".join(json.dumps({"value": f"{i}|" + "x" * 1000}).encode() + b"\n" for i in range(10))
    failed_files = set()
    for free_kib in range(0, 48, 4):
        shutil.rmtree(data, ignore_errors=True)
        (small_tmpfs / "filler").unlink(missing_ok=True)
        first = subprocess.run(cmd, input=b'{"value": "first"}\n', capture_output=True, timeout=120)
        assert first.returncode == 0, first.stderr.decode()[-2000:]
        left = os.statvfs(small_tmpfs)
        with open(small_tmpfs / "filler", "wb") as f:       # leave free_kib KiB of room
            os.posix_fallocate(f.fileno(), 0, left.f_bavail * left.f_frsize - free_kib * 1024)
        p = subprocess.run(cmd, input=batch, capture_output=True, timeout=120)
        out = p.stdout.decode()
        lines = [json.loads(x) for x in out.splitlines()]
        summary = [x for x in lines if x["type"] == "summary"]
        errors = [x for x in lines if x["type"] == "error"]
        assert len(summary) == 1, (free_kib, out, p.stderr.decode()[-2000:])
        if p.returncode == 0:
            assert errors == [] and summary[0]["records"] == 10, (free_kib, lines)
        else:
            assert p.returncode == 2 and len(errors) == 1, (free_kib, lines)
            assert errors[0]["error"] == "KafkalogIOError", (free_kib, errors)
            failed_files.add(os.path.basename(errors[0]["file"] or ""))
    assert "00000000000000000000.log" in failed_files, failed_files      # the last append failed


def test_a_small_disk_takes_a_record_at_the_default_index_size(tmp_path: Path) -> None:
    """A 2 MiB file system takes a record at the defaults: each new segment's .index and
    .timeindex are set to segment.index.bytes (10 MiB) as Kafka sets them, sparse, and hold no
    blocks until entries are written (the closed .timeindex holds its one final entry; they
    reserved their 10 MiB each before: the same produce
    failed with "no space for a 10 MiB index", issue 36 item 2)."""
    with mounted_tmpfs(tmp_path / "mnt", "2m") as mnt:
        data = mnt / "data"
        cmd = [sys.executable, "-m", "kafkalog.cli.main", "produce", str(data), "t", "--format", "text"]
        p = subprocess.run(cmd, input=b'{"value": "one"}\n', capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        for suffix in (".index", ".timeindex"):
            st = os.stat(data / "t-0" / f"00000000000000000000{suffix}")
            assert st.st_blocks <= 8, (suffix, st.st_size, st.st_blocks)      # a page at most


def test_an_index_growing_into_a_full_disk_says_so(small_tmpfs: Path) -> None:
    """The index files are sparse, so an index entry may need a block the full disk no longer has
    (a store through the mapping into a hole would kill the process with SIGBUS): the block is
    reserved before the append writes anything, and the append fails with one typed error naming
    the .index; the .log is unchanged, and with room again the same input is appended."""
    data = small_tmpfs / "data"
    cmd = [sys.executable, "-m", "kafkalog.cli.main", "produce", str(data), "t", "--format", "text",
           "--config", "index.interval.bytes=10"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None
    p.stdin.write(b'{"value": "first record"}\n')
    p.stdin.flush()
    log = data / "t-0" / "00000000000000000000.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.stat().st_size > 0):                 # appended as it arrived
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    size = log.stat().st_size
    left = os.statvfs(small_tmpfs)
    with open(small_tmpfs / "filler", "wb") as f:                  # no room at all
        os.posix_fallocate(f.fileno(), 0, left.f_bavail * left.f_frsize)
    second = b'{"value": "second"}\n'
    p.stdin.write(second)
    p.stdin.close()
    assert p.stderr is not None
    err = p.stderr.read().decode()
    assert p.wait(120) == 2 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, err
    assert str(data / "t-0" / "00000000000000000000.index") in errors[0], errors
    assert "no space left for the index's next entries" in errors[0], errors
    assert log.stat().st_size == size
    (small_tmpfs / "filler").unlink()
    p = subprocess.run(cmd, input=second, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    with kafkalog.open(data, background=False) as dl:
        assert [r.value for r in dl.consume("t")] == [b"first record", b"second"]
