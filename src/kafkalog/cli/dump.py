"""``kafkalog dump FILE...``: print the contents of log segments and raw record-set files.

Text output follows ``kafka-dump-log.sh`` (spec §6.1-6.2) line for line; ``--format json`` prints
JSON lines with the field names of Kafka's own record readers (``type`` = ``batch`` / ``record`` /
``summary``, plus ``file`` and ``error`` lines), keys and values as ``consume`` prints them (UTF-8
text, else base64 named in ``keyEncoding``/``valueEncoding``; ``--encoding hex`` gives the form
of the oracle's ``.oracle.jsonl`` files). Files are dispatched by suffix in :data:`DUMPERS`
(``.log`` here; the other file kinds' dumpers are :mod:`kafkalog.cli.dump_indexes`').
"""
from __future__ import annotations

import codecs
import json
import mmap
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import click

from kafkalog.cli.dump_kraft import kraft_control
from kafkalog.cli.dump_options import DumpOptions
from kafkalog.cli.output import (
    BYTES_ENCODINGS,
    EXIT_ERROR,
    EXIT_FINDINGS,
    FORMAT_OPTION_HELP,
    bytes_json,
    report_error,
)
from kafkalog.cli.paths import is_partition_dir
from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.record.constants import ControlRecordType, TimestampType

if TYPE_CHECKING:
    from kafkalog.cli.dump_decoders import Decoded, RecordDecoder
    from kafkalog.record.control import EndTransactionMarker

__all__ = ["dump", "DumpOptions", "DUMPERS", "register_dumper", "dump_records_file",
           "batch_json", "record_json", "dump_record_set", "dumpers"]



#: suffix -> dumper(path, options) -> exit status (0 ok, 1 errors found): ``.log`` here, the
#: indexes, producer snapshots and metadata files in :mod:`kafkalog.cli.dump_indexes` (imported by
#: :func:`dumpers`, when a file is dumped: ``--help`` stays quick)
DUMPERS: Dict[str, Callable[[str, DumpOptions], int]] = {}
_BUILT_IN: List[bool] = []     # whether dumpers() registered the built-in ones


def dumpers() -> Dict[str, Callable[[str, DumpOptions], int]]:
    """:data:`DUMPERS`, with the index, snapshot and metadata dumpers registered."""
    if not _BUILT_IN:
        _BUILT_IN.append(True)
        from kafkalog.cli.dump_indexes import (
            dump_metadata_file,
            dump_offset_index,
            dump_snapshot,
            dump_time_index,
            dump_txn_index,
        )
        for suffix, fn in {".index": dump_offset_index, ".timeindex": dump_time_index,
                           ".txnindex": dump_txn_index, ".snapshot": dump_snapshot,
                           "": dump_metadata_file, ".metadata": dump_metadata_file,
                           ".properties": dump_metadata_file,
                           ".kafka_cleanshutdown": dump_metadata_file}.items():
            DUMPERS.setdefault(suffix, fn)
    return DUMPERS


def register_dumper(suffix: str, fn: Callable[[str, DumpOptions], int]) -> None:
    """Register the dumper of files ending in ``suffix`` (e.g. ``".index"``)."""
    DUMPERS[suffix] = fn


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _ts_name(t: TimestampType) -> str:
    return str(TimestampType(t))


def batch_json(batch, valid: bool, valid_error: Optional[str] = None) -> dict:
    """One ``batch`` JSON object (field names of the oracle ``.oracle.jsonl`` files)."""
    d = {"type": "batch", "position": batch.position, "baseOffset": batch.base_offset,
         "lastOffset": batch.last_offset, "count": batch.count, "magic": batch.magic,
         "compression": batch.compression.display_name,
         "timestampType": _ts_name(batch.timestamp_type), "maxTimestamp": batch.max_timestamp,
         "sizeInBytes": batch.size_in_bytes, "checksum": batch.checksum, "valid": valid}
    if valid_error is not None:
        d["validError"] = valid_error
    if batch.magic >= 2:
        d.update({"producerId": batch.producer_id, "producerEpoch": batch.producer_epoch,
                  "baseSequence": batch.base_sequence, "lastSequence": batch.last_sequence,
                  "partitionLeaderEpoch": batch.partition_leader_epoch,
                  "isTransactional": batch.is_transactional, "isControl": batch.is_control,
                  "deleteHorizonMs": batch.delete_horizon_ms})
    return d


