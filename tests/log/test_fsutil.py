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
