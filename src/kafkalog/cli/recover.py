"""``kafkalog recover PATH``: run the loader's recovery on a data directory or one partition
directory, as after an unclean shutdown, and report as JSON lines what was truncated, deleted or
rebuilt (``type`` = ``truncation`` / ``corruption`` / ``deletedSegment`` / ``deletedFile`` /
``rebuiltIndex`` / ``partition`` / ``summary``).

By default every segment is recovered (recovery point 0); ``--from-recovery-point`` starts at each
partition's checkpointed recovery point, exactly as Kafka does after a crash. A data directory is
locked while it is recovered and is closed cleanly afterwards.

Recovery cuts a partition at its first damaged batch and deletes every later segment, as Kafka's
does on restart; so before anything is changed:

* the cuts are planned read-only (:mod:`kafkalog.log.recovery_plan`); ``--dry-run`` prints that
  plan (``type`` = ``plan``: each cut's file, byte position, bytes and why, the log end offset
  before and after) and changes nothing;
* the bytes to be cut are kept aside: the tail of a truncated segment is copied to
  ``<segment>.log.<position>.truncated`` and a deleted segment's ``.log`` hard-linked there
  (``type`` = ``keptAside``), in the partition directory (Kafka's loader ignores such names) or in
  ``--keep-dir DIR``; ``--discard`` keeps nothing, as Kafka's recovery, and so plans nothing
  (each batch's CRC is checked once, by the recovery; the cuts are read from its report). A
  zero-filled tail (an index preallocation, nothing written) is not kept;
* when complete batches are dropped (offsets below the old log end are gone: damage, not a torn
  last write), one line per partition on stderr says so, and the exit status is 3 (also with
  ``--dry-run``, when they would be). A torn or zero-filled tail, the normal result of a crash, is
  reported and exits 0.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional

import click

from kafkalog.cli.output import EXIT_DATA_DROPPED, emit, format_option, handle_errors, resolve_format, use_format
from kafkalog.cli.paths import data_dir_or_partition_dir, is_partition_dir
from kafkalog.cli.progress import progress_bar, progress_enabled
from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.config import LogConfig, parse_properties
from kafkalog.log.naming import (
    IGNORED_DIRS,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    TopicPartition,
    parse_partition_dir_name,
    topic_config_file,
)

if TYPE_CHECKING:       # the log layer's recovery is imported when the command runs
    from kafkalog.log.recovery_plan import Cut, PartitionPlan

TRUNCATED_SUFFIX = ".truncated"


@dataclass
class Target:
    """One partition directory to recover, with what its recovery depends on."""

    name: str
    path: str
    compacted: bool
    recovery_point: int = 0
    log_start_offset: int = 0

    def plan(self) -> PartitionPlan:
        from kafkalog.log.recovery_plan import plan_partition
        return plan_partition(self.path, compacted=self.compacted, recovery_point=self.recovery_point,
                              log_start_offset=self.log_start_offset)

    def plan_without_cuts(self) -> PartitionPlan:
        """The plan without its cuts, for a recovery that keeps nothing aside (``--discard``):
        the log end offset before it, found without checking a CRC (the recovery checks each
        once; the cuts it made are read from its report, :func:`_cuts_made`)."""
        from kafkalog.log.recovery_plan import PartitionPlan, end_offset_before
        before = end_offset_before(self.path, self.log_start_offset)
        return PartitionPlan(self.path, before, before)


# --- what to recover ------------------------------------------------------------------------------

def _topic_config(data_dir: str, topic: str) -> Optional[LogConfig]:
    path = topic_config_file(data_dir, topic)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return LogConfig(parse_properties(f.read(1 << 20), file=path))


def _partition_target(path: str) -> Target:
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    cfg = None
    try:
        cfg = _topic_config(parent, parse_partition_dir_name(os.path.basename(path)).topic)
    except LogDirError:
        pass                        # a partition directory under another name
    return Target(os.path.basename(path), path, bool(cfg and cfg.compact))


def _data_dir_targets(data_dir: str, from_recovery_point: bool) -> List[Target]:
    """Every partition the data directory's open loads (its ``<topic>-<partition>`` directories
    but the metadata log), with its recovery point (``--from-recovery-point``), log start offset
    and whether it is compacted."""
    data_dir = os.path.abspath(data_dir)
    from kafkalog.log.read.data_dir_view import list_partition_dirs, read_offset_checkpoint
    from kafkalog.log.read.view_files import LocalFiles
    files = LocalFiles()
    points = (read_offset_checkpoint(files, data_dir, RECOVERY_POINT_CHECKPOINT_FILE)
              if from_recovery_point else {})
    starts = read_offset_checkpoint(files, data_dir, LOG_START_OFFSET_CHECKPOINT_FILE)
    configs: Dict[str, Optional[LogConfig]] = {}
    targets = []
    for p in list_partition_dirs(files, data_dir):
        name = os.path.basename(p.path)
        if name in IGNORED_DIRS:
            continue
        if p.topic not in configs:
            configs[p.topic] = _topic_config(data_dir, p.topic)
        cfg = configs[p.topic]
        tp = TopicPartition(p.topic, p.partition)
        targets.append(Target(name, p.path, bool(cfg and cfg.compact), points.get(tp, 0),
                              starts.get(tp, 0)))
    return targets


def _lock_dir(data_dir: str, exclusive: bool) -> int:
    """Take ``data_dir``'s ``.lock`` as kafkalog and Kafka take it (a record lock; shared for a look
    that changes nothing): the descriptor holding it, -1 without a ``.lock``; a directory a process
    holds, this one too (its LogManager, which a record lock does not exclude), is refused."""
    lock = os.path.join(data_dir, LOCK_FILE)
    in_use = LogDirError("the data directory is in use (its .lock is held)", file=lock)
    manager = sys.modules.get("kafkalog.log.manager")   # not imported: no LogManager holds one here
    if manager is not None and manager.locked_in_this_process(data_dir):
        raise in_use
    if not os.path.exists(lock):
        return -1
    fd = os.open(lock, os.O_RDWR if exclusive else os.O_RDONLY)
    try:
        fcntl.lockf(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise in_use from None
    return fd


def _refuse_if_locked(data_dir: str) -> None:
    """A dry run takes no lock, but a directory in use is refused: its active segments change
    under the scan."""
    fd = _lock_dir(data_dir, exclusive=False)
    if fd >= 0:
        os.close(fd)


# --- keeping the cut bytes aside --------------------------------------------------------------------

def _kept_path(cut: Cut, partition: str, keep_dir: Optional[str]) -> str:
    name = f"{os.path.basename(cut.file)}.{cut.position}{TRUNCATED_SUFFIX}"
    if keep_dir is None:
        return os.path.join(os.path.dirname(cut.file), name)
    return os.path.join(keep_dir, f"{partition}.{name}")


def _create_exclusive(path: str) -> tuple[int, str]:
    """A new file at ``path`` (or ``path.1``, ``path.2``... when taken): never overwrites."""
    for n in range(1000):
        candidate = path if n == 0 else f"{path}.{n}"
        try:
            return os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), candidate
        except FileExistsError:
            continue
    raise LogDirError("too many kept files of this name", file=path)


def keep_aside(cut: Cut, partition: str, keep_dir: Optional[str]) -> str:
    """Save the bytes ``cut`` removes; returns the file holding them (synced, directory synced).
    A segment recovery deletes is hard-linked (deletion only unlinks its name); a truncated
    segment's tail is copied (truncation changes the file in place)."""
    from kafkalog.log import fsutil
    dest = _kept_path(cut, partition, keep_dir)
    if cut.kind == "deleted":               # (a truncated file changes in place: copied)
        try:
            os.link(cut.file, dest)          # a whole segment about to be deleted: no copy
            fsutil.fsync_dir(os.path.dirname(dest))
            return dest
        except FileExistsError:
            pass
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise fsutil.io_error(e, dest, "link") from e
    out, dest = _create_exclusive(dest)
    try:
        with fsutil.wrap_os_errors(dest, "keep the cut bytes in"), open(cut.file, "rb") as src:
            left = cut.bytes
            src.seek(cut.position)
            while left > 0:
                chunk = src.read(min(left, 1 << 20))
                if not chunk:
                    break
                os.write(out, chunk)
                left -= len(chunk)
            os.fsync(out)
    finally:
        os.close(out)
    fsutil.fsync_dir(os.path.dirname(dest))
    return dest


