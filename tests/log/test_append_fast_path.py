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


@pytest.mark.parametrize("config", [None, {"segment.bytes": 20_000, "index.interval.bytes": 1000},
                                    {"segment.bytes": 50_000, "index.interval.bytes": 0},
                                    {"segment.index.bytes": 48, "index.interval.bytes": 100}])
def test_fast_path_matches_general_path(tmp_path, config, monkeypatch):
    from kafkalog.log.segment import LogSegment
    taken = []
    orig = LogSegment.try_append_one

    def counting(self, *a):
        r = orig(self, *a)
        taken.append(r)
        return r
    monkeypatch.setattr(LogSegment, "try_append_one", counting)
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
