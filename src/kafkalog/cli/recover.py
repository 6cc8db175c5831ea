"""``kafkalog recover PATH``: run the loader's recovery on a data directory or one partition
directory, as after an unclean shutdown, and report as JSON lines what was truncated, deleted or
rebuilt (``type`` = ``truncation`` / ``corruption`` / ``deletedSegment`` / ``deletedFile`` /
``rebuiltIndex`` / ``partition`` / ``summary``).

By default every segment is recovered (recovery point 0); ``--from-recovery-point`` starts at each
partition's checkpointed recovery point, exactly as Kafka does after a crash. A data directory is
locked while it is recovered and is closed cleanly afterwards.
"""

from __future__ import annotations

import fcntl
import os

import click

from kafkalog.cli.output import emit, handle_errors
from kafkalog.cli.paths import data_dir_or_partition_dir, is_partition_dir
from kafkalog.cli.progress import progress_bar, progress_enabled
from kafkalog.errors import LogDirError
from kafkalog.log.log import Log


def _emit_report(name: str, report) -> dict:
    r = report.to_json()
    for t in r["truncations"]:
        emit({"type": "truncation", "partition": name, **t})
    for c in r["corruptions"]:
        emit({"type": "corruption", "partition": name, **c})
    for d in r["deletedSegments"]:
        emit({"type": "deletedSegment", "partition": name, **d})
    for f in r["deletedFiles"]:
        emit({"type": "deletedFile", "partition": name, "file": f})
    for i in r["rebuiltIndexes"]:
        emit({"type": "rebuiltIndex", "partition": name, **i})
    summary = {"type": "partition", "partition": name, "dir": r["dir"],
               "recoveredSegments": len(r["recoveredSegments"]),
               "truncatedBytes": sum(t.get("bytes", 0) or 0 for t in r["truncations"]),
               "deletedSegments": len(r["deletedSegments"]), "logEndOffset": r["logEndOffset"],
               "recoveryPoint": r["recoveryPoint"], "clean": report.clean}
    emit(summary)
    return summary


def _recover_partition(path: str) -> dict:
    parent = os.path.dirname(os.path.abspath(path))
    lock = os.path.join(parent, ".lock")
    fd = -1
    if os.path.exists(lock):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirError("the data directory is in use (its .lock is held)", file=lock) from None
    try:
        cfg = None
        topic_cfg = None
        try:
            from kafkalog.log.config import LogConfig, parse_properties
            from kafkalog.log.naming import parse_partition_dir_name, topic_config_file
            topic = parse_partition_dir_name(path).topic
            topic_cfg = topic_config_file(parent, topic)
            if os.path.exists(topic_cfg):
                with open(topic_cfg, encoding="utf-8") as f:
                    cfg = LogConfig(parse_properties(f.read(1 << 20), file=topic_cfg))
        except LogDirError:
            pass
        log = Log.open(path, cfg, recovery_point=0, had_clean_shutdown=False)
        try:
            return _emit_report(os.path.basename(os.path.abspath(path)), log.recovery_report)
        finally:
            log.close()
    finally:
        if fd >= 0:
            os.close(fd)


@click.command("recover")
@click.argument("path", type=click.Path())
@click.option("--from-recovery-point", is_flag=True,
              help="Start at each partition's checkpointed recovery point (Kafka's crash recovery) "
                   "instead of recovering every segment.")
@click.option("--no-progress", is_flag=True, help="Never draw a progress bar.")
@handle_errors()
def recover(path: str, from_recovery_point: bool, no_progress: bool) -> None:
    """Recover PATH (a data dir or a partition dir) as after an unclean shutdown."""
    data_dir_or_partition_dir(path)
    if is_partition_dir(path):
        s = _recover_partition(path)
        emit({"type": "summary", "partitions": 1, "truncatedBytes": s["truncatedBytes"],
              "deletedSegments": s["deletedSegments"], "clean": s["clean"]})
        return
    from kafkalog.log.manager import LogManager
    names = [n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))]
    with progress_bar(len(names), "recovering", enabled=progress_enabled(no_progress)) as bar:
        m = LogManager(path, background=False,
                       recovery="unclean" if from_recovery_point else "full",
                       progress=lambda done, total, name: bar.advance(1, name))
    try:
        totals = {"partitions": 0, "truncatedBytes": 0, "deletedSegments": 0, "clean": True}
        for name, report in sorted(m.load_result.recovery_reports.items()):
            s = _emit_report(name, report)
            totals["partitions"] += 1
            totals["truncatedBytes"] += s["truncatedBytes"]
            totals["deletedSegments"] += s["deletedSegments"]
            totals["clean"] = totals["clean"] and s["clean"]
        for d in m.load_result.deleted_dirs:
            emit({"type": "deletedDir", "dir": d})
        for skipped in m.load_result.skipped_dirs:
            emit({"type": "skipped", **skipped})
    finally:
        m.close()
    emit({"type": "summary", **totals})
