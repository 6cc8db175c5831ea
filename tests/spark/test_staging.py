"""The task side of a Spark write without Spark: staging files, drop-behind, and the commit's
trusted move of those files (headers read and rewritten, payload never read back)."""

from __future__ import annotations

import os
import time

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.log.log import Log
from kafkalog.record.constants import RECORD_BATCH_OVERHEAD
from kafkalog.spark import writer
from kafkalog.spark.commit import commit_staged
from kafkalog.spark.options import parse_write_options
from kafkalog.spark.writer import staged_by_partition
from tests.pagecache import PAGE, require_eviction, resident


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(RECORD_BATCH_OVERHEAD, 300_000), st.booleans()),
                min_size=1, max_size=60),
       st.integers(0, 4 << 20))
def test_drop_behind_evicts_what_was_written_and_reads_back_every_header(batches, move_min):
    """Whatever the batch sizes and sync points: nothing is dropped below ``move_min``; past it,
    every whole page written is dropped exactly once, or left cached where batches are too small;
    and every header of a dropped page is read back."""
    staging = writer._OpenStaging(("t", 0), -1, "f", move_min=move_min)
    drops, reloads, positions = [], [], []
    for size, sync in batches:
        positions.append(staging.size)
        staging.headers.append(staging.size)
        staging.size += size
        if sync:
            drop, reload = staging.take_drop_behind()
            if staging.size < move_min:
                assert not drop and not reload
            drops += drop
            reloads += reload
    drop, reload = staging.take_drop_behind()     # the release
    drops += drop
    reloads += reload
    page = writer._PAGE
    prev = 0
    for a, b in drops:
        assert a % page == 0 and b % page == 0 and prev <= a < b <= staging.size
        prev = b
    dropped = lambda h: any(a <= h < b for a, b in drops)   # noqa: E731
    assert reloads == [(h, h + RECORD_BATCH_OVERHEAD) for h in positions if dropped(h)]
    if staging.size >= move_min:
        assert staging.dropped_to == staging.size - staging.size % page
        if all(size >= writer.DROP_MIN_BATCH for size, _ in batches):
            assert prev == staging.dropped_to      # everything whole was dropped


def _stage(data_dir, job, values, segment_bytes, batch_size=256 << 10):
    opts = parse_write_options({"path": data_dir, "topic": "t", "partitions": "1",
                                "topic.segment.bytes": str(segment_bytes),
                                "kafka.batch.size": str(batch_size)})
    stager = writer.ArrowStager(opts, writer.staging_prefix(data_dir, job), "task")
    for chunk in range(0, len(values), 5000):
        stager.add_batch(pa.record_batch({"value": pa.array(values[chunk:chunk + 5000])}))
    return stager.finish()


def test_big_staging_files_keep_only_their_header_pages_cached(tmp_path):
    """A staging file big enough to be moved at commit leaves the page cache as it is written,
    but for the pages of its batch headers (read back: all the commit reads); a small one, copied
    at commit, stays cached. The commit then publishes every record of both."""
    require_eviction(str(tmp_path))
    data = str(tmp_path)
    values = [b"%07d" % i + os.urandom(200) for i in range(40_000)]       # ~8.5 MB
    big = _stage(data, "big", values, segment_bytes=16 << 20)             # moved from 8 MiB
    small = _stage(data, "small", values[:2000], segment_bytes=16 << 20)  # ~0.4 MB: copied
    (big_file,), (small_file,) = big.files, small.files
    time.sleep(0.2)                                    # (the header read-back is asynchronous)
    pages = resident(big_file.path)
    with open(big_file.path, "rb") as f:
        raw = f.read()
    headers, pos = [], 0
    while pos < len(raw):
        headers.append(pos)
        pos += int.from_bytes(raw[pos + 8:pos + 12], "big") + 12
    hot = {p for h in headers for p in (h // PAGE, (h + RECORD_BATCH_OVERHEAD - 1) // PAGE)}
    assert len(headers) > 20 and all(pages[p] for p in hot if p < len(pages))
    cold = [p for p in range(len(pages) - 1) if p not in hot]
    assert sum(pages[p] for p in cold) <= 2, "staged data left in the page cache"
    assert all(resident(small_file.path))
    inode = os.stat(big_file.path).st_ino
    commit_staged(data, staged_by_partition([big, small]), job_id="j", new_topic_partitions=1,
                  topic_config={"segment.bytes": str(16 << 20)})
    with Log.open(os.path.join(data, "t-0"), {"segment.bytes": 16 << 20}) as log:
        got = [r.value for r in log.records()]
        (segment,) = log.segments                      # the small file was copied into it
        assert os.stat(segment.log.path).st_ino == inode   # the big file became the segment
    assert got == values + values[:2000]
