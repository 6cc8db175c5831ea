"""The client libraries' flows against Apache Kafka 4.4 and ``kafkalog serve`` side by side (issue 25):
each flow runs once per broker and what the client saw (offsets, records, committed offsets, errors,
configs, partitions) is compared after the differential harness's normalisation, differences
listed in ``docs/kafka-compatibility.md`` allowed. Among them the clients that found kafkalog's
differences from Kafka: Debian's kcat (librdkafka 2.0.2) writing every codec compressed, kafkajs
resetting a group to the earliest offset and altering configs and adding partitions, and
confluent-kafka's admin doing the same."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests import kafka44
from tests.server import differential as d
from tests.server import node_client
from tests.server.broker_process import BrokerProcess
from tests.server.java_client import VERSIONS, JavaUnavailable, by_version, run_driver
from tests.server.java_client import classpath as java_classpath

Pair = tuple[kafka44.KafkaBroker, BrokerProcess]
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
USED: set[d.Allowed] = set()
#: the labels of the flows that ran in this process
RAN: set[str] = set()


def _both(pair: Pair, flow: Callable[[str, str], Any], label: str) -> tuple[Any, Any]:
    """``flow(bootstrap, data_dir)`` against Kafka 4.4, then kafkalog; the two results after
    normalisation; a difference the table does not list fails."""
    kafka, ours = pair
    got = [flow(kafka.bootstrap, str(kafka.log_dir)), flow(ours.bootstrap, ours.data_dir)]
    RAN.add(label)
    a, b = (d.normalise([(label, g)])[0][1] for g in got)
    diffs = d.differences([(label, a)], [(label, b)])
    bad = list(d.uncovered(diffs, d.allowed_differences(), USED))
    report = "\n".join(f"{lab} | {path} | kafka={x!r} | kafkalog={y!r}" for lab, path, x, y in bad[:50])
    assert not bad, f"the client saw Kafka 4.4 and kafkalog differ:\n{report}"
    return a, b


#: a group coordinator still loading on a Kafka broker just started (librdkafka calls them final)
_LOADING = frozenset({14, 15, 16})


def _retrying(fn: Callable[[], Any], timeout: float = 60) -> Any:
    """``fn()`` retried while it raises a retriable KafkaException (a coordinator still loading on
    a Kafka broker just started), as applications retry it."""
    from confluent_kafka import KafkaException
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0]
            if not (err.retriable() or err.code() in _LOADING) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# --- kcat: Debian's librdkafka 2.0.2 ---------------------------------------------------------------

def _kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        node_client.unavailable("kcat (Debian's package: apt-get install kcat) is not on PATH")
    return path


def _batch_codecs(partition_dir: str) -> list[tuple[int, int]]:
    """(compression codec, record count) of every batch in a partition's segments, from the files."""
    out = []
    for seg in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        with open(seg, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 61 <= len(data):
            length = struct.unpack_from(">i", data, pos + 8)[0]
            out.append((struct.unpack_from(">h", data, pos + 21)[0] & 7, struct.unpack_from(">i", data, pos + 57)[0]))
            pos += 12 + length
    return out


#: a batch this large shrinks under every codec (these records repeat themselves), so librdkafka
#: sends it compressed; a smaller one it may send uncompressed (it keeps a compressed batch only
#: when it is smaller)
SHRINKS = 10


def _compressed(batches: list[tuple[int, int]], codec: int) -> bool:
    """Whether every batch of ``SHRINKS`` records or more carries ``codec``, and one does at least.

    Not a share of the records: kcat flushes when its input ends, and librdkafka's broker thread
    sends what it finds in the partition's queue while its main thread is still moving the records
    it held for the topic's metadata there. The first record went alone in most runs against
    kafkalog, 15 lone records in one run, and over 30 in one of CI's (gzip: under nine records in ten
    compressed); Kafka 4.4 answered its Metadata later, when all 300 had arrived."""
    large = [c for c, n in batches if n >= SHRINKS]
    return bool(large) and all(c == codec for c in large)


def test_kcat_librdkafka_2_0_2_writes_every_codec_compressed(kafka_pair: Pair) -> None:
    """Debian's kcat 1.7.1 (librdkafka 2.0.2) decides which codecs a broker takes from Produce v0
    being advertised (KAFKA-18659): without it, it wrote gzip, snappy and lz4 batches uncompressed
    to kafkalog. The batches on kafkalog's disk carry the codec; what kcat reads back is compared
    with Kafka 4.4. Kafka's own files are not compared: under load (two full runs of three with four
    workers) Kafka 4.4 got snappy and lz4 batches from this kcat uncompressed, batched whole, while
    kafkalog's were compressed in every run."""
    kcat = _kcat()
    values = "\n".join(f"value-{i}-" + "x" * (i % 30) for i in range(300)) + "\n"
    compressed: dict[str, dict[str, bool]] = {}
    batches: dict[str, list[tuple[int, int]]] = {}

    def flow(bootstrap: str, data_dir: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        verdicts = compressed.setdefault(data_dir, {})
        for codec in CODECS:
            topic = f"kcat-{codec}"
            # linger 500 ms: kcat batches the 300 lines whole even when a loaded machine slows it
            r = subprocess.run([kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-z", codec,
                                "-X", "linger.ms=500"], input=values, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            assert "not compressing" not in r.stderr and "does not support" not in r.stderr, r.stderr
            c = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e",
                                "-f", "%o %s\\n"], capture_output=True, text=True, timeout=120)
            assert c.returncode == 0, c.stderr
            deadline = time.monotonic() + 30         # Kafka's files: written by now, but on a slow machine
            while not _batch_codecs(os.path.join(data_dir, f"{topic}-0")) and time.monotonic() < deadline:
                time.sleep(0.1)
            out[codec] = {"read back": c.stdout.splitlines()}
            found = batches[f"{data_dir} {codec}"] = _batch_codecs(os.path.join(data_dir, f"{topic}-0"))
            verdicts[codec] = _compressed(found, CODECS[codec])
        return out

    _kafka, ours = _both(kafka_pair, flow, "client kcat")
    assert compressed[kafka_pair[1].data_dir] == dict.fromkeys(CODECS, True), (compressed, batches)
    for codec in CODECS:
        assert ours[codec]["read back"] == [f"{i} {v}" for i, v in enumerate(values.splitlines())]


# --- kafkajs -------------------------------------------------------------------------------------

def _kafkajs(mode: str, bootstrap: str, prefix: str) -> list[dict[str, Any]]:
    # a Kafka broker just started loads its group coordinator on first use, and kafkajs' admin
    # does not retry COORDINATOR_LOAD_IN_PROGRESS: the driver starts once the coordinator answers
    c = d.Conn("coordinator", int(bootstrap.rsplit(":", 1)[1]))
    try:
        for group in (f"{prefix}-group", f"{prefix}-g"):
            c.coordinator_ready(group)
            c.call("", 9, 8, {"require_stable": False, "groups": [
                {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}]}, record=False)
    finally:
        c.close()
    r = node_client.run_node("kafkajs_driver.js", mode, bootstrap, prefix, timeout=240)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return lines


def test_kafkajs_resets_a_group_to_the_earliest_offset(kafka_pair: Pair) -> None:
    """kafkajs ``admin.resetOffsets({earliest: true})`` commits offset -2, which Kafka stores (and
    OffsetFetch answers) as it is; the group's next consumer starts from the earliest offset.
    kafkalog refused the commit with INVALID_CONFIG: the consumer crashed."""
    kafka, ours = _both(kafka_pair, lambda b, _d: _kafkajs("reset", b, "kjs"), "client kafkajs reset")
    steps = {s["step"]: s for s in ours}
    assert steps["consumed"]["offsets"][0]["partitions"][0]["offset"] == "10"
    assert steps["reset"]["offsets"][0]["partitions"][0]["offset"] == "-2"
    assert steps["resumed"]["offsets"] == list(range(10))


def test_kafkajs_alters_configs_and_adds_partitions(kafka_pair: Pair) -> None:
    """kafkajs ``alterConfigs`` (AlterConfigs, API 33) and ``createPartitions`` (API 37): served as
    Kafka serves them, errors included; the new partitions take records and the committed offsets
    of the old ones stay."""
    kafka, ours = _both(kafka_pair, lambda b, _d: _kafkajs("admin", b, "kjs"), "client kafkajs admin")
    steps = {s["step"]: s for s in ours}
    assert steps["alterConfigs"]["value"] == "3600000"
    assert steps["createPartitions"]["partitions"] == [0, 1, 2]
    assert steps["createPartitionsErrors"]["errors"]["fewer"] == "INVALID_PARTITIONS"
    assert steps["alterConfigsErrors"]["errors"]["unknownTopic"] == "UNKNOWN_TOPIC_OR_PARTITION"
    committed = steps["offsets"]["committed"][0]["partitions"]
    assert {p["partition"]: p["offset"] for p in committed}[0] == "1"


# --- confluent-kafka admin -----------------------------------------------------------------------

def test_confluent_kafka_admin_alters_configs_and_adds_partitions(kafka_pair: Pair) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka import TopicPartition as TP
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    def flow(bootstrap: str, data_dir: str) -> dict[str, Any]:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic, out = "ck-admin", {}

        def outcome(futures: dict[Any, Any]) -> dict[str, Any]:
            got = {}
            for k, f in futures.items():
                try:
                    f.result(60)
                    got[str(k)] = "ok"
                except KafkaException as e:
                    got[str(k)] = e.args[0].name()
            return got

        out["create"] = outcome(admin.create_topics([NewTopic(topic, 1, 1)]))
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        p.produce(topic, b"before", partition=0)
        assert p.flush(60) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-admin-g"})
        _retrying(lambda: c.commit(offsets=[TP(topic, 0, 1)], asynchronous=False))
        res = ConfigResource("TOPIC", topic, set_config={"retention.ms": "3600000", "cleanup.policy": "compact"})
        out["alter validate only"] = outcome(admin.alter_configs([res], validate_only=True))
        out["alter"] = outcome(admin.alter_configs([res]))
        deadline = time.monotonic() + 30
        while True:         # Kafka's broker learns the change from its controller a moment later
            described = admin.describe_configs([ConfigResource("TOPIC", topic)])
            cfg = next(iter(described.values())).result(60)
            if cfg["retention.ms"].value == "3600000" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out["described"] = {k: (cfg[k].value, cfg[k].source) for k in ("retention.ms", "cleanup.policy")}
        out["alter errors"] = {
            name: outcome(admin.alter_configs([ConfigResource("TOPIC", t, set_config=cfg_)]))
            for name, t, cfg_ in (("unknown key", topic, {"no.such.config": "1"}),
                                  ("invalid value", topic, {"retention.ms": "soon"}),
                                  ("unknown topic", "ck-admin-nosuch", {"retention.ms": "1"}))}
        out["partitions validate only"] = outcome(admin.create_partitions([NewPartitions(topic, 4)],
                                                                          validate_only=True))
        out["partitions"] = outcome(admin.create_partitions([NewPartitions(topic, 3)]))
        out["partitions errors"] = {
            name: outcome(admin.create_partitions([NewPartitions(t, n)]))
            for name, t, n in (("fewer", topic, 2), ("same", topic, 3), ("unknown topic", "ck-admin-nosuch", 5))}
        deadline = time.monotonic() + 30
        while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        out["metadata partitions"] = sorted(admin.list_topics(topic, timeout=30).topics[topic].partitions)
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})   # knows 3 partitions
        delivered: list[Any] = []
        for part in (1, 2):
            p.produce(topic, b"new-%d" % part, partition=part,
                      on_delivery=lambda err, m: delivered.append(err.name() if err else (m.partition(), m.offset())))
        assert p.flush(60) == 0
        out["produced to the new partitions"] = sorted(delivered, key=str)
        out["new partitions on disk"] = sorted(os.path.basename(x) for x in glob.glob(os.path.join(data_dir,
                                                                                                  f"{topic}-*")))
        out["watermarks"] = [c.get_watermark_offsets(TP(topic, part), timeout=30) for part in range(3)]
        out["committed"] = [(tp.partition, tp.offset) for tp in c.committed([TP(topic, i) for i in range(3)],
                                                                           timeout=30)]
        c.close()
        return out

    kafka, ours = _both(kafka_pair, flow, "client confluent-kafka admin")
    assert ours["partitions"] == {"ck-admin": "ok"}
    assert ours["partitions errors"]["fewer"] == {"ck-admin": "INVALID_PARTITIONS"}
    assert ours["new partitions on disk"] == ["ck-admin-0", "ck-admin-1", "ck-admin-2"]
    assert ours["committed"][0] == (0, 1)
    assert ours["described"]["retention.ms"][0] == "3600000"


