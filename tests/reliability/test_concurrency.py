"""Concurrency: reader threads (decoded records and raw fetches) and reader processes (raw segment
files, bounded by the checkpointed high watermark) run alongside an appender, the background
retention task and the background cleaner (LogManager with its scheduler and cleaner threads).

No reader sees a torn or invalid batch or a wrong record, offsets and the log end offset only move
forward, every thread finishes (bounded joins: no deadlock), and no file descriptor leaks."""
from __future__ import annotations

import os
import random
import threading
import time
import traceback

import pytest

from kafkalog.cleaner import LogCleaner
from kafkalog.errors import KafkalogError, OffsetOutOfRangeError
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch
from kafkalog.record.records import iter_batches

BROKER = {"log.cleaner.enable": True, "log.cleaner.backoff.ms": 20, "log.initial.task.delay.ms": 0,
          "log.retention.check.interval.ms": 50, "log.flush.offset.checkpoint.interval.ms": 50,
          "log.cleaner.threads": 1}
TOPICS = {"d": {"segment.bytes": 3000, "retention.bytes": 12000, "index.interval.bytes": 100,
                "file.delete.delay.ms": 1000},
          "c": {"cleanup.policy": "compact", "segment.bytes": 3000, "min.cleanable.dirty.ratio": 0.01,
                "segment.ms": 200, "file.delete.delay.ms": 1000, "index.interval.bytes": 100}}


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _value(topic: str, off: int) -> bytes:
    return f"{off}:{topic}:".encode() + b"p" * (off % 50)


