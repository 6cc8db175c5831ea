"""Crash-restart harness: a real writer process is killed with SIGKILL at random moments.

One *cycle*: fork a writer process (it imports nothing new: the parent has imported kafkalog
already, so a cycle costs milliseconds, not an interpreter start), let it open the data directory
with :class:`~kafkalog.log.manager.LogManager` (running the loader / recovery), append batches of
every codec and magic to a delete-policy topic (2 partitions, tiny segments and indexes so rolls,
full indexes and retention happen constantly) and a compacted topic, flush, roll, run retention,
write checkpoints, close cleanly and reopen now and then -- and SIGKILL it after a random delay.
Then the parent reopens the directory and checks every invariant (:func:`verify_dir`).

The writer acknowledges a record only after the ``flush()`` that covers it returned, by appending
a line ``A topic partition offset key value`` to an acknowledgement file (one ``write(2)`` per
flush, so a kill never leaves a torn line that parses). Acknowledged records are remembered across
cycles: a record acknowledged in cycle 1 must still be there in cycle 2000 unless retention
removed its segment (offset below the log start offset, which may not exceed what retention
reported) or, in the compacted topic, the cleaner superseded it with a later value of its key.
"""
from __future__ import annotations

import os
import random
import select
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from kafkalog.errors import KafkalogError
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch

