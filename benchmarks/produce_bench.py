"""Produce throughput of the Python API, end to end (encode, partition, append to real files).

Goals (issue "The embedded client speaks Kafka"): ``Producer.send`` with futures and linger, 100-byte
values to one partition, at least 1,500,000 records/s and at least 85% of the floor: building the
same batches (same size, producer id, epoch and sequences) with ``BatchBuilder`` and appending them
to the log directly, in the same run.

Scenarios (each on a fresh data directory, best of ``--repeat`` runs):

* ``builder`` (the floor): ``BatchBuilder.append`` per record, ``build()`` + ``Log.append`` per
  16384 bytes of records, 1 partition;
* ``send``: ``Producer.send(topic, value)`` per record, keeping every future, default
  configuration (``linger.ms`` 5, ``batch.size`` 16384, idempotent), 1 partition; the futures
  are checked after ``close``;
* ``send-keyed``: ``send(topic, value, key)`` with 16-byte keys, 3 partitions (murmur2);
* ``produce_many``: ``DataLog.produce_many(topic, values)``, 3 partitions;
* ``send-lz4`` / ``send-keyed-zstd``: with ``compression.type`` lz4 / zstd.

Output: one JSON line per scenario (``recordsPerSecond`` wall, ``recordsPerCpuSecond``), then a
summary line with ``sendToBuilder`` (the ratio of ``send`` to ``builder``, the goal 0.85) and
``sendToGoal`` (``send`` / 1.5 M).

Run: ``python benchmarks/produce_bench.py [--records N] [--repeat R] [--scenarios a,b]``.
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
from collections.abc import Callable

import kafkalog
from kafkalog.record import kernel
from kafkalog.record.builder import BatchBuilder

GOAL = 1_500_000
RATIO_GOAL = 0.85
BATCH_SIZE = 16384
SCENARIOS = ("builder", "send", "send-keyed", "produce_many", "send-lz4", "send-keyed-zstd")


def _builder(dl, values: list[bytes], keys: list[bytes]) -> None:
    dl.create_topic("bench", partitions=1)
    log = dl.manager.get_log("bench", 0)
    pid = dl.producer_id_manager().generate_producer_id()
    # as many records per batch as the producer puts in one (it completes a batch once its
    # records reach batch.size bytes)
    one = kernel.RecordsEncoder().append(None, values[0], int(time.time() * 1000))
    per_batch = -(-BATCH_SIZE // one)
    seq = 0
    now = time.time_ns
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq)
    n = 0
    for v in values:
        b.append(None, v, now() // 1000000)
        n += 1
        if n == per_batch:
            log.append(bytearray(b.build()))
            seq += n
            n = 0
            b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq)
    if n:
        log.append(bytearray(b.build()))


def _send(dl, values: list[bytes], keys: list[bytes], name: str) -> None:
    parts = 1 if name == "send" else 3
    dl.create_topic("bench", partitions=parts)
    comp = {"send-lz4": "lz4", "send-keyed-zstd": "zstd"}.get(name, "none")
    futs: list = []
    keep = futs.append
    with dl.producer(compression_type=comp) as p:
        send = p.send
        if "keyed" in name:
            for k, v in zip(keys, values):
                keep(send("bench", v, k))
        else:
            for v in values:
                keep(send("bench", v))
    assert futs[-1].get().offset >= 0 and futs[0].succeeded()


def _run(name: str, values: list[bytes], keys: list[bytes], tmp: str) -> tuple[float, float]:
    n = len(values)
    d = tempfile.mkdtemp(dir=tmp)
    try:
        with kafkalog.open(d, background=False) as dl:
            fn: Callable[[], None]
            if name == "builder":
                def fn() -> None:
                    _builder(dl, values, keys)
            elif name == "produce_many":
                def fn() -> None:
                    dl.create_topic("bench", partitions=3)
                    dl.produce_many("bench", values)
            else:
                def fn() -> None:
                    _send(dl, values, keys, name)
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert sum(dl.end_offsets("bench").values()) == n
        return n / wall, n / max(cpu, 1e-9)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args(argv)
    n = args.records
    values = [os.urandom(50).hex().encode() for _ in range(min(n, 10000))]
    values = (values * (n // len(values) + 1))[:n]
    keys = [b"key-%012d" % i for i in range(n)]
    gc.collect()
    gc.freeze()          # the input objects are not garbage: keep the collector off them
    tmp = tempfile.mkdtemp(prefix="kafkalog-bench-")
    results: dict[str, tuple[float, float]] = {}
    names = args.scenarios.split(",")
    for name in names:
        if name not in SCENARIOS:
            ap.error(f"unknown scenario {name!r} (expected one of {', '.join(SCENARIOS)})")
    try:
        # interleave the runs so that the machine's load drifts affect every scenario alike
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
        for _ in range(args.repeat):
            for name in names:
                runs[name].append(_run(name, values, keys, tmp))
        for name in names:
            results[name] = (max(r[0] for r in runs[name]), max(r[1] for r in runs[name]))
            print(json.dumps({"scenario": name, "records": n, "valueBytes": 100,
                              "kernel": kernel.IMPLEMENTATION,
                              "recordsPerSecond": round(results[name][0]),
                              "recordsPerCpuSecond": round(results[name][1])}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary: dict[str, object] = {"summary": True, "goal": GOAL, "ratioGoal": RATIO_GOAL}
    if "send" in results:
        summary["sendToGoal"] = round(results["send"][0] / GOAL, 3)
        if "builder" in results:
            summary["sendToBuilder"] = round(results["send"][0] / results["builder"][0], 3)
            summary["sendToBuilderCpu"] = round(results["send"][1] / results["builder"][1], 3)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
