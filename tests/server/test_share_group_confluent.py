"""confluent-kafka's ``ShareConsumer`` (librdkafka's KIP-932 preview, confluent-kafka 2.16) against
``kafkalog serve`` and Kafka 4.4 in the same test: one consumer takes the records and holds them
unacknowledged (explicit mode) until their locks expire; a second is delivered them again
(delivery count 2), releases them, gets them a third time and accepts them; the deliveries and the
group's offsets equal to Kafka's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.share_raw import SHARE_SETTINGS
from tests.server.test_share_group_clients import _group, _offsets

ShareConsumer = getattr(confluent_kafka, "ShareConsumer", None)
pytestmark = pytest.mark.skipif(ShareConsumer is None, reason="this confluent-kafka has no ShareConsumer")


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("kafkalog-share-confluent") / "data"),
                      [f"{k}={v}" for k, v in SHARE_SETTINGS.items()]).start()
    try:
        yield b
    finally:
        if b.alive():
            assert b.stop() == 0, b.stderr()


def _consumer(bootstrap: str, group: str, topic: str) -> Any:
    assert ShareConsumer is not None
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def hold_then_release_then_accept(bootstrap: str) -> Any:
    topic = "cshare-" + uuid.uuid4().hex[:6]
    group = _group(bootstrap, topic, {"share.record.lock.duration.ms": "6000"}, [b"a", b"b", b"c"])
    holder = _consumer(bootstrap, group, topic)
    taker = None
    try:
        held: list[tuple[int, int]] = []
        deadline = time.monotonic() + 90
        while not held and time.monotonic() < deadline:
            held = [(m.offset(), m.delivery_count()) for m in holder.poll(0.5) if m.error() is None]
        taker = _consumer(bootstrap, group, topic)
        taken: list[tuple[int, int]] = []
        while {o for o, n in taken if n == 3} != {0, 1, 2} and time.monotonic() < deadline:
            for m in taker.poll(0.5):
                if m.error() is None:
                    taken.append((m.offset(), m.delivery_count()))
                    kind = confluent_kafka.AcknowledgeType.RELEASE if m.delivery_count() < 3 \
                        else confluent_kafka.AcknowledgeType.ACCEPT
                    taker.acknowledge(m, kind)
            taker.commit_sync(30)
        while _offsets(bootstrap, group, topic)[1] != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        return held, sorted(taken), _offsets(bootstrap, group, topic)
    finally:
        holder.close()
        if taker is not None:
            taker.close()


def test_confluent_share_consumer_as_kafka(kafka44_share: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    theirs = hold_then_release_then_accept(kafka44_share.bootstrap)
    mine = hold_then_release_then_accept(ours.bootstrap)
    assert mine == theirs, f"Kafka 4.4: {theirs}, kafkalog: {mine}"
    held, taken, _offsets_now = mine
    assert held == [(0, 1), (1, 1), (2, 1)]
    assert taken == [(0, 2), (0, 3), (1, 2), (1, 3), (2, 2), (2, 3)]
