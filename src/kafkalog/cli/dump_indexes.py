"""Dumpers of ``kafkalog dump`` for everything but ``.log``: ``.index``, ``.timeindex``
(spec §6.3-6.4, with the mismatch reports), ``.txnindex`` and ``.snapshot`` (§6.5), and the
checkpoint and metadata files of a data directory (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``,
``leader-epoch-checkpoint``, ``partition.metadata``, ``meta.properties``,
``.kafka_cleanshutdown``; kafka-dump-log.sh ignores those).

Text output is kafka-dump-log.sh's; ``--format json`` prints JSON lines (``type`` =
``indexEntry`` / ``timeIndexEntry`` / ``mismatch`` / ``outOfOrder`` / ``notFound`` /
``txnIndexEntry`` / ``producer`` / ``checkpointEntry`` / ``epochEntry`` / ``metadata`` /
``summary``). Listed in :data:`kafkalog.cli.dump.DUMPERS`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

from kafkalog.cli.dump_options import DumpOptions
from kafkalog.cli.segment_check import (
    IndexCheck,
    LogScan,
    check_offset_index,
    check_time_index,
    read_txn_index,
    scan_log,
)
from kafkalog.cli.verify import mark_crash_tails, unclean_active_segments

if TYPE_CHECKING:
    from kafkalog.log.index.offset_index import OffsetIndex
    from kafkalog.log.index.time_index import TimeIndex

CHECKPOINT_FILES = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                    "replication-offset-checkpoint", "cleaner-offset-checkpoint")


#: findings after which the rest of an index file is not read as entries
_STRUCTURAL = frozenset({"index-size", "index-order"})


def _j(opts: DumpOptions, obj: dict) -> None:
    opts.out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def _sibling_scan(path: str, suffix: str):
    log = path[: -len(suffix)] + ".log"
    return scan_log(log) if os.path.exists(log) else None


def _sanity_check_or_empty(path: str, opts: DumpOptions, kind: str, entry_size: int):
    """What the offset and time index dumpers share: ``--index-sanity-check`` (Kafka's
    ``sanityCheck`` of the ``OffsetIndex``/``TimeIndex``) and the empty-file report. Returns the
    exit code when one of them answered, None when the entries are to be dumped."""
    if opts.index_sanity_check:
        idx: OffsetIndex | TimeIndex
        if kind == "offset_index":
            from kafkalog.log.index.offset_index import OffsetIndex
            idx = OffsetIndex.open_read_only(path)
        else:
            from kafkalog.log.index.time_index import TimeIndex
            idx = TimeIndex.open_read_only(path)
        try:
            idx.sanity_check()
        finally:
            idx.close_handler()
        if opts.json:
            _j(opts, {"type": "sanityCheck", "file": path, "passed": True})
        else:
            opts.out.write(f"{path} passed sanity check.\n")
        return 0
    if os.path.getsize(path) < entry_size:
        if opts.json:
            _j(opts, {"type": "summary", "file": path, "entries": 0, "empty": True})
        elif kind == "offset_index":     # kafka-dump-log.sh says nothing of an empty time index
            opts.out.write(f"{path} is empty.\n")
        return 0
    return None


@dataclass(frozen=True)
class _IndexReport:
    """One report kafka-dump-log.sh prints after the entries of an index: the (index value, log
    value) pairs of an :class:`IndexCheck` list, as JSON lines on ``out`` or as text on ``err``."""

    pairs: Callable[[IndexCheck], List[Tuple[int, int]]]    # the IndexCheck list it reports
    summary_key: str            # its count in the JSON summary
    json_type: str
    json_keys: Tuple[str, str]
    header: str                 # text header; ``{file}`` is the index's absolute path
    line: str                   # text line of one pair, ``{0}`` and ``{1}``
    newest_first: bool = False  # text lists the pairs last entry first (Kafka prepends them)


@dataclass(frozen=True)
class _IndexFormat:
    """What tells the ``.index`` and ``.timeindex`` dumps apart (see :func:`_dump_index`)."""

    kind: str                   # "offset_index" / "time_index", for --index-sanity-check
    suffix: str
    entry_size: int
    check: Callable[[str, Optional[LogScan]], IndexCheck]
    entry_type: str             # JSON ``type`` of an entry
    entry_keys: Tuple[str, str]
    entry_line: str             # text line of an entry, ``{0}`` and ``{1}``
    reports: Tuple[_IndexReport, ...]
    json_findings: Optional[Tuple[str, ...]] = None   # the finding checks printed (None: all)


_OFFSET_INDEX = _IndexFormat(
    "offset_index", ".index", 8, check_offset_index,
    "indexEntry", ("offset", "position"), "offset: {0} position: {1}\n",
    (_IndexReport(lambda c: c.mismatches, "mismatches", "mismatch", ("indexOffset", "logOffset"),
                  "Mismatches in :{file}\n", "  Index offset: {0}, log offset: {1}\n", True),))

_TIME_INDEX = _IndexFormat(
    "time_index", ".timeindex", 12, check_time_index,
    "timeIndexEntry", ("timestamp", "offset"), "timestamp: {0} offset: {1}\n",
    (_IndexReport(lambda c: c.mismatches, "mismatches", "mismatch", ("indexTimestamp", "logTimestamp"),
                  "Found timestamp mismatch in :{file}\n",
                  "  Index timestamp: {0}, log timestamp: {1}\n"),
     _IndexReport(lambda c: c.out_of_order, "outOfOrder", "outOfOrder",
                  ("indexTimestamp", "previousTimestamp"),
                  "Found out of order timestamp in :{file}\n",
                  "  Index timestamp: {0}, Previously indexed timestamp: {1}\n"),
     _IndexReport(lambda c: c.not_found, "notFound", "notFound", ("indexOffset", "logOffset"),
                  "The following indexed offsets are not found in :{file}\n",
                  "Indexed offset: {0}, found log offset: {1}\n")),
    json_findings=("zero-filled-tail", "index-size"))


def _dump_index(path: str, opts: DumpOptions, fmt: _IndexFormat) -> int:
    """The dump of an offset or time index: entries (unless ``--verify-index-only``), then the
    reports checked against the sibling ``.log``, then in JSON the findings and a summary."""
    done = _sanity_check_or_empty(path, opts, fmt.kind, fmt.entry_size)
    if done is not None:
        return done
    scan = _sibling_scan(path, fmt.suffix)
    res = fmt.check(path, scan)
    if unclean_active_segments([path[: -len(fmt.suffix)] + ".log"]):
        mark_crash_tails(res.findings)
    ap = os.path.abspath(path)
    # entries at or after the first structural error are not index entries (a damaged or foreign file)
    bad_at = min((f.position for f in res.findings if f.check in _STRUCTURAL and f.position is not None),
                 default=None)
    entries = res.entries if bad_at is None else res.entries[: bad_at // fmt.entry_size]
    if res.zero_tail_at == 0 and fmt.kind == "offset_index" and scan is not None and scan.batches:
        # a preallocated index without an entry yet: kafka-dump-log.sh reads its slot 0 as the
        # entry (base offset, position 0) and checks it against the first batch
        base, first = scan.base_offset, scan.batches[0]
        entries = [(base, 0)]
        if first.last_offset != base:
            res.mismatches.insert(0, (base, first.last_offset))
    elif res.zero_tail_at == 0 and fmt.kind == "time_index" and scan is not None:
        # likewise the time index's slot 0 is the entry (timestamp 0, base offset)
        base = scan.base_offset
        entries = [(0, base)]
        first_b = next((b for b in scan.batches if b.last_offset >= base), None)
        if first_b is None or first_b.last_offset != base:
            res.not_found.insert(0, (base, -1 if first_b is None else first_b.last_offset))
        elif first_b.max_timestamp != 0:
            res.mismatches.insert(0, (0, first_b.max_timestamp))
    if opts.json:
        if not opts.verify_index_only:
            k0, k1 = fmt.entry_keys
            for a, b in entries:
                _j(opts, {"type": fmt.entry_type, k0: a, k1: b})
        for rep in fmt.reports:
            k0, k1 = rep.json_keys
            for a, b in rep.pairs(res):
                _j(opts, {"type": rep.json_type, "file": ap, k0: a, k1: b})
        for f in res.findings:
            if fmt.json_findings is None or f.check in fmt.json_findings or f.check in _STRUCTURAL:
                _j(opts, {"type": "finding", **f.to_json()})
        summary = {"type": "summary", "file": path, "entries": len(entries)}
        for rep in fmt.reports:
            summary[rep.summary_key] = len(rep.pairs(res))
        summary["zeroFilledTailAt"] = res.zero_tail_at
        _j(opts, summary)
    else:
        if not opts.verify_index_only:
            for a, b in entries:
                opts.out.write(fmt.entry_line.format(a, b))
        opts.out.flush()
        for rep in fmt.reports:
            pairs = rep.pairs(res)
            if pairs:
                opts.err.write(rep.header.format(file=ap))
                for a, b in (reversed(pairs) if rep.newest_first else pairs):
                    opts.err.write(rep.line.format(a, b))
        errors = [f for f in res.findings if f.level == "error"]     # warnings: as Kafka, silent
        for f in errors:
            if f.position is not None:
                opts.err.write(f"Error: {ap} at byte {f.position}: {f.message}\n")
        if errors:
            opts.err.write(f"Error: {ap}: {len(errors)} problem(s) found\n")
    return 1 if any(f.level == "error" for f in res.findings) else 0


def dump_offset_index(path: str, opts: DumpOptions) -> int:
    """``.index``: entries, ``--index-sanity-check``, ``--verify-index-only``, mismatches."""
    return _dump_index(path, opts, _OFFSET_INDEX)


def dump_time_index(path: str, opts: DumpOptions) -> int:
    """``.timeindex``: entries, ``--index-sanity-check``, ``--verify-index-only``, the three
    reports of kafka-dump-log.sh."""
    return _dump_index(path, opts, _TIME_INDEX)


def dump_txn_index(path: str, opts: DumpOptions) -> int:
    """``.txnindex``: one line per aborted transaction."""
    entries, findings = read_txn_index(path)
    for e in entries:
        if opts.json:
            _j(opts, {"type": "txnIndexEntry", **e})
        else:
            opts.out.write(f"version: {e['version']} producerId: {e['producerId']} firstOffset: "
                           f"{e['firstOffset']} lastOffset: {e['lastOffset']} lastStableOffset: "
                           f"{e['lastStableOffset']}\n")
    for f in findings:
        if opts.json:
            _j(opts, {"type": "finding", **f.to_json()})
        else:
            opts.err.write(f"{f.file} at byte {f.position}: {f.message}\n")
    return 1 if findings else 0


def dump_snapshot(path: str, opts: DumpOptions) -> int:
    """``.snapshot``: one line per producer (spec §6.5)."""
    from kafkalog.log.producer_state import read_snapshot
    for e in read_snapshot(path):
        txn = e.current_txn_first_offset
        if opts.json:
            obj = {"type": "producer", "producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                   "coordinatorEpoch": e.coordinator_epoch, "currentTxnFirstOffset": txn,
                   "lastTimestamp": e.last_timestamp}
            if e.batch_metadata:
                b = e.batch_metadata[-1]
                obj.update({"firstSequence": b.first_seq, "lastSequence": b.last_seq,
                            "lastOffset": b.last_offset, "offsetDelta": b.offset_delta,
                            "timestamp": b.timestamp})
            _j(opts, obj)
            continue
        t = "OptionalLong.empty" if txn is None else f"OptionalLong[{txn}]"
        line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: {t} lastTimestamp: {e.last_timestamp}")
        if e.batch_metadata:
            b = e.batch_metadata[-1]
            line += (f" firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: "
                     f"{b.last_offset} offsetDelta: {b.offset_delta} timestamp: {b.timestamp}")
        opts.out.write(line + "\n")
    return 0


def dump_metadata_file(path: str, opts: DumpOptions) -> int:
    """Checkpoint files (by name), ``partition.metadata``, ``meta.properties``,
    ``.kafka_cleanshutdown``."""
    from kafkalog.log import checkpoint as cp
    name = os.path.basename(path)
    if name == "leader-epoch-checkpoint":
        entries = cp.LeaderEpochCheckpointFile(path, create=False).read()
        for e in entries:
            if opts.json:
                _j(opts, {"type": "epochEntry", "epoch": e[0], "startOffset": e[1]})
            else:
                opts.out.write(f"epoch: {e[0]} startOffset: {e[1]}\n")
        return 0
    if name.endswith("checkpoint"):
        offsets = cp.OffsetCheckpointFile(path, create=False).read()
        for (topic, part), off in sorted(offsets.items()):
            if opts.json:
                _j(opts, {"type": "checkpointEntry", "topic": topic, "partition": part, "offset": off})
            else:
                opts.out.write(f"topic: {topic} partition: {part} offset: {off}\n")
        return 0
    if name == "partition.metadata":
        md = cp.PartitionMetadataFile(path).read()
        tid = cp.uuid_to_kafka_string(md.topic_id)
        if opts.json:
            _j(opts, {"type": "metadata", "version": md.version, "topicId": tid})
        else:
            opts.out.write(f"version: {md.version} topicId: {tid}\n")
        return 0
    if name == "meta.properties":
        mp = cp.MetaProperties.read(path)
        props = mp.to_properties()
        if opts.json:
            _j(opts, {"type": "metadata", **props})
        else:
            for k, v in sorted(props.items()):
                opts.out.write(f"{k}: {v}\n")
        return 0
    if name == ".kafka_cleanshutdown":
        epoch = cp.CleanShutdownFile(os.path.dirname(os.path.abspath(path))).read()
        if opts.json:
            _j(opts, {"type": "metadata", "cleanShutdown": True, "brokerEpoch": epoch})
        else:
            opts.out.write(f"clean shutdown, brokerEpoch: {epoch}\n")
        return 0
    opts.err.write(f"Ignoring unknown file {path}\n")
    return 0