def _control_info(record) -> Tuple[ControlRecordType, Optional[EndTransactionMarker]]:
    from kafkalog.record.control import EndTransactionMarker, parse_control_key
    _v, ctype = parse_control_key(record.key)
    if ctype in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return ctype, EndTransactionMarker.deserialize_value(ctype, record.value)
    return ctype, None


def _decoded_text(d: Decoded) -> str:
    return d if isinstance(d, str) else json.dumps(d, separators=(",", ":"), ensure_ascii=False)


def record_json(batch, record, decoder: Optional[RecordDecoder] = None, encoding: str = "text") -> dict:
    """One ``record`` JSON object (with ``decodedKey`` / ``decodedPayload`` when a decoder is
    given: Kafka's JSON objects, or texts such as ``<DELETE>``); keys and values as ``consume``
    prints them (:func:`kafkalog.cli.output.bytes_json`)."""
    d: Dict[str, Any] = {"type": "record", "offset": record.offset, "timestamp": record.timestamp,
         "keySize": -1 if record.key is None else len(record.key),
         "valueSize": -1 if record.value is None else len(record.value),
         "sizeInBytes": record.size_in_bytes}
    if batch.magic >= 2:
        d["sequence"] = record.sequence
    else:
        d["recordChecksum"] = record.checksum
    d["headers"] = [{"key": k, "valueSize": -1 if v is None else len(v),
                     "value": bytes_json(v, encoding)[0]} for k, v in record.headers]
    d["key"], key_encoding = bytes_json(record.key, encoding)
    d["value"], value_encoding = bytes_json(record.value, encoding)
    if key_encoding:
        d["keyEncoding"] = key_encoding
    if value_encoding:
        d["valueEncoding"] = value_encoding
    if batch.is_control:
        ctype, marker = _control_info(record)
        d["controlType"] = ctype.name
        if marker is not None:
            d["coordinatorEpoch"] = marker.coordinator_epoch
        elif (kraft := kraft_control(ctype, record.value)) is not None:
            d["controlRecord"] = kraft[1]
    elif decoder is not None:
        d["decodedKey"], d["decodedPayload"] = decoder(record)
    return d


def _batch_line(batch, valid: bool) -> str:
    ts = f"{_ts_name(batch.timestamp_type)}: {batch.max_timestamp}"
    tail = (f"size: {batch.size_in_bytes} magic: {batch.magic} compresscodec: "
            f"{batch.compression.display_name} crc: {batch.checksum} isvalid: {_bool(valid)}")
    if batch.magic >= 2:
        dh = batch.delete_horizon_ms
        dh_s = "OptionalLong.empty" if dh is None else f"OptionalLong[{dh}]"
        return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: "
                f"{batch.count} baseSequence: {batch.base_sequence} lastSequence: "
                f"{batch.last_sequence} producerId: {batch.producer_id} producerEpoch: "
                f"{batch.producer_epoch} partitionLeaderEpoch: {batch.partition_leader_epoch} "
                f"isTransactional: {_bool(batch.is_transactional)} isControl: "
                f"{_bool(batch.is_control)} deleteHorizonMs: {dh_s} position: {batch.position} "
                f"{ts} {tail}")
    return f"offset: {batch.last_offset} position: {batch.position} {ts} {tail}"


def _java_utf8_replace(e: UnicodeError) -> Tuple[str, int]:
    """Java's ``new String(bytes, UTF_8)`` replacement rule where it differs from Python's: Java
    reads ``ED`` with any continuation byte as the start of a three-byte sequence, so a surrogate
    encoded in three bytes (``ED A0..BF 80..BF``) is one U+FFFD, and ``ED A0..BF`` cut short is one
    (Python: one per byte); every other malformed sequence is one U+FFFD in both (checked against
    Java 17 on 20,000 random sequences)."""
    assert isinstance(e, UnicodeDecodeError)
    b, i = e.object, e.start
    if b[i] == 0xED and i + 1 < len(b) and 0xA0 <= b[i + 1] <= 0xBF:
        return "\ufffd", i + 3 if i + 2 < len(b) and 0x80 <= b[i + 2] <= 0xBF else i + 2
    return "\ufffd", e.end


codecs.register_error("kafkalog-java-utf8", _java_utf8_replace)


def _decode(b: bytes) -> str:
    """A key or payload as kafka-dump-log.sh prints it (Kafka's StringDecoder: Java's UTF-8)."""
    return bytes(b).decode("utf-8", "kafkalog-java-utf8")


