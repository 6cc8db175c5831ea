"""Which files this process holds descriptors on (Linux's ``/proc/self/fd``), for tests that a
segment, an index or a failed open keeps no more descriptors than Kafka would."""

from __future__ import annotations

import os

import pytest

#: skip a test on a system without ``/proc/self/fd``
needs_proc_fd = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")


def descriptors_under(d: os.PathLike[str] | str) -> dict[str, int]:
    """Open descriptors of this process on files under ``d``, counted by file suffix (``d`` is
    resolved as the kernel names the files, so a symlinked temporary directory still matches)."""
    prefix = os.path.realpath(d) + os.sep
    out: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            suffix = os.path.splitext(target)[1]
            out[suffix] = out.get(suffix, 0) + 1
    return out
