"""``kafkalog recover`` as a whole process against a plain-Python CRC walk as a whole process
(issue 35: the operator's recovery at the speed of the engine's own).

The same partition directory (one segment written through ``Log.append`` and closed, its producer
snapshots removed, page cache hot) is recovered by:

* ``kafkalog``: ``python -m kafkalog.cli.main recover DIR --discard --format json`` (every segment
  from recovery point 0: CRC checks, index rebuild, producer state, the report), start to exit;
* ``python-walk``: ``python -c ...`` that maps the ``.log`` and walks it in plain Python, one header
  unpack and one ``crc32c`` per batch (``prim_bench.py scan``, as ``log_recovery_bench.py``'s
  floor), start to exit.

Both run with the bytecode cache (``PYTHONDONTWRITEBYTECODE`` removed; one untimed run of each
first), alternating, ``--repeat`` times; the medians and their ratio (the walk's time over
kafkalog's: above 1 = kafkalog faster; the goal is 1.5) are printed, wall clock and the children's
CPU seconds (user + system: less disturbed by the other jobs of a shared machine, and not counting
the fsyncs a recovery must wait for), with the load averages. Cases: 1-record batches
(``--small-mb``, the walk's worst case and the one the goal is about) and 64 KB batches (``--mb``,
where both are bound by CRC-32C and the process start).

    python benchmarks/recover_cli_bench.py [--small-mb 128] [--mb 512] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _common as C  # noqa: E402
import log_recovery_bench as R  # noqa: E402

WALK = r"""
import mmap, os, struct, sys
from crc32c import crc32c
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
mv = memoryview(m)
unpack = struct.Struct(">qiibIhiqqqhii").unpack_from
pos, size, n = 0, len(m), 0
while pos < size - 61:
    h = unpack(m, pos)
    sz = h[1] + 12
    if crc32c(mv[pos + 21:pos + sz]) != h[4]:
        raise SystemExit("bad crc at %d" % pos)
    pos += sz
    n += 1
print(n)
"""


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _unsnapshot(d: str) -> None:
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(d, name))


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_kafkalog(case: R.Case) -> tuple[float, float]:
    _unsnapshot(case.directory)
    c0 = _children_cpu()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "recover", case.directory, "--discard",
                          "--format", "json"], env=_env(), capture_output=True, check=True)
    dt = time.perf_counter() - t0
    cpu = _children_cpu() - c0
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    part = [x for x in lines if x.get("type") == "partition"]
    assert len(part) == 1 and part[0]["recoveredSegments"] == 1 and part[0]["truncatedBytes"] == 0, lines
    return dt, cpu


def run_walk(case: R.Case) -> tuple[float, float]:
    c0 = _children_cpu()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", WALK, case.segment], env=_env(), capture_output=True, check=True)
    dt = time.perf_counter() - t0
    assert int(out.stdout) == case.batches, (out.stdout, case.batches)
    return dt, _children_cpu() - c0


def measure(case: R.Case, repeat: int) -> dict:
    run_kafkalog(case)          # untimed: the bytecode cache, the page cache
    run_walk(case)
    ours, walk = [], []
    for i in range(repeat):
        pair = [(ours, run_kafkalog), (walk, run_walk)]
        for into, fn in pair if i % 2 == 0 else reversed(pair):
            into.append(fn(case))
    k, w = statistics.median(x for x, _ in ours), statistics.median(x for x, _ in walk)
    kc, wc = statistics.median(c for _, c in ours), statistics.median(c for _, c in walk)
    return {"case": case.label, "batches": case.batches, "bytes": case.size,
            "kafkalog_s": [round(x, 3) for x, _ in ours], "python_walk_s": [round(x, 3) for x, _ in walk],
            "kafkalog_median_s": round(k, 3), "python_walk_median_s": round(w, 3),
            "walk_over_kafkalog": round(w / k, 2), "goal": 1.5,
            "kafkalog_cpu_median_s": round(kc, 3), "python_walk_cpu_median_s": round(wc, 3),
            "walk_over_kafkalog_cpu": round(wc / kc, 2),
            "load": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small-mb", type=int, default=128, help="MiB of 1-record batches (0: skip)")
    ap.add_argument("--mb", type=int, default=512, help="MiB of 64 KB batches (0: skip)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    C.check_disk((args.small_mb + args.mb) * C.MiB * 2)
    cases = []
    if args.small_mb:
        n = args.small_mb * C.MiB // 186
        cases.append(("1-record batches", R.idempotent_batches(n, 16), args.small_mb, 1))
    if args.mb:
        cases.append(("64 KB batches", C.make_batches(500, total_bytes=args.mb * C.MiB), args.mb, 500))
    for label, batches, mb, per in cases:
        case = R.one_segment(label, batches, mb * C.MiB + C.MiB, per)
        try:
            res = measure(case, args.repeat)
        finally:
            C.rmtree(case.directory)
        print(json.dumps(res), flush=True)
        sys.stderr.write(f"{label}: kafkalog recover {res['kafkalog_median_s']:.3f} s, python walk "
                         f"{res['python_walk_median_s']:.3f} s (medians of {args.repeat}): "
                         f"{res['walk_over_kafkalog']:.2f}x (goal 1.5x); CPU seconds "
                         f"{res['kafkalog_cpu_median_s']:.3f} vs {res['python_walk_cpu_median_s']:.3f}: "
                         f"{res['walk_over_kafkalog_cpu']:.2f}x; load {res['load']}\n")


if __name__ == "__main__":
    main()
