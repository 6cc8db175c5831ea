"""Opening a partition log after a clean shutdown: time must follow the number of segments, not
their size.

Part of goal 3 (issue "The log storage engine"). Logs of 10 and 100 segments of 1 MiB and of 10 MiB
(~64 KB batches) are written through ``Log.append`` and closed cleanly; then ``Log.open(dir,
had_clean_shutdown=True, recovery_point=<log end>)`` is timed (best of ``--repeat``; the page cache
holds the files). After a clean shutdown the loader scans no data: per segment it opens the
``.log``, checks the ``.index``/``.timeindex`` tails (O(1)), and reads the last batches of the active
segment only. For contrast, the same directories opened with ``had_clean_shutdown=False,
recovery_point=0`` recover (CRC-check and re-index) every byte.

Run: ``python benchmarks/log_open_bench.py [--repeat 5] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

from kafkalog.log.log import Log
from kafkalog.record import kernel


def build(d: str, batch, seg_mb: int, nseg: int):
    one = len(batch[0])
    per_seg = (seg_mb * C.MiB) // one
    seg_bytes = per_seg * one
    cfg = {"segment.bytes": seg_bytes}
    log = Log.open(d, cfg)
    for i in range(nseg):
        log.append(bytearray(b"".join(batch[(i + k) % len(batch)] for k in range(per_seg))))
    leo = log.log_end_offset
    log.close()
    return cfg, leo


def time_open(d: str, cfg, leo: int, clean: bool, repeat: int, nseg: int):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        log = Log.open(d, cfg, had_clean_shutdown=clean, recovery_point=leo if clean else 0)
        times.append(time.perf_counter() - t0)
        assert log.log_end_offset == leo and len(log.segments) >= nseg
        rec = log.recovery_report.recovered_segments
        assert (not rec) if clean else len(rec) >= nseg, len(rec)
        log.close()
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip 100 x 10 MiB")
    ap.add_argument("--no-unclean", action="store_true", help="skip the unclean-open contrast")
    args = ap.parse_args(argv)
    print(f"kafkalog log open benchmark; record kernel: {kernel.IMPLEMENTATION}; dir {C.WORKDIR}")
    print(f"\n== open after a clean shutdown vs after an unclean one (recovery point 0), "
          f"~64 KB batches, best of {args.repeat}")
    batch = C.make_batches(500, count=64)
    clean, unclean = {}, {}
    for seg_mb in (1, 10):
        for nseg in (10, 100):
            if args.quick and seg_mb == 10 and nseg == 100:
                continue
            C.check_disk(nseg * seg_mb * C.MiB)
            d = C.fresh_dir("open-")
            try:
                cfg, leo = build(d, batch, seg_mb, nseg)
                t = time_open(d, cfg, leo, True, args.repeat, nseg)
                clean[(seg_mb, nseg)] = min(t)
                line = (f"  {nseg:4d} segments x {seg_mb:3d} MiB ({nseg * seg_mb:5,d} MiB): clean open "
                        f"{min(t) * 1e3:7.1f} ms = {min(t) / nseg * 1e6:5.0f} us/segment  "
                        f"({C.spread(t, ms=True)})")
                if not args.no_unclean:
                    u = time_open(d, cfg, leo, False, min(args.repeat, 3), nseg)
                    unclean[(seg_mb, nseg)] = min(u)
                    line += f"; unclean open {min(u) * 1e3:7.1f} ms"
                print(line, flush=True)
            finally:
                C.rmtree(d)
    c = clean
    print(f"  clean open, 10x the segments (1 MiB each): {c[(1, 100)] / c[(1, 10)]:.1f}x the time; "
          f"10x the bytes per segment (10 segments): {c[(10, 10)] / c[(1, 10)]:.2f}x"
          + (f"; (100 segments): {c[(10, 100)] / c[(1, 100)]:.2f}x" if (10, 100) in c else ""))
    if unclean:
        u = unclean
        print(f"  unclean open (recovers every byte), 10x the bytes per segment (10 segments): "
              f"{u[(10, 10)] / u[(1, 10)]:.1f}x the time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