# --- the Python clients and the Java client: produce, consume, groups ------------------------------

def _kafka_python_flow(bootstrap: str, _data_dir: str) -> dict[str, Any]:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    topic = "flow-kp"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    prod = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                         compression_type="gzip", linger_ms=5)
    futs = [prod.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)], partition=i % 2)
            for i in range(20)]
    prod.flush(60)
    sent = sorted((f.get(60).partition, f.get(60).offset) for f in futs)
    prod.close()
    cons = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="flow-kp-g", auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=20000)
    got = []
    for m in cons:
        got.append((m.partition, m.offset, m.key, m.value, m.headers))
        if len(got) == 20:
            break
    cons.commit()
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    out = {"sent": sent, "consumed": sorted(got), "committed": [cons.committed(tp) for tp in tps],
           "end": sorted(cons.end_offsets(tps).values()), "beginning": sorted(cons.beginning_offsets(tps).values())}
    cons.close()
    return out


def _aiokafka_flow(bootstrap: str, _data_dir: str) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    topic = "flow-ak"

    async def run() -> dict[str, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 2, 1)])
        await admin.close()
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, compression_type="lz4")
        await p.start()
        sent = []
        for i in range(20):
            md = await p.send_and_wait(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
            sent.append((md.partition, md.offset))
        await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="flow-ak-g",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got = []
        while len(got) < 20:
            for _tp, msgs in (await c.getmany(timeout_ms=20000)).items():
                got += [(m.partition, m.offset, m.key, m.value) for m in msgs]
        await c.commit()
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        out = {"sent": sorted(sent), "consumed": sorted(got), "committed": [await c.committed(tp) for tp in tps],
               "end": sorted((await c.end_offsets(tps)).values())}
        await c.stop()
        return out

    return asyncio.run(run())


def _confluent_flow(bootstrap: str, _data_dir: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as TP
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = "flow-ck"
    admin = AdminClient({"bootstrap.servers": bootstrap})      # kept: its futures die with it
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "zstd",
                  "linger.ms": 5})
    sent: list[tuple[int, int]] = []
    for i in range(20):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2, headers=[("h", b"x")],
                  on_delivery=lambda err, m: sent.append((m.partition(), m.offset())) if err is None else None)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "flow-ck-g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.key(), m.value(), m.headers()))
    _retrying(lambda: c.commit(asynchronous=False))
    tps = [TP(topic, p_) for p_ in (0, 1)]
    out = {"sent": sorted(sent), "consumed": sorted(got),
           "committed": [(tp.partition, tp.offset, tp.leader_epoch) for tp in c.committed(tps, timeout=30)],
           "watermarks": [c.get_watermark_offsets(tp, timeout=30) for tp in tps]}
    c.unsubscribe()
    c.poll(0.5)
    c.close()
    return out


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_python_client_flows(kafka_pair: Pair, client: str) -> None:
    flow = {"kafka-python": _kafka_python_flow, "aiokafka": _aiokafka_flow, "confluent-kafka": _confluent_flow}[client]
    kafka, ours = _both(kafka_pair, flow, f"client {client}")
    assert len(ours["consumed"]) == 20


