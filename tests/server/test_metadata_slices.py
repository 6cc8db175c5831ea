"""Issue 35: a Metadata request for more topics than one slice (every topic of a node, most often)
is answered :data:`TOPICS_PER_SLICE` topics at a time, the event loop serving the other
connections between two slices (100,000 partitions held it 250-450 ms, the first time after a
restart and each time after). Its answer is the one the topics' entries make together, in the
same order, for every version: a request for every topic (sliced) against requests of a few
(answered at once)."""

from __future__ import annotations

from typing import Any

import pytest

from kafkalog.server.handlers import metadata
from kafkalog.testing import LocalBroker
from tests.server.raw import response_of
from tests.server.test_metadata_costs import _metadata

TOPICS = 3 * metadata.TOPICS_PER_SLICE + 5


def _ask(port: int, version: int, topics: list[str] | None) -> Any:
    return response_of(_metadata(port, version, topics), 3, version)


def _topics(resp: Any) -> list[tuple[Any, ...]]:
    return [(t.error_code, t.name, [(p.partition_index, p.leader_id) for p in t.partitions])
            for t in resp.topics]


@pytest.fixture(scope="module")
def broker() -> Any:
    with LocalBroker("thread", {"auto.create.topics.enable": "false"}) as b:
        for i in range(TOPICS):
            b.create_topic(f"s{i:03d}", i % 3 + 1)
        yield b


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12, 13])
def test_every_topic_answered_in_slices_is_the_topics_answered_one_by_one(broker: Any, version: int) -> None:
    names = [f"s{i:03d}" for i in range(TOPICS)]
    whole = _topics(_ask(broker.port, version, None))
    assert [t[1] for t in whole] == names
    one_by_one = [t for i in range(0, TOPICS, 10) for t in _topics(_ask(broker.port, version, names[i:i + 10]))]
    assert whole == one_by_one
    assert [len(t[2]) for t in whole] == [i % 3 + 1 for i in range(TOPICS)]


@pytest.mark.parametrize("seconds,yields", [(3600.0, (TOPICS - 1) // metadata.TOPICS_PER_SLICE),
                                            (0.0, TOPICS - 1)])
def test_a_slice_of_topics_also_ends_on_its_clock(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                  seconds: float, yields: int) -> None:
    """A slice ends after :data:`slices.SLICE_SECONDS` whatever its count of topics (entries built
    again after a restart on a loaded machine: 16 topics of 100 partitions held the loop 43-143
    ms); with a budget of 0 every topic is a slice of its own."""
    from kafkalog.log.manager import LogManager
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import ServerConfig
    from kafkalog.server.handlers import slices
    from kafkalog.server.requests.protocol import Request
    monkeypatch.setattr(slices, "SLICE_SECONDS", seconds)
    cfg = ServerConfig({})
    manager = LogManager(tmp_path / "data", cfg.broker, background=False)
    try:
        b = Broker(manager, cfg, cfg.advertised("127.0.0.1", 0))
        for i in range(TOPICS):
            b.create_topic(f"c{i:03d}", 1, {})
        body = type("Body", (), {"topics": None, "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})()
        request = Request(3, 12, 5, "c", body, True, 0)
        topics: list[Any] = []
        steps = metadata._topic_entries(b, request, [(f"c{i:03d}", None) for i in range(TOPICS)], topics, [])
        assert sum(1 for _ in steps) == yields
        assert len(topics) == TOPICS
    finally:
        manager.close()
