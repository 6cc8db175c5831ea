"""Read-only checks of segment files, shared by ``kafkalog verify`` and ``kafkalog dump``.

Everything here opens files read-only and never allocates more than the file justifies. Results are
:class:`Finding` objects (``level`` = ``error`` | ``warning`` | ``info``) with the file, the byte
position and Kafka's words for what is wrong.
"""

from __future__ import annotations

import bisect
import mmap
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from kafkalog.log.index import offset_index, time_index, txn_index
from kafkalog.record.constants import INT32_MAX
from kafkalog.record.header_walk import (
    F_BASE_OFFSET,
    F_LAST_OFFSET,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    F_POSITION,
    F_RECORD_COUNT,
    F_SIZE,
    FindingKind,
    all_zero,
    walk,
)
from kafkalog.record.header_walk import Finding as WalkFinding


@dataclass
class Finding:
    """One problem (or note) found in a file."""

    level: str                 # error | warning | info
    check: str                 # e.g. crc, size, offsets, index-entry, zero-filled-tail
    file: str
    position: Optional[int]
    message: str
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        d = {"level": self.level, "check": self.check, "file": self.file, "position": self.position,
             "message": self.message}
        d.update(self.extra)
        return d


#: findings kept per file (a random 8 MB index has two million); the rest are only counted
MAX_FINDINGS_PER_FILE = 100


class FindingList(List[Finding]):
    """The findings of one file: the first ``cap`` kept (None: all), the others counted by level
    in :attr:`more` (so memory stays bounded whatever the file holds)."""

    def __init__(self, cap: Optional[int] = MAX_FINDINGS_PER_FILE) -> None:
        super().__init__()
        self.cap = cap
        self.more: Dict[str, int] = {}

    def append(self, f: Finding) -> None:
        if self.cap is None or len(self) < self.cap:
            super().append(f)
        else:
            self.more[f.level] = self.more.get(f.level, 0) + 1

    def counted(self, level: str) -> bool:
        """True when the list is full, the finding of ``level`` then counted: the caller builds
        one only when it is kept (a random index has millions of bad entries, each message
        formatted for nothing before)."""
        if self.cap is None or len(self) < self.cap:
            return False
        self.more[level] = self.more.get(level, 0) + 1
        return True

    @property
    def more_count(self) -> int:
        return sum(self.more.values())


