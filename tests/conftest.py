"""Fixtures every test directory shares: Apache Kafka 4.4 as a real broker (``tests/kafka44``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import kafka44


@pytest.fixture(scope="module")
def kafka44_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka44.KafkaBroker]:
    """One Kafka 4.4 broker per test module, formatted fresh, always stopped (topics are per test)."""
    kafka44.require()
    broker = kafka44.KafkaBroker(tmp_path_factory.mktemp("kafka44"))
    broker.format()
    broker.start()
    try:
        yield broker
    finally:
        if broker.alive():
            broker.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses Kafka 4.4 is marked ``kafka`` (``-m 'not kafka'`` runs the suite without a JVM)."""
    for item in items:
        if {"kafka44_broker", "kafka44_fast_groups"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)
