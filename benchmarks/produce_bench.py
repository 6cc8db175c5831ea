"""Produce throughput of the Python API, end to end (encode, partition, append to real files).

Goal (issue "The log storage engine"): >= 1,000,000 records/s for 100-byte values.

Scenarios (each on a fresh data directory, 3 partitions, best of ``--repeat`` runs):

* ``send``: ``Producer.send(topic, value)`` per record (keyless, sticky partitioning);
* ``send-keyed``: ``Producer.send(topic, value, key=...)`` (murmur2 partitioning per record);
* ``produce_many``: ``DataLog.produce_many(topic, values)`` with a list of values (bulk encode);
* ``send-lz4``: like ``send`` with ``compression="lz4"``.

Run: ``python benchmarks/produce_bench.py [--records N] [--repeat R] [--json]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time

import kafkalog
from kafkalog.record import kernel

GOAL = 1_000_000


def _run(name: str, n: int, values, keys, tmp: str) -> float:
    d = tempfile.mkdtemp(dir=tmp)
    try:
        with kafkalog.open(d, background=False) as dl:
            dl.create_topic("bench", partitions=3)
            t0 = time.perf_counter()
            if name == "produce_many":
                dl.produce_many("bench", values)
            else:
                comp = "lz4" if name == "send-lz4" else None
                with dl.producer(compression=comp) as p:
                    send = p.send
                    if name == "send-keyed":
                        for i in range(n):
                            send("bench", values[i], keys[i])
                    else:
                        for v in values:
                            send("bench", v)
            elapsed = time.perf_counter() - t0
            total = sum(dl.end_offsets("bench").values())
            assert total == n, (total, n)
        return n / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scenarios", default="send,send-keyed,produce_many,send-lz4")
    args = ap.parse_args(argv)
    n = args.records
    values = [os.urandom(50).hex().encode() for _ in range(min(n, 10000))]
    values = (values * (n // len(values) + 1))[:n]
    keys = [b"key-%012d" % i for i in range(n)]
    gc.collect()
    gc.freeze()          # the 2 M input objects are not garbage: keep the collector off them
    tmp = tempfile.mkdtemp(prefix="kafkalog-bench-")
    results = {}
    try:
        for name in args.scenarios.split(","):
            best = max(_run(name, n, values, keys, tmp) for _ in range(args.repeat))
            results[name] = best
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps({"records": n, "valueBytes": 100, "kernel": kernel.IMPLEMENTATION,
                          "recordsPerSecond": {k: round(v) for k, v in results.items()},
                          "ratioToGoal": {k: round(v / GOAL, 3) for k, v in results.items()}}))
    else:
        print(f"kernel: {kernel.IMPLEMENTATION}; {n} records of 100-byte values, 3 partitions")
        for k, v in results.items():
            print(f"{k:>14}: {v:12,.0f} records/s  ({v / GOAL:.2f}x the 1,000,000 records/s goal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