def _record_line(batch, record, opts: DumpOptions) -> str:
    parts = []
    if not opts.skip_record_metadata:
        parts.append(f"| offset: {record.offset} {_ts_name(batch.timestamp_type)}: "
                     f"{record.timestamp} keySize: {-1 if record.key is None else len(record.key)} "
                     f"valueSize: {-1 if record.value is None else len(record.value)}")
        if batch.magic >= 2:
            keys = ",".join(k for k, _ in record.headers)
            parts.append(f" sequence: {record.sequence} headerKeys: [{keys}]")
        else:
            parts.append(f" isValid: {_bool(record.checksum == _legacy_crc(record, batch))} "
                         f"crc: {record.checksum}}}")
        if batch.is_control:
            ctype, marker = _control_info(record)
            if marker is not None:
                parts.append(f" endTxnMarker: {ctype.name} coordinatorEpoch: "
                             f"{marker.coordinator_epoch}")
            elif (kraft := kraft_control(ctype, record.value)) is not None:
                parts.append(f" {kraft[0]} {_decoded_text(kraft[1])}")
            else:
                tid = -1 if record.key is None or len(record.key) < 4 else \
                    int.from_bytes(bytes(record.key[2:4]), "big", signed=True)
                parts.append(f" controlType: {ctype.name}({tid})")
    if opts.print_data_log and not batch.is_control and opts.decoder is not None:
        key, payload = opts.decoder(record)
        if key is not None:
            parts.append(("| key: " if opts.skip_record_metadata else " key: ") + _decoded_text(key))
        if payload is not None:
            parts.append(f" payload: {_decoded_text(payload)}")
    elif opts.print_data_log and not batch.is_control:
        if record.key is not None:
            parts.append(("| key: " if opts.skip_record_metadata else " key: ") + _decode(record.key))
        if record.value is not None:
            parts.append(f" payload: {_decode(record.value)}")
    return "".join(parts)


def _legacy_crc(record, batch) -> int:
    """Validity of a legacy record: its own CRC (uncompressed: the batch's)."""
    if batch.compression_id == 0:
        return batch.compute_checksum()
    return record.checksum  # inner CRCs are not re-verified (as DeepRecordsIterator)


def dump_record_set(buf, opts: DumpOptions, *, file: Optional[str] = None,
                    check_trailing: bool = True, crash_tail: bool = False) -> Tuple[int, dict]:
    """Dump the batches of ``buf``; returns ``(exit_status, summary)``: 1 when damage was found (a
    batch that fails validation, bytes after the last batch unless ``crash_tail``: the active
    segment of a log the next open recovers, whose cut-short last batch a crash leaves, as
    ``verify`` rates it)."""
    from kafkalog.record.records import iter_batches
    out, w = opts.out, opts.out.write
    summary: Dict[str, Any] = {"type": "summary", "batches": 0, "invalidBatches": 0, "bytesInBatches": 0,
               "totalBytes": len(buf), "trailingBytes": 0}
    valid_bytes = 0
    last_offset = -1
    non_consecutive: List[Tuple[int, int]] = []
    status = 0
    try:
        for batch in iter_batches(buf):
            summary["batches"] += 1
            valid_error = None
            try:
                batch.ensure_valid()
                valid = True
            except KafkalogError as e:
                valid = False
                valid_error = f"{type(e).__name__}: {e.message}"
                summary["invalidBatches"] += 1
            if opts.json:
                w(json.dumps(batch_json(batch, valid, valid_error)) + "\n")
            else:
                w(_batch_line(batch, valid) + "\n")
            records = batch.records() if opts.deep else ()
            for r in records:
                # Kafka 4.4 (DumpLogSegments in Java) starts from -1: a file whose first record is
                # not offset 0 reports "-1 is followed by" that record
                if r.offset != last_offset + 1:
                    non_consecutive.append((last_offset, r.offset))
                last_offset = r.offset
                if opts.json:
                    w(json.dumps(record_json(batch, r, opts.decoder if opts.print_data_log else None,
                                             opts.encoding))
                      + "\n")
                else:
                    w(_record_line(batch, r, opts) + "\n")
            valid_bytes += batch.size_in_bytes
            summary["bytesInBatches"] = valid_bytes
    except KafkalogError as e:
        status = 1
        err = e.at(file, 0) if file is not None else e
        summary["stopError"] = f"{type(e).__name__}: {e.message}"
        if opts.json:
            w(json.dumps({"type": "error", **err.to_json()}) + "\n")
        else:
            out.flush()
            opts.err.write(f"Error: {err}\n")
    summary["trailingBytes"] = len(buf) - valid_bytes
    if non_consecutive:
        opts.err.write(f"Non-consecutive offsets in {os.path.abspath(file) if file else '<buffer>'}\n")
        for a, b in non_consecutive:
            opts.err.write(f"  {a} is followed by {b}\n")
    trailing = summary["trailingBytes"] if check_trailing and status == 0 else 0
    if opts.json:
        w(json.dumps(summary) + "\n")
    elif trailing:
        w(f"Found {trailing} invalid bytes at the end of "
          f"{os.path.basename(file) if file else '<buffer>'}\n")
    if status == 0 and (summary["invalidBatches"] or (trailing and not crash_tail)):
        # damage found: exit 1 (Kafka 4.4's DumpLogSegments prints the same and exits 0:
        # docs/kafka-compatibility.md), said once on stderr in text (the JSON summary says it)
        status = 1
        if not opts.json:
            out.flush()
            damage = [f"{summary['invalidBatches']} invalid batch(es) (isvalid: false)"] \
                if summary["invalidBatches"] else []
            damage += [f"{trailing} invalid bytes at the end"] if trailing and not crash_tail else []
            opts.err.write(f"Error: {file or '<buffer>'}: {', '.join(damage)}\n")
    return status, summary


