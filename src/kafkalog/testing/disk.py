"""A small file system for a broker's data directory, to fill its disk for real (ENOSPC): a tmpfs
mounted for the broker (Linux, with the right to mount, as root in a container), filled on demand
by a file that takes the space left."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

from kafkalog.errors import KafkalogError

FILLER = ".kafkalog-testing-filler"
_CHUNK = 1 << 20


class DiskUnavailable(KafkalogError):
    """A small file system cannot be mounted here (no ``mount``, or no right to mount)."""


def mount_tmpfs(path: str, size: str) -> None:
    """Mount a tmpfs of ``size`` (``"64m"``) on the new directory ``path``."""
    os.makedirs(path)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        os.rmdir(path)
        raise DiskUnavailable(f"cannot mount a tmpfs of {size} on {path}: {e}") from None
    if r.returncode != 0:
        os.rmdir(path)
        raise DiskUnavailable(f"cannot mount a tmpfs of {size} on {path}: {r.stderr.strip()}")


def unmount(path: str) -> None:
    subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)


def remove_workdir(workdir: str, mount: str | None) -> None:
    """Remove a broker's work directory, its tmpfs (``mount``, inside it) unmounted first, lazily:
    what :meth:`~kafkalog.testing.LocalBroker.close` removes, and an orphaned child broker too."""
    if mount:
        unmount(mount)
    shutil.rmtree(workdir, ignore_errors=True)


def resize(path: str, size: str) -> None:
    """Give the file system ``size`` (``mount -o remount,size=...``)."""
    r = subprocess.run(["mount", "-o", f"remount,size={size}", path], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise DiskUnavailable(f"cannot resize the tmpfs on {path} to {size}: {r.stderr.strip()}")


def fill(path: str) -> int:
    """Take every free byte of the file system of ``path`` with a filler file; returns its size."""
    filler = os.path.join(path, FILLER)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = _CHUNK
    zeros = bytes(chunk)
    try:
        while chunk >= 512:
            try:
                os.write(fd, zeros[:chunk])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                chunk //= 2
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def free(path: str) -> None:
    """Remove the filler: the space it took is free again."""
    try:
        os.unlink(os.path.join(path, FILLER))
    except FileNotFoundError:
        pass


__all__ = ["FILLER", "DiskUnavailable", "fill", "free", "mount_tmpfs", "resize", "unmount"]
