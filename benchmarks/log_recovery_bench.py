"""Recovery (unclean shutdown) throughput of the loader over one segment, against peers.

kafkalog's recovery is ``Log.open(dir, had_clean_shutdown=False, recovery_point=0)``: the loader
runs ``LogSegment.recover`` over the whole segment (every batch CRC-checked by the compiled header
walker, ``.index``/``.timeindex`` rebuilt, the producer state rebuilt from the producer batches).
Page cache hot (the segment was just written). Every case times kafkalog and each peer on the very
same segment file in the same run, alternating, and prints the ratio of each peer's time to
kafkalog's (> 1: kafkalog is faster).

Peers (``--peer``, any number; default all of them):

* ``mmap-crc32c``: one crc32c pass over the whole mapped file (the memory-bandwidth floor);
* ``python-crc-walk``: per batch ``unpack_from`` of the header and crc32c of attributes..end in
  plain Python over an mmap (``prim_bench.py scan``): what any Python recovery must at least do;
* ``kafka44``: Apache Kafka 4.4's own recovery of the same segment (``tests/kafka44``, jars in
  ``~/.m2``; the JVM as in production). Once per case a broker is formatted and a one-partition topic
  created (``segment.bytes`` above the segment, retention off) and the broker stopped; each run puts
  the segment (``.log``, ``.index``, ``.timeindex``) into the topic's partition directory with no
  producer snapshot, removes ``.kafka_cleanshutdown`` (an unclean shutdown; the recovery point is 0),
  starts the broker and reads its time from Kafka's own log line ``Completed load of Log(...recover-0
  ...) ... in N ms`` (its ``LogLoader`` must also log ``Recovering unflushed segment 0`` for the
  partition, and the log end offset must be the segment's); then the broker is killed. Kafka's time
  is its whole log load (recovery with CRC checks, index rebuild, producer state), as kafkalog's;
  its resolution is 1 ms.
* more with :func:`register_peer`: a :class:`Peer` is a name, a line saying what it measures, and
  ``run(case) -> seconds`` given the :class:`Case` (the partition directory holding the one
  segment, the segment's path, its batches and bytes).

Cases (``--only``; default all):

* ``goal``: ~64 KB batches (500 records), a 1 GiB segment: >= 2 GB/s of validated data and >= 70%
  of the mmap + crc32c floor;
* ``small``: 10-record and 1-record batches (128 MiB); 1-record batches: >= 2 M batches/s and
  >= 1.5x the Python CRC walk;
* ``idempotent``: 1-record batches of idempotent producers (producer id, epoch and sequence set, as
  every Kafka client >= 3.0 writes by default; ``--producers`` of them interleaved), whose
  producer state the recovery rebuilds: the same goals.

Output: the table on stderr, one JSON line per case and peer on stdout.

Run: ``python benchmarks/log_recovery_bench.py [--mb 1024] [--small-mb 128] [--repeat 5]
[--only small,idempotent] [--peer python-crc-walk] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import re
import shutil
import struct
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.kafka44
import _common as C
from crc32c import crc32c

from kafkalog.log.log import Log
from kafkalog.record import kernel
from kafkalog.record.builder import BatchBuilder

GOAL_GBPS = 2.0
GOAL_FLOOR_RATIO = 0.70          # 64 KB batches: >= 70% of the mmap + crc32c floor
GOAL_SMALL_BATCHES = 2_000_000   # 1-record batches/s ...
GOAL_OVER_PYTHON_WALK = 1.5      # ... and at least 1.5x the Python CRC walk


@dataclass(frozen=True)
class Case:
    """One segment to recover: the partition directory holding it, the segment's ``.log``, its
    batches and bytes."""

    label: str
    directory: str
    segment: str
    batches: int
    size: int
    records_per_batch: int


class Peer(NamedTuple):
    """Something timed on the same segment as kafkalog's recovery: ``run(case)`` returns the
    seconds it took (the page cache is hot for every run)."""

    name: str
    what: str
    run: Callable[[Case], float]


PEERS: Dict[str, Peer] = {}


def register_peer(peer: Peer) -> None:
    """Add a peer (``--peer NAME`` selects it)."""
    PEERS[peer.name] = peer


# --- data ------------------------------------------------------------------------------------------

def idempotent_batches(count: int, producers: int, ts0: int = 1_700_000_000_000) -> List[bytearray]:
    """``count`` 1-record batches of ``producers`` idempotent producers interleaved (each with
    its own id, epoch 0 and consecutive sequences), as Kafka >= 3.0 clients write them."""
    out = []
    value = os.urandom(50).hex().encode()
    for i in range(count):
        pid = 1000 + i % producers
        b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=i // producers)
        b.append(b"key-%012d" % i, value, ts0 + i)
        out.append(bytearray(b.build()))
    return out


def write_log(d: str, batches: Sequence[bytearray], segment_bytes: int, per_call: int = 256) -> int:
    """Fill a log through ``Log.append`` (bulk) and close it cleanly; returns the log end offset."""
    log = Log.open(d, {"segment.bytes": segment_bytes})
    for i in range(0, len(batches), per_call):
        log.append(bytearray(b"".join(batches[i:i + per_call])))
    leo = log.log_end_offset
    log.close()
    return leo


def one_segment(label: str, batches: Sequence[bytearray], segment_bytes: int,
                records_per_batch: int) -> Case:
    """A partition directory holding as many of ``batches`` as fit in one segment of
    ``segment_bytes``, its producer snapshots removed (a recovery rebuilds the state)."""
    total = 0
    k = 0
    while k < len(batches) and total + len(batches[k]) <= segment_bytes:
        total += len(batches[k])
        k += 1
    d = C.fresh_dir("recover-")
    write_log(d, batches[:k], segment_bytes)
    for name in os.listdir(d):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(d, name))
    path = os.path.join(d, "00000000000000000000.log")
    with open(path, "rb") as f:          # page cache hot, as in the baselines
        while f.read(8 * C.MiB):
            pass
    return Case(label, d, path, k, total, records_per_batch)


# --- kafkalog and the peers ---------------------------------------------------------------------

def kafkalog_recovery(case: Case) -> float:
    """``Log.open`` after an unclean shutdown from recovery point 0: the whole segment recovered."""
    t0 = time.perf_counter()
    log = Log.open(case.directory, {"segment.bytes": max(case.size, 14)}, had_clean_shutdown=False,
                   recovery_point=0)
    dt = time.perf_counter() - t0
    segs = log.recovery_report.recovered_segments
    assert len(segs) == 1 and segs[0]["validBytes"] == case.size and segs[0]["kind"] == "clean", segs
    assert segs[0]["batches"] == case.batches, (segs[0]["batches"], case.batches)
    assert log.active_segment.offset_index.entries > 0
    log.close()
    for name in os.listdir(case.directory):        # the next run rebuilds the state again
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(case.directory, name))
    return dt


def _mapped(path: str) -> tuple[int, mmap.mmap]:
    fd = os.open(path, os.O_RDONLY)
    return fd, mmap.mmap(fd, 0, prot=mmap.PROT_READ)


def floor_mmap_crc(case: Case) -> float:
    fd, m = _mapped(case.segment)
    try:
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


def floor_python_walk(case: Case) -> float:
    """prim_bench's scan: header unpack + crc32c per batch over an mmap (no index)."""
    fd, m = _mapped(case.segment)
    try:
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


