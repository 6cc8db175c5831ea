"""kafkalog's pytest plugin, registered by the ``pytest11`` entry point (installing kafkalog is the
whole set-up; ``-p no:kafkalog`` turns it off).

Fixtures:

* ``kafka_broker``: a :class:`~kafkalog.testing.LocalBroker` on a free port of 127.0.0.1 over a
  temporary data directory. Where it runs: ``--kafka-broker-mode=thread|process`` (ini
  ``kafka_broker_mode``, default ``thread``); how long it lives: ``--kafka-broker-scope=function|
  module|package|session`` (ini ``kafka_broker_scope``, default ``function``: a broker per test);
  its Kafka settings: ini ``kafka_broker_config`` (``key=value`` lines) and, per test or module,
  ``@pytest.mark.kafka_broker(config={...}, mode=..., disk_size=...)``.
* ``kafka_bootstrap_servers``: its ``127.0.0.1:PORT``.
* ``kafka_topic_factory``: ``make(partitions=1, config=None, name=None)`` creates a topic named
  after the test (fresh each call) and returns its name; ``kafka_topic``: one such topic.
* ``kafka_broker_factory``: more brokers in one test, ``make(mode=None, config=None, **options)``,
  each closed at the test's end.

A broker that cannot be made here (``disk_size`` where no tmpfs can be mounted) skips the test,
saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from kafkalog.testing import MODES

if TYPE_CHECKING:
    from kafkalog.testing.local_broker import LocalBroker

SCOPES = ("function", "class", "module", "package", "session")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kafkalog", "kafkalog: a Kafka broker for tests")
    group.addoption("--kafka-broker-mode", choices=MODES, default=None,
                    help="run the kafka_broker fixture's broker on a thread of the test process "
                         "(thread, the default) or in a child process (process)")
    group.addoption("--kafka-broker-scope", choices=SCOPES, default=None,
                    help="how long a kafka_broker lives: function (default: one per test), class, "
                         "module, package or session")
    parser.addini("kafka_broker_mode", "thread or process (see --kafka-broker-mode)", default="thread")
    parser.addini("kafka_broker_scope", "the kafka_broker fixture's scope (see --kafka-broker-scope)",
                  default="function")
    parser.addini("kafka_broker_config", "Kafka broker settings of the kafka_broker fixture, one "
                  "key=value per line", type="linelist", default=[])


def pytest_configure(config: pytest.Config) -> None:
    _leave_the_library_unrewritten(config)
    config.addinivalue_line(
        "markers", "kafka_broker(mode=None, config=None, disk_size=None): the kafka_broker fixture's "
        "mode, Kafka settings (added to the ini's) and tmpfs size for this test or module")
    for name, value, allowed in (("mode", _mode(config), MODES), ("scope", _scope_name(config), SCOPES)):
        if value not in allowed:
            raise pytest.UsageError(f"kafka_broker_{name} = {value!r}: expected one of {', '.join(allowed)}")
    if _mode(config) == "process" and not config.option.collectonly and not config.option.help:
        # the fork server imports the broker while pytest collects, not when the first test asks
        from kafkalog.testing.zygote import zygote
        zygote()


def _leave_the_library_unrewritten(config: pytest.Config) -> None:
    """pytest marks every package of a plugin's distribution for assertion rewriting, so every
    kafkalog module a test process imported would be parsed by pytest's ``ast`` in whichever thread
    imports it. The broker's thread imports some modules when first needed, and CPython 3.11's
    ``ast`` (gh-106905) raises ``SystemError: AST constructor recursion depth mismatch`` when two
    threads parse at once. kafkalog is a library, not tests: only what is already imported (the
    plugin and what it imports) stays rewritten. pytest keeps its marks in a private set; without
    it (another pytest) nothing changes."""
    marked = getattr(getattr(config.pluginmanager, "rewrite_hook", None), "_must_rewrite", None)
    if isinstance(marked, set):
        marked.discard("kafkalog")


def _mode(config: pytest.Config) -> str:
    return str(config.getoption("kafka_broker_mode") or config.getini("kafka_broker_mode")).strip()


def _scope_name(config: pytest.Config) -> str:
    return str(config.getoption("kafka_broker_scope") or config.getini("kafka_broker_scope")).strip()


def _scope(fixture_name: str, config: pytest.Config) -> Any:
    return _scope_name(config)


def _ini_config(config: pytest.Config) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, line in enumerate(config.getini("kafka_broker_config")):
        key, sep, value = str(line).partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"kafka_broker_config line {i + 1} {line!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def _make(request: pytest.FixtureRequest, mode: str | None = None, config: dict[str, Any] | None = None,
          **options: Any) -> LocalBroker:
    # the broker is imported by the first test that asks for one, not by every session
    from kafkalog.testing.disk import DiskUnavailable
    from kafkalog.testing.local_broker import LocalBroker
    try:
        b = LocalBroker(mode or _mode(request.config), {**_ini_config(request.config), **(config or {})},
                        **options)
    except DiskUnavailable as e:
        pytest.skip(str(e))
    return b.start()        # a first start that fails closes the broker itself


@pytest.fixture(scope=_scope)
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[LocalBroker]:
    """A real Kafka broker (kafkalog's) on 127.0.0.1 for the test (see the module's docstring)."""
    marker = request.node.get_closest_marker("kafka_broker")
    kwargs: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    b = _make(request, kwargs.pop("mode", None), kwargs.pop("config", None), **kwargs)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def kafka_bootstrap_servers(kafka_broker: LocalBroker) -> str:
    """``127.0.0.1:PORT`` of ``kafka_broker``."""
    return kafka_broker.bootstrap_servers


@pytest.fixture
def kafka_topic_factory(kafka_broker: LocalBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    """``make(partitions=1, config=None, name=None)``: a new topic on ``kafka_broker``, named after
    the test unless ``name`` is given; returns its name."""
    from kafkalog.testing.local_broker import topic_name

    def make(partitions: int = 1, config: dict[str, Any] | None = None, name: str | None = None) -> str:
        return kafka_broker.create_topic(name or topic_name(request.node.name), partitions, config)
    return make


@pytest.fixture
def kafka_topic(kafka_topic_factory: Callable[..., str]) -> str:
    """A new topic of one partition on ``kafka_broker``, named after the test."""
    return kafka_topic_factory()


@pytest.fixture
def kafka_broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., LocalBroker]]:
    """``make(mode=None, config=None, **options)``: another started broker (options as
    :class:`~kafkalog.testing.LocalBroker`'s: ``data_dir``, ``disk_size``, ``port``), closed at the
    end of the test."""
    made: list[LocalBroker] = []

    def make(mode: str | None = None, config: dict[str, Any] | None = None, **options: Any) -> LocalBroker:
        b = _make(request, mode, config, **options)
        made.append(b)
        return b

    try:
        yield make
    finally:
        for b in made:
            b.close()
