"""kafkalog for tests: a real Kafka broker in a pytest fixture, started in milliseconds, with
faults on demand (docs/testing.md).

Installing kafkalog registers the pytest plugin (:mod:`kafkalog.testing.pytest_plugin`: the
``kafka_broker`` fixture and its friends); without pytest, ``with kafkalog.testing.broker() as b:``
(or ``async with kafkalog.testing.async_broker() as b:``) gives the same broker.

The names below are imported on first use: importing this package (as the pytest plugin does in
every test session) costs nothing until a test asks for a broker."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafkalog.testing.aio import AsyncBroker, AsyncFault, AsyncHold, async_broker  # noqa: F401
    from kafkalog.testing.disk import DiskUnavailable  # noqa: F401
    from kafkalog.testing.faults import Fault, Hold  # noqa: F401
    from kafkalog.testing.local_broker import LocalBroker, broker, topic_name  # noqa: F401
    from kafkalog.testing.runners import BrokerExited  # noqa: F401
    from kafkalog.testing.waiting import WaitTimeout, wait_for  # noqa: F401

#: where a broker runs: a thread of the test process, or a child process
MODES = ("thread", "process")

_LAZY = {
    "AsyncBroker": "aio", "AsyncFault": "aio", "AsyncHold": "aio", "async_broker": "aio",
    "DiskUnavailable": "disk", "Fault": "faults", "Hold": "faults", "LocalBroker": "local_broker",
    "broker": "local_broker", "topic_name": "local_broker", "BrokerExited": "runners",
    "WaitTimeout": "waiting", "wait_for": "waiting",
}

__all__ = ["MODES", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kafkalog.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kafkalog.testing.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