def _start_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    try:
        return int(stem)
    except ValueError:
        return 0


def dump_records_file(path: str, opts: DumpOptions) -> int:
    """Dump a ``.log`` segment or any raw record-set file."""
    w = opts.out.write
    if opts.json:
        w(json.dumps({"type": "file", "file": path, "logStartOffset": _start_offset(path)}) + "\n")
    else:
        w(f"Log starting offset: {_start_offset(path)}\n")
    size = os.path.getsize(path)
    limit = size if opts.max_bytes is None else min(size, opts.max_bytes)
    from kafkalog.cli.verify import unclean_active_segments
    crash_tail = bool(path.endswith(".log") and unclean_active_segments([path]))
    if limit == 0:
        return dump_record_set(b"", opts, file=path, check_trailing=opts.max_bytes is None)[0]
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)[:limit]
        try:
            return dump_record_set(buf, opts, file=path, check_trailing=opts.max_bytes is None,
                                   crash_tail=crash_tail)[0]
        finally:
            buf.release()


register_dumper(".log", dump_records_file)


def _suffix(path: str) -> str:
    name = os.path.basename(path)
    return name[name.rfind("."):] if "." in name else ""


def expand_paths(paths: Sequence[str]) -> List[str]:
    """Files to dump: each file as given; a directory's dumpable files in name order (a data directory:
    its checkpoint files, then every partition directory's files)."""
    out: List[str] = []
    for path in paths:
        if not os.path.exists(path):
            raise LogDirError("no such file or directory", file=path)
        if not os.path.isdir(path):
            out.append(path)
            continue
        names = sorted(os.listdir(path))
        files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))
                 and _suffix(n) in dumpers() and not n.startswith(".lock")]
        subdirs = [os.path.join(path, n) for n in names if os.path.isdir(os.path.join(path, n))
                   and is_partition_dir(os.path.join(path, n))]
        if not files and not subdirs:
            raise LogDirError("no segment, index or checkpoint files in this directory", file=path)
        out.extend(files)
        for d in subdirs:
            out.extend(os.path.join(d, n) for n in sorted(os.listdir(d))
                       if os.path.isfile(os.path.join(d, n)) and _suffix(n) in dumpers())
    return out


@click.command("dump")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--files", "files_opt", default=None, metavar="FILE1,FILE2",
              help="Comma-separated files to dump, as kafka-dump-log.sh's --files (added to PATHS).")
@click.option("--deep-iteration", "--deep", "deep_iteration", is_flag=True,
              help="Iterate records inside batches (kafka-dump-log.sh's --deep-iteration).")
@click.option("--print-data-log", is_flag=True, help="Print keys and payloads (implies "
              "--deep-iteration).")
@click.option("--skip-record-metadata", is_flag=True, help="Omit per-record metadata.")
@click.option("--max-bytes", type=click.IntRange(0), default=None, help="Only read the first N bytes of each "
              ".log file.")
