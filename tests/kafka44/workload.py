"""A workload through Kafka 4.4 that leaves every kind of file a Kafka data directory holds, and what
Kafka 4.4 serves from it (the truth the readers of kafkalog are compared with).

:func:`build` formats and starts one broker, runs phase A (every codec, headers, null keys and
values, a LogAppendTime topic, idempotent and transactional producers committing and aborting, a
compacted topic cleaned twice by Kafka's cleaner so tombstones get delete horizons and old ones go,
retention by size, DeleteRecords, consumer groups of both protocols, transactional offset commits
through Kafka's TransactionalMessageCopier), stops it cleanly (``clean/``), restarts it, runs phase
B (more appends, a transaction left open) and kills it (``killed/``). Each copy comes with the
records Kafka 4.4 served just before (read_uncommitted and read_committed) as :class:`Served`.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka44

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: a small segment.ms rolls a segment at the first append after it (Kafka 4 refuses segment.bytes
#: below 1 MiB); each burst of the workload is followed by a pause longer than it
ROLL_MS = 150
ROLL = {"segment.ms": str(ROLL_MS), "index.interval.bytes": "200"}

BROKER_PROPERTIES = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "2",
    "log.cleaner.backoff.ms": "300",
    "log.retention.check.interval.ms": "500",
    "log.cleaner.dedupe.buffer.size": str(16 << 20),
    "log.initial.task.delay.ms": "0",
    "log.segment.delete.delay.ms": "0",
}

#: topic -> (partitions, config)
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "codecs": (2, ROLL),
    "logappend": (1, {**ROLL, "message.timestamp.type": "LogAppendTime"}),
    "idempotent": (1, ROLL),
    "txn": (2, ROLL),
    "compacted": (1, {**ROLL, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                      "delete.retention.ms": "2500", "min.compaction.lag.ms": "0",
                      "max.compaction.lag.ms": "1000"}),
    "retained": (1, {**ROLL, "retention.bytes": "3000"}),
    "deleted": (1, ROLL),
    "copied": (1, ROLL),
}

Row = tuple  # (offset, key, value, headers, timestamp type, timestamp)


@dataclass
class Served:
    """What Kafka 4.4 served from a directory: ``(topic, partition) -> rows`` per isolation level."""

    uncommitted: dict[tuple[str, int], list[Row]] = field(default_factory=dict)
    committed: dict[tuple[str, int], list[Row]] = field(default_factory=dict)
    #: group -> {(topic, partition): committed offset}
    groups: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)


@dataclass
class Workload:
    clean: Path
    killed: Path
    served_clean: Served
    served_killed: Served
    cluster_id: str


def _headers(i: int) -> list[tuple[str, bytes | None]] | None:
    if i % 3 == 0:
        return None
    return [("h", b"%d" % i), ("null", None), ("ключ", "значение".encode())][: 1 + i % 3]


def _produce(p: Producer, topic: str, n: int, first: int = 0, partition: int | None = None,
             tombstones: bool = False, keys: int | None = None) -> None:
    errs: list[object] = []

    def cb(err: object, _msg: object) -> None:
        if err is not None:
            errs.append(err)

    for i in range(first, first + n):
        key = None if i % 4 == 0 and keys is None else (b"key-%d" % (i % keys if keys else i))
        value = None if (i % 5 == 0 and not keys) or (tombstones and i % 7 == 0) else \
            b"value-%06d-" % i + b"." * (i % 17)
        kw: dict[str, object] = {"key": key, "value": value, "headers": _headers(i), "on_delivery": cb}
        if partition is not None:
            kw["partition"] = partition
        p.produce(topic, **kw)
        p.poll(0)
    assert p.flush(60) == 0 and not errs, errs


def _burst(p: Producer, topic: str, bursts: int, per: int, **kw: object) -> None:
    """``bursts`` bursts of ``per`` records, a pause longer than segment.ms between them (so each
    burst starts a new segment)."""
    first = int(kw.pop("first", 0))   # type: ignore[call-overload]
    for b in range(bursts):
        _produce(p, topic, per, first=first + b * per, **kw)   # type: ignore[arg-type]
        time.sleep(ROLL_MS * 1.5 / 1000)


def _producer(bootstrap: str, **conf: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf})


def _create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(t, n, 1, config=c) for t, (n, c) in TOPICS.items()])
    for f in fs.values():
        f.result(60)


def _transactions(bootstrap: str, txn_id: str, rounds: int, first: int, leave_open: bool = False) -> None:
    """Transactions over both partitions of ``txn`` and the compacted topic: every third aborted."""
    # a long timeout: the transaction left open stays open until the readers compared their views
    p = _producer(bootstrap, **{"transactional.id": txn_id, "compression.type": "lz4",
                                "transaction.timeout.ms": 600_000})
    p.init_transactions(60)
    for r in range(rounds):
        p.begin_transaction()
        for part in (0, 1):
            _produce(p, "txn", 6, first=first + r * 12 + part * 6, partition=part)
        _produce(p, "compacted", 3, first=first + r * 3, keys=10)
        if r % 3 == 2:
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
        time.sleep(ROLL_MS * 1.5 / 1000)
    if leave_open:
        p.begin_transaction()
        _produce(p, "txn", 4, first=first + rounds * 12, partition=0)
        p.flush(30)
        # the process keeps the producer: its transaction stays open until the broker is killed
        _OPEN_PRODUCERS.append(p)


_OPEN_PRODUCERS: list[Producer] = []


def _consume_group(bootstrap: str, group: str, topics: list[str], protocol: str, count: int) -> None:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    c = Consumer(conf)
    c.subscribe(topics)
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None or m.error():
            continue
        got += 1
        if got % 25 == 0 or got == count:
            c.commit(asynchronous=False)
    c.unsubscribe()
    c.poll(0.5)
    c.close()
    assert got >= count, f"group {group} consumed {got} of {count}"


def _wait(what: str, predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():   # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"Kafka 4.4 did not {what} in {timeout:.0f} s")
        time.sleep(0.2)


def _cleaned_times(broker: kafka44.KafkaBroker) -> int:
    """How many times the cleaner cleaned ``compacted`` (its log says so)."""
    return broker.log_text().count("Cleaning log compacted-0 ")


def _phase_a(broker: kafka44.KafkaBroker) -> None:
    bs = broker.bootstrap
    _create_topics(bs)
    for codec in CODECS:
        _burst(_producer(bs, **{"compression.type": codec}), "codecs", 2, 40, first=CODECS.index(codec) * 100)
    _burst(_producer(bs, **{"compression.type": "gzip"}), "logappend", 3, 20)
    _burst(_producer(bs, **{"enable.idempotence": True, "compression.type": "snappy"}), "idempotent", 4, 30)
    _transactions(bs, "txn-a", 5, 0)

    # compaction: keys rewritten, tombstones; cleaned once (tombstones kept with a delete horizon)
    comp = _producer(bs, **{"compression.type": "zstd", "enable.idempotence": True})
    _burst(comp, "compacted", 3, 30, keys=10, tombstones=True)
    _wait("clean the compacted topic", lambda: _cleaned_times(broker) >= 1)
    # ... and again once the horizon passed: those tombstones go, the new ones get a horizon
    time.sleep(3)
    n = _cleaned_times(broker)
    _burst(comp, "compacted", 3, 30, first=100, keys=10, tombstones=True)
    _wait("clean the compacted topic again", lambda: _cleaned_times(broker) > n)

    # retention by size: old segments deleted, the log start offset moves
    _burst(_producer(bs), "retained", 6, 20)
    seg_dir = broker.log_dir / "retained-0"
    _wait("delete old segments of 'retained'", lambda: not (seg_dir / ("0" * 20 + ".log")).exists())

    # DeleteRecords inside a segment
    _burst(_producer(bs, **{"compression.type": "gzip"}), "deleted", 3, 20)
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.delete_records([TopicPartition("deleted", 0, 27)]).values():
        f.result(30)

    # groups: classic and KIP-848 consumers, and Kafka's own transactional copier (Java client,
    # sendOffsetsToTransaction with group metadata, random aborts)
    _consume_group(bs, "classic-group", ["codecs", "logappend"], "classic", 250)
    _consume_group(bs, "consumer-group", ["idempotent"], "consumer", 100)
    kafka44.run_tool("org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", bs,
                     "--input-topic", "codecs", "--input-partition", "0", "--output-topic", "copied",
                     "--transactional-id", "copier", "--consumer-group", "copier-group",
                     "--transaction-size", "25", "--enable-random-aborts", "--use-group-metadata",
                     timeout=300)


def _phase_b(broker: kafka44.KafkaBroker) -> None:
    bs = broker.bootstrap
    _burst(_producer(bs, **{"compression.type": "zstd"}), "codecs", 2, 30, first=1000)
    _burst(_producer(bs, **{"enable.idempotence": True}), "idempotent", 2, 20, first=500)
    _burst(_producer(bs, **{"compression.type": "snappy"}), "logappend", 1, 20, first=100)
    _transactions(bs, "txn-b", 3, 1000, leave_open=True)
    _consume_group(bs, "classic-group", ["codecs", "logappend"], "classic", 40)


def served(bootstrap: str, topics: Iterable[str]) -> Served:
    """Every record of ``topics`` as Kafka serves it to confluent-kafka, both isolation levels."""
    out = Served()
    for isolation, target in (("read_uncommitted", out.uncommitted), ("read_committed", out.committed)):
        target.update(read_all(bootstrap, topics, isolation))
    return out


def _high_watermark(c: Consumer, tp: TopicPartition) -> int:
    """The partition's end (high watermark, or last stable offset under read_committed), waiting
    while a broker that just started has no leader for it yet."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return int(c.get_watermark_offsets(tp, timeout=30, cached=False)[1])
        except KafkaException as e:
            if not e.args[0].retriable() and e.args[0].code() not in (6, 3) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def read_all(bootstrap: str, topics: Iterable[str], isolation: str) -> dict[tuple[str, int], list[Row]]:
    """Every partition of ``topics`` from its start to its end (high watermark, or the last stable
    offset under read_committed) through a confluent-kafka consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    try:
        md = c.list_topics(timeout=30)
        tps = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in sorted(md.topics[t].partitions)]
        out: dict[tuple[str, int], list[Row]] = {(tp.topic, tp.partition): [] for tp in tps}
        ends = {}
        for tp in tps:
            ends[(tp.topic, tp.partition)] = _high_watermark(c, tp)
        c.assign(tps)
        pending = {k for k, end in ends.items()}
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            key = (m.topic(), m.partition())
            if m.error():
                if m.error().code() == -191:    # _PARTITION_EOF
                    pending.discard(key)
                    continue
                raise KafkaException(m.error())
            ts_type, ts = m.timestamp()
            out[key].append((m.offset(), m.key(), m.value(), [tuple(h) for h in (m.headers() or [])],
                             "LogAppendTime" if ts_type == 2 else "CreateTime", ts))
        assert not pending, f"not read to the end: {pending}"
        return out
    finally:
        c.close()


def group_offsets(bootstrap: str, groups: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    out = {}
    for g in groups:
        f = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g]
        res = f.result(30)
        out[g] = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
    return out


GROUPS = ("classic-group", "consumer-group", "copier-group")


def build(workdir: Path) -> Workload:
    """Run the workload (one Kafka 4.4 JVM, two phases) and keep both copies of its directory."""
    broker = kafka44.KafkaBroker(workdir / "broker", BROKER_PROPERTIES)
    cluster_id = broker.format()
    broker.start()
    try:
        _phase_a(broker)
        served_clean = served(broker.bootstrap, TOPICS)
        served_clean.groups = group_offsets(broker.bootstrap, GROUPS)
        broker.stop()
        shutil.copytree(broker.log_dir, workdir / "clean", ignore=shutil.ignore_patterns(".lock"))
        broker.start()
        _phase_b(broker)
        served_killed = served(broker.bootstrap, TOPICS)
        served_killed.groups = group_offsets(broker.bootstrap, GROUPS)
        broker.kill()
        shutil.copytree(broker.log_dir, workdir / "killed", ignore=shutil.ignore_patterns(".lock"))
    finally:
        if broker.alive():
            broker.kill()
        for p in _OPEN_PRODUCERS:
            del p
        _OPEN_PRODUCERS.clear()
    return Workload(workdir / "clean", workdir / "killed", served_clean, served_killed, cluster_id)
