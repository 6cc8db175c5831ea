"""The single-batch fast path of ``Log.append`` (``Log._append_one_v2`` + ``LogSegment.try_append_one``)
must give exactly what the general path gives: same files byte for byte, same ``AppendInfo``s, same
errors."""

import os

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log.log import Log
from kafkalog.record.builder import BatchBuilder


def _batch(i: int, records: int = 1, ts=None) -> bytes:
    b = BatchBuilder()
    for k in range(records):
        b.append(b"key-%d-%d" % (i, k), b"v" * (50 + (i * 7 + k) % 300),
                 1_700_000_000_000 + (i * 13) % 1000 if ts is None else ts)
    return b.build()


def _run(d, batches, fast: bool, config):
    log = Log.open(d, config)
    if not fast:
        log._fast_append = False
    infos = [vars(log.append(bytearray(b))) for b in batches]
    leo = log.log_end_offset
    log.close()
    files = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            files[name] = f.read()
    return infos, leo, files


def _count_results(monkeypatch, cls, name: str) -> list:
    """The results of every call of ``cls.name`` from now on, in a list that grows as it runs."""
    results = []
    orig = getattr(cls, name)

    def counting(self, *a):
        r = orig(self, *a)
        results.append(r)
        return r
    monkeypatch.setattr(cls, name, counting)
    return results


@pytest.mark.parametrize("config", [None, {"segment.bytes": 20_000, "index.interval.bytes": 1000},
                                    {"segment.bytes": 50_000, "index.interval.bytes": 0},
                                    {"segment.index.bytes": 48, "index.interval.bytes": 100}])
def test_fast_path_matches_general_path(tmp_path, config, monkeypatch):
    from kafkalog.log.segment import LogSegment
    taken = _count_results(monkeypatch, LogSegment, "try_append_one")
    batches = [_batch(i, 1 + i % 4, ts=None if i % 5 else -1) for i in range(400)]
    fast = _run(tmp_path / "fast", batches, True, config)
    assert sum(taken) > 100           # the fast path really ran
    slow = _run(tmp_path / "slow", batches, False, config)
    assert fast[1] == slow[1] == sum(1 + i % 4 for i in range(400))
    assert fast[0] == slow[0]
    assert fast[2].keys() == slow[2].keys()
    for name in fast[2]:
        assert fast[2][name] == slow[2][name], name


def test_fast_path_time_roll_and_reopen(tmp_path):
    cfg = {"segment.ms": 1000}
    batches = [_batch(i, ts=1_700_000_000_000 + i * 300) for i in range(20)]
    fast = _run(tmp_path / "fast", batches, True, cfg)
    slow = _run(tmp_path / "slow", batches, False, cfg)
    assert fast == slow
    assert sum(n.endswith(".log") for n in fast[2]) > 1
    log = Log.open(tmp_path / "fast", cfg, had_clean_shutdown=True, recovery_point=fast[1])
    info = log.append(bytearray(_batch(99, ts=1_700_000_000_000 + 21 * 300)))
    assert info.first_offset == fast[1]
    log.close()


def test_fast_path_rejects_like_general_path(tmp_path):
    log = Log.open(tmp_path / "a")
    log.append(bytearray(_batch(0)))
    bad = bytearray(_batch(1))
    bad[-1] ^= 1
    with pytest.raises(KafkalogError) as e1:
        log.append(bad)
    log._fast_append = False
    with pytest.raises(KafkalogError) as e2:
        log.append(bytearray(bad))
    assert type(e1.value) is type(e2.value) and str(e1.value) == str(e2.value)
    assert log.log_end_offset == 1
    log.close()


def _idempotent(pid: int, epoch: int, seq: int, records: int, i: int, transactional: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=transactional)
    for k in range(records):
        b.append(b"k%d" % k, b"v" * (20 + (i * 11 + k) % 90), 1_700_000_000_000 + i * 10 + k)
    return b.build()


