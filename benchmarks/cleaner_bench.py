"""Cleaning throughput of kafkalog's log cleaner on one partition (spec §4.11).

Builds a partition of about ``--size-mb`` MiB (default 1024) of v2 batches (~64 KiB, uncompressed)
with 100,000 distinct 16-byte keys, once with 100-byte values and once with 1 KB values, then cleans
it in one round with one cleaner (one core) and prints MB/s (input bytes / cleaning time),
records/s, peak memory above the baseline and the ratio to the goals: >= 150 MB/s with 1 KB values,
>= 1,000,000 records/s with 100-byte values, peak memory within the dedupe budget plus a few
segment buffers.

    python benchmarks/cleaner_bench.py [--size-mb 1024] [--keys 100000] [--dedupe-mb 128]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hwm_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")          # reset VmHWM (peak RSS)
    except OSError:
        pass


def _hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def build(path: str, size_mb: int, keys: int, value_size: int) -> tuple:
    from kafkalog.log.config import LogConfig
    from kafkalog.log.log import Log
    from kafkalog.record import kernel
    from kafkalog.record.builder import write_v2_header
    log = Log.open(path, LogConfig({"cleanup.policy": "compact", "file.delete.delay.ms": 0}))
    per_batch = max(1, 65536 // (value_size + 30))
    target = size_mb * 1024 * 1024
    value = os.urandom(value_size // 2).hex().encode()[:value_size].ljust(value_size, b"v")
    n = 0
    ts = 1_700_000_000_000
    chunk = bytearray()
    while log.size + len(chunk) < target:
        recs = [(b"key-%012d" % ((n + i) * 7919 % keys), value, ts, None) for i in range(per_batch)]
        body = kernel.encode_records_v2(recs, ts)
        chunk += write_v2_header(body, base_offset=0, attributes=0, last_offset_delta=per_batch - 1,
                                 base_timestamp=ts, max_timestamp=ts, producer_id=-1,
                                 producer_epoch=-1, base_sequence=-1, count=per_batch,
                                 partition_leader_epoch=0)
        n += per_batch
        if len(chunk) >= 8 << 20:
            log.append(bytes(chunk))
            chunk = bytearray()
    if chunk:
        log.append(bytes(chunk))
    log.roll()
    log.append(write_v2_header(kernel.encode_records_v2([(b"x", b"y", ts, None)], ts),
                               base_offset=0, attributes=0, last_offset_delta=0, base_timestamp=ts,
                               max_timestamp=ts, producer_id=-1, producer_epoch=-1,
                               base_sequence=-1, count=1, partition_leader_epoch=0))
    log.flush(include_active=True)
    return log, n


def run(size_mb: int, keys: int, value_size: int, dedupe_mb: int) -> dict:
    from kafkalog.cleaner import Cleaner, SkimpyOffsetMap
    from kafkalog.cleaner.manager import cleanable_offsets, log_to_clean, tp_of_log
    d = tempfile.mkdtemp(prefix="cleaner-bench-")
    try:
        log, n = build(os.path.join(d, "bench-0"), size_mb, keys, value_size)
        size = log.size
        base_rss = _rss_mb()
        _hwm_reset()
        m = SkimpyOffsetMap(dedupe_mb * 1024 * 1024)
        c = Cleaner(m, io_buffer_size=256 * 1024)
        fd, unc, _ = cleanable_offsets(log, None, c.clock())
        ltc = log_to_clean(tp_of_log(log), log, fd, unc)
        t0 = time.perf_counter()
        end, stats = c.clean(ltc)
        dt = time.perf_counter() - t0
        peak = _hwm_mb() - base_rss
        after = log.size
        log.close()
        return {"value": value_size, "records": n, "size_mb": size / 2**20, "secs": dt,
                "mb_s": size / 2**20 / dt, "rec_s": n / dt, "map_secs": stats.elapsed_index_secs,
                "after_mb": after / 2**20, "keys": stats.distinct_keys, "peak_mb": peak,
                "budget_mb": dedupe_mb}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--dedupe-mb", type=int, default=128)
    a = ap.parse_args()
    from kafkalog.cleaner import kernel
    md5 = kernel.CLEANER_MD5 + ("+sse2x4" if kernel.CLEANER_MD5_X4 else "")
    print(f"kernel={kernel.IMPLEMENTATION} md5={md5} "
          f"size={a.size_mb} MiB keys={a.keys:,} dedupe={a.dedupe_mb} MiB (one cleaner, one core)")
    for vs, goal in ((100, ("rec_s", 1_000_000, "records/s")), (1000, ("mb_s", 150, "MB/s"))):
        r = run(a.size_mb, a.keys, vs, a.dedupe_mb)
        ratio = r[goal[0]] / goal[1]
        print(f"value={vs:5d} B: {r['records']:,} records, {r['size_mb']:.0f} MiB -> "
              f"{r['after_mb']:.1f} MiB in {r['secs']:.2f} s (map {r['map_secs']:.2f} s): "
              f"{r['mb_s']:.0f} MB/s, {r['rec_s']:,.0f} records/s, keys {r['keys']:,}, "
              f"peak +{r['peak_mb']:.0f} MiB (budget {r['budget_mb']} MiB + buffers); "
              f"goal {goal[1]:,} {goal[2]}: {ratio:.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
