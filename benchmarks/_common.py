"""Shared helpers of the log-layer benchmarks (``log_*_bench.py``).

Data follows the baselines in ``shared/notes/bench`` (``append_bench.py``, ``prim_bench.py``): keys
``b"key-%012d"`` (16 B), values ``os.urandom(50).hex()`` (100 B), explicit timestamps, no headers,
v2, uncompressed. A few distinct batches are built with kafkalog's ``BatchBuilder`` and copied into
as many separate ``bytearray`` objects as needed (the append path patches the base offset in place,
so every call gets its own buffer, as a producer request would).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Callable, List, Sequence

MiB = 1 << 20
GiB = 1 << 30
WORKDIR = os.environ.get("KAFKALOG_BENCH_DIR", os.path.join(tempfile.gettempdir(), "kafkalog-bench"))


def workdir() -> str:
    os.makedirs(WORKDIR, exist_ok=True)
    return WORKDIR


def fresh_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=workdir())


def rmtree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def check_disk(need_bytes: int) -> None:
    free = shutil.disk_usage(workdir()).free
    if free < need_bytes + 2 * GiB:
        raise SystemExit(f"not enough disk in {WORKDIR}: {free / GiB:.1f} GiB free, "
                         f"{need_bytes / GiB:.1f} GiB needed (+2 GiB margin)")


def build_batch(records: int, first: int, ts0: int = 1_700_000_000_000) -> bytes:
    """One uncompressed v2 batch of ``records`` records (base offset 0)."""
    from kafkalog.record.builder import BatchBuilder
    b = BatchBuilder()
    for i in range(first, first + records):
        b.append(b"key-%012d" % i, os.urandom(50).hex().encode(), ts0 + i)
    return b.build()


def make_batches(records_per_batch: int, *, count: int = 0, total_bytes: int = 0,
                 distinct: int = 64) -> List[bytearray]:
    """``count`` batches (or as many as fit in ``total_bytes``), each its own bytearray, cycling
    through ``distinct`` differently-built templates."""
    tmpl = [build_batch(records_per_batch, k * records_per_batch) for k in range(distinct)]
    if not count:
        size = len(tmpl[0])
        count = max(1, total_bytes // size)
    return [bytearray(tmpl[i % distinct]) for i in range(count)]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def spread(times: Sequence[float], ms: bool = False) -> str:
    """Every run, the median and the worst-to-best spread, to show how noisy runs were."""
    best, worst = min(times), max(times)
    k, unit, fmt = (1e3, "ms", "{:.1f}") if ms else (1.0, "s", "{:.3f}")
    return (f"runs {', '.join(fmt.format(t * k) for t in times)} {unit}; median "
            f"{fmt.format(statistics.median(times) * k)}, worst/best {worst / best:.2f}x")


def drop_dirty() -> None:
    """Write back dirty pages so one measurement does not pay for the previous one's writeback."""
    os.sync()


def verdict(ratio: float, goal: float) -> str:
    return "MEETS" if ratio >= goal else "MISSES"
