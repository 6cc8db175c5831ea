"""kafkalog writes, Kafka reads (issue 25): the hand-over both ways.

1. A directory Kafka 4.4 formatted and wrote (its ``meta.properties``, topic IDs and
   ``__cluster_metadata`` left as they are) is taken over by ``kafkalog serve``; real clients append
   (idempotent, transactional commits and aborts, a consumer group), then the embedded producer, the
   Spark writer and ``kafkalog compact`` work on it; Kafka 4.4 starts on it again, truncates nothing
   (its log and the files say so), serves every record as kafkalog served it (read_committed too),
   resumes the group at its committed offsets and the transaction Kafka left open still open, and its
   DumpLogSegments prints what ``kafkalog dump`` prints.
2. A directory kafkalog created itself: ``kafkalog bootstrap-topics`` writes its topics into the
   bootstrap metadata ``kafka-storage.sh format`` wrote (without it Kafka sets the partitions aside as
   stray), and Kafka 4.4 serves every record.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kafkalog
from tests import kafka44
from tests.kafka44 import workload
from tests.server.broker_process import BrokerProcess

pytestmark = pytest.mark.kafka

TOPICS = ["handover", "hcompact", "htxn"]
GROUP = "handover-group"


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _sizes(data: Path) -> dict[str, int]:
    return {str(p.relative_to(data)): p.stat().st_size for p in data.glob("*-*/*.log")
            if not p.parent.name.startswith("__cluster_metadata")}


def _kafkalog_view(data: Path, topics: list[str], isolation: str) -> dict[tuple[str, int], list[workload.Row]]:
    out: dict[tuple[str, int], list[workload.Row]] = {}
    with kafkalog.open(data, read_only=True) as dl:
        for topic in topics:
            for p in range(dl.partitions(topic)):
                out[(topic, p)] = [(r.offset, r.key, r.value, [tuple(h) for h in r.headers], r.timestamp_type,
                                    r.timestamp) for r in dl.consume(topic, p, isolation=isolation)]
    return out


def _transaction_state(bootstrap: str, txn_id: str) -> str:
    r = kafka44.run_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
                         "describe", "--transactional-id", txn_id)
    header, row = [line for line in r.stdout.splitlines() if line.strip()][:2]
    return dict(zip(header.split(), row.split()))["TransactionState"]


def _transaction_states_on_disk(data: Path) -> dict[str, str]:
    """The last state ``__transaction_state`` holds of each transactional id (kafkalog's offline
    transaction-log decoder: ``kafkalog serve`` does not answer DescribeTransactions)."""
    logs = sorted(str(f) for f in data.glob("__transaction_state-*/*.log"))
    res = _cli("dump", "--transaction-log-decoder", "--format", "json", *logs)
    assert res.returncode == 0, res.stderr
    states: dict[str, str] = {}
    for line in res.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "record" and isinstance(rec.get("decodedPayload"), dict):
            states[rec["decodedKey"]["data"]["transactionalId"]] = rec["decodedPayload"]["data"]["transactionStatus"]
    return states


def _group_consume(bootstrap: str, n: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["handover"])
    got = 0
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.unsubscribe()
    c.poll(0.5)
    c.close()
    assert got == n


def test_kafka_starts_on_the_directory_kafkalog_served_and_wrote(tmp_path: Path, spark) -> None:
    kafka44.require()
    broker = kafka44.KafkaBroker(tmp_path / "kafka", workload.BROKER_PROPERTIES)
    broker.format()
    data = broker.log_dir
    open_producer = None
    try:
        # --- Kafka writes ---------------------------------------------------------------------------
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("handover", 2, 1, config=workload.ROLL),
                                      NewTopic("hcompact", 1, 1, config={**workload.ROLL, "cleanup.policy": "compact"}),
                                      NewTopic("htxn", 1, 1)]).values():
            f.result(60)
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                      "compression.type": "gzip", "linger.ms": 5})
        workload._burst(p, "handover", 2, 30)
        workload._burst(p, "hcompact", 2, 20, keys=5, tombstones=True)
        _group_consume(broker.bootstrap, 25)
        open_producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "left-open",
                                  "transaction.timeout.ms": 600_000})
        open_producer.init_transactions(60)
        open_producer.begin_transaction()
        workload._produce(open_producer, "htxn", 3)
        broker.stop()
        meta_before = (data / "meta.properties").read_text()

        # --- kafkalog serves it: clients append, commit, abort ----------------------------------------
        served = BrokerProcess(str(data)).start()
        try:
            bs = served.bootstrap
            p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "compression.type": "zstd",
                          "linger.ms": 5})
            workload._produce(p, "handover", 40, first=100)
            workload._produce(p, "hcompact", 30, first=100, keys=5, tombstones=True)
            t = Producer({"bootstrap.servers": bs, "transactional.id": "handover-txn"})
            t.init_transactions(60)
            for commit in (True, False, True):
                t.begin_transaction()
                workload._produce(t, "htxn", 5, first=200)
                (t.commit_transaction if commit else t.abort_transaction)(60)
            _group_consume(bs, 30)
            groups_served = workload.group_offsets(bs, [GROUP])
        finally:
            assert served.stop() == 0

        # --- the embedded producer, the Spark writer and kafkalog compact -----------------------------
        with kafkalog.open(data) as dl:
            dl.produce_many("handover", [b"embedded-%d" % i for i in range(20)], partition=1)
        df = spark.createDataFrame([(b"spark-%d" % i, b"k%d" % (i % 3)) for i in range(30)], ["value", "key"])
        df.write.format("kafkalog").option("topic", "handover").mode("append").save(str(data))
        # hcompact is compacted by Kafka's config (its metadata log), no --force needed
        res = _cli("compact", str(data), "hcompact", "--no-progress", "--format", "json")
        assert res.returncode == 0, res.stderr
        assert (data / "meta.properties").read_text() == meta_before
        states_served = _transaction_states_on_disk(data)
        sizes = _sizes(data)
        ours = {iso: _kafkalog_view(data, TOPICS, iso) for iso in ("read_uncommitted", "read_committed")}
        dump_files = sorted(str(f) for f in data.glob("*-*/*")
                            if f.suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
                            and f.parent.name.split("-")[0] in TOPICS)
        ours_dump = _cli("dump", "--files", ",".join(dump_files), "--deep-iteration", "--print-data-log")
        assert ours_dump.returncode == 0, ours_dump.stderr[-2000:]
        theirs_dump = kafka44.dump_log_segments(dump_files, "--deep-iteration", "--print-data-log")
        assert ours_dump.stdout == theirs_dump

        # --- Kafka 4.4 starts on it ------------------------------------------------------------------
        log_at = broker.server_log.stat().st_size
        broker.start()
        started_log = broker.log_text()[log_at:]
        for isolation in ("read_uncommitted", "read_committed"):
            theirs = workload.read_all(broker.bootstrap, TOPICS, isolation)
            assert sorted(theirs) == sorted(ours[isolation])
            for tp in theirs:
                assert theirs[tp] == ours[isolation][tp], (isolation, tp)
        assert workload.group_offsets(broker.bootstrap, [GROUP]) == groups_served
        assert {tid: _transaction_state(broker.bootstrap, tid) for tid in states_served} == states_served
        assert states_served == {"left-open": "Ongoing", "handover-txn": "CompleteCommit"}
        broker.stop()
        # nothing truncated: no segment shorter, and Kafka's log says so
        after = _sizes(data)
        assert all(after.get(k, -1) >= v for k, v in sizes.items()), (sizes, after)
        for topic in TOPICS:
            assert not re.search(rf"[Tt]runcat\w* .*{topic}-\d", started_log), topic
        assert not list(data.glob("*-stray"))
    finally:
        if broker.alive():
            broker.kill()
        del open_producer


def test_kafka_adopts_a_directory_kafkalog_created(tmp_path: Path) -> None:
    kafka44.require()
    data = tmp_path / "data"
    with kafkalog.open(data, {"log.segment.bytes": 1 << 20}) as dl:
        dl.create_topic("mine", 3, {"retention.ms": "-1", "cleanup.policy": "delete"})
        for p in range(3):
            dl.produce_many("mine", [b"p%d-%d" % (p, i) for i in range(50)], partition=p)
        dl.create_topic("other", 1)
        dl.produce_many("other", [(b"k", b"v%d" % i) for i in range(10)])
    expected = {iso: _kafkalog_view(data, ["mine", "other"], iso) for iso in ("read_uncommitted",)}
    meta = dict(line.split("=", 1) for line in (data / "meta.properties").read_text().splitlines()
                if "=" in line and not line.startswith("#"))
    # Kafka's own format: the metadata log in its own directory (the data directory is formatted
    # already: kafka-storage.sh format skips it with --ignore-formatted)
    broker = kafka44.KafkaBroker(tmp_path / "kafka", {"log.dirs": str(data), "node.id": meta["node.id"],
                                                       "metadata.log.dir": str(tmp_path / "metadata")})
    broker.format(meta["cluster.id"], "--ignore-formatted")
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(tmp_path / "metadata"))
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(x["topic"], x["partitions"]) for x in lines if x["type"] == "topic"] == [("mine", 3), ("other", 1)]
    assert lines[-1]["records"] == 2 + 4 + 2       # topic records, partition records, 2 configs of mine
    # a second run refuses: the metadata holds those topics already
    again = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(tmp_path / "metadata"))
    assert again.returncode == 2 and "already holds the topics mine, other" in again.stdout + again.stderr
    try:
        broker.start()
        theirs = workload.read_all(broker.bootstrap, ["mine", "other"], "read_uncommitted")
        assert theirs == expected["read_uncommitted"]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from confluent_kafka.admin import ConfigResource
        cfg = admin.describe_configs([ConfigResource("topic", "mine")])
        (f,) = cfg.values()
        assert f.result(30)["retention.ms"].value == "-1"
        # Kafka appends after kafkalog's records
        p = Producer({"bootstrap.servers": broker.bootstrap})
        p.produce("other", b"from-kafka")
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "adopted"})
        c.assign([TopicPartition("other", 0, 10)])
        m = c.poll(30)
        assert m is not None and m.value() == b"from-kafka" and m.offset() == 10
        c.close()
        broker.stop()
        assert not list(data.glob("*-stray"))
    finally:
        if broker.alive():
            broker.kill()


def test_bootstrap_topics_refuses_what_kafka_could_not_adopt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafkalog.open(data) as dl:
        dl.create_topic("t", 1)
    # not formatted by Kafka: no bootstrap snapshot
    res = _cli("bootstrap-topics", str(data))
    assert res.returncode == 2 and "format the metadata log directory" in res.stdout + res.stderr
    assert not (data / "__cluster_metadata-0").exists()
    # a metadata directory of another cluster
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.properties").write_text("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=7\n"
                                           "directory.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(other))
    assert res.returncode == 2 and "format with the data directory's" in res.stdout + res.stderr
    res = _cli("bootstrap-topics", str(tmp_path / "nope"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
