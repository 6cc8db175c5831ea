"""Wake-up latency: the time from an append to a waiting consumer ``poll`` returning it.

Goal (issue 12): new data wakes a waiting ``poll`` promptly, within the process that appends (by
notification) and from another process (by watching the files).

Scenarios, ``--samples`` appends each, one record per append, a pause between appends so the consumer
is always waiting when the append happens:

* ``in-process``: a thread appends (``DataLog.produce``) to a directory this process owns; the
  consumer waits in ``poll`` in the main thread (woken by the log's publish listener).
* ``cross-process-inotify``: a writer subprocess owns the directory and appends; this process reads it
  read-only (``kafkalog.open(dir, read_only=True)``), woken by inotify.
* ``cross-process-polling``: the same with inotify disabled (``KAFKALOG_NO_INOTIFY=1``): the files
  are polled every 50 ms.

Latency = CLOCK_MONOTONIC (system-wide) when ``poll`` returns the record minus CLOCK_MONOTONIC just
before the writer's ``produce`` call (the writer puts it in the record's value), so it includes the
append itself. Printed: median, p99 and max in milliseconds, JSON lines.

Run: ``python benchmarks/wakeup_bench.py [--samples N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fresh_dir, rmtree

import kafkalog
from kafkalog.client import TopicPartition

TP = TopicPartition("t", 0)
PAUSE_S = 0.02
WAIT_MS = 10_000

WRITER = textwrap.dedent("""
    import sys, time, kafkalog
    n, pause = int(sys.argv[2]), float(sys.argv[3])
    with kafkalog.open(sys.argv[1], background=False) as dl:
        dl.create_topic("t", 1, exist_ok=True)
        print("ready", flush=True)
        sys.stdin.readline()                      # the reader is waiting
        for i in range(n):
            time.sleep(pause)
            dl.produce("t", b"%d" % time.monotonic_ns(), partition=0)
        sys.stdin.readline()                      # close (index trim) only once the reader is done
""")


def _percentiles(name: str, lat_ns: list[int]) -> dict:
    ms = sorted(x / 1e6 for x in lat_ns)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return {"event": "result", "scenario": name, "samples": len(ms),
            "medianMs": round(statistics.median(ms), 3), "p99Ms": round(p99, 3),
            "maxMs": round(ms[-1], 3)}


def _collect(consumer, n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        got = consumer.poll(timeout_ms=WAIT_MS)
        now = time.monotonic_ns()
        if not got:
            raise SystemExit("no record arrived within 10 s: the wake-up failed")
        for r in got[TP]:
            out.append(now - int(r.value))
    return out


def in_process(n: int) -> list[int]:
    d = fresh_dir("wakeup-")
    try:
        with kafkalog.open(d, background=False) as dl:
            dl.create_topic("t", 1)
            c = dl.consumer("t", auto_offset_reset="latest")
            c.poll(timeout_ms=0)

            def write() -> None:
                for _ in range(n):
                    time.sleep(PAUSE_S)
                    dl.produce("t", b"%d" % time.monotonic_ns(), partition=0)
            th = threading.Thread(target=write)
            th.start()
            lat = _collect(c, n)
            th.join()
            c.close()
            return lat
    finally:
        rmtree(d)


def cross_process(n: int, inotify: bool) -> list[int]:
    d = fresh_dir("wakeup-x-")
    env = dict(os.environ)
    if not inotify:
        os.environ["KAFKALOG_NO_INOTIFY"] = "1"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, d, str(n), str(PAUSE_S)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert writer.stdout is not None and writer.stdin is not None
        if writer.stdout.readline().strip() != "ready":
            raise SystemExit("the writer did not start")
        with kafkalog.open(d, read_only=True) as dl:
            c = dl.consumer("t", auto_offset_reset="earliest")
            c.poll(timeout_ms=0)
            writer.stdin.write("go\n")
            writer.stdin.flush()
            lat = _collect(c, n)
            c.close()
        writer.stdin.write("done\n")
        writer.stdin.flush()
        return lat
    finally:
        os.environ.pop("KAFKALOG_NO_INOTIFY", None)
        if writer.stdin is not None:
            writer.stdin.close()
        writer.wait(timeout=60)
        rmtree(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()
    for name, fn in (("in-process", lambda: in_process(args.samples)),
                     ("cross-process-inotify", lambda: cross_process(args.samples, True)),
                     ("cross-process-polling", lambda: cross_process(args.samples, False))):
        print(json.dumps(_percentiles(name, fn())), flush=True)


if __name__ == "__main__":
    main()