# --- reporting ----------------------------------------------------------------------------------

def _emit_report(name: str, report: Any) -> dict:
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
    return summary


def _cuts_made(report: Any) -> List[Cut]:
    """The cuts a recovery made, from its report, in the plan's order and kinds (truncations that
    removed bytes, then deleted segments)."""
    from kafkalog.log.recovery_plan import Cut
    cuts = [Cut(str(t["file"]), int(t["position"]), int(t["position"]) + int(t["bytes"]), str(t["kind"]),
                str(t.get("reason") or "")) for t in report.truncations if t.get("bytes")]
    cuts += [Cut(str(d["file"]), 0, int(d["sizeInBytes"]), "deleted", str(d.get("reason") or ""))
             for d in report.deleted_segments]
    return cuts


def _unplanned(report: Any, kept: Dict[str, tuple[int, str]]) -> List[tuple[str, int]]:
    """Cuts recovery made that no kept file covers (the plan and the loader disagree)."""
    return [(c.file, c.position) for c in _cuts_made(report) if c.file not in kept or kept[c.file][0] > c.position]


def _loud(partition: str, plan: PartitionPlan, kept: List[str], dry_run: bool) -> None:
    first = next((c for c in plan.cuts if c.kind != "zero-filled-tail"), None)
    where = f" at {os.path.basename(first.file)} byte {first.position} ({first.kind})" if first else ""
    verb = "WOULD DROP" if dry_run else "DROPPED"
    kept_text = ("" if dry_run else "; the cut bytes were not kept (--discard)" if not kept else
                 f"; the cut bytes are kept in {kept[0]}" if len(kept) == 1 else
                 f"; the cut bytes are kept in {len(kept)} files ({kept[0]} ...)")
    sys.stderr.write(f"kafkalog recover: {verb} offsets {plan.log_end_offset}.."
                     f"{plan.log_end_offset_before - 1} ({plan.dropped_offsets:,} offsets, "
                     f"{plan.cut_bytes:,} bytes) of {partition}{where}{kept_text}\n")


