"""kafkalog's pytest plugin as a user's project meets it: pytest in a fresh process on a small test
project, with the options, ini settings and markers a user writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.testing.plugin import basetemp_args, installed, plugin_args

#: each test of the project writes what its broker was: the mode, port, process, topic
PROJECT_TEST = '''
import json, os

from confluent_kafka import Producer


def record(kafka_broker, **more):
    with open(os.environ["KAFKALOG_PLUGIN_LOG"], "a") as f:
        f.write(json.dumps({"mode": kafka_broker.mode, "port": kafka_broker.port,
                            "pid": kafka_broker.pid, "test_pid": os.getpid(), **more}) + "\\n")


def test_one(kafka_broker, kafka_bootstrap_servers, kafka_topic):
    assert kafka_bootstrap_servers == kafka_broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": kafka_bootstrap_servers})
    producer.produce(kafka_topic, b"x")
    assert producer.flush(30) == 0
    assert kafka_broker.values(kafka_topic) == [b"x"]
    record(kafka_broker, topic=kafka_topic)


def test_two(kafka_broker, kafka_topic_factory):
    topic = kafka_topic_factory(partitions=3, config={"retention.ms": 60000})
    assert len(kafka_broker.end_offsets(topic)) == 3
    record(kafka_broker, topic=topic)
'''


def run_project(tmp_path: Path, files: dict[str, str],
                *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    log = tmp_path / "brokers.jsonl"
    env = dict(os.environ, KAFKALOG_PLUGIN_LOG=str(log))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(),
                        *basetemp_args(tmp_path), *args],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r, rows


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_broker_per_test_by_default(tmp_path: Path, mode: str) -> None:
    r, rows = run_project(tmp_path, {"test_a.py": PROJECT_TEST}, f"--kafka-broker-mode={mode}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [row["mode"] for row in rows] == [mode, mode]
    assert rows[0]["port"] != rows[1]["port"]                 # two brokers
    assert rows[0]["topic"].startswith("test_one-") and rows[1]["topic"].startswith("test_two-")
    in_process = [row["pid"] == row["test_pid"] for row in rows]
    assert in_process == ([True, True] if mode == "thread" else [False, False])


def test_module_scope_shares_a_broker_within_a_module(tmp_path: Path) -> None:
    r, rows = run_project(tmp_path, {"test_a.py": PROJECT_TEST, "test_b.py": PROJECT_TEST},
                          "--kafka-broker-scope=module")
    assert r.returncode == 0, r.stdout + r.stderr
    ports = [row["port"] for row in rows]
    assert ports[0] == ports[1] and ports[2] == ports[3] and ports[0] != ports[2]


def test_ini_settings_and_a_marker(tmp_path: Path) -> None:
    """The ini's mode, scope and Kafka settings; a marker adds settings for one test (here the
    topics a producer auto-creates get num.partitions)."""
    ini = """
        [pytest]
        kafka_broker_mode = process
        kafka_broker_scope = session
        kafka_broker_config =
            num.partitions=2
            log.segment.bytes=1048576
    """
    test = """
        import pytest
        from confluent_kafka import Producer


        def auto_created(kafka_broker, topic):
            producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
            producer.produce(topic, b"x")
            assert producer.flush(30) == 0
            return len(kafka_broker.end_offsets(topic))


        def test_session_broker(kafka_broker):
            assert kafka_broker.mode == "process"
            assert kafka_broker.config == {"num.partitions": "2", "log.segment.bytes": "1048576"}
            assert auto_created(kafka_broker, "auto-a") == 2


        def test_same_session_broker(kafka_broker):
            assert "auto-a" in kafka_broker.topics()


        def test_own_broker(kafka_broker_factory):
            b = kafka_broker_factory(mode="thread", config={"num.partitions": 4})
            assert b.mode == "thread" and b.config["log.segment.bytes"] == "1048576"
            assert auto_created(b, "auto-b") == 4
    """
    r, _rows = run_project(tmp_path, {"pytest.ini": ini, "test_ini.py": test})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 passed" in r.stdout

    marked = """
        import pytest

        @pytest.mark.kafka_broker(mode="thread", config={"num.partitions": 5})
        def test_marked(kafka_broker):
            assert kafka_broker.mode == "thread"
            assert kafka_broker.config == {"num.partitions": "5", "log.segment.bytes": "1048576"}
    """
    r, _rows = run_project(tmp_path, {"test_ini.py": marked}, "--kafka-broker-scope=function")
    assert r.returncode == 0, r.stdout + r.stderr


def test_bad_settings_are_refused_saying_which(tmp_path: Path) -> None:
    r, _ = run_project(tmp_path, {"test_a.py": PROJECT_TEST}, "--kafka-broker-mode=docker")
    assert r.returncode == 4 and "invalid choice: 'docker'" in r.stderr
    r, _ = run_project(tmp_path, {"pytest.ini": "[pytest]\nkafka_broker_scope = forever\n",
                                  "test_a.py": PROJECT_TEST})
    assert r.returncode == 4 and "kafka_broker_scope = 'forever'" in r.stderr
    r, _ = run_project(tmp_path, {"pytest.ini": "[pytest]\nkafka_broker_config = num.partitions\n",
                                  "test_a.py": PROJECT_TEST})
    assert r.returncode != 0 and "kafka_broker_config line 1 'num.partitions': expected key=value" in r.stdout
    r, _ = run_project(tmp_path, {"pytest.ini": "[pytest]\nkafka_broker_config = log.segmnet.bytes=1\n",
                                  "test_a.py": PROJECT_TEST})
    assert r.returncode != 0 and "log.segmnet.bytes" in r.stdout


def test_loading_the_plugin_imports_no_broker() -> None:
    """Every pytest session of a project with kafkalog installed loads the plugin: it must cost
    nothing until a test asks for a broker."""
    code = ("import sys, kafkalog.testing.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith(('kafkalog.', 'kio', 'asyncio'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["kafkalog.errors", "kafkalog.testing", "kafkalog.testing.pytest_plugin"]


@pytest.mark.skipif(not installed(), reason="kafkalog is installed without its pytest11 entry point "
                    "(an editable install older than the plugin): the entry point cannot be checked")
def test_the_entry_point_loads_the_plugin_and_no_kafkalog_disables_it(tmp_path: Path) -> None:
    r, _ = run_project(tmp_path, {"test_a.py": PROJECT_TEST})
    assert r.returncode == 0, r.stdout + r.stderr
    r, _ = run_project(tmp_path, {"test_a.py": PROJECT_TEST}, "-p", "no:kafkalog")
    assert r.returncode != 0 and "fixture 'kafka_broker' not found" in r.stdout


@pytest.mark.skipif(not installed(), reason="kafkalog is installed without its pytest11 entry point: "
                    "pytest marks no kafkalog package for rewriting, so there is nothing to check")
def test_kafkalogs_own_modules_are_not_assertion_rewritten(tmp_path: Path) -> None:
    """pytest marks every package of a plugin's distribution for assertion rewriting. A kafkalog
    module imported later (as the broker's thread does) must load as Python loads it: rewriting
    parses it with ``ast`` on that thread, and CPython 3.11's ``ast`` fails with ``SystemError``
    when two threads parse at once (seen in CI). The user's own tests are still rewritten."""
    r, _ = run_project(tmp_path, {"test_a.py": '''
        import importlib


        def test_a_library_module_loads_plainly():
            module = importlib.import_module("kafkalog.server.coordinator.group_migration")
            assert type(module.__loader__).__name__ == "SourceFileLoader", module.__loader__


        def test_the_users_asserts_are_rewritten():
            left = [1, 2]
            assert left == [1, 3]
        '''})
    assert "1 failed, 1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert "test_the_users_asserts_are_rewritten" in r.stdout and "assert [1, 2] == [1, 3]" in r.stdout, r.stdout


def test_pip_install_is_the_whole_set_up(tmp_path: Path) -> None:
    """The issue's "done when": ``pip install kafkalog`` (this tree, not editable, into a directory
    of its own, pure-Python kernels to keep it quick) and a test that takes ``kafka_broker``; no
    ``-p``, no conftest: the ``pytest11`` entry point loads the plugin, ``-p no:kafkalog`` unloads it.
    Also proves the installed package needs nothing that only a checkout has."""
    pytest.importorskip("wheel", reason="pip builds kafkalog's wheel with the 'wheel' package "
                        "(kafkalog[test] installs it); without it this pip cannot install from source")
    root = Path(__file__).resolve().parents[2]
    source, site = tmp_path / "source", tmp_path / "site"
    source.mkdir()
    listed = subprocess.run(["git", "ls-files", "-z", "src", "setup.py", "pyproject.toml", "README.md"],
                            cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, listed):     # the tree as committed or edited, no built kernels
        (source / name.decode()).parent.mkdir(parents=True, exist_ok=True)
        (source / name.decode()).write_bytes((root / name.decode()).read_bytes())
    env = dict(os.environ, KAFKALOG_NO_EXTENSIONS="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(source)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_user.py").write_text(textwrap.dedent(f'''
        import kafkalog
        from kafka import KafkaProducer


        def test_user(kafka_broker, kafka_topic):
            assert kafkalog.__file__.startswith({str(site)!r}), kafkalog.__file__
            producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
            producer.send(kafka_topic, b"order-1").get(timeout=30)
            producer.close()
            assert kafka_broker.values(kafka_topic) == [b"order-1"]
        '''), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(site))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
               *basetemp_args(tmp_path), "test_user.py"]
    r = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([*command, "-p", "no:kafkalog"], cwd=project, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode != 0 and "fixture 'kafka_broker' not found" in r.stdout, r.stdout[-3000:]


def test_a_disk_that_cannot_be_mounted_skips_the_test_saying_why(tmp_path: Path) -> None:
    """``disk_size`` needs ``mount -t tmpfs`` (Linux, the right to mount): on a platform without it
    (here: no ``mount`` on the PATH) the test is skipped with the reason, not failed."""
    project = {"test_disk.py": '''
        import pytest


        @pytest.mark.kafka_broker(disk_size="8m")
        def test_full(kafka_broker):
            kafka_broker.fill_disk()


        def test_plain(kafka_broker):
            assert kafka_broker.port > 0
        '''}
    empty = tmp_path / "bin"
    empty.mkdir()
    for name, text in project.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *plugin_args(),
                        *basetemp_args(tmp_path)],
                       cwd=tmp_path, env=dict(os.environ, PATH=str(empty)), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "1 passed, 1 skipped" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert "SKIPPED [1] test_disk.py:" in r.stdout and "cannot mount a tmpfs of 8m" in r.stdout, r.stdout
