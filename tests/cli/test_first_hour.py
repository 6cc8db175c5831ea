"""The smaller things a new user met in the first hour (issue 36, item 8), each through a real
``kafkalog`` process (or the main job's own check), each failing before the fix."""

from __future__ import annotations

import importlib.util
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kafkalog

ROOT = Path(__file__).resolve().parents[2]


def kafkalog_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "kafkalog.cli.main", *args]


def run(*args: str, input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(kafkalog_cmd(*args), input=input, capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_serve_on_a_busy_port_creates_nothing(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run("serve", "new", "--port", str(port), cwd=tmp_path)
    assert res.returncode == 2
    assert "cannot bind" in (res.stdout + res.stderr) and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []                   # ./new neither created nor filled


def test_serve_says_new_directory_and_the_bootstrap_servers_to_paste(tmp_path: Path) -> None:
    def start() -> tuple[dict, str]:
        p = subprocess.Popen(kafkalog_cmd("serve", str(tmp_path / "data"), "--port", "0"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert p.stdout is not None
            listening = json.loads(p.stdout.readline())
        finally:
            p.send_signal(signal.SIGTERM)
            _out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        return listening, err

    listening, err = start()
    bootstrap = f"127.0.0.1:{listening['port']}"
    assert listening["bootstrapServers"] == bootstrap
    assert f"bootstrap.servers={bootstrap}" in err
    assert "a new data directory" in err and "clean shutdown: False" not in err, err
    _listening, err = start()
    assert "after a clean shutdown" in err, err


def test_compact_summarises_empty_partitions_with_the_right_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("orders", 3, {"cleanup.policy": "compact"})
        for i in range(50):
            dl.produce("orders", b"v", key=b"k%d" % (i % 5), partition=0)
        c = dl.consumer("orders", group_id="billing", auto_offset_reset="earliest")
        c.poll(timeout_ms=500)
        c.commit()                      # __consumer_offsets: 50 partitions, one of them written
        c.close()
    res = run("compact", str(data), "--format", "text", "--no-progress")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "nothing cleaned" in ln]
    offsets = [ln for ln in lines if "__consumer_offsets" in ln]
    assert len(offsets) == 2, res.stdout             # the 49 empty ones in one line, the written one
    (empty,) = [ln for ln in offsets if "49 partitions" in ln]
    assert empty.endswith("nothing cleaned: no records") and "active segment" not in empty
    assert "  orders: 2 partitions (1-2): nothing cleaned: no records" in lines
    assert any(ln.startswith("  orders-0: nothing cleaned: only the active segment") for ln in lines)


def test_produce_summary_says_partition_and_offsets(tmp_path: Path) -> None:
    data = tmp_path / "data"
    one = run("produce", str(data), "t", "--format", "text", input='{"value": "a"}\n')
    assert one.returncode == 0, one.stderr
    assert one.stderr.splitlines()[-1] == "1 record(s) appended to t; partition 0: offset 0"
    three = run("produce", str(data), "t", "--format", "text", input='{"value": "b"}\n' * 3)
    assert three.stderr.splitlines()[-1] == "3 record(s) appended to t; partition 0: offsets 1..3"


def test_consume_follow_waits_for_a_topic_created_later(tmp_path: Path) -> None:
    """As kafka-console-consumer waits for a topic: no exit 2, the records once it exists."""
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("other", 1)
    p = subprocess.Popen(kafkalog_cmd("consume", str(data), "later", "--follow", "--format", "json"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None and p.stdout is not None
        assert "Waiting for topic 'later'" in p.stderr.readline()
        time.sleep(1.0)
        assert p.poll() is None                                 # still waiting, not exit 2
        with kafkalog.open(data, background=False) as dl:      # another process creates it
            dl.create_topic("later", 1)
            dl.produce("later", b"hello", partition=0)
        record = json.loads(p.stdout.readline())
        assert (record["topic"], record["value"]) == ("later", "hello")
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    assert p.returncode == 130


def test_consume_without_follow_still_refuses_an_unknown_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("other", 1)
    res = run("consume", str(data), "later", "--no-follow")
    assert res.returncode == 2 and "later" in res.stdout + res.stderr


def _pipeline_module():
    pytest.importorskip("pyspark")
    spec = importlib.util.spec_from_file_location("pipeline_example", ROOT / "examples" / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_main_jobs_layout_check_checks_what_it_claims(tmp_path: Path) -> None:
    """"Kafka layout ok" looked at directory names only: a segment with a flipped byte passed."""
    pipeline = _pipeline_module()
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("events", 2)
        for i in range(40):
            dl.produce("events", b"value-%d" % i * 10, key=b"k%d" % i, partition=i % 2)
    assert pipeline.kafka_layout_check(str(data)).startswith("ok: ")
    seg = data / "events-1" / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    raw[100] ^= 0xFF
    seg.write_bytes(bytes(raw))
    verdict = pipeline.kafka_layout_check(str(data))
    assert verdict.startswith("BROKEN: ") and "events-1" in verdict, verdict
