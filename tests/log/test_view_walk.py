"""The readers' batch walk (``partition_view.walk_batches``, over the compiled header walker): a
batch with a bad magic or size in a segment is a typed error naming the ``.log`` and the batch's
position; a partial batch at the end of the last segment (one being written) ends the walk."""

from __future__ import annotations

import os

import pytest

import kafkalog
from kafkalog.errors import CorruptRecordError
from kafkalog.log.naming import log_file
from kafkalog.log.read.partition_view import PartitionView


def _partition(tmp_path) -> str:
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        for i in range(40):
            dl.produce("t", value=b"v%d" % i, partition=0)
    return os.path.join(d, "t-0")


def _batch_positions(path: str) -> list[int]:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    return out


@pytest.mark.parametrize("offset_in_batch,value", [(16, 7), (8, 20)])   # magic 7; batch size 32
def test_bad_batch_header_is_a_typed_error_at_its_position(tmp_path, offset_in_batch, value):
    pdir = _partition(tmp_path)
    path = log_file(pdir, 0)
    bad = _batch_positions(path)[25]
    with open(path, "r+b") as f:
        f.seek(bad + offset_in_batch)
        f.write(value.to_bytes(1 if offset_in_batch == 16 else 4, "big"))
    with pytest.raises(CorruptRecordError) as e, PartitionView(pdir) as view:
        list(view.batches(0, 40))
    assert e.value.file == path and e.value.position == bad


def test_partial_last_batch_ends_the_walk(tmp_path):
    pdir = _partition(tmp_path)
    path = log_file(pdir, 0)
    last = _batch_positions(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(last + 30)                              # a batch being written
    with PartitionView(pdir) as view:
        assert view.log_end_offset == 39
        assert [r.offset for b in view.batches(0, 39) for r in b.records()] == list(range(39))
