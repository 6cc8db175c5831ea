"""The log kernel (``kafkalog.log._kernel`` and its pure-Python twin ``_kernel_py``): the offset
index's search and the fetch path's step to a batch give the same answers in both, and the answers
the plain rules give: a binary search over big-endian entries, and the header walk
(``FileRecords.iter_headers``) over the same bytes; a load's read-ahead reads the same files in
both, follows no link, waits on no FIFO, writes nothing and raises nothing."""

from __future__ import annotations

import bisect
import os
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.log import _kernel_py, file_records
from kafkalog.log.file_records import FileRecords

from ..kernel_fixtures import pure_and_compiled
from .conftest import legacy_batch, v2_batch

KERNELS = pure_and_compiled(_kernel_py, "kafkalog.log._kernel")
any_kernel = pytest.mark.parametrize("k", KERNELS, ids=[m.IMPLEMENTATION for m in KERNELS])


@any_kernel
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), max_size=40, unique=True),
       st.integers(-2**31 - 5, 2**31 + 5), st.integers(0, 3))
def test_index_slot_is_the_largest_lower_bound(k, rels, target, spare):
    rels.sort()
    buf = b"".join(struct.pack(">ii", r, i * 100) for i, r in enumerate(rels)) + bytes(8 * spare)
    want = bisect.bisect_right(rels, target) - 1
    assert k.index_slot(buf, len(rels), target) == want
    assert k.index_slot(memoryview(buf), len(rels), target) == want


@any_kernel
def test_index_slot_of_an_empty_index_and_a_short_buffer(k):
    assert k.index_slot(b"", 0, 5) == -1
    assert k.index_slot(struct.pack(">ii", 10, 0), 1, 9) == -1
    assert k.index_slot(struct.pack(">ii", 10, 0), 1, 10) == 0
    if k.IMPLEMENTATION == "cython":          # the twin reads past the end and fails its own way
        with pytest.raises(ValueError, match="2 entries need 16 bytes"):
            k.index_slot(struct.pack(">ii", 10, 0), 2, 10)


def _entries(kinds: list[tuple[str, int]]) -> tuple[bytes, list[int]]:
    """Entries back to back at increasing offsets, and their start positions."""
    blobs, starts, offset, pos = [], [], 0, 0
    for kind, n in kinds:
        if kind == "v2":
            b = bytes(v2_batch([b"v" * 30] * n, base_offset=offset))
            offset += n
        elif kind == "legacy":
            b = bytearray(legacy_batch([b"y" * 20]))
            struct.pack_into(">q", b, 0, offset)
            offset += 1
        elif kind == "small":                    # a v2 batch smaller than its header
            b = struct.pack(">qiib", offset, 40, -1, 2) + bytes(35)
        else:                                    # an impossible magic
            b = struct.pack(">qiib", offset, 60, -1, 9) + bytes(55)
        starts.append(pos)
        pos += len(b)
        blobs.append(b)
    return b"".join(blobs), starts


ENTRY = st.one_of(st.tuples(st.just("v2"), st.integers(1, 40)),
                  st.tuples(st.sampled_from(["legacy", "small", "magic"]), st.just(0)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ENTRY, min_size=0, max_size=8), st.data())
def test_find_v2_batch_same_in_both_and_as_the_walk(kinds, data):
    blob, starts = _entries(kinds)
    fd, path = tempfile.mkstemp(suffix=".log")
    os.write(fd, blob)
    os.close(fd)
    fr = FileRecords.open(path)
    try:
        start = data.draw(st.sampled_from(starts + [len(blob)]))
        end = data.draw(st.integers(start, len(blob)))          # the segment's size seen
        window = data.draw(st.integers(0, len(blob) - start))   # the bytes read at ``start``
        target = data.draw(st.integers(-1, 400))
        buf = blob[start:start + window]
        got = [k.find_v2_batch(buf, start, end, target) for k in KERNELS]
        assert all(g == got[0] for g in got), got
        found = got[0]
        walked = []
        for h in fr.iter_headers(start):
            if h.position >= end:
                break
            walked.append(h)
        if len(found) == 8:                      # found: the walk's first entry reaching the target
            want = next(h for h in walked if h.last_offset >= target)
            assert found == tuple(want)
            assert found[0] + found[1] <= end and found[0] + 61 <= start + window
        else:                                    # every entry before the position ends below it
            pos, general = found
            assert start <= pos <= end
            assert all(h.last_offset < target for h in walked if h.position < pos)
            if not general:                      # read on: the next header is past the window
                assert pos + 61 > start + window or pos + 17 > start + window
    finally:
        fr.close()
        os.unlink(path)


@pytest.mark.parametrize("k", KERNELS, ids=[m.IMPLEMENTATION for m in KERNELS])
def test_search_uses_either_kernel_the_same_way(k, monkeypatch, tmp_path):
    """``FileRecords.search_for_offset_with_size`` through each kernel: large batches (the next
    header in a later window), a legacy entry and an impossible magic handed to the general walk."""
    monkeypatch.setattr(file_records, "find_v2_batch", k.find_v2_batch)
    blob, starts = _entries([("v2", 3), ("v2", 400), ("v2", 400), ("legacy", 0), ("v2", 5),
                             ("magic", 0), ("v2", 2)])
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(blob)
    fr = FileRecords.open(str(path))
    try:
        for start in starts:
            for target in range(-1, 815):
                want = next((h for h in fr.iter_headers(start) if h.last_offset >= target), None)
                assert fr.search_for_offset_with_size(target, start) == want, (start, target)
    finally:
        fr.close()


