"""``kafkalog.open(dir, read_only=True)`` and ``kafkalog consume``: reading a data directory that
another process holds (its ``.lock`` taken by a LogManager), without changing a byte of it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

import kafkalog
from kafkalog.cli.main import main
from kafkalog.errors import CorruptRecordError, LogDirError
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch, build_end_txn_marker
from kafkalog.record.constants import ControlRecordType


def _snapshot(d) -> dict:
    """Every file and directory under ``d``: path -> (size, sha256, mtime_ns) or 'dir'."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), d)] = "dir"
        for name in files:
            p = os.path.join(root, name)
            st = os.stat(p)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = (st.st_size, hashlib.sha256(f.read()).hexdigest(),
                                              st.st_mtime_ns)
    return out


def _fill(d, n=3000, segment_bytes=20_000):
    with kafkalog.open(d, {"log.segment.bytes": segment_bytes}, background=False) as dl:
        dl.create_topic("t", 3)
        dl.produce_many("t", [(b"k%d" % i, b"value-%05d" % i) for i in range(n)], batch_size=2000)


HOLDER = textwrap.dedent("""
    import sys
    from kafkalog.log.manager import LogManager
    m = LogManager(sys.argv[1], {"log.segment.bytes": 20000}, background=False)
    log = m.get_log("t", 0)
    from kafkalog.record.builder import build_batch
    log.append(build_batch([(b"late", b"appended-by-holder", 5)]))
    print("ready", flush=True)
    sys.stdin.readline()
    m.close()
""")


@pytest.fixture
def held_dir(tmp_path):
    """A data directory held by a LogManager in another process (unflushed active segment,
    preallocated active indexes, no clean-shutdown file)."""
    d = str(tmp_path / "data")
    _fill(d)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, d], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield d
    finally:
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=60)
        assert proc.returncode == 0


