"""Torn writes, simulated exactly: a ``.log`` cut at every byte, data written but its index entries
not (and the reverse), torn checkpoint files. After each, the log opens, keeps exactly the
complete batches before the damage, says what it removed, and its indexes agree with its data."""
from __future__ import annotations

import os
import random
import shutil

import pytest

from kafkalog.log.log import Log
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch

from .crash import _check_indexes

CONFIG = {"segment.bytes": 1 << 20, "index.interval.bytes": 64, "segment.index.bytes": 4096}


def _fail(msg):
    raise AssertionError(msg)


def _make(path, n=12, seed=1):
    rnd = random.Random(seed)
    log = Log.open(str(path), CONFIG, had_clean_shutdown=True)
    bounds = []                                   # (end position, next offset) after each batch
    for i in range(n):
        codec = [0, 1, 2, 3, 4][i % 5]
        recs = [(None, f"r{i}.{j}".encode() + b"z" * rnd.randrange(30), 1_700_000_000_000 + i, None)
                for j in range(1 + i % 3)]
        log.append(build_batch(recs, compression=codec))
        bounds.append((log.active_segment.size, log.log_end_offset))
    records = [(r.offset, r.value) for r in log.records()]
    log.close()
    return records, bounds


def _records(log):
    return [(r.offset, r.value) for r in log.records()]


def test_log_cut_at_every_byte(ram_path):
    """Every possible cut of a segment holding batches of every codec."""
    pristine = ram_path / "p-0"
    records, bounds = _make(pristine)
    seg = "00000000000000000000.log"
    size = os.path.getsize(pristine / seg)
    work = ram_path / "w-0"
    for cut in range(size + 1):
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(pristine, work)
        os.truncate(work / seg, cut)
        keep = max([nxt for end, nxt in bounds if end <= cut], default=0)
        log = Log.open(str(work), CONFIG, recovery_point=0, had_clean_shutdown=False)
        try:
            assert log.log_end_offset == keep, (cut, log.log_end_offset, keep)
            assert _records(log) == [r for r in records if r[0] < keep], cut
            at_boundary = cut == 0 or any(end == cut for end, _ in bounds)
            rep = log.recovery_report
            if not at_boundary:
                assert rep.truncations, f"cut at {cut} not reported"
                t = rep.truncations[0]
                assert t["file"].endswith(seg) and t["position"] == max(
                    [e for e, _ in bounds if e <= cut], default=0)
            _check_indexes(log, _fail)
            # appending after recovery continues at the right offset
            log.append(build_batch([(None, b"after", 1_700_000_000_999, None)]))
            assert _records(log)[-1] == (keep, b"after")
        finally:
            log.close()


def test_data_written_index_not(tmp_path):
    """Killed after the data write but before the index update: stale (shorter) index files."""
    p = tmp_path / "t-0"
    log = Log.open(str(p), CONFIG, had_clean_shutdown=True)
    for i in range(5):
        log.append(build_batch([(None, b"a%d" % i, 1_700_000_000_000 + i, None)] * 3))
    log.flush(include_active=True)
    rp = log.log_end_offset
    stale = {s: open(p / f"00000000000000000000{s}", "rb").read() for s in (".index", ".timeindex")}
    for i in range(20):
        log.append(build_batch([(None, b"b%d" % i, 1_700_000_001_000 + i, None)] * 2))
    want = _records(log)
    log.flush(include_active=True)
    for seg in log.segments:
        seg.close_handlers()                         # no clean close: a crash
    for s, data in stale.items():
        with open(p / f"00000000000000000000{s}", "wb") as f:
            f.write(data)
    log = Log.open(str(p), CONFIG, recovery_point=rp, had_clean_shutdown=False)
    try:
        assert _records(log) == want
        _check_indexes(log, _fail)
        for off, _ in want[::7]:
            h = log.active_segment.translate_offset(off)
            assert h is not None and h.base_offset <= off <= h.last_offset
    finally:
        log.close()


@pytest.mark.parametrize("clean", [False, True])
def test_index_written_data_not(tmp_path, clean):
    """The reverse (power loss losing data pages but not index pages): index entries beyond the
    end of the .log. Detected whether or not the shutdown was clean."""
    p = tmp_path / "t-0"
    records, bounds = _make(p, n=20)
    seg = p / "00000000000000000000.log"
    cut = bounds[7][0]
    os.truncate(seg, cut)
    log = Log.open(str(p), CONFIG, recovery_point=0 if not clean else bounds[-1][1],
                   had_clean_shutdown=clean)
    try:
        assert _records(log) == [r for r in records if r[0] < bounds[7][1]]
        _check_indexes(log, _fail)
        if clean:
            assert log.recovery_report.rebuilt_indexes, "stale index not noticed after a clean shutdown"
    finally:
        log.close()


def test_torn_checkpoints(tmp_path):
    """Truncated / garbage checkpoint files and a leftover .tmp: the directory opens, the
    damage is reported, recovery starts from 0 and nothing is lost."""
    d = tmp_path / "data"
    m = LogManager(str(d), {}, background=False)
    m.create_topic("t", 1, {"segment.bytes": 600})
    log = m.get_log("t", 0)
    for i in range(40):
        log.append(build_batch([(b"k", b"v%d" % i, 1_700_000_000_000 + i, None)]))
    m.flush()
    want = _records(log)
    m.abandon()
    with open(d / "recovery-point-offset-checkpoint", "r+b") as f:
        f.truncate(9)
    with open(d / "log-start-offset-checkpoint", "wb") as f:
        f.write(b"0\n1\nt 0 \xff\xfe\n")
    with open(d / "recovery-point-offset-checkpoint.tmp", "wb") as f:
        f.write(b"0\n5\nt 0")
    m = LogManager(str(d), {}, background=False)
    try:
        assert _records(m.get_log("t", 0)) == want
        assert len(m.load_result.checkpoint_errors) >= 1
    finally:
        m.close()
