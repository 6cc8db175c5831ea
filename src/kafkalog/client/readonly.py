"""The read-only mode of the Python API: a data directory read without locking or changing it."""

from __future__ import annotations

import bisect
import mmap
import os
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from kafkalog.errors import CorruptRecordError, InvalidTopicError, KafkalogError, LogDirError

__all__: List[str] = []


def _iter_batches(log, start: int, end: int) -> Iterator[Any]:
    """Validated batch views (CRC checked: a corrupt batch is never handed to a reader) holding
    offsets in [start, end) of a writable :class:`~kafkalog.log.log.Log` or a
    :class:`_ReadOnlyLog`."""
    if isinstance(log, _ReadOnlyLog):
        yield from log.iter_batches(start, end)
        return
    from kafkalog.record.records import iter_batches
    for h, data in log.iter_batch_bytes(start, end):
        for batch in iter_batches(data):
            try:
                batch.ensure_valid()
            except KafkalogError as e:
                raise e.at(getattr(log, "dir", None), getattr(h, "position", 0)) from None
            yield batch


def _committed_view(log, start: int) -> Tuple[int, List[Tuple[int, int]]]:
    """(last stable offset, aborted transactions as (producer id, first offset)) for a
    ``read_committed`` read from ``start``."""
    if isinstance(log, _ReadOnlyLog):
        return log.transaction_view(start)
    end = log.last_stable_offset
    return end, _aborted_txns(log, start, end)


def _aborted_txns(log, start: int, end: int) -> List[Tuple[int, int]]:
    """(producer id, first offset) of aborted transactions overlapping [start, end)."""
    out = []
    for seg in log.segments:
        if not os.path.exists(seg.txn_index_path):
            continue
        for e in seg.txn_index.all_entries():
            pid, first, last = e.producer_id, e.first_offset, e.last_offset
            if last >= start and first < end:
                out.append((pid, first))
    return out


def _is_abort_marker(batch) -> bool:
    for rec in batch:
        k = rec.key
        return k is not None and len(k) >= 4 and k[2:4] == b"\x00\x00"
    return False


def _legacy_ts_type(batch) -> str:
    attrs = getattr(batch, "attributes", 0)
    return "LogAppendTime" if attrs & 0x08 else "CreateTime"


# --- read-only data directory ---------------------------------------------------------------------

class _OffsetAndTimestamp(NamedTuple):
    timestamp: int
    offset: int


