"""Dumpers of ``kafkalog dump`` for everything but ``.log``: ``.index``, ``.timeindex``
(spec §6.3-6.4, with the mismatch reports), ``.txnindex`` and ``.snapshot`` (§6.5), and the
checkpoint and metadata files of a data directory (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``,
``leader-epoch-checkpoint``, ``partition.metadata``, ``meta.properties``,
``.kafka_cleanshutdown``; kafka-dump-log.sh ignores those).

Text output is kafka-dump-log.sh's; ``--format json`` prints JSON lines (``type`` =
``indexEntry`` / ``timeIndexEntry`` / ``mismatch`` / ``outOfOrder`` / ``notFound`` /
``txnIndexEntry`` / ``producer`` / ``checkpointEntry`` / ``epochEntry`` / ``metadata`` /
``summary``). Registered into :data:`kafkalog.cli.dump.DUMPERS`.
"""

from __future__ import annotations

import json
import os

from kafkalog.cli.dump import DumpOptions, register_dumper
from kafkalog.cli.segment_check import (check_offset_index, check_time_index, read_txn_index,
                                        scan_log)

CHECKPOINT_FILES = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                    "replication-offset-checkpoint", "cleaner-offset-checkpoint")


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
        if kind == "offset_index":
            from kafkalog.log.offset_index import OffsetIndex as index_cls
        else:
            from kafkalog.log.time_index import TimeIndex as index_cls
        idx = index_cls.open_read_only(path)
        try:
            idx.sanity_check()
        finally:
            close = getattr(idx, "close_handler", None) or getattr(idx, "close", None)
            if callable(close):
                close()
        if opts.json:
            _j(opts, {"type": "sanityCheck", "file": path, "passed": True})
        else:
            opts.out.write(f"{path} passed sanity check.\n")
        return 0
    if os.path.getsize(path) < entry_size:
        if opts.json:
            _j(opts, {"type": "summary", "file": path, "entries": 0, "empty": True})
        else:
            opts.out.write(f"{path} is empty.\n")
        return 0
    return None


def dump_offset_index(path: str, opts: DumpOptions) -> int:
    """``.index``: entries, ``--index-sanity-check``, ``--verify-index-only``, mismatches."""
    done = _sanity_check_or_empty(path, opts, "offset_index", 8)
    if done is not None:
        return done
    res = check_offset_index(path, _sibling_scan(path, ".index"))
    if opts.json:
        if not opts.verify_index_only:
            for off, pos in res.entries:
                _j(opts, {"type": "indexEntry", "offset": off, "position": pos})
        for io, lo in res.mismatches:
            _j(opts, {"type": "mismatch", "file": os.path.abspath(path), "indexOffset": io,
                      "logOffset": lo})
        for f in res.findings:
            _j(opts, {"type": "finding", **f.to_json()})
        _j(opts, {"type": "summary", "file": path, "entries": len(res.entries),
                  "mismatches": len(res.mismatches), "zeroFilledTailAt": res.zero_tail_at})
    else:
        if not opts.verify_index_only:
            for off, pos in res.entries:
                opts.out.write(f"offset: {off} position: {pos}\n")
        if res.mismatches:
            opts.err.write(f"Mismatches in :{os.path.abspath(path)}\n")
            for io, lo in res.mismatches:
                opts.err.write(f"  Index offset: {io}, log offset: {lo}\n")
    return 1 if any(f.level == "error" for f in res.findings) else 0


def dump_time_index(path: str, opts: DumpOptions) -> int:
    """``.timeindex``: entries, ``--index-sanity-check``, ``--verify-index-only``, the three
    reports of kafka-dump-log.sh."""
    done = _sanity_check_or_empty(path, opts, "time_index", 12)
    if done is not None:
        return done
    res = check_time_index(path, _sibling_scan(path, ".timeindex"))
    ap = os.path.abspath(path)
    if opts.json:
        if not opts.verify_index_only:
            for ts, off in res.entries:
                _j(opts, {"type": "timeIndexEntry", "timestamp": ts, "offset": off})
        for a, b in res.mismatches:
            _j(opts, {"type": "mismatch", "file": ap, "indexTimestamp": a, "logTimestamp": b})
        for a, b in res.out_of_order:
            _j(opts, {"type": "outOfOrder", "file": ap, "indexTimestamp": a, "previousTimestamp": b})
        for a, b in res.not_found:
            _j(opts, {"type": "notFound", "file": ap, "indexOffset": a, "logOffset": b})
        for f in res.findings:
            if f.check in ("zero-filled-tail", "index-size"):
                _j(opts, {"type": "finding", **f.to_json()})
        _j(opts, {"type": "summary", "file": path, "entries": len(res.entries),
                  "mismatches": len(res.mismatches), "outOfOrder": len(res.out_of_order),
                  "notFound": len(res.not_found), "zeroFilledTailAt": res.zero_tail_at})
    else:
        if not opts.verify_index_only:
            for ts, off in res.entries:
                opts.out.write(f"timestamp: {ts} offset: {off}\n")
        if res.mismatches:
            opts.err.write(f"Found timestamp mismatch in :{ap}\n")
            for a, b in res.mismatches:
                opts.err.write(f"  Index timestamp: {a}, log timestamp: {b}\n")
        if res.out_of_order:
            opts.err.write(f"Found out of order timestamp in :{ap}\n")
            for a, b in res.out_of_order:
                opts.err.write(f"  Index timestamp: {a}, Previously indexed timestamp: {b}\n")
        if res.not_found:
            opts.err.write("The following indexed offsets are not found in the log.\n")
            for a, b in res.not_found:
                opts.err.write(f"Indexed offset: {a}, found log offset: {b}\n")
    return 1 if any(f.level == "error" for f in res.findings) else 0


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
        entries = cp.OffsetCheckpointFile(path, create=False).read()
        for (topic, part), off in sorted(entries.items()):
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


register_dumper(".index", dump_offset_index)
register_dumper(".timeindex", dump_time_index)
register_dumper(".txnindex", dump_txn_index)
register_dumper(".snapshot", dump_snapshot)
register_dumper("", dump_metadata_file)
register_dumper(".metadata", dump_metadata_file)
register_dumper(".properties", dump_metadata_file)
register_dumper(".kafka_cleanshutdown", dump_metadata_file)
