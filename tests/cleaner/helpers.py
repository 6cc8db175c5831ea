"""Shared helpers of the cleaner tests: real logs on disk, a reader, and the reference model."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from kafkalog.cleaner import Cleaner, SkimpyOffsetMap
from kafkalog.cleaner.manager import cleanable_offsets, log_to_clean, tp_of_log
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.record.builder import build_batch, build_end_txn_marker
from kafkalog.record.constants import ControlRecordType
from kafkalog.record.records import iter_batches

NOW = 1_700_000_000_000


def open_log(path: str, **overrides) -> Log:
    cfg = {"cleanup.policy": "compact", "segment.bytes": 1 << 20, "file.delete.delay.ms": 0}
    cfg.update(overrides)
    return Log.open(path, LogConfig(cfg), clock=lambda: NOW)


def append(log: Log, records: Iterable[Tuple], **kw) -> None:
    """Append one batch of ``(key, value)`` / ``(key, value, ts)`` records."""
    recs = [r if len(r) == 3 else (r[0], r[1], NOW) for r in records]
    log.append(build_batch(recs, **kw))


def append_marker(log: Log, pid: int, epoch: int, commit: bool) -> None:
    data = build_end_txn_marker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                producer_id=pid, producer_epoch=epoch, timestamp=NOW)
    log.append(data, assign_offsets=False) if False else _append_follower(log, data)


def _append_follower(log: Log, data: bytes) -> None:
    buf = bytearray(data)
    import struct
    struct.pack_into(">q", buf, 0, log.log_end_offset)
    log.append(bytes(buf), assign_offsets=False)


def batches(log: Log) -> List:
    out = []
    for seg in log.segments:
        data = seg.log.pread(0, seg.size)
        out.extend(iter_batches(data))
    return out


def records(log: Log) -> List:
    """Every record (data and control) in offset order, with the batch it came from."""
    out = []
    for b in batches(log):
        b.ensure_valid()
        for r in b.records():
            out.append((b, r))
    return out


def data_records(log: Log) -> List:
    return [r for b, r in records(log) if not (b.magic >= 2 and b.is_control)]


def clean(log: Log, *, map_memory: int = 1 << 20, now: int = NOW, upper: Optional[int] = None,
          first_dirty: Optional[int] = None, load_factor: float = 0.9):
    """One cleaning round on ``log`` (everything below the active segment); returns
    ``(end_offset, stats)``."""
    c = Cleaner(SkimpyOffsetMap(map_memory, load_factor), io_buffer_size=4096, clock=lambda: now)
    fd, unc, _ = cleanable_offsets(log, first_dirty, now)
    if upper is not None:
        unc = upper
    ltc = log_to_clean(tp_of_log(log), log, fd if first_dirty is None else first_dirty, unc)
    return c.do_clean(ltc, now)


def latest_per_key(recs: Iterable) -> Dict[bytes, Optional[bytes]]:
    out: Dict[bytes, Optional[bytes]] = {}
    for r in recs:
        if r.key is not None:
            out[r.key] = r.value
    return out
