"""The static checks of issue 11 run with the test suite: ruff over src, tests, benchmarks and examples, and
mypy over the configured scope (strict for kafkalog.record and kafkalog.log, see pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is a test dependency: pip install ruff)")
    result = _run([ruff, "check", "--no-cache", "src", "tests", "benchmarks", "examples"])
    assert result.returncode == 0, f"ruff check failed:\n{result.stdout}\n{result.stderr}"


def test_mypy_is_clean(tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (it is a test dependency: pip install mypy)")
    # the build tree keeps mypy's cache between runs (a cold run takes several times longer)
    cache = ROOT / "build" / "mypy_cache"
    cache.mkdir(parents=True, exist_ok=True)
    result = _run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)])
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}\n{result.stderr}"