@dataclass
class BatchInfo:
    """Shallow facts about one entry of a ``.log``."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    magic: int
    max_timestamp: int


@dataclass
class LogScan:
    """The result of :func:`scan_log`."""

    file: str
    size: int
    base_offset: int
    batches: List[BatchInfo] = field(default_factory=list)
    findings: FindingList = field(default_factory=FindingList)
    valid_bytes: int = 0

    @property
    def by_position(self) -> Dict[int, BatchInfo]:
        return {b.position: b for b in self.batches}

    @property
    def next_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else self.base_offset


def base_offset_of(path: str) -> int:
    """The ``%020d`` prefix of a segment file name (0 when it has none)."""
    stem = os.path.basename(path).split(".")[0]
    return int(stem) if stem.isdigit() and stem.isascii() else 0


def _read_all(path: str) -> bytes:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # type: ignore[return-value]


def scan_log(path: str, *, deep: bool = False,
             max_findings: Optional[int] = MAX_FINDINGS_PER_FILE) -> LogScan:
    """Walk every entry of a ``.log`` file (the header walker: sizes, magic, CRC-32C for v2, CRC-32
    for v0/v1), then per batch: record count, offsets increasing and inside the segment's int32
    range; the tail (partial entry or zero fill) is reported. ``deep`` also decodes every record of
    every batch."""
    base = base_offset_of(path)
    buf = _read_all(path)
    n = len(buf)
    scan = LogScan(path, n, base, findings=FindingList(max_findings))
    pos = 0
    try:
        w = walk(buf, 0, n)
        stopped = False
        prev_last = base - 1
        for row in w.rows():
            pos = row[F_POSITION]
            if not _check_batch(scan, buf, row, prev_last, deep):
                stopped = True
                break
            prev_last = max(prev_last, row[F_LAST_OFFSET])
            pos += row[F_SIZE]
        if not stopped and w.finding is not None:
            scan.findings.append(_tail_finding(path, buf, w.finding))
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    scan.valid_bytes = pos
    return scan


def _check_batch(scan: LogScan, buf, row: tuple, prev_last: int, deep: bool) -> bool:
    """Per-batch checks of :func:`scan_log` on one walked batch; False when the walk must stop."""
    path, base, add = scan.file, scan.base_offset, scan.findings.append
    pos, size, offset, last, magic = (row[F_POSITION], row[F_SIZE], row[F_BASE_OFFSET],
                                      row[F_LAST_OFFSET], row[F_MAGIC])
    key = "baseOffset" if magic == 2 else "offset"
    if magic == 2:
        count, lod = row[F_RECORD_COUNT], last - offset
        if count < 0 or lod < 0 or count > lod + 1:
            add(Finding("error", "record-count", path, pos, f"record count {count} does not fit "
                        f"lastOffsetDelta {lod}", {"baseOffset": offset}))
            return False
    if deep:
        err = _deep_check(buf, pos, size)
        if err is not None:
            add(Finding("error", "records", path, pos, err, {key: offset}))
            return False
    if offset < base and magic == 2:
        add(Finding("error", "offsets", path, pos, f"base offset {offset} is below the segment's "
                    f"base offset {base}"))
    if last <= prev_last:
        add(Finding("error", "offsets", path, pos, f"offsets not increasing: {last} after "
                    f"{prev_last}", {"lastOffset": last, "previousLastOffset": prev_last}))
    elif magic == 2 and offset <= prev_last:
        # a v2 batch starts after the previous one ends (gaps are legal: compaction)
        add(Finding("error", "offsets", path, pos, f"batch {offset}..{last} overlaps the "
                    f"previous batch, which ends at {prev_last}",
                    {"baseOffset": offset, "previousLastOffset": prev_last}))
    if last - base > INT32_MAX:
        add(Finding("error", "offsets", path, pos, f"offset {last} cannot be stored relative to "
                    f"the base offset {base} (int32 overflow)"))
    scan.batches.append(BatchInfo(pos, size, offset, last, magic, row[F_MAX_TIMESTAMP]))
    return True


def _tail_finding(path: str, buf, f: WalkFinding) -> Finding:
    """The verify/dump finding of where the walk stopped."""
    n, pos, k = len(buf), f.position, f.kind
    if k is FindingKind.SHORT_TAIL:
        kind = "zero-filled-tail" if all_zero(buf, pos, n) else "partial-tail"
        return Finding("error", kind, path, pos, f"{n - pos} trailing bytes do not hold a complete "
                       f"entry header", {"bytes": n - pos})
    if k is FindingKind.BAD_SIZE and f.a == 0 and all_zero(buf, pos, n):
        return Finding("error", "zero-filled-tail", path, pos, f"{n - pos} zero bytes after the last "
                       f"entry", {"bytes": n - pos})
    if k is FindingKind.PARTIAL_TAIL:
        return Finding("error", "partial-tail", path, pos, f"entry of {f.a} bytes is truncated: only "
                       f"{n - pos} bytes remain", {"bytes": n - pos})
    if k is FindingKind.CRC_MISMATCH:
        key = "baseOffset" if buf[pos + 16] == 2 else "offset"
        return Finding("error", "crc", path, pos, f.message, {key: f.c})
    check = "magic" if k is FindingKind.BAD_MAGIC else "size"
    return Finding("error", check, path, pos, f.message)


def _deep_check(buf, pos: int, size: int) -> Optional[str]:
    from kafkalog.errors import KafkalogError
    from kafkalog.record.records import iter_batches
    try:
        data = bytes(buf[pos:pos + size])
        for b in iter_batches(data, strict=True):
            for _ in b:
                pass
    except KafkalogError as e:
        return e.message
    return None


# --- indexes ---------------------------------------------------------------------------------------

@dataclass
class IndexCheck:
    """The entries of an index file and what is wrong with them."""

    file: str
    entries: List[Tuple[int, int]] = field(default_factory=list)     # (offset, position) or (ts, offset)
    findings: FindingList = field(default_factory=FindingList)
    mismatches: List[Tuple[int, int]] = field(default_factory=list)  # (index value, log value)
    out_of_order: List[Tuple[int, int]] = field(default_factory=list)
    not_found: List[Tuple[int, int]] = field(default_factory=list)
    zero_tail_at: Optional[int] = None


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _check_index_size(res: IndexCheck, path: str, data: bytes, entry_size: int, what: str) -> None:
    """A finding (Kafka's message) when an index file is not a whole number of entries."""
    if len(data) % entry_size:
        res.findings.append(Finding("error", "index-size", path, len(data) - len(data) % entry_size,
                                    f"{what} {os.path.basename(path)} is corrupt, found {len(data)} bytes "
                                    f"which is neither positive nor a multiple of {entry_size}."))


def check_offset_index(path: str, scan: Optional[LogScan],
                       max_findings: Optional[int] = MAX_FINDINGS_PER_FILE) -> IndexCheck:
    """Entries of a ``.index`` (absolute offset, position) checked against the ``.log`` scan: length
    a multiple of 8, increasing offsets and positions, a zero-filled tail, and (Kafka's
    DumpLogSegments check) the entry offset equals the last offset of a batch that starts at or
    after the entry's position, the batch at the position holding no later offset."""
    base = base_offset_of(path)
    data = _read_bytes(path)
    res = IndexCheck(path, findings=FindingList(max_findings))
    _check_index_size(res, path, data, 8, "Index file")
    prev_rel, prev_pos = -1, -1
    by_pos = scan.by_position if scan is not None else {}
    # a batch's last offset -> its position (offsets increase through the scanned log: a look-up
    # per entry, not a walk over every batch, whatever a damaged index holds)
    position_of_last = {b.last_offset: b.position for b in scan.batches} if scan is not None else {}
    for i in range(len(data) // 8):
        rel, position = offset_index.ENTRY.unpack_from(data, i * 8)
        if rel == 0 and position == 0 and not any(data[i * 8:]):
            # Kafka never writes an all-zero entry (the first append to a segment is never
            # indexed): zeros from here to the end, slot 0 included, are preallocation
            res.zero_tail_at = i * 8
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "zero-filled-tail", path, i * 8,
                                            f"{len(data) // 8 - i} zero-filled entries at the end of the "
                                            f"index (a preallocated index after a crash)"))
            break
        if rel == 0 and i > 0:
            res.zero_tail_at = i * 8
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-entry", path, i * 8,
                                            f"entry {i} has relative offset 0"))
            break
        off = base + rel
        res.entries.append((off, position))
        if (rel < 0 or rel <= prev_rel and i > 0) and not res.findings.counted("error"):
            res.findings.append(Finding("error", "index-order", path, i * 8,
                                        f"offset {off} is not larger than the previous entry's "
                                        f"{base + prev_rel}"))
        if (position < prev_pos or position < 0) and not res.findings.counted("error"):
            res.findings.append(Finding("error", "index-order", path, i * 8,
                                        f"position {position} is before the previous entry's {prev_pos}"))
        prev_rel, prev_pos = rel, position
        if scan is None:
            continue
        if scan.valid_bytes <= position < scan.size:
            if not res.findings.counted("error"):
                res.findings.append(_past_tail(path, i * 8, off, scan))
            continue
        if position >= scan.size and not (position == 0 and scan.size == 0):
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-entry", path, i * 8,
                                            f"position {position} is beyond the end of the log "
                                            f"({scan.size} bytes)"))
            res.mismatches.append((off, -1))
            continue
        b = by_pos.get(position)
        if b is None:
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-entry", path, i * 8,
                                            f"position {position} of offset {off} is not the start of a batch"))
            res.mismatches.append((off, -1))
            continue
        if b.last_offset != off:
            # a multi-batch append indexes the chunk's last offset at the chunk's first position;
            # Kafka before 0.11 indexed an append by its first offset: a compressed v0/v1 wrapper's
            # first inner offset (Kafka 4.4 loads such entries; its DumpLogSegments lists them)
            ok = (b.last_offset < off and position_of_last.get(off, -1) >= position
                  or b.magic < 2 and off < b.last_offset
                  and _legacy_first_offset(scan.file, position, b.size) <= off)
            res.mismatches.append((off, b.last_offset))
            if not ok and not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-entry", path, i * 8,
                                            f"Index offset: {off}, log offset: {b.last_offset}",
                                            {"indexOffset": off, "logOffset": b.last_offset}))
    return res


