"""What recovering a partition directory would cut, found without changing anything
(``kafkalog recover --dry-run``, and what ``recover`` keeps aside before it cuts).

The loader's rules (:mod:`kafkalog.log.loader`), read-only: every segment from the one holding the
recovery point is scanned as :meth:`LogSegment.recover` scans it (the same walk,
:func:`kafkalog.log.segment.scan_for_recovery`); the first segment recovery would truncate, or, in
a log that is never compacted, the first whose offsets do not run on into the next segment, ends
the log: its tail and every later segment are cut. Below the recovery point only a segment whose
offset index is missing or fails the loader's check is scanned. A log end below the log start
offset cuts everything. ``tests/cli/test_recover.py`` checks the plan against what recovery then
does.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from kafkalog.log.naming import INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX
from kafkalog.log.segment import SegmentRecovery, scan_for_recovery
from kafkalog.record.header_walk import F_LAST_OFFSET, F_POSITION, F_SIZE, walk

__all__ = ["Cut", "PartitionPlan", "plan_partition", "complete_end_offset", "end_offset_before"]


@dataclass
class Cut:
    """Bytes recovery removes from one segment ``.log``: from ``position`` to its end
    (``size`` bytes before). ``kind``: ``partial-tail``, ``zero-filled-tail``, ``corruption`` (a
    truncation) or ``deleted`` (a whole later segment, position 0)."""

    file: str
    position: int
    size: int
    kind: str
    reason: str

    @property
    def bytes(self) -> int:
        return self.size - self.position

    def to_json(self) -> Dict[str, Any]:
        return {"file": self.file, "position": self.position, "bytes": self.bytes,
                "kind": self.kind, "reason": self.reason}


@dataclass
class PartitionPlan:
    """What recovering one partition directory would do to its data."""

    dir: str
    #: the offset after the last complete batch of the log as it is (torn batches do not count)
    log_end_offset_before: int
    log_end_offset: int
    cuts: List[Cut] = field(default_factory=list)

    @property
    def dropped_offsets(self) -> int:
        """Offsets of complete batches recovery removes (0 after a torn or zero-filled tail)."""
        return max(0, self.log_end_offset_before - self.log_end_offset)

    @property
    def cut_bytes(self) -> int:
        return sum(c.bytes for c in self.cuts)

    def to_json(self) -> Dict[str, Any]:
        return {"dir": self.dir, "logEndOffsetBefore": self.log_end_offset_before,
                "logEndOffset": self.log_end_offset, "droppedOffsets": self.dropped_offsets,
                "cutBytes": self.cut_bytes, "cuts": [c.to_json() for c in self.cuts]}


def _segments(dir_path: str) -> List[int]:
    bases = []
    for name in os.listdir(dir_path):
        prefix, _, rest = name.partition(".")
        if rest == LOG_FILE_SUFFIX[1:] and prefix.isdigit() and prefix.isascii():
            bases.append(int(prefix))
    return sorted(bases)


def _log_path(dir_path: str, base: int) -> str:
    return os.path.join(dir_path, f"{base:020d}{LOG_FILE_SUFFIX}")


def complete_end_offset(path: str, base: int) -> int:
    """The offset after the last complete batch of a segment ``.log`` (headers walked without
    checking CRCs, to the first entry that is not a whole batch)."""
    nxt = base
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            return nxt
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            start = 0
            while start < size:
                w = walk(mm, start, size, verify_crc=False, max_batches=1 << 16)
                if not w.count:
                    break
                last = w.batch(w.count - 1)
                nxt = max(nxt, last[F_LAST_OFFSET] + 1)
                start = last[F_POSITION] + last[F_SIZE]
                if w.finding is not None:
                    break
    return nxt


def end_offset_before(dir_path: str, log_start_offset: int = 0) -> int:
    """A partition directory's log end offset as it is (:attr:`PartitionPlan.log_end_offset_before`):
    the last segment's headers walked, no CRC checked (``kafkalog recover --discard``, which keeps
    nothing aside, needs no more of the plan; the recovery checks every CRC once)."""
    bases = _segments(dir_path)
    if not bases:
        return log_start_offset
    return complete_end_offset(_log_path(dir_path, bases[-1]), bases[-1])


def _index_needs_recovery(dir_path: str, base: int, size: int) -> bool:
    """The loader's check of a segment it does not recover: missing or implausible indexes."""
    from kafkalog.log.loader import index_tails
    index = os.path.join(dir_path, f"{base:020d}{INDEX_FILE_SUFFIX}")
    if not os.path.exists(index):
        return True
    problem, _tails = index_tails(size, index, os.path.join(dir_path, f"{base:020d}{TIME_INDEX_FILE_SUFFIX}"))
    return problem is not None


def _floor(bases: List[int], recovery_point: int) -> int:
    below = [b for b in bases if b <= recovery_point]
    return max(below) if below else (bases[0] if bases else 0)


def plan_partition(dir_path: str, *, compacted: bool, recovery_point: int = 0,
                   log_start_offset: int = 0) -> PartitionPlan:
    """The cuts recovering ``dir_path`` from ``recovery_point`` would make (0: every segment, as
    ``kafkalog recover``; a checkpointed recovery point: Kafka's recovery after a crash)."""
    bases = _segments(dir_path)
    if not bases:
        return PartitionPlan(dir_path, log_start_offset, log_start_offset)
    before = complete_end_offset(_log_path(dir_path, bases[-1]), bases[-1])
    floor = _floor(bases, recovery_point)
    contiguous = not compacted
    cut_at: Optional[int] = None          # index of the segment that ends the log
    found: Optional[SegmentRecovery] = None
    end = bases[-1]
    for i, base in enumerate(bases):
        path = _log_path(dir_path, base)
        size = os.path.getsize(path)
        if base < floor and not _index_needs_recovery(dir_path, base, size):
            continue
        found = scan_for_recovery(path, base, contiguous)
        end = found.next_offset if found.next_offset is not None else base
        gap = (base >= floor and contiguous and i + 1 < len(bases) and found.valid_bytes > 0
               and not found.truncated_bytes and end != bases[i + 1])
        if found.truncated_bytes or gap:
            cut_at = i
            break
    plan = PartitionPlan(dir_path, before, before)
    if cut_at is None:
        return _below_start(plan, bases, dir_path, log_start_offset)
    assert found is not None
    if found.truncated_bytes:
        plan.cuts.append(Cut(found.file, found.valid_bytes, found.valid_bytes + found.truncated_bytes,
                             found.kind, found.reason or ""))
    for later in bases[cut_at + 1:]:
        path = _log_path(dir_path, later)
        plan.cuts.append(Cut(path, 0, os.path.getsize(path), "deleted",
                             f"follows the segment recovery cuts ({os.path.basename(found.file)})"))
    plan.log_end_offset = end
    return _below_start(plan, bases[:cut_at + 1], dir_path, log_start_offset)


def _below_start(plan: PartitionPlan, kept: List[int], dir_path: str,
                 log_start_offset: int) -> PartitionPlan:
    """A log end below the log start offset deletes every segment (the loader's rule)."""
    if plan.log_end_offset >= log_start_offset:
        return plan
    done = {c.file for c in plan.cuts}
    for base in kept:
        path = _log_path(dir_path, base)
        if path not in done:
            plan.cuts.append(Cut(path, 0, os.path.getsize(path), "deleted",
                                 f"log end offset {plan.log_end_offset} is below the log start "
                                 f"offset {log_start_offset}"))
    plan.log_end_offset = log_start_offset
    return plan
