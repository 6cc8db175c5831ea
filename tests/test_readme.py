"""Every snippet of README.md runs as printed (issue 24, item 1; issue 36, item 4), each in a fresh
process whose working directory is a fresh temporary one.

Paths are never rewritten: the README's paths are relative, and the working directory holds what
the README assumes is there (``./data``, a Kafka data directory with topic ``orders``, group
``billing``, a transaction; a segment file, ``events.jsonl``, ``app.log``). The only changes made
to a snippet are the broker's port 9092 (a free port: the machine is shared) and, for the Spark
snippet, the ``spark`` session a pyspark shell provides. A snippet the tests below do not know
fails :func:`test_every_snippet_is_run`, so a new one cannot go untested.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple

import pytest

import kafkalog
from tests.kafka44 import free_port
from tests.testing.plugin import basetemp_args

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


class Snippet(NamedTuple):
    section: str
    lang: str
    code: str


def snippets() -> List[Snippet]:
    """Every fenced code block of the README with its section (``## ...``) and language."""
    out: List[Snippet] = []
    section, lang, code = "", None, []       # lang: inside a block
    for line in README.read_text(encoding="utf-8").splitlines():
        if lang is None and line.startswith("## "):
            section = line[3:].strip()
        elif lang is None and line.startswith("```"):
            lang, code = line[3:].strip(), []
        elif lang is not None and line.startswith("```"):
            out.append(Snippet(section, lang, "\n".join(code) + "\n"))
            lang = None
        elif lang is not None:
            code.append(line)
    return out


def snippet(section: str, lang: str | None = None) -> Snippet:
    (s,) = [s for s in snippets() if s.section == section and lang in (None, s.lang)]
    return s


RUN = {("Two commands", "bash"), ("The embedded log", "python"), ("The embedded log from asyncio", "python"),
       ("A Kafka broker for any Kafka client", "bash"), ("The command line", "bash"), ("Spark", "python"),
       # run with their host and paths replaced by tests/spark: test_cluster.py (a standalone cluster,
       # slow) and test_connect.py (pyspark's Connect server)
       ("Spark on a cluster and through Spark Connect", "bash"),
       ("Spark on a cluster and through Spark Connect", "python"),
       ("A Kafka broker for your tests", "python")}


def test_every_snippet_is_run() -> None:
    assert {(s.section, s.lang) for s in snippets()} == RUN


def test_the_two_commands() -> None:
    """Both set everything up with pip (not run here: the test suite runs inside what the second
    one installed): the first runs the main job (run by tests/cli/test_careless_paths.py's
    pipeline test), .ci/run runs exactly the second."""
    lines = [ln for ln in snippet("Two commands").code.splitlines() if ln and not ln.startswith("#")]
    second = "python3 -m pip install -e '.[all]' && python3 -m pytest -n 4 --dist loadfile"
    assert lines == ["python3 -m pip install -e '.[all]' && python3 examples/pipeline.py", second]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert second.replace("pip install -e", "pip install -q -e") in [ln.strip() for ln in ci]
    assert (ROOT / "examples" / "pipeline.py").exists()


def _python(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_the_embedded_log_example_runs_and_runs_again(tmp_path: Path) -> None:
    code = snippet("The embedded log").code
    for _ in range(2):                           # a second run on the same directory too
        res = _python(code, tmp_path)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "RecordMetadata(" in res.stdout and res.stderr == "", res.stderr[-3000:]
        assert len(res.stdout.splitlines()) > 100           # the consumer printed what it polled
    assert [p.name for p in tmp_path.iterdir()] == ["myapp-log"]     # what it named, nothing else


def test_the_asyncio_example_runs_and_its_group_resumes(tmp_path: Path) -> None:
    """Issue 36, item 6: the producer and the consumer of kafkalog.aio take the data directory the
    same way (first, a path here); a second run reads the next record, from the group's commit."""
    code = snippet("The embedded log from asyncio").code
    for offset in (0, 1):
        res = _python(code, tmp_path)
        assert res.returncode == 0 and res.stderr == "", res.stderr[-3000:]
        assert res.stdout == f"events 0 {offset} b'user-1' b'{{\"user\": 1}}'\n"
    assert [p.name for p in tmp_path.iterdir()] == ["myapp-log"]


def test_the_broker_line(tmp_path: Path) -> None:
    (line,) = [ln for ln in snippet("A Kafka broker for any Kafka client").code.splitlines() if ln]
    port = free_port()
    cmd = line.replace("--port 9092", f"--port {port}")
    p = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        listening = json.loads(p.stdout.readline())
        assert listening["type"] == "listening" and listening["port"] == port
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
        producer.send("readme", b"hello").get(60)
        producer.close()
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
    assert p.returncode == 0
    with kafkalog.open(tmp_path / "data", read_only=True) as dl:
        assert [r.value for r in dl.consume("readme")] == [b"hello"]


# --- the command line ----------------------------------------------------------------------------

def _prepare_kafka_data(data: Path) -> None:
    """What the README's commands assume: topic orders (3 partitions, compacted), group billing
    with committed offsets, a committed transaction (its state in __transaction_state-3)."""
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("orders", 3, {"cleanup.policy": "compact", "segment.bytes": 8192})
        with dl.producer() as p:
            for i in range(600):
                p.send("orders", key=b"order-%d" % (i % 50), value=b'{"state": "paid", "n": %d}' % i)
        c = dl.consumer("orders", group_id="billing", auto_offset_reset="earliest")
        while c.poll(timeout_ms=500):
            pass
        c.commit()
        c.close()
        tx = dl.producer(conf={"transactional.id": "orders-tx-40"})      # -> __transaction_state-3
        tx.init_transactions()
        tx.begin_transaction()
        tx.send("orders", key=b"order-1", value=b'{"state": "shipped"}')
        tx.commit_transaction()
        tx.close()


def _cli_lines() -> List[str]:
    return [ln for ln in snippet("The command line").code.splitlines() if ln.strip()]


def test_the_command_line_lines_run_in_order(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    data = cwd / "data"
    _prepare_kafka_data(data)
    for suffix in (".log", ".index"):
        shutil.copy(data / "orders-0" / f"00000000000000000000{suffix}", cwd)
    (cwd / "events.jsonl").write_text("".join(json.dumps({"key": f"order-{i}", "value": f"event {i}"}) + "\n"
                                              for i in range(20)))
    (cwd / "app.log").write_text("started\n")
    done: Dict[str, subprocess.CompletedProcess] = {}
    for line in _cli_lines():
        cmd = line                                  # as printed: its paths are relative to cwd
        if cmd.startswith("tail -f"):
            _run_tail_pipeline(cmd, cwd, data)
        elif "--follow" in cmd:
            _run_follow(cmd, cwd)
        else:
            if cmd.startswith("kafkalog bootstrap-topics"):
                _format_kafka_metadata(cwd)
            res = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, f"{line}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
            assert "Traceback" not in res.stderr, line
            done[line.split("#")[0].strip()] = res
    deep = next(v for k, v in done.items() if k.endswith("00000000000000000000.log --deep-iteration"))
    assert deep.stdout.startswith("Dumping 00000000000000000000.log")
    offsets = next(v for k, v in done.items() if "__consumer_offsets-9" in k).stdout
    assert "billing" in offsets                        # the partition of group billing
    txn = next(v for k, v in done.items() if "__transaction_state-3" in k).stdout
    assert "orders-tx-40" in txn
    assert next(v for k, v in done.items() if k.startswith("kafkalog verify")).returncode == 0


def _format_kafka_metadata(cwd: Path) -> None:
    """What ``bootstrap-topics`` assumes was done (docs/kafka-compatibility.md): Kafka 4.4's
    ``kafka-storage.sh format`` of the new cluster, its metadata log in ./meta, with the data
    directory's cluster.id and node.id."""
    from tests import kafka44
    kafka44.require()
    meta = dict(line.split("=", 1) for line in (cwd / "data" / "meta.properties").read_text().splitlines()
                if "=" in line and not line.startswith("#"))
    broker = kafka44.KafkaBroker(cwd.parent / "kafka", {"log.dirs": str(cwd / "data"), "node.id": meta["node.id"],
                                                         "metadata.log.dir": str(cwd / "meta")})
    broker.format(meta["cluster.id"], "--ignore-formatted")


def _run_tail_pipeline(cmd: str, cwd: Path, data: Path) -> None:
    """``tail -f app.log | kafkalog produce ...``: lines appended to app.log arrive as records
    while it runs; it runs until stopped (its session, started here, is ended here)."""
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        with open(cwd / "app.log", "a") as f:
            f.write("request 1\nrequest 2\n")
        deadline = time.monotonic() + 60
        got: List[bytes] = []
        while time.monotonic() < deadline and len(got) < 3:
            time.sleep(0.2)
            if (data / "logs-0").exists():
                with kafkalog.open(data, read_only=True) as dl:
                    got = [r.value for r in dl.consume("logs")]
        assert got == [b"started", b"request 1", b"request 2"]
    finally:
        os.killpg(p.pid, signal.SIGINT)
        p.communicate(timeout=60)


def _run_follow(cmd: str, cwd: Path) -> None:
    """``consume --follow``: prints, follows, and ends on Ctrl-C (exit 130) committing."""
    p = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    first = p.stdout.readline()
    assert ":" in first, first                           # KEY:VALUE (-K :)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err, err


# --- Spark ---------------------------------------------------------------------------------------

SPARK_SESSION = """
import os, sys
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
"""


@pytest.mark.spark
def test_the_spark_example_copies_every_record_to_its_partition(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    source = tmp_path / "data"
    _prepare_kafka_data(source)
    copy = tmp_path / "orders-copy"
    code = snippet("Spark").code                    # as printed: its paths are relative to cwd
    res = _python(SPARK_SESSION + code + "\nspark.stop()\n", tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARN DataSourceManager" not in res.stderr          # register() warns of nothing
    with kafkalog.open(source, read_only=True) as src, kafkalog.open(copy, read_only=True) as dst:
        assert dst.partitions("orders_copy") == 3
        for p in range(3):
            want = [(r.key, r.value) for r in src.consume("orders", partition=p)]
            got = [(r.key, r.value) for r in dst.consume("orders_copy", partition=p)]
            assert sorted(got, key=repr) == sorted(want, key=repr), p


def test_the_test_broker_example_runs_as_printed(tmp_path: Path) -> None:
    """README's kafka_broker example, saved as a user's test file and run by pytest in a subprocess
    with nothing else: the plugin comes from kafkalog's pytest11 entry point."""
    (tmp_path / "test_example.py").write_text(snippet("A Kafka broker for your tests").code, encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          *basetemp_args(tmp_path), "test_example.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "1 passed" in res.stdout, res.stdout[-3000:]