# --- the command --------------------------------------------------------------------------------

def _recover_partition(target: Target) -> Any:
    from kafkalog.log.log import Log
    parent = os.path.dirname(target.path)
    fd = _lock_dir(parent, exclusive=True)
    try:
        cfg = _topic_config(parent, parse_partition_dir_name(target.name).topic) \
            if _is_partition_name(target.name) else None
        log = Log.open(target.path, cfg, recovery_point=0, had_clean_shutdown=False)
        try:
            return log.recovery_report
        finally:
            log.close()
    finally:
        if fd >= 0:
            os.close(fd)


def _is_partition_name(name: str) -> bool:
    try:
        parse_partition_dir_name(name)
        return True
    except KafkalogError:
        return False


def _recover_data_dir(path: str, from_recovery_point: bool, no_progress: bool) -> Dict[str, Any]:
    from kafkalog.log.manager import LogManager
    names = [n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))]
    with progress_bar(len(names), "recovering", enabled=progress_enabled(no_progress)) as bar:
        m = LogManager(path, background=False,
                       recovery="unclean" if from_recovery_point else "full",
                       progress=lambda done, total, name: bar.advance(1, name))
    try:
        for d in m.load_result.deleted_dirs:
            emit({"type": "deletedDir", "dir": d})
        for skipped in m.load_result.skipped_dirs:
            emit({"type": "skipped", **skipped})
        return dict(m.load_result.recovery_reports)
    finally:
        m.close()


def _keep(targets: Iterable[Target], plans: Dict[str, PartitionPlan], keep_dir: Optional[str]
          ) -> Dict[str, Dict[str, tuple[int, str]]]:
    """Keep aside every planned cut (but zero-filled tails): ``{partition: {file: (position,
    kept in)}}``."""
    if keep_dir is not None:
        os.makedirs(keep_dir, exist_ok=True)
    kept: Dict[str, Dict[str, tuple[int, str]]] = {}
    for t in targets:
        for cut in plans[t.name].cuts:
            if cut.kind == "zero-filled-tail" or cut.bytes <= 0:
                continue
            dest = keep_aside(cut, t.name, keep_dir)
            kept.setdefault(t.name, {})[cut.file] = (cut.position, dest)
            emit({"type": "keptAside", "partition": t.name, "file": cut.file, "position": cut.position,
                  "bytes": cut.bytes, "keptIn": dest})
    return kept


@click.command("recover")
@click.argument("path", type=click.Path())
@click.option("--from-recovery-point", is_flag=True,
              help="Start at each partition's checkpointed recovery point (Kafka's crash recovery) "
                   "instead of recovering every segment.")
