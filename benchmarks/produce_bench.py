"""Produce throughput of the Python API, end to end (encode, partition, append to real files).

Goal (issue "The log storage engine"): >= 1,000,000 records/s for 100-byte values.

Scenarios (each on a fresh data directory, 3 partitions, best of ``--repeat`` runs):

* ``send``: ``Producer.send(topic, value)`` per record (keyless, sticky partitioning);
* ``send-keyed``: ``Producer.send(topic, value, key)`` with 16-byte keys (Kafka's murmur2
  partitioning per record, by the compiled kernel's ``partition_for_key``);
* ``produce_many``: ``DataLog.produce_many(topic, values)`` with a list of values (bulk encode);
* ``produce_many-keyed``: ``DataLog.produce_many(topic, [(key, value), ...])``;
* ``send-lz4``: like ``send`` with ``compression="lz4"``;
* ``send-keyed-zstd``: like ``send-keyed`` with ``compression="zstd"``.

Two rates per scenario: records per wall-clock second (``wall``) and records per second of CPU time
of this process (``cpu``: user + system, so the ``write`` system calls count; it is what the code
costs, independent of other load on the machine). Each is the best of ``--repeat`` runs.

Run: ``python benchmarks/produce_bench.py [--records N] [--repeat R] [--json] [--scenarios a,b]``.
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
from kafkalog.log import partitioner
from kafkalog.record import kernel

GOAL = 1_000_000


SCENARIOS = ("send", "send-keyed", "produce_many", "produce_many-keyed", "send-lz4", "send-keyed-zstd")


def _run(name: str, n: int, values, keys, tmp: str):
    """One run of scenario ``name``: (records per wall second, records per CPU second)."""
    d = tempfile.mkdtemp(dir=tmp)
    try:
        with kafkalog.open(d, background=False) as dl:
            dl.create_topic("bench", partitions=3)
            pairs = list(zip(keys, values)) if name == "produce_many-keyed" else None
            t0, c0 = time.perf_counter(), time.process_time()
            if name == "produce_many":
                dl.produce_many("bench", values)
            elif name == "produce_many-keyed":
                dl.produce_many("bench", pairs)
            else:
                comp = {"send-lz4": "lz4", "send-keyed-zstd": "zstd"}.get(name)
                with dl.producer(compression=comp) as p:
                    send = p.send
                    if "keyed" in name:
                        for k, v in zip(keys, values):
                            send("bench", v, k)
                    else:
                        for v in values:
                            send("bench", v)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            ends = dl.end_offsets("bench")
            assert sum(ends.values()) == n, (ends, n)
            if "keyed" in name:
                assert sum(1 for e in ends.values() if e) == 3, ends
        return n / wall, n / max(cpu, 1e-9)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
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
            if name not in SCENARIOS:
                ap.error(f"unknown scenario {name!r} (expected one of {', '.join(SCENARIOS)})")
            runs = [_run(name, n, values, keys, tmp) for _ in range(args.repeat)]
            results[name] = (max(r[0] for r in runs), max(r[1] for r in runs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps({"records": n, "valueBytes": 100, "keyBytes": 16, "partitions": 3,
                          "kernel": kernel.IMPLEMENTATION, "partitioner": partitioner.IMPLEMENTATION,
                          "goal": GOAL,
                          "recordsPerSecond": {k: round(w) for k, (w, _c) in results.items()},
                          "recordsPerCpuSecond": {k: round(c) for k, (_w, c) in results.items()},
                          "ratioToGoal": {k: round(w / GOAL, 3) for k, (w, _c) in results.items()},
                          "cpuRatioToGoal": {k: round(c / GOAL, 3) for k, (_w, c) in results.items()}}))
    else:
        print(f"kernel: {kernel.IMPLEMENTATION}, partitioner: {partitioner.IMPLEMENTATION}; {n} records "
              f"of 100-byte values (16-byte keys when keyed), 3 partitions; goal {GOAL:,} records/s")
        print(f"{'scenario':>18}  {'wall rec/s':>12} {'x goal':>7}  {'CPU rec/s':>12} {'x goal':>7}")
        for k, (w, c) in results.items():
            print(f"{k:>18}  {w:12,.0f} {w / GOAL:6.2f}x  {c:12,.0f} {c / GOAL:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
