"""Transactions through ``kafkalog serve`` with the clients' own transactional producers:
committed data visible to ``read_committed`` consumers and aborted data not (``read_uncommitted``
sees both), exactly-once consume-transform-produce with the Java client (offsets committed in the
transaction, discarded when it aborts), fencing by a second producer with the same
``transactional.id``, a transaction left open past its timeout aborted by the broker, and the
transaction state and transactional offsets surviving a restart and a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalog.record.builder import build_batch
from tests.server.broker_process import BrokerProcess
from tests.server.java_client import VERSIONS, by_version, driver_output
from tests.server.raw import connect, recv_frame

N = 40
#: Kafka's error codes (``Errors.java``)
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
OPERATION_NOT_ATTEMPTED = 55


def _create(b: BrokerProcess, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        f.result(60)


def _read(b: BrokerProcess, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value of ``topic`` up to its end (the last stable offset for ``read_committed``)."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100})
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    out: list[bytes] = []
    pos = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(pos[p] < ends[p] for p in pos):
        for m in c.consume(500, 0.3):
            value, partition, offset = m.value(), m.partition(), m.offset()
            if m.error() is None and value is not None and partition is not None and offset is not None:
                out.append(value)
                pos[partition] = offset + 1
        for tp in c.position([TopicPartition(topic, p) for p in range(partitions)]):
            if tp.offset >= 0:
                pos[tp.partition] = max(pos[tp.partition], tp.offset)
    c.close()
    return sorted(out)


def _txn_producer(b: BrokerProcess, tid: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


# --- confluent-kafka (librdkafka) ---------------------------------------------------------------

def test_confluent_kafka_commit_and_abort(broker: BrokerProcess) -> None:
    _create(broker, "ck-txn")
    p = _txn_producer(broker, "ck-txn-1")
    p.begin_transaction()
    for i in range(N):
        p.produce("ck-txn", b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(N):
        p.produce("ck-txn", b"aborted-%d" % i, partition=i % 2)
    p.flush(30)                    # librdkafka purges what is not sent yet on abort
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("ck-txn", b"committed-last", partition=1)
    p.commit_transaction(30)
    committed = sorted([b"committed-%d" % i for i in range(N)] + [b"committed-last"])
    assert _read(broker, "ck-txn", "read_committed") == committed
    assert _read(broker, "ck-txn", "read_uncommitted") == sorted(
        committed + [b"aborted-%d" % i for i in range(N)])


def test_confluent_kafka_fencing(broker: BrokerProcess) -> None:
    _create(broker, "ck-fence")
    a = _txn_producer(broker, "ck-fence-1")
    a.begin_transaction()
    a.produce("ck-fence", b"open", partition=0)
    a.flush(30)
    b = _txn_producer(broker, "ck-fence-1")          # fences a, aborts its open transaction
    b.begin_transaction()
    b.produce("ck-fence", b"fencer", partition=0)
    b.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        a.produce("ck-fence", b"fenced", partition=1)
        a.commit_transaction(30)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()
    assert _read(broker, "ck-fence", "read_committed") == [b"fencer"]


# --- the Java client ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [by_version(v) for v in VERSIONS])
def test_java_client_transactions(broker: BrokerProcess, version: str) -> None:
    lines = driver_output(version, broker.bootstrap, "jtxn-" + version.replace(".", ""), N, mode="txn")
    assert f"txn ok {N}" in lines
    assert f"eos ok {N}" in lines
    assert "fence ok" in lines


# --- kafka-python and aiokafka -------------------------------------------------------------------

def test_kafka_python_commit_and_abort(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer
    _create(broker, "kp-txn")
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn-1")
    p.init_transactions()
    p.begin_transaction()
    for i in range(N):
        p.send("kp-txn", b"committed-%d" % i, partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(N):
        p.send("kp-txn", b"aborted-%d" % i, partition=i % 2)
    p.flush()
    p.abort_transaction()
    p.close()
    committed = sorted(b"committed-%d" % i for i in range(N))
    assert _read(broker, "kp-txn", "read_committed") == committed
    assert _read(broker, "kp-txn", "read_uncommitted") == sorted(
        committed + [b"aborted-%d" % i for i in range(N)])


def test_aiokafka_commit_and_abort(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer
    _create(broker, "aio-txn")

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio-txn-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(N):
                    await p.send("aio-txn", b"committed-%d" % i, partition=i % 2)
            await p.begin_transaction()
            futs = [await p.send("aio-txn", b"aborted-%d" % i, partition=i % 2) for i in range(N)]
            await asyncio.gather(*futs)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    committed = sorted(b"committed-%d" % i for i in range(N))
    assert _read(broker, "aio-txn", "read_committed") == committed
    assert _read(broker, "aio-txn", "read_uncommitted") == sorted(
        committed + [b"aborted-%d" % i for i in range(N)])


# --- timeouts, restarts, crashes ----------------------------------------------------------------

TXN_CONFIGS = ["transaction.max.timeout.ms=5000",
               "transaction.abort.timed.out.transaction.cleanup.interval.ms=200"]


@pytest.fixture
def own_broker(tmp_path: os.PathLike[str]) -> Iterator[BrokerProcess]:
    """A broker of this test alone (restarted, killed), with short transaction timeouts, and the
    topics ``rs-in`` and ``rs-out`` of one partition."""
    b = BrokerProcess(os.path.join(str(tmp_path), "data"), TXN_CONFIGS).start()
    try:
        _create(b, "rs-in", 1)
        _create(b, "rs-out", 1)
        yield b
    finally:
        if b.alive():
            b.kill()


def _wait_for(b: BrokerProcess, topic: str, isolation: str, want: list[bytes],
              partitions: int = 2) -> list[bytes]:
    """What ``topic`` reads as, once it reads as ``want`` (or after 60 s)."""
    deadline = time.monotonic() + 60
    got = _read(b, topic, isolation, partitions)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = _read(b, topic, isolation, partitions)
    return got


def test_timeouts(own_broker: BrokerProcess) -> None:
    b = own_broker
    _create(b, "to-txn")
    # larger than transaction.max.timeout.ms: refused
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "to-big",
                  "transaction.timeout.ms": 10000})
    with pytest.raises(KafkaException) as e:
        p.init_transactions(30)
    assert "INVALID_TRANSACTION_TIMEOUT" in str(e.value) or "timeout" in str(e.value).lower()
    # a transaction left open past its timeout is aborted by the broker
    p = _txn_producer(b, "to-open", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce("to-txn", b"left-open", partition=0)
    p.flush(30)
    plain = Producer({"bootstrap.servers": b.bootstrap})
    plain.produce("to-txn", b"after", partition=0)
    plain.flush(30)
    assert _wait_for(b, "to-txn", "read_committed", [b"after"]) == [b"after"]
    assert _read(b, "to-txn", "read_uncommitted") == [b"after", b"left-open"]
    with pytest.raises(KafkaException):          # its producer was fenced by the abort
        p.commit_transaction(30)


def _commit_offsets_in_txn(p: Producer, b: BrokerProcess, group: str, offset: int, commit: bool,
                           value: bytes) -> None:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    p.begin_transaction()
    p.produce("rs-out", value, partition=0)
    p.send_offsets_to_transaction([TopicPartition("rs-in", 0, offset)], c.consumer_group_metadata(), 30)
    if commit:
        p.commit_transaction(30)
    else:
        p.flush(30)
        p.abort_transaction(30)
    c.close()


def _committed(b: BrokerProcess, group: str) -> int:
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    got = c.committed([TopicPartition("rs-in", 0)], timeout=30)[0].offset
    c.close()
    return got


def test_state_and_offsets_survive_a_restart(own_broker: BrokerProcess) -> None:
    b = own_broker
    p = _txn_producer(b, "rs-1", **{"transaction.timeout.ms": 4000})
    _commit_offsets_in_txn(p, b, "rs-group", 5, True, b"committed")
    _commit_offsets_in_txn(p, b, "rs-group", 99, False, b"aborted")
    assert _committed(b, "rs-group") == 5                     # the aborted offsets are discarded
    p.flush(30)
    del p
    assert b.stop() == 0, b.stderr()
    assert os.path.isdir(os.path.join(b.data_dir, "__transaction_state-0"))
    b.start()
    assert _committed(b, "rs-group") == 5
    assert _read(b, "rs-out", "read_committed", 1) == [b"committed"]
    # the coordinator knows the transactional id: a new producer bumps its epoch and goes on
    p = _txn_producer(b, "rs-1", **{"transaction.timeout.ms": 4000})
    _commit_offsets_in_txn(p, b, "rs-group", 7, True, b"committed-2")
    assert _committed(b, "rs-group") == 7
    assert _read(b, "rs-out", "read_committed", 1) == [b"committed", b"committed-2"]
    assert b.stop() == 0, b.stderr()


def test_sigkill_mid_transaction(own_broker: BrokerProcess) -> None:
    b = own_broker
    p = _txn_producer(b, "kill-1", **{"transaction.timeout.ms": 2000})
    _commit_offsets_in_txn(p, b, "kill-group", 3, True, b"committed")
    p.begin_transaction()                              # left open: records and offsets
    p.produce("rs-out", b"open", partition=0)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "kill-group", "enable.auto.commit": False})
    p.send_offsets_to_transaction([TopicPartition("rs-in", 0, 50)], c.consumer_group_metadata(), 30)
    c.close()
    p.flush(30)
    b.stop(sig=signal.SIGKILL)
    b.start()
    plain = Producer({"bootstrap.servers": b.bootstrap})
    plain.produce("rs-out", b"after", partition=0)
    plain.flush(30)
    # the open transaction times out after the restart: aborted, its offsets discarded
    assert _wait_for(b, "rs-out", "read_committed", [b"after", b"committed"], 1) == [b"after", b"committed"]
    assert _committed(b, "kill-group") == 3
    p2 = _txn_producer(b, "kill-1", **{"transaction.timeout.ms": 4000})
    _commit_offsets_in_txn(p2, b, "kill-group", 4, True, b"committed-2")
    assert _committed(b, "kill-group") == 4
    assert b.stop() == 0, b.stderr()
    verify = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", b.data_dir],
                            capture_output=True, text=True, timeout=300, check=False)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]


# --- Kafka's error codes, on raw requests ---------------------------------------------------------

def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _call(sock: socket.socket, key: int, version: int, body: bytes) -> bytes:
    """A non-flexible request (header v1); the response body after its correlation id."""
    req = struct.pack(">hhi", key, version, 1) + _string("raw") + body
    sock.sendall(struct.pack(">i", len(req)) + req)
    resp = recv_frame(sock)
    assert resp is not None
    return resp[4:]


def _init_producer_id(sock: socket.socket, tid: str) -> tuple[int, int, int]:
    r = _call(sock, 22, 0, _string(tid) + struct.pack(">i", 60000))
    err, pid, epoch = struct.unpack_from(">hqh", r, 4)
    return err, pid, epoch


def _produce_error(sock: socket.socket, topic: str, pid: int, epoch: int, seq: int, tid: str) -> int:
    # stamped now: a 2023 record is deleted by the broker's retention check (7 days) while the
    # module's broker runs, and a fresh-clone run then read nothing at read_uncommitted
    records = build_batch([(None, b"raw", int(time.time() * 1000), None)], producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    body = (_string(tid) + struct.pack(">hii", -1, 30000, 1) + _string(topic)
            + struct.pack(">iii", 1, 0, len(records)) + records)
    r = _call(sock, 0, 3, body)
    pos = 4 + 2 + len(topic) + 4 + 4        # topics count, name, partitions count, partition index
    return int(struct.unpack_from(">h", r, pos)[0])


def _add_partitions_errors(sock: socket.socket, tid: str, pid: int, epoch: int,
                           partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    body = _string(tid) + struct.pack(">qhi", pid, epoch, len(by_topic))
    for t, ps in by_topic.items():
        body += _string(t) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    r = _call(sock, 24, 0, body)
    out, pos = {}, 4
    (n,) = struct.unpack_from(">i", r, pos)
    pos += 4
    for _ in range(n):
        (size,) = struct.unpack_from(">h", r, pos)
        name = r[pos + 2:pos + 2 + size].decode()
        pos += 2 + size
        (m,) = struct.unpack_from(">i", r, pos)
        pos += 4
        for _ in range(m):
            p, e = struct.unpack_from(">ih", r, pos)
            pos += 6
            out[(name, p)] = e
    return out


def test_error_codes_of_raw_requests(broker: BrokerProcess) -> None:
    _create(broker, "raw-txn")
    with connect(broker.port) as s:
        err, pid, epoch = _init_producer_id(s, "raw-txn-1")
        assert err == 0 and pid >= 0
        # Produce of a transactional batch to a partition not added to the transaction
        assert _produce_error(s, "raw-txn", pid, epoch, 0, "raw-txn-1") == INVALID_TXN_STATE
        # an unknown partition fails, the others are not attempted
        assert _add_partitions_errors(s, "raw-txn-1", pid, epoch, [("raw-txn", 0), ("raw-txn", 7)]) == {
            ("raw-txn", 0): OPERATION_NOT_ATTEMPTED, ("raw-txn", 7): UNKNOWN_TOPIC_OR_PARTITION}
        assert _add_partitions_errors(s, "raw-txn-1", pid, epoch, [("raw-txn", 0)]) == {("raw-txn", 0): 0}
        assert _produce_error(s, "raw-txn", pid, epoch, 0, "raw-txn-1") == 0
        # a second InitProducerId fences the first epoch (and aborts its open transaction)
        err, pid2, epoch2 = _init_producer_id(s, "raw-txn-1")
        assert (err, pid2, epoch2) == (0, pid, epoch + 2)
        assert _add_partitions_errors(s, "raw-txn-1", pid, epoch, [("raw-txn", 1)]) == {
            ("raw-txn", 1): INVALID_PRODUCER_EPOCH}            # v0-1: no PRODUCER_FENCED yet
        assert _add_partitions_errors(s, "raw-txn-1", pid + 1, epoch2, [("raw-txn", 1)]) == {
            ("raw-txn", 1): INVALID_PRODUCER_ID_MAPPING}
        assert _produce_error(s, "raw-txn", pid, epoch, 1, "raw-txn-1") == INVALID_PRODUCER_EPOCH
    assert _read(broker, "raw-txn", "read_committed") == []
    assert _read(broker, "raw-txn", "read_uncommitted") == [b"raw"]


def _init_producer_id_flexible(sock: socket.socket, version: int, tid: str | None, producer_id: int,
                               producer_epoch: int) -> tuple[int, int, int]:
    """InitProducerId v3+ (flexible: request header v2, response header v1) with KIP-360's
    expected producer id and epoch."""
    tid_bytes = b"\x00" if tid is None else bytes([len(tid.encode()) + 1]) + tid.encode()
    body = tid_bytes + struct.pack(">iqh", 60000, producer_id, producer_epoch) + b"\x00"
    req = struct.pack(">hhi", 22, version, 1) + _string("raw") + b"\x00" + body
    sock.sendall(struct.pack(">i", len(req)) + req)
    resp = recv_frame(sock)
    assert resp is not None
    err, pid, epoch = struct.unpack_from(">hqh", resp, 4 + 1 + 4)   # correlation id, tags, throttle
    return err, pid, epoch


def test_init_producer_id_kip_360(broker: BrokerProcess) -> None:
    """A producer re-initializing itself with its id and epoch (KIP-360) as Kafka's
    TransactionCoordinator answers it: its epoch is bumped, a retry whose answer was lost gets the
    same id and epoch again, a producer fenced by a newer one stays fenced, and an id and epoch
    for a transactional id the coordinator does not know get a new producer id."""
    invalid_request, producer_fenced = 42, 90
    _create(broker, "raw-kip")
    with connect(broker.port) as s:
        err, pid, epoch = _init_producer_id_flexible(s, 4, "kip360", -1, -1)
        assert (err, epoch) == (0, 0) and pid >= 0
        assert _init_producer_id_flexible(s, 4, "kip360", pid, 0) == (0, pid, 1)
        assert _init_producer_id_flexible(s, 4, "kip360", pid, 0) == (0, pid, 1)      # the retry
        assert _init_producer_id_flexible(s, 4, "kip360", pid, 1) == (0, pid, 2)
        # a new producer with this transactional.id takes over; the old one is fenced for good
        assert _init_producer_id_flexible(s, 4, "kip360", -1, -1) == (0, pid, 3)
        assert _init_producer_id_flexible(s, 4, "kip360", pid, 2)[0] == producer_fenced
        assert _init_producer_id_flexible(s, 3, "kip360", pid, 2)[0] == INVALID_PRODUCER_EPOCH
        assert _init_producer_id_flexible(s, 4, "kip360", pid + 1000, 3)[0] == producer_fenced
        # one of the two without the other
        assert _init_producer_id_flexible(s, 4, "kip360", pid, -1)[0] == invalid_request
        assert _init_producer_id_flexible(s, 4, "kip360", -1, 3)[0] == invalid_request
        # unknown to the coordinator: a new producer id, whatever the producer remembers
        err, pid2, epoch2 = _init_producer_id_flexible(s, 4, "kip360-new", pid, 7)
        assert (err, epoch2) == (0, 0) and pid2 not in (-1, pid)
        # an open transaction is aborted when its producer asks itself; with transaction.version 2
        # that abort's bump is the producer's new epoch (as Kafka 4.4: test_transactions_v2.py)
        assert _add_partitions_errors(s, "kip360-new", pid2, 0, [("raw-kip", 0)]) == {("raw-kip", 0): 0}
        assert _produce_error(s, "raw-kip", pid2, 0, 0, "kip360-new") == 0
        assert _init_producer_id_flexible(s, 4, "kip360-new", pid2, 0) == (0, pid2, 1)
        assert _init_producer_id_flexible(s, 4, "kip360-new", -1, -1) == (0, pid2, 2)
    assert _read(broker, "raw-kip", "read_committed") == []
    assert _read(broker, "raw-kip", "read_uncommitted") == [b"raw"]
