"""Appending staged v2 batches to a partition directory at commit time.

The batches of a staging file already are final Kafka bytes with base offset 0; appending assigns
offsets by rewriting each batch's base offset (not covered by the CRC), never re-encoding records.

HOOK: this is a minimal stand-in for the log layer's batch-level append
(``kafkalog.log.log.Log``), which was not available when the Spark sink was written. It writes
the ``.log`` bytes, sparse ``.index`` / ``.timeindex`` entries every ``index.interval.bytes``
(4096) bytes, rolls at ``segment.bytes`` and fsyncs; it keeps no producer state and no
checkpoints. :func:`truncate_partition` undoes an append (used when a multi-partition commit
fails half-way).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from kafkalog.spark.batch_encoding import rebase_batch
from kafkalog.spark.log_files import (
    PartitionDir, iter_headers, partition_bounds, segment_bases, segment_path,
)

INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_BYTES = 1 << 30


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed: offsets ``[first_offset, next_offset)`` and the sizes before it,
    so it can be undone."""
    first_offset: int
    next_offset: int
    files_before: Tuple[Tuple[str, int], ...]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_partition_dir(data_dir: str, topic: str, partition: int) -> PartitionDir:
    path = os.path.join(data_dir, f"{topic}-{partition}")
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
        _fsync_dir(data_dir)
    return PartitionDir(topic, partition, path)


def _snapshot(paths: Sequence[str]) -> Tuple[Tuple[str, int], ...]:
    return tuple((p, os.path.getsize(p) if os.path.exists(p) else -1) for p in paths)


def append_staged(pdir: PartitionDir, staged_files: Sequence[str],
                  segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> AppendResult:
    """Append the batches of ``staged_files`` (in order) to ``pdir``."""
    bounds = partition_bounds(pdir)
    next_offset = bounds.log_end_offset
    bases = segment_bases(pdir.path)
    base = bases[-1] if bases else next_offset
    touched: List[str] = []
    seg_path = segment_path(pdir.path, base)
    before: Dict[str, int] = {}

    def remember(*paths: str) -> None:
        for p in paths:
            if p not in before:
                before[p] = os.path.getsize(p) if os.path.exists(p) else -1

    first = next_offset
    seg_size = os.path.getsize(seg_path) if os.path.exists(seg_path) else 0
    since_index = 0
    max_ts = -1
    for staged in staged_files:
        with open(staged, "rb") as f:
            buf = bytearray(f.read())
        pos = 0
        index_entries: List[Tuple[str, bytes, bytes]] = []
        chunks: List[Tuple[str, int, int]] = []  # (segment path, start, end) in buf
        chunk_start = 0
        for h in iter_headers(buf, 0, file=staged):
            if seg_size and seg_size + h.size > segment_bytes:
                chunks.append((seg_path, chunk_start, h.position))
                chunk_start = h.position
                base = next_offset
                seg_path = segment_path(pdir.path, base)
                seg_size = 0
                since_index = 0
                max_ts = -1
            last = rebase_batch(buf, h.position, next_offset)
            if since_index > INDEX_INTERVAL_BYTES:
                rel = last - base
                index_entries.append((seg_path, struct.pack(">ii", rel, seg_size), b""))
                since_index = 0
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
                index_entries.append((seg_path, b"", struct.pack(">qi", max_ts, last - base)))
            since_index += h.size
            seg_size += h.size
            next_offset = last + 1
            pos = h.position + h.size
        chunks.append((seg_path, chunk_start, pos))
        for path, start, end in chunks:
            remember(path, path[:-4] + ".index", path[:-4] + ".timeindex")
            with open(path, "ab") as out:
                out.write(memoryview(buf)[start:end])
                out.flush()
                os.fsync(out.fileno())
            touched.append(path)
        by_file: Dict[str, Tuple[bytearray, bytearray]] = {}
        for path, ientry, tentry in index_entries:
            pair = by_file.setdefault(path, (bytearray(), bytearray()))
            pair[0].extend(ientry)
            pair[1].extend(tentry)
        for path, (ientries, tentries) in by_file.items():
            remember(path[:-4] + ".index", path[:-4] + ".timeindex")
            for suffix, data in ((".index", ientries), (".timeindex", tentries)):
                if data:
                    with open(path[:-4] + suffix, "ab") as out:
                        out.write(data)
    _fsync_dir(pdir.path)
    return AppendResult(first, next_offset, tuple(sorted(before.items())))


def truncate_partition(result: AppendResult) -> None:
    """Undo :func:`append_staged`: restore every file it touched to its previous size."""
    for path, size in result.files_before:
        if size < 0:
            if os.path.exists(path):
                os.remove(path)
        elif os.path.exists(path):
            with open(path, "r+b") as f:
                f.truncate(size)
                os.fsync(f.fileno())