@click.option("--max-message-size", type=click.IntRange(1), default=5 * 1024 * 1024, show_default=True,
              help="Largest batch accepted when reading a raw record set.")
@click.option("--verify-index-only", is_flag=True,
              help="For .index/.timeindex files: only check the entries against the .log and report "
                   "mismatches, without printing the entries.")
@click.option("--index-sanity-check", is_flag=True,
              help="For .index/.timeindex files: run Kafka's index sanity check only.")
@click.option("--records", "as_records", is_flag=True, help="Read every file as a raw record set, "
              "whatever its suffix.")
@click.option("--offsets-decoder", "offsets_decoder_opt", is_flag=True,
              help="Decode the records as __consumer_offsets data (offset commits, group metadata), "
                   "as kafka-dump-log.sh does; implies --print-data-log.")
@click.option("--transaction-log-decoder", "transaction_log_decoder_opt", is_flag=True,
              help="Decode the records as __transaction_state data (transactional ids and their state), "
                   "as kafka-dump-log.sh does; implies --print-data-log.")
@click.option("--share-group-state-decoder", "share_state_decoder_opt", is_flag=True,
              help="Decode the records as __share_group_state data (share partitions' delivery states), "
                   "as kafka-dump-log.sh does; implies --print-data-log.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help=FORMAT_OPTION_HELP)
@click.option("--encoding", type=click.Choice(BYTES_ENCODINGS), default="text", show_default=True,
              help="--format json: keys, values and header values as text (UTF-8, else base64 named "
                   "in keyEncoding/valueEncoding, as consume prints them), base64 or hex.")
def dump(paths, files_opt, deep_iteration, print_data_log, skip_record_metadata, max_bytes,
         max_message_size, verify_index_only, index_sanity_check, as_records, offsets_decoder_opt,
         transaction_log_decoder_opt, share_state_decoder_opt, fmt, encoding) -> None:
    """Print the contents of segment, index, snapshot and checkpoint files (kafka-dump-log.sh).
    PATHS may be files, partition directories or data directories. Exit 1 when damage is found."""
    if offsets_decoder_opt + transaction_log_decoder_opt + share_state_decoder_opt > 1:
        raise click.UsageError("give one of --offsets-decoder, --transaction-log-decoder and "
                               "--share-group-state-decoder")
    from kafkalog.cli.dump_decoders import (
        offsets_decoder,
        share_group_state_decoder,
        transaction_log_decoder,
    )
    decoder = offsets_decoder if offsets_decoder_opt else \
        transaction_log_decoder if transaction_log_decoder_opt else \
        share_group_state_decoder if share_state_decoder_opt else None
    print_data_log = print_data_log or decoder is not None
    opts = DumpOptions(deep_iteration=deep_iteration, print_data_log=print_data_log, decoder=decoder,
                       skip_record_metadata=skip_record_metadata, max_bytes=max_bytes,
                       max_message_size=max_message_size, verify_index_only=verify_index_only,
                       index_sanity_check=index_sanity_check, json=fmt == "json", encoding=encoding,
                       out=sys.stdout, err=sys.stderr)
    given = list(paths) + ([f for f in files_opt.split(",") if f] if files_opt else [])
    if not given:
        raise click.UsageError("give the files to dump (PATHS or --files)")
    try:
        files = expand_paths(given)
    except KafkalogError as e:
        report_error(e, opts.json)
        sys.exit(EXIT_ERROR)
    status = 0
    for path in files:
        fn = dump_records_file if as_records else dumpers().get(_suffix(path))
        if fn is None:      # as kafka-dump-log.sh; --records reads any file as a record set
            if opts.json:
                opts.out.write(json.dumps({"type": "skipped", "file": path, "reason": "unknown file"}) + "\n")
            else:
                opts.err.write(f"Ignoring unknown file {path}\n")
            continue
        if not opts.json:
            opts.out.write(f"Dumping {path}\n")
        try:
            status = max(status, fn(path, opts))
        except BrokenPipeError:
            raise
        except KafkalogError as e:
            status = max(status, EXIT_FINDINGS)
            report_error(e if e.file else e.at(path, 0), opts.json)
        except OSError as e:
            status = max(status, EXIT_ERROR)
            report_error(e, opts.json)
    opts.out.flush()
    sys.exit(status)
