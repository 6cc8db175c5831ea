"""Scanning a segment in S3 (moto's server on 127.0.0.1, through pyarrow.fs) in large ranged
requests with several prefetched: the same batches as a sequential read and as the local file,
never more chunks in flight than the limit (counted by the reader and checked against the calls
the server answered), clear errors when the object is truncated or deleted mid-scan, and reads up
to an end offset asking only for the bytes the .index says hold it."""

from __future__ import annotations

import os

import pytest

import kafkalog
from kafkalog.errors import KafkalogIOError
from kafkalog.log.read.partition_view import PartitionView
from kafkalog.log.read.ranged_read import ChunkedBatches
from kafkalog.log.read.walk import walk_batches
from kafkalog.tiered.filesystem import resolve

RECORDS = 20_000
CHUNK = 32 << 10


@pytest.fixture(scope="module")
def remote_logs(s3_server, tmp_path_factory):
    local = tmp_path_factory.mktemp("logs")
    with kafkalog.open(local, {"log.segment.bytes": 600_000}, background=False) as dl:
        dl.create_topic("orders", partitions=1)
        dl.produce_many("orders", [b"order-%06d" % i + b"." * 40 for i in range(RECORDS)],
                        partition=0, batch_size=500)
    return local, s3_server.upload(local, "kafka", "prefetch/logs")


def _segment(local, uri):
    names = sorted(n for n in os.listdir(local / "orders-0") if n.endswith(".log"))
    assert len(names) >= 2
    name = names[0]
    return local / "orders-0" / name, f"{uri}/orders-0/{name}", name


def _remote_segment(s3_server, remote_logs):
    """(files, path, name, size) of the first segment in S3."""
    local, uri = remote_logs
    _local_path, path, name = _segment(local, uri)
    files = resolve(uri, s3_server.options)
    size = files.size(path)
    assert size is not None
    return files, path, name, size


def _records(chunks) -> list:
    return [(pos + b.position, r.offset, bytes(r.value)) for pos, buf in chunks
            for b in walk_batches(buf) for r in b]