def _dir_state(root: str) -> list[tuple[str, int, int]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            st = os.lstat(os.path.join(dirpath, name))
            out.append((os.path.join(dirpath, name), st.st_size, st.st_mtime_ns))
    return sorted(out)


@any_kernel
def test_read_ahead_reads_the_regular_files_of_each_directory_and_writes_nothing(k, tmp_path) -> None:
    a, b = tmp_path / "t-0", tmp_path / "t-1"
    a.mkdir()
    b.mkdir()
    big = os.urandom(200_000)
    snapshot = os.urandom(70_000)
    small = {"00000000000000000000.index": b"", "00000000000000000000.timeindex": bytes(12),
             "leader-epoch-checkpoint": b"0\n0\n"}
    (a / "00000000000000000000.log").write_bytes(big)                      # its end kept
    (a / "00000000000000000042.snapshot").write_bytes(snapshot)             # advised whole
    for name, data in small.items():
        (a / name).write_bytes(data)
    (b / "partition.metadata").write_bytes(b"version: 0\ntopic_id: x\n")
    (b / "nested").mkdir()                                     # named, not read
    (b / "nested" / "inner.log").write_bytes(b"x")
    os.symlink(a / "00000000000000000000.log", b / "linked.log")   # named, not followed
    os.mkfifo(b / "fifo")                                      # named, not opened to wait
    before = _dir_state(str(tmp_path))
    dirs = [str(a), str(b), str(tmp_path / "missing"), str(a / "leader-epoch-checkpoint")]
    got = k.read_ahead(dirs)
    assert _dir_state(str(tmp_path)) == before
    assert got[2] is None and got[3] is None                  # not listed: the load reports it
    names_a, files_a = got[0]
    assert sorted(names_a) == sorted(os.listdir(a))
    assert files_a == {"00000000000000000000.log": (200_000, big[-65536:]),
                       "00000000000000000042.snapshot": (70_000, snapshot[-65536:]),
                       **{name: (len(data), data) for name, data in small.items()}}
    names_b, files_b = got[1]
    assert sorted(names_b) == ["fifo", "linked.log", "nested", "partition.metadata"]
    assert files_b == {"partition.metadata": (23, b"version: 0\ntopic_id: x\n")}
    assert k.read_ahead([]) == []


def test_read_ahead_finds_the_same_in_both_kernels(tmp_path) -> None:
    for p in range(5):
        d = tmp_path / f"t-{p}"
        d.mkdir()
        for i in range(p):
            (d / f"{i:020d}.log").write_bytes(os.urandom(40_000 * i))
            (d / f"{i:020d}.non-ascii-\u00e9").write_bytes(b"x" * i)
    dirs = [str(tmp_path / f"t-{p}") for p in range(5)]
    found = [m.read_ahead(dirs) for m in KERNELS]
    for got in found:
        assert [sorted(g[0]) for g in got] == [sorted(os.listdir(d)) for d in dirs]
        assert sum(len(g[1]) for g in got) == 20
    assert all(f == found[0] for f in found)


@any_kernel
def test_make_dirs_makes_each_directory_and_its_files(k, tmp_path) -> None:
    """Each directory made, in it each file with its bytes (mode 0644 less the umask), nothing
    else; the count of directories made whole and no failure."""
    files = [("a.log", b""), ("cp", b"0\n1\n0 0\n"), ("big", bytes(range(256)) * 1000)]
    dirs = [str(tmp_path / f"t-{i}") for i in range(5)]
    assert k.make_dirs(dirs, files) == (5, None)
    for d in dirs:
        assert sorted(os.listdir(d)) == ["a.log", "big", "cp"]
        for name, data in files:
            with open(os.path.join(d, name), "rb") as f:
                assert f.read() == data
        assert os.stat(os.path.join(d, "cp")).st_mode & 0o777 == 0o644 & ~_umask()
    assert k.make_dirs([], files) == (0, None)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@any_kernel
def test_make_dirs_stops_at_the_first_failure_and_names_it(k, tmp_path) -> None:
    """A directory that is there (EEXIST, name ""), a parent that is not (ENOENT), a name past
    the system's limit: the count made before it, its errno and the file's name; nothing of the
    directories after it made, nothing there before it touched."""
    import errno as E
    (tmp_path / "t-1").mkdir()
    (tmp_path / "t-1" / "keep").write_bytes(b"x")
    dirs = [str(tmp_path / f"t-{i}") for i in range(3)]
    assert k.make_dirs(dirs, [("f", b"1")]) == (1, (E.EEXIST, ""))
    assert os.listdir(tmp_path / "t-1") == ["keep"] and not (tmp_path / "t-2").exists()
    assert (tmp_path / "t-0" / "f").read_bytes() == b"1"
    assert k.make_dirs([str(tmp_path / "no" / "t-0")], [("f", b"")]) == (0, (E.ENOENT, ""))
    long_name = "n" * 300                   # (NAME_MAX 255: the file, after its directory is made)
    assert k.make_dirs([str(tmp_path / "t-9")], [("ok", b""), (long_name, b"")]) == \
        (0, (E.ENAMETOOLONG, long_name))
    assert os.listdir(tmp_path / "t-9") == ["ok"]
    assert not (tmp_path / "no").exists()
