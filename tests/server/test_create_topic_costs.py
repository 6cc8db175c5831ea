"""Issue 35: what a new partition costs the disk. CreateTopics at 1,000 partitions took 7.7x Kafka
4.4's time; each new partition waited on three fsyncs (its ``partition.metadata``, its
``leader-epoch-checkpoint`` and its directory). The leader epoch a broker records when it starts
leading a new partition is now written without fsync: lost to a power cut, it is the entry the
broker writes again when it loads the partition (``Broker.lead``), and the log's flush fsyncs it
with the records it covers. The fsyncs and renames made while a broker creates a topic are counted
(the calls of ``os.fsync``, ``os.rename`` and ``os.replace`` on every thread, not timed), for 10 and
for 30 partitions; a SIGKILL right after CreateTopics is answered loses neither the topic nor its
id."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from tests.os_calls import count_os_calls
from tests.server.broker_process import BrokerProcess

NAMES = ("fsync", "rename", "replace")


def _ops_creating(broker: Any, topic: str, partitions: int, monkeypatch: Any) -> dict[str, int]:
    """The calls of ``os.fsync``, ``os.rename`` and ``os.replace`` while ``topic`` is created,
    on every thread (the fsyncs run on the process's sync threads, made before this count)."""
    with monkeypatch.context() as m:
        counts = count_os_calls(m, NAMES)
        broker.create_topic(topic, partitions, {})
    return dict(counts)


def test_fsyncs_and_renames_per_created_partition(tmp_path: Path, monkeypatch: Any) -> None:
    from kafkalog.log.manager import LogManager
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import ServerConfig
    cfg = ServerConfig({})
    manager = LogManager(tmp_path / "data", cfg.broker, background=False)
    try:
        broker = Broker(manager, cfg, cfg.advertised("127.0.0.1", 0))
        broker.create_topic("warm", 1, {})
        few = _ops_creating(broker, "few", 10, monkeypatch)
        many = _ops_creating(broker, "many", 30, monkeypatch)
        per_partition = {k: (many[k] - few[k]) / 20 for k in NAMES}
        # partition.metadata (the topic's id) and the partition's directory; 3 before
        assert per_partition["fsync"] == 2, (few, many)
        # partition.metadata and leader-epoch-checkpoint, each written aside and renamed into place
        assert per_partition["rename"] + per_partition["replace"] == 2, (few, many)
        assert manager.get_log("many", 29).leader_epoch_cache.epoch_entries() == [(0, 0)]
    finally:
        manager.close()


def test_topic_answered_then_sigkill_is_there_after_restart(tmp_path: Path) -> None:
    """The crash right after the answer: the topic, its id and every partition's first leader
    epoch are there when the broker comes back (confluent-kafka's AdminClient and consumer)."""
    from confluent_kafka import TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
    b = BrokerProcess(str(tmp_path / "data")).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("t", 40, 1)], operation_timeout=60).values():
            f.result(60)
        tid = admin.describe_topics(
            TopicCollection(["t"]))["t"].result(60).topic_id
        b.kill()
        with BrokerProcess(str(tmp_path / "data")).running() as again:
            admin = AdminClient({"bootstrap.servers": again.bootstrap})
            desc = admin.describe_topics(
                TopicCollection(["t"]))["t"].result(60)
            assert str(desc.topic_id) == str(tid)
            assert len(desc.partitions) == 40 and all(p.leader is not None for p in desc.partitions)
            asked = {TopicPartition("t", p): OffsetSpec.earliest() for p in range(40)}
            for f in admin.list_offsets(asked).values():
                got = f.result(60)
                assert (got.offset, got.leader_epoch) == (0, 0)
    finally:
        b.kill()
    for p in range(40):
        with open(os.path.join(tmp_path, "data", f"t-{p}", "leader-epoch-checkpoint")) as f:
            assert f.read().split() == ["0", "1", "0", "0"]


def test_one_wait_on_the_disk_per_create_topics_request(tmp_path: Path) -> None:
    """A CreateTopics request of 10 topics of 10 partitions (confluent-kafka's AdminClient, a
    broker in this process) waits for its fsyncs once before it is answered: the topics' records
    are written in one round (``fsutil._sync_all`` called once, on every thread but the one that
    makes the partitions afterwards), not once per topic (50 topics a request: 50 waits on the
    disk one after the other)."""
    import asyncio

    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkalog.log.manager import LogManager
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import ServerConfig
    from kafkalog.server.network.socket_server import Server
    cfg = ServerConfig({})
    manager = LogManager(tmp_path / "data", cfg.broker, background=False)
    broker = Broker(manager, cfg, cfg.advertised("127.0.0.1", 0))
    server = Server(broker, port=0)
    loop = asyncio.new_event_loop()
    waits = 0
    counting = threading.Event()
    lock = threading.Lock()

    def prof(frame: Any, event: str, _arg: Any) -> None:
        nonlocal waits
        if event == "call" and frame.f_code.co_name == "_sync_all" and counting.is_set() \
                and threading.current_thread().name != "kafkalog-topic-creator":
            with lock:
                waits += 1
    threading.setprofile(prof)
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        broker.set_endpoints({b.name: cfg.advertised(b.host, b.port, b.name) for b in server.bound})
        started.set()
        loop.run_forever()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert started.wait(60)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.port}"})
        for f in admin.create_topics([NewTopic("warm", 1, 1)], operation_timeout=60).values():
            f.result(60)
        counting.set()
        futures = admin.create_topics([NewTopic(f"t{i}", 10, 1) for i in range(10)], operation_timeout=60)
        for f in futures.values():
            f.result(60)
        counting.clear()
        assert waits == 1
        manager.wait_created()
        assert all(len(manager.partitions_of(f"t{i}")) == 10 for i in range(10))
        assert all(manager.get_log(f"t{i}", 9) is not None for i in range(10))
    finally:
        threading.setprofile(None)      # type: ignore[arg-type]
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()
        manager.close()
