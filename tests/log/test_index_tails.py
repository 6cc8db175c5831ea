"""The load's O(1) check of a segment's index files (``loader.index_tails``) reads a time index
from its start in one call when it is under a block (no stat first), and its tail after a stat
otherwise: both give what a stat and a read of the last two entries gave, for every length, the
entries increasing, zero-filled or garbage, and for the leader-epoch files the cache takes as read
(no assign per entry) the entries an assign of each gives."""

from __future__ import annotations

import os
import struct
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.log.leader_epoch import LeaderEpochFileCache
from kafkalog.log.loader import index_tails


def _reference(size: int, paths: list[str]) -> tuple:
    """A stat of each file, then a read of its last two entries: what the check decides from."""
    tails = []
    for path, esz in zip(paths, (8, 12)):
        try:
            length = os.stat(path).st_size
        except OSError:
            tails.append(None)
            continue
        if length % esz:
            return "bad length", (None, None)
        if length == 0:
            tails.append((0, None))
            continue
        n = length // esz
        with open(path, "rb") as f:
            data = f.read()
        layout = ">ii" if esz == 8 else ">qi"
        last = struct.unpack_from(layout, data, length - esz)
        prev = struct.unpack_from(layout, data, length - 2 * esz) if n >= 2 else None
        if esz == 8:
            if last[1] >= size or last[1] < 0 or last[0] < 0:
                return "outside", (None, None)
            ok = prev is None or (last[0] > prev[0] and last[1] >= prev[1])
        else:
            if last[1] < 0 or (last == (0, 0) and n >= 2):
                return "zero", (None, None)
            ok = prev is None or (last[0] > prev[0] and last[1] >= prev[1])
        if not ok:
            return "not increasing", (None, None)
        tails.append((length, last))
    return None, tuple(tails)


def _entries(draw, esz: int, n: int) -> bytes:
    kind = draw(st.sampled_from(["increasing", "zeros", "garbage"]))
    if kind == "zeros":
        return bytes(esz * n)
    if kind == "garbage":
        return draw(st.binary(min_size=esz * n, max_size=esz * n))
    out = bytearray()
    for i in range(n):
        out += struct.pack(">ii", i + 1, 40 * i) if esz == 8 else struct.pack(">qi", 1000 + i, i + 1)
    return bytes(out)


@st.composite
def _files(draw):
    size = draw(st.sampled_from([0, 100, 4096, 1 << 20]))
    files = []
    for esz in (8, 12):
        shape = draw(st.sampled_from(["missing", "entries", "odd"]))
        if shape == "missing":
            files.append(None)
        elif shape == "odd":
            files.append(draw(st.binary(min_size=1, max_size=40)))
        else:
            # around the one-block read: under it, at it, past it
            n = draw(st.sampled_from([0, 1, 2, 3, 340, 341, 342, 512, 600]))
            files.append(_entries(draw, esz, n))
    return size, files


@settings(max_examples=300, deadline=None)
@given(_files())
def test_index_tails_decides_as_a_stat_and_a_tail_read(case):
    size, files = case
    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, "00000000000000000000.index"),
                 os.path.join(d, "00000000000000000000.timeindex")]
        for path, data in zip(paths, files):
            if data is not None:
                with open(path, "wb") as f:
                    f.write(data)
        problem, tails = index_tails(size, *paths)
        want_problem, want_tails = _reference(size, paths)
        assert (problem is None) == (want_problem is None), (problem, want_problem)
        if problem is None:
            assert tuple(tails) == want_tails


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), max_size=6))
def test_leader_epoch_file_read_as_assigned(tmp_path_factory, pairs):
    """A file of any entries (in order or not) gives the entries, latest epoch and on-disk view
    that assigning each entry in turn gives."""
    d = tmp_path_factory.mktemp("le")
    path = d / "leader-epoch-checkpoint"
    path.write_text("0\n%d\n%s" % (len(pairs), "".join(f"{e} {o}\n" for e, o in pairs)))
    cache = LeaderEpochFileCache(path)
    ref = LeaderEpochFileCache(None)
    for e, o in pairs:
        ref.assign(e, o)
    assert cache.epoch_entries() == ref.epoch_entries()
    assert cache.latest_epoch() == ref.latest_epoch()
    with cache.deferred_writes():
        pass                                # nothing changed: the file is not written again
    assert path.read_text() == "0\n%d\n%s" % (len(pairs), "".join(f"{e} {o}\n" for e, o in pairs))
