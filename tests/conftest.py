"""Fixtures every test directory shares: Apache Kafka 4.4 as a real broker (``tests/kafka44``), and one
local SparkSession for the whole test run (starting one takes 10-20 s)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.differential import PAIR_NODE
from tests.spark import class_archive as spark_classes
from tests.testing import plugin

#: kafkalog's pytest plugin comes with the installed package (its ``pytest11`` entry point); an
#: installation made before the plugin existed (an editable install of an older checkout) lacks the
#: entry point, so the suite loads the plugin itself
if not plugin.installed():
    pytest_plugins = [plugin.PLUGIN]


#: the Spark drivers the tests start (the session below, those of the tests' own subprocesses, Spark
#: Connect's server) run as tests.kafka44.JAVA runs Kafka: the quick compiler only and the serial
#: collector (tests/spark's reads and streams: 108 -> 76 CPU-s), mapping tests.spark.class_archive's
#: archive of Spark's classes once it exists. A value of the caller's is kept.
SPARK_SUBMIT_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """The environment the suite's children inherit (set once, by the process that starts the
    others: xdist's workers inherit it): Spark's driver options (:data:`SPARK_SUBMIT_OPTS`), and
    one bytecode cache (below)."""
    os.environ.setdefault("SPARK_SUBMIT_OPTS", f"{SPARK_SUBMIT_OPTS} {spark_classes.options()}".strip())
    _share_bytecode(config)


def _share_bytecode(config: pytest.Config) -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set (as on this project's machines), every Python the suite
    starts (``kafkalog serve``, the CLI, pytest in a subprocess, Spark's Python workers, each xdist
    worker's assertion rewriting) compiled kafkalog and the tests from source, hundreds of times a
    run. The suite gives its children one bytecode cache instead, in a temporary directory of its
    own (``PYTHONPYCACHEPREFIX``, nothing written beside the sources) removed when the run ends."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("PYTHONDONTWRITEBYTECODE") \
            or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    cache = tempfile.mkdtemp(prefix="kafkalog-tests-pycache-")
    os.environ["PYTHONPYCACHEPREFIX"] = cache
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix = cache
    sys.dont_write_bytecode = False
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
    _interrupt_on_sigterm()


def _interrupt_on_sigterm() -> None:
    """SIGTERM (``timeout``, a CI job cancelled) stops the run as Ctrl-C does, so its cleanups
    (the bytecode cache above, brokers' fixtures) run: by default it ended the process at once and
    left the cache behind in the temporary directory."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)       # (a second SIGTERM ends it at once)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)


def _module_configs(request: pytest.FixtureRequest) -> dict[str, str]:
    """The broker keys a test module sets for both brokers of its pair, in its ``PAIR_CONFIGS``
    (Kafka's keys, which ``kafkalog serve --config`` takes too); none by default."""
    return dict(getattr(request.module, "PAIR_CONFIGS", {}))


@pytest.fixture(scope="module")
def kafka44_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[kafka44.KafkaBroker]:
    """One Kafka 4.4 broker per test module, formatted fresh, always stopped (topics are per test),
    with the module's ``PAIR_CONFIGS``."""
    kafka44.require()
    broker = kafka44.KafkaBroker(tmp_path_factory.mktemp("kafka44"), _module_configs(request))
    broker.format()
    broker.start()
    try:
        yield broker
    finally:
        if broker.alive():
            broker.stop()


@pytest.fixture(scope="module")
def kafka_pair(request: pytest.FixtureRequest, kafka44_broker: kafka44.KafkaBroker,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[kafka44.KafkaBroker, BrokerProcess]]:
    """Apache Kafka 4.4 and ``kafkalog serve`` side by side, one pair per test module (issue 25),
    kafkalog configured as the Kafka fixture is (node 1, no initial rebalance delay, num.partitions
    given, the module's ``PAIR_CONFIGS``)."""
    d = str(tmp_path_factory.mktemp("pair") / "data")
    extra = [f"{k}={v}" for k, v in _module_configs(request).items()]
    ours = BrokerProcess(d, configs=[f"node.id={PAIR_NODE}", "group.initial.rebalance.delay.ms=0",
                                     "num.partitions=1", *extra]).start()
    try:
        yield kafka44_broker, ours
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
        else:
            ours.kill()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (tests/spark and the Kafka 4.4 comparisons)."""
    pytest.importorskip("pyspark")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafkalog.spark
    from tests.spark import kafka_connector

    maker = spark_classes.make_in_background()         # for the drivers started after this one
    builder = SparkSession.builder
    try:  # Spark's own format("kafka") (tests/spark/test_kafka_connector.py), when Maven has it
        builder = builder.config("spark.jars", ",".join(kafka_connector.jars()))
    except kafka44.Kafka44Unavailable:
        pass                                      # those tests skip (or fail on CI) saying why
    session = (builder.master("local[2]")
               .appName("kafkalog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .getOrCreate())
    kafkalog.spark.register(session)
    yield session
    session.stop()
    if maker is not None:
        spark_classes.finish(maker)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses Kafka 4.4 is marked ``kafka`` (``-m 'not kafka'`` runs the suite without a JVM)."""
    oracle = {"kafka44_broker", "kafka44_fast_groups", "kafka44_txn", "kafka44_share"}
    for item in items:
        if oracle & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)