def _past_tail(path: str, position: int, offset: int, scan: LogScan) -> Finding:
    """An index entry of a batch in the ``.log``'s tail that is not a whole batch (an append a crash
    cut): recovery truncates the log to its valid bytes and the index with it."""
    return Finding("error", "index-past-tail", path, position,
                   f"entry of offset {offset} indexes the log's tail past its last whole batch "
                   f"(valid bytes end at {scan.valid_bytes} of {scan.size})", {"indexOffset": offset})


def _legacy_first_offset(log_path: str, position: int, size: int) -> int:
    """The first inner offset of the v0/v1 entry of ``size`` bytes at ``position`` of ``log_path``
    (its own offset when uncompressed; past every offset when the wrapper does not decode: no
    entry of it is then accepted, and the deep scan reports the wrapper)."""
    from kafkalog.errors import KafkalogError
    from kafkalog.record.legacy import LegacyRecordBatch
    with open(log_path, "rb") as f:
        f.seek(position)
        data = f.read(size)
    try:
        b = LegacyRecordBatch(data, 0, len(data), data[16])
        return b.base_offset
    except (KafkalogError, IndexError):
        return 1 << 63


def check_time_index(path: str, scan: Optional[LogScan],
                     max_findings: Optional[int] = MAX_FINDINGS_PER_FILE) -> IndexCheck:
    """Entries of a ``.timeindex`` (timestamp, absolute offset) checked like Kafka's
    DumpLogSegments: the batch whose last offset is the entry offset must have the entry's
    timestamp as max timestamp; timestamps increase; a zero-filled tail."""
    base = base_offset_of(path)
    data = _read_bytes(path)
    res = IndexCheck(path, findings=FindingList(max_findings))
    _check_index_size(res, path, data, 12, "Time index file")
    by_last = {b.last_offset: b for b in scan.batches} if scan is not None else {}
    lasts = [b.last_offset for b in scan.batches] if scan is not None else []
    lasts_ordered = all(x < y for x, y in zip(lasts, lasts[1:]))
    prev_ts = None
    for i in range(len(data) // 12):
        ts, rel = time_index.ENTRY.unpack_from(data, i * 12)
        if rel == 0 and (i > 0 and ts == 0 or not any(data[i * 12:])):
            res.zero_tail_at = i * 12
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "zero-filled-tail", path, i * 12,
                                            f"{len(data) // 12 - i} zero-filled entries at the end of the "
                                            f"time index (KAFKA-10207)"))
            break
        off = base + rel
        res.entries.append((ts, off))
        if rel < 0 and not res.findings.counted("error"):
            res.findings.append(Finding("error", "index-entry", path, i * 12,
                                        f"negative relative offset {rel}"))
        if prev_ts is not None and prev_ts >= ts:
            res.out_of_order.append((ts, prev_ts))
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-order", path, i * 12,
                                            f"Index timestamp: {ts}, Previously indexed timestamp: {prev_ts}",
                                            {"indexTimestamp": ts, "previousTimestamp": prev_ts}))
        prev_ts = ts
        if scan is None:
            continue
        b = by_last.get(off)
        if b is None and scan.valid_bytes < scan.size and off >= scan.next_offset:
            if not res.findings.counted("error"):
                res.findings.append(_past_tail(path, i * 12, off, scan))
            continue
        if b is None:
            if lasts_ordered:                   # a look-up, not a walk over every batch
                k = bisect.bisect_left(lasts, off)
                found = lasts[k] if k < len(lasts) else -1
            else:
                found = next((x.last_offset for x in scan.batches if x.last_offset >= off), -1)
            res.not_found.append((off, found))
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-entry", path, i * 12,
                                            f"Indexed offset: {off}, found log offset: {found}",
                                            {"indexOffset": off, "logOffset": found}))
            continue
        if b.max_timestamp != ts:
            res.mismatches.append((ts, b.max_timestamp))
            if not res.findings.counted("error"):
                res.findings.append(Finding("error", "index-entry", path, i * 12,
                                            f"Index timestamp: {ts}, log timestamp: {b.max_timestamp}",
                                            {"indexTimestamp": ts, "logTimestamp": b.max_timestamp}))
    return res


def read_txn_index(path: str, max_findings: Optional[int] = MAX_FINDINGS_PER_FILE
                   ) -> Tuple[List[dict], FindingList]:
    """Entries of a ``.txnindex`` (34 bytes each) and findings (size, version, offsets)."""
    base = base_offset_of(path)
    data = _read_bytes(path)
    out: List[dict] = []
    findings = FindingList(max_findings)
    if len(data) % 34:
        findings.append(Finding("error", "index-size", path, len(data) - len(data) % 34,
                                f"{len(data) % 34} trailing bytes do not form a 34-byte entry"))
    for i in range(len(data) // 34):
        version, pid, first, last, lso = txn_index.ENTRY.unpack_from(data, i * 34)
        out.append({"version": version, "producerId": pid, "firstOffset": first, "lastOffset": last,
                    "lastStableOffset": lso})
        if version != 0:
            findings.append(Finding("error", "txn-entry", path, i * 34,
                                    f"Unexpected aborted transaction version {version}"))
        elif last < base or first > last:
            findings.append(Finding("error", "txn-entry", path, i * 34,
                                    f"Last offset of aborted transaction {last} is less than start "
                                    f"offset {base}" if last < base else
                                    f"first offset {first} is after last offset {last}"))
    return out, findings
