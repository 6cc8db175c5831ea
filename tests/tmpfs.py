"""A small tmpfs mounted for a test, to fill a file system for real (ENOSPC); skips the test where
``mount -t tmpfs`` is not allowed."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mnt: Path, size: str, *, or_disk: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``3m``) on the new directory ``mnt``; unmounted afterwards. Where
    mounting is not allowed the test is skipped, or (``or_disk``) given ``mnt`` on the disk."""
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        if not or_disk:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
        yield mnt
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def grow_tmpfs(mnt: Path, size: str) -> None:
    """Give the file system room again (``mount -o remount,size=...``)."""
    r = subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], capture_output=True)
    assert r.returncode == 0, r.stderr


def fill_tmpfs(mnt: Path) -> Path:
    """Write the file ``filler`` on the file system until it is full (ENOSPC), to the last bytes a
    chunk of 512 can take; returns its path (unlink it to give the room back)."""
    path = mnt / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        while True:                      # the last partial chunk
            try:
                os.write(fd, b"\0" * 512)
            except OSError:
                break
    finally:
        os.close(fd)
    return path
