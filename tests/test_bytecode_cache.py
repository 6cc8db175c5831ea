"""The suite's bytecode cache (``tests/conftest.py``, ``pytest_configure``): with
``PYTHONDONTWRITEBYTECODE`` set, the processes a run starts share one cache in a temporary directory
of the run's own, nothing is written beside the sources, and the directory is gone when the run ends."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pycache_dirs() -> set[Path]:
    return {p for top in ("src", "tests") for p in (ROOT / top).rglob("__pycache__")}


def test_a_child_of_the_run_reads_and_writes_the_runs_cache() -> None:
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if prefix is None:
        pytest.skip("this run writes bytecode beside the sources (PYTHONDONTWRITEBYTECODE was not set): "
                    "there is no cache of the run's own to share")
    code = "import sys, kafkalog.log.segment; print(sys.pycache_prefix, sys.dont_write_bytecode)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.split() == [prefix, "False"]
    import kafkalog.log.segment as segment
    assert sys.pycache_prefix == prefix                 # (this process's too: set with the variable)
    cached = importlib.util.cache_from_source(segment.__file__)
    assert cached.startswith(prefix) and os.path.exists(cached)


def test_a_run_shares_its_cache_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A run of its own, started as on this project's machines (``PYTHONDONTWRITEBYTECODE=1``) with
    a temporary directory of its own: the test above passes in it (not skipped), and afterwards its
    temporary directory is empty and nothing was written beside the sources."""
    before = _pycache_dirs()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTEST_XDIST_WORKER")}
    env.update(PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(tmp))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                        f"{__file__}::test_a_child_of_the_run_reads_and_writes_the_runs_cache"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert list(tmp.iterdir()) == []
    if os.environ.get("PYTHONPYCACHEPREFIX"):   # (else this run's own workers write beside the sources)
        assert _pycache_dirs() <= before
