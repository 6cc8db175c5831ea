"""``kafkalog top`` (issue 39) from the outside: a real ``kafkalog serve``, real clients (kafka-python)
writing and committing, ``kafkalog top`` as a subprocess over the data directory (read-only, beside
the broker that holds its lock) and over the bootstrap server, its JSON lines checked against what
was written; the live view in a real terminal (tmux); its errors typed as every command's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kafkalog
from tests.server.broker_process import BrokerProcess

TOP = [sys.executable, "-m", "kafkalog.cli.main", "top"]


def _produce(bootstrap: str, topic: str, n: int, partitions: int = 2) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    try:
        for i in range(n):
            p.send(topic, b"v" * 50, partition=i % partitions)
        p.flush(30)
    finally:
        p.close(10)


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        c.close()


def _lines(args: list[str], cwd: Path, timeout: float = 120) -> list[dict]:
    res = subprocess.run([*TOP, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr == "", res.stderr
    return [json.loads(x) for x in res.stdout.splitlines()]


def _tree(path: Path) -> dict[str, tuple[int, float, str]]:
    """Every file and directory under ``path``: size, mtime and content hash."""
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            p = Path(root) / d
            out[str(p.relative_to(path)) + "/"] = (0, p.stat().st_mtime, "")
        for f in files:
            p = Path(root) / f
            out[str(p.relative_to(path))] = (p.stat().st_size, p.stat().st_mtime,
                                              hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture
def served(tmp_path: Path):
    data = tmp_path / "data"
    with BrokerProcess(str(data), ["num.partitions=2"]).running() as broker:
        yield broker, data


def test_top_follows_the_topics_and_groups_of_a_served_data_directory(served, tmp_path: Path) -> None:
    """The figures of a data directory the broker holds (its lock taken): log end offsets and sizes
    per topic, records/s from the delta between two refreshes, each group's lag from its committed
    offsets; the same figures over the bootstrap server."""
    broker, data = served
    _produce(broker.bootstrap, "orders", 100)
    _commit(broker.bootstrap, "billing", "orders", {0: 20, 1: 30})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    p = subprocess.Popen([*TOP, str(data), "--format", "json", "--iterations", "2", "--interval", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                         stdin=subprocess.DEVNULL)
    try:
        assert p.stdout is not None
        first = json.loads(p.stdout.readline())
        _produce(broker.bootstrap, "orders", 30)        # between the two refreshes
        second = json.loads(p.stdout.readline())
        assert p.wait(60) == 0, p.stderr.read() if p.stderr else ""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    (t1,) = first["topics"]
    (t2,) = second["topics"]
    assert (t1["topic"], t1["partitions"], t1["logEndOffset"]) == ("orders", 2, 100)
    assert t1["recordsPerSec"] is None and t1["bytesPerSec"] is None      # no delta yet
    assert t2["logEndOffset"] == 130 and t2["sizeInBytes"] > t1["sizeInBytes"]
    dt = second["time"] - first["time"]
    assert t2["recordsPerSec"] == pytest.approx(30 / dt, rel=0.01, abs=0.01)
    assert t2["bytesPerSec"] == pytest.approx((t2["sizeInBytes"] - t1["sizeInBytes"]) / dt, rel=0.01, abs=0.01)
    assert first["groups"] == [{"group": "billing", "lag": 100 - 50, "partitions": 2}]
    assert second["groups"] == [{"group": "billing", "lag": 130 - 50, "partitions": 2}]
    assert list(cwd.iterdir()) == []

    (over_wire,) = _lines([broker.bootstrap, "--format", "json", "--iterations", "1"], cwd)
    assert [(t["topic"], t["partitions"], t["logEndOffset"], t["sizeInBytes"]) for t in over_wire["topics"]] == \
        [("orders", 2, 130, t2["sizeInBytes"])]
    assert over_wire["groups"] == second["groups"]


def test_top_reads_request_latencies_and_the_cleaner_from_the_metrics_endpoint(tmp_path: Path) -> None:
    """--metrics-url: the broker's Prometheus endpoint parsed each refresh: per request its mean and
    99th percentile time and its rate (top's own ListOffsets: one per refresh), the cleaner's gauges."""
    pytest.importorskip("prometheus_client", reason="--metrics-url needs the server extra's prometheus_client")
    data = tmp_path / "data"
    with BrokerProcess(str(data), extra_args=["--metrics-port", "0"]).running() as broker:
        metrics_url = broker.metrics_url
        assert metrics_url is not None
        _produce(broker.bootstrap, "events", 10, partitions=1)
        lines = _lines([broker.bootstrap, "--metrics-url", metrics_url, "--iterations", "2", "--interval", "1"],
                       tmp_path)
    first, second = lines
    produce = next(r for r in first["requests"] if r["request"] == "Produce")
    assert produce["meanMs"] > 0 and produce["p99Ms"] > 0 and produce["perSec"] is None
    (list_offsets,) = [r for r in second["requests"] if r["request"] == "ListOffsets"]
    # top's rate is the count's delta over the time between its two scrapes, which are a few ms off the
    # lines' own times (an import, a scrape's round trip): 5%, not 1%, so a loaded machine does not fail it
    assert list_offsets["perSec"] == pytest.approx(1 / (second["time"] - first["time"]), rel=0.05)
    assert second["cleaner"]["kafka_log_logcleaner_deadthreadcount"] == 0
    assert [t["logEndOffset"] for t in second["topics"]] == [10]


def test_top_of_a_data_directory_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 3)
        for i in range(30):
            dl.produce("t", b"x" * 10, partition=i % 3)
    before = _tree(data)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    lines = _lines([str(data), "--iterations", "2", "--interval", "0.2"], cwd)    # a pipe: JSON lines
    assert [t["logEndOffset"] for line in lines for t in line["topics"]] == [30, 30]
    assert lines[1]["topics"][0]["recordsPerSec"] == 0
    assert _tree(data) == before
    assert list(cwd.iterdir()) == []


def test_a_refresh_reopens_only_the_partitions_that_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh of 100,000 idle partitions must not open them all again (issue 35): counted, each
    partition opened lists its directory (``os.listdir``); the data directory is listed again only
    when it changed."""
    from kafkalog.cli import top_data_dir
    from tests.os_calls import count_os_calls
    monkeypatch.setattr(top_data_dir, "SETTLED_NS", 0)      # file times trusted at once
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 40, {"segment.bytes": 1024})
        dl.create_topic("u", 10)
        for i in range(80):
            dl.produce("t", b"x" * 10, partition=i % 40)
        source = top_data_dir.DataDirSource(str(data))
        counts = count_os_calls(monkeypatch, ("listdir",))
        first = source.sample()
        assert counts["listdir"] == 1 + 50
        assert first.topics == {"t": (40, 80, first.topics["t"][2]), "u": (10, 0, 0)}
        for _ in range(3):
            counts["listdir"] = 0
            assert source.sample().topics == first.topics
            assert counts["listdir"] == 0                       # nothing changed: nothing listed or opened
        counts["listdir"] = 0
        dl.produce("t", b"y" * 10, partition=7)                 # an append
        for _ in range(30):                                     # a roll of partition 8 (1 KiB segments)
            dl.produce("t", b"z" * 100, partition=8)
        dl.delete_topic("u")
        after = source.sample()
        assert counts["listdir"] == 1 + 2
        assert after.topics == {"t": (40, 80 + 31, after.topics["t"][2])}
        assert len(list((data / "t-8").glob("*.log"))) > 1
        assert after.topics["t"][2] == sum(f.stat().st_size for f in data.glob("t-*/*.log"))
        counts["listdir"] = 0
        assert source.sample().topics == after.topics and counts["listdir"] == 0