_DRIVER_STEP = re.compile(r"^(admin|codec|txn|eos|fenced|fence) ")


@pytest.mark.parametrize("version", [by_version(v) for v in VERSIONS])
def test_java_client_flows(kafka_pair: Pair, version: str) -> None:
    """The Java driver (admin, idempotent produce with every codec read back; with 4.4.0 the
    transaction steps too) prints the same steps against both brokers."""
    try:
        java_classpath(version)
    except JavaUnavailable as e:
        pytest.skip(str(e))
    modes = [None, "txn"] if version == max(VERSIONS) else [None]

    def flow(bootstrap: str, _data_dir: str) -> dict[str, Any]:
        out = {}
        for mode in modes:
            r = run_driver(version, bootstrap, f"flow-java-{version.replace('.', '')}-{mode or 'basic'}", 60, mode)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            # the driver's step lines (a classpath with a log binding prints the client's log too)
            out[mode or "basic"] = [x for x in r.stdout.splitlines() if _DRIVER_STEP.match(x)]
        return out

    kafka, ours = _both(kafka_pair, flow, f"client java {version}")
    assert "admin ok" in ours["basic"]


def test_every_listed_client_difference_still_occurs() -> None:
    """Runs last (file order): a ``client ...`` row of the table whose flow ran but showed no such
    difference is stale (today the table has none: every client flow agrees with Kafka 4.4 after
    normalisation, and a row added without a difference behind it fails here)."""
    rows = [a for a in d.allowed_differences() if a.case.startswith("client ")]
    ran = [a for a in rows if any(d.glob_pattern(a.case).fullmatch(label) for label in RAN)]
    if rows and not ran:
        pytest.skip("no flow a client row is about ran in this process")
    stale = [a for a in ran if a not in USED]
    assert not stale, "client rows of docs/kafka-compatibility.md no flow shows: " + "; ".join(
        f"{a.case} / {a.field}" for a in stale)
