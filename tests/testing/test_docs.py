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

from tests.testing.plugin import plugin_args

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


def _params() -> list[object]:
    marks = {"test_spark_kafka_source.py": [pytest.mark.spark], "test_java_client.py": [pytest.mark.kafka]}
    return [pytest.param(name, marks=marks.get(name, []), id=name[:-3]) for name in examples()]


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


@pytest.mark.parametrize("name", _params())
def test_the_example_runs_as_printed(name: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(examples()[name], encoding="utf-8")
    env = _environment(name)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                        *plugin_args(), name], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert " passed" in out and "skipped" not in out, out[-3000:]
