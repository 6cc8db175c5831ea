"""The slow (long-run) tests of this directory run only with ``-m slow`` (or KAFKALOG_SLOW=1);
``ram_path``: a test's directory on a tmpfs of its own, for the trials that copy whole logs."""
from __future__ import annotations

import os

import pytest

from tests.tmpfs import mounted_tmpfs


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("-m") or ""
    if "slow" in markexpr or os.environ.get("KAFKALOG_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="long run: use -m slow or python -m tests.reliability.run")
    here = os.path.dirname(__file__)
    for item in items:
        if "slow" in item.keywords and str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture()
def ram_path(tmp_path):
    """``tmp_path``, with a tmpfs mounted on it for the test where mounting is allowed (else the
    disk's ``tmp_path`` itself). The corruption and torn-write trials copy and remove a whole log
    directory for each trial, hundreds a test: on this VM's disk the file-system calls took half
    of such a test's time (an unlink ~140 us, a rmdir ~280 us; ``test_every_header_byte[2]`` 30 s,
    14 s on a tmpfs). Their subject is the engine's recovery and readers, not the file system."""
    with mounted_tmpfs(tmp_path / "ram", "512m", or_disk=True) as mnt:
        yield mnt