def _producer_steps(seed: int) -> list[bytes]:
    """A seeded mix of what idempotent producers send: mostly each producer's next batch in
    sequence, and among them retries of a retained or older batch, gaps, stale and bumped epochs,
    new producers, transactional batches (then non-transactional ones of a producer with an open
    transaction) and a sequence that wraps at Int.MAX."""
    import random
    rnd = random.Random(seed)
    state = {1: [0, 0], 2: [0, 0], 3: [0, 2**31 - 40]}     # pid -> [epoch, next sequence]
    sent: dict[int, list[bytes]] = {p: [] for p in state}
    steps = []
    for i in range(600):
        pid = rnd.choice(list(state))
        epoch, seq = state[pid]
        n = rnd.randint(1, 6)
        r = rnd.random()
        if r < 0.05 and sent[pid]:
            steps.append(rnd.choice(sent[pid][-7:]))            # a retry: duplicate or too old
            continue
        if r < 0.07:
            seq += rnd.randint(1, 5)                            # a gap
        elif r < 0.09:
            epoch, seq = epoch + 1, 0                           # a bumped epoch starts at 0
        elif r < 0.10 and epoch > 0:
            epoch -= 1                                          # a fenced (stale) epoch
        elif r < 0.12:
            pid = max(state) + 1                                # a new producer
            state[pid], sent[pid] = [0, 0], []
            epoch, seq = 0, 0
        batch = _idempotent(pid, epoch, seq, n, i, transactional=r > 0.985)
        steps.append(batch)
        sent[pid].append(batch)
        if r >= 0.10 or r < 0.09:
            state[pid] = [max(state[pid][0], epoch), (seq + n) % 2**31]
    return steps


def _run_producers(d, steps, fast: bool):
    log = Log.open(d)
    if not fast:
        log._fast_append = False
    results = []
    for b in steps:
        try:
            results.append(vars(log.append(bytearray(b))))
        except KafkalogError as e:
            results.append((type(e).__name__, str(e)))
    psm = log.producer_state_manager
    state = {pid: (e.producer_epoch, e.current_txn_first_offset, e.last_timestamp,
                   [vars(m) for m in e.batch_metadata])
             for pid, e in psm.producers.items()}
    txns = (dict(psm.ongoing_txns), psm.map_end_offset, psm.first_unstable_offset())
    log.close()
    files = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            files[name] = f.read()
    return results, state, txns, files


def test_idempotent_batches_take_the_fast_path_with_the_general_paths_results(tmp_path, monkeypatch):
    """Each idempotent producer's next batch in sequence is appended by the fast path (no scratch
    copy of the producer state); everything else by the general path. Either way the results,
    errors (out of order, fenced epochs, transactional state), duplicates (a retried batch gets
    its original offsets), producer state and files (producer snapshots included) are those of
    the general path alone."""
    from kafkalog.log.producer_state import ProducerStateManager
    taken = _count_results(monkeypatch, ProducerStateManager, "is_next_in_sequence")
    kinds = set()
    for seed in (1, 2, 3, 4):
        steps = _producer_steps(seed)
        taken.clear()
        fast = _run_producers(tmp_path / f"fast-{seed}", steps, True)
        assert sum(taken) > 150 and not all(taken)          # both paths ran
        slow = _run_producers(tmp_path / f"slow-{seed}", steps, False)
        kinds |= {r[0] if isinstance(r, tuple) else ("duplicate" if r["duplicate"] else "appended")
                  for r in slow[0]}
        for i, (a, b) in enumerate(zip(fast[0], slow[0], strict=True)):
            assert a == b, (seed, i, a, b)
        assert fast[1] == slow[1]
        assert fast[2] == slow[2]
        assert fast[3].keys() == slow[3].keys()
        for name in fast[3]:
            assert fast[3][name] == slow[3][name], (seed, name)
    assert kinds == {"appended", "duplicate", "OutOfOrderSequenceError", "InvalidProducerEpochError",
                     "InvalidTxnStateError"}
