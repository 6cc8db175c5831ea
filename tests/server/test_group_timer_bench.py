"""``benchmarks/group_timer_bench.py`` at a tiny size, as a subprocess: 40 classic groups on
``kafkalog serve``, half left Empty, a second of idle, and the script prints its run and summary
lines with every field. No timing is asserted: the figures are the benchmark's, on a machine of
its own (benchmarks/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "group_timer_bench.py"


def test_the_group_timer_benchmark_runs_and_reports_every_field(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--groups", "40", "--idle-seconds", "1", "--runs", "1",
         "--peers", "kafkalog", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    run, summary = rows
    assert run["type"] == "run" and run["peer"] == "kafkalog" and run["groups"] == 40
    assert run["idle_cpu_pct"] >= 0 and run["idle_rss_mib"] > 0 and run["make_groups_s"] > 0
    assert summary["type"] == "summary" and summary["idle_cpu_pct"] == run["idle_cpu_pct"]
    assert list(tmp_path.iterdir()) == []          # its data directory removed
