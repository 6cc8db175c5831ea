"""Consumer ``poll`` loop against the record kernel's raw decode, on the same segments, in one run.

Goal (issue 12): the consumer's ``poll`` loop reaches at least 60% of the record kernel's raw decode
rate on the same segments.

Data: one partition of ``--records`` records (16-byte keys, 100-byte values, 500 records per v2
batch, uncompressed; built as in ``_common.py``) appended to a fresh data directory.

* ``raw``: the floor. Every ``.log`` file read whole, its batches walked (``iter_batches``) and
  decoded by the kernel (``RecordBatch.records()``), touching every record's key and value.
* ``raw+crc``: the same plus the CRC-32C check of every batch (what any reader must do before
  handing data out; the consumer does it with ``check.crcs``, Kafka's default).
* ``poll``: ``consumer.poll(max_records=500)`` from offset 0 until every record has been returned,
  touching every record's key and value (kafka-python's ``ConsumerRecord`` objects, positions kept,
  CRCs checked).

Rates are records per CPU second of this process (user + system: what the code costs, whatever the
other load on the machine) and per wall second; each is the median of ``--repeat`` runs, the three
scenarios interleaved. The ratio is ``poll`` over ``raw`` (and over ``raw+crc``), from the same run.
Output: JSON lines.

Run: ``python benchmarks/consume_bench.py [--records N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fresh_dir, make_batches, rmtree

import kafkalog
from kafkalog.client import TopicPartition
from kafkalog.record import kernel
from kafkalog.record.records import iter_batches

GOAL = 0.60
PER_BATCH = 500


def _segment_files(part_dir: str) -> list[str]:
    return [os.path.join(part_dir, n) for n in sorted(os.listdir(part_dir)) if n.endswith(".log")]


def raw(files: list[str], crc: bool) -> int:
    n = 0
    touched = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        for batch in iter_batches(data):
            if crc:
                batch.ensure_valid()
            for r in batch.records():
                touched += len(r.key) + len(r.value)
                n += 1
    return n


def poll(dl: kafkalog.DataLog, total: int) -> int:
    tp = TopicPartition("bench", 0)
    c = dl.consumer(enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=PER_BATCH)
    c.assign([tp])
    n = 0
    touched = 0
    while n < total:
        for recs in c.poll(timeout_ms=0).values():
            for r in recs:
                touched += len(r.key) + len(r.value)
            n += len(recs)
    c.close()
    return n


def measure(fn: Callable[[], int]) -> tuple[float, float, int]:
    w0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    return time.perf_counter() - w0, time.process_time() - c0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    total = args.records - args.records % PER_BATCH
    d = fresh_dir("consume-bench-")
    try:
        with kafkalog.open(d, background=False) as dl:
            dl.create_topic("bench", 1)
            log = dl.manager.get_log("bench", 0)
            for buf in make_batches(PER_BATCH, count=total // PER_BATCH):
                log.append(buf)
            log.flush()
            files = _segment_files(log.dir)
            print(json.dumps({"event": "data", "records": total, "segments": len(files),
                              "bytes": sum(os.path.getsize(f) for f in files),
                              "kernel": kernel.IMPLEMENTATION}), flush=True)
            scenarios: dict[str, Callable[[], int]] = {
                "raw": lambda: raw(files, False),
                "raw+crc": lambda: raw(files, True),
                "poll": lambda: poll(dl, total),
            }
            cpu: dict[str, list[float]] = {k: [] for k in scenarios}
            wall: dict[str, list[float]] = {k: [] for k in scenarios}
            for run in range(args.repeat):
                for name, fn in scenarios.items():
                    w, c, n = measure(fn)
                    assert n == total, (name, n, total)
                    cpu[name].append(n / c)
                    wall[name].append(n / w)
                    print(json.dumps({"event": "run", "run": run, "scenario": name,
                                      "recordsPerCpuSecond": round(n / c),
                                      "recordsPerWallSecond": round(n / w)}), flush=True)
            med = {k: statistics.median(v) for k, v in cpu.items()}
            medw = {k: statistics.median(v) for k, v in wall.items()}
            for name in scenarios:
                print(json.dumps({"event": "result", "scenario": name,
                                  "medianRecordsPerCpuSecond": round(med[name]),
                                  "medianRecordsPerWallSecond": round(medw[name])}))
            ratio = med["poll"] / med["raw"]
            print(json.dumps({"event": "ratio", "pollOverRaw": round(ratio, 3),
                              "pollOverRawWithCrc": round(med["poll"] / med["raw+crc"], 3),
                              "pollOverRawWall": round(medw["poll"] / medw["raw"], 3),
                              "goal": GOAL, "verdict": "MEETS" if ratio >= GOAL else "MISSES"}))
    finally:
        rmtree(d)


if __name__ == "__main__":
    main()
