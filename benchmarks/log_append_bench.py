"""Append throughput of ``Log.append`` against plain sequential ``os.write`` of the same bytes.

Goals (issue "The log storage engine"):

1. producer-built batches of ~64 KB: >= 90% of the throughput of plain sequential ``write`` calls of
   the same bytes to the same file system (same total bytes; both without fsync, and both with one
   fsync at the end);
2. one-record batches: >= 300,000 batches/s through ``Log.append`` including index upkeep (floor:
   plain ``os.write`` of the same batches, no index, printed beside it); reported
   for 1 batch per call and for bulk buffers of many batches per call.

Both sides run in the same process and the same run, alternating, best of ``--repeat``; ``os.sync()``
before every measurement so no run pays for the previous run's writeback.

Run: ``python benchmarks/log_append_bench.py [--mb 1024] [--small 500000] [--repeat 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C
from crc32c import crc32c

from kafkalog.log.log import Log
from kafkalog.record import kernel

GOAL_BIG = 0.90
GOAL_SMALL = 300_000
CPU: list = []   # process CPU seconds of the last kafkalog runs (less sensitive to other load)


def raw_write(batches, fsync: bool) -> float:
    """Baseline: one ``os.write`` per batch to a new file (+ one fsync at the end)."""
    d = C.fresh_dir("raw-")
    try:
        path = os.path.join(d, "00000000000000000000.log")
        C.drop_dirty()
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        w = os.write
        for b in batches:
            w(fd, b)
        if fsync:
            os.fsync(fd)
        os.close(fd)
        return time.perf_counter() - t0
    finally:
        C.rmtree(d)


def kafkalog_append(bufs, fsync: bool, expect_batches: int) -> float:
    """``Log.append(buf)`` for every buffer of ``bufs`` on a fresh log (+ ``Log.flush()``)."""
    d = C.fresh_dir("klog-")
    try:
        log = Log.open(d)
        app = log.append
        C.drop_dirty()
        c0 = time.process_time()
        t0 = time.perf_counter()
        for b in bufs:
            app(b)
        if fsync:
            log.flush()
        dt = time.perf_counter() - t0
        CPU.append(time.process_time() - c0)
        assert log.log_end_offset > 0
        n = sum(1 for _ in log.active_segment.log.iter_headers()) if len(log.segments) == 1 else None
        assert n is None or n == expect_batches, (n, expect_batches)
        log.close()
        return dt
    finally:
        C.rmtree(d)


def bulk(batches, per_call: int):
    return [bytearray(b"".join(batches[i:i + per_call])) for i in range(0, len(batches), per_call)]


def big_batches(args) -> None:
    total = args.mb * C.MiB
    C.check_disk(2 * total)
    batches = C.make_batches(500, total_bytes=total)
    nbytes = sum(map(len, batches))
    per_call = 64
    chunks = bulk(batches, per_call)
    print(f"\n== goal 1: {len(batches):,} batches of {len(batches[0]):,} B (500 records each), "
          f"{nbytes / 1e6:,.0f} MB per run, one segment (segment.bytes = 1 GiB), best of {args.repeat}")
    for fsync in (False, True):
        raw, one, many = [], [], []
        for r in range(args.repeat):
            order = [0, 1, 2] if r % 2 == 0 else [2, 1, 0]
            for k in order:
                if k == 0:
                    raw.append(raw_write(batches, fsync))
                elif k == 1:
                    one.append(kafkalog_append(batches, fsync, len(batches)))
                else:
                    many.append(kafkalog_append(chunks, fsync, len(batches)))
        mode = "one fsync at end" if fsync else "no fsync (page cache)"
        b_raw = nbytes / min(raw) / 1e6
        b_one = nbytes / min(one) / 1e6
        b_many = nbytes / min(many) / 1e6
        print(f"-- {mode}")
        print(f"  raw os.write per batch       : {b_raw:8,.0f} MB/s   ({C.spread(raw)})")
        print(f"  Log.append, 1 batch/call     : {b_one:8,.0f} MB/s   ({C.spread(one)})")
        print(f"  Log.append, {per_call} batches/call  : {b_many:8,.0f} MB/s   ({C.spread(many)})")
        ratio = b_one / b_raw
        print(f"  ratio (1 batch/call) = {ratio:.1%} of raw write; goal >= {GOAL_BIG:.0%}: "
              f"{C.verdict(ratio, GOAL_BIG)}   (bulk: {b_many / b_raw:.1%})")
    crc = min(C.timed(lambda: [crc32c(memoryview(b)[21:]) for b in batches]) for _ in range(3))
    print(f"  (the CRC-32C check alone, which raw write does not do: {nbytes / crc / 1e6:,.0f} MB/s = "
          f"{crc / len(batches) * 1e6:.1f} us per batch)")


def small_batches(args) -> None:
    n = args.small
    batches = C.make_batches(1, count=n, distinct=1000)
    nbytes = sum(map(len, batches))
    C.check_disk(2 * nbytes)
    per_calls = (1, 100, 10_000)
    bufs = {1: batches}
    for p in per_calls[1:]:
        bufs[p] = bulk(batches, p)
    print(f"\n== goal 2: {n:,} one-record batches of {len(batches[0])} B ({nbytes / 1e6:,.0f} MB), "
          f"index.interval.bytes = 4096, no fsync, best of {args.repeat}")
    raw = []
    res = {p: [] for p in per_calls}
    cpu = {p: [] for p in per_calls}
    for r in range(args.repeat):
        raw.append(raw_write(batches, False))
        for p in (per_calls if r % 2 == 0 else per_calls[::-1]):
            res[p].append(kafkalog_append(bufs[p], False, n))
            cpu[p].append(CPU[-1])
    print(f"  raw os.write per batch (floor, no index) : {n / min(raw):10,.0f} batches/s   "
          f"({C.spread(raw)})")
    for p in per_calls:
        rate = n / min(res[p])
        print(f"  Log.append, {p:>6,} batch(es)/call       : {rate:10,.0f} batches/s = "
              f"{rate / GOAL_SMALL:5.0%} of goal {GOAL_SMALL:,}: {C.verdict(rate, GOAL_SMALL)}  "
              f"({C.spread(res[p])}; per CPU-second: {n / min(cpu[p]):,.0f}/s)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="MiB appended per run for goal 1")
    ap.add_argument("--small", type=int, default=500_000, help="one-record batches for goal 2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="256 MiB / 200,000 batches")
    ap.add_argument("--only", choices=("big", "small"))
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.small = 256, 200_000
    print(f"kafkalog log append benchmark; record kernel: {kernel.IMPLEMENTATION}; dir {C.WORKDIR}")
    if args.only != "small":
        big_batches(args)
    if args.only != "big":
        small_batches(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
