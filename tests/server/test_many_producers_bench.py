"""``benchmarks/many_producers_bench.py`` at a tiny size, as a subprocess (issue 35): its Go load
generator (franz-go from Go's module cache, built once) paces 50 idempotent acks=all producers
against ``kafkalog serve`` for a few seconds, and the script prints its run and summary lines with
every field. No timing is asserted: the figures are the benchmark's, on a machine of its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bench_script import run_bench
from tests.server.node_client import unavailable

pytest.importorskip("confluent_kafka")


def test_the_many_producers_benchmark_runs_and_reports_every_field(tmp_path: Path) -> None:
    if shutil.which("go") is None:
        unavailable("`go` is not on PATH (the benchmark's load generator is Go)")
    rows, _ = run_bench("many_producers_bench.py", [
        "--producers", "50", "--warmup", "2", "--measure", "4", "--runs", "1", "--peers", "kafkalog",
        "--workdir", str(tmp_path)], timeout=900)
    run, summary = rows
    assert run["type"] == "run" and run["peer"] == "kafkalog" and run["partitions"] == 100
    assert run["producers"] == 50 and run["target_rate"] == 2500
    # every record of the window scheduled, acknowledged or counted as failed or unacknowledged
    assert run["scheduled"] == 50 * 50 * 4
    assert run["acked"] + run["failed"] + run["unacked"] == run["scheduled"]
    assert run["acked"] > 0 and run["achieved_rate"] > 0 and run["produce_requests_per_s"] > 0
    assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["p999_ms"] <= run["max_ms"]
    for key in ("broker_cpu_pct", "broker_cpu_us_per_request", "broker_rss_mib", "broker_peak_rss_mib",
                "generator_cpu_pct", "others_cpu_pct"):
        assert key in run, key
    assert run["broker_rss_mib"] > 0
    assert summary["type"] == "summary" and summary["peer"] == "kafkalog"
    assert summary["p99_ms"] == run["p99_ms"]
    assert list(tmp_path.iterdir()) == []           # the data directory went with the run
