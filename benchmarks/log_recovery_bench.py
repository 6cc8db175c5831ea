"""Recovery (unclean shutdown) throughput of the loader over one segment.

Goal 3 (issue "The log storage engine"): recovery of a 1 GiB segment at >= 2 GB/s of validated data
(every batch CRC-checked, ``.index``/``.timeindex`` rebuilt), i.e. ``Log.open(dir,
had_clean_shutdown=False, recovery_point=0)``, which runs ``loader.load_log`` ->
``LogSegment.recover`` over the whole segment. Page cache hot (the segment was just written), as in
the baselines. Baselines measured in the same run over the same file:

* ``mmap + crc32c``: one crc32c pass over the whole mapped file (the memory-bandwidth floor);
* ``header walk + crc32c`` in plain Python (``prim_bench.py scan``): per batch ``unpack_from`` of
  the header and crc32c of attributes..end -- what any Python recovery must at least do.

Context: the same for 1-record and 10-record batches (128 MiB segments).

Open after a clean shutdown (time proportional to the number of segments): ``log_open_bench.py``.

Run: ``python benchmarks/log_recovery_bench.py [--mb 1024] [--repeat 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C
from crc32c import crc32c

from kafkalog.log.log import Log
from kafkalog.record import kernel

GOAL_GBPS = 2.0
GOAL_FLOOR_RATIO = 0.70          # 64 KB batches: >= 70% of the mmap + crc32c floor
GOAL_SMALL_BATCHES = 2_000_000   # 1-record batches/s, and never below the Python header-walk floor


def write_log(d: str, batches, segment_bytes: int, per_call: int = 256) -> int:
    """Fill a log through ``Log.append`` (bulk) and close it cleanly; returns the log end offset."""
    log = Log.open(d, {"segment.bytes": segment_bytes})
    for i in range(0, len(batches), per_call):
        log.append(bytearray(b"".join(batches[i:i + per_call])))
    leo = log.log_end_offset
    log.close()
    return leo


def fill_one_segment(d: str, batches, segment_bytes: int) -> int:
    """As many batches as fit in one segment of ``segment_bytes``; returns the segment size."""
    total = 0
    k = 0
    while k < len(batches) and total + len(batches[k]) <= segment_bytes:
        total += len(batches[k])
        k += 1
    write_log(d, batches[:k], segment_bytes)
    return total


def seg_path(d: str) -> str:
    return os.path.join(d, "00000000000000000000.log")


def floor_mmap_crc(path: str) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        mv = memoryview(m)
        t0 = time.perf_counter()
        c = 0
        for off in range(0, len(m), 64 * C.MiB):
            c = crc32c(mv[off:off + 64 * C.MiB], c)
        dt = time.perf_counter() - t0
        mv.release()
        m.close()
        return dt
    finally:
        os.close(fd)


_HDR = struct.Struct(">qiibIhiqqqhii")


def floor_python_walk(path: str) -> float:
    """prim_bench's scan: header unpack + crc32c per batch over an mmap (no index)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        mv = memoryview(m)
        unpack = _HDR.unpack_from
        size = len(m)
        t0 = time.perf_counter()
        pos = 0
        while pos < size - 61:
            h = unpack(m, pos)
            sz = h[1] + 12
            if crc32c(mv[pos + 21:pos + sz]) != h[4]:
                raise SystemExit("bad crc in baseline walk")
            pos += sz
        dt = time.perf_counter() - t0
        mv.release()
        m.close()
        return dt
    finally:
        os.close(fd)


def recover(d: str, expect_size: int, expect_batches: int) -> float:
    t0 = time.perf_counter()
    log = Log.open(d, {"segment.bytes": max(expect_size, 14)}, had_clean_shutdown=False,
                   recovery_point=0)
    dt = time.perf_counter() - t0
    rep = log.recovery_report
    segs = rep.recovered_segments
    assert len(segs) == 1 and segs[0]["validBytes"] == expect_size and segs[0]["kind"] == "clean", segs
    assert segs[0]["batches"] == expect_batches, (segs[0]["batches"], expect_batches)
    assert log.active_segment.offset_index.entries > 0
    log.close()
    return dt


def recovery(args, records_per_batch: int, mb: int, label: str) -> None:
    seg_bytes = mb * C.MiB
    C.check_disk(seg_bytes)
    one = len(C.build_batch(records_per_batch, 0))
    n = seg_bytes // one + 1
    batches = C.make_batches(records_per_batch, count=n, distinct=64 if records_per_batch > 1 else 1000)
    d = C.fresh_dir("recover-")
    try:
        size = fill_one_segment(d, batches, seg_bytes)
        nb = size // one
        del batches
        path = seg_path(d)
        with open(path, "rb") as f:          # page cache hot, as in the baselines
            while f.read(8 * C.MiB):
                pass
        rec, fl_crc, fl_walk = [], [], []
        for _ in range(args.repeat):
            fl_crc.append(floor_mmap_crc(path))
            fl_walk.append(floor_python_walk(path))
            rec.append(recover(d, size, nb))
        gb = size / 1e9
        med = sorted(rec)[len(rec) // 2]
        med_crc = sorted(fl_crc)[len(fl_crc) // 2]
        med_walk = sorted(fl_walk)[len(fl_walk) // 2]
        r = gb / med
        print(f"\n== {label}: one segment of {size / C.MiB:,.0f} MiB, {nb:,} batches of {one:,} B "
              f"({records_per_batch} record(s) each), page cache hot, medians of {args.repeat}")
        print(f"  floor: mmap + crc32c whole file         : {gb / med_crc:7.2f} GB/s  ({C.spread(fl_crc)})")
        print(f"  floor: Python header walk + crc32c      : {gb / med_walk:7.2f} GB/s  "
              f"= {nb / med_walk / 1e3:,.0f} k batches/s  ({C.spread(fl_walk)})")
        print(f"  kafkalog Log.open(had_clean_shutdown=False): {r:7.2f} GB/s  "
              f"= {nb / med / 1e3:,.0f} k batches/s  ({C.spread(rec)})")
        print(f"  recovery vs mmap + crc32c floor: {med_crc / med:.0%}; vs Python walk floor: "
              f"{med_walk / med:.0%}")
        if records_per_batch >= 500:
            print(f"  goals: >= {GOAL_GBPS} GB/s: {C.verdict(r, GOAL_GBPS)}; >= {GOAL_FLOOR_RATIO:.0%} of "
                  f"the mmap + crc32c floor: {C.verdict(med_crc / med, GOAL_FLOOR_RATIO)}")
        elif records_per_batch == 1:
            print(f"  goals: >= {GOAL_SMALL_BATCHES / 1e6:.0f} M batches/s: "
                  f"{C.verdict(nb / med, GOAL_SMALL_BATCHES)}; >= the Python walk floor: "
                  f"{C.verdict(med_walk / med, 1.0)}")
    finally:
        C.rmtree(d)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="segment size for goal 3 (MiB)")
    ap.add_argument("--small-mb", type=int, default=128, help="segment size for small batches (MiB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="256 MiB / 32 MiB segments")
    ap.add_argument("--only", choices=("recover", "small"))
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.small_mb = 256, 32
    print(f"kafkalog log recovery benchmark; record kernel: {kernel.IMPLEMENTATION}; dir {C.WORKDIR}")
    if args.only in (None, "recover"):
        recovery(args, 500, args.mb, "goal 3: recovery of ~64 KB batches")
    if args.only in (None, "small"):
        recovery(args, 10, args.small_mb, "context: recovery of 10-record batches")
        recovery(args, 1, args.small_mb, "context: recovery of 1-record batches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
