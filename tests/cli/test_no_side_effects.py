"""No command and no library call writes where the user did not name, and a command's start pays
only for what it runs (issue 36, item 1; issue 35, "subcommand start").

kio (the broker's protocol library) registers hypothesis strategies when imported with hypothesis
installed, and hypothesis then caches its Unicode tables in ``./.hypothesis/unicode_data``: every
``kafkalog`` command (``--help`` too, which imported kio through ``dump``), ``kafkalog serve`` and
``kafkalog.testing.broker()`` left that directory in the current one (Kafka 4.4 then refuses to start
on a data directory someone ran them in). Each test runs a real process in a fresh, empty working
directory and asserts it stays empty; ``--help`` of each subcommand imports no heavy module (counted
from ``sys.modules``, not timed: ``benchmarks/cli_start_bench.py`` has the times)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog
from kafkalog.cli.main import COMMANDS
from kafkalog.record.builder import BatchBuilder
from kafkalog.record.constants import ControlRecordType
from kafkalog.record.control import control_key

#: what a command's --help must not import: the protocol library and what it pulls in, the
#: engines of other jobs, and kafkalog's layers above the log (the broker, the clients, the cleaner)
HEAVY = ("kio", "hypothesis", "pyspark", "pyarrow", "numpy", "pandas", "rich", "asyncio", "ssl",
         "kafka", "confluent_kafka", "aiokafka", "kafkalog.server", "kafkalog.client", "kafkalog.aio",
         "kafkalog.cleaner", "kafkalog.coordinator", "kafkalog.spark", "kafkalog.testing",
         "kafkalog.tiered", "kafkalog.log.manager", "kafkalog.log.log")

_MODULES_AFTER = """
import json, sys
sys.argv = ["kafkalog", *json.loads(sys.argv[1])]
from kafkalog.cli.main import main
try:
    main()
except SystemExit:
    pass
with open({out!r}, "w") as f:
    json.dump(sorted(sys.modules), f)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    return env


def _modules_of(args: list[str], cwd: Path, out: Path) -> set[str]:
    res = subprocess.run([sys.executable, "-c", _MODULES_AFTER.format(out=str(out)), json.dumps(args)],
                         cwd=cwd, capture_output=True, text=True, timeout=120, env=_env())
    assert res.returncode == 0, res.stderr[-2000:]
    return set(json.loads(out.read_text()))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("command", ["", *sorted(COMMANDS)])
def test_help_imports_nothing_heavy_and_writes_nothing(tmp_path: Path, command: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    args = [command, "--help"] if command else ["--help"]
    modules = _modules_of(args, cwd, tmp_path / "modules.json")
    assert "click" in modules                       # (the probe ran the command)
    assert _heavy(modules) == [], f"kafkalog {' '.join(args)} imported {_heavy(modules)}"
    assert list(cwd.iterdir()) == []


def _segment_with_a_kraft_record(tmp_path: Path) -> Path:
    """A segment holding a record batch and a KRaftVersion control record (what dump decodes with
    kio's schemas: a dump that needs kio imports it, and still writes nothing)."""
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b"v", key=b"k", partition=0)
    log = data / "t-0" / "00000000000000000000.log"
    b = BatchBuilder(is_control=True, base_offset=1)
    b.append(control_key(ControlRecordType.KRAFT_VERSION), b"\x00\x00\x00\x01\x00", timestamp=0)
    raw = tmp_path / "kraft.records"
    raw.write_bytes(log.read_bytes() + b.build())
    return raw


def test_dump_writes_nothing_in_the_working_directory(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    raw = _segment_with_a_kraft_record(tmp_path)
    res = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", "--records", "--deep", str(raw)],
                         cwd=cwd, capture_output=True, text=True, timeout=120, env=_env())
    assert res.returncode == 0, res.stderr
    assert "KRaftVersion" in res.stdout            # kio decoded the control record
    assert list(cwd.iterdir()) == []


_BROKER = """
import sys
import kafkalog.testing
from kafka import KafkaProducer
with kafkalog.testing.broker(mode=sys.argv[1]) as b:
    p = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
    p.send("t", b"hello").get(60)
    p.close()
    assert b.values("t") == [b"hello"]
print("hypothesis" in sys.modules)
"""


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_test_broker_writes_nothing_in_the_working_directory(tmp_path: Path, mode: str) -> None:
    pytest.importorskip("kafka")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    res = subprocess.run([sys.executable, "-c", _BROKER, mode], cwd=cwd, capture_output=True, text=True,
                         timeout=300, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["False"]         # hypothesis (~100 ms) not imported either
    assert list(cwd.iterdir()) == []


def test_serve_writes_nothing_but_its_data_directory(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "kafkalog.cli.main", "serve", str(tmp_path / "data"),
                          "--port", "0"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_env())
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line, p.stderr.read() if p.stderr else ""
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
    assert p.returncode == 0
    assert list(cwd.iterdir()) == []
