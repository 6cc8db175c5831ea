"""Publishing staged batches into a data directory: all-or-nothing across partitions and crashes.

The driver-side ``commit()`` of a Spark write opens the data directory with the log layer's
:class:`~kafkalog.log.manager.LogManager` (which takes ``.lock``, recovers after an unclean
shutdown, and on close writes the checkpoints and ``.kafka_cleanshutdown``), creates missing topics
with their ``topic.<key>`` configs (persisted by ``LogManager.create_topic``) and appends the
staging files with :meth:`kafkalog.log.log.Log.append_file` (validated like ``Log.append``,
offsets assigned in place, never re-encoded; big files are moved into the log as segments, their
batch headers checked and their payload checksums trusted, see :func:`_append_files`; small ones
copied and checked in full; producer state, indexes, rolls and the recovery point are the log's).

Commit protocol (``<DATA_DIR>/.kafkalog-commit``, a JSON file written atomically: ``.tmp``,
fsync, rename, fsync dir):

1. **Recover** a previous commit that did not finish (see below).
2. Write the intent ``{"state": "appending", "job", "start": [[topic, partition, log end offset]
   ...], "sink": ..., "batchId": ...}`` listing the log end offset of every partition about to be
   appended.
3. Append every partition, then flush each log (data durable); partitions in parallel threads.
   A moved staging file is ``fdatasync``-ed before it is renamed into its partition directory,
   so a crash leaves either the staging file or a complete segment (removed by the rollback).
4. Rewrite the intent with ``"state": "committed"``: **the commit point**.
5. Streaming sink only: record ``batchId`` in ``<DATA_DIR>/.kafkalog-sink-<sink id>``.
6. Delete the intent.

Recovery (on the next commit, :func:`recover_data_dir`, or ``LogManager``-free readers, which
bound their reads): an ``appending`` intent means the commit never reached its commit point, so
every listed partition is truncated back to its start offset (``Log.truncate_to``); a
``committed`` intent means the data is complete, so step 5 is redone (idempotent). In both cases
the intent is then deleted. A failure inside a running commit (an exception, not a crash) rolls
back the same way at once. Readers that find an ``appending`` intent read each listed partition
only up to its start offset, so a half-published commit is never visible.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from kafkalog.errors import KafkalogError
from kafkalog.log import fsutil
from kafkalog.log.manager import LogManager
from kafkalog.log.naming import STAGING_FILE_PREFIX

TopicPartition = Tuple[str, int]

INTENT_FILE = ".kafkalog-commit"
SINK_FILE_PREFIX = ".kafkalog-sink-"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
STAGING_PREFIX = STAGING_FILE_PREFIX
#: staging files older than this (a driver that died before commit/abort) are swept by recovery
STALE_STAGING_SECONDS = 24 * 3600

#: Fault-injection points for crash tests: called with the number of partitions appended so far,
#: and right after the commit point.
_after_partition_append = None
_after_commit_point = None


def profile(phase: str, seconds: float) -> None:
    """Phase timings for benchmarks: appended to the file named by ``$KAFKALOG_SPARK_PROFILE``
    (a no-op when it is not set)."""
    target = os.environ.get("KAFKALOG_SPARK_PROFILE")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(f"{phase} {seconds:.3f}\n")


def staging_prefix(data_dir: str, job_id: str) -> str:
    """``<DATA_DIR>/.kafkalog-staging.<job-id>``: every staging file of the job starts with it."""
    return os.path.join(data_dir, STAGING_PREFIX + job_id)


def staging_files(prefix: str) -> List[str]:
    """The staging files of one job (``<prefix>.<task>.<n>``)."""
    return glob.glob(glob.escape(prefix) + ".*")


def remove_staging(prefix: str) -> int:
    """Delete every staging file of the job of ``prefix``; returns how many were deleted."""
    removed = 0
    for path in staging_files(prefix):
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


def remove_stale_staging(data_dir: str, max_age_s: float = STALE_STAGING_SECONDS) -> int:
    """Delete staging files of any job last modified more than ``max_age_s`` seconds ago (left by
    a driver that died between its tasks and its commit/abort); returns how many."""
    removed = 0
    cutoff = time.time() - max_age_s
    for path in glob.glob(os.path.join(glob.escape(data_dir), STAGING_PREFIX + "*")):
        try:
            if os.stat(path).st_mtime < cutoff:
                os.unlink(path)
                removed += 1
        except OSError:
            pass
    return removed


def intent_path(data_dir: str) -> str:
    return os.path.join(data_dir, INTENT_FILE)


def sink_commit_path(data_dir: str, sink_id: str) -> str:
    """``<DATA_DIR>/.kafkalog-sink-<sink id>``: a regular file at the data-directory root (a
    sink id that is not a safe file-name part is replaced by its hash)."""
    if not _SAFE_NAME.fullmatch(sink_id):
        sink_id = "h" + hashlib.sha256(sink_id.encode("utf-8")).hexdigest()[:32]
    return os.path.join(data_dir, SINK_FILE_PREFIX + sink_id)


def read_intent(data_dir: str) -> Optional[dict]:
    """The pending commit intent of ``data_dir``, or None."""
    try:
        with open(intent_path(data_dir), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise KafkalogError(f"unreadable commit intent: {err}", file=intent_path(data_dir)) from None


def pending_bounds(data_dir: str) -> Dict[TopicPartition, int]:
    """For readers: ``{(topic, partition): offset}`` that reads must stop at, because a commit
    past that offset is still ``appending`` (empty when there is none)."""
    try:
        intent = read_intent(data_dir)
    except KafkalogError:
        return {}
    if not intent or intent.get("state") != "appending":
        return {}
    return {(t, int(p)): int(o) for t, p, o in intent.get("start", [])}


def _write_intent(data_dir: str, intent: dict) -> None:
    fsutil.atomic_write(intent_path(data_dir), json.dumps(intent, sort_keys=True).encode("utf-8"))


def _delete_intent(data_dir: str) -> None:
    if fsutil.delete_if_exists(intent_path(data_dir)):
        fsutil.fsync_dir(data_dir)


def read_committed_batch(path: str) -> int:
    """The last batch id recorded in a sink commit file (-1 when none)."""
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip() or -1)
    except FileNotFoundError:
        return -1


def write_committed_batch(path: str, batch_id: int) -> None:
    fsutil.atomic_write(path, str(batch_id).encode("ascii"))


def _finish_sink(data_dir: str, intent: dict) -> None:
    sink, batch_id = intent.get("sink"), intent.get("batchId")
    if sink is not None and batch_id is not None:
        path = sink_commit_path(data_dir, sink)
        if read_committed_batch(path) < batch_id:
            write_committed_batch(path, batch_id)


def _roll_back(mgr: LogManager, starts: Sequence[Sequence]) -> None:
    for topic, partition, start in starts:
        try:
            log = mgr.get_log(topic, int(partition))
        except KafkalogError:
            continue
        if log.log_end_offset > start:
            log.truncate_to(int(start))
            log.flush(include_active=True)


def recover(mgr: LogManager) -> Optional[str]:
    """Finish or undo the unfinished commit of ``mgr``'s data directory; returns what was done
    (``"rolled back"`` / ``"completed"``) or None when there was nothing to do."""
    remove_stale_staging(mgr.data_dir)
    intent = read_intent(mgr.data_dir)
    if intent is None:
        return None
    if intent.get("state") == "committed":
        _finish_sink(mgr.data_dir, intent)
        done = "completed"
    else:
        _roll_back(mgr, intent.get("start", []))
        done = "rolled back"
    _delete_intent(mgr.data_dir)
    return done


def recover_data_dir(data_dir: str) -> Optional[str]:
    """Open ``data_dir`` (taking its lock) and :func:`recover` it."""
    if read_intent(data_dir) is None:
        return None
    with LogManager(data_dir, background=False) as mgr:
        return recover(mgr)


#: a staging file at least this big (or half the topic's ``segment.bytes``) is moved into the log
#: as a segment of its own; smaller ones are copied into the active segment
MOVE_MIN_BYTES = 16 << 20


def move_threshold(segment_bytes: int) -> int:
    """Size from which a staging file of a topic with this ``segment.bytes`` is moved into the log
    instead of copied (the task drops such a file's data from the page cache as it writes it)."""
    return min(MOVE_MIN_BYTES, max(segment_bytes // 2, 1))


def _append_files(log, paths: Sequence[str]) -> int:
    """Append the batches of staging files to ``log`` with :meth:`Log.append_file
    <kafkalog.log.log.Log.append_file>` (validated and offset-assigned by the log layer, no read
    into Python memory, no re-encoding). Big files are moved into the log as new segments (their
    ``baseOffset`` fields rewritten in place, then ``fdatasync``: no copy, nothing written twice);
    small ones are copied into the active segment. Returns the number of bytes appended.

    A moved file's batch headers are all checked, but not the payload checksums: the job's own
    tasks computed them from the very bytes they wrote, then wrote the data out, dropped it from
    the page cache and read back only the pages that hold batch headers (``ArrowStager``), so the
    commit reads and rewrites those pages and nothing else. A copied file is read anyway, and
    verified in full."""
    total = 0
    move_min = move_threshold(log.segment_bytes)
    for path in paths:
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise KafkalogError(f"staging file missing: {e.strerror}", file=path) from None
        move = size >= move_min
        info = log.append_file(path, move=move, verify_crc=not move)
        if max(info.valid_bytes, 0) != size:
            raise KafkalogError("staging file ends with a partial batch", file=path,
                                position=max(info.valid_bytes, 0))
        total += size
    return total


def _append_partition(log, paths: Sequence[str], result: dict, tp: TopicPartition) -> None:
    """Append the staging files of one partition, then fsync its log (data and indexes)."""
    t0 = time.perf_counter()
    first = log.log_end_offset
    _append_files(log, paths)
    result[tp] = (first, log.log_end_offset)
    t1 = time.perf_counter()
    log.flush(include_active=True)
    profile("commit.append", t1 - t0)
    profile("commit.flush", time.perf_counter() - t1)


def _parallel(fn, items: Sequence, after_each=None) -> None:
    """``fn(item)`` for every item, on up to one thread per CPU (the log appends and fsyncs of
    different partitions are independent; CRC-32C, ``pwrite`` and ``fsync`` release the GIL).
    Returns once every call has finished; then raises the first error, if any."""
    if len(items) <= 1 or (os.cpu_count() or 1) == 1:
        for i, item in enumerate(items):
            fn(item)
            if after_each is not None:
                after_each(i + 1)
        return
    from concurrent.futures import ThreadPoolExecutor, as_completed
    errors = []
    with ThreadPoolExecutor(max_workers=min(len(items), os.cpu_count() or 1)) as pool:
        futures = [pool.submit(fn, item) for item in items]
        for done, fut in enumerate(as_completed(futures), 1):
            err = fut.exception()
            if err is not None:
                errors.append(err)
            elif after_each is not None and not errors:
                after_each(done)
    if errors:
        raise errors[0]


def commit_staged(data_dir: str, staged: Mapping[TopicPartition, List[str]], *, job_id: str,
                  new_topic_partitions: int = 1, topic_config: Optional[Mapping[str, str]] = None,
                  sink: Optional[str] = None, batch_id: Optional[int] = None
                  ) -> Optional[Dict[TopicPartition, Tuple[int, int]]]:
    """Append ``staged`` (``{(topic, partition): [staging file, ...]}``, files in order) to the
    logs of ``data_dir`` atomically; returns ``{tp: (first offset, next offset)}``. With ``sink``
    and ``batch_id``, a batch id at or below the sink's recorded one is a replay: nothing is
    appended and None is returned."""
    os.makedirs(data_dir, exist_ok=True)
    with LogManager(data_dir, background=False) as mgr:
        recover(mgr)
        if sink is not None and batch_id is not None and \
                batch_id <= read_committed_batch(sink_commit_path(data_dir, sink)):
            return None
        for topic in sorted({t for t, _ in staged}):
            if not mgr.has_topic(topic):
                mgr.create_topic(topic, new_topic_partitions, dict(topic_config or {}) or None)
        tps = sorted(tp for tp, files in staged.items() if files)
        logs = {tp: mgr.get_log(*tp) for tp in tps}
        starts = [[t, p, logs[(t, p)].log_end_offset] for t, p in tps]
        intent = {"version": 1, "job": job_id, "state": "appending", "start": starts,
                  "sink": sink, "batchId": batch_id}
        _write_intent(data_dir, intent)
        result: Dict[TopicPartition, Tuple[int, int]] = {}
        try:
            # each partition: append, then fsync at once (its disk writeback overlaps the
            # appends of the other partitions)
            t_append = time.perf_counter()
            _parallel(lambda tp: _append_partition(logs[tp], staged[tp], result, tp), tps,
                      _after_partition_append)
            profile("commit.append+flush", time.perf_counter() - t_append)
            intent["state"] = "committed"
            _write_intent(data_dir, intent)           # the commit point
            if _after_commit_point is not None:
                _after_commit_point()
        except BaseException:
            _roll_back(mgr, starts)
            _delete_intent(data_dir)
            raise
        _finish_sink(data_dir, intent)
        _delete_intent(data_dir)
        return result
