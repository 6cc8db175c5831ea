import os

import pytest

from kafkalog.errors import KafkalogIOError
from kafkalog.log import fsutil


def test_atomic_write_and_rename(tmp_path):
    p = tmp_path / "cp"
    fsutil.atomic_write(p, b"one")
    fsutil.atomic_write(p, b"two")
    assert p.read_bytes() == b"two" and not (tmp_path / "cp.tmp").exists()
    new = fsutil.rename_with_suffix(p, "", ".deleted", sync=True)
    assert new.endswith("cp.deleted") and os.path.exists(new)
    assert fsutil.rename_with_suffix(new, ".deleted", "") == str(p)
    fsutil.fsync_file(p)
    fsutil.fsync_dir(tmp_path)


def test_errors_name_path(tmp_path):
    missing = tmp_path / "nope" / "x"
    with pytest.raises(KafkalogIOError) as e:
        fsutil.atomic_write(missing, b"x")
    assert "nope" in e.value.file
    with pytest.raises(KafkalogIOError):
        fsutil.fsync_file(missing)
    with pytest.raises(KafkalogIOError):
        fsutil.last_modified_ms(missing)
    assert fsutil.delete_if_exists(missing) is False


def test_mtime_and_tmp_cleanup(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"")
    fsutil.set_last_modified_ms(p, 1_600_000_000_123)
    assert fsutil.last_modified_ms(p) == 1_600_000_000_123
    (tmp_path / "x.tmp").write_bytes(b"1")
    assert fsutil.delete_tmp_files(tmp_path) == [str(tmp_path / "x.tmp")]
    fsutil.ensure_dir(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()


def test_background_flusher_drops_written_ranges_behind_it(tmp_path):
    """Drop-behind: ranges handed to ``submit``/``release`` leave the page cache once written
    out; what was not handed over stays; the file's bytes are intact and durable."""
    from tests.pagecache import PAGE, require_eviction, resident
    require_eviction(str(tmp_path))
    path = str(tmp_path / "f")
    chunk = os.urandom(64 << 10)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    flusher = fsutil.BackgroundFlusher()
    for _ in range(32):                                    # 2 MiB
        os.write(fd, chunk)
    flusher.submit(fd, path, [(0, 1 << 20)])
    for _ in range(32):                                    # 4 MiB
        os.write(fd, chunk)
    flusher.release(fd, path, [(1 << 20, 3 << 20)])        # fdatasync, drop, close
    flusher.close()
    pages = resident(path)
    assert not any(pages[:(3 << 20) // PAGE])             # dropped
    assert all(pages[(3 << 20) // PAGE:])                 # never handed over: still cached
    with open(path, "rb") as f:
        assert f.read() == chunk * 64


def test_drop_cached_ignores_what_it_cannot_do(tmp_path):
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.write(b"x" * 10000)
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    fsutil.drop_cached(fd, [(0, 4096)])                    # a closed descriptor: advice only
    fsutil.drop_cached(-1, [])


@pytest.mark.parametrize("size", [0, 1, fsutil._FIRST_READ - 1, fsutil._FIRST_READ,
                                  fsutil._FIRST_READ + 1, 3 * (1 << 20) + 5])
def test_read_file_reads_the_whole_file(tmp_path, size):
    """The file's bytes whatever its length: below, at and past the first read's size (a file
    that fills the first read is read on to its end)."""
    p = tmp_path / "f"
    data = os.urandom(size)
    p.write_bytes(data)
    assert fsutil.read_file(str(p)) == data
    assert fsutil.read_bytes(str(p), "read it") == data
    for limit in (0, 1, size, size + 1, fsutil._FIRST_READ + 7):     # a prefix: at most ``limit``
        assert fsutil.read_file(str(p), limit) == data[:limit]


def test_read_file_errors(tmp_path):
    """A missing file and a directory raise their ``OSError``; ``read_bytes`` names the file and
    what was attempted. No descriptor is left open either way."""
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        fsutil.read_file(str(tmp_path / "missing"))
    with pytest.raises(IsADirectoryError):
        fsutil.read_file(str(tmp_path))
    with pytest.raises(KafkalogIOError) as e:
        fsutil.read_bytes(str(tmp_path / "missing"), "read producer snapshot")
    assert "read producer snapshot" in str(e.value) and "missing" in str(e.value)
    assert len(os.listdir("/proc/self/fd")) == fds
