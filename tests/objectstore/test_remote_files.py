"""A data directory in S3 (moto's server on 127.0.0.1, reached through pyarrow.fs): listing,
whole index reads, ranged .log reads located through the .index; and the clear refusal of
writes to object storage."""

from __future__ import annotations

import os

import pytest

import kafkalog
from kafkalog.log.index.offset_index import OffsetIndex
from kafkalog.log.read.ranged_read import ChunkedBatches, byte_range
from kafkalog.log.read.walk import walk_batches
from kafkalog.tiered.filesystem import resolve

RECORDS = 20_000


@pytest.fixture(scope="module")
def remote_logs(s3_server, tmp_path_factory):
    local = tmp_path_factory.mktemp("logs")
    with kafkalog.open(local, {"log.segment.bytes": 100_000}, background=False) as dl:
        dl.create_topic("orders", partitions=2)
        for p in range(2):
            dl.produce_many("orders", [b"order-%06d" % i for i in range(RECORDS)], partition=p,
                            batch_size=1000)
    return local, s3_server.upload(local, "kafka", "cluster-a/logs")


def _entries(files, partition_dir: str, base: int) -> list:
    data = files.read_small(files.join(partition_dir, f"{base:020d}.index")) or b""
    local = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kafkalog-test-{os.getpid()}.index")
    with open(local, "wb") as f:
        f.write(data)
    idx = OffsetIndex.open_read_only(local, base)
    try:
        n = idx.entries - idx.zero_filled_tail_entries()
        return [(idx.entry(i).offset, idx.entry(i).position) for i in range(n)]
    finally:
        idx.close_handler()
        os.unlink(local)


def test_listing_and_ranged_reads_through_the_index(s3_server, remote_logs):
    local, uri = remote_logs
    files = resolve(uri, s3_server.options)
    names = {e.name for e in files.entries(uri) if e.is_dir}
    assert names == {"orders-0", "orders-1"}
    segments = sorted((e.name, e.size) for e in files.entries(files.join(uri, "orders-0"))
                      if e.name.endswith(".log"))
    assert len(segments) > 3  # several segments: the read must pick the right one
    assert [(n, s) for n, s in segments] == sorted(
        (n, os.path.getsize(local / "orders-0" / n)) for n in os.listdir(local / "orders-0")
        if n.endswith(".log"))

    # a point read: 10 records in the middle of a segment fetch one index interval of .log
    name, size = segments[2]
    base = int(name[:-4])
    entries = _entries(files, files.join(uri, "orders-0"), base)
    start = base + 100
    lo, hi = byte_range(entries, size, start, start + 10)
    s3_server.counts.reset()
    path = files.join(files.join(uri, "orders-0"), name)
    with files.ranges(path) as read:
        got = [o for _pos, buf in ChunkedBatches(read, lo, hi, path)
               for b in walk_batches(buf) for o in range(b.base_offset, b.last_offset + 1)]
    assert set(range(start, start + 10)) <= set(got)
    assert s3_server.counts.get_bytes == hi - lo <= 2 * 4096 + 1000  # ~one index interval
    assert [r[2] for r in s3_server.counts.gets(name)] == [f"bytes={lo}-{hi - 1}"]

    # a full scan of the segment: large ranged requests, every batch once, CRCs valid
    s3_server.counts.reset()
    with files.ranges(path) as read:
        batches = [b for _pos, buf in ChunkedBatches(read, 0, size, path, chunk_bytes=64 << 10)
                   for b in walk_batches(buf)]
    for b in batches:
        b.ensure_valid()
    assert batches[0].base_offset == base
    assert s3_server.counts.get_bytes == size
    assert len(s3_server.counts.gets(name)) == -(-size // (64 << 10))
    assert len([r for r in s3_server.counts.requests if r[0] == "HEAD"]) == 1