class _ReadOnlyLog:
    """A read-only snapshot of one partition directory: never locks, never recovers, never
    writes (no index is created, trimmed or rebuilt, no file is opened for writing).

    The ``.log`` files present when the partition is first used are opened and their sizes
    recorded; reads stop at that snapshot (the log end offset is that of the last complete batch
    in it), so a writer appending meanwhile is never observed half way. A segment deleted by the
    writer later stays readable through the open file. A partial batch at the end of the last
    segment (an append in progress, or a crash not yet recovered) ends the log; a partial batch
    in an older segment raises :class:`CorruptRecordError`. Index lookups use read-only maps and
    ignore a preallocated all-zero tail and entries pointing past the snapshot.
    """

    def __init__(self, path: str, log_start_checkpoint: Optional[int]) -> None:
        from kafkalog.log.naming import is_log_file, offset_from_file_name
        self.dir = path
        self._maps: List[Any] = []
        bases = []
        for name in os.listdir(path):
            if is_log_file(name):
                try:
                    bases.append(offset_from_file_name(name))
                except KafkalogError:
                    continue
        bases.sort()
        self._segs: List[Tuple[int, str, Any]] = []       # (base offset, path, buffer)
        for base in bases:
            seg_path = os.path.join(path, "%020d.log" % base)
            try:
                f = open(seg_path, "rb")
            except FileNotFoundError:                  # deleted by a writer since the listing
                continue
            with f:
                size = os.fstat(f.fileno()).st_size
                buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b""
            if size:
                self._maps.append(buf)
            self._segs.append((base, seg_path, buf))
        self._bases = [b for b, _p, _m in self._segs]
        self.log_end_offset = self._find_log_end_offset()
        first = self._bases[0] if self._bases else (log_start_checkpoint or 0)
        start = max(first, log_start_checkpoint if log_start_checkpoint is not None else first)
        self.log_start_offset = min(start, self.log_end_offset)
        self._txn_view: Optional[Tuple[int, List[Tuple[int, int, int]]]] = None

    # --- offsets -----------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self._transactions()[0]

    @property
    def size(self) -> int:
        return sum(len(m) for _b, _p, m in self._segs)

    @property
    def segments(self) -> list:
        return list(self._segs)

    def _index_position(self, base: int, target: int, limit: int) -> int:
        """Position of the largest valid ``.index`` entry <= ``target`` (0 when none)."""
        from kafkalog.log.offset_index import OffsetIndex
        path = os.path.join(self.dir, "%020d.index" % base)
        if not os.path.exists(path):
            return 0
        try:
            idx = OffsetIndex.open_read_only(path, base)
        except (KafkalogError, OSError):
            return 0                                   # scanning from the segment start is correct
        try:
            n = max(0, idx.entries - idx.zero_filled_tail_entries())
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                if idx.entry(mid).offset <= target:
                    lo = mid + 1
                else:
                    hi = mid
            pos = idx.entry(lo - 1).position if lo else 0
        except KafkalogError:
            return 0
        finally:
            idx.close_handler()
        return pos if 0 <= pos <= limit else 0

    def _walk(self, k: int, pos: int) -> Iterator[Any]:
        """Batches of segment ``k`` from byte ``pos``; a partial batch ends the last segment and
        is corruption in an older one."""
        from kafkalog.record.records import iter_batches
        _base, path, buf = self._segs[k]
        try:
            yield from iter_batches(buf, pos)
        except KafkalogError as e:
            raise (e.at(path, 0) if e.file is None else e) from None

    def _find_log_end_offset(self) -> int:
        for k in range(len(self._segs) - 1, -1, -1):
            base, path, buf = self._segs[k]
            pos = self._index_position(base, 1 << 62, len(buf))
            last = None
            for last in self._walk(k, pos):
                pass
            if last is None and pos:
                for last in self._walk(k, 0):
                    pass
            if last is not None:
                return last.last_offset + 1
            if k == len(self._segs) - 1:
                return base                                # an empty active segment
        return self._bases[-1] if self._bases else 0

    def iter_batches(self, start: int, end: int) -> Iterator[Any]:
        """Validated batches holding offsets in [start, end), across segments."""
        start = max(start, self.log_start_offset)
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        for k in range(i, len(self._segs)):
            base, path, buf = self._segs[k]
            pos = self._index_position(base, start, len(buf)) if k == i and base < start else 0
            walked = pos
            for b in self._walk(k, pos):
                walked = b.position + b.size_in_bytes
                if b.last_offset < start:
                    continue
                if b.base_offset >= end and b.magic >= 2:
                    return
                try:
                    b.ensure_valid()
                except KafkalogError as e:
                    raise e.at(path, b.position if e.position is None else 0) from None
                yield b
                if b.last_offset >= end - 1:
                    return
            if walked < len(buf) and k < len(self._segs) - 1:
                raise CorruptRecordError(f"partial or invalid batch at the end of the segment "
                                         f"({len(buf) - walked} bytes)", file=path, position=walked)

    def offset_for_timestamp(self, timestamp: int) -> Optional[_OffsetAndTimestamp]:
        """The first record at or above the log start offset with a timestamp >= ``timestamp``."""
        for b in self.iter_batches(self.log_start_offset, self.log_end_offset):
            if b.max_timestamp < timestamp or getattr(b, "is_control", False):
                continue
            for rec in b:
                if rec.offset >= self.log_start_offset and rec.timestamp >= timestamp:
                    return _OffsetAndTimestamp(rec.timestamp, rec.offset)
        return None

    def _transactions(self) -> Tuple[int, List[Tuple[int, int, int]]]:
        """(last stable offset, aborted transactions as (producer id, first offset, marker
        offset)), from the batches: the end-transaction markers of the log itself (Kafka's
        ``.txnindex`` and producer snapshots are the writer's caches of the same facts)."""
        if self._txn_view is None:
            open_txns: Dict[int, int] = {}
            aborted: List[Tuple[int, int, int]] = []
            for b in self.iter_batches(self.log_start_offset, self.log_end_offset):
                if b.magic < 2 or b.producer_id < 0 or not b.is_transactional:
                    continue
                pid = b.producer_id
                if b.is_control:
                    first = open_txns.pop(pid, None)
                    if first is not None and _is_abort_marker(b):
                        aborted.append((pid, first, b.last_offset))
                else:
                    open_txns.setdefault(pid, b.base_offset)
            lso = min(open_txns.values(), default=self.log_end_offset)
            self._txn_view = (min(lso, self.log_end_offset), aborted)
        return self._txn_view

    def transaction_view(self, start: int) -> Tuple[int, List[Tuple[int, int]]]:
        lso, aborted = self._transactions()
        return lso, [(pid, first) for pid, first, last in aborted if last >= start and first < lso]

    def close(self) -> None:
        for m in self._maps:
            try:
                m.close()
            except BufferError:        # a batch view still references it; the GC unmaps it
                pass
        self._maps = []