class Kafka44Recovery:
    """Kafka 4.4 recovering the segment after an unclean shutdown (see the module's docstring)."""

    TOPIC = "recover"

    def __init__(self) -> None:
        self.broker = None
        self.prepared_for: str | None = None
        self.workdir: str | None = None

    def _prepare(self, case: Case) -> None:
        from tests import kafka44
        try:
            kafka44.classpath()
        except kafka44.Kafka44Unavailable as e:
            raise SystemExit(f"--peer kafka44: Apache Kafka 4.4 is not available: {e}") from None
        self.close()
        self.workdir = C.fresh_dir("kafka44-recover-")
        b = kafka44.KafkaBroker(self.workdir, heap="1g", fast_start=False,
                                properties={"log.retention.ms": "-1", "log.retention.bytes": "-1"})
        b.format()
        b.start()
        try:
            kafka44.run_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b.bootstrap,
                             "--create", "--topic", self.TOPIC, "--partitions", "1",
                             "--config", f"segment.bytes={max(case.size + C.MiB, 14)}",
                             "--config", "retention.ms=-1")
        finally:
            b.stop()
        self.broker = b
        self.prepared_for = case.segment

    def run(self, case: Case) -> float:
        if self.prepared_for != case.segment:
            self._prepare(case)
        b = self.broker
        pdir = b.log_dir / f"{self.TOPIC}-0"
        for name in os.listdir(pdir):
            if name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".deleted")):
                os.unlink(pdir / name)
        for name in os.listdir(case.directory):
            if name.endswith((".log", ".index", ".timeindex")):
                shutil.copyfile(os.path.join(case.directory, name), pdir / name)
        (b.log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
        start_at = b.server_log.stat().st_size
        b.start()
        try:
            text = b.log_since(start_at)
        finally:
            b.kill()
        part = f"{self.TOPIC}-0"
        if not re.search(rf"Recovering unflushed segment 0\b.*? for {part}\.", text):
            raise SystemExit(f"kafka44: no recovery of {part} in Kafka's log: {text[-3000:]}")
        m = re.search(rf"Completed load of Log\(dir=[^,]*/{part}, .*?logEndOffset=(\d+)\) with \d+ "
                      rf"segments, .*? in (\d+)ms", text)
        if m is None:
            raise SystemExit(f"kafka44: no 'Completed load' line for {part}: {text[-3000:]}")
        if int(m.group(1)) != case.batches * case.records_per_batch:
            raise SystemExit(f"kafka44 recovered to offset {m.group(1)}, not "
                             f"{case.batches * case.records_per_batch}")
        return int(m.group(2)) / 1000

    def close(self) -> None:
        if self.broker is not None:
            self.broker.kill()
        if self.workdir:
            C.rmtree(self.workdir)
        self.broker = self.prepared_for = self.workdir = None


KAFKA44 = Kafka44Recovery()


def kafka44_available() -> bool:
    """Whether Kafka 4.4 runs here; says why not on stderr (the default peers then leave it out)."""
    from tests import kafka44
    try:
        kafka44.classpath()
        return True
    except kafka44.Kafka44Unavailable as e:
        sys.stderr.write(f"peer kafka44 left out: Apache Kafka 4.4 is not available: {e}\n")
        return False


register_peer(Peer("mmap-crc32c", "one crc32c pass over the whole mapped file (the floor)",
                   floor_mmap_crc))
register_peer(Peer("python-crc-walk", "Python header unpack + crc32c per batch",
                   floor_python_walk))
register_peer(Peer("kafka44", "Apache Kafka 4.4's log load after an unclean shutdown, from its log",
                   KAFKA44.run))


# --- one case ------------------------------------------------------------------------------------

def _median(xs: Sequence[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def run_case(case: Case, peers: Sequence[Peer], repeat: int) -> dict:
    """Time kafkalog and each peer ``repeat`` times, alternating; print and return the medians."""
    times: Dict[str, List[float]] = {p.name: [] for p in peers}
    ours: List[float] = []
    for _ in range(repeat):
        for p in peers:
            times[p.name].append(p.run(case))
        ours.append(kafkalog_recovery(case))
    med = _median(ours)
    gb = case.size / 1e9
    out = {"case": case.label, "kernel": kernel.IMPLEMENTATION, "segmentBytes": case.size,
           "batches": case.batches, "recordsPerBatch": case.records_per_batch, "runs": repeat,
           "kafkalogSeconds": round(med, 4), "kafkalogGBps": round(gb / med, 3),
           "kafkalogBatchesPerSecond": round(case.batches / med),
           "peers": {p.name: {"seconds": round(_median(times[p.name]), 4),
                              "ratio": round(_median(times[p.name]) / med, 3)} for p in peers}}
    err = sys.stderr
    err.write(f"\n== {case.label}: one segment of {case.size / C.MiB:,.0f} MiB, {case.batches:,} "
              f"batches ({case.records_per_batch} record(s) each), page cache hot, medians of "
              f"{repeat}\n")
    err.write(f"  kafkalog recovery: {gb / med:7.2f} GB/s = {case.batches / med / 1e3:,.0f} k "
              f"batches/s  ({C.spread(ours)})\n")
    for p in peers:
        pm = _median(times[p.name])
        err.write(f"  peer {p.name} ({p.what}): {gb / pm:7.2f} GB/s = "
                  f"{case.batches / pm / 1e3:,.0f} k batches/s ({C.spread(times[p.name])}); "
                  f"kafkalog is {pm / med:.2f}x\n")
    return out


def goals(out: dict) -> List[str]:
    """The goals a case's result meets or misses, as lines."""
    lines = []
    peers = out["peers"]
    if out["recordsPerBatch"] >= 500:
        lines.append(f">= {GOAL_GBPS} GB/s: {C.verdict(out['kafkalogGBps'], GOAL_GBPS)}")
        if "mmap-crc32c" in peers:
            lines.append(f">= {GOAL_FLOOR_RATIO:.0%} of the mmap + crc32c floor: "
                         f"{C.verdict(peers['mmap-crc32c']['ratio'], GOAL_FLOOR_RATIO)}")
    elif out["recordsPerBatch"] == 1:
        lines.append(f">= {GOAL_SMALL_BATCHES / 1e6:.0f} M batches/s: "
                     f"{C.verdict(out['kafkalogBatchesPerSecond'], GOAL_SMALL_BATCHES)}")
        if "python-crc-walk" in peers:
            lines.append(f">= {GOAL_OVER_PYTHON_WALK}x the Python CRC walk: "
                         f"{C.verdict(peers['python-crc-walk']['ratio'], GOAL_OVER_PYTHON_WALK)}")
    if "kafka44" in peers:
        lines.append(f">= Kafka 4.4's own recovery of the segment: "
                     f"{C.verdict(peers['kafka44']['ratio'], 1.0)}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="segment size of the goal case (MiB)")
    ap.add_argument("--small-mb", type=int, default=128, help="segment size of the small cases (MiB)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--producers", type=int, default=16,
                    help="idempotent producers interleaved in the idempotent case")
    ap.add_argument("--quick", action="store_true", help="256 MiB / 32 MiB segments")
    ap.add_argument("--only", default="goal,small,idempotent",
                    help="comma-separated cases: goal, small, idempotent")
    ap.add_argument("--peer", action="append", choices=sorted(PEERS), default=None,
                    help="a peer to time on the same segment (repeat; default: every peer)")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.small_mb = 256, 32
    cases = [c for c in args.only.split(",") if c]
    unknown = set(cases) - {"goal", "small", "idempotent"}
    if unknown:
        ap.error(f"--only: unknown case(s) {', '.join(sorted(unknown))}")
    peers = [PEERS[n] for n in (args.peer or sorted(PEERS))]
    if args.peer is None and not kafka44_available():
        peers = [p for p in peers if p.name != "kafka44"]
    sys.stderr.write(f"kafkalog log recovery benchmark; kernels: {kernel.IMPLEMENTATION}; "
                     f"dir {C.WORKDIR}; peers: {', '.join(p.name for p in peers)}\n")
    plan = []
    if "goal" in cases:
        plan.append(("goal: ~64 KB batches", 500, args.mb, False))
    if "small" in cases:
        plan.append(("10-record batches", 10, args.small_mb, False))
        plan.append(("1-record batches", 1, args.small_mb, False))
    if "idempotent" in cases:
        plan.append((f"1-record batches of {args.producers} idempotent producers", 1,
                     args.small_mb, True))
    for label, per_batch, mb, idempotent in plan:
        seg_bytes = mb * C.MiB
        C.check_disk(seg_bytes)
        if idempotent:
            one = len(idempotent_batches(1, 1)[0])
            batches = idempotent_batches(seg_bytes // one + 1, args.producers)
        else:
            one = len(C.build_batch(per_batch, 0))
            batches = C.make_batches(per_batch, count=seg_bytes // one + 1,
                                     distinct=64 if per_batch > 1 else 1000)
        case = one_segment(label, batches, seg_bytes, per_batch)
        del batches
        try:
            out = run_case(case, peers, args.repeat)
        finally:
            KAFKA44.close()
            C.rmtree(case.directory)
        for line in goals(out):
            sys.stderr.write(f"  goal {line}\n")
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