@click.option("--dry-run", is_flag=True,
              help="Print what recovery would cut (file, byte position, bytes, why) and change nothing.")
@click.option("--keep-dir", type=click.Path(file_okay=False), default=None,
              help="Keep the cut bytes in this directory instead of beside each segment "
                   "(<segment>.log.<position>.truncated).")
@click.option("--discard", is_flag=True, help="Keep nothing of what is cut (Kafka's recovery).")
@click.option("--no-progress", is_flag=True, help="Never draw a progress bar.")
@format_option()
@handle_errors()
def recover(path: str, from_recovery_point: bool, dry_run: bool, keep_dir: Optional[str],
            discard: bool, no_progress: bool, fmt: Optional[str]) -> None:
    """Recover PATH (a data dir or a partition dir) as after an unclean shutdown."""
    use_format(resolve_format(fmt))
    if discard and keep_dir is not None:
        raise click.UsageError("--discard and --keep-dir are exclusive")
    data_dir_or_partition_dir(path)
    single = is_partition_dir(path)
    targets = [_partition_target(path)] if single else _data_dir_targets(path, from_recovery_point)
    _refuse_if_locked(os.path.dirname(os.path.abspath(path)) if single else path)
    # --discard keeps nothing aside: the plan's CRC walk would check every batch a second time
    light = discard and not dry_run
    plans: Dict[str, PartitionPlan] = {}
    with progress_bar(len(targets), "planning", enabled=progress_enabled(no_progress) and not light) as bar:
        for t in targets:
            plans[t.name] = t.plan_without_cuts() if light else t.plan()
            bar.advance(1, f"planning {t.name}")
    if dry_run:
        _report_plan(targets, plans)
        return
    kept: Dict[str, Dict[str, tuple[int, str]]] = {} if discard else _keep(targets, plans, keep_dir)
    if single:
        reports = {targets[0].name: _recover_partition(targets[0])}
    else:
        reports = _recover_data_dir(path, from_recovery_point, no_progress)
    from kafkalog.log.recovery_plan import PartitionPlan
    totals = {"partitions": 0, "truncatedBytes": 0, "deletedSegments": 0, "droppedOffsets": 0,
              "keptAside": sum(len(v) for v in kept.values()), "clean": True}
    dropped = False
    for name, report in sorted(reports.items()):
        plan = plans.get(name) or PartitionPlan(str(report.dir), report.log_end_offset,
                                                report.log_end_offset)
        s = _emit_report(name, report)
        plan.log_end_offset = report.log_end_offset          # what recovery did
        if discard:
            plan.cuts = _cuts_made(report)
        s["logEndOffsetBefore"] = plan.log_end_offset_before
        s["droppedOffsets"] = plan.dropped_offsets
        for f, p in _unplanned(report, kept.get(name, {})) if not discard else []:
            emit({"type": "unplanned", "partition": name, "file": f, "position": p})
            sys.stderr.write(f"kafkalog recover: {f} was cut at byte {p}, which the plan did not "
                             f"foresee: those bytes were not kept\n")
        emit(s)
        totals["partitions"] += 1
        totals["truncatedBytes"] += s["truncatedBytes"]
        totals["deletedSegments"] += s["deletedSegments"]
        totals["droppedOffsets"] += s["droppedOffsets"]
        totals["clean"] = totals["clean"] and s["clean"]
        if plan.dropped_offsets:
            dropped = True
            _loud(name, plan, [dest for _p, dest in kept.get(name, {}).values()], dry_run=False)
    emit({"type": "summary", **totals})
    if dropped:
        sys.stdout.flush()
        sys.exit(EXIT_DATA_DROPPED)


def _report_plan(targets: List[Target], plans: Dict[str, PartitionPlan]) -> None:
    totals = {"partitions": len(targets), "cutBytes": 0, "droppedOffsets": 0}
    dropped = False
    for t in targets:
        plan = plans[t.name]
        emit({"type": "plan", "partition": t.name, **plan.to_json()})
        totals["cutBytes"] += plan.cut_bytes
        totals["droppedOffsets"] += plan.dropped_offsets
        if plan.dropped_offsets:
            dropped = True
            _loud(t.name, plan, [], dry_run=True)
    emit({"type": "summary", "dryRun": True, **totals})
    if dropped:
        sys.stdout.flush()
        sys.exit(EXIT_DATA_DROPPED)