class _ReadOnlyManager:
    """The part of :class:`~kafkalog.log.manager.LogManager` a reader needs, over a data
    directory opened read-only (``kafkalog.open(dir, read_only=True)``): no ``.lock``, no
    ``meta.properties``, no checkpoint, no recovery, no file created or changed. Partitions are
    snapshotted on first use (:class:`_ReadOnlyLog`). Writing methods raise :class:`LogDirError`.
    """

    read_only = True

    def __init__(self, data_dir: os.PathLike | str) -> None:
        from kafkalog.log.naming import TopicPartition, parse_partition_dir_name
        self.data_dir = os.path.abspath(os.fspath(data_dir))
        if not os.path.isdir(self.data_dir):
            raise LogDirError("data directory does not exist or is not a directory",
                              file=self.data_dir)
        self._dirs: Dict[Any, str] = {}
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if name.startswith(".") or not os.path.isdir(path):
                continue
            try:
                parsed = parse_partition_dir_name(name)
            except KafkalogError:
                continue
            if not parsed.kind:
                self._dirs[TopicPartition(parsed.topic, parsed.partition)] = path
        self._logs: Dict[Any, _ReadOnlyLog] = {}
        self._start_offsets: Optional[dict] = None
        self._closed = False

    def topics(self) -> List[str]:
        return sorted({tp.topic for tp in self._dirs})

    def partitions_of(self, topic: str) -> List[int]:
        return sorted(tp.partition for tp in self._dirs if tp.topic == topic)

    def partitions(self) -> list:
        return sorted(self._dirs)

    def has_topic(self, topic: str) -> bool:
        return any(tp.topic == topic for tp in self._dirs)

    def get_log(self, topic: str, partition: int) -> _ReadOnlyLog:
        from kafkalog.log.naming import TopicPartition
        if self._closed:
            raise LogDirError("the data directory is closed", file=self.data_dir)
        tp = TopicPartition(topic, partition)
        log = self._logs.get(tp)
        if log is None:
            path = self._dirs.get(tp)
            if path is None:
                raise InvalidTopicError(f"Unknown topic or partition: {topic}-{partition}",
                                        file=self.data_dir)
            if self._start_offsets is None:
                self._start_offsets = self._read_log_start_checkpoint()
            log = self._logs[tp] = _ReadOnlyLog(path, self._start_offsets.get(tp))
        return log

    def _read_log_start_checkpoint(self) -> dict:
        from kafkalog.log.checkpoint import OffsetCheckpointFile
        path = os.path.join(self.data_dir, "log-start-offset-checkpoint")
        if not os.path.exists(path):
            return {}
        try:
            return OffsetCheckpointFile(path, create=False).read()
        except KafkalogError:           # unreadable: the first segment's base offset (as Kafka)
            return {}

    def topic_config(self, topic: str):
        from kafkalog.log.config import LogConfig, parse_properties
        from kafkalog.log.naming import topic_config_file_name
        path = os.path.join(self.data_dir, topic_config_file_name(topic))
        if not os.path.exists(path):
            return LogConfig({})
        with open(path, "r", encoding="utf-8") as f:
            return LogConfig(parse_properties(f.read(1 << 20), file=path))

    def describe(self) -> list:
        from kafkalog.log.manager import PartitionInfo
        out = []
        for tp in self.partitions():
            log = self.get_log(tp.topic, tp.partition)
            out.append(PartitionInfo(tp.topic, tp.partition, log.log_start_offset,
                                     log.log_end_offset, log.high_watermark, -1, log.size,
                                     len(log.segments), log.dir))
        return out

    def _refuse(self, *_a: Any, **_k: Any) -> Any:
        raise LogDirError("the data directory is open read-only", file=self.data_dir)

    create_topic = delete_topic = alter_topic_config = add_partitions = _refuse
    cleanup_logs = flush = write_checkpoints = _refuse

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed
