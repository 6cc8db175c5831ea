"""``benchmarks/group_timer_bench.py`` at a tiny size, as a subprocess: 40 classic groups on
``kafkalog serve``, half left Empty, a second of idle, and the script prints its run and summary
lines with every field. No timing is asserted: the figures are the benchmark's, on a machine of
its own (benchmarks/README.md)."""

from __future__ import annotations

from pathlib import Path

from tests.bench_script import run_bench


def test_the_group_timer_benchmark_runs_and_reports_every_field(tmp_path: Path) -> None:
    rows, _ = run_bench("group_timer_bench.py", [
        "--groups", "40", "--idle-seconds", "1", "--runs", "1", "--peers", "kafkalog",
        "--workdir", str(tmp_path)], timeout=300)
    run, summary = rows
    assert run["type"] == "run" and run["peer"] == "kafkalog" and run["groups"] == 40
    assert run["idle_cpu_pct"] >= 0 and run["idle_rss_mib"] > 0 and run["make_groups_s"] > 0
    assert summary["type"] == "summary" and summary["idle_cpu_pct"] == run["idle_cpu_pct"]
    assert list(tmp_path.iterdir()) == []          # its data directory removed