DELETE_TOPIC = "d"
COMPACT_TOPIC = "c"
TOPICS = {
    DELETE_TOPIC: (2, {"segment.bytes": 4096, "index.interval.bytes": 200,
                       "segment.index.bytes": 96, "retention.bytes": 20000}),
    COMPACT_TOPIC: (1, {"cleanup.policy": "compact", "segment.bytes": 4096,
                        "index.interval.bytes": 200, "segment.index.bytes": 96,
                        "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 0}),
}
KEYS = 40
#: record timestamps start an hour ago: retention is by size here (retention.bytes), and records
#: stamped years back would each be deleted by time (retention.ms, 7 days) at the next pass
BASE_TS = int(time.time() * 1000) - 3_600_000


def find_cleaner(m: LogManager):
    """``fn(log)`` cleaning the compacted partition to its first uncleanable offset with
    :mod:`kafkalog.cleaner` (the on-demand path of ``kafkalog compact``), or None without it."""
    try:
        from kafkalog.cleaner import CleanerConfig, LogCleaner, compact_log
    except ImportError:
        return None
    from kafkalog.log.naming import TopicPartition
    tp = TopicPartition(COMPACT_TOPIC, 0)

    def clean(log):
        cleaner = LogCleaner(logs=lambda: [(tp, log)], config=CleanerConfig.from_broker(m.broker_config),
                             clock=m.clock)
        return compact_log(cleaner, tp, log)
    return clean


# --- the writer (runs in the forked child) --------------------------------------------------------

def writer(data_dir: str, ack_path: str, seed: int, ready_fd: int, max_appends: int = 10**9) -> None:
    rnd = random.Random(seed)
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(line: str) -> None:
        os.write(ack, line.encode())

    def open_manager() -> LogManager:
        m = LogManager(data_dir, {}, background=False)
        for topic, (n, cfg) in TOPICS.items():
            m.create_topic(topic, n, cfg, exist_ok=True)
        return m

    m = open_manager()
    os.write(ready_fd, b"R")
    os.close(ready_fd)
    pending: Dict[Tuple[str, int], List[str]] = {}
    clean = find_cleaner(m)
    for seq in range(max_appends):
        topic = COMPACT_TOPIC if rnd.random() < 0.05 else DELETE_TOPIC
        part = rnd.randrange(TOPICS[topic][0])
        log = m.get_log(topic, part)
        buf = bytearray()
        recs = []
        for b in range(rnd.randint(1, 3)):
            magic = 1 if rnd.random() < 0.05 else 2
            codec = rnd.choice([0, 0, 1, 2, 3] + ([4] if magic == 2 else []))
            batch = []
            for j in range(rnd.randint(1, 5)):
                key = f"k{rnd.randrange(KEYS)}" if topic == COMPACT_TOPIC or rnd.random() < 0.5 else None
                pad = rnd.randrange(0, 160)
                value = f"{seed}.{seq}.{b}.{j}|{'x' * pad}"
                batch.append((key.encode() if key else None, value.encode(), BASE_TS + seq, None))
                recs.append((key or "-", value))
            buf += build_batch(batch, magic=magic, compression=codec)
        info = log.append(buf)
        lines = pending.setdefault((topic, part), [])
        for i, (k, v) in enumerate(recs):
            lines.append(f"A {topic} {part} {info.first_offset + i} {k} {v}\n")
        r = rnd.random()
        if r < 0.25:
            log.flush()
            note("".join(lines))
            lines.clear()
        elif r < 0.30:
            m.flush()                      # every log + all checkpoints
            note("".join(ln for v in pending.values() for ln in v))
            for v in pending.values():
                v.clear()
        elif r < 0.33:
            log.roll()
        elif r < 0.36:
            m.write_checkpoints()
        elif r < 0.39:
            note("RB\n")
            m.cleanup_logs()
            note("".join(f"L {t} {p} {lg.log_start_offset}\n" for (t, p), lg in m.logs()))
        elif r < 0.41 and clean is not None:
            note("CB\n")
            clean(m.get_log(COMPACT_TOPIC, 0))
            note("CE\n")
        elif r < 0.412:
            # clean shutdown and reopen: acknowledges everything (close flushes)
            m.close()
            note("".join(ln for v in pending.values() for ln in v))
            for v in pending.values():
                v.clear()
            m = open_manager()


# --- the parent -----------------------------------------------------------------------------------

@dataclass
class CrashState:
    """What the parent knows across cycles."""

    data_dir: str
    acked: Dict[Tuple[str, int], Dict[int, Tuple[str, str]]] = field(default_factory=dict)
    lso: Dict[Tuple[str, int], int] = field(default_factory=dict)
    cycles: int = 0
    acked_total: int = 0
    records_checked: int = 0
    recoveries_truncating: int = 0
    cleanings: int = 0
    fd_baseline: Optional[int] = None


class CrashInvariantError(AssertionError):
    pass


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def run_cycle(state: CrashState, seed: int, max_delay: float = 0.25) -> None:
    """One fork-write-SIGKILL-reopen-verify cycle."""
    ack_path = os.path.join(os.path.dirname(state.data_dir), f"acks-{os.getpid()}.txt")
    err_path = ack_path + ".err"
    for p in (ack_path, err_path):
        if os.path.exists(p):
            os.unlink(p)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(rfd)
            writer(state.data_dir, ack_path, seed, wfd)
        except BaseException:
            with open(err_path, "w") as f:
                f.write(traceback.format_exc())
            code = 3
        os._exit(code)
    os.close(wfd)
    rnd = random.Random(seed ^ 0x5EED)
    try:
        poller = select.poll()              # not select.select: descriptors may pass FD_SETSIZE
        poller.register(rfd, select.POLLIN)
        ready = poller.poll(60_000)
        got = os.read(rfd, 1) if ready else b""
        if got == b"R":
            time.sleep(rnd.uniform(0, max_delay))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(rfd)
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        err = open(err_path).read() if os.path.exists(err_path) else "(no traceback)"
        raise CrashInvariantError(f"writer (seed {seed}) did not survive until the kill: status "
                                  f"{status}\n{err}")
    if got != b"R":
        raise CrashInvariantError(f"writer (seed {seed}) never opened the data directory")
    bounds = _read_acks(state, ack_path)
    verify_dir(state, bounds, seed)
    state.cycles += 1


def _read_acks(state: CrashState, ack_path: str) -> Optional[Dict[Tuple[str, int], int]]:
    """Fold the acknowledgement file into ``state``; returns the largest log start offset each
    partition may have now, or None when the kill landed inside a retention pass (it may have
    moved any partition's log start offset, a partition with no acknowledged record yet too)."""
    data = open(ack_path, "rb").read() if os.path.exists(ack_path) else b""
    lines = data.split(b"\n")[:-1]                   # only complete lines
    bounds: Dict[Tuple[str, int], int] = dict(state.lso)
    in_flight = False
    for ln in lines:
        parts = ln.decode().split(" ")
        if parts[0] == "A":
            tp = (parts[1], int(parts[2]))
            off = int(parts[3])
            d = state.acked.setdefault(tp, {})
            if off in d and d[off] != (parts[4], parts[5]):
                raise CrashInvariantError(f"offset {off} of {tp} acknowledged twice with different "
                                          f"records: {d[off]} and {parts[4:]}")
            if off not in d:
                state.acked_total += 1
            d[off] = (parts[4], parts[5])
        elif parts[0] == "RB":
            in_flight = True
        elif parts[0] == "L":
            bounds[(parts[1], int(parts[2]))] = int(parts[3])
            in_flight = False
        elif parts[0] == "CB":
            state.cleanings += 1
    if in_flight:
        return None
    return bounds


def verify_dir(state: CrashState, lso_bounds: Optional[Dict[Tuple[str, int], int]], seed: int) -> None:
    """Reopen the data directory and check every invariant; raises CrashInvariantError."""
    def fail(msg: str) -> None:
        raise CrashInvariantError(f"after kill (seed {seed}, cycle {state.cycles}): {msg}")

    try:
        m = LogManager(state.data_dir, {}, background=False)
    except KafkalogError as e:
        fail(f"the data directory does not open: {e!r}")
        raise
    try:
        for tp, log in m.logs():
            key = (tp.topic, tp.partition)
            if log.recovery_report is not None and log.recovery_report.truncations:
                state.recoveries_truncating += 1
            lso, leo = log.log_start_offset, log.log_end_offset
            prev = state.lso.get(key, 0)
            bound = None if lso_bounds is None else lso_bounds.get(key, prev)
            if lso < prev and key[0] == DELETE_TOPIC:
                fail(f"{key}: log start offset went backwards {prev} -> {lso}")
            if bound is not None and lso > bound:
                fail(f"{key}: log start offset {lso} is beyond what retention reported ({bound})")
            records = {}
            last = -1
            for rec in log.records():
                if rec.offset <= last:
                    fail(f"{key}: offset {rec.offset} after {last}")
                last = rec.offset
                records[rec.offset] = ("-" if rec.key is None else rec.key.decode(),
                                       rec.value.decode())
            state.records_checked += len(records)
            if key[0] == DELETE_TOPIC or state.cleanings == 0:
                want = list(range(max(lso, min(records, default=lso)), leo))
                if sorted(records) != want or (records and min(records) != lso and key[0] == DELETE_TOPIC):
                    fail(f"{key}: offsets are not contiguous from the log start offset {lso} to the log "
                         f"end offset {leo} (got {len(records)} records, first "
                         f"{min(records, default=None)})")
            values = {}
            for off, kv in records.items():
                if kv[1] in values:
                    fail(f"{key}: record {kv} stored twice, at {values[kv[1]]} and {off}")
                values[kv[1]] = off
            acked = state.acked.get(key, {})
            latest_by_key: Dict[str, int] = {}
            for off, kv in records.items():
                latest_by_key[kv[0]] = max(latest_by_key.get(kv[0], -1), off)
            for off, kv in sorted(acked.items()):
                if off < lso:
                    continue
                got = records.get(off)
                if got == kv:
                    continue
                if got is None and key[0] == COMPACT_TOPIC and kv[0] != "-" \
                        and latest_by_key.get(kv[0], -1) > off:
                    continue                      # superseded by a later value of its key
                fail(f"{key}: acknowledged record at offset {off} {kv} is "
                     f"{'missing' if got is None else f'replaced by {got}'} (LSO {lso}, LEO {leo})")
            if acked and max(acked) >= leo:
                fail(f"{key}: log end offset {leo} is below acknowledged offset {max(acked)}")
            _check_indexes(log, fail)
            for off in [o for o in acked if o < lso]:
                del acked[off]
            state.lso[key] = lso
    finally:
        m.abandon()
    n = _fd_count()
    if state.fd_baseline is None:
        state.fd_baseline = n
    elif n > state.fd_baseline + 2:
        raise CrashInvariantError(f"file descriptors leak: {state.fd_baseline} -> {n}")


def _check_indexes(log, fail) -> None:
    """Every offset-index entry points at a batch boundary holding offsets <= its offset and the
    entries increase; every time-index entry names an offset inside its segment."""
    segs = log.segments
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else log.log_end_offset
        heads = {h.position: h for h in seg.log.iter_headers(0)}
        for h in heads.values():
            if not (seg.base_offset <= h.base_offset and h.last_offset < nxt):
                fail(f"{seg.log_path}: batch {h.base_offset}..{h.last_offset} outside the segment "
                     f"range [{seg.base_offset}, {nxt})")
        oi = seg.offset_index
        prev = (-1, -1)
        for n in range(oi.entries):
            e = oi.entry(n)
            off, pos = (e[0], e[1])
            if pos not in heads:
                fail(f"{seg.offset_index_path}: entry {n} ({off}, {pos}) is not a batch boundary")
            if heads[pos].base_offset > off or off >= nxt or off <= prev[0] or pos <= prev[1]:
                fail(f"{seg.offset_index_path}: entry {n} ({off}, {pos}) disagrees with the data")
            prev = (off, pos)
        ti = seg.time_index
        prev_ts = None
        for n in range(ti.entries):
            e = ti.entry(n)
            ts, off = e[0], e[1]
            if not (seg.base_offset <= off < max(nxt, seg.base_offset + 1)) or \
                    (prev_ts is not None and ts < prev_ts):
                fail(f"{seg.time_index_path}: entry {n} ({ts}, {off}) disagrees with the data")
            prev_ts = ts


def run_cycles(data_dir: str, cycles: int, seed: int = 0, max_delay: float = 0.25,
               progress=None) -> CrashState:
    os.makedirs(data_dir, exist_ok=True)
    state = CrashState(data_dir)
    for i in range(cycles):
        run_cycle(state, seed * 1_000_003 + i, max_delay)
        if progress is not None:
            progress(state)
    return state
