"""A waiting ``poll`` is woken by new data: appended in this process (the log's publish listener), or
by another process writing a directory this one reads (inotify, or polling without it). No timing is
asserted: a missed wake-up shows as a poll returning nothing after its (long) timeout."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import kafkalog
from kafkalog.client import TopicPartition
from kafkalog.client.wakeup import FileWatcher, inotify_available

TP = TopicPartition("t", 0)
LONG_MS = 60_000

WRITER = textwrap.dedent("""
    import sys, time, kafkalog
    with kafkalog.open(sys.argv[1], background=False) as dl:
        dl.create_topic("t", 1, exist_ok=True)
        dl.produce("t", b"first", partition=0)
        print("ready", flush=True)
        for line in sys.stdin:            # one record per line, appended when asked
            time.sleep(0.2)               # the reader is waiting by now
            words = line.split()
            for w in words:               # several words: appended while the reader fetches
                dl.produce("t", w.encode(), partition=0)
                time.sleep(0.01)
            print("appended", flush=True)
""")


def test_poll_woken_by_an_append_in_this_process(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        c = dl.consumer("t", auto_offset_reset="latest")
        assert c.poll(timeout_ms=0) == {}

        def append() -> None:
            time.sleep(0.2)
            dl.produce("t", b"hello", partition=0)
        th = threading.Thread(target=append)
        th.start()
        got = c.poll(timeout_ms=LONG_MS)
        th.join()
        assert [r.value for r in got[TP]] == [b"hello"]
        c.close()
        # a closed consumer leaves no listener behind, nor does one dropped without close()
        log = dl.manager.get_log("t", 0)
        assert log._publish_listeners == ()
        c2 = dl.consumer("t")
        c2.poll(timeout_ms=0)
        assert len(log._publish_listeners) == 1
        del c2
        gc.collect()
        dl.produce("t", b"more", partition=0)
        assert log._publish_listeners == ()


def test_close_from_another_thread_ends_a_waiting_poll(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        c = dl.consumer("t")
        th = threading.Timer(0.2, c.close)
        th.start()
        assert c.poll(timeout_ms=LONG_MS) == {}
        th.join()


@pytest.mark.parametrize("use_inotify", [True, False], ids=["inotify", "polling"])
def test_poll_woken_by_another_process(tmp_path, monkeypatch, use_inotify):
    if use_inotify and not inotify_available():
        pytest.skip("no inotify here")
    if not use_inotify:
        monkeypatch.setenv("KAFKALOG_NO_INOTIFY", "1")
    d = str(tmp_path / "d")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, d], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        with kafkalog.open(d, read_only=True) as dl:
            c = dl.consumer("t", auto_offset_reset="earliest")
            assert [r.value for r in c.poll(timeout_ms=LONG_MS)[TP]] == [b"first"]
            for word in ("second", "third"):
                writer.stdin.write(word + "\n")
                writer.stdin.flush()
                got = c.poll(timeout_ms=LONG_MS)        # waits: the writer appends in 0.2 s
                assert [r.value for r in got[TP]] == [word.encode()]
                assert writer.stdout.readline().strip() == "appended"
            # a burst: appends landing while the reader is busy fetching must still wake it
            burst = [b"b%d" % i for i in range(30)]
            writer.stdin.write(" ".join(w.decode() for w in burst) + "\n")
            writer.stdin.flush()
            seen = []
            while len(seen) < len(burst):
                got = c.poll(timeout_ms=LONG_MS, max_records=3)
                assert got, f"no wake-up after {seen}"
                seen += [r.value for r in got[TP]]
            assert seen == burst
            assert writer.stdout.readline().strip() == "appended"
            c.close()
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert writer.returncode == 0


def _sees_a_change_and_a_wake(w, tmp_path):
    """A watcher of ``tmp_path``: no change yet, then a new file wakes it, then ``wake`` does."""
    w.watch(str(tmp_path))
    w.arm()
    assert w.wait(0.05) is False
    (tmp_path / "00000000000000000000.log").write_bytes(b"x")
    assert w.wait(LONG_MS / 1000) is True
    w.wake()
    assert w.wait(LONG_MS / 1000) is True


def test_file_watcher_sees_changes_without_inotify(tmp_path):
    w = FileWatcher(use_inotify=False, poll_interval_ms=10)
    _sees_a_change_and_a_wake(w, tmp_path)
    w.close()


@pytest.mark.parametrize("use_inotify", [
    False, pytest.param(True, marks=pytest.mark.skipif(not inotify_available(), reason="no inotify"))])
def test_file_watcher_with_descriptors_past_fd_setsize(tmp_path, use_inotify):
    """A process holding over 1,024 descriptors (a log of a few hundred segments does): the
    watcher's own descriptors are numbered past FD_SETSIZE and it still waits and wakes."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        w = FileWatcher(use_inotify=use_inotify, poll_interval_ms=10)
        try:
            _sees_a_change_and_a_wake(w, tmp_path)
        finally:
            w.close()
    finally:
        for fd in held:
            os.close(fd)
