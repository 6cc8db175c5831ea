"""Crash safety: a real writer process appends with flush.messages=1 and is killed with SIGKILL at
random points (including mid-roll); after reopening, every acknowledged record is present exactly
once at its offset, offsets are contiguous and the indexes agree with the data."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from kafkalog.log.log import Log

WRITER = os.path.join(os.path.dirname(__file__), "crash_writer.py")
CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 128, "flush.messages": 1,
          "segment.index.bytes": 4096}


def _run_and_kill(path: str, seed: int, delay: float) -> list:
    p = subprocess.Popen([sys.executable, WRITER, path, str(seed)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    # wait until the writer has opened the log, then let it run a random while
    line = p.stdout.readline()
    assert line.startswith(b"OPEN"), (line, p.stderr.read() if p.poll() is not None else b"")
    time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    out, err = p.communicate()
    acks = []
    for ln in out.split(b"\n"):
        parts = ln.split()
        if len(parts) == 4 and parts[0] == b"ACK":
            acks.append((int(parts[1]), int(parts[2]), parts[3].decode()))
    assert p.returncode == -signal.SIGKILL, err.decode()[-2000:]
    return acks


def _verify(path: str, expected: dict) -> int:
    log = Log.open(path, CONFIG, had_clean_shutdown=False, recovery_point=0)
    try:
        seen = {}
        for rec in log.records(0):
            assert rec.offset not in seen, f"offset {rec.offset} twice"
            seen[rec.offset] = rec.value
        leo = log.log_end_offset
        assert sorted(seen) == list(range(leo)), "offsets are not contiguous from 0"
        for off, prefix in expected.items():
            assert off in seen, f"acknowledged offset {off} lost (LEO {leo})"
            assert seen[off].startswith(prefix), (off, seen[off], prefix)
        # indexes agree with the data
        for seg in log.segments:
            oi = seg.offset_index
            for n in range(oi.entries):
                off, pos = _entry(oi, n)
                h = next(seg.log.iter_headers(pos))
                assert h.last_offset == off and h.position == pos
            ti = seg.time_index
            prev = -2
            for n in range(ti.entries):
                ts, off = _tentry(ti, n)
                assert ts > prev and seg.base_offset <= off < leo
                prev = ts
        return leo
    finally:
        log.close()


def _entry(oi, n):
    e = oi.entry(n)
    return (e[0], e[1]) if isinstance(e, tuple) else (e.offset, e.position)


def _tentry(ti, n):
    e = ti.entry(n) if hasattr(ti, "entry") else ti._entry(n)
    if isinstance(e, tuple):
        if hasattr(ti, "entry"):
            return e
        return (e[0], e[1] + ti.base_offset)
    return (e.timestamp, e.offset)


def _crash_loop(tmp_path, kills: int, seed: int) -> None:
    path = str(tmp_path / "crash-0")
    rnd = random.Random(seed)
    expected: dict = {}
    for k in range(kills):
        acks = _run_and_kill(path, seed * 1000 + k, rnd.uniform(0.0, 0.4))
        for first, last, tag in acks:
            for i, off in enumerate(range(first, last + 1)):
                expected[off] = f"{tag}:{i}".encode()
        leo = _verify(path, expected)
        assert leo >= (max(expected) + 1 if expected else 0)
    assert expected, "the writer never acknowledged anything"


def test_crash_kill9_quick(tmp_path):
    _crash_loop(tmp_path, kills=20, seed=1)


@pytest.mark.slow
def test_crash_kill9_long(tmp_path):
    _crash_loop(tmp_path, kills=int(os.environ.get("KAFKALOG_CRASH_KILLS", "200")), seed=7)
