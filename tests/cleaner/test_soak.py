"""Soak: random keyed appends with tombstones and transactions (committed and aborted) while two
background cleaner threads compact and reader threads read, checking the latest-value model after
every round and the reader invariants all along. Run with ``pytest -m slow tests/cleaner``."""
import random
import threading

import pytest

from kafkalog.cleaner import LogCleaner
from kafkalog.cleaner.manager import tp_of_log
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch
from kafkalog.record.records import iter_batches

from .helpers import NOW, append_marker

ROUNDS = 150
PARTITIONS = 2
KEYS = 40


def _read(log, aborted_pids):
    """(latest value per key of committed data, versions per key in offset order, offsets)."""
    latest, versions, offsets = {}, {}, []
    for seg in log.segments:                       # one copy-on-write snapshot
        data = seg.log.pread(0, seg.size)
        for b in iter_batches(data):
            b.ensure_valid()
            if b.magic >= 2 and b.is_control:
                offsets.append(b.last_offset)
                continue
            skip = b.magic >= 2 and b.producer_id in aborted_pids
            for r in b.records():
                offsets.append(r.offset)
                versions.setdefault(r.key, []).append(int(r.value) if r.value is not None
                                                      else int(r.headers[0][1]))
                if not skip:
                    latest[r.key] = r.value
    return latest, versions, offsets


def _check_invariants(log, aborted_pids, errors):
    _latest, versions, offsets = _read(log, aborted_pids)
    if offsets != sorted(set(offsets)):
        errors.append(f"offsets not strictly increasing in {log.dir}")
    for k, vs in versions.items():
        if vs != sorted(vs):
            errors.append(f"versions of {k!r} out of order: {vs}")


@pytest.mark.slow
def test_soak_cleaner_threads_with_tombstones_transactions_and_readers(tmp_path):
    rnd = random.Random(20240601)
    d = str(tmp_path / "data")
    mgr = LogManager(d, {"log.cleaner.enable": True, "log.cleaner.threads": 2,
                         "log.cleaner.backoff.ms": 5,
                         "log.cleaner.dedupe.buffer.size": 2 * 24 * 30},   # 30-slot maps: partial rounds
                     background=True, cleaner_factory=LogCleaner)
    try:
        mgr.create_topic("soak", PARTITIONS, {"cleanup.policy": "compact", "segment.bytes": 3000,
                                              "min.cleanable.dirty.ratio": 0.01,
                                              "file.delete.delay.ms": 60_000})
        logs = [mgr.get_log("soak", p) for p in range(PARTITIONS)]
        models = [{} for _ in logs]
        aborted = [set() for _ in logs]
        errors, stop = [], threading.Event()

        def reader(i):
            while not stop.is_set():
                for p, log in enumerate(logs):
                    try:
                        _check_invariants(log, set(aborted[p]), errors)
                    except Exception as e:
                        errors.append(f"reader {i}: {type(e).__name__}: {e}")
        readers = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(2)]
        for t in readers:
            t.start()
        version = 0
        pid = 5000
        for rnd_no in range(ROUNDS):
            for p, log in enumerate(logs):
                recs = []
                for _ in range(rnd.randint(1, 12)):
                    version += 1
                    k = b"k%d" % rnd.randrange(KEYS)
                    tomb = rnd.random() < 0.15
                    recs.append((k, None if tomb else b"%d" % version, NOW + version,
                                 [("v", b"%d" % version)]))
                    models[p][k] = recs[-1][1]
                log.append(build_batch(recs))
                if rnd.random() < 0.3:                  # one transaction per producer id
                    pid += 1
                    commit = rnd.random() < 0.6
                    txn = []
                    for _ in range(rnd.randint(1, 4)):
                        version += 1
                        txn.append((b"k%d" % rnd.randrange(KEYS), b"%d" % version, NOW + version,
                                    [("v", b"%d" % version)]))
                    log.append(build_batch(txn, producer_id=pid, producer_epoch=0,
                                           base_sequence=0, is_transactional=True))
                    if commit:
                        for k, v, _ts, _h in txn:
                            models[p][k] = v
                    else:
                        aborted[p].add(pid)
                    append_marker(log, pid, 0, commit)
                latest, _v, _o = _read(log, aborted[p])
                assert latest == models[p], f"round {rnd_no}, partition {p}"
        stop.set()
        for t in readers:
            t.join()
        assert not errors, errors[:5]
        cleaned = {tp.partition for tp in mgr.cleaner.manager.read_checkpoint(d)}
        assert cleaned == set(range(PARTITIONS))
        assert not mgr.cleaner.manager.uncleanable
        assert all(r.error is None or "aborted" in r.error for r in mgr.cleaner.results)
        # a final synchronous round over everything below the active segments
        mgr.cleaner.shutdown()
        for log in logs:
            log.roll()
        c = mgr.cleaner.new_cleaner()
        for p, log in enumerate(logs):
            for _ in range(1000):                       # 30-key maps: several rounds
                ltc = mgr.cleaner.manager.log_to_clean_now(tp_of_log(log), log)
                if ltc is None:
                    break
                r = mgr.cleaner.run_cleaning(c, ltc)
                assert r.error is None, r.error
                if r.end_offset >= log.active_segment.base_offset:
                    break
            latest, versions, _o = _read(log, set())    # aborted data is gone now
            assert latest == models[p]
            assert all(len(vs) == 1 for vs in versions.values())
    finally:
        mgr.close()
    mgr = LogManager(d, {"log.cleaner.enable": False}, background=False)
    try:
        for p in range(PARTITIONS):
            assert _read(mgr.get_log("soak", p), set())[0] == models[p]
    finally:
        mgr.close()
