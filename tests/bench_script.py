"""A benchmark script of ``benchmarks/`` run as a subprocess by its smoke test: this checkout's
``src`` and root on ``PYTHONPATH``, its exit checked, its JSON lines parsed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_bench(script: str, args: list[str], *, timeout: float,
              env: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """``benchmarks/<script> args`` (``env`` added to this process's); asserts it exited 0 (its
    stderr's tail in the message). Its JSON lines, and its stderr."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])})
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")], done.stderr
