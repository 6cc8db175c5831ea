"""``kafkalog verify PATH``: strictly read-only integrity check of a data directory, a partition
directory or one segment file.

Every batch is checked (size, magic, CRC, offsets increasing, record count); with ``--deep`` every
record is decoded too. Every ``.index`` / ``.timeindex`` entry is checked against the data
(Kafka's DumpLogSegments rules plus zero-filled tails and ordering), ``.txnindex`` entries for
sanity. Output: JSON lines (``type`` = ``finding`` / ``moreFindings`` / ``segment`` / ``summary``):
at most ``--max-findings`` (100) findings of a file are printed, the rest counted in one
``moreFindings`` line (a random 8 MB index has two million); exit code 1 when any error was found,
2 on bad input (e.g. a missing path), 0 otherwise.

A crash leaves the active (last) segment of each partition with tails Kafka's recovery removes on
the next open: its ``.index`` and ``.timeindex`` preallocated and zero-filled past the last entry
(trimmed at a roll or a clean close), and possibly a batch cut short by the crash at the end of the
``.log`` (an append in flight, never acknowledged). When the partition's data directory (its
parent, holding ``meta.properties``) has no ``.kafka_cleanshutdown``, the next open recovers, and
those tails of the active segment are warnings; after a clean shutdown (the next open trusts the
files), in a partition directory outside a data directory (whose shutdown verify cannot know) and
in any other segment they are errors.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Set, Tuple

import click

from kafkalog.cli.output import EXIT_FINDINGS, EXIT_OK, emit, format_option, handle_errors, resolve_format
from kafkalog.cli.paths import data_dir_or_partition_dir
from kafkalog.cli.progress import progress_bar, progress_enabled
from kafkalog.cli.segment_check import (
    MAX_FINDINGS_PER_FILE,
    Finding,
    FindingList,
    check_offset_index,
    check_time_index,
    read_txn_index,
    scan_log,
)
from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.naming import CLEAN_SHUTDOWN_FILE, META_PROPERTIES_FILE, parse_partition_dir_name

_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
#: the findings that recovery removes from the active segment after an unclean shutdown
_CRASH_TAILS = frozenset({"partial-tail", "zero-filled-tail", "index-past-tail"})
_CRASH_TAIL_NOTE = ("; expected in the active segment after an unclean shutdown: the next open's "
                    "recovery truncates it")
#: KRaft's metadata log: Kafka opens it as after an unclean shutdown, always
CLUSTER_METADATA_DIR = "__cluster_metadata-0"


def mark_crash_tails(findings: List[Finding]) -> None:
    """The crash tails among ``findings`` (of a segment the next open recovers) become warnings."""
    for f in findings:
        if f.check in _CRASH_TAILS and f.level == "error":
            f.level = "warning"
            f.message += _CRASH_TAIL_NOTE


def _segments_of_dir(d: str) -> List[str]:
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log")
                  and n.split(".")[0].isdigit())


def collect_segments(path: str) -> Tuple[List[str], List[dict]]:
    """The ``.log`` files under ``path`` and notes about what was skipped."""
    notes: List[dict] = []
    if os.path.isfile(path):
        if path.endswith(".log"):
            return [path], notes
        for suf in _INDEX_SUFFIXES:
            if path.endswith(suf):
                return [path[: -len(suf)] + ".log"], notes
        raise LogDirError("not a segment file (.log, .index, .timeindex or .txnindex)", file=path)
    if not os.path.isdir(path):
        raise LogDirError("no such file or directory", file=path)
    data_dir_or_partition_dir(path)
    segs = _segments_of_dir(path)
    if segs:
        return segs, notes
    out: List[str] = []
    for name in sorted(os.listdir(path)):
        sub = os.path.join(path, name)
        if not os.path.isdir(sub):
            continue
        try:
            parsed = parse_partition_dir_name(name)
        except KafkalogError as e:
            notes.append({"type": "skipped", "dir": sub, "reason": e.message})
            continue
        if parsed.kind:
            notes.append({"type": "skipped", "dir": sub, "reason": f"{parsed.kind} directory"})
            continue
        out.extend(_segments_of_dir(sub))
    return out, notes


def unclean_active_segments(segments: List[str]) -> Set[str]:
    """The last ``.log`` of each partition directory among ``segments`` whose data directory (the
    partition directory's parent, holding ``meta.properties``) has no ``.kafka_cleanshutdown``:
    the next open recovers them; and the last of ``__cluster_metadata-0``, KRaft's metadata log,
    which Kafka recovers at every start (its clean shutdown leaves the indexes preallocated).
    (Segment names are zero-padded base offsets: the last in name order is the active one.)"""
    out: Set[str] = set()
    for d in {os.path.dirname(os.path.abspath(s)) for s in segments}:
        data_dir = os.path.dirname(d)
        if (os.path.exists(os.path.join(data_dir, META_PROPERTIES_FILE))
                and (not os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN_FILE))
                     or os.path.basename(d) == CLUSTER_METADATA_DIR)):
            logs = _segments_of_dir(d)
            if logs:
                out.add(logs[-1])
    return out


def verify_segment(log_path: str, deep: bool = False, unclean_active: bool = False,
                   max_findings: Optional[int] = MAX_FINDINGS_PER_FILE
                   ) -> Tuple[dict, List[dict], List[dict]]:
    """Check one segment and its indexes; returns (segment summary, findings as JSON, one
    ``moreFindings`` line per file with findings beyond ``max_findings``).
    ``unclean_active``: the segment is the active one of a log the next open recovers, whose tails
    (:data:`_CRASH_TAILS`) are warnings."""
    findings: List[dict] = []
    more: List[dict] = []

    def add(found: FindingList, path: str) -> None:
        findings.extend(f.to_json() for f in found)
        if found.more_count:
            more.append({"type": "moreFindings", "file": path, "count": found.more_count,
                         "errors": found.more.get("error", 0), "warnings": found.more.get("warning", 0)})

    scan = None
    if os.path.exists(log_path):
        scan = scan_log(log_path, deep=deep, max_findings=max_findings)
        add(scan.findings, log_path)
    else:
        findings.append({"level": "error", "check": "missing-log", "file": log_path, "position": None,
                         "message": "index files without their .log"})
    stem = log_path[:-4]
    checked = []
    if os.path.exists(stem + ".index"):
        add(check_offset_index(stem + ".index", scan, max_findings).findings, stem + ".index")
        checked.append(".index")
    if os.path.exists(stem + ".timeindex"):
        add(check_time_index(stem + ".timeindex", scan, max_findings).findings, stem + ".timeindex")
        checked.append(".timeindex")
    if os.path.exists(stem + ".txnindex"):
        add(read_txn_index(stem + ".txnindex", max_findings)[1], stem + ".txnindex")
        checked.append(".txnindex")
    if unclean_active:
        for f in findings:
            if f["check"] in _CRASH_TAILS:
                f["level"] = "warning"
                f["message"] += _CRASH_TAIL_NOTE
    errors = sum(1 for f in findings if f["level"] == "error") + sum(m["errors"] for m in more)
    seg = {"type": "segment", "file": log_path,
           "baseOffset": scan.base_offset if scan else None,
           "nextOffset": scan.next_offset if scan else None,
           "batches": len(scan.batches) if scan else 0,
           "sizeInBytes": scan.size if scan else 0, "validBytes": scan.valid_bytes if scan else 0,
           "indexesChecked": checked, "errors": errors, "ok": errors == 0}
    return seg, findings, more


def _text_line(obj: dict) -> None:
    """The text form of one verify line."""
    kind = obj["type"]
    if kind == "finding":
        where = obj.get("file") or ""
        if obj.get("position") is not None:
            where += f" at byte {obj['position']}"
        click.echo(f"{obj['level'].upper()} {where}: {obj['message']}")
    elif kind == "moreFindings":
        click.echo(f"... and {obj['count']:,} more findings in {obj['file']} (--max-findings 0 "
                   f"prints them all)")
    elif kind == "segment":
        state = "ok" if obj["ok"] else f"{obj['errors']} error(s)"
        click.echo(f"{obj['file']}: {obj['batches']} batches, offsets {obj['baseOffset']}.."
                   f"{obj['nextOffset']}, {state}")
    elif kind == "skipped":
        click.echo(f"skipped {obj['dir']}: {obj['reason']}")
    elif kind == "summary":
        state = "ok" if obj["ok"] else "DAMAGED"
        click.echo(f"{obj['path']}: {state}: {obj['segments']} segments, {obj['batches']} batches, "
                   f"{obj['errors']} errors, {obj['warnings']} warnings")


@click.command("verify")
@click.argument("path", type=click.Path())
@click.option("--deep", is_flag=True, help="Also decode every record of every batch.")
@click.option("--quiet", is_flag=True, help="Print only findings and the summary.")
@click.option("--no-progress", is_flag=True, help="Never draw a progress bar.")
@click.option("--max-findings", type=click.IntRange(0), default=MAX_FINDINGS_PER_FILE, show_default=True,
              help="Findings printed per file; the rest are counted in one 'moreFindings' line "
                   "(0: print them all).")
@format_option()
@handle_errors()
def verify(path: str, deep: bool, quiet: bool, no_progress: bool, max_findings: int,
           fmt: Optional[str]) -> None:
    """Check every batch and index entry under PATH (a data directory, a partition directory or a
    segment file), changing nothing. Exit 1 when damage is found, 2 when PATH is not a log.
    The tails a crash leaves in a partition's active segment (a preallocated index's zeros, a cut
    last batch) are warnings when its data directory has no .kafka_cleanshutdown: the next open
    recovers them."""
    fmt = resolve_format(fmt)
    segments, notes = collect_segments(path)
    unclean = unclean_active_segments(segments)
    out = emit if fmt == "json" else _text_line
    for n in notes:
        out(n)
    totals: Dict[str, int] = {"segments": 0, "batches": 0, "errors": 0, "warnings": 0}
    with progress_bar(len(segments), "verifying", enabled=progress_enabled(no_progress)) as bar:
        for log_path in segments:
            seg, findings, more = verify_segment(log_path, deep, os.path.abspath(log_path) in unclean,
                                                 max_findings or None)
            for f in findings:
                out({"type": "finding", **f})
            for m in more:
                out(m)
            if not quiet:
                out(seg)
            totals["segments"] += 1
            totals["batches"] += seg["batches"]
            totals["errors"] += seg["errors"]
            totals["warnings"] += (sum(1 for f in findings if f["level"] == "warning")
                                   + sum(m["warnings"] for m in more))
            bar.advance(1)
    out({"type": "summary", "path": os.path.abspath(path), **totals, "ok": totals["errors"] == 0})
    raise SystemExit(EXIT_FINDINGS if totals["errors"] else EXIT_OK)
