"""The slow (long-run) tests of this directory run only with ``-m slow`` (or KAFKALOG_SLOW=1)."""
from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("-m") or ""
    if "slow" in markexpr or os.environ.get("KAFKALOG_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="long run: use -m slow or python -m tests.reliability.run")
    here = os.path.dirname(__file__)
    for item in items:
        if "slow" in item.keywords and str(item.fspath).startswith(here):
            item.add_marker(skip)