def test_consume_while_another_process_holds_the_dir(held_dir):
    d = held_dir
    with pytest.raises(LogDirError):          # the lock really is held
        LogManager(d, background=False)
    before = _snapshot(d)
    assert ".kafka_cleanshutdown" not in before
    with kafkalog.open(d, read_only=True) as dl:
        recs = list(dl.consume("t"))
        assert len(recs) == 3001
        assert sorted(r.value for r in recs if r.key != b"late") == \
            sorted(b"value-%05d" % i for i in range(3000))
        late = [r for r in recs if r.value == b"appended-by-holder"]
        assert [(r.partition, r.timestamp) for r in late] == [(0, 5)]
        assert sum(dl.end_offsets("t").values()) == 3001
        assert dl.beginning_offsets("t") == {0: 0, 1: 0, 2: 0}
        ends = dl.end_offsets("t")
        assert [r.offset for r in dl.consume("t", 1, offset=ends[1] - 2)] == [ends[1] - 2, ends[1] - 1]
        assert dl.offsets_for_times("t", 2**62) == {0: None, 1: None, 2: None}
        assert dl.offsets_for_times("t", 0) == {0: 0, 1: 0, 2: 0}
    res = CliRunner().invoke(main, ["consume", d, "t", "--partition", "0"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.output.splitlines()]
    assert lines[-1]["value"] == "appended-by-holder" and len(lines) == ends[0]
    assert [x["offset"] for x in lines] == list(range(ends[0]))
    # the real command, as another process
    exe = [sys.executable, "-m", "kafkalog.cli.main"]
    p = subprocess.run(exe + ["consume", d, "t", "--max-records", "2"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 2
    assert _snapshot(d) == before


def test_read_only_matches_the_writable_view(tmp_path):
    d = str(tmp_path / "d")
    _fill(d, n=2500, segment_bytes=8_000)
    with kafkalog.open(d, background=False) as dl:
        want = {p: [tuple(r) for r in dl.consume("t", p)] for p in range(3)}
        starts = {p: [tuple(r) for r in dl.consume("t", p, offset=97)] for p in range(3)}
        ts = {p: dl.offsets_for_times("t", 0) for p in range(3)}
        desc = dl.describe()
    before = _snapshot(d)
    with kafkalog.open(d, read_only=True) as dl:
        assert dl.topics() == ["t"] and dl.partitions("t") == 3
        assert {p: [tuple(r) for r in dl.consume("t", p)] for p in range(3)} == want
        assert {p: [tuple(r) for r in dl.consume("t", p, offset=97)] for p in range(3)} == starts
        assert {p: dl.offsets_for_times("t", 0) for p in range(3)} == ts
        got = dl.describe()
        assert [(x["logEndOffset"], x["numSegments"], x["sizeInBytes"]) for x in got] == \
            [(x["logEndOffset"], x["numSegments"], x["sizeInBytes"]) for x in desc]
        assert min(x["numSegments"] for x in got) >= 3
    assert _snapshot(d) == before


def test_read_only_refuses_writes_and_never_creates(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(LogDirError):
        kafkalog.open(missing, read_only=True)
    assert not missing.exists()
    d = str(tmp_path / "d")
    _fill(d, n=10)
    before = _snapshot(d)
    with kafkalog.open(d, read_only=True) as dl:
        for call in (lambda: dl.produce("t", b"x"), lambda: dl.create_topic("u"),
                     lambda: dl.delete_topic("t"), lambda: dl.produce_many("t", [b"x"]),
                     lambda: dl.flush(), lambda: dl.delete_old_segments(),
                     lambda: dl.alter_topic_config("t", {"retention.ms": 1})):
            with pytest.raises(LogDirError):
                call()
    assert _snapshot(d) == before


def test_read_only_after_a_crash_stops_at_the_torn_tail(tmp_path):
    d = str(tmp_path / "d")
    m = LogManager(d, background=False)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    for i in range(5):
        log.append(build_batch([(None, b"r%d" % i, i)]))
    seg = log.active_segment.log_path
    m.abandon()                                   # a crash: no clean shutdown, nothing trimmed
    with open(seg, "ab") as f:                    # an append cut short by the crash
        f.write(build_batch([(None, b"torn", 9)])[:40])
    before = _snapshot(d)
    with kafkalog.open(d, read_only=True) as dl:
        assert [r.value for r in dl.consume("t")] == [b"r%d" % i for i in range(5)]
        assert dl.end_offsets("t") == {0: 5}
    assert _snapshot(d) == before


def test_read_only_raises_on_corruption_in_an_older_segment(tmp_path):
    d = str(tmp_path / "d")
    _fill(d, n=600, segment_bytes=4_000)
    pdir = os.path.join(d, "t-0")
    first = sorted(n for n in os.listdir(pdir) if n.endswith(".log"))[0]
    with open(os.path.join(pdir, first), "r+b") as f:
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0xFF]))
    with kafkalog.open(d, read_only=True) as dl:
        with pytest.raises(CorruptRecordError) as e:
            list(dl.consume("t", 0))
        assert e.value.file and e.value.file.endswith(first)


def _txn_log(log):
    log.append(build_batch([(None, b"plain", 1)]))
    log.append(build_batch([(None, b"aborted", 2)], producer_id=7, producer_epoch=0,
                           base_sequence=0, is_transactional=True))
    log.append(build_batch([(None, b"committed", 3)], producer_id=8, producer_epoch=0,
                           base_sequence=0, is_transactional=True))
    log.append_as_follower(build_end_txn_marker(ControlRecordType.ABORT, producer_id=7,
                                                producer_epoch=0, coordinator_epoch=0,
                                                timestamp=4, base_offset=log.log_end_offset))
    log.append_as_follower(build_end_txn_marker(ControlRecordType.COMMIT, producer_id=8,
                                                producer_epoch=0, coordinator_epoch=0,
                                                timestamp=5, base_offset=log.log_end_offset))
    log.append(build_batch([(None, b"after", 6)]))
    # a transaction still open: read_committed stops at its first offset (the LSO)
    log.append(build_batch([(None, b"open", 7)], producer_id=9, producer_epoch=0,
                           base_sequence=0, is_transactional=True))
    log.append(build_batch([(None, b"beyond-lso", 8)]))


def test_read_committed_read_only(tmp_path):
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        _txn_log(dl.manager.get_log("t", 0))
    before = _snapshot(d)
    with kafkalog.open(d, read_only=True) as dl:
        assert [r.value for r in dl.consume("t")] == [b"plain", b"aborted", b"committed", b"after",
                                                    b"open", b"beyond-lso"]
        assert [r.value for r in dl.consume("t", isolation="read_committed")] == \
            [b"plain", b"committed", b"after"]
        assert [r.value for r in dl.consume("t", offset=2, isolation="read_committed")] == \
            [b"committed", b"after"]
        assert dl.end_offsets("t", "read_committed") == {0: 6}
        assert dl.end_offsets("t") == {0: 8}
    res = CliRunner().invoke(main, ["consume", d, "t", "--isolation-level", "read_committed"])
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["value"] for x in res.output.splitlines()] == ["plain", "committed", "after"]
    assert _snapshot(d) == before
