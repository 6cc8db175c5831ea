"""docs/testing.md runs as printed: every ```python block is a complete test module (its first line
names the file), run by pytest in a fresh process with kafkalog's plugin, as a user's project would
run it. The Java example gets Kafka 4.4's jars (``KAFKA_CLASSPATH``), the Spark one Spark's Kafka
connector (``SPARK_KAFKA_JARS``), from Maven through the suite's helpers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing.plugin import basetemp_args, plugin_args

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
NAME = re.compile(r"# (test_\w+\.py)\n")


def examples() -> dict[str, str]:
    out: dict[str, str] = {}
    for code in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        m = NAME.match(code)
        assert m, f"every python block of {DOC.name} starts with '# test_<name>.py': {code[:80]!r}"
        assert m.group(1) not in out, f"two examples named {m.group(1)}"
        out[m.group(1)] = code
    return out


#: the fault examples run with a process broker too (``--kafka-broker-mode=process``): every fault
#: works across the process boundary
IN_BOTH_MODES = ("test_fail_retries.py", "test_delay_timeouts.py", "test_drop_idempotence.py",
                 "test_hold_acknowledgement.py", "test_rebalance.py", "test_transaction_timeout.py",
                 "test_restart.py", "test_full_disk.py")
#: run with ``-m slow``: the process-mode runs of faults that cross the boundary as the default ones
#: do (a rule sent, matched and applied in the broker's process: fail, hold and full disk show it,
#: restart is its own path), and the Spark example (a JVM of its own for what
#: tests/spark/test_kafka_connector.py runs against ``kafkalog serve`` in every run)
SLOW = {("test_delay_timeouts.py", "process"), ("test_drop_idempotence.py", "process"),
        ("test_rebalance.py", "process"), ("test_transaction_timeout.py", "process"),
        ("test_spark_kafka_source.py", None)}


def _params() -> list[object]:
    marks = {"test_spark_kafka_source.py": [pytest.mark.spark], "test_java_client.py": [pytest.mark.kafka]}

    def param(name: str, mode: str | None) -> object:
        slow = [pytest.mark.slow] if (name, mode) in SLOW else []
        return pytest.param(name, mode, marks=marks.get(name, []) + slow,
                            id=name[:-3] + ("-process" if mode else ""))
    return [param(name, None) for name in examples()] + [param(name, "process") for name in IN_BOTH_MODES]


def _environment(name: str) -> dict[str, str]:
    env = dict(os.environ)
    if name == "test_java_client.py":
        from tests import kafka44
        env["KAFKA_CLASSPATH"] = kafka44.require()
    if name == "test_spark_kafka_source.py":
        from tests import kafka44
        from tests.spark import kafka_connector
        try:
            env["SPARK_KAFKA_JARS"] = ",".join(kafka_connector.jars())
        except kafka44.Kafka44Unavailable as e:
            kafka44._unavailable(f"Spark's Kafka connector: {e}")
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def test_the_page_has_an_example_per_client_and_per_fault() -> None:
    text = "\n".join(examples().values())
    for client in ("from kafka import", "from aiokafka import", "from confluent_kafka import",
                   "org.apache.kafka.tools.ConsoleProducer", 'format("kafka")', "kafkalog.open(",
                   "unittest.TestCase", "async_broker"):
        assert client in text, client
    for fault in (".fail(", ".delay(", ".drop(", ".hold(", ".restart(", ".crash(", "fill_disk()",
                  '"Heartbeat", "REBALANCE_IN_PROGRESS"', "transaction.timeout.ms"):
        assert fault in text, fault


@pytest.mark.parametrize(("name", "mode"), _params())
def test_the_example_runs_as_printed(name: str, mode: str | None, tmp_path: Path) -> None:
    assert name in examples()
    (tmp_path / name).write_text(examples()[name], encoding="utf-8")
    env = _environment(name)
    options = [f"--kafka-broker-mode={mode}"] if mode else []
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                        *plugin_args(), *basetemp_args(tmp_path), *options, name], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert " passed" in out and "skipped" not in out, out[-3000:]


def test_the_readme_example_runs_as_printed(tmp_path: Path) -> None:
    readme = DOC.parents[1] / "README.md"
    section = readme.read_text(encoding="utf-8").split("## A Kafka broker for your tests", 1)[1]
    code = BLOCK.search(section)
    assert code is not None
    (tmp_path / "test_readme_example.py").write_text(code.group(1), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(),
                        *basetemp_args(tmp_path), "test_readme_example.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
