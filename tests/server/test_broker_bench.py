"""``benchmarks/broker_bench.py`` at a tiny size, as a subprocess: its peers (the memory broker,
which runs on kafkalog serve's network layer, and the sendfile floor) start, answer confluent-kafka
and the raw requester, and every measure prints its row and the ratios. A change to the layers
the peers reuse (the way the network layer calls the broker, say) shows here, not in a long run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_script import run_bench

pytest.importorskip("confluent_kafka")


def test_the_broker_benchmark_runs_every_peer(tmp_path: Path) -> None:
    rows, _ = run_bench("broker_bench.py", [
        "--measure", "produce,consume,fetch,metrics", "--records", "20000", "--produce-records", "3000",
        "--runs", "1", "--clients", "confluent", "--fetch-mib", "8", "--fetch-blocks", "2",
        "--latency-requests", "20", "--data-dir", str(tmp_path), "--peers", "memory"], timeout=180)
    kinds = {(r["type"], r.get("broker")) for r in rows}
    assert {("produce", "memory"), ("produce", "kafkalog"), ("consume", "memory"),
            ("consume", "kafkalog"), ("fetch_1mib", "sendfile"), ("fetch_1mib", "kafkalog")} <= kinds
    for r in rows:
        if r["type"] in ("produce", "consume"):
            assert r["confluent_msgs_per_s"] > 0, r
        if r["type"] == "fetch_1mib":
            assert r["mib_per_s"] > 0 and r["answers"] > 0, r
    ratio = rows[-1]
    assert ratio["type"] == "ratio"
    for key in ("produce_ratio_confluent", "consume_ratio_confluent", "fetch_1mib_ratio",
                "metrics_on_vs_off_produce_confluent", "metrics_on_vs_off_consume_confluent"):
        assert ratio[key] > 0, ratio
    assert {r["metrics"] for r in rows if r["type"] == "metrics"} == {"on", "off"}


@pytest.mark.slow
def test_the_broker_benchmark_runs_kafka_44_as_a_peer(tmp_path: Path) -> None:
    """The Kafka 4.4 peer (a production-like JVM: ~a minute of starts) at a tiny size: its produce,
    consume, 1 MiB fetch and start rows and the ``*_vs_kafka`` ratios."""
    from tests import kafka44
    kafka44.require()
    rows, _ = run_bench("broker_bench.py", [
        "--measure", "produce,consume,fetch,start", "--records", "20000", "--produce-records", "3000",
        "--runs", "1", "--clients", "confluent", "--fetch-mib", "8", "--fetch-blocks", "3",
        "--latency-requests", "20", "--data-dir", str(tmp_path), "--peers", "kafka", "--kafka-heap", "512m"],
        timeout=900)
    kinds = {(r["type"], r.get("broker")) for r in rows}
    assert {("produce", "kafka"), ("consume", "kafka"), ("fetch_1mib", "kafka"), ("start", "kafka"),
            ("start", "kafkalog")} <= kinds
    ratio = rows[-1]
    for key in ("produce_confluent_vs_kafka", "consume_confluent_vs_kafka", "fetch_1mib_vs_kafka",
                "cold_start_vs_kafka", "idle_rss_vs_kafka"):
        assert ratio[key] > 0, ratio