def test_top_reads_more_partitions_than_it_may_open_files(tmp_path: Path) -> None:
    """Each partition's snapshot is closed once read: 120 partitions with records under a limit of
    64 open files (a refresh held them all open and failed with EMFILE at 100,000 partitions)."""
    import resource
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 120)
        for p in range(120):
            dl.produce("t", b"x" * 10, partition=p)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    res = subprocess.run([*TOP, str(data), "--iterations", "2", "--interval", "0.1"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL, preexec_fn=limit)
    assert res.returncode == 0 and res.stderr == "", res.stdout + res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(t["partitions"], t["logEndOffset"]) for line in lines for t in line["topics"]] == [(120, 120)] * 2


@pytest.mark.parametrize("target,error", [("missing-dir", "LogDirError"), ("127.0.0.1:1", "KafkalogIOError")])
def test_a_wrong_target_is_one_typed_error(tmp_path: Path, target: str, error: str) -> None:
    arg = str(tmp_path / target) if target == "missing-dir" else target
    res = subprocess.run([*TOP, arg, "--iterations", "1"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and res.stderr == ""
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert line["type"] == "error" and line["error"] == error, line
    assert not (tmp_path / "missing-dir").exists()


def test_an_unreachable_metrics_endpoint_is_one_typed_error(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client", reason="--metrics-url needs the server extra's prometheus_client")
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 1)
    res = subprocess.run([*TOP, str(data), "--iterations", "1", "--metrics-url", "http://127.0.0.1:1/metrics"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert line["error"] == "KafkalogIOError" and "127.0.0.1:1" in line["message"], line


def _tmux() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (.ci/run installs it from Debian's packages)")
    return tmux


def test_top_in_a_terminal_shows_the_figures_and_quits_on_q(tmp_path: Path) -> None:
    """A real terminal (tmux): the screen shows the topic, its log end offset and the group's lag;
    ``q`` ends the command with exit 0."""
    tmux = _tmux()
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("payments", 2)
        for i in range(42):
            dl.produce("payments", b"p" * 20, partition=i % 2)
    sock = str(tmp_path / "tmux.sock")
    status = tmp_path / "status"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    script = (f"cd {tmp_path} && {sys.executable} -m kafkalog.cli.main top {data}; "
              f"echo $? > {status}; sleep 30")
    subprocess.run([tmux, "-S", sock, "new-session", "-d", "-x", "120", "-y", "40", "-s", "top", script],
                   check=True, env=env, timeout=30)
    try:
        screen = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = subprocess.run([tmux, "-S", sock, "capture-pane", "-p", "-t", "top"], capture_output=True,
                                    text=True, env=env, timeout=30).stdout
            if "payments" in screen and "RECORDS/S" in screen:
                break
            time.sleep(0.3)
        assert "payments" in screen, screen
        row = next(line for line in screen.splitlines() if "payments" in line)
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells[:3] == ["payments", "2", "42"], row
        # (the data directory's path is in the header: a long one wraps the hint there)
        assert "q quits" in " ".join(screen.split()), screen
        time.sleep(1.5)                     # a refresh or two: the rates are figures now, not "-"
        subprocess.run([tmux, "-S", sock, "send-keys", "-t", "top", "q"], check=True, env=env, timeout=30)
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists(), "kafkalog top did not exit on q"
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], env=env, timeout=30, check=False)


def test_top_reads_kafka_44_as_it_reads_kafkalog(kafka_pair, tmp_path: Path) -> None:
    """Over the bootstrap server, Kafka 4.4 is the reference: the same writes and commits on both give
    the same topics, log end offsets and lags in ``top``'s line."""
    kafka, ours = kafka_pair
    lines = []
    for bootstrap in (kafka.bootstrap, ours.bootstrap):
        _produce(bootstrap, "top-pair", 40, partitions=1)
        _commit(bootstrap, "top-pair-group", "top-pair", {0: 15})
        (line,) = _lines([bootstrap, "--format", "json", "--iterations", "1"], tmp_path)
        lines.append(([(t["topic"], t["partitions"], t["logEndOffset"]) for t in line["topics"]
                       if t["topic"] == "top-pair"],
                      [g for g in line["groups"] if g["group"] == "top-pair-group"]))
    assert lines[0] == lines[1] == ([("top-pair", 1, 40)], [{"group": "top-pair-group", "lag": 25, "partitions": 1}])
