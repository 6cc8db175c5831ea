"""Loader: offset-overflow split (spec §4.12), swap completion (§4.11), ``.deleted`` renames of
segments deleted by recovery (§4.8), and ``Log.replace_segments``."""

from __future__ import annotations

import os
import struct

from kafkalog.log.config import LogConfig
from kafkalog.log.index.txn_index import AbortedTxn
from kafkalog.log.log import Log
from kafkalog.log.segment import LogSegment
from kafkalog.record.builder import build_batch

from .conftest import legacy_batch

NOW = 1_700_000_000_000
OVER = 2**31 + 5


def cfg(**kw):
    base = {"index.interval.bytes": 1, "file.delete.delay.ms": 0}
    base.update(kw)
    return LogConfig(base)


def test_overflowed_legacy_segment_is_split_at_load(seg_dir):
    offsets = [0, 1, OVER, OVER + 1, OVER + 2]
    raw = bytearray()
    for i, off in enumerate(offsets):
        m = legacy_batch([b"m%d" % i])
        struct.pack_into(">q", m, 0, off)
        raw += m
    (seg_dir / ("%020d.log" % 0)).write_bytes(bytes(raw))
    log = Log.open(seg_dir, cfg(), had_clean_shutdown=False)
    assert [s.base_offset for s in log.segments] == [0, OVER]
    assert [r.offset for r in log.records()] == offsets
    assert log.log_end_offset == OVER + 3
    assert log.recovery_report.split_segments and not log.recovery_report.truncations
    names = sorted(os.listdir(seg_dir))
    assert not [n for n in names if n.endswith((".swap", ".cleaned", ".deleted"))]
    assert "%020d.log" % OVER in names and "%020d.index" % OVER in names
    assert sum(s.size for s in log.segments) == len(raw)       # split appends never change bytes
    log.close()


def _two_segment_log(d):
    log = Log.open(d, cfg(**{"segment.bytes": 120}))
    for i in range(3):
        log.append(build_batch([(b"k", b"v%d" % i, NOW)]))
    return log


def test_empty_swap_segment_replaces_old_txnindex(seg_dir):
    log = _two_segment_log(seg_dir)
    first = log.segments[0]
    first.txn_index.append(AbortedTxn(1, 0, 0, 1))
    base = first.base_offset
    log.close()
    new = LogSegment(str(seg_dir), base, file_suffix=".swap")   # a cleaned segment left empty
    new.close()
    log = Log.open(seg_dir, cfg(**{"segment.bytes": 120}), had_clean_shutdown=True)
    names = os.listdir(seg_dir)
    assert "%020d.txnindex" % base not in names and not [n for n in names if n.endswith(".swap")]
    assert log.segments[0].size == 0
    log.close()


def test_replace_segments_protocol_and_abort(seg_dir):
    log = _two_segment_log(seg_dir)
    old = [log.segments[0]]
    steps = []
    new = LogSegment.open(str(seg_dir), old[0].base_offset, log.config, file_suffix=".cleaned")
    data = log.read(old[0].base_offset, 1 << 20).read()
    new.append(0, NOW, 0, data)
    new.flush()
    assert log.replace_segments([new], old, step_hook=steps.append)
    assert steps == ["swap-renamed", "deleted-partial", "old-deleted", "unswap-partial", "swapped"]
    assert log.segments[0] is new and not new.has_suffix(".swap")
    assert not [n for n in os.listdir(seg_dir) if n.endswith((".swap", ".cleaned", ".deleted"))]
    stale = LogSegment.open(str(seg_dir), 0, log.config, file_suffix=".cleaned")
    assert not log.replace_segments([stale], old, abort_if_missing=True)   # old already gone
    assert not [n for n in os.listdir(seg_dir) if n.endswith(".cleaned")]
    assert [r.value for r in log.records()] == [b"v0", b"v1", b"v2"]
    log.close()


def test_segments_deleted_by_recovery_go_through_deleted_rename(seg_dir):
    log = _two_segment_log(seg_dir)
    log.flush()
    first = log.segments[0].log_path
    log.close()
    with open(first, "r+b") as f:                 # corrupt the first segment's only batch
        f.seek(30)
        f.write(b"\xff\xff")
    pending = []
    log = Log.open(seg_dir, cfg(**{"segment.bytes": 120, "file.delete.delay.ms": 1000}),
                   recovery_point=0, scheduler=lambda delay, fn: pending.append((delay, fn)))
    assert log.log_end_offset == 0 and log.recovery_report.deleted_segments
    deleted = [n for n in os.listdir(seg_dir) if n.endswith(".log.deleted")]
    assert deleted and pending and pending[0][0] == 1.0
    for _, fn in pending:
        fn()
    assert not [n for n in os.listdir(seg_dir) if n.endswith(".deleted")]
    log.close()