def test_prefetched_scan_equals_sequential_and_local(s3_server, remote_logs):
    local, uri = remote_logs
    local_path, path, name = _segment(local, uri)
    size = os.path.getsize(local_path)
    files = resolve(uri, s3_server.options)
    with open(local_path, "rb") as f:
        expected = _records([(0, f.read())])
    assert len(expected) > 1000

    results = {}
    for prefetch in (0, 1, 3):
        s3_server.counts.reset()
        with files.ranges(path) as read:
            scan = ChunkedBatches(read, 0, size, path, chunk_bytes=CHUNK, prefetch=prefetch,
                                  whole=True)
            results[prefetch] = _records(scan)
        gets = s3_server.counts.gets(name)
        assert len(gets) == scan.requests == -(-size // CHUNK)   # whole: every request CHUNK
        assert s3_server.counts.get_bytes == scan.bytes_fetched == size
        assert sorted(r[2] for r in gets) == sorted(
            f"bytes={p}-{min(p + CHUNK, size) - 1}" for p in range(0, size, CHUNK))
        assert scan.max_in_flight == max(1, prefetch)
        heads = [r for r in s3_server.counts.requests if r[0] == "HEAD"]
        assert len(heads) == 1                   # one handle, however many threads read it
    assert results[0] == results[1] == results[3] == expected


def test_chunks_in_flight_never_exceed_the_limit(s3_server, remote_logs):
    files, path, _name, size = _remote_segment(s3_server, remote_logs)
    asked: list[tuple[int, int]] = []            # every request the reader sent, in order

    with files.ranges(path) as ranges:
        def read(pos: int, length: int) -> bytes:
            asked.append((pos, length))
            return ranges(pos, length)

        for prefetch in (1, 2, 4):
            asked.clear()
            scan = ChunkedBatches(read, 0, size, path, chunk_bytes=CHUNK, prefetch=prefetch,
                                  whole=True)
            for pos, buf in scan:
                # bytes asked for beyond what the caller holds: at most `prefetch` chunks, plus
                # the chunk this buffer came from (a batch cut by its end is carried over)
                ahead = max(p + n for p, n in asked) - (pos + len(buf))
                assert ahead <= (prefetch + 1) * CHUNK
            assert scan.max_in_flight == prefetch
            assert len(asked) == scan.requests == -(-size // CHUNK)


def test_a_small_read_sends_one_small_request_and_prefetches_nothing(s3_server, remote_logs):
    files, path, name, size = _remote_segment(s3_server, remote_logs)
    s3_server.counts.reset()
    with files.ranges(path) as read:
        scan = ChunkedBatches(read, 0, size, path, first_chunk=16 << 10, chunk_bytes=CHUNK)
        for _pos, buf in scan:
            assert next(iter(walk_batches(buf))).base_offset == 0
            break                                # a reader that wanted the first records
    assert [r[2] for r in s3_server.counts.gets(name)] == [f"bytes=0-{(16 << 10) - 1}"]
    assert scan.max_in_flight == 1


def test_object_truncated_mid_scan_is_a_clear_error(s3_server, remote_logs, tmp_path):
    local, uri = remote_logs
    local_path, _path, _name = _segment(local, uri)
    data = local_path.read_bytes()
    size = len(data)
    cut = size // 2 + 123
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "00000000000000000000.log").write_bytes(data)
    base = s3_server.upload(copy, "kafka", "prefetch/truncated")
    path = f"{base}/00000000000000000000.log"
    files = resolve(base, s3_server.options)
    assert files.size(path) == size              # the size a reader listed
    (copy / "00000000000000000000.log").write_bytes(data[:cut])
    s3_server.upload(copy, "kafka", "prefetch/truncated")   # replaced by a shorter object

    with files.ranges(path) as read:
        scan = ChunkedBatches(read, 0, size, path, chunk_bytes=CHUNK, prefetch=2, whole=True)
        seen = []
        with pytest.raises(KafkalogIOError) as err:
            for pos, buf in scan:
                seen.append(pos + len(buf))
    assert err.value.file == path
    assert err.value.position == cut
    assert "truncated" in str(err.value) and path in str(err.value)
    assert seen and max(seen) <= cut             # the batches before the cut were handed out
    assert scan.max_in_flight <= 2

    # deleted after it was listed: the error names the object and the position asked for
    s3_server.filesystem().delete_file(files.fs_path(path))
    with files.ranges(path) as read, pytest.raises(KafkalogIOError) as err:
        list(ChunkedBatches(read, 0, size, path, chunk_bytes=CHUNK, whole=True))
    assert err.value.file == path and err.value.position == 0


def test_reads_to_an_end_offset_ask_only_for_the_indexed_range(s3_server, remote_logs):
    local, uri = remote_logs
    files = resolve(uri, s3_server.options)
    for start, end in ((5_000, 5_010), (9_999, 12_001), (0, RECORDS), (RECORDS - 7, RECORDS)):
        with PartitionView(str(local / "orders-0")) as lv:
            local_batches = list(lv.batches(start, end))
            expected = [(b.base_offset, b.position) for b in local_batches]
            batch_bytes = sum(b.size_in_bytes for b in local_batches)
        for whole in (False, True):
            s3_server.counts.reset()
            with PartitionView(f"{uri}/orders-0", files=files, open_all=False) as rv:
                s3_server.counts.reset()                  # not the log end offset's walk
                got = [(b.base_offset, b.position) for b in rv.batches(start, end, whole=whole)]
            assert got == expected
            asked = sum(int(r[2].split("-")[1]) - int(r[2].split("=")[1].split("-")[0]) + 1
                        for r in s3_server.counts.gets(".log"))
            # the batches holding the range, plus at most about an index interval on each side
            assert batch_bytes <= asked <= batch_bytes + 2 * (4096 + 2 * 1024)

