"""``benchmarks/testing_broker_bench.py`` at a tiny size, as a subprocess: every kafkalog peer
starts and answers, the suite runs with a broker per test in both modes, and the summaries, ratios
and goals are printed as JSON lines (Kafka 4.4 left out here: it is the long part)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "testing_broker_bench.py"


def test_the_testing_benchmark_prints_every_peer_ratio_and_goal() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "1", "--kafka-runs", "0", "--suite", "3",
                           "--suite-runs", "1"], capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    summaries = {r["peer"]: r for r in rows if r["type"] == "summary"}
    assert {"thread", "process", "process_first", "serve", "suite_thread", "suite_process"} <= set(summaries)
    for peer in ("thread", "process", "serve"):
        assert summaries[peer]["runs"] == 1 and summaries[peer]["median_ready_ms"] > 0
    assert summaries["suite_thread"]["tests"] == 3
    ratios = {r["what"] for r in rows if r["type"] == "ratio"}
    assert ratios == {"ready serve / thread", "ready serve / process"}
    goals = {r["goal"]: r["met"] for r in rows if r["type"] == "goal"}
    assert set(goals) == {"thread ready <= 50 ms", "process ready <= 300 ms", "3 tests, a thread broker each, <= 5 s",
                          "3 tests, a process broker each, <= 5 s"}
    assert all(isinstance(met, bool) for met in goals.values())