def _process_reader(data_dir: str, seconds: float, err_path: str) -> None:
    """Forked: read raw segment files of d-0 up to the checkpointed high watermark."""
    problems = []
    last_hw = -1
    deadline = time.time() + seconds
    pdir = os.path.join(data_dir, "d-0")
    while time.time() < deadline and not problems:
        try:
            with open(os.path.join(data_dir, "replication-offset-checkpoint"), "rb") as f:
                text = f.read().decode()
        except FileNotFoundError:
            continue
        hw = None
        for ln in text.splitlines()[2:]:
            parts = ln.split()
            if len(parts) == 3 and parts[0] == "d" and parts[1] == "0":
                hw = int(parts[2])
        if hw is None:
            continue
        if hw < last_hw:
            problems.append(f"high watermark went backwards {last_hw} -> {hw}")
        last_hw = hw
        for name in sorted(os.listdir(pdir)):
            if not name.endswith(".log"):
                continue
            try:
                with open(os.path.join(pdir, name), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue                               # removed by retention meanwhile
            try:
                for b in iter_batches(data):
                    if b.last_offset >= hw:
                        break
                    b.ensure_valid()
                    for r in b.records():
                        if r.value != _value("d", r.offset):
                            problems.append(f"{name}: wrong record at offset {r.offset}")
            except KafkalogError as e:
                problems.append(f"{name}: {e!r}")
    if problems:
        with open(err_path, "w") as f:
            f.write("\n".join(problems[:20]))


def run_soak(data_dir: str, seconds: float, readers: int = 4, procs: int = 2, seed: int = 0) -> dict:
    fds_before = _fds()
    m = LogManager(data_dir, BROKER, background=True, cleaner_factory=LogCleaner)
    for t, cfg in TOPICS.items():
        m.create_topic(t, 1, cfg)
    logs = {t: m.get_log(t, 0) for t in TOPICS}
    stop = threading.Event()
    errors = []
    stats = {"appended": 0, "read": 0, "fetches": 0, "out_of_range": 0}
    lock = threading.Lock()

    def guard(fn):
        def run(*args):
            try:
                fn(*args)
            except BaseException:
                errors.append(traceback.format_exc())
                stop.set()
        return run

    @guard
    def appender():
        rnd = random.Random(seed)
        n = 0
        while not stop.is_set():
            t = "c" if rnd.random() < 0.4 else "d"
            log = logs[t]
            base = log.log_end_offset
            k = rnd.randint(1, 5)
            recs = [(f"k{rnd.randrange(15)}".encode() if t == "c" else None, _value(t, base + i),
                     int(time.time() * 1000), None) for i in range(k)]
            info = log.append(build_batch(recs, compression=rnd.choice([0, 1, 3, 4])))
            assert info.first_offset == base, (info.first_offset, base)
            n += 1
            stats["appended"] += k
            if n % 10 == 0:
                log.flush()
            if n % 50 == 0:
                m.write_checkpoints()

    @guard
    def reader(i):
        rnd = random.Random(seed * 100 + i)
        last_leo = dict.fromkeys(TOPICS, 0)
        while not stop.is_set():
            t = rnd.choice(list(TOPICS))
            log = logs[t]
            leo = log.log_end_offset
            if leo < last_leo[t]:
                raise AssertionError(f"log end offset of {t} went backwards {last_leo[t]} -> {leo}")
            last_leo[t] = leo
            lso = log.log_start_offset
            start = rnd.randint(lso, max(lso, leo))
            try:
                if rnd.random() < 0.5:
                    prev = None
                    for j, r in enumerate(log.records(start)):
                        if r.value != _value(t, r.offset):
                            raise AssertionError(f"{t}: wrong record at offset {r.offset}: {r.value[:30]!r}")
                        if prev is not None and (r.offset <= prev or (t == "d" and r.offset != prev + 1)):
                            raise AssertionError(f"{t}: offset {r.offset} after {prev}")
                        prev = r.offset
                        with lock:
                            stats["read"] += 1
                        if j > 300:
                            break
                else:
                    info = log.read(start, 4096)
                    data = info.records.read() if len(info.records) else b""
                    for b in iter_batches(data):
                        b.ensure_valid()                   # no torn batch in a fetch
                        for r in b.records():
                            if r.value != _value(t, r.offset):
                                raise AssertionError(f"{t}: fetched wrong record at {r.offset}")
                    with lock:
                        stats["fetches"] += 1
            except OffsetOutOfRangeError:
                with lock:
                    stats["out_of_range"] += 1             # retention/cleaning moved the start

    threads = [threading.Thread(target=appender, name="appender")]
    threads += [threading.Thread(target=reader, args=(i,), name=f"reader-{i}") for i in range(readers)]
    pids = []
    err_paths = []
    for i in range(procs):
        ep = os.path.join(os.path.dirname(data_dir), f"proc-reader-{i}.err")
        err_paths.append(ep)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _process_reader(data_dir, seconds, ep)
            except BaseException:
                with open(ep, "a") as f:
                    f.write(traceback.format_exc())
                code = 1
            os._exit(code)
        pids.append(pid)
    for th in threads:
        th.start()
    # run for `seconds`, and on (bounded) until retention has deleted at least one segment and
    # each kind of work ran as often as _assert_ok asks (a loaded machine does less a second)
    t0 = time.time()
    while not stop.is_set() and time.time() - t0 < max(seconds, 120):
        with lock:
            enough = stats["appended"] > 200 and stats["read"] > 200 and stats["fetches"] > 20
        if time.time() - t0 >= seconds and logs["d"].log_start_offset > 0 and enough:
            break
        time.sleep(0.1)
    stop.set()
    for th in threads:
        th.join(60)
    alive = [th.name for th in threads if th.is_alive()]
    for pid in pids:
        os.waitpid(pid, 0)
    cleaned = {"cleaner_running": m.cleaner is not None,
               "compact_first_segment": logs["c"].segments[0].base_offset}
    retention_ran = bool(m.last_retention)
    m.close()
    fds_after = _fds()
    proc_errors = [open(p).read() for p in err_paths if os.path.exists(p)]
    return {"errors": errors, "alive": alive, "proc_errors": proc_errors, "stats": stats,
            "fds": (fds_before, fds_after), "retention_ran": retention_ran,
            "lso_d": logs["d"].log_start_offset, "cleaner": cleaned}


def _assert_ok(r):
    assert not r["alive"], f"threads did not finish (deadlock?): {r['alive']}"
    assert not r["errors"], r["errors"][0]
    assert not r["proc_errors"], r["proc_errors"][0]
    before, after = r["fds"]
    assert after <= before + 2, f"file descriptors leaked: {before} -> {after}"
    s = r["stats"]
    assert s["appended"] > 200 and s["read"] > 200 and s["fetches"] > 20, s
    assert r["lso_d"] > 0, "retention never ran: the test would prove nothing about it"
    assert r["cleaner"]["cleaner_running"], "the background cleaner did not start"


def test_readers_alongside_appender_retention_cleaner(tmp_path):
    _assert_ok(run_soak(str(tmp_path / "data"), seconds=6))


@pytest.mark.slow
def test_soak_long(tmp_path):
    _assert_ok(run_soak(str(tmp_path / "data"), seconds=float(os.environ.get("KAFKALOG_SOAK_SECONDS", "300"))))
