from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.consumer_group_raw import FAST_CONSUMER_GROUPS
from tests.server.share_raw import SHARE_SETTINGS


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One ``kafkalog serve`` per test module (topics are named per test)."""
    d = str(tmp_path_factory.mktemp("broker") / "data")
    b = BrokerProcess(d).start()
    try:
        yield b
    finally:
        if b.alive():
            rc = b.stop()
            assert rc == 0, b.stderr()
            assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown")), b.stderr()
        else:
            b.kill()


@pytest.fixture(scope="module")
def kafka44_fast_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka44.KafkaBroker]:
    """Kafka 4.4 with the consumer group settings of :data:`FAST_CONSUMER_GROUPS` (short sessions
    and heartbeats, no assignment interval), one per test module; marks its tests ``kafka``."""
    kafka44.require()
    b = kafka44.KafkaBroker(tmp_path_factory.mktemp("kafka44-groups"), FAST_CONSUMER_GROUPS)
    b.format()
    b.start()
    try:
        yield b
    finally:
        if b.alive():
            b.stop()


@pytest.fixture(scope="module")
def kafkalog_fast_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """``kafkalog serve`` with the settings of :data:`FAST_CONSUMER_GROUPS`, one per test module:
    the peer of :func:`kafka44_fast_groups`."""
    with BrokerProcess(str(tmp_path_factory.mktemp("kafkalog-groups") / "data"),
                       [f"{k}={v}" for k, v in FAST_CONSUMER_GROUPS.items()]).running() as b:
        yield b


@pytest.fixture(scope="module")
def kafka44_share(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka44.KafkaBroker]:
    """Kafka 4.4 with the share group settings of :data:`SHARE_SETTINGS` (short sessions and
    heartbeats, locks from 1 s, assignments at once), one per test module; marks its tests ``kafka``."""
    kafka44.require()
    b = kafka44.KafkaBroker(tmp_path_factory.mktemp("kafka44-share"), SHARE_SETTINGS)
    b.format()
    b.start()
    try:
        yield b
    finally:
        if b.alive():
            b.stop()
