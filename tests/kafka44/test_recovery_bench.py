"""``benchmarks/log_recovery_bench.py``'s Kafka 4.4 peer at a tiny size, as a subprocess: Kafka 4.4
recovers the segment kafkalog wrote after an unclean shutdown, the script finds Kafka's own timing
in its log (and that Kafka recovered the partition to the segment's end), and prints the ratio. A
change in Kafka's log lines or in the way the script plants the segment shows here, not in a long
run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kafka44
from tests.bench_script import run_bench


@pytest.mark.kafka
def test_kafka44_recovers_the_segment_and_the_ratio_is_printed(tmp_path: Path) -> None:
    kafka44.require()
    rows, stderr = run_bench("log_recovery_bench.py", [
        "--only", "idempotent", "--small-mb", "4", "--repeat", "1", "--producers", "4", "--peer", "kafka44",
        "--peer", "python-crc-walk"], timeout=300, env={"KAFKALOG_BENCH_DIR": str(tmp_path)})
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["recordsPerBatch"] == 1 and row["batches"] > 5000, row
    assert row["peers"]["kafka44"]["seconds"] > 0 and row["peers"]["kafka44"]["ratio"] > 0, row
    assert "goal >= Kafka 4.4's own recovery of the segment:" in stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("recover-", "kafka44-recover-"))], \
        "the script removes its directories"
