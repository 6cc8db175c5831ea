"""Which pages of a file are in the page cache (Linux ``mincore``), for tests of drop-behind and of
reads that must touch only some pages. The file is mapped read-only and never touched, so the
probe itself reads nothing."""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import List

import pytest

PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


def resident(path: str) -> List[bool]:
    """One flag per page of ``path``: is it in the page cache?"""
    size = os.path.getsize(path)
    if size == 0:
        return []
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            pages = -(-size // PAGE)
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return [bool(b & 1) for b in vec.raw[:pages]]
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def evict(path: str) -> None:
    """Write ``path`` out and drop it from the page cache; skip the test where the file system
    keeps its pages anyway (tmpfs: the page cache is the storage)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if any(resident(path)):
        pytest.skip("this file system keeps evicted pages in memory (tmpfs?)")


def require_eviction(directory: str) -> None:
    """Skip the test unless files in ``directory`` can be dropped from the page cache."""
    probe = os.path.join(directory, ".evict-probe")
    with open(probe, "wb") as f:
        f.write(b"\0" * (4 * PAGE))
    try:
        evict(probe)
    finally:
        os.unlink(probe)
