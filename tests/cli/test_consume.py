"""``kafkalog consume`` as an operator runs it: a real process, real pipes, another process appending."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest

import kafkalog
from tests.cli.test_careless_paths import EXE, cli, json_lines

CMD = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, {"segment.bytes": 4000, "index.interval.bytes": 100})
        for i in range(100):
            dl.produce("t", b"v%03d" % i + b"." * 50, key=b"k%d" % (i % 5), partition=0, timestamp=1000 + i)
    return d


def offsets(res: subprocess.CompletedProcess) -> List[int]:
    assert res.returncode == 0, res.stderr + res.stdout
    return [x["offset"] for x in json_lines(res.stdout)]


def read_line(p: subprocess.Popen, timeout: float = 30) -> Optional[str]:
    """One line of the process's stdout, or None after ``timeout`` seconds.

    Reads the pipe's file descriptor a byte at a time: a buffered ``readline`` could pull a second
    line into Python's buffer, where ``poll`` on the descriptor no longer sees it.
    """
    assert p.stdout is not None
    fd = p.stdout.fileno()
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        poller = select.poll()              # not select.select: descriptors may pass FD_SETSIZE
        poller.register(fd, select.POLLIN)
        r = poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
        if not r:
            return None
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line.decode() if line else None


def test_each_offset_form(data_dir: Path) -> None:
    d = str(data_dir)
    assert offsets(cli("consume", d, "t")) == list(range(100))
    assert offsets(cli("consume", d, "t", "--offset", "beginning", "--max-records", "2")) == [0, 1]
    assert offsets(cli("consume", d, "t", "--offset", "97")) == [97, 98, 99]
    assert offsets(cli("consume", d, "t", "--offset", "-2")) == [98, 99]
    assert offsets(cli("consume", d, "t", "--offset", "-1000")) == list(range(100))
    assert offsets(cli("consume", d, "t", "--offset", "end")) == []
    assert offsets(cli("consume", d, "t", "--timestamp", "1095")) == [95, 96, 97, 98, 99]
    assert offsets(cli("consume", d, "t", "--timestamp", "99999")) == []
    res = cli("consume", d, "t", "--offset", "soon")
    assert res.returncode == 2 and "--offset" in res.stderr


def test_text_format_with_key_separator(data_dir: Path) -> None:
    res = cli("consume", str(data_dir), "t", "--offset", "-2", "--format", "text", "-K", "=")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["k3=v098" + "." * 50, "k4=v099" + "." * 50]
    res = cli("consume", str(data_dir), "t", "--offset", "-1", "--format", "text")
    assert res.stdout == "v099" + "." * 50 + "\n"


def test_out_of_range_start_is_an_error_unless_a_reset_is_asked(data_dir: Path) -> None:
    d = str(data_dir)
    res = cli("consume", d, "t", "--offset", "500")
    assert res.returncode == 2
    err = json_lines(res.stdout)[-1]
    assert err["type"] == "error" and "500" in err["message"] and err["file"].endswith("t-0")
    res = cli("consume", d, "t", "--offset", "500", "--format", "text")
    assert res.returncode == 2 and res.stdout == "" and "out of range" in res.stderr
    assert offsets(cli("consume", d, "t", "--offset", "500", "--auto-offset-reset", "earliest",
                       "--max-records", "1")) == [0]
    assert offsets(cli("consume", d, "t", "--offset", "500", "--auto-offset-reset", "latest")) == []


def test_a_cut_batch_in_an_older_segment_is_damage_with_file_and_position(data_dir: Path) -> None:
    seg = data_dir / "t-0" / "00000000000000000000.log"
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 7)
    res = cli("consume", str(data_dir), "t")
    assert res.returncode == 1
    lines = json_lines(res.stdout)
    err = lines[-1]
    assert err["type"] == "error" and err["error"] == "CorruptRecordError"
    assert err["file"] == str(seg) and 0 < err["position"] < size
    assert all(x.get("type") != "error" for x in lines[:-1])
    res = cli("consume", str(data_dir), "t", "--format", "text")
    assert res.returncode == 1 and str(seg) in res.stderr and str(err["position"]) in res.stderr


def test_group_resumes_where_it_committed(data_dir: Path) -> None:
    d = str(data_dir)
    before = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*"))
    assert offsets(cli("consume", d, "t", "--max-records", "5")) == list(range(5))
    assert sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*")) == before, \
        "consume without --group writes nothing"
    assert offsets(cli("consume", d, "t", "--group", "g", "--max-records", "3")) == [0, 1, 2]
    assert offsets(cli("consume", d, "t", "--group", "g", "--max-records", "4")) == [3, 4, 5, 6]
    with kafkalog.open(d, read_only=True) as dl:
        c = dl.consumer(group_id="g")
        assert c.committed(("t", 0)) == 7
    assert offsets(cli("consume", d, "t", "--group", "g", "--offset", "-1")) == [99]
    assert offsets(cli("consume", d, "t", "--group", "g")) == []


def test_group_on_a_locked_directory_says_so(data_dir: Path) -> None:
    with kafkalog.open(data_dir, background=False):
        res = cli("consume", str(data_dir), "t", "--group", "g", "--format", "text")
        assert res.returncode == 2 and "lock" in res.stderr and "--group" in res.stderr
        assert offsets(cli("consume", str(data_dir), "t", "--offset", "-1")) == [99]


def test_follow_with_a_group_commits_what_it_printed_on_ctrl_c(data_dir: Path) -> None:
    p = subprocess.Popen([*CMD, "consume", str(data_dir), "t", "--follow", "--offset", "-1",
                          "--group", "f", "--format", "text"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert read_line(p) == "v099" + "." * 50 + "\n"
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err                  # the shell's status of a Ctrl-C
    assert "Traceback" not in err and "Aborted" not in err
    with kafkalog.open(data_dir, read_only=True) as dl:
        assert dl.consumer(group_id="f").committed(("t", 0)) == 100, (out, err, sorted(os.listdir(data_dir))[:3])


def test_follow_read_only_sees_appends_of_another_process(data_dir: Path) -> None:
    # --offset 100 is the end: the same start whether the process is up before the writer appends
    # (the usual case: it then waits and is woken) or only after it (a slow start under load)
    p = subprocess.Popen([*CMD, "consume", str(data_dir), "t", "--follow", "--offset", "100"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)                       # let it reach the end and wait before the writer appends
        with kafkalog.open(data_dir, background=False) as dl:
            dl.produce("t", b"new-1", partition=0)
            dl.produce("t", b"new-2", partition=0)
        got = [read_line(p, 10), read_line(p, 10)]
        assert [json.loads(x)["value"] for x in got if x] == ["new-1", "new-2"]
        assert [json.loads(x)["offset"] for x in got if x] == [100, 101]
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and err == ""
